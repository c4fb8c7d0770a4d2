"""One privacy accountant per client that lives across rounds (client-only; Opacus).

A federated client releases an update every round it takes part in. The privacy loss of all of
them composes, so the accountant must outlive a round: :class:`ClientAccountant` keeps Opacus's
RDP accountant history (``[(noise_multiplier, sample_rate, steps), ...]``) as JSON in
``context.state`` (``NodeState(context, "dp")``) and reports the cumulative epsilon of everything
this client has released. Reference: Mironov, "Renyi Differential Privacy", CSF 2017; Opacus
(Yousefpour et al., 2021).

What one history entry stands for depends on how the rows of a step are chosen
(:func:`dp_events`): a Poisson-subsampled Gaussian per step, or, for fixed-size shuffled batches
(which the subsampled analysis does not cover), one full Gaussian per epoch touched.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from typing import Any

import numpy as np
from opacus.accountants import RDPAccountant
from opacus.accountants.analysis import rdp as rdp_analysis
from opacus.accountants.utils import get_noise_multiplier

from bouquet.node_state import NodeState
from bouquet.privacy.history import parse_history

STATE_NAMESPACE = "dp"
STATE_NAME = "accountant"


#: The record (in the accountant's namespace) of the noise calibration a client's releases use.
CALIBRATION_NAME = "calibration"


class PrivacyBudgetExceeded(RuntimeError):
    """A client refuses to train because the round would take it beyond its budget."""


class CalibrationChanged(PrivacyBudgetExceeded):
    """A client refuses a round whose noise calibration differs from its earlier releases'."""


def check_delta(delta: float, n: int, who: str = "client") -> None:
    """Refuse ``delta >= 1 / n``: such a delta allows releasing one of the n rows in the clear."""
    if not 0.0 < delta < 1.0 / max(n, 1):
        raise PrivacyBudgetExceeded(
            f"{who}: refusing to train: dp.delta {delta:g} must be in (0, 1/n) = (0, "
            f"{1.0 / max(n, 1):.3g}) for the {n} local training rows"
        )


class ClientAccountant:
    """Cumulative RDP accounting for one client, persisted in a :class:`NodeState`.

    Parameters
    ----------
    state : NodeState or None
        Where the history is stored between rounds (None: in memory only).

    """

    def __init__(self, state: NodeState | None = None) -> None:
        self.state = state
        self.history: list[tuple[float, float, int]] = []
        if state is not None:
            raw = state.values(STATE_NAME).get("history", "[]")
            self.history = parse_history(raw)

    @staticmethod
    def epsilon_of(history: list[tuple[float, float, int]], delta: float) -> float:
        """Epsilon of a history at ``delta`` (0 for an empty history)."""
        if not history:
            return 0.0
        acc = RDPAccountant()
        acc.history = list(history)
        return float(acc.get_epsilon(delta))

    def epsilon(self, delta: float) -> float:
        """Cumulative epsilon of everything recorded so far."""
        return self.epsilon_of(self.history, delta)

    def with_steps(self, noise_multiplier: float, sample_rate: float, steps: int
                   ) -> list[tuple[float, float, int]]:
        """The history after ``steps`` more steps (not recorded)."""
        hist = list(self.history)
        if steps <= 0:
            return hist
        if hist and hist[-1][0] == noise_multiplier and hist[-1][1] == sample_rate:
            s, q, n = hist.pop()
            hist.append((s, q, n + steps))
        else:
            hist.append((noise_multiplier, sample_rate, steps))
        return hist

    def check(self, noise_multiplier: float, sample_rate: float, steps: int, delta: float,
              budget: float, who: str = "client") -> float:
        """Raise :class:`PrivacyBudgetExceeded` if the steps would exceed ``budget`` (>0).

        Returns the epsilon the client would have after them.
        """
        after = self.epsilon_of(self.with_steps(noise_multiplier, sample_rate, steps), delta)
        if budget > 0 and after > budget * (1 + 1e-9):
            raise PrivacyBudgetExceeded(
                f"{who}: refusing to train: {steps} more DP-SGD step(s) (noise multiplier "
                f"{noise_multiplier:.4g}, sample rate {sample_rate:.4g}) would raise epsilon from "
                f"{self.epsilon(delta):.4g} to {after:.4g}, above the budget {budget:g} "
                f"(delta {delta:g})"
            )
        return after

    def record(self, noise_multiplier: float, sample_rate: float, steps: int) -> None:
        """Add ``steps`` steps and persist the history."""
        self.history = self.with_steps(noise_multiplier, sample_rate, steps)
        if self.state is not None:
            self.state.set_values(STATE_NAME, {"history": json.dumps(self.history)})


def keep_calibration(state: NodeState, noise_multiplier: float, rounds: int,
                     who: str = "client") -> None:
    """Record the calibration of a client's first release; refuse another one later in the run.

    ``rounds`` is the number of rounds the noise is calibrated for (target-epsilon mode; 0 when
    the noise multiplier is fixed and depends on no number of rounds). The record lives in the
    node's ``context.state`` (and so in its node memory on disk, across a server resume); a
    new run under the same name does not inherit it (only the accountant's history is carried).
    A server that resumes with another ``num-server-rounds`` (or alters the run config mid-run)
    would make this client release its later rounds with another noise than its earlier ones.

    Raises
    ------
    CalibrationChanged
        When the client already released with another noise multiplier or number of rounds.

    """
    held = state.values(CALIBRATION_NAME)
    if not held:
        state.set_values(CALIBRATION_NAME, {"noise-multiplier": float(noise_multiplier),
                                            "rounds": int(rounds)})
        return
    was_sigma = float(held.get("noise-multiplier", noise_multiplier))
    was_rounds = int(held.get("rounds", rounds))
    if was_rounds != rounds:
        raise CalibrationChanged(
            f"{who}: refusing to train: this client's earlier releases were calibrated for "
            f"num-server-rounds={was_rounds} (noise multiplier {was_sigma:.4g}); this message's "
            f"run config says num-server-rounds={rounds} (noise multiplier "
            f"{noise_multiplier:.4g}), which would change the noise mid-run")
    if not math.isclose(was_sigma, noise_multiplier, rel_tol=1e-9):
        raise CalibrationChanged(
            f"{who}: refusing to train: this client's earlier releases used noise multiplier "
            f"{was_sigma:.6g}; this message's run config gives {noise_multiplier:.6g}, which "
            "would change the noise mid-run")


