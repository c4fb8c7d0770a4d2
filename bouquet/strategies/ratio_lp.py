"""Per-client compression ratios of FedCG as a linear program (scipy's HiGHS).

FedCG (Jiang et al., IEEE INFOCOM 2023) decides, for the selected clients, how much of its update
each one keeps so that slow links send less and nobody straggles. The paper states that this
subproblem is a linear program; its exact form is not public, so the program below is a
*reconstruction* (see docs/methods/fedcg.md):

    minimise    T + lam * sum_i w_i (1 - theta_i)
    subject to  a_i + theta_i * u_i <= T      for every selected client i
                theta_min <= theta_i <= 1

``a_i`` is client i's computation time, ``u_i`` the time of a dense upload, ``theta_i`` the
fraction of coordinates top-k keeps, ``w_i`` its aggregation weight and ``T`` the round time.
``1 - theta_i`` is top-k's contraction factor (the compression error term of the bound).

At the optimum every client that is not at a bound finishes exactly at ``T``; given ``T`` the best
ratios are ``clip((T - a_i) / u_i, theta_min, 1)``. The objective is then piecewise linear and
convex in ``T`` with kinks where a client reaches a bound, so the minimum lies at a kink:
:func:`closed_form` evaluates them all (the test oracle); :func:`solve` calls HiGHS. The variant
with a fixed time budget (maximise the weighted kept fraction subject to ``T <= budget``) is
:func:`for_budget`.

The linear error term makes the optimum bang-bang: ``T`` sits at a kink, so a small change in one
client's uplink can move everybody's ratio from near ``theta_min`` to near 1 (issue 14 measured
swings between ~4 % and ~90 %). :func:`solve_convex` replaces ``1 - theta`` by the compression
variance factor ``(1 - theta) / theta`` (``omega = d/k - 1`` of a ``k``-of-``d`` sparsifier, the
factor by which compression inflates the noise term in the bounds of compressed SGD with error
feedback, Stich, Cordonnier & Jaggi, NeurIPS 2018):

    minimise    T + lam * sum_i w_i (1 - theta_i) / theta_i      (same constraints)

The term is convex and grows without bound as ``theta_i -> 0``, so no client is pushed to the
floor unless its time requires it, and the optimum moves continuously with the inputs. Given
``T`` the best ratios are again ``min(1, (T - a_i) / u_i)`` (every client not at 1 finishes at
``T``); on ``T >= max_i(a_i + theta_min u_i)`` these are concave in ``T``, the objective is convex
in ``T``, and a bounded scalar search finds it.
"""

from __future__ import annotations

import dataclasses

import numpy as np

# scipy.optimize (about 0.9 s to import) is imported where a plan is solved, not with the module:
# a node imports FedcgConfig through the method registry and never solves a plan.


@dataclasses.dataclass(frozen=True)
class RatioSolution:
    """Keep-ratios, the round time they give and the LP objective."""

    theta: np.ndarray
    round_time: float
    objective: float


