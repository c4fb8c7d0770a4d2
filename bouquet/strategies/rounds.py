"""The round loop of :meth:`BouquetStrategy.start`: Flower's loop, plus a start round and callbacks.

Flower's ``Strategy.start`` runs rounds ``1..num_rounds``: configure/aggregate train, then
configure/aggregate evaluate, then the central ``evaluate_fn``. :func:`run_rounds` runs the same
steps in the same order and fills the same :class:`~flwr.serverapp.strategy.Result`, and adds
what a bouquet run needs without a private loop: ``first_round`` (resume after a checkpoint)
and ``callbacks`` called after each round with a :class:`RoundReport` (results files,
checkpoints and progress lines are callbacks, see :mod:`bouquet.apps.runner`); a callback may
also hear the start of each round and the wait for nodes (:mod:`bouquet.strategies.observers`).
A callback that raises :class:`StopRun` ends the run after the round it was called for (every
callback still hears that round); ``start()`` then returns the ``Result`` so far.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from flwr.app import ArrayRecord, ConfigRecord, MessageType, MetricRecord
from flwr.serverapp import Grid
from flwr.serverapp.strategy import Result

from bouquet.strategies.observers import announce, observing

if TYPE_CHECKING:
    from bouquet.strategies.base import BouquetStrategy
    from bouquet.strategies.round_log import RoundLog

log = logging.getLogger("bouquet")

EvaluateFn = Callable[[int, ArrayRecord], MetricRecord | None]


@dataclasses.dataclass
class RoundReport:
    """What one round did, handed to every callback.

    Attributes
    ----------
    round : int
        The round just finished.
    train : RoundLog
        The train phase's log (counters, failures, the method's metrics).
    evaluate : RoundLog or None
        The federated evaluation phase's log (None when no node evaluated).
    central : dict[str, float]
        The central ``evaluate_fn`` metrics (empty without one).
    wall_s : float
        Seconds since the round started.

    """

    round: int
    train: RoundLog
    evaluate: RoundLog | None
    central: dict[str, float]
    wall_s: float

    def evaluation(self) -> dict[str, float]:
        """The round's evaluation metrics: federated ones, else the central ones."""
        if self.evaluate is not None and self.evaluate.metrics:
            return dict(self.evaluate.metrics)
        return dict(self.central)


RoundCallback = Callable[["BouquetStrategy", RoundReport], None]


class StopRun(Exception):
    """Raised by a round callback to end the run after the current round.

    The remaining callbacks still get the round's report, then the round loop returns Flower's
    ``Result`` of the rounds done; ``str(exc)`` says why (logged).
    """


def scalars(record: MetricRecord | None) -> dict[str, float]:
    """The scalar entries of a MetricRecord as floats."""
    if record is None:
        return {}
    return {k: float(x) for k, x in record.items()
            if isinstance(x, int | float) and not isinstance(x, bool)}


def run_rounds(strategy: BouquetStrategy, grid: Grid, initial_arrays: ArrayRecord | None,
               num_rounds: int, timeout: float, train_config: ConfigRecord | None,
               evaluate_config: ConfigRecord | None, evaluate_fn: EvaluateFn | None, *,
               first_round: int = 1, callbacks: Sequence[RoundCallback] = ()) -> Result:
    """Rounds ``first_round..num_rounds`` as Flower's ``start()`` runs them; see the module."""
    train_config = ConfigRecord() if train_config is None else train_config
    evaluate_config = ConfigRecord() if evaluate_config is None else evaluate_config
    with observing(callbacks):
        return _run_rounds(strategy, grid, initial_arrays, num_rounds, timeout, train_config,
                           evaluate_config, evaluate_fn, first_round, callbacks)


def _run_rounds(strategy: BouquetStrategy, grid: Grid, initial_arrays: ArrayRecord | None,
                num_rounds: int, timeout: float, train_config: ConfigRecord,
                evaluate_config: ConfigRecord, evaluate_fn: EvaluateFn | None,
                first_round: int, callbacks: Sequence[RoundCallback]) -> Result:
    strategy.ensure_model(initial_arrays)
    arrays = strategy.global_arrays() or initial_arrays or ArrayRecord()
    result = Result(arrays=arrays)
    strategy.summary()
    if evaluate_fn is not None and first_round == 1:
        res = evaluate_fn(0, arrays)
        if res is not None:
            result.evaluate_metrics_serverapp[0] = res
    for rnd in range(first_round, num_rounds + 1):
        t0 = time.monotonic()
        log.info("[ROUND %d/%d]", rnd, num_rounds)
        announce("on_round_start", strategy, rnd, num_rounds)
        replies = grid.send_and_receive(
            strategy.configure_train(rnd, arrays, train_config, grid), timeout=timeout)
        new_arrays, train_metrics = strategy.aggregate_train(rnd, replies)
        if new_arrays is not None:
            result.arrays = arrays = new_arrays
        if train_metrics is not None:
            result.train_metrics_clientapp[rnd] = train_metrics
        strategy.last_log.pop(MessageType.EVALUATE, None)
        messages = list(strategy.configure_evaluate(rnd, arrays, evaluate_config, grid))
        if messages:
            replies = grid.send_and_receive(messages, timeout=timeout)
        else:
            replies = []
        eval_metrics = strategy.aggregate_evaluate(rnd, replies)
        if eval_metrics is not None:
            result.evaluate_metrics_clientapp[rnd] = eval_metrics
        central: dict[str, float] = {}
        if evaluate_fn is not None:
            res = evaluate_fn(rnd, arrays)
            if res is not None:
                result.evaluate_metrics_serverapp[rnd] = res
                central = scalars(res)
        report = RoundReport(round=rnd, train=strategy.last_log[MessageType.TRAIN],
                             evaluate=strategy.last_log.get(MessageType.EVALUATE),
                             central=central, wall_s=0.0)
        strategy.observe_evaluation(rnd, report.evaluation())
        report.wall_s = round(time.monotonic() - t0, 3)
        stop: StopRun | None = None
        for callback in callbacks:
            try:
                callback(strategy, report)
            except StopRun as exc:
                stop = stop or exc
        if stop is not None:
            log.info("run stopped after round %d of %d: %s", rnd, num_rounds, stop)
            break
    return result

