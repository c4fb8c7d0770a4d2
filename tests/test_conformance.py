"""The conformance suite: every registered method must pass every test here.

A method joins by registering (a built-in declaration, or a third-party package's entry point
``bouquet.methods``); its ``test_task`` and ``test_config`` keep the runs small. See docs/architecture.md.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conformance_kit import (
    CORRUPTIONS,
    NUM_NODES,
    assert_same_state,
    build,
    method_config,
)
from flwr.serverapp.strategy import Result

from bouquet.apps.local_grid import LocalGrid
from bouquet.apps.registry import get_method, load_object, methods
from bouquet.apps.runner import execute
from bouquet.strategies.checkpoint import load_checkpoint, save_checkpoint

METHODS = sorted(methods())


@pytest.mark.parametrize("name", METHODS)
def test_valid_round_uses_every_reply(name: str, tmp_path: Path) -> None:
    grid, strategy = build(name, tmp_path, **{"fraction-train": 1.0})
    rlog = strategy.train_round(grid, 1)
    assert rlog.failures == []
    assert rlog.clients == NUM_NODES
    assert rlog.up_bytes > 0 and rlog.down_bytes > 0
    assert not [k for k in rlog.metrics if k.startswith("train_train_")]  # one naming rule


@pytest.mark.parametrize("name", METHODS)
def test_flower_start_runs_the_method(name: str, tmp_path: Path) -> None:
    """Flower's own start() runs every method and returns Flower's Result."""
    grid, strategy = build(name, tmp_path, **{"fraction-train": 1.0})
    result = strategy.start(grid=grid, num_rounds=2, timeout=60)
    assert isinstance(result, Result)
    assert sorted(result.train_metrics_clientapp) == [1, 2]
    for rec in result.train_metrics_clientapp.values():
        assert rec["clients"] == NUM_NODES and rec["rejected"] == rec["errors"] == 0
        assert not [k for k in rec if k.startswith("train_train_")]
    for rec in result.evaluate_metrics_clientapp.values():
        assert rec["errors"] == 0 and rec["rejected"] == 0


@pytest.mark.parametrize("kind", sorted(CORRUPTIONS))
@pytest.mark.parametrize("name", METHODS)
def test_malformed_reply_is_rejected_and_counted(name: str, kind: str, tmp_path: Path) -> None:
    grid, strategy = build(name, tmp_path, **{"fraction-train": 1.0})
    strategy.train_round(grid, 1)
    grid.corrupt[1] = CORRUPTIONS[kind]
    try:
        rlog = strategy.train_round(grid, 2)
    except AssertionError as exc:  # the reply has nothing this corruption applies to
        pytest.skip(str(exc))
    assert rlog.rejected == 1, rlog.failures
    assert rlog.clients == NUM_NODES - 1
    assert rlog.failures[0]["partition_id"] == 1


@pytest.mark.parametrize("name", [m for m in METHODS if get_method(m).bad_replies])
def test_method_specific_bad_replies_are_rejected(name: str, tmp_path: Path) -> None:
    grid, strategy = build(name, tmp_path, **{"fraction-train": 1.0})
    strategy.train_round(grid, 1)
    make_bad = load_object(get_method(name).bad_replies)
    captured: dict[str, object] = {}

    def capture(content):  # type: ignore[no-untyped-def]
        captured["content"] = content
        return content

    grid.corrupt[1] = capture
    strategy.train_round(grid, 2)
    cases = make_bad(captured["content"])
    assert cases, "bad_replies returned no cases"
    for rnd, (label, bad) in enumerate(cases, start=3):
        grid.corrupt[1] = lambda _c, bad=bad: bad
        rlog = strategy.train_round(grid, rnd)
        assert rlog.rejected == 1, f"{label}: not rejected ({rlog.failures})"
        assert rlog.clients == NUM_NODES - 1, label


@pytest.mark.parametrize("fault", ["error", "missing"])
@pytest.mark.parametrize("name", METHODS)
def test_error_and_missing_replies_are_counted(name: str, fault: str, tmp_path: Path) -> None:
    grid, strategy = build(name, tmp_path, **{"fraction-train": 1.0, "round-timeout": 1.0})
    strategy.train_round(grid, 1)
    (grid.fail if fault == "error" else grid.drop).add(2)
    rlog = strategy.train_round(grid, 2)
    counted = rlog.errors if fault == "error" else rlog.missing
    assert counted == 1, rlog.failures
    assert rlog.clients == NUM_NODES - 1
    assert rlog.failures[0]["partition_id"] == 2


@pytest.mark.parametrize("fault", ["error", "wrong-shape"])
@pytest.mark.parametrize("name", METHODS)
def test_no_usable_reply_keeps_the_state(name: str, fault: str, tmp_path: Path) -> None:
    grid, strategy = build(name, tmp_path, **{"fraction-train": 1.0})
    strategy.train_round(grid, 1)
    before = strategy.state_dict()
    for pid in range(NUM_NODES):
        if fault == "error":
            grid.fail.add(pid)
        else:
            grid.corrupt[pid] = CORRUPTIONS["wrong-shape"]
    try:
        rlog = strategy.train_round(grid, 2)
    except AssertionError as exc:  # the replies have no array to reshape
        pytest.skip(str(exc))
    assert rlog.clients == 0
    # A privacy ledger counts the syncs asked (a rejected noisy node was still seen), so it may
    # advance; everything else stays as it was.
    after = strategy.state_dict()
    for state in (before, after):
        state.pop("rounds_done", None)
    assert_same_state(before, after)


def _metrics_without_wall(path: Path) -> list[dict[str, object]]:
    lines = [json.loads(x) for x in path.read_text().splitlines()]
    for line in lines:
        line.pop("wall_s")
    return lines


@pytest.mark.parametrize("name", METHODS)
def test_same_seed_same_metrics(name: str, tmp_path: Path) -> None:
    runs = []
    for tag in ("a", "b"):
        grid = LocalGrid(NUM_NODES, method_config(name, tmp_path, **{"run-name": tag}))
        summary = execute(grid, grid.run_config)
        runs.append(_metrics_without_wall(summary.parent / "metrics.jsonl"))
    assert runs[0] == runs[1]
    assert len(runs[0]) == 2


@pytest.mark.parametrize("name", METHODS)
def test_state_checkpoint_round_trip_and_resume(name: str, tmp_path: Path) -> None:
    # Uninterrupted: two rounds.
    grid_a, strat_a = build(name, tmp_path)
    strat_a.train_round(grid_a, 1)
    log_a = strat_a.train_round(grid_a, 2)

    # Interrupted: one round, checkpoint, a fresh strategy restored from disk, round two.
    grid_b, strat_b = build(name, tmp_path)
    strat_b.train_round(grid_b, 1)
    save_checkpoint(tmp_path / "ckpt", 1, strat_b.state_dict())
    done, state, _ = load_checkpoint(tmp_path / "ckpt")
    assert done == 1
    assert_same_state(strat_b.state_dict(), state)
    _, restored = build(name, tmp_path, grid=grid_b)
    restored.load_state_dict(state)
    assert_same_state(strat_b.state_dict(), restored.state_dict())
    log_b = restored.train_round(grid_b, 2)

    assert log_a.metrics == log_b.metrics
    assert (log_a.up_bytes, log_a.down_bytes) == (log_b.up_bytes, log_b.down_bytes)
    assert_same_state(strat_a.state_dict(), restored.state_dict())
