"""A live progress display of a run: round i/N with ETA, replies, bytes so far, current metric.

One job: show a run as it goes. :class:`RunProgress` is a ``start()`` callback (an observer,
:mod:`bouquet.strategies.observers`), so a Flower user's own ServerApp shows the same display::

    from bouquet.apps.progress import RunProgress

    result = strategy.start(grid=grid, initial_arrays=arrays, num_rounds=10,
                            callbacks=[RunProgress(num_rounds=10)])

When the output is a terminal it draws a rich progress bar; otherwise (CI logs, pipes, a
ServerApp whose output ``flwr run --stream`` relays) it prints one plain line per round and one
per change while the server waits for nodes::

    [bouquet] waiting for nodes: 3/5 online
    [bouquet] round 2/5 | eta 0:00:36 | accuracy=0.8123 | replies 5/5 | up 1.2 MB, down 4.8 MB so far | 12.0s

The ETA is the mean duration of this run's rounds times the rounds left; the clock is injectable
(``clock``) so that tests are deterministic. Results files are the recorder's job
(:class:`~bouquet.apps.recorder.RunRecorder`).
"""

from __future__ import annotations

import dataclasses
import sys
import time
from collections.abc import Callable, Mapping
from typing import IO, Any

from bouquet.apps.recorder import round_record
from bouquet.strategies.base import BouquetStrategy
from bouquet.strategies.rounds import RoundReport

PREFIX = "[bouquet] "


def format_eta(seconds: float | None) -> str:
    """``h:mm:ss`` (``?`` before the first round has given a duration)."""
    if seconds is None:
        return "?"
    total = max(0, int(round(seconds)))
    return f"{total // 3600}:{total % 3600 // 60:02d}:{total % 60:02d}"


def format_bytes(n: float) -> str:
    """Bytes in decimal units, as a person reads them (``950 B``, ``1.2 MB``)."""
    for unit, size in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if n >= size:
            return f"{n / size:.1f} {unit}"
    return f"{int(n)} B"


@dataclasses.dataclass
class ProgressState:
    """What the display knows about the run so far (explicit, updated by each event).

    Attributes
    ----------
    num_rounds : int
        The last round of the run (0 until known).
    rounds_done : int
        Rounds finished while this display watched.
    round_seconds : float
        Their total duration (for the ETA).
    round_started : float or None
        Clock reading when the current round started.
    up_bytes, down_bytes : int
        Bytes sent by nodes / to nodes so far (this display's rounds).
    last_round : int
        The round last reported.

    """

    num_rounds: int = 0
    rounds_done: int = 0
    round_seconds: float = 0.0
    round_started: float | None = None
    up_bytes: int = 0
    down_bytes: int = 0
    last_round: int = 0

    def eta(self, now: float) -> float | None:
        """Seconds until the last round ends (None before a round has finished)."""
        if not self.rounds_done:
            return None
        mean = self.round_seconds / self.rounds_done
        left = max(self.num_rounds - self.last_round, 0) * mean
        if self.round_started is not None and self.last_round < self.num_rounds:
            left -= min(now - self.round_started, mean)  # the running round's elapsed part
        return max(left, 0.0)


def replies_text(record: Mapping[str, Any]) -> str:
    """``replies 4/5`` (received of expected) of the training phase, with what was not used.

    Read from the round record's ``phases["train"]`` (one phase's counts: the top-level
    ``missing`` also counts the evaluation phase's); a record without ``phases`` (a results
    file of an earlier release) has only the totals.
    """
    phases = record.get("phases")
    if isinstance(phases, Mapping) and isinstance(phases.get("train"), Mapping):
        record = phases["train"]
    expected = int(record.get("sampled", 0))
    received = expected - int(record.get("missing", 0))
    text = f"replies {received}/{expected}"
    bad = [f"{record[k]} {k}" for k in ("rejected", "errors") if record.get(k)]
    return text + (f" ({', '.join(bad)})" if bad else "")


def metrics_text(record: Mapping[str, Any], names: list[str]) -> str:
    """The round's headline metrics, ``accuracy=0.8123 loss=0.41``."""
    return " ".join(f"{k}={record[k]:.4g}" for k in names
                    if isinstance(record.get(k), int | float))


