"""Reliability on a real fleet: SuperLink + SuperNodes over TLS with SuperNode authentication.

One fleet run covers the deployment scenarios of issue 8 (each real-process run takes minutes on
a small machine):

* an unregistered key is refused: that SuperNode exits, the run is unaffected;
* a SuperNode is killed by PID during round 2: the run completes every round, the summary counts
  the missing/errored replies, and metrics.jsonl names the partition;
* another SuperNode is restarted during round 2, after saving its round-2 state (round 2 waits
  out the round timeout for the dead node, so the restart is expected to be done before round 3
  samples; it is asserted done before round 4 does): it keeps its node id
  (authentication) and refills its empty ``context.state`` from its ``state-dir``. The method
  is a private bandit whose silos report a cumulative regret that the server requires to be
  non-decreasing, so a silo that came back empty would be *rejected*; the restored one keeps
  accumulating in a later round (the restart may cut its round-2 reply, which then counts as
  an error);
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
from fleet_checks import saved_rounds, silo_rejoined

from bouquet.apps.deploy import LocalFleet, make_node_key
from bouquet.apps.registry import get_method, methods
from bouquet.apps.simulation import live_pids, pids_mentioning

#: One fleet at a time (``pytest -n``): node heartbeats and restart deadlines are timed, and every
#: message starts a process that imports torch.
pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("fleet")]

METHOD = "dp-fedlinucb-ldp"
ROUNDS = 4


def _wait_lines(path: Path, n: int, runner: threading.Thread, timeout: float = 600) -> None:
    end = time.monotonic() + timeout
    while time.monotonic() < end and runner.is_alive():
        if path.is_file() and len(path.read_text().splitlines()) >= n:
            return
        time.sleep(0.2)
    raise AssertionError(f"{path} did not reach {n} line(s)")


def _wait_checkpoint(run_dir: Path, round_: int, runner: threading.Thread,
                     timeout: float = 600) -> None:
    """Wait until the run's checkpoint of ``round_`` is on disk.

    A round's metrics line is written before its checkpoint (a resume drops lines past the
    checkpoint), so a fault timed on the line alone can land before any checkpoint exists.
    """
    meta = run_dir / "checkpoint" / "meta.json"
    end = time.monotonic() + timeout
    while time.monotonic() < end and runner.is_alive():
        try:
            if int(json.loads(meta.read_text())["round"]) >= round_:
                return
        except (OSError, ValueError, KeyError):
            pass  # not written yet (each write is atomic, so a partial file is never read)
        time.sleep(0.2)
    raise AssertionError(f"{meta} did not reach round {round_}")


def _wait_saved_round(state: Path, round_: int, runner: threading.Thread,
                      timeout: float = 120) -> None:
    """Wait until the node saved its state of ``round_`` (it saves before it replies)."""
    end = time.monotonic() + timeout
    while time.monotonic() < end and runner.is_alive():
        if round_ in saved_rounds(state):
            return
        time.sleep(0.2)
    raise AssertionError(f"{state} has no state of round {round_}")


@pytest.mark.skipif(METHOD not in methods(), reason=f"{METHOD} is not registered")
def test_fleet_survives_node_death_restart_and_an_intruder(tmp_path: Path) -> None:
    m = get_method(METHOD)
    cfg: dict[str, Any] = {"method": METHOD, "task": m.default_task, **m.test_config,
                           "num-server-rounds": ROUNDS, "round-timeout": 30.0,
                           "sample-deadline": 60.0, "fraction-train": 1.0, "plots": False,
                           "results-dir": str(tmp_path), "run-name": "dep"}
    metrics = tmp_path / "dep" / "metrics.jsonl"
    node1_state = tmp_path / "fleet" / "state-node1" / "dep" / "partition-1"
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
        # Also during round 2, once node 1 has saved its round-2 state (so that a restart that
        # came back empty would report less regret than the server holds, and be rejected): a
        # restart takes a graceful stop plus a 12 s probation (more while the SuperLink still
        # counts the old process online). Started after round 2, it was seen to miss rounds 3
        # and 4 on a slow machine; round 2 lasts the 30 s round timeout of the dead node.
        _wait_saved_round(node1_state, 2, runner)
        fleet.restart_node(1)
        back_after = len(metrics.read_text().splitlines())  # rounds ended when restart returned
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
    assert back_after < ROUNDS - 1, f"restart_node returned only after round {back_after}"
    assert silo_rejoined(rows, silo=1, restarted_in=2), [
        (r.get("regret_silo1"), r["failures"]) for r in rows]
    assert max(saved_rounds(node1_state)) >= 3  # the restarted node saved a later round

    assert live_pids(pids) == []
    assert live_pids(pids_mentioning(str(tmp_path / "fleet"))) == []


def test_superlink_restart_is_survivable(tmp_path: Path) -> None:
    """The SuperLink restarts during round 2: nodes come back by themselves, the resume works.

    With an in-memory SuperLink the SuperNodes are forgotten and exit (code 0); the fleet's
    SuperLink keeps a database, so they reconnect with the same keys and node ids. Node 0 runs
    beside a warm node worker (the recommended setup, docs/deploy.md), node 1 runs each
    message in its own process; every node answers every round of the resumed run: the round
    timeout (120 s) is long enough for a node still in its reconnect backoff. The SuperLink
    gets 5 s to exit after SIGTERM and is then killed, so this is mostly a crash: stopped
    mid-run, it waits for its open connections and was seen still waiting after 20 s, and the
    longer it is down, the longer the nodes' backoff grows. With a 20 s grace and a 30 s round
    timeout, the resumed round 2 missed both replies in some runs and not in others (this
    test took 97-171 s).
    """
    cfg: dict[str, Any] = {"method": "fedavg", "num-server-rounds": 3, "local-steps": 2,
                           "round-timeout": 120.0, "sample-deadline": 120.0,
                           "min-train-nodes": 2, "fraction-train": 1.0, "plots": False,
                           "results-dir": str(tmp_path), "run-name": "r"}
    run_dir = tmp_path / "r"
    out: dict[str, Any] = {}
    with LocalFleet(2, workdir=tmp_path / "fleet", worker=[0]) as fleet:
        def go() -> None:
            try:
                out["first"] = fleet.run(cfg, timeout=600)
            except BaseException as exc:  # the ServerApp dies with its SuperLink
                out["error"] = exc

        runner = threading.Thread(target=go)
        runner.start()
        _wait_checkpoint(run_dir, 1, runner)  # round 1 is saved: the restart hits round 2
        fleet.restart_superlink(grace=5.0)
        runner.join(300)
        end = time.monotonic() + 180
        while time.monotonic() < end and fleet.online_nodes() < 2:
            time.sleep(3)
        online = fleet.online_nodes()
        summary = fleet.run({**cfg, "resume-from": str(run_dir)}, timeout=600)
        pids = [p.pid for p in fleet.procs.values()]
    assert "first" not in out  # the first attempt did not finish
    assert online == 2
    s = json.loads(summary.read_text())
    assert s["rounds"] == 3 and "stopped" not in s
    assert s["failures"] == {"errors": 0, "rejected": 0, "missing": 0}, s["failures"]
    rows = [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert [r["round"] for r in rows] == [1, 2, 3]
    assert [r["clients"] for r in rows] == [2, 2, 2]
    assert live_pids(pids) == []
