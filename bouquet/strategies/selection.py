"""Representative client selection by facility location (greedy submodular maximisation).

FedCG (Jiang et al., IEEE INFOCOM 2023) selects clients by submodular maximisation so that the
selected updates represent the whole population. Following DivFL (Balakrishnan et al., "Diverse
Client Selection for Federated Learning via Submodular Maximization", ICLR 2022), which FedCG's
description matches, the representativeness of a set ``S`` is the facility-location function

    F(S) = sum_i w_i * max_{j in S} (C - D_ij),        C = max_ij D_ij,

where ``D_ij = ||g_i - g_j||`` is the distance between the latest updates of clients ``i`` and
``j`` and ``w_i`` the weight of client ``i`` (1, or its data size). ``F`` is monotone and
submodular, so the greedy algorithm reaches at least ``(1 - 1/e)`` of the best ``k``-subset
(Nemhauser, Wolsey & Fisher 1978). Every client is represented by its nearest selected client; the
aggregation weight of a selected client is the total weight it represents.

Numpy only (server side).
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence

import numpy as np


def pairwise_distances(signals: np.ndarray) -> np.ndarray:
    """Euclidean distances between the rows of ``signals`` (n x d) as an n x n matrix."""
    x = np.asarray(signals, dtype=np.float64)
    sq = np.einsum("ij,ij->i", x, x)
    d2 = sq[:, None] + sq[None, :] - 2.0 * (x @ x.T)
    np.maximum(d2, 0.0, out=d2)
    np.fill_diagonal(d2, 0.0)
    return np.sqrt(d2)


def _weights(n: int, weights: np.ndarray | None) -> np.ndarray:
    return np.ones(n) if weights is None else np.asarray(weights, dtype=np.float64)


def _scale(dist: np.ndarray) -> float:
    c = float(dist.max()) if dist.size else 0.0
    return c if c > 0 else 1.0


def facility_value(dist: np.ndarray, selected: Sequence[int],
                   weights: np.ndarray | None = None) -> float:
    """``F(S) = sum_i w_i max_{j in S} (C - D_ij)`` (0 for the empty set).

    ``dist`` is n x n (rows: clients to represent, columns: the same clients as candidates).
    """
    if not selected:
        return 0.0
    w = _weights(dist.shape[0], weights)
    c = _scale(dist)
    return float(np.dot(w, np.max(c - dist[:, list(selected)], axis=1)))


def greedy_facility_location(
    dist: np.ndarray,
    k: int,
    *,
    candidates: Sequence[int] | None = None,
    weights: np.ndarray | None = None,
    cost: np.ndarray | None = None,
    cost_weight: float = 0.5,
    start_cost: float = 0.0,
) -> list[int]:
    """Greedy facility location that also charges the round time a pick adds, ``|S| <= k``.

    With ``cost=None`` this is plain greedy facility location. A cost (the predicted finish time
    of each client) makes the selection heterogeneity-aware: adding a client that would finish
    after the current slowest one is charged the extra round time. At every step both terms are
    put on one scale: the representativeness gain ``F(S + j) - F(S)`` divided by the largest gain
    among the remaining clients, the extra time divided by the largest extra time among them, so
    each lies in ``[0, 1]``, and the pick maximises ``gain - cost_weight * extra``. With
    ``cost_weight < 1`` the client that represents the most still scores ``>= 1 - cost_weight >
    0``, so one that adds no representativeness (score ``<= 0``) never beats it, however slow the
    representative is: time decides between clients of similar representativeness, it cannot
    make the selection ignore the uncovered part of the population (an additive penalty in
    seconds could, issue 14).

    Parameters
    ----------
    dist : ndarray
        n x n distances between clients' signals.
    k : int
        Most clients to select.
    candidates : sequence of int, optional
        Columns that may be selected (default: all).
    weights : ndarray, optional
        Weight ``w_i`` of each row (default: 1).
    cost : ndarray, optional
        Per-client cost (length n), charged through the maximum over the set.
    cost_weight : float
        Weight of the normalised extra time against the normalised gain, in ``[0, 1)``.
    start_cost : float
        Cost already committed before the first pick (clients chosen by other means).

    Returns
    -------
    list of int
        Selected indices in the order picked (exactly ``min(k, len(candidates))`` of them).

    """
    if not 0.0 <= cost_weight < 1.0:
        raise ValueError(f"cost_weight must lie in [0, 1), got {cost_weight}")
    n = dist.shape[0]
    cand = list(range(n)) if candidates is None else list(candidates)
    w = _weights(n, weights)
    c = _scale(dist)
    norm = float(w.sum()) * c or 1.0
    sim = c - dist  # similarity >= 0
    best_row = np.zeros(n)  # max_{j in S} sim_ij so far (0 for the empty set)
    slowest = start_cost
    chosen: list[int] = []
    for _ in range(min(k, len(cand))):
        remaining = [j for j in cand if j not in chosen]
        gains = (np.maximum(sim[:, remaining], best_row[:, None]) - best_row[:, None]).T @ w / norm
        if cost is not None:
            extra = np.maximum(np.asarray(cost)[remaining] - slowest, 0.0)
            top_gain, top_extra = float(gains.max()), float(extra.max())
            gains = (gains / top_gain if top_gain > 0 else gains) - cost_weight * (
                extra / top_extra if top_extra > 0 else extra)
        pick = remaining[int(np.argmax(gains))]  # ties -> lowest position in candidates
        chosen.append(pick)
        best_row = np.maximum(best_row, sim[:, pick])
        if cost is not None:
            slowest = max(slowest, float(cost[pick]))
    return chosen


def representation_weights(dist: np.ndarray, selected: Sequence[int],
                           weights: np.ndarray | None = None) -> np.ndarray:
    """Share of the total weight that each selected client represents (sums to 1).

    Every row is assigned to its nearest selected client (ties go to the one listed first).
    """
    if not selected:
        raise ValueError("no client selected")
    w = _weights(dist.shape[0], weights)
    nearest = np.argmin(dist[:, list(selected)], axis=1)
    share = np.bincount(nearest, weights=w, minlength=len(selected))
    total = share.sum()
    return share / total if total > 0 else np.full(len(selected), 1.0 / len(selected))


def uncovered_distance(dist: np.ndarray, selected: Sequence[int],
                       weights: np.ndarray | None = None) -> float:
    """``eps(S) = sum_i w_i min_{j in S} D_ij``: how badly ``S`` represents everyone."""
    w = _weights(dist.shape[0], weights)
    return float(np.dot(w, np.min(dist[:, list(selected)], axis=1)))


def brute_force_facility_location(dist: np.ndarray, k: int,
                                  weights: np.ndarray | None = None) -> tuple[list[int], float]:
    """Find the best ``k``-subset by exhaustive search (for tests on small instances)."""
    n = dist.shape[0]
    best: tuple[list[int], float] = ([], -np.inf)
    for subset in itertools.combinations(range(n), min(k, n)):
        val = facility_value(dist, subset, weights)
        if val > best[1]:
            best = (list(subset), val)
    return best
