"""Checks on the metrics rows of a real-fleet run (tests/test_reliability_deploy.py).

Kept out of the fleet module so that their unit tests run with the quick tests, not in the
``fleet`` xdist group (tests/suite_order.py hands that group out first).
"""

from __future__ import annotations

from typing import Any


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
