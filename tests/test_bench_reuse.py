"""``run_suite(..., reuse=True)``: a suite run in parts into one folder (benchmarks in holds)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from bouquet.apps import bench
from bouquet.apps.bench import BenchRun, earlier_run, run_suite
from bouquet.apps.recorder import CHECKPOINT_DIR
from bouquet.apps.results import read_metrics
from bouquet.strategies.checkpoint import CheckpointError

#: A two-run suite on the test task; rounds, lr and node count come from the environment.
SUITE = '''
import os
from bouquet.apps.bench import BenchRun

def runs(quick):
    base = {"method": "scafcom", "task": "digits-mlp", "local-steps": 2, "fraction-train": 0.5,
            "num-server-rounds": int(os.environ.get("TINY_ROUNDS", "2")),
            "lr": float(os.environ.get("TINY_LR", "0.05"))}
    clients = int(os.environ.get("TINY_CLIENTS", "4"))
    return [BenchRun(name=f"tiny-s{s}", config={**base, "seed": s}, clients=clients)
            for s in (0, 1)]
'''


@pytest.fixture
def suite(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A folder whose benchmarks/tiny.py is the suite above (found from the cwd)."""
    (tmp_path / "benchmarks").mkdir()
    (tmp_path / "benchmarks" / "tiny.py").write_text(SUITE)
    monkeypatch.chdir(tmp_path)
    return tmp_path


def counting_runner(monkeypatch: pytest.MonkeyPatch) -> list[BenchRun]:
    """Record every run the suite hands to the in-process runner (which still runs it)."""
    calls: list[BenchRun] = []
    real = bench.run_inprocess

    def runner(run: BenchRun, out: Path) -> Path:
        calls.append(run)
        return real(run, out)

    monkeypatch.setattr(bench, "run_inprocess", runner)
    return calls


def rows(run_dir: Path) -> list[dict[str, Any]]:
    return [{k: v for k, v in r.items() if k != "wall_s"} for r in read_metrics(run_dir)]


def table_rows(path: Path) -> list[str]:
    return [line for line in path.read_text().splitlines() if line.startswith("| tiny")]


