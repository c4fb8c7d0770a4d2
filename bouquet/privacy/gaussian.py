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
scipy cost about 1.2 s (issue 17). ``log Phi`` below ``-20`` comes from its asymptotic series
(``erfc`` there would reach subnormal floats, whose few bits made the second term too large and
``delta`` too small). :func:`delta_at` adds a margin for the rounding of both terms (their
difference cancels for small ``mu``), so it is an upper bound: calibration then adds at least
the noise needed and reporting states at least the true epsilon, never less.
"""

from __future__ import annotations

import math
import sys
from collections.abc import Callable

_SQRT2 = math.sqrt(2.0)
_LOG_SQRT_2PI = 0.5 * math.log(2.0 * math.pi)
#: Below this argument ``log Phi`` comes from its asymptotic series.
_TAIL = -20.0
#: Relative error allowed for each computed term of ``delta`` (a few ulp of ``erfc``, ``log``
#: and ``exp``, generously), on top of the error of ``exp``'s argument.
_TERM_ERROR = 1e-14
#: Smallest ``delta`` the inversions accept: above it the terms at the root are normal floats.
MIN_DELTA = 1e-300


def _log_phi(x: float) -> float:
    """``log Phi(x)`` of the standard normal CDF, to a relative error of a few ulp.

    For ``x < -20`` from the asymptotic series ``log phi(x) - log(-x) + log(1 - 1/x^2 + 3/x^4
    - ...)`` (twelve terms; the first left out is below ``1e-20`` there), elsewhere from
    :func:`math.erfc`, whose value there is at least ``Phi(-20) ~ 3e-89``, a normal float.
    """
    if x >= _TAIL:
        return math.log(0.5 * math.erfc(-x / _SQRT2))
    inv = 1.0 / (x * x)
    term, series = 1.0, 1.0
    for k in range(1, 12):
        term *= -(2 * k - 1) * inv
        series += term
    return -0.5 * x * x - math.log(-x) - _LOG_SQRT_2PI + math.log(series)


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
    """Smallest ``delta`` for which a ``mu``-GDP mechanism is ``(epsilon, delta)``-DP, rounded up.

    An upper bound, tight to about ``1e-14`` of its terms: each term of the profile is rounded
    up (the first) or down (the second) by a bound on its rounding error, so the result is
    never below the exact profile.

    Raises
    ------
    ValueError
        For a ``nan`` ``epsilon`` or ``mu``.

    """
    if math.isnan(epsilon) or math.isnan(mu):
        raise ValueError(f"delta_at needs numbers, got epsilon={epsilon}, mu={mu}")
    if mu <= 0.0:
        return 0.0
    if math.isinf(mu):
        return 1.0
    first = math.exp(_log_phi(-epsilon / mu + mu / 2.0))
    log_second = _log_phi(-epsilon / mu - mu / 2.0)
    arg = epsilon + log_second
    second = math.exp(arg) if arg > -math.inf else 0.0
    # exp's argument carries the rounding of log_second and of the sum: relative error in second
    second_error = _TERM_ERROR + 4.0 * sys.float_info.epsilon * (abs(epsilon) + abs(log_second))
    upper = first * (1.0 + _TERM_ERROR) - second * (1.0 - second_error)
    return min(1.0, max(0.0, upper))


def epsilon_at(mu: float, delta: float) -> float:
    """Smallest ``epsilon`` for which a ``mu``-GDP mechanism is ``(epsilon, delta)``-DP.

    ``delta(epsilon)`` decreases in ``epsilon``, so the root is unique; ``mu = inf`` (no noise)
    gives ``inf``. The result is the upper end of the last bisection step (never below the root).
    """
    if not MIN_DELTA <= delta < 1.0:
        raise ValueError(f"delta must lie in [{MIN_DELTA:g}, 1)")
    if math.isnan(mu):
        raise ValueError("mu is nan")
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
    if not 0.0 < epsilon < math.inf or not MIN_DELTA <= delta < 1.0:
        raise ValueError(f"need 0 < epsilon < inf and {MIN_DELTA:g} <= delta < 1")
    hi = 1.0
    while delta_at(epsilon, hi) < delta:
        hi *= 2.0
    mu = _bisect(lambda m: delta_at(epsilon, m) >= delta, 0.0, hi)[0]
    return mu * (1.0 - 1e-9)
