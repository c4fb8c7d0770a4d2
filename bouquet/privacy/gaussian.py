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
"""

from __future__ import annotations

import math

# scipy.stats and scipy.optimize (about 1.2 s to import) are imported where they are used, not
# with the module: a node imports this module through the method registry's config classes and
# may never compute a privacy profile (issue 17, target 3).


def delta_at(epsilon: float, mu: float) -> float:
    """Smallest ``delta`` for which a ``mu``-GDP mechanism is ``(epsilon, delta)``-DP."""
    if mu <= 0.0:
        return 0.0
    if math.isinf(mu):
        return 1.0
    from scipy.stats import norm

    first = float(norm.cdf(-epsilon / mu + mu / 2.0))
    second = math.exp(epsilon + float(norm.logcdf(-epsilon / mu - mu / 2.0)))
    return max(0.0, first - second)


def epsilon_at(mu: float, delta: float) -> float:
    """Smallest ``epsilon`` for which a ``mu``-GDP mechanism is ``(epsilon, delta)``-DP.

    ``delta(epsilon)`` decreases in ``epsilon``, so the root is unique; ``mu = inf`` (no noise)
    gives ``inf``.
    """
    if not 0.0 < delta < 1.0:
        raise ValueError("delta must lie in (0, 1)")
    if mu <= 0.0:
        return 0.0
    if math.isinf(mu):
        return math.inf
    if delta_at(0.0, mu) <= delta:
        return 0.0
    from scipy.optimize import brentq

    hi = mu * mu / 2.0 + mu * math.sqrt(2.0 * math.log(1.0 / delta)) + 1.0
    while delta_at(hi, mu) > delta:  # pragma: no cover - the bracket above always holds
        hi *= 2.0
    return float(brentq(lambda e: delta_at(e, mu) - delta, 0.0, hi, xtol=1e-12, rtol=1e-12))


def mu_for(epsilon: float, delta: float) -> float:
    """Largest ``mu`` for which ``mu``-GDP implies ``(epsilon, delta)``-DP.

    ``delta(epsilon)`` increases in ``mu``; the result is rounded down so that the calibration it
    feeds never overshoots the target.
    """
    if epsilon <= 0.0 or not 0.0 < delta < 1.0:
        raise ValueError("need epsilon > 0 and 0 < delta < 1")
    from scipy.optimize import brentq

    hi = 1.0
    while delta_at(epsilon, hi) < delta:
        hi *= 2.0
    mu = float(brentq(lambda m: delta_at(epsilon, m) - delta, 0.0, hi, xtol=1e-14, rtol=1e-14))
    return mu * (1.0 - 1e-9)
