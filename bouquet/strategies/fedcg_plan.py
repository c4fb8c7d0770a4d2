"""One FedCG round plan: which clients, which keep-ratios, which aggregation weights.

FedCG (Jiang et al., IEEE INFOCOM 2023) decides client selection (submodular maximisation) and
compression ratios (a linear program) jointly, by an iteration between the two subproblems. The
paper gives neither the joint objective nor the stopping rule; this module is a *reconstruction*
(docs/methods/fedcg.md says so). With times measured in units of ``t_ref`` (the median dense finish
time of the candidates) the round objective is

    J(S, theta) = T / t_ref + lam_sel * eps(S) / (W C)
                  + lam_cmp * sum_{j in S} gamma_j phi(theta_j)

with ``T`` the round time, ``eps(S)`` the facility-location error of :mod:`.selection` (``W`` the
total client weight, ``C`` the largest distance), ``gamma`` the aggregation weights and ``phi``
the compression error term: ``(1 - theta) / theta`` (``lp_error="convex"``, the default) or
``1 - theta`` (``"linear"``, a pure LP). The iteration alternates:

1. selection given the ratios: greedy facility location with the predicted finish time charged
   on the gain's own scale (:func:`.selection.greedy_facility_location`, weight ``time_weight``
   < 1, so time cannot make the selection ignore representativeness). Every candidate is costed
   from its current profile (compute time, uplink): in the first iteration with the ratio the
   ratio program gives it when all candidates are planned together, afterwards with the largest
   ratio that lets it finish by the current ``T``. (A client's last keep-ratio is never used: a
   client last planned in the warm-up would keep looking as slow as it was then, and the same
   clients would be picked round after round, issue 14.)
2. ratios given the selection: :mod:`.ratio_lp` with ``lam = lam_cmp * t_ref``;

and stops when ``J`` no longer decreases or after ``max_iterations``; the best plan is kept.

Baseline modes reuse the same code: ``selection="random"`` (seeded uniform sampling, weights by
data size as in FedAvg) and ``ratios="uniform"`` (one fixed ratio for everybody).

Numpy/scipy only (server side).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence

import numpy as np

from bouquet.strategies import ratio_lp, selection


@dataclasses.dataclass(frozen=True)
class PlanSettings:
    """Knobs of the planner (see :class:`bouquet.strategies.fedcg.FedcgConfig` for their help)."""

    selection: str = "facility-location"  # or "random"
    ratios: str = "lp"  # or "uniform"
    lam_sel: float = 1.0
    lam_cmp: float = 0.01
    time_weight: float = 0.5
    lp_error: str = "convex"  # or "linear"
    theta_min: float = 0.01
    uniform_ratio: float = 0.1
    max_iterations: int = 5
    lp_form: str = "tradeoff"  # or "budget"
    budget: float = 1.0  # round-time budget in units of t_ref for lp_form="budget"


@dataclasses.dataclass
class ClientTimes:
    """Per-candidate planning inputs (aligned lists)."""

    pids: list[int]
    compute_s: np.ndarray
    upload_s: np.ndarray

    def index(self) -> dict[int, int]:
        """Position of each partition id."""
        return {p: i for i, p in enumerate(self.pids)}


@dataclasses.dataclass
class RoundPlan:
    """The decision for one round.

    Attributes
    ----------
    selected : list[int]
        Partition ids, sorted.
    theta, gamma, finish_s : dict[int, float]
        Keep-ratio, aggregation weight and predicted finish time per selected partition.
    round_time : float
        Predicted round time (slowest selected client), seconds.
    objective : float
        ``J`` of the plan (NaN for plans not made by the joint iteration).
    iterations : int
        Selection/ratio iterations run.

    """

    selected: list[int]
    theta: dict[int, float]
    gamma: dict[int, float]
    finish_s: dict[int, float]
    round_time: float
    objective: float = float("nan")
    iterations: int = 0


def t_ref(times: ClientTimes) -> float:
    """Median dense finish time of the candidates (the time unit of ``J``)."""
    ref = float(np.median(times.compute_s + times.upload_s))
    return ref if ref > 0 else 1.0


def ratios_for(times: ClientTimes, members: Sequence[int], gamma: np.ndarray,
               s: PlanSettings) -> tuple[np.ndarray, float]:
    """Keep-ratios and round time of ``members`` (positions in ``times``)."""
    idx = list(members)
    a, u = times.compute_s[idx], times.upload_s[idx]
    if s.ratios == "uniform":
        theta = np.full(len(idx), s.uniform_ratio)
        return theta, float(np.max(a + theta * u))
    ref = t_ref(times)
    if s.lp_form == "budget":
        sol = ratio_lp.for_budget(a, u, s.budget * ref, s.theta_min)
    elif s.lp_error == "convex":
        sol = ratio_lp.solve_convex(a, u, gamma, s.lam_cmp * ref, s.theta_min)
    else:
        sol = ratio_lp.solve(a, u, gamma, s.lam_cmp * ref, s.theta_min)
    return sol.theta, sol.round_time


def error_term(theta: np.ndarray, s: PlanSettings) -> np.ndarray:
    """``phi(theta)`` of ``J``: ``(1 - theta) / theta`` (convex) or ``1 - theta`` (linear)."""
    return (1.0 - theta) / theta if s.lp_error == "convex" else 1.0 - theta


def _make_plan(times: ClientTimes, members: Sequence[int], gamma: np.ndarray, theta: np.ndarray,
               objective: float, iterations: int) -> RoundPlan:
    finish = times.compute_s[list(members)] + theta * times.upload_s[list(members)]
    pids = [times.pids[i] for i in members]
    order = np.argsort(pids)
    return RoundPlan(
        selected=[pids[i] for i in order],
        theta={pids[i]: float(theta[i]) for i in order},
        gamma={pids[i]: float(gamma[i]) for i in order},
        finish_s={pids[i]: float(finish[i]) for i in order},
        round_time=float(finish.max()),
        objective=objective,
        iterations=iterations,
    )


def plan_everyone(times: ClientTimes, weights: Mapping[int, float], s: PlanSettings) -> RoundPlan:
    """Warm-up: every candidate trains; weights proportional to ``weights``."""
    members = list(range(len(times.pids)))
    w = np.array([weights.get(p, 1.0) for p in times.pids], dtype=np.float64)
    gamma = w / w.sum()
    theta, _ = ratios_for(times, members, gamma, s)
    return _make_plan(times, members, gamma, theta, float("nan"), 0)


def plan_random(times: ClientTimes, k: int, sizes: Mapping[int, float], s: PlanSettings,
                rng: np.random.Generator) -> RoundPlan:
    """Seeded uniform sampling of ``k`` candidates, FedAvg weights (data sizes)."""
    n = len(times.pids)
    members = sorted(int(i) for i in rng.choice(n, size=min(k, n), replace=False))
    w = np.array([max(sizes.get(times.pids[i], 1.0), 1e-12) for i in members])
    gamma = w / w.sum()
    theta, _ = ratios_for(times, members, gamma, s)
    return _make_plan(times, members, gamma, theta, float("nan"), 0)


def plan_joint(
    times: ClientTimes,
    k: int,
    signals: Mapping[int, np.ndarray],
    weights: Mapping[int, float],
    s: PlanSettings,
    rng: np.random.Generator,
) -> RoundPlan:
    """FedCG's alternation between facility-location selection and the ratio LP.

    Parameters
    ----------
    times : ClientTimes
        Candidates (online partitions) with their compute and dense-upload seconds.
    k : int
        Clients per round.
    signals : Mapping[int, ndarray]
        Latest update known for each partition (also offline ones: they must be represented).
    weights : Mapping[int, float]
        Weight of each partition in the facility-location function (1, or its data size).
    s : PlanSettings
        Weights of the objective, ratio mode, iteration limit.
    rng : numpy.random.Generator
        Orders the candidates that have no signal yet (they are picked first so they get one).

    """
    pos = times.index()
    fresh = [p for p in times.pids if p not in signals]
    fresh = [fresh[i] for i in rng.permutation(len(fresh))][:k]
    universe = sorted(signals)
    known_cands = [universe.index(p) for p in times.pids if p in signals]
    if universe:
        mat = np.stack([np.asarray(signals[p], dtype=np.float64).reshape(-1) for p in universe])
        dist = selection.pairwise_distances(mat)
    else:
        dist = np.zeros((0, 0))
    w_univ = np.array([weights.get(p, 1.0) for p in universe], dtype=np.float64)
    w_total = float(w_univ.sum()) + sum(weights.get(p, 1.0) for p in fresh)
    scale = float(dist.max()) if dist.size and dist.max() > 0 else 1.0
    ref = t_ref(times)
    fresh_pos = [pos[p] for p in fresh]
    slots = k - len(fresh)

    def weights_of(members_univ: list[int]) -> np.ndarray:
        share = (selection.representation_weights(dist, members_univ, w_univ) * w_univ.sum()
                 if members_univ else np.zeros(0))
        raw = np.concatenate([[weights.get(p, 1.0) for p in fresh], share])
        return raw / raw.sum()

    def eps_of(members_univ: list[int]) -> float:
        if not universe:
            return 0.0
        if not members_univ:
            return float(w_univ.sum() * scale)
        return selection.uncovered_distance(dist, members_univ, w_univ)

    # First costing: every candidate at the ratio the ratio program gives it now, all planned
    # together (their current profiles only, never what they were given in an earlier round).
    everyone = list(range(len(times.pids)))
    w_all = np.array([weights.get(p, 1.0) for p in times.pids], dtype=np.float64)
    theta_all, _ = ratios_for(times, everyone, w_all / max(float(w_all.sum()), 1e-12), s)
    fill_time: float | None = None
    best: RoundPlan | None = None
    iterations = 0
    for it in range(max(1, s.max_iterations)):
        iterations = it + 1
        if fill_time is not None and s.ratios == "lp":
            theta_all = ratio_lp.fill_to(fill_time, times.compute_s, times.upload_s, s.theta_min)
        elif s.ratios == "uniform":
            theta_all = np.full(len(times.pids), s.uniform_ratio)
        cost = (times.compute_s + theta_all * times.upload_s) / ref
        start = float(max((cost[i] for i in fresh_pos), default=0.0))
        picked_univ: list[int] = []
        if slots > 0 and known_cands:
            cost_univ = np.zeros(len(universe))
            for p in times.pids:
                if p in signals:
                    cost_univ[universe.index(p)] = cost[pos[p]]
            picked_univ = selection.greedy_facility_location(
                dist, slots, candidates=known_cands, weights=w_univ, cost=cost_univ,
                cost_weight=s.time_weight, start_cost=start,
            )
        members = fresh_pos + [pos[universe[j]] for j in picked_univ]
        gamma = weights_of(picked_univ)
        theta, round_s = ratios_for(times, members, gamma, s)
        value = (round_s / ref + s.lam_sel * eps_of(picked_univ) / (max(w_total, 1e-12) * scale)
                 + s.lam_cmp * float(np.dot(gamma, error_term(theta, s))))
        plan = _make_plan(times, members, gamma, theta, value, iterations)
        if best is not None and value >= best.objective - 1e-9:
            break
        best = plan
        fill_time = round_s
        if s.ratios == "uniform":
            break  # the ratios do not depend on the selection: nothing to alternate
    assert best is not None
    best.iterations = iterations
    return best