def _inputs(compute_s: np.ndarray, upload_s: np.ndarray, weights: np.ndarray
            ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    a = np.asarray(compute_s, dtype=np.float64)
    u = np.asarray(upload_s, dtype=np.float64)
    w = np.asarray(weights, dtype=np.float64)
    if not (a.shape == u.shape == w.shape and a.ndim == 1 and a.size > 0):
        raise ValueError("compute_s, upload_s and weights must be equal-length non-empty vectors")
    if np.any(u <= 0) or np.any(a < 0) or np.any(w < 0):
        raise ValueError("upload times must be positive, compute times and weights non-negative")
    return a, u, w


def fill_to(round_time: float, compute_s: np.ndarray, upload_s: np.ndarray,
            theta_min: float) -> np.ndarray:
    """Return the largest ratios that let every client finish by ``round_time`` (within bounds)."""
    return np.clip((round_time - compute_s) / upload_s, theta_min, 1.0)


def objective(round_time: float, theta: np.ndarray, weights: np.ndarray, lam: float) -> float:
    """``T + lam * sum_i w_i (1 - theta_i)``."""
    return float(round_time + lam * np.dot(weights, 1.0 - theta))


def _finish(theta: np.ndarray, a: np.ndarray, u: np.ndarray) -> float:
    return float(np.max(a + theta * u))


def closed_form(compute_s: np.ndarray, upload_s: np.ndarray, weights: np.ndarray, lam: float,
                theta_min: float) -> RatioSolution:
    """Exact optimum by enumerating the kinks of the objective as a function of ``T``.

    Parameters
    ----------
    compute_s, upload_s, weights : ndarray
        Per selected client: computation seconds, dense-upload seconds, aggregation weight.
    lam : float
        Seconds of round time worth one unit of weighted compression error.
    theta_min : float
        Smallest keep-ratio.

    """
    a, u, w = _inputs(compute_s, upload_s, weights)
    floor = float(np.max(a + theta_min * u))  # no T below this is feasible
    kinks = np.concatenate([a + theta_min * u, a + u, [floor]])
    kinks = kinks[kinks >= floor]
    best: RatioSolution | None = None
    for t in np.unique(kinks):
        theta = fill_to(float(t), a, u, theta_min)
        t_eff = _finish(theta, a, u)
        val = objective(t_eff, theta, w, lam)
        if best is None or val < best.objective - 1e-12:
            best = RatioSolution(theta, t_eff, val)
    assert best is not None
    return best


def solve(compute_s: np.ndarray, upload_s: np.ndarray, weights: np.ndarray, lam: float,
          theta_min: float) -> RatioSolution:
    """Solve the ratio LP with HiGHS (``scipy.optimize.linprog``).

    Clients whose weight leaves them indifferent are then filled up to the round time (more
    coordinates at no cost in time), which is also what the closed form returns.

    Parameters
    ----------
    compute_s, upload_s, weights : ndarray
        Per selected client: computation seconds, dense-upload seconds, aggregation weight.
    lam : float
        Seconds of round time worth one unit of weighted compression error.
    theta_min : float
        Smallest keep-ratio.

    """
    from scipy.optimize import linprog

    a, u, w = _inputs(compute_s, upload_s, weights)
    m = a.size
    # Variables x = [T, theta_1..theta_m]; the constant lam * sum(w) is added back afterwards.
    c = np.concatenate([[1.0], -lam * w])
    a_ub = np.zeros((m, m + 1))
    a_ub[:, 0] = -1.0
    a_ub[np.arange(m), np.arange(m) + 1] = u
    b_ub = -a
    bounds = [(0.0, None)] + [(theta_min, 1.0)] * m
    res = linprog(c, A_ub=a_ub, b_ub=b_ub, bounds=bounds, method="highs")
    if res.status != 0:
        raise RuntimeError(f"ratio LP failed: {res.message}")
    t = float(res.x[0])
    theta = fill_to(t, a, u, theta_min)
    t_eff = _finish(theta, a, u)
    return RatioSolution(theta, t_eff, objective(t_eff, theta, w, lam))


def convex_objective(round_time: float, theta: np.ndarray, weights: np.ndarray,
                     lam: float) -> float:
    """``T + lam * sum_i w_i (1 - theta_i) / theta_i``."""
    return float(round_time + lam * np.dot(weights, (1.0 - theta) / theta))


def solve_convex(compute_s: np.ndarray, upload_s: np.ndarray, weights: np.ndarray, lam: float,
                 theta_min: float) -> RatioSolution:
    """Minimise ``T + lam sum_i w_i (1 - theta_i)/theta_i`` (the module docstring's convex form).

    Parameters
    ----------
    compute_s, upload_s, weights : ndarray
        Per selected client: computation seconds, dense-upload seconds, aggregation weight.
    lam : float
        Seconds of round time worth one unit of weighted compression variance.
    theta_min : float
        Smallest keep-ratio.

    """
    a, u, w = _inputs(compute_s, upload_s, weights)
    lo = float(np.max(a + theta_min * u))
    hi = max(float(np.max(a + u)), lo)

    def value(t: float) -> float:
        theta = fill_to(t, a, u, theta_min)
        return convex_objective(_finish(theta, a, u), theta, w, lam)

    best_t = lo if value(lo) <= value(hi) else hi
    if hi > lo:
        from scipy.optimize import minimize_scalar

        res = minimize_scalar(value, bounds=(lo, hi), method="bounded",
                              options={"xatol": 1e-9 * max(hi, 1.0)})
        if res.success and value(float(res.x)) < value(best_t):
            best_t = float(res.x)
    theta = fill_to(best_t, a, u, theta_min)
    t_eff = _finish(theta, a, u)
    return RatioSolution(theta, t_eff, convex_objective(t_eff, theta, w, lam))


def for_budget(compute_s: np.ndarray, upload_s: np.ndarray, budget_s: float,
               theta_min: float) -> RatioSolution:
    """Budget variant: the largest ratios that finish by ``budget_s`` (theta_min where none can).

    Maximising ``sum_i w_i theta_i`` subject to ``a_i + theta_i u_i <= budget`` separates per
    client, so its solution does not depend on the weights. The returned objective is 0.
    """
    a = np.asarray(compute_s, dtype=np.float64)
    u = np.asarray(upload_s, dtype=np.float64)
    theta = fill_to(budget_s, a, u, theta_min)
    return RatioSolution(theta, _finish(theta, a, u), 0.0)
