"""Keys of the federated LinUCB family (``linucb``) and of its private variants (``dp-linucb``).

Standard library and :mod:`bouquet.schema` only (see :mod:`bouquet.strategies.sections`).
"""

from __future__ import annotations

import dataclasses

from bouquet.schema import key


@dataclasses.dataclass(frozen=True)
class LinUCBConfig:
    """Keys shared by the four methods (prefix ``linucb``)."""

    batch_steps: int = key(25, "B: local bandit steps per silo between synchronisations", min=1)
    horizon_rounds: int = key(
        0, "synchronisations the privacy calibration plans for; 0 = num-server-rounds", min=0)
    crs: float = key(1.0, "scale of the confidence radius beta_t (reference: 1 synthetic, "
                     "0.1 real data)", min=0.0)
    alpha: float = key(0.01, "failure probability in beta_t and the shift", min=1e-12, max=0.5)
    reward_noise: float = key(0.5, "R: sub-Gaussian reward-noise scale assumed in beta_t", min=0.0)
    regularizer: float = key(
        0.0, "lambda of non-private FedLinUCB; 0 = sqrt(M) as in the reference", min=0.0)
    feature_bound: float = key(
        1.0, "L: features are clipped to norm L before entering private statistics (and "
        "fedlinucb's when reward-clip > 0)", min=1e-9)
    reward_clip: float = key(
        0.0, "fedlinucb: Y > 0 clips rewards to [-Y, Y] and features to norm feature-bound "
        "before they enter the statistics, as the private variants always do (with "
        "dp-linucb.reward-bound): the non-private arm of a fair privacy comparison; 0 = no "
        "clipping. The private variants refuse it", min=0.0)
    num_silos: int = key(
        0, "M: silos the operator runs (calibrates noise and shift); required by the private "
        "variants; 0 = the nodes known at round 1 (fedlinucb only)", min=0)
    max_step_regret: float = key(
        2.0, "plausibility bound on one step's pseudo-regret (mean rewards of the built-in "
        "environments lie in [-1, 1]); a silo's cum-regret may not grow faster", min=0.0)


@dataclasses.dataclass(frozen=True)
class DPLinUCBConfig:
    """Privacy keys of the three private methods (prefix ``dp-linucb``)."""

    epsilon: float = key(1.0, "privacy budget per silo (LDP) or of the shuffled transcript (SDP)",
                         min=1e-12)
    delta: float = key(0.1, "delta of (epsilon, delta)-DP", min=1e-15, max=0.999)
    reward_bound: float = key(
        1.0, "Y: rewards are clipped to [-Y, Y] before entering private statistics", min=1e-9)
    vecsum_scale: float = key(1.0, "scale of the vector-sum protocol's noise bits (reference: 1)",
                              min=1e-9)
    min_silos: int = key(
        0, "SDP variants: fewest silos whose messages the shuffler releases as one sum (the "
        "noise is calibrated for this many); 0 = linucb.num-silos", min=0)
