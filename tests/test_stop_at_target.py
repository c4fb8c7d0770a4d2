"""``stop-at-target``: a run ends at its target accuracy, stays finished on resume and reuse."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from bouquet.apps import bench
from bouquet.apps.bench import BenchRun, run_suite
from bouquet.apps.cli import main
from bouquet.apps.config import ConfigError
from bouquet.apps.local_grid import LocalGrid
from bouquet.apps.recorder import CHECKPOINT_DIR
from bouquet.apps.results import read_metrics
from bouquet.apps.runner import execute
from bouquet.apps.target_stop import STOP_KEY
from bouquet.strategies.checkpoint import load_checkpoint
from bouquet.strategies.rounds import StopRun, run_rounds

#: digits-mlp (chance 0.1) with 10 local steps: about 0.5 after round 2 of 4.
TARGET = 0.4
ROUNDS = 4


def config(tmp_path: Path, name: str, **extra: Any) -> dict[str, Any]:
    return {"method": "fedavg", "task": "digits-mlp", "local-steps": 10, "num-server-rounds": ROUNDS,
            "target-accuracy": TARGET, "results-dir": str(tmp_path), "run-name": name,
            "plots": False, **extra}


def run(tmp_path: Path, name: str, **extra: Any) -> dict[str, Any]:
    grid = LocalGrid(3, config(tmp_path, name, **extra))
    return dict(json.loads(execute(grid, grid.run_config).read_text()))


def rows(run_dir: Path) -> list[dict[str, Any]]:
    return [{k: v for k, v in r.items() if k != "wall_s"} for r in read_metrics(run_dir)]


def test_a_run_stops_after_the_round_that_reaches_the_target(tmp_path: Path) -> None:
    stopped = run(tmp_path, "stop", **{"stop-at-target": True})
    full = run(tmp_path, "full")
    reached = full["target"]["round"]
    assert reached is not None and reached < ROUNDS  # else this test shows nothing
    assert stopped[STOP_KEY] == {"round": reached, "accuracy": rows(tmp_path / "full")[
        reached - 1]["accuracy"], "target_accuracy": TARGET, "num_server_rounds": ROUNDS}
    assert stopped["rounds"] == reached and len(rows(tmp_path / "stop")) == reached
    assert rows(tmp_path / "stop") == rows(tmp_path / "full")[:reached]
    assert stopped["target"] == {**full["target"], "wall_s": stopped["target"]["wall_s"]}
    assert load_checkpoint(tmp_path / "stop" / CHECKPOINT_DIR)[0] == reached


def test_with_the_key_off_every_round_runs_as_before(tmp_path: Path) -> None:
    off = run(tmp_path, "off", **{"stop-at-target": False})
    unset = run(tmp_path, "unset")
    assert off["rounds"] == unset["rounds"] == ROUNDS
    assert STOP_KEY not in off and STOP_KEY not in unset
    assert rows(tmp_path / "off") == rows(tmp_path / "unset")


def test_stop_at_target_needs_a_target(tmp_path: Path) -> None:
    grid = LocalGrid(3, config(tmp_path, "none", **{"stop-at-target": True,
                                                    "target-accuracy": 0.0}))
    with pytest.raises(ConfigError, match="stop-at-target: set target-accuracy"):
        execute(grid, grid.run_config)


def cli_run(tmp_path: Path, *extra: str) -> int:
    return main(["run", "--engine", "inprocess", "--clients", "3", *extra])


def test_resuming_a_stopped_run_says_it_is_finished(tmp_path: Path,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    run_dir = tmp_path / "r"
    assert cli_run(tmp_path, "fedavg", "--rounds", str(ROUNDS), "--results-dir", str(tmp_path),
                   "--set", "run-name=r", "--set", "task=digits-mlp", "--set", "local-steps=10",
                   "--set", f"target-accuracy={TARGET}", "--set", "stop-at-target=true") == 0
    summary = (run_dir / "summary.json").read_bytes()
    metrics = (run_dir / "metrics.jsonl").read_bytes()
    done = json.loads(summary)[STOP_KEY]["round"]
    assert done < ROUNDS
    capsys.readouterr()
    assert cli_run(tmp_path, "--resume", str(run_dir)) == 0
    err = capsys.readouterr().err
    assert "is finished" in err and "nothing to resume" in err
    assert (run_dir / "summary.json").read_bytes() == summary
    assert (run_dir / "metrics.jsonl").read_bytes() == metrics
    # Flower's path (resume-from on the ServerApp) says the same and runs no round either
    grid = LocalGrid(3, config(tmp_path, "r", **{"stop-at-target": True,
                                                  "resume-from": str(run_dir)}))
    assert execute(grid, grid.run_config) == run_dir / "summary.json"
    assert "is finished" in capsys.readouterr().out
    assert (run_dir / "metrics.jsonl").read_bytes() == metrics
    # with the key off the run continues to num-server-rounds
    assert cli_run(tmp_path, "--resume", str(run_dir), "--set", "stop-at-target=false") == 0
    after = json.loads((run_dir / "summary.json").read_text())
    assert after["rounds"] == ROUNDS and STOP_KEY not in after


def test_a_run_killed_before_its_summary_is_finished_on_resume(tmp_path: Path) -> None:
    """The checkpoint of the round that reached the target is there; summary.json is not."""
    first = run(tmp_path, "k", **{"stop-at-target": True})
    (tmp_path / "k" / "summary.json").unlink()
    again = run(tmp_path, "k", **{"stop-at-target": True, "resume-from": str(tmp_path / "k")})
    assert again[STOP_KEY] == first[STOP_KEY] and again["rounds"] == first["rounds"]


#: A one-run suite that stops at its target.
SUITE = f'''
from bouquet.apps.bench import BenchRun

def runs(quick):
    return [BenchRun(name="stop-s0", clients=3, config={{
        "method": "fedavg", "task": "digits-mlp", "local-steps": 10, "num-server-rounds": {ROUNDS},
        "target-accuracy": {TARGET}, "stop-at-target": True, "seed": 0}})]
'''


def test_bench_reuse_reads_a_stopped_run_back(tmp_path: Path,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "benchmarks").mkdir()
    (tmp_path / "benchmarks" / "stopping.py").write_text(SUITE)
    monkeypatch.chdir(tmp_path)
    out = tmp_path / "out"
    run_suite("stopping", out, quick=True)
    summary = (out / "stop-s0" / "summary.json").read_bytes()
    assert json.loads(summary)["rounds"] < ROUNDS
    run = bench.load_suite("stopping").runs(True)[0]
    assert bench.earlier_run(run, out) == "reuse"
    calls: list[BenchRun] = []
    monkeypatch.setattr(bench, "run_inprocess", lambda r, o: calls.append(r) or o)
    run_suite("stopping", out, quick=True, reuse=True)
    assert calls == [] and (out / "stop-s0" / "summary.json").read_bytes() == summary


class FakeGrid:
    """No node: run_rounds on a strategy stub sends nothing."""

    def send_and_receive(self, messages: Any, timeout: float) -> list[Any]:
        return []


def test_stop_run_ends_the_loop_after_every_callback_heard_the_round() -> None:
    from flwr.app import MessageType

    from bouquet.strategies.round_log import RoundLog

    class Stub:
        last_log: dict[Any, Any] = {}

        def ensure_model(self, arrays: Any) -> None: ...
        def global_arrays(self) -> None: ...
        def summary(self) -> None: ...
        def configure_train(self, *a: Any) -> list[Any]:
            self.last_log[MessageType.TRAIN] = RoundLog(round=a[0])
            return []
        def aggregate_train(self, *a: Any) -> tuple[None, None]:
            return None, None
        def configure_evaluate(self, *a: Any) -> list[Any]:
            return []
        def aggregate_evaluate(self, *a: Any) -> None: ...
        def observe_evaluation(self, *a: Any) -> None: ...

    heard: list[tuple[str, int]] = []

    def stopper(strategy: Any, report: Any) -> None:
        heard.append(("stopper", report.round))
        if report.round == 2:
            raise StopRun("enough")

    def after(strategy: Any, report: Any) -> None:
        heard.append(("after", report.round))

    run_rounds(Stub(), FakeGrid(), None, 5, 1.0, None, None, None,  # type: ignore[arg-type]
               callbacks=[stopper, after])
    assert heard == [("stopper", 1), ("after", 1), ("stopper", 2), ("after", 2)]