def sweep_epsilon(runs: Sequence[Sequence[Sequence[tuple[float, float, int]]]],
                  delta: float) -> float:
    """Epsilon of several DP-SGD runs that read the same training rows (a hyperparameter sweep).

    Each run's epsilon covers that run alone. A user who trains several models on the same
    private rows (one per learning rate of a grid, say) and keeps the best one releases, through
    that choice, something of every run: Papernot and Steinke ("Hyperparameter Tuning with Renyi
    Differential Privacy", ICLR 2022) show that the choice can leak more than one run does. This
    bounds it by plain composition of all the runs, valid for any rule of choice, and growing
    with the size of the grid (their randomised number of runs would grow more slowly; it is
    not what a fixed grid does). Each run is given as its clients' accountant histories
    (:class:`ClientAccountant`); a row sits on at most one client of a run, though not
    necessarily the same client in every run, so each run counts with the largest Renyi
    divergence of any of its clients, order by order, and the runs' curves add (Mironov,
    "Renyi Differential Privacy", CSF 2017, Prop. 1) before one conversion at ``delta``, the one
    Opacus' accountant uses. Data that chooses among the runs (held-out rows) is not covered.

    Parameters
    ----------
    runs : sequence of runs, each a sequence of client histories
        ``[(noise_multiplier, sample_rate, steps), ...]`` per client of each run.
    delta : float
        The delta of the whole sweep, in (0, 1).

    Returns
    -------
    float
        An upper bound on the sweep's epsilon at ``delta`` (0 when nothing was released).

    """
    if not 0 < delta < 1:
        raise ValueError(f"delta must be in (0, 1), got {delta!r}")
    orders = list(RDPAccountant.DEFAULT_ALPHAS)
    total = np.zeros(len(orders))
    for clients in runs:
        curves = [_rdp_curve(history, orders) for history in clients]
        if curves:
            total += np.max(curves, axis=0)
    if not total.any():
        return 0.0
    eps, _ = rdp_analysis.get_privacy_spent(orders=orders, rdp=total, delta=delta)
    return float(eps)


def _rdp_curve(history: Sequence[tuple[float, float, int]], orders: list[float]) -> np.ndarray:
    """Renyi divergence of one client's history at each of ``orders`` (Opacus' analysis)."""
    total = np.zeros(len(orders))
    for sigma, q, steps in history:
        if steps > 0:
            total += np.asarray(rdp_analysis.compute_rdp(q=q, noise_multiplier=sigma,
                                                         steps=steps, orders=orders))
    return total


def dp_events(sampling: str, batch_size: int, n: int, steps: int) -> tuple[float, int]:
    """``(sample_rate, count)`` that the RDP accountant records for ``steps`` DP-SGD steps.

    Adjacency is zero-out (one example replaced by one that contributes nothing), which for
    Poisson sampling is the add/remove adjacency Opacus' accountant assumes.

    * ``poisson``: each row joins a step independently with probability ``q = B / n``: ``steps``
      Poisson-subsampled Gaussian mechanisms at rate q.
    * ``shuffle``: batches of ``B`` rows of a fresh permutation per epoch (restarting each round).
      Every example is in exactly one batch per epoch and the subsampling amplification does not
      apply, so each epoch that the steps touch counts as one Gaussian mechanism on the full
      data (rate 1): ``ceil(steps / ceil(n / B))`` of them.

    Parameters
    ----------
    sampling : str
        ``dp.sampling``.
    batch_size, n, steps : int
        Batch size B, local training rows n, steps this round.

    """
    if steps <= 0:
        return 1.0, 0
    if sampling == "shuffle":
        per_epoch = max(1, math.ceil(max(n, 1) / batch_size))
        return 1.0, math.ceil(steps / per_epoch)
    if sampling != "poisson":
        raise ValueError(f"unknown dp.sampling {sampling!r}")
    return min(1.0, batch_size / max(n, 1)), steps


def calibrate_noise(target_epsilon: float, delta: float, sample_rate: float, steps: int) -> float:
    """Noise multiplier with which ``steps`` steps at ``sample_rate`` end at ``target_epsilon``."""
    return float(get_noise_multiplier(target_epsilon=target_epsilon, target_delta=delta,
                                      sample_rate=sample_rate, steps=steps, accountant="rdp",
                                      epsilon_tolerance=0.005))


def noise_for(dp: Any, sample_rate: float, total_steps: int) -> float:
    """The run's noise multiplier: ``dp.noise-multiplier`` or calibrated to ``dp.target-epsilon``."""
    if dp.target_epsilon > 0:
        return calibrate_noise(dp.target_epsilon, dp.delta, sample_rate, total_steps)
    return float(dp.noise_multiplier)


def budget_of(dp: Any) -> float:
    """The epsilon a client may not exceed (0: none)."""
    return float(dp.target_epsilon or dp.max_epsilon)
