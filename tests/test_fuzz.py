"""Fuzz suite: one hostile node against every registered method (cases in fuzz_cases.py).

Beyond the conformance suite's structural faults, these are the faults that pass a shape check:
finite extremes, weights, auxiliary fields, step counts, monotone counters, hello answers and
evaluation replies. For a train reply the strongest check is used: after the hostile round the
server's state must equal the state after the same round in which that node sent an error reply
(nothing of the hostile reply survives), and the next honest round must accept every reply.
"""

from __future__ import annotations

import copy
import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from conformance_kit import NUM_NODES, assert_same_state, build
from flwr.app import RecordDict
from fuzz_cases import EVAL_CASES, HELLO_CASES, TRAIN_CASES, hello_value, table

from bouquet.apps.local_grid import LocalGrid
from bouquet.apps.registry import methods
from bouquet.clients import fedkseed as fedkseed_client
from bouquet.strategies.base import BouquetStrategy, NodeReply
from bouquet.wire.validation import InvalidReply

METHODS = sorted(methods())
ROGUE = 1
DOCS = Path(__file__).resolve().parent.parent / "docs" / "reliability.md"


def _snapshot(grid: LocalGrid, strategy: BouquetStrategy) -> tuple[Any, Any]:
    return copy.deepcopy(strategy.state_dict()), copy.deepcopy(grid.contexts)


def _restore(grid: LocalGrid, strategy: BouquetStrategy, snap: tuple[Any, Any]) -> None:
    strategy.load_state_dict(copy.deepcopy(snap[0]))
    grid.contexts = copy.deepcopy(snap[1])
    grid.corrupt.clear()
    grid.fail.clear()
    fedkseed_client.clear_cache()  # a per-process replica would replay from another history


def _assert_close_state(a: Any, b: Any, path: str) -> None:
    if isinstance(a, dict):
        assert set(map(str, a)) == set(map(str, b)), path
        bm = {str(k): x for k, x in b.items()}
        for k, x in a.items():
            _assert_close_state(x, bm[str(k)], f"{path}/{k}")
    elif isinstance(a, np.ndarray | list) and np.asarray(a).dtype.kind == "f":
        np.testing.assert_allclose(np.asarray(b), np.asarray(a), rtol=5e-3, atol=1e-4,
                                   err_msg=path)
    else:
        assert_same_state(a, b, path)


def _run_train_cases(name: str, tmp_path: Path, **over: Any) -> list[str]:
    grid, strategy = build(name, tmp_path, **{"fraction-train": 1.0, **over})
    strategy.train_round(grid, 1)
    snap = _snapshot(grid, strategy)
    _restore(grid, strategy, snap)  # every run below starts from the same restored state
    grid.fail.add(ROGUE)
    baseline = strategy.train_round(grid, 2)
    assert baseline.errors == 1 and baseline.clients == NUM_NODES - 1, baseline.failures
    after_error = copy.deepcopy(strategy.state_dict())
    applied = []
    for case in TRAIN_CASES:
        _restore(grid, strategy, snap)
        hit: dict[str, bool] = {}

        def corrupt(content: RecordDict, case: Any = case, hit: dict[str, bool] = hit
                    ) -> RecordDict:
            bad = case.edit(content)
            hit["applies"] = bad is not None
            return bad if bad is not None else content

        grid.corrupt[ROGUE] = corrupt
        rlog = strategy.train_round(grid, 2)
        if not hit.get("applies"):
            continue
        applied.append(case.name)
        assert rlog.rejected == 1, f"{case.name}: not rejected ({rlog.failures})"
        assert rlog.clients == NUM_NODES - 1, f"{case.name}: {rlog.failures}"
        assert [f["partition_id"] for f in rlog.failures] == [ROGUE], case.name
        if name.startswith("fedkseed"):
            # One replica per process serves every node, so honest replies depend (within fp32
            # round-off) on which node used it last: equal up to that, not bit for bit.
            _assert_close_state(after_error, strategy.state_dict(), case.name)
        else:
            assert_same_state(after_error, strategy.state_dict(), case.name)
        grid.corrupt.clear()
        follow = strategy.train_round(grid, 3)
        assert follow.failures == [] and follow.clients == NUM_NODES, (case.name, follow.failures)
    return applied


@pytest.mark.parametrize("name", METHODS)
def test_hostile_train_reply_leaves_no_trace(name: str, tmp_path: Path) -> None:
    applied = _run_train_cases(name, tmp_path)
    # the finite-extreme, weight and auxiliary cases apply to every method holding arrays
    assert {"aux-nan", "aux-list"} <= set(applied), applied


def test_hostile_epsilon_is_rejected_and_does_not_lock_out(tmp_path: Path) -> None:
    applied = _run_train_cases("ffa-lora", tmp_path, **{"dp.enabled": True,
                                                        "dp.noise-multiplier": 1.0})
    assert "epsilon-1e300" in applied


