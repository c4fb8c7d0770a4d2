"""Runs through Flower's own engines: `flwr run` simulation (Ray) and a real SuperLink/SuperNodes."""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

import pytest

from bouquet.apps.simulation import live_pids, pids_mentioning, run_simulation

pytestmark = pytest.mark.slow


def test_flwr_run_simulation(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # The run's throwaway FLWR_HOME (bq-flwr-*) goes in a folder of its own, so that the check
    # below sees every process of this run and none of a run of another test (pytest -n).
    base = Path(tempfile.mkdtemp(prefix="q", dir="/tmp"))  # short: Ray's socket paths are capped
    monkeypatch.setattr(tempfile, "tempdir", str(base))
    try:
        summary = run_simulation({"method": "fedavg", "task": "digits-mlp",
                                  "num-server-rounds": 2, "results-dir": str(tmp_path),
                                  "run-name": "sim"}, clients=4, stream=False, timeout=600)
    finally:
        monkeypatch.undo()
    s = json.loads(summary.read_text())
    assert s["rounds"] == 2 and s["final"]["accuracy"] > 0.5
    assert s["comm"]["up_bytes_total"] > 0
    assert live_pids(pids_mentioning(f"{base}/bq-flwr-")) == []
    shutil.rmtree(base, ignore_errors=True)


def test_bad_run_config_fails_before_training(tmp_path: Path) -> None:
    with pytest.raises(RuntimeError, match="(?s)flwr run failed.*partition"):
        run_simulation({"method": "fedavg", "partition": "bogus", "results-dir": str(tmp_path),
                        "run-name": "bad"}, clients=2, stream=False, timeout=600)
    assert not (tmp_path / "bad" / "metrics.jsonl").exists()


@pytest.mark.xdist_group("fleet-healthy")  # shares the healthy fleet (tests/conftest.py)
def test_deploy_local_over_tls_with_authentication(tmp_path: Path, healthy_fleet: Any) -> None:
    """A run on the shared TLS + authentication fleet; the fixture checks that no process of
    the fleet is left when it stops."""
    summary = healthy_fleet.run({"method": "fedavg", "num-server-rounds": 2, "plots": False,
                                 "results-dir": str(tmp_path), "run-name": "dep"}, timeout=600)
    s = json.loads(summary.read_text())
    assert s["rounds"] == 2 and s["failures"] == {"errors": 0, "rejected": 0, "missing": 0}
    assert os.path.exists(healthy_fleet.dir / "certs" / "ca.crt")
    assert healthy_fleet.secure and healthy_fleet.tls["ca"] == healthy_fleet.dir / "certs" / "ca.crt"
