"""``stop-at-target``: end a run once its evaluated accuracy reaches ``target-accuracy``.

Time-to-accuracy benchmarks need a run only until it reaches its target. With
``stop-at-target = true`` the runner passes a :class:`StopAtTarget` callback to ``start()``
after the :class:`~bouquet.apps.recorder.RunRecorder`: the round that reaches the target is
recorded and checkpointed as any other, then the callback raises
:class:`~bouquet.strategies.rounds.StopRun` and the run ends. ``summary.json`` says so in its
``stopped_at_target`` entry (:func:`stop_entry`); a stopped run is finished: ``bouquet run
--resume`` of its folder runs nothing (:func:`finished_round`), and ``bouquet bench --reuse``
reads it back. A resume with ``stop-at-target = false`` continues it to ``num-server-rounds``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from bouquet.apps.results import reached
from bouquet.strategies.base import BouquetStrategy
from bouquet.strategies.rounds import RoundReport, StopRun

#: The ``summary.json`` entry of a run that ended at its target.
STOP_KEY = "stopped_at_target"


def stop_entry(record: Mapping[str, Any], target: float, num_rounds: int,
               key: str = "accuracy") -> dict[str, Any]:
    """``stopped_at_target`` of ``summary.json``: the round, its ``key`` value, target, round cap."""
    return {"round": int(record["round"]), key: record[key], "target_accuracy": target,
            "num_server_rounds": num_rounds}


class StopAtTarget:
    """A ``start()`` callback that ends the run after the first round reaching ``target``.

    Parameters
    ----------
    target : float
        The accuracy to reach (``target-accuracy``; above 0).
    num_rounds : int
        The run's round cap (recorded in the entry).
    key : str
        The evaluated metric compared with ``target``.

    Attributes
    ----------
    entry : dict or None
        The ``stopped_at_target`` entry once the run stopped (None before).

    """

    def __init__(self, target: float, num_rounds: int, key: str = "accuracy") -> None:
        if target <= 0:
            raise ValueError("stop-at-target needs target-accuracy above 0")
        self.target = target
        self.num_rounds = num_rounds
        self.key = key
        self.entry: dict[str, Any] | None = None

    def __call__(self, strategy: BouquetStrategy, report: RoundReport) -> None:
        """Raise :class:`StopRun` when this round's evaluation reaches the target."""
        metrics = {"round": report.round, **report.evaluation()}
        if not reached(metrics, self.target, self.key):
            return
        self.entry = stop_entry(metrics, self.target, self.num_rounds, self.key)
        raise StopRun(f"{self.key} {metrics[self.key]:.4g} reached target-accuracy {self.target} "
                      f"in round {report.round} (stop-at-target)")


def finished_round(records: Sequence[Mapping[str, Any]], target: float,
                   key: str = "accuracy") -> Mapping[str, Any] | None:
    """The first of ``records`` (metrics.jsonl lines) that reaches ``target`` (None if none)."""
    if target <= 0:
        return None
    return next((r for r in records if reached(r, target, key)), None)
