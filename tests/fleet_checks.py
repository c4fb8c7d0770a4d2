"""Checks on a real-fleet run's metrics rows and node state (tests/test_reliability_deploy.py).

Kept out of the fleet module so that their unit tests run with the quick tests, not in the
``fleet`` xdist group (tests/suite_order.py hands that group out first).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from bouquet.clients.persistence import NodeStore


def silo_rejoined(rows: list[dict[str, Any]], *, silo: int, restarted_in: int) -> bool:
    """Whether the server accepted ``silo`` in a round after the one it restarted in.

    ``regret_silo<k>`` is the server's cumulative regret of silo ``k`` (kept across rounds it
    misses), and a round with no usable reply writes no regret at all. The silo's value grows
    after round ``restarted_in`` only if a later reply of the restarted node was accepted.
    The restart may cut the node's reply of round ``restarted_in`` itself (seen in CI: the
    SuperLink then reports its objects unavailable), so that round is not required to count.
    """
    key = f"regret_silo{silo}"
    before = [r[key] for r in rows if r["round"] <= restarted_in and key in r]
    after = [r[key] for r in rows if r["round"] > restarted_in and key in r]
    return bool(before) and bool(after) and max(after) > max(before) > 0


def saved_rounds(state: Path) -> list[int]:
    """The rounds of the state versions a node completely wrote to ``state`` (sorted).

    Read through the node's own :meth:`NodeStore.complete`, which skips the temporary file of a
    write in progress (``.r000002-...state.<random>``): polled while the node writes, a plain
    parse of every name in the folder once read such a file and failed (CI of stop 28).
    """
    store = NodeStore(state, partition_id=-1, run_id=0, resumed=False)
    return sorted(v.round for v in store.complete())
