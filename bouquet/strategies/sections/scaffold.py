"""Keys of SCAFFOLD, SCALLION and SCAFCOM, and the control step alpha both sides derive from them.

Standard library, :mod:`bouquet.schema` and :mod:`bouquet.compression` (for the compressor
names; it imports numpy), see :mod:`bouquet.strategies.sections`.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any

from bouquet.schema import key
from bouquet.strategies.sections.uplink import UplinkCompression

if TYPE_CHECKING:
    from bouquet.compression import Compressor


@dataclasses.dataclass(frozen=True)
class ControlConfig:
    """Keys every controlled-averaging method has: the server's step and ``N``."""

    server_lr: float = key(1.0, "global step size eta_g", min=0.0)
    server_step: str = key(
        "local-steps",
        "single-uplink model step: local-steps = eta_g eta_l mean(K_i (c + delta_i)) (exactly "
        "SCAFFOLD); global-lr = eta_g (c + mean delta_i)",
        choices=("local-steps", "global-lr"))
    num_clients: int = key(0, "N in c <- c + (alpha/N) sum delta; 0 means the nodes known", min=0)


@dataclasses.dataclass(frozen=True)
class ScaffoldConfig(ControlConfig):
    """Keys of SCAFFOLD and single-uplink SCAFFOLD (prefix ``scaffold``)."""

    controls: str = key(
        "II", "how a scaffold client updates c_i: II = c_i - c + (x - y)/(K eta_l) (free); I = "
        "the gradient at the server model x over one pass of the client's batches (one extra "
        "pass a round); scaffold-1up needs II", choices=("I", "II"))


@dataclasses.dataclass(frozen=True)
class ScallionConfig(UplinkCompression, ControlConfig):
    """Keys of SCALLION (prefix ``scallion``): single uplink + unbiased compression."""

    compressor: str = key("randk", "uplink compressor (unbiased ones: randk, qsgd, identity)",
                          choices=("identity", "randk", "qsgd", "topk", "sign", "fedzip",
                                   "sparseloco"))
    alpha: float = key(
        0.0, "control step alpha in c_i <- c_i + alpha C(delta); 0 means 1/(1 + omega) for an "
        "unbiased compressor and 1 for a biased one", min=0.0, max=1.0)


@dataclasses.dataclass(frozen=True)
class ScafcomConfig(UplinkCompression, ControlConfig):
    """Keys of SCAFCOM (prefix ``scafcom``): single uplink + biased compression + momentum."""

    alpha: float = key(
        0.0, "control step alpha in c_i <- c_i + alpha C(v_i - c_i); 0 means 1 for a biased "
        "compressor and 1/(1 + omega) for an unbiased one", min=0.0, max=1.0)
    beta: float = key(0.2, "momentum weight: v_i <- (1 - beta) v_i + beta gbar_i", min=0.0,
                      max=1.0)
    momentum_init: str = key(
        "first", "v_i at a client's first round: first = its first gbar_i (the momentum is an "
        "average of gradients from the start), zero = (1-beta) 0 + beta gbar_i (the first "
        "step beta times smaller); see docs/methods/scafcom.md",
        choices=("first", "zero"))
    momentum_placement: str = key(
        "round",
        "round: v_i <- (1-beta) v_i + beta gbar_i once per round, local steps use g - c_i + c; "
        "local-steps: every local step uses beta g + (1-beta) v_i - c_i + c and v_i becomes the "
        "mean of those directions (reconstructed alternatives)",
        choices=("round", "local-steps"))


def control_step(section: Any, compressor: Compressor, d: int) -> float:
    """Alpha: the configured value, or the automatic one (1/(1+omega) unbiased, 1 biased)."""
    alpha = float(getattr(section, "alpha", 1.0))
    if alpha > 0:
        return alpha
    g = compressor.guarantee(d)
    return 1.0 / (1.0 + float(g.omega)) if g.unbiased and g.omega is not None else 1.0
