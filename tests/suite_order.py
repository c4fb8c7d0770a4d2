"""The order in which the suite hands its tests to pytest-xdist (issue 17, target 6).

With ``--dist loadgroup`` xdist 3.8 was seen dealing the tests out in collection order (its
``--loadscope-reorder`` sorts scopes by size, but that did not put the fleet groups first in
practice: on a toy suite and in a whole-suite run the ``fleet`` group, 4-5 minutes mostly waiting
on Flower's 3 s polls and round timeouts, started late and ran alone at the end;
benchmarks/RESULTS.md, perf-tests). Longest
first is the usual remedy for such a makespan: grouped tests first, then the other ``slow``
ones (real Flower processes, real models), then the quick ones, which fill the gaps at the end.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol, TypeVar

import pytest

#: The session's whole collection in the order :func:`longest_first` gives it, test ids, noted
#: before ``-k``, ``-m`` or ``--deselect`` drop any and before ``--ff``/``--nf`` reorder them
#: (tests/conftest.py); tests/test_suite_order.py checks it.
COLLECTED = pytest.StashKey[list[str]]()


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
