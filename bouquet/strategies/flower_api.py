"""Flower's Strategy API in terms of bouquet's phases.

One job: map Flower's ``configure_train``/``aggregate_train``/``configure_evaluate``/
``aggregate_evaluate``/``start``/``summary`` onto the discovery, sampling, phases and admission
of :class:`~bouquet.strategies.base.BouquetStrategy`, so that Flower's own ``strategy.start(...)`` runs a
bouquet method. :class:`FlowerStrategyAPI` is the base class ``BouquetStrategy`` derives from;
:func:`use_flower_logging` makes bouquet's log lines show as Flower's do.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, cast

import numpy as np
from flwr.app import ArrayRecord, ConfigRecord, Message, MessageType, MetricRecord
from flwr.common.logger import console_handler
from flwr.serverapp import Grid
from flwr.serverapp.strategy import Result, Strategy

from bouquet.strategies.round_log import round_metrics
from bouquet.strategies.rounds import EvaluateFn, RoundCallback, run_rounds
from bouquet.strategies.transport import with_user_config

if TYPE_CHECKING:
    from bouquet.strategies.base import BouquetStrategy

log = logging.getLogger("bouquet")


def use_flower_logging(logger: logging.Logger = log) -> None:
    """Give ``logger`` Flower's console handler (once) so its lines show as Flower's do.

    Without a handler, Python prints only warnings of a library logger; with Flower's, the
    waiting and progress lines (INFO) appear in the ServerApp's log next to Flower's own.
    """
    if not any(h is console_handler for h in logger.handlers):
        logger.addHandler(console_handler)
    if logger.level == logging.NOTSET:
        logger.setLevel(logging.INFO)


use_flower_logging()


class FlowerStrategyAPI(Strategy):
    """Flower's :class:`~flwr.serverapp.strategy.Strategy` methods, written on bouquet's phases."""

    def configure_train(
        self, server_round: int, arrays: ArrayRecord, config: ConfigRecord, grid: Grid
    ) -> Iterable[Message]:
        """Flower API: this round's messages (``config`` is added to each message's config).

        ``arrays`` is the initial model when the constructor had none; afterwards the
        strategy's own global state is what is sent.
        """
        strategy = _bouquet(self)
        strategy.ensure_model(arrays)
        before = strategy.before_train(grid, server_round)
        if before is not None and strategy.skip_training():
            return strategy.send_phase(server_round, {}, {}, MessageType.TRAIN, before=before)
        chosen, by_pid = strategy.round_nodes(grid, server_round)
        contents = {pid: with_user_config(c, config)
                    for pid, c in strategy.configure_round(server_round, chosen).items()}
        return strategy.send_phase(server_round, contents, by_pid, MessageType.TRAIN, before=before)

    def aggregate_train(
        self, server_round: int, replies: Iterable[Message]
    ) -> tuple[ArrayRecord | None, MetricRecord | None]:
        """Flower API: admit and aggregate the replies (bad ones are dropped and counted).

        The MetricRecord holds the method's metrics and the round's counters (``clients``,
        ``rejected``, ``errors``, ``missing``, ``up_bytes``, ``down_bytes``).
        """
        strategy = _bouquet(self)
        rlog = strategy.admit_phase(MessageType.TRAIN, replies)
        return strategy.global_arrays(), round_metrics(rlog)

    def configure_evaluate(
        self, server_round: int, arrays: ArrayRecord, config: ConfigRecord, grid: Grid
    ) -> Iterable[Message]:
        """Flower API: the global state to ``fraction_evaluate`` of the candidate nodes.

        The candidates are the online nodes (:meth:`BouquetStrategy.evaluation_candidates`):
        under ``discovery="sampled"`` only those the run already knows, so no hello is sent.
        """
        strategy = _bouquet(self)
        if strategy.federation.fraction_evaluate <= 0:
            return []
        by_pid = strategy.evaluation_candidates(grid)
        available = sorted(by_pid)
        k = int(np.ceil(strategy.federation.fraction_evaluate * len(available)))
        k = max(min(k, len(available)), min(strategy.federation.min_evaluate_nodes, len(available)))
        rng = np.random.default_rng([strategy.common.seed, server_round, 11])
        chosen = sorted(available[i] for i in rng.choice(len(available), size=k, replace=False))
        return strategy.evaluation_messages(server_round, by_pid, chosen, config)

    def aggregate_evaluate(
        self, server_round: int, replies: Iterable[Message]
    ) -> MetricRecord | None:
        """Flower API: admit the evaluation replies; their weighted-average metrics."""
        strategy = _bouquet(self)
        if MessageType.EVALUATE not in strategy.pending:
            return None
        rlog = strategy.admit_phase(MessageType.EVALUATE, replies)
        return round_metrics(rlog)

    def start(  # type: ignore[override]
        self,
        grid: Grid,
        initial_arrays: ArrayRecord | None = None,
        num_rounds: int = 3,
        timeout: float = 3600,
        train_config: ConfigRecord | None = None,
        evaluate_config: ConfigRecord | None = None,
        evaluate_fn: EvaluateFn | None = None,
        *,
        first_round: int = 1,
        callbacks: Sequence[RoundCallback] = (),
    ) -> Result:
        """Flower's ``start()``: run the rounds and return Flower's ``Result``.

        The arguments are Flower's; ``initial_arrays`` may be None when the constructor had the
        model (or the strategy holds none). Keyword-only extras: ``first_round`` continues a
        run restored with :meth:`load_state_dict`; each of ``callbacks`` is called as
        ``callback(strategy, report)`` with a :class:`~bouquet.strategies.rounds.RoundReport`
        after every round (bouquet's results files, checkpoints and progress lines are such
        callbacks, :mod:`bouquet.apps.recorder`); a callback that raises
        :class:`~bouquet.strategies.rounds.StopRun` ends the run after that round
        (:class:`~bouquet.apps.target_stop.StopAtTarget` does at a target accuracy).
        """
        strategy = _bouquet(self)
        return run_rounds(strategy, grid, initial_arrays, num_rounds, timeout, train_config,
                          evaluate_config, evaluate_fn, first_round=first_round,
                          callbacks=callbacks)

    def summary(self) -> None:
        """Flower API: log the strategy's name and key settings."""
        strategy = _bouquet(self)
        log.info("%s (method %s, task %s, discovery %s)", type(self).__name__, strategy.method,
                 strategy.setup.task or "-", strategy.federation.discovery)


def _bouquet(strategy: FlowerStrategyAPI) -> BouquetStrategy:
    """The strategy as the :class:`~bouquet.strategies.base.BouquetStrategy` it always is."""
    return cast("BouquetStrategy", strategy)
