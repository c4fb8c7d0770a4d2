"""The bouquet command line (in-process engine; the Ray/flwr paths are in test_simulation.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bouquet.apps.cli import main


def test_list_shows_methods_tasks_and_keys(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["list", "--keys"]) == 0
    out = capsys.readouterr().out
    assert "fedavg" in out and "digits-mlp" in out and "num-server-rounds" in out


def test_bad_set_value_fails_before_running(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    assert main(["run", "fedavg", "--engine", "inprocess", "--results-dir", str(tmp_path),
                 "--set", "fraction-train=7"]) == 2
    assert "fraction-train" in capsys.readouterr().err
    assert not list(tmp_path.iterdir())


def test_run_then_report(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    for seed in (0, 1):
        assert main(["run", "fedavg", "--engine", "inprocess", "--clients", "3", "--rounds", "2",
                     "--results-dir", str(tmp_path / "runs"), "--set", f"seed={seed}",
                     "--set", f"run-name=r{seed}", "--set", "local-steps=2"]) == 0
    assert main(["report", str(tmp_path / "runs"), "--out", str(tmp_path / "rep")]) == 0
    table = (tmp_path / "rep" / "table.md").read_text()
    assert "| r0 |" in table and "| r1 |" in table
    assert (tmp_path / "rep" / "plots" / "accuracy_vs_round.png").is_file()
    s = json.loads((tmp_path / "runs" / "r1" / "summary.json").read_text())
    assert s["seed"] == 1