def test_rogue_steps_apply_to_every_scaffold_method(tmp_path: Path) -> None:
    for name in ("scaffold-1up", "scallion", "scafcom"):
        assert "steps-2^40" in _run_train_cases(name, tmp_path / name), name


# ----------------------------------------------------------------------------- hello
@pytest.mark.parametrize("name", METHODS)
def test_hostile_hello_is_refused_and_named(name: str, tmp_path: Path) -> None:
    for case in HELLO_CASES:
        grid, strategy = build(name, tmp_path / case.name, **{"fraction-train": 1.0})
        grid.corrupt_query[ROGUE] = lambda c, case=case: case.edit(c) or c
        by_pid = strategy.discover(grid)
        assert 1000 + ROGUE not in by_pid.values(), case.name
        assert len(by_pid) == NUM_NODES - 1, (case.name, by_pid)
        assert list(strategy.node_errors.latest) == [1000 + ROGUE], case.name
        assert "refused" in strategy.node_errors.latest[1000 + ROGUE][1], case.name
    # the run goes on, and the refusal is reported in the round's failures
    rlog = strategy.train_round(grid, 1)
    assert rlog.clients == NUM_NODES - 1
    assert any(f["kind"] == "errors" and f["node_id"] == 1000 + ROGUE
               and "hello query: answer refused" in f["reason"] for f in rlog.failures)


def test_a_restarted_node_takes_over_its_partition_once_the_old_one_is_gone(
        tmp_path: Path) -> None:
    grid, strategy = build("fedavg", tmp_path, **{"fraction-train": 1.0})
    strategy.discover(grid)
    ctx = grid.contexts.pop(1000 + ROGUE)
    grid.contexts[2000] = ctx  # same partition, new node id (a SuperNode restarted)
    by_pid = strategy.discover(grid)
    assert by_pid[ROGUE] == 2000 and strategy.node_errors.latest == {}


def test_a_huge_declared_size_is_clipped(tmp_path: Path) -> None:
    grid, strategy = build("fedavg", tmp_path, **{"fraction-train": 1.0})
    grid.corrupt_query[ROGUE] = hello_value("num-examples", 2**31 - 1)
    strategy.discover(grid)
    honest = [strategy.sizes[p] for p in range(NUM_NODES) if p != ROGUE]
    assert strategy.sizes[ROGUE] == 2**31 - 1
    assert strategy.declared_size(ROGUE) == int(10 * np.median([*honest, 2**31 - 1]))
    assert strategy.declared_size(ROGUE) <= 10 * max(honest)


def test_weight_above_the_declared_size_is_a_lie(tmp_path: Path) -> None:
    grid, strategy = build("fedavg", tmp_path, **{"fraction-train": 1.0})
    strategy.discover(grid)
    declared = strategy.sizes[ROGUE]
    grid.corrupt[ROGUE] = lambda c: (_set_weight(c, declared + 1))
    rlog = strategy.train_round(grid, 1)
    assert rlog.rejected == 1 and "declared" in rlog.failures[0]["reason"]


def _set_weight(content: RecordDict, n: int) -> RecordDict:
    content["metrics"]["num-examples"] = n  # type: ignore[index]
    return content


# ----------------------------------------------------------------------------- evaluation
@pytest.mark.parametrize("name", METHODS)
def test_hostile_evaluation_reply_is_rejected(name: str, tmp_path: Path) -> None:
    grid, strategy = build(name, tmp_path, **{"fraction-train": 1.0})
    strategy.train_round(grid, 1)
    honest = strategy.evaluate_round(grid, 1)
    if honest.clients == 0 or not honest.metrics:
        pytest.skip("no federated evaluation for this method")
    assert honest.failures == []
    for case in EVAL_CASES:
        grid.corrupt_eval[ROGUE] = lambda c, case=case: case.edit(c) or c
        elog = strategy.evaluate_round(grid, 1)
        assert elog.rejected == 1 and elog.failures[0]["partition_id"] == ROGUE, case.name
        assert all(math.isfinite(x) for x in elog.metrics.values()), case.name
        if "accuracy" in elog.metrics:
            assert 0.0 <= elog.metrics["accuracy"] <= 1.0


# ----------------------------------------------------------------------------- aggregation
class _Exploding(Exception):
    pass


@pytest.mark.parametrize("fault", ["raises", "non-finite"])
def test_a_failing_aggregation_is_undone_and_the_run_goes_on(fault: str, tmp_path: Path,
                                                             monkeypatch: pytest.MonkeyPatch
                                                             ) -> None:
    grid, strategy = build("fedavg", tmp_path, **{"fraction-train": 1.0})
    strategy.train_round(grid, 1)
    before = copy.deepcopy(strategy.state_dict())
    original = type(strategy).aggregate_round

    def broken(self: Any, rnd: int, replies: list[NodeReply]) -> dict[str, float]:
        if fault == "raises":
            raise InvalidReply("train_loss: expected a scalar")
        out = original(self, rnd, replies)
        self.weights = {k: np.full_like(a, np.inf) for k, a in self.weights.items()}
        return out

    monkeypatch.setattr(type(strategy), "aggregate_round", broken)
    rlog = strategy.train_round(grid, 2)
    assert rlog.clients == 0 and rlog.rejected == NUM_NODES
    assert_same_state(before, strategy.state_dict())
    monkeypatch.setattr(type(strategy), "aggregate_round", original)
    assert strategy.train_round(grid, 3).clients == NUM_NODES


