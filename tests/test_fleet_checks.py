"""The checks the fleet reliability test applies to its metrics rows (tests/fleet_checks.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from fleet_checks import saved_rounds, silo_rejoined

from bouquet.clients.persistence import NodeStore


def test_silo_rejoined_needs_a_later_accepted_reply() -> None:
    """The CI run of stop 26: round 2 had no usable reply, rounds 3-4 took the restarted silo."""
    ci: list[dict[str, Any]] = [{"round": 1, "regret_silo1": 2.9}, {"round": 2},
                                {"round": 3, "regret_silo1": 4.1}, {"round": 4, "regret_silo1": 5.3}]
    assert silo_rejoined(ci, silo=1, restarted_in=2)
    accepted_in_2 = [{"round": 1, "regret_silo1": 2.9}, {"round": 2, "regret_silo1": 4.0},
                     {"round": 3, "regret_silo1": 5.1}, {"round": 4, "regret_silo1": 6.0}]
    assert silo_rejoined(accepted_in_2, silo=1, restarted_in=2)
    never_back = [{"round": 1, "regret_silo1": 2.9}, {"round": 2, "regret_silo1": 4.0},
                  {"round": 3, "regret_silo1": 4.0}, {"round": 4, "regret_silo1": 4.0}]
    assert not silo_rejoined(never_back, silo=1, restarted_in=2)
    assert not silo_rejoined([{"round": 1}, {"round": 2}, {"round": 3}, {"round": 4}],
                             silo=1, restarted_in=2)


def test_saved_rounds_skips_a_write_in_progress(tmp_path: Path) -> None:
    """Polled while a node writes, the temporary file of that write is not a saved round."""
    folder = tmp_path / "partition-1"
    assert saved_rounds(folder) == []  # nothing saved yet: no folder
    store = NodeStore(folder, partition_id=1, run_id=7, resumed=False, fsync=False)
    store.save(1, b"round one")
    unfinished = folder / f".{store.complete()[0].name.replace('r000001', 'r000002')}.state.x1y2"
    unfinished.write_bytes(b"half")  # what CI of stop 28 read mid-write
    assert saved_rounds(folder) == [1]
    store.save(2, b"round two")
    assert saved_rounds(folder) == [1, 2]
