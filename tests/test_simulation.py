"""Runs through Flower's own engines: `flwr run` simulation (Ray) and a real SuperLink/SuperNodes."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from bouquet.apps.simulation import live_pids, pids_mentioning, run_simulation

pytestmark = pytest.mark.slow


def test_flwr_run_simulation(tmp_path: Path) -> None:
    summary = run_simulation({"method": "fedavg", "task": "digits-mlp", "num-server-rounds": 2,
                              "results-dir": str(tmp_path), "run-name": "sim"}, clients=4,
                             stream=False, timeout=600)
    s = json.loads(summary.read_text())
    assert s["rounds"] == 2 and s["final"]["accuracy"] > 0.5
    assert s["comm"]["up_bytes_total"] > 0
    assert live_pids(pids_mentioning("bq-flwr-")) == []


def test_bad_run_config_fails_before_training(tmp_path: Path) -> None:
    with pytest.raises(RuntimeError, match="(?s)flwr run failed.*partition"):
        run_simulation({"method": "fedavg", "partition": "bogus", "results-dir": str(tmp_path),
                        "run-name": "bad"}, clients=2, stream=False, timeout=600)
    assert not (tmp_path / "bad" / "metrics.jsonl").exists()


def test_deploy_local_over_tls_with_authentication(tmp_path: Path) -> None:
    from bouquet.apps.deploy import LocalFleet

    with LocalFleet(2, workdir=tmp_path / "fleet") as fleet:
        summary = fleet.run({"method": "fedavg", "num-server-rounds": 2,
                             "results-dir": str(tmp_path), "run-name": "dep"}, timeout=600)
        pids = [p.pid for p in fleet.procs.values()]
    s = json.loads(summary.read_text())
    assert s["rounds"] == 2 and s["failures"] == {"errors": 0, "rejected": 0, "missing": 0}
    assert live_pids(pids) == []
    assert live_pids(pids_mentioning(str(tmp_path / "fleet"))) == []
    assert os.path.exists(tmp_path / "fleet" / "certs" / "ca.crt")