def test_finished_runs_are_read_back_not_run_again(suite: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    out = suite / "out"
    run_suite("tiny", out, quick=True, only=["tiny-s0"])
    first = json.loads((out / "tiny-s0" / "summary.json").read_text())
    calls = counting_runner(monkeypatch)
    table = run_suite("tiny", out, quick=True, reuse=True)
    assert [r.name for r in calls] == ["tiny-s1"]  # s0 was there in full
    assert json.loads((out / "tiny-s0" / "summary.json").read_text()) == first
    text = table.read_text()
    assert "2 runs (1 read back)" in text
    assert table_rows(table) and "| tiny | 2 |" in table_rows(table)[0]  # both seeds averaged
    calls.clear()
    again = run_suite("tiny", out, quick=True, reuse=True)
    assert calls == [] and table_rows(again) == table_rows(table)


def test_without_reuse_a_used_folder_is_refused(suite: Path) -> None:
    out = suite / "out"
    run_suite("tiny", out, quick=True, only=["tiny-s0"])
    with pytest.raises(ValueError, match="already holds a run"):
        run_suite("tiny", out, quick=True, only=["tiny-s0"])


def test_more_rounds_or_a_stopped_run_continue_from_the_checkpoint(
        suite: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    run_suite("tiny", suite / "short", quick=True)
    (suite / "short" / "tiny-s1" / "summary.json").unlink()  # as if killed after round 2
    monkeypatch.setenv("TINY_ROUNDS", "3")
    run_suite("tiny", suite / "long", quick=True)
    calls = counting_runner(monkeypatch)
    run_suite("tiny", suite / "short", quick=True, reuse=True)
    assert [r.config.get("resume-from") for r in calls] == [
        str(suite / "short" / f"tiny-s{s}") for s in (0, 1)]
    for s in (0, 1):
        assert len(rows(suite / "short" / f"tiny-s{s}")) == 3
        assert rows(suite / "short" / f"tiny-s{s}") == rows(suite / "long" / f"tiny-s{s}")
        summary = json.loads((suite / "short" / f"tiny-s{s}" / "summary.json").read_text())
        assert summary["rounds"] == 3


def test_a_folder_of_another_configuration_is_an_error(suite: Path,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    out = suite / "out"
    run_suite("tiny", out, quick=True, only=["tiny-s0"])
    monkeypatch.setenv("TINY_LR", "0.1")
    with pytest.raises(ValueError, match=r"another configuration: lr=0\.1 \(there: 0\.05\)"):
        run_suite("tiny", out, quick=True, reuse=True)
    monkeypatch.delenv("TINY_LR")
    monkeypatch.setenv("TINY_ROUNDS", "1")
    run = bench.load_suite("tiny").runs(True)[0]
    with pytest.raises(ValueError, match="holds 2 rounds, this configuration asks for 1"):
        earlier_run(run, out)
    assert earlier_run(bench.load_suite("tiny").runs(True)[1], out) == "run"


def test_a_folder_of_another_node_count_is_an_error(suite: Path,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """The node count is not in config.yaml: bench.json keeps it (and the faults)."""
    out = suite / "out"
    run_suite("tiny", out, quick=True, only=["tiny-s0"])
    monkeypatch.setenv("TINY_CLIENTS", "8")
    with pytest.raises(ValueError, match=r"another configuration: clients=8 \(there: 4\)"):
        run_suite("tiny", out, quick=True, reuse=True)


def test_a_run_that_cannot_continue_stops_the_plan_before_any_run(
        suite: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Killed in round 1 after its metrics line, before its first checkpoint."""
    out = suite / "out"
    run_suite("tiny", out, quick=True, only=["tiny-s1"])
    run_dir = out / "tiny-s1"
    (run_dir / "summary.json").unlink()
    for f in (run_dir / CHECKPOINT_DIR).iterdir():
        f.unlink()
    metrics = run_dir / "metrics.jsonl"
    metrics.write_text(metrics.read_text().splitlines(keepends=True)[0])
    calls = counting_runner(monkeypatch)
    with pytest.raises(CheckpointError, match="missing"):
        run_suite("tiny", out, quick=True, reuse=True)
    assert calls == []  # tiny-s0 (planned first) did not start either


#: A suite with a private arm whose noise follows its rounds (LDP LinUCB, horizon unpinned) and
#: a non-private arm whose horizon is pinned.
PLANNED_SUITE = '''
import os
from bouquet.apps.bench import BenchRun

def runs(quick):
    base = {"task": "synth-bandit", "linucb.batch-steps": 5, "linucb.num-silos": 4,
            "synth-bandit.arms": 8, "synth-bandit.dim": 4, "fraction-train": 1.0,
            "num-server-rounds": int(os.environ.get("TINY_ROUNDS", "2"))}
    return [BenchRun(name="tiny-pinned", config={**base, "method": "fedlinucb",
                                                 "linucb.horizon-rounds": 8}, clients=4),
            BenchRun(name="tiny-ldp", config={**base, "method": "dp-fedlinucb-ldp"}, clients=4)]
'''


def test_a_private_arm_whose_noise_follows_its_rounds_is_not_extended(
        suite: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """More rounds for a DP arm calibrated for its rounds: refused before any run starts.

    Before the fix the plan resumed the LDP arm with 4 rounds: its silos released round 3 with
    another noise and round 4 failed. Within the same tree depth (2 -> 3 rounds) both continue.
    """
    (suite / "benchmarks" / "tinyplan.py").write_text(PLANNED_SUITE)
    out = suite / "out"
    run_suite("tinyplan", out, quick=True)
    calls = counting_runner(monkeypatch)
    monkeypatch.setenv("TINY_ROUNDS", "4")
    with pytest.raises(ValueError, match=r"dp-fedlinucb-ldp plans its mechanism .* "
                                         r"num-server-rounds=4 fixes 3 tree levels"):
        run_suite("tinyplan", out, quick=True, reuse=True)
    assert calls == []
    assert earlier_run(bench.load_suite("tinyplan").runs(True)[0], out) == "resume"
    monkeypatch.setenv("TINY_ROUNDS", "3")
    run_suite("tinyplan", out, quick=True, reuse=True)
    assert [r.name for r in calls] == ["tiny-pinned", "tiny-ldp"]
    assert all(len(rows(out / n)) == 3 for n in ("tiny-pinned", "tiny-ldp"))


def test_report_only_trains_nothing_and_names_the_runs_not_there(
        suite: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Rebuilding a report from a folder must never train a configuration that is declared
    but absent (a suite that grew a seed or an epsilon since the folder was written)."""
    out = suite / "out"
    run_suite("tiny", out, quick=True, only=["tiny-s0"])
    calls = counting_runner(monkeypatch)
    table = run_suite("tiny", out, quick=True, report_only=True)
    assert calls == []
    assert not (out / "tiny-s1").exists()
    text = table.read_text()
    assert "1 runs (1 read back)" in text and "Not run (report only" in text and "tiny-s1" in text
    with pytest.raises(ValueError, match="holds no finished run"):
        run_suite("tiny", suite / "empty", quick=True, report_only=True)
    # a run killed before it could continue (no checkpoint, no summary) is unfinished: it is
    # listed as not run, not a reason to refuse the report
    run_suite("tiny", out, quick=True, only=["tiny-s1"], reuse=True)
    shutil.rmtree(out / "tiny-s1" / CHECKPOINT_DIR)
    (out / "tiny-s1" / "summary.json").unlink()
    killed = next(r for r in bench.load_suite("tiny").runs(True) if r.name == "tiny-s1")
    with pytest.raises(CheckpointError):
        earlier_run(killed, out)
    calls.clear()
    again = run_suite("tiny", out, quick=True, report_only=True).read_text()
    assert calls == [] and "Not run (report only" in again and "tiny-s1" in again


def test_a_configuration_at_a_global_default_its_methods_preset_changes_runs_as_set(
        tmp_path: Path) -> None:
    """A suite's fed-sb run at lr 0.1 (the global default; Fed-SB's preset says 0.02) passes
    the runner's node-view check and trains at 0.1 on every node (it was refused before)."""
    from bouquet.apps.config import node_view_agrees, resolve
    from bouquet.apps.local_grid import LocalGrid
    from bouquet.apps.runner import explicit_keys

    run = BenchRun("fed-sb-lr0.1", {"method": "fed-sb", "task": "rt-smollm", "lr": 0.1},
                   clients=2)
    grid = LocalGrid(run.clients, bench.run_overrides(run, tmp_path))
    server = resolve(grid.run_config, explicit_keys(grid))
    node_view_agrees(grid.run_config, server)
    assert server.common.lr == resolve(grid.run_config).common.lr == 0.1
