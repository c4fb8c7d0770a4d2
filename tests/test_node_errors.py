"""No node error is swallowed: hello, initial-model and evaluation errors reach the log and failures."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from flwr.app import Context, Message, MessageType

from bouquet.apps.client_app import app as client_app
from bouquet.apps.config import resolve
from bouquet.apps.local_grid import LocalGrid
from bouquet.apps.runner import build_strategy, execute, initial_arrays, load_server_task
from bouquet.strategies.base import NotEnoughNodes
from bouquet.strategies.node_errors import error_text
from bouquet.wire.actions import HELLO_ACTION, INIT_ACTION

MISSING = "digits-mlp needs the frobnicator data (frob==1.0), which is not installed: pip install frob==1.0"


def failing_app(nodes: set[int], when: Callable[[Message], bool]) -> Callable[[Message, Context], Message]:
    """The real ClientApp, except that ``nodes`` raise ImportError(MISSING) on messages ``when`` picks."""

    def app(msg: Message, context: Context) -> Message:
        if context.node_id in nodes and when(msg):
            raise ImportError(MISSING)
        return client_app(msg, context)

    return app


def action_is(action: str) -> Callable[[Message], bool]:
    def pick(msg: Message) -> bool:
        cfg = msg.content["config"] if "config" in msg.content else {}
        return msg.metadata.message_type.startswith("query") and cfg.get("action") == action

    return pick


def grid_for(tmp_path: Path, n: int, app: Any, **over: object) -> LocalGrid:
    return LocalGrid(n, {"method": "fedavg", "results-dir": str(tmp_path), "local-steps": 1,
                         "sample-deadline": 0.3, "run-name": "r", **over}, client=app)


def test_flower_error_reasons_read_as_exception_and_message() -> None:
    assert error_text("<class 'ImportError'>:<'x needs y: pip install y'>") == \
        "ImportError: x needs y: pip install y"
    assert error_text("<class 'flwr.common.SomeError'>:<'boom'>") == "SomeError: boom"
    assert error_text("plain text") == "plain text"

    # a real reason from Flower's Ray backend (simulation), captured with flwr 1.42 / ray
    ray = ("<class 'ray.exceptions.RayTaskError(ClientAppException)'>:<'\x1b[36mray::A.run()\x1b[39m "
           "(pid=18984, ip=192.0.2.2)\n\nThe above exception was the direct cause of the following "
           "exception:\n\n  File \"<stdin>\", line 10, in run\nflwr.clientapp.client_app."
           "ClientAppException: \nException ClientAppException occurred. Message: rt-minilm needs X "
           "(x==1), which is not installed: pip install x==1'>")
    assert error_text(ray) == "rt-minilm needs X (x==1), which is not installed: pip install x==1"


def test_all_nodes_failing_hello_stop_with_their_error(tmp_path: Path) -> None:
    grid = grid_for(tmp_path, 3, failing_app({1000, 1001, 1002}, action_is(HELLO_ACTION)),
                    **{"min-train-nodes": 2})
    cfg = resolve(grid.run_config)
    strat = build_strategy(cfg, initial_arrays(cfg, load_server_task(cfg), grid))
    with pytest.raises(NotEnoughNodes) as info:
        strat.round_nodes(grid, 1)  # the runner's discovery ("sampled") asks the round's nodes
    text = str(info.value)
    assert "min-train-nodes is 2" in text
    assert f"3 of 3 node(s) failed the hello query: ImportError: {MISSING}" in text
    assert sorted(f["node_id"] for f in info.value.failures) == [1000, 1001, 1002]
    assert all("pip install frob==1.0" in f["reason"] for f in info.value.failures)


def test_one_node_failing_hello_is_in_the_round_failures(tmp_path: Path) -> None:
    grid = grid_for(tmp_path, 3, failing_app({1001}, action_is(HELLO_ACTION)))
    cfg = resolve(grid.run_config)
    strat = build_strategy(cfg, initial_arrays(cfg, load_server_task(cfg), grid))
    rlog = strat.train_round(grid, 1)
    assert rlog.clients == 2 and rlog.errors == 1
    (fail,) = rlog.failures
    assert fail["node_id"] == 1001 and fail["kind"] == "errors"
    assert fail["reason"] == f"hello query: ImportError: {MISSING}"
    # the node is asked again at the next discovery and fails again: one error per round
    assert strat.train_round(grid, 2).errors == 1


def test_run_stopped_by_failing_nodes_writes_their_errors(tmp_path: Path) -> None:
    grid = grid_for(tmp_path, 2, failing_app({1000, 1001}, action_is(HELLO_ACTION)),
                    **{"num-server-rounds": 2})
    with pytest.raises(NotEnoughNodes, match="2 of 2 node"):
        execute(grid, grid.run_config)
    stopped = json.loads((tmp_path / "r" / "summary.json").read_text())["stopped"]
    assert "pip install frob==1.0" in stopped["reason"]
    assert [f["node_id"] for f in stopped["failures"]] == [1000, 1001]


def test_initial_model_errors_are_quoted(tmp_path: Path) -> None:
    grid = grid_for(tmp_path, 2, failing_app({1000, 1001}, action_is(INIT_ACTION)))
    cfg = resolve(grid.run_config)
    with pytest.raises(NotEnoughNodes, match=r"2 of 2 node\(s\) failed the initial-arrays query: "
                                             r"ImportError: digits-mlp needs"):
        initial_arrays(cfg, None, grid)  # None: a server without the task's packages


def test_initial_model_comes_from_the_first_node_that_answers(tmp_path: Path) -> None:
    grid = grid_for(tmp_path, 2, failing_app({1000}, action_is(INIT_ACTION)))
    cfg = resolve(grid.run_config)
    assert initial_arrays(cfg, None, grid) is not None


def test_federated_evaluation_errors_reach_metrics(tmp_path: Path) -> None:
    def is_eval(msg: Message) -> bool:
        return msg.metadata.message_type == MessageType.EVALUATE

    grid = grid_for(tmp_path, 2, failing_app({1001}, is_eval),
                    **{"num-server-rounds": 1, "evaluation": "federated"})
    execute(grid, grid.run_config)
    (line,) = [json.loads(x) for x in (tmp_path / "r" / "metrics.jsonl").read_text().splitlines()]
    assert line["errors"] == 1 and line["failures"][0]["node_id"] == 1001
    assert "frob" in line["failures"][0]["reason"]
