"""Observers of a run in progress: what a ``start()`` callback may hear besides the round report.

One job: hand run events to the callbacks of the :meth:`~BouquetStrategy.start` call in progress.
Every callback is called as ``callback(strategy, report)`` after each round. A callback object
may also define, and then is told:

- ``on_round_start(strategy, rnd, num_rounds)``: before round ``rnd`` sends anything;
- ``on_waiting(online, wanted)``: while node discovery waits for nodes (each time the number of
  usable online nodes changes, and once when the wait begins).

The callbacks are those of the ``start()`` call running in this thread (a context variable set
for the duration of :func:`observing`), so a strategy needs no attribute to reach them and two
runs in two threads do not hear each other.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any

_ACTIVE: ContextVar[tuple[object, ...]] = ContextVar("bouquet_run_observers", default=())


@contextmanager
def observing(callbacks: Iterable[object]) -> Iterator[None]:
    """Make ``callbacks`` the observers of the run for the ``with`` block."""
    token = _ACTIVE.set(tuple(callbacks))
    try:
        yield
    finally:
        _ACTIVE.reset(token)


def announce(hook: str, *args: Any) -> None:
    """Call ``hook(*args)`` on every observer of the running ``start()`` that defines it."""
    for observer in _ACTIVE.get():
        method = getattr(observer, hook, None)
        if callable(method):
            method(*args)
