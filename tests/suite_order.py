"""The order in which the suite hands its tests to pytest-xdist (issue 17, target 6).

With ``--dist loadgroup`` xdist 3.8 deals the tests out in collection order, one scope at a
time, so the two fleet groups (``fleet``, ``fleet-healthy``: 4-5 minutes each, mostly waiting on
Flower's 3 s polls and round timeouts) came from the last files collected and ran alone at the
end while the other workers had finished (measured: benchmarks/RESULTS.md, perf-tests). Longest
first is the usual remedy for such a makespan: grouped tests first, then the other ``slow``
ones (real Flower processes, real models), then the quick ones, which fill the gaps at the end.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol, TypeVar


class _Item(Protocol):
    def get_closest_marker(self, name: str) -> object | None: ...


ItemT = TypeVar("ItemT", bound=_Item)


def rank(item: _Item) -> int:
    """0 for a test in an xdist group, 1 for another ``slow`` test, 2 for the rest."""
    if item.get_closest_marker("xdist_group") is not None:
        return 0
    if item.get_closest_marker("slow") is not None:
        return 1
    return 2


def longest_first(items: Sequence[ItemT]) -> list[ItemT]:
    """``items`` ordered by :func:`rank`, keeping the collection order within each rank."""
    return sorted(items, key=rank)  # sorted is stable