class RunProgress:
    """A ``start()`` callback that shows the run's progress (rich on a terminal, else lines).

    Parameters
    ----------
    num_rounds : int
        The last round (0: learnt from the first ``on_round_start``).
    out : file, optional
        Where to write (default ``sys.stdout``).
    live : bool, optional
        Force the rich display on (True) or the plain lines (False); default: rich when
        ``out`` is a terminal.
    clock : callable
        Seconds, monotonic (injectable for tests).

    """

    def __init__(self, num_rounds: int = 0, *, out: IO[str] | None = None,
                 live: bool | None = None, clock: Callable[[], float] = time.monotonic) -> None:
        self.out = out if out is not None else sys.stdout
        self.clock = clock
        self.state = ProgressState(num_rounds=num_rounds)
        is_tty = bool(getattr(self.out, "isatty", lambda: False)())
        self.bar: RichBar | None = RichBar(self.out) if (is_tty if live is None else live) \
            else None

    # ------------------------------------------------------------------ observer hooks
    def on_round_start(self, strategy: BouquetStrategy, rnd: int, num_rounds: int) -> None:
        """Round ``rnd`` begins (its clock starts)."""
        self.state.num_rounds = num_rounds
        self.state.round_started = self.clock()
        if self.bar is not None:
            self.bar.show(self.state, f"round {rnd}/{num_rounds}", "", self.clock())

    def on_waiting(self, online: int, wanted: int) -> None:
        """The server waits for nodes: ``waiting for nodes: 3/5 online``."""
        text = f"waiting for nodes: {online}/{wanted} online"
        if self.bar is not None:
            self.bar.show(self.state, text, "", self.clock())
        else:
            self.write(text)

    def __call__(self, strategy: BouquetStrategy, report: RoundReport) -> None:
        """A round ended: update the counts and show them."""
        record = round_record(report)
        now = self.clock()
        state = self.state
        started = state.round_started if state.round_started is not None else now - report.wall_s
        state.rounds_done += 1
        state.round_seconds += max(now - started, 0.0)
        state.round_started = None
        state.last_round = report.round
        state.up_bytes += int(record["up_bytes"])
        state.down_bytes += int(record["down_bytes"])
        names = sorted(set(report.evaluation()) | set(strategy.headline_metrics()))
        details = " | ".join(x for x in (
            metrics_text(record, names), replies_text(record),
            f"up {format_bytes(state.up_bytes)}, down {format_bytes(state.down_bytes)} so far")
            if x)
        if self.bar is not None:
            self.bar.show(self.state, f"round {report.round}/{state.num_rounds}", details, now)
            if report.round >= state.num_rounds:
                self.close()
        else:
            self.write(self.round_line(report.round, details, now - started, now))

    def round_line(self, rnd: int, details: str, seconds: float, now: float) -> str:
        """The plain line of a finished round."""
        return (f"round {rnd}/{self.state.num_rounds} | eta {format_eta(self.state.eta(now))} | "
                f"{details} | {seconds:.1f}s")

    def write(self, text: str) -> None:
        """One plain line."""
        print(PREFIX + text, file=self.out, flush=True)

    def close(self) -> None:
        """Stop the live display (the plain lines need nothing)."""
        if self.bar is not None:
            self.bar.stop()


class RichBar:
    """The terminal view of :class:`RunProgress`: one rich progress bar, redrawn in place."""

    def __init__(self, out: IO[str]) -> None:
        from rich.console import Console
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn
        from rich.table import Column

        def fixed(width: int) -> Column:  # never squeezed by the details
            return Column(no_wrap=True, min_width=width)

        self.progress = Progress(
            TextColumn("[bold]{task.description}", table_column=fixed(12)),
            BarColumn(bar_width=16), MofNCompleteColumn(table_column=fixed(5)),
            TextColumn("eta {task.fields[eta]}", table_column=fixed(11)),
            TextColumn("{task.fields[details]}",
                       table_column=Column(no_wrap=True, overflow="ellipsis", ratio=1)),
            console=Console(file=out), transient=False, expand=True)
        self.task: Any = None

    def show(self, state: ProgressState, description: str, details: str, now: float) -> None:
        """Redraw with the state's counts."""
        eta = format_eta(state.eta(now))
        total = state.num_rounds or None
        if self.task is None:
            self.progress.start()
            self.task = self.progress.add_task(description, total=total,
                                               completed=state.last_round, eta=eta,
                                               details=details)
        elif details:
            self.progress.update(self.task, description=description, total=total,
                                 completed=state.last_round, eta=eta, details=details)
        else:
            self.progress.update(self.task, description=description, total=total,
                                 completed=state.last_round, eta=eta)

    def stop(self) -> None:
        """Leave the last frame on screen."""
        if self.task is not None:
            self.progress.stop()
            self.task = None
