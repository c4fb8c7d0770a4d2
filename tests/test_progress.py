"""The live progress display: plain lines off a terminal, rich on one, ETA and counts exact."""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

from bouquet.apps.local_grid import LocalGrid
from bouquet.apps.progress import RunProgress, format_bytes, format_eta
from bouquet.strategies import FedAvg
from bouquet.strategies.observers import announce, observing
from bouquet.strategies.round_log import RoundLog
from bouquet.strategies.rounds import RoundReport


class Clock:
    """A clock the test moves by hand."""

    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


class Strategy:
    """What the display asks of a strategy."""

    def headline_metrics(self) -> list[str]:
        return []


def report(rnd: int, *, sampled: int = 5, missing: int = 0, rejected: int = 0,
           up: int = 1_000_000, down: int = 2_000_000, accuracy: float = 0.5) -> RoundReport:
    train = RoundLog(round=rnd, clients=sampled - missing - rejected, rejected=rejected,
                     missing=missing, up_bytes=up, down_bytes=down,
                     sampled=list(range(sampled)))
    return RoundReport(round=rnd, train=train, evaluate=None, central={"accuracy": accuracy},
                       wall_s=0.0)


def test_formatting() -> None:
    assert format_eta(None) == "?" and format_eta(0) == "0:00:00"
    assert format_eta(59.6) == "0:01:00" and format_eta(3725) == "1:02:05"
    assert format_bytes(950) == "950 B" and format_bytes(1_250_000) == "1.2 MB"
    assert format_bytes(3_000) == "3.0 kB" and format_bytes(2.5e9) == "2.5 GB"


def test_plain_lines_have_round_eta_replies_bytes_and_metric() -> None:
    out, clock, s = io.StringIO(), Clock(), Strategy()
    progress = RunProgress(4, out=out, clock=clock)  # a StringIO is no terminal: plain lines
    assert progress.bar is None
    progress.on_waiting(3, 5)
    progress.on_round_start(s, 1, 4)  # type: ignore[arg-type]
    clock.now += 10.0
    progress(s, report(1, missing=1, accuracy=0.25))  # type: ignore[arg-type]
    progress.on_round_start(s, 2, 4)  # type: ignore[arg-type]
    clock.now += 20.0
    progress(s, report(2, rejected=2, accuracy=0.8123))  # type: ignore[arg-type]
    lines = out.getvalue().splitlines()
    assert lines[0] == "[bouquet] waiting for nodes: 3/5 online"
    # after round 1: 3 rounds left at 10 s each
    assert lines[1] == ("[bouquet] round 1/4 | eta 0:00:30 | accuracy=0.25 | replies 4/5 | "
                        "up 1.0 MB, down 2.0 MB so far | 10.0s")
    # after round 2: mean 15 s, 2 rounds left
    assert lines[2] == ("[bouquet] round 2/4 | eta 0:00:30 | accuracy=0.8123 | replies 5/5 "
                        "(2 rejected) | up 2.0 MB, down 4.0 MB so far | 20.0s")
    assert len(lines) == 3


def test_eta_counts_the_running_round() -> None:
    clock, s = Clock(), Strategy()
    progress = RunProgress(3, out=io.StringIO(), clock=clock)
    progress.on_round_start(s, 1, 3)  # type: ignore[arg-type]
    clock.now += 12.0
    progress(s, report(1))  # type: ignore[arg-type]
    progress.on_round_start(s, 2, 3)  # type: ignore[arg-type]
    clock.now += 4.0
    assert progress.state.eta(clock.now) == 20.0  # 2 rounds of 12 s, 4 s of one gone


class TTY(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_a_terminal_gets_the_rich_bar() -> None:
    out, clock, s = TTY(), Clock(), Strategy()
    progress = RunProgress(2, out=out, clock=clock)
    assert progress.bar is not None
    progress.on_waiting(1, 2)
    for rnd in (1, 2):
        progress.on_round_start(s, rnd, 2)  # type: ignore[arg-type]
        clock.now += 5.0
        progress(s, report(rnd))  # type: ignore[arg-type]
    text = out.getvalue()
    assert "round 2/2" in text and "2/2" in text and "accuracy=0.5" in text
    assert "[bouquet] round" not in text  # no plain lines on a terminal
    assert progress.bar.task is None  # stopped after the last round


def test_observers_hear_only_the_run_they_watch() -> None:
    heard: list[tuple[Any, ...]] = []

    class Ear:
        def on_waiting(self, online: int, wanted: int) -> None:
            heard.append((online, wanted))

    announce("on_waiting", 1, 2)
    with observing([Ear(), lambda s, r: None]):
        announce("on_waiting", 2, 3)
        announce("no_such_hook", 0)
    announce("on_waiting", 3, 4)
    assert heard == [(2, 3)]


def test_a_plain_flower_start_shows_waiting_and_rounds(tmp_path: Path) -> None:
    """The display is a start() callback any user passes; it hears discovery wait for nodes."""
    from test_plugins import initial, quickstart_app

    grid = LocalGrid(3, {}, client=quickstart_app())
    grid.offline.add(1002)
    rounds_seen: list[int] = []

    def back(strategy: Any, rep: RoundReport) -> None:
        rounds_seen.append(rep.round)

    class Rejoin(RunProgress):
        def on_waiting(self, online: int, wanted: int) -> None:
            super().on_waiting(online, wanted)
            grid.offline.discard(1002)  # the third node comes online while the server waits

    out = io.StringIO()
    strategy = FedAvg(min_available_nodes=3, sample_deadline=10.0)
    strategy.start(grid=grid, initial_arrays=initial(), num_rounds=2,
                   callbacks=[Rejoin(2, out=out), back])
    lines = out.getvalue().splitlines()
    assert lines[0] == "[bouquet] waiting for nodes: 2/3 online"
    assert [x.split(" | ")[0] for x in lines[1:]] == ["[bouquet] round 1/2", "[bouquet] round 2/2"]
    assert "replies 3/3" in lines[1] and rounds_seen == [1, 2]


def test_replies_count_the_training_phase_only_in_a_round_with_federated_evaluation() -> None:
    """The evaluation phase's missing replies read "replies -1/2" before: the round record's
    ``missing`` totals both phases. The record now carries each phase's own counts."""
    from bouquet.apps.recorder import round_record

    train = RoundLog(round=1, clients=2, sampled=[0, 1])
    evaluate = RoundLog(round=1, clients=2, missing=3, sampled=[0, 1, 2, 3, 4],
                        metrics={"accuracy": 0.5})
    rep = RoundReport(round=1, train=train, evaluate=evaluate, central={}, wall_s=0.0)
    record = round_record(rep)
    assert (record["sampled"], record["missing"]) == (2, 3)  # the totals plots read, unchanged
    assert record["phases"] == {
        "train": {"sampled": 2, "clients": 2, "rejected": 0, "errors": 0, "missing": 0},
        "evaluate": {"sampled": 5, "clients": 2, "rejected": 0, "errors": 0, "missing": 3}}
    out = io.StringIO()
    RunProgress(1, out=out, clock=Clock())(Strategy(), rep)  # type: ignore[arg-type]
    assert "replies 2/2 |" in out.getvalue()


def test_a_record_of_an_earlier_release_without_phases_still_reads() -> None:
    from bouquet.apps.progress import replies_text

    assert replies_text({"sampled": 5, "missing": 1, "rejected": 1}) == "replies 4/5 (1 rejected)"
