"""Exact (epsilon, delta) of composed Gaussian mechanisms (numpy/scipy only; servers import it).

A Gaussian mechanism with L2 sensitivity ``s`` and noise standard deviation ``sigma`` is
``mu``-Gaussian differentially private with ``mu = s / sigma`` (Dong, Roth & Su, "Gaussian
Differential Privacy", JRSS-B 2022), and any adaptive composition of Gaussian mechanisms is
``mu``-GDP with ``mu = sqrt(sum_i mu_i^2)`` -- exactly, not as a bound. Its privacy profile is the
analytic Gaussian mechanism's (Balle & Wang, "Improving the Gaussian Mechanism for Differential
Privacy", ICML 2018, Thm. 8):

``delta(epsilon) = Phi(-epsilon/mu + mu/2) - e^epsilon Phi(-epsilon/mu - mu/2)``,

so the (epsilon, delta) pairs computed here are the tightest ones that hold for the mechanism.
The bandit methods use this both to calibrate their noise and to report what the noise they
actually added costs; the privacy tests check it against dp-accounting's PLD accountant.

Standard library only: ``Phi`` comes from :func:`math.erfc` (in logs, as scipy's ``logcdf``
would give it, for the second term) and the inverses from bisection. A silo calibrates its noise
on every training message, and a node runs each message in a fresh process, where importing
scipy cost about 1.2 s (issue 17). Where ``Phi`` underflows (an argument below about -38) the
second term is taken as 0, which overstates ``delta``: calibration then adds more noise and
reporting states a larger epsilon, never the reverse.
"""

from __future__ import annotations

import math
from collections.abc import Callable

_SQRT2 = math.sqrt(2.0)


def _log_phi(x: float) -> float:
    """``log Phi(x)`` of the standard normal CDF (``-inf`` where it underflows)."""
    value = 0.5 * math.erfc(-x / _SQRT2)
    return math.log(value) if value > 0.0 else -math.inf


def _bisect(f: Callable[[float], bool], lo: float, hi: float) -> tuple[float, float]:
    """Shrink ``[lo, hi]`` with ``f(lo)`` false and ``f(hi)`` true to adjacent floats."""
    while True:
        mid = (lo + hi) / 2.0
        if mid <= lo or mid >= hi:
            return lo, hi
        if f(mid):
            hi = mid
        else:
            lo = mid


def delta_at(epsilon: float, mu: float) -> float:
    """Smallest ``delta`` for which a ``mu``-GDP mechanism is ``(epsilon, delta)``-DP."""
    if mu <= 0.0:
        return 0.0
    if math.isinf(mu):
        return 1.0
    first = math.exp(_log_phi(-epsilon / mu + mu / 2.0))
    log_second = _log_phi(-epsilon / mu - mu / 2.0)
    second = math.exp(epsilon + log_second) if log_second > -math.inf else 0.0
    return max(0.0, first - second)


def epsilon_at(mu: float, delta: float) -> float:
    """Smallest ``epsilon`` for which a ``mu``-GDP mechanism is ``(epsilon, delta)``-DP.

    ``delta(epsilon)`` decreases in ``epsilon``, so the root is unique; ``mu = inf`` (no noise)
    gives ``inf``. The result is the upper end of the last bisection step (never below the root).
    """
    if not 0.0 < delta < 1.0:
        raise ValueError("delta must lie in (0, 1)")
    if mu <= 0.0:
        return 0.0
    if math.isinf(mu):
        return math.inf
    if delta_at(0.0, mu) <= delta:
        return 0.0
    hi = mu * mu / 2.0 + mu * math.sqrt(2.0 * math.log(1.0 / delta)) + 1.0
    while delta_at(hi, mu) > delta:  # pragma: no cover - the bracket above always holds
        hi *= 2.0
    return _bisect(lambda e: delta_at(e, mu) <= delta, 0.0, hi)[1]


def mu_for(epsilon: float, delta: float) -> float:
    """Largest ``mu`` for which ``mu``-GDP implies ``(epsilon, delta)``-DP.

    ``delta(epsilon)`` increases in ``mu``; the result is the lower end of the last bisection
    step, rounded down by a further ``1e-9``, so that the calibration it feeds never overshoots
    the target.
    """
    if epsilon <= 0.0 or not 0.0 < delta < 1.0:
        raise ValueError("need epsilon > 0 and 0 < delta < 1")
    hi = 1.0
    while delta_at(epsilon, hi) < delta:
        hi *= 2.0
    mu = _bisect(lambda m: delta_at(epsilon, m) >= delta, 0.0, hi)[0]
    return mu * (1.0 - 1e-9)
