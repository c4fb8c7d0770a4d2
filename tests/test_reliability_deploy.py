"""Reliability on a real fleet: SuperLink + SuperNodes over TLS with SuperNode authentication.

One fleet run covers the deployment scenarios of issue 8 (each real-process run takes minutes on
a small machine):

* an unregistered key is refused: that SuperNode exits, the run is unaffected;
* a SuperNode is killed by PID during round 2: the run completes every round, the summary counts
  the missing/errored replies, and metrics.jsonl names the partition;
* another SuperNode is restarted between rounds 2 and 3: it keeps its node id (authentication)
  and refills its empty ``context.state`` from its ``state-dir``. The method is a private bandit
  whose silos report a cumulative regret that the server requires to be non-decreasing, so a
  silo that came back empty would be *rejected*; the restored one keeps accumulating;
* no process is left behind.

Flower reports a killed SuperNode only after about 43 s (heartbeat), so ``round-timeout`` is
30 s here: the dead node's reply is counted missing when the round times out.
"""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from bouquet.apps.deploy import LocalFleet, make_node_key
from bouquet.apps.registry import get_method, methods
from bouquet.apps.simulation import live_pids, pids_mentioning

pytestmark = pytest.mark.slow

METHOD = "dp-fedlinucb-ldp"
ROUNDS = 4


def _wait_lines(path: Path, n: int, runner: threading.Thread, timeout: float = 600) -> None:
    end = time.monotonic() + timeout
    while time.monotonic() < end and runner.is_alive():
        if path.is_file() and len(path.read_text().splitlines()) >= n:
            return
        time.sleep(0.2)
    raise AssertionError(f"{path} did not reach {n} line(s)")


@pytest.mark.skipif(METHOD not in methods(), reason=f"{METHOD} is not registered")
def test_fleet_survives_node_death_restart_and_an_intruder(tmp_path: Path) -> None:
    m = get_method(METHOD)
    cfg: dict[str, Any] = {"method": METHOD, "task": m.default_task, **m.test_config,
                           "num-server-rounds": ROUNDS, "round-timeout": 30.0,
                           "sample-deadline": 60.0, "fraction-train": 1.0,
                           "results-dir": str(tmp_path), "run-name": "dep"}
    metrics = tmp_path / "dep" / "metrics.jsonl"
    out: dict[str, Any] = {}
    with LocalFleet(3, workdir=tmp_path / "fleet") as fleet:
        intruder_key, _ = make_node_key(fleet.dir / "certs", "intruder")  # never registered
        intruder = fleet.start_node(3, key=intruder_key, name="intruder")

        def go() -> None:
            try:
                out["summary"] = fleet.run(cfg, timeout=900)
            except BaseException as exc:  # reported below
                out["error"] = exc

        runner = threading.Thread(target=go)
        runner.start()
        _wait_lines(metrics, 1, runner)
        fleet.kill_node(2)  # during round 2
        _wait_lines(metrics, 2, runner)
        fleet.restart_node(1)  # between rounds 2 and 3
        runner.join(900)
        intruder_code = intruder.wait(timeout=60)
        pids = [p.pid for p in fleet.procs.values()] + [intruder.pid]
    assert "error" not in out, out.get("error")
    rows = [json.loads(x) for x in metrics.read_text().splitlines()]
    summary = json.loads(out["summary"].read_text())

    assert intruder_code != 0
    assert "Failed to activate" in (tmp_path / "fleet" / "intruder.log").read_text()

    assert summary["rounds"] == ROUNDS and [r["round"] for r in rows] == [1, 2, 3, 4]
    assert rows[0]["clients"] == 3
    lost = summary["failures"]["missing"] + summary["failures"]["errors"]
    assert lost >= 1 and lost == sum(r["missing"] + r["errors"] for r in rows)
    assert any(f["partition_id"] == 2 for f in rows[1]["failures"])

    assert summary["failures"]["rejected"] == 0
    assert rows[-1]["regret_silo1"] > rows[1]["regret_silo1"] > 0
    assert any(p.name.startswith("r0000") for p in
               (tmp_path / "fleet" / "state-node1" / "dep" / "partition-1").iterdir())

    assert live_pids(pids) == []
    assert live_pids(pids_mentioning(str(tmp_path / "fleet"))) == []
