"""A ``start()`` callback that keeps a run's results: metrics.jsonl, checkpoints, summary.json.

Bouquet's runner passes one to :meth:`BouquetStrategy.start`; a Flower user's ServerApp can do
the same::

    recorder = RunRecorder(Path("results/my-run"), meta={"method": "scafcom", "task": "mine",
                                                         "seed": 0})
    result = strategy.start(grid=grid, initial_arrays=arrays, num_rounds=10,
                            callbacks=[recorder])
    recorder.finish(strategy)  # summary.json

The live display of the run is another callback, :class:`bouquet.apps.progress.RunProgress`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from bouquet.apps.results import CLIENT_STATE_DIR, ResultsWriter
from bouquet.strategies.base import BouquetStrategy
from bouquet.strategies.checkpoint import save_checkpoint, settle_checkpoint
from bouquet.strategies.round_log import RoundLog
from bouquet.strategies.rounds import RoundReport

CHECKPOINT_DIR = "checkpoint"


def say(text: str) -> None:
    """Progress line on the ServerApp's stdout (streamed by ``flwr run --stream``)."""
    print(f"[bouquet] {text}", flush=True)


def merge_failures(rlog: RoundLog, other: RoundLog) -> None:
    """Add another phase's failed replies (federated evaluation) to the round's log."""
    for kind in ("errors", "rejected", "missing"):
        setattr(rlog, kind, getattr(rlog, kind) + getattr(other, kind))
    rlog.failures += [{**f, "phase": "evaluate"} for f in other.failures]


def round_record(report: RoundReport) -> dict[str, Any]:
    """The ``metrics.jsonl`` line of a round (the evaluation phase's bytes and failures added).

    The top-level ``sampled`` and ``clients`` are the training phase's; ``rejected``,
    ``errors`` and ``missing`` total both phases (what plots and reports read). ``phases``
    holds each phase's own counts (:meth:`RoundLog.counts`): ``{"train": {...}, "evaluate":
    {...}}``, the evaluation entry only in a round with federated evaluation, so that received
    of expected replies is read within one phase.
    """
    rlog = RoundLog(**{**report.train.__dict__, "failures": list(report.train.failures)})
    if report.evaluate is not None:
        merge_failures(rlog, report.evaluate)
        rlog.up_bytes += report.evaluate.up_bytes
        rlog.down_bytes += report.evaluate.down_bytes
    phases = {"train": report.train.counts()}
    if report.evaluate is not None:
        phases["evaluate"] = report.evaluate.counts()
    return {
        "round": report.round, **report.evaluation(), **rlog.metrics,
        "up_bytes": rlog.up_bytes, "down_bytes": rlog.down_bytes, "clients": rlog.clients,
        "sampled": len(rlog.sampled), "rejected": rlog.rejected, "errors": rlog.errors,
        "missing": rlog.missing, "failures": rlog.failures, "phases": phases,
        "wall_s": report.wall_s,
    }


class RunRecorder:
    """Writes each round's ``metrics.jsonl`` line and checkpoint (and, at the end, the summary).

    Parameters
    ----------
    run_dir : Path
        The run folder (``config.yaml``, ``metrics.jsonl``, ``checkpoint/``, ``summary.json``).
    meta : Mapping[str, Any]
        ``method``, ``task`` and ``seed`` for ``summary.json``.
    config_yaml : str
        The resolved configuration written to ``config.yaml``.
    num_rounds : int
        The run's last round.
    identity : Mapping[str, Any], optional
        What a resume checks against the checkpoint (bouquet's runner: the config's identity).
    headline : Sequence[str]
        Metric names already in ``final``/``best`` (a resumed run's).
    target_accuracy : float
        For the time/bytes-to-target entries of ``summary.json`` (0: none).
    plots : bool
        Draw ``plots/`` when the run ends (:meth:`ResultsWriter.finish`).

    """

    def __init__(self, run_dir: Path, *, meta: Mapping[str, Any], config_yaml: str = "",
                 num_rounds: int = 0, identity: Mapping[str, Any] | None = None,
                 headline: Sequence[str] = (), target_accuracy: float = 0.0,
                 plots: bool = True) -> None:
        self.run_dir = Path(run_dir)
        self.writer = ResultsWriter(self.run_dir, config_yaml, meta, plots=plots)
        self.num_rounds = num_rounds
        self.identity = dict(identity or {})
        self.headline = list(headline)
        self.target_accuracy = target_accuracy
        #: The last round recorded (a resumed run starts after it).
        self.last_round = 0

    def resume(self, done: int) -> None:
        """Continue a run whose rounds ``1..done`` are recorded."""
        self.writer.resume(done)
        self.last_round = done

    def __call__(self, strategy: BouquetStrategy, report: RoundReport) -> None:
        """Record one round (the callback :meth:`BouquetStrategy.start` calls)."""
        record = round_record(report)
        self.headline = sorted(set(self.headline) | set(report.evaluation())
                               | set(strategy.headline_metrics()))
        self.writer.append(record)
        node_state = self.run_dir / CLIENT_STATE_DIR
        # simulated nodes wrote their state there, into the page cache: on the disk before the
        # checkpoint that relies on it (one file-system sync covers it and the checkpoint)
        save_checkpoint(self.run_dir / CHECKPOINT_DIR, report.round, strategy.state_dict(),
                        {**self.identity, "headline": self.headline},
                        durable_first=node_state if node_state.is_dir() else None)
        self.last_round = report.round

    def finish(self, strategy: BouquetStrategy,
               extras: Mapping[str, Mapping[str, Any]] | None = None) -> Path:
        """Write ``summary.json`` (with the strategy's extras, or ``extras``); return its path.

        The last checkpoint is settled first (:func:`settle_checkpoint`).
        """
        settle_checkpoint(self.run_dir / CHECKPOINT_DIR)
        return self.writer.finish(self.headline,
                                  strategy.summary_extras() if extras is None else extras,
                                  self.target_accuracy)