# ----------------------------------------------------------------------------- docs
def test_reliability_doc_shows_the_suite_table() -> None:
    assert table() in DOCS.read_text(), (
        "docs/reliability.md is out of date: paste the output of `python tests/fuzz_cases.py`")


# ----------------------------------------------------------------------------- bandits
@pytest.mark.parametrize("name", ["fedlinucb", "dp-fedlinucb-ldp"])
def test_an_indefinite_gram_within_entry_bounds_is_rejected(name: str, tmp_path: Path) -> None:
    from bouquet.strategies.linucb import TAIL

    grid, strategy = build(name, tmp_path, **{"fraction-train": 1.0})
    strategy.train_round(grid, 1)
    proto = strategy.protocol()  # type: ignore[attr-defined]
    d = strategy.dim  # type: ignore[attr-defined]
    entry_bound = proto.window_users(2) * proto.feature_bound**2 + TAIL * proto.sigma
    eig_slack = proto.sigma * (2 * np.sqrt(d) + TAIL)
    if eig_slack >= 0.9 * entry_bound:
        pytest.skip("noise too large for an in-bounds indefinite matrix")
    c = 0.95 * entry_bound  # zero diagonal, constant off-diagonal: eigenvalue -c
    bad_gram = c * (np.ones((d, d)) - np.eye(d))

    def corrupt(content: RecordDict) -> RecordDict:
        from flwr.app import Array, ArrayRecord
        node = content["node"]
        assert isinstance(node, ArrayRecord)
        content["node"] = ArrayRecord({"gram": Array(bad_gram), "vec": node["vec"]})
        return content

    grid.corrupt[ROGUE] = corrupt
    rlog = strategy.train_round(grid, 2)
    assert rlog.rejected == 1 and "eigenvalue" in rlog.failures[0]["reason"], rlog.failures


# ----------------------------------------------------------------------------- initial model
def _init_grid(tmp_path: Path) -> LocalGrid:
    from conformance_kit import method_config
    return LocalGrid(NUM_NODES, method_config("fedavg", tmp_path))


def test_one_hostile_node_cannot_choose_the_initial_model(tmp_path: Path) -> None:
    from bouquet.apps.faults import apply_fault, scaled
    from bouquet.strategies.base import initial_arrays_from_nodes

    grid = _init_grid(tmp_path)
    honest = initial_arrays_from_nodes(grid, timeout=30, deadline=5)
    assert honest is not None
    grid.corrupt_query[0] = lambda c: apply_fault(scaled(1e4, every=True), c)
    chosen = initial_arrays_from_nodes(grid, timeout=30, deadline=5)
    assert chosen is not None
    for k in honest.keys():
        np.testing.assert_array_equal(chosen[k].numpy(), honest[k].numpy())


def test_no_majority_on_the_initial_model_stops_the_run(tmp_path: Path) -> None:
    from bouquet.apps.faults import apply_fault, scaled
    from bouquet.strategies.base import initial_arrays_from_nodes

    grid = _init_grid(tmp_path)
    grid.corrupt_query[0] = lambda c: apply_fault(scaled(2.0, every=True), c)
    grid.corrupt_query[1] = lambda c: apply_fault(scaled(3.0, every=True), c)
    with pytest.raises(RuntimeError, match="disagree"):
        initial_arrays_from_nodes(grid, timeout=30, deadline=5)


def test_steps_of_a_node_declaring_a_huge_data_set_are_clipped(tmp_path: Path) -> None:
    grid, strategy = build("scafcom", tmp_path, **{"fraction-train": 1.0, "local-steps": 0,
                                                   "local-epochs": 1})
    grid.corrupt_query[ROGUE] = hello_value("num-examples", 2**31 - 1)
    grid.corrupt[ROGUE] = lambda c: _set_metric(c, "local-steps", 10**6)
    rlog = strategy.train_round(grid, 1)
    assert rlog.clients == NUM_NODES, rlog.failures  # within what it declared: accepted...
    rogue = NodeReply(1000 + ROGUE, ROGUE, grid.corrupt[ROGUE](_honest_reply(grid)), 0, 0)
    k = strategy.steps([rogue])[0]  # type: ignore[attr-defined]
    assert k == strategy.max_local_steps(ROGUE, clipped=True) < 10**6  # ...but K_i is clipped


def _set_metric(content: RecordDict, key: str, value: int) -> RecordDict:
    content["metrics"][key] = value  # type: ignore[index]
    return content


def _honest_reply(grid: LocalGrid) -> RecordDict:
    from flwr.app import MetricRecord
    return RecordDict({"metrics": MetricRecord({"local-steps": 1, "num-examples": 1})})
