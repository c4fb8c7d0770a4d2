"""What server and silo of (private) federated LinUCB both derive (no torch, no scipy).

Zhou & Chowdhury, ICLR 2024 (arXiv:2302.13945). A silo must compute its noise, its shift
``lambda`` and its confidence radius exactly as the server does, from its own configuration, so
both sides take them from this one module: the declared variants (:data:`VARIANTS`), their noise
calibrations, the run's :class:`Protocol`, ``beta_t`` and the values the server announces.

It imports the privacy calibration (:mod:`bouquet.privacy.tree`, :mod:`bouquet.privacy.shuffle`),
the ``linucb`` sections and the wire names, and no strategy: a silo's message
(:mod:`bouquet.clients.linucb`) loads it without the server's round loop
(:mod:`bouquet.strategies.linucb`, which re-exports these names). Noise levels are calibrated
with :mod:`bouquet.privacy.gaussian`, standard library only, so a silo's message loads no scipy.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Mapping
from typing import Any

from bouquet.privacy import shuffle, tree
from bouquet.registration import PlannedRounds
from bouquet.strategies.sections.linucb import DPLinUCBConfig, LinUCBConfig
from bouquet.wire.linucb import ANNOUNCED

#: Tail bound (in standard deviations) used to reject absurd values in noisy nodes.
TAIL = 12.0


#: ``(dp, lin, levels, dim, num_silos, min_silos, sensitivity) -> (sigma, lambda)``
Calibration = Callable[["DPLinUCBConfig", "LinUCBConfig", int, int, int, int, float],
                       tuple[float, float]]


def _tree_noise(dp: DPLinUCBConfig, lin: LinUCBConfig, levels: int, dim: int, num_silos: int,
                min_silos: int, sens: float) -> tuple[float, float]:
    """LDP: ``kappa`` releases of one user's contribution cost exactly the target."""
    sigma = tree.node_sigma(dp.epsilon, dp.delta, levels, sens)
    return sigma, tree.shift(sigma, levels, dim, lin.alpha, num_silos)


def _amplified_noise(dp: DPLinUCBConfig, lin: LinUCBConfig, levels: int, dim: int,
                     num_silos: int, min_silos: int, sens: float) -> tuple[float, float]:
    """SDP-amp: a released value sums ``min_silos`` nodes, each needs ``1/sqrt`` of the noise."""
    sigma = tree.node_sigma(dp.epsilon, dp.delta, levels, sens, copies=min_silos)
    return sigma, tree.shift(sigma, levels, dim, lin.alpha, num_silos)


def _vecsum_noise(dp: DPLinUCBConfig, lin: LinUCBConfig, levels: int, dim: int, num_silos: int,
                  min_silos: int, sens: float) -> tuple[float, float]:
    """Vector sum: the reference code's effective noise, the shift of a single silo."""
    eps, delta = dp.epsilon, dp.delta
    sigma = (lin.feature_bound * math.sqrt(levels * math.log(1.0 / delta))
             * math.log(levels * dim * dim / delta) / eps)
    return sigma, tree.shift(sigma, levels, dim, lin.alpha, 1)


@dataclasses.dataclass(frozen=True)
class LinUCBVariant:
    """One FedLinUCB variant, declared once; server and silo look it up by :attr:`name`.

    Attributes
    ----------
    name : str
        The ``privacy`` option: ``none``, ``ldp``, ``sdp-amp`` or ``sdp-vecsum``.
    method : str
        The registry's method name.
    calibration : Calibration or None
        The noise rule (None: no noise, the variant is not private).
    shuffled : bool
        Nodes reach the server through the shuffler, which releases only sums of at least
        ``min-silos`` of them.
    sends_codes : bool
        A silo sends the vector-sum protocol's int32 codes instead of ``(gram, vec)``.
    amplified : bool
        One released value carries ``min-silos`` independent node noises.
    accounting : str
        ``none``; ``every-sync`` (the server sees every node alone: every silo is charged at
        every sync); ``released`` (the ledger of what the shuffler released); ``unverified``
        (no verified bound is computed).

    """

    name: str
    method: str
    calibration: Calibration | None
    shuffled: bool = False
    sends_codes: bool = False
    amplified: bool = False
    accounting: str = "none"

    @property
    def private(self) -> bool:
        """Whether silos add noise."""
        return self.calibration is not None


#: Every variant, by its ``privacy`` name.
VARIANTS: dict[str, LinUCBVariant] = {v.name: v for v in (
    LinUCBVariant("none", "fedlinucb", None),
    LinUCBVariant("ldp", "dp-fedlinucb-ldp", _tree_noise, accounting="every-sync"),
    LinUCBVariant("sdp-amp", "dp-fedlinucb-sdp-amp", _amplified_noise, shuffled=True,
                  amplified=True, accounting="released"),
    LinUCBVariant("sdp-vecsum", "dp-fedlinucb-sdp-vecsum", _vecsum_noise, shuffled=True,
                  sends_codes=True, accounting="unverified"),
)}


def variant_named(name: str) -> LinUCBVariant:
    """The declared variant ``name``; ``ValueError`` naming the allowed ones otherwise."""
    if name not in VARIANTS:
        raise ValueError(f"unknown variant {name!r}: allowed {', '.join(VARIANTS)}")
    return VARIANTS[name]


@dataclasses.dataclass(frozen=True)
class Protocol:
    """Everything both sides derive from the operator's config for one run.

    Attributes
    ----------
    variant : LinUCBVariant
        The declared variant (:data:`VARIANTS`).
    dim : int
        Feature dimension ``d``.
    num_silos : int
        ``M``.
    batch : int
        ``B``.
    horizon_rounds : int
        Number of synchronisations planned (``T / B``).
    levels : int
        ``kappa``: tree levels, the most nodes any batch enters.
    sigma : float
        Per-silo Gaussian noise of a node (tree variants) or the effective noise that the
        vector-sum shift is computed from.
    lam : float
        Regulariser / shift ``lambda`` added to the Gram matrix.
    epsilon, delta : float
        The target guarantee (0 for the non-private variant).
    reward_bound : float
        Rewards are clipped to ``[-Y, Y]`` before they enter the statistics (``inf``: no
        clipping; always finite for the private variants, ``linucb.reward-clip`` for
        ``fedlinucb``).
    feature_bound : float
        ``L``: features are clipped to norm ``L`` in the statistics (whenever
        :attr:`clips`).
    vecsum_scale : float
        Scale of the vector-sum protocol's noise bits.
    min_silos : int
        SDP variants: fewest silos in a released sum (the noise is calibrated for them).
    sensitivity : float
        L2 sensitivity of one user's contribution (:func:`bouquet.privacy.tree.user_sensitivity`).

    """

    variant: LinUCBVariant
    dim: int
    num_silos: int
    batch: int
    horizon_rounds: int
    levels: int
    sigma: float
    lam: float
    epsilon: float
    delta: float
    reward_bound: float
    feature_bound: float
    vecsum_scale: float = 1.0
    min_silos: int = 1
    sensitivity: float = 0.0

    @property
    def private(self) -> bool:
        """Whether noise is added."""
        return self.variant.private

    @property
    def clips(self) -> bool:
        """Whether features (to ``L``) and rewards (to ``[-Y, Y]``) are clipped.

        Always for the private variants (their sensitivity rests on it); for ``fedlinucb`` when
        ``linucb.reward-clip`` is set, so that a privacy comparison's non-private arm sees the
        same bounded statistics as its private arms (Zhou & Chowdhury, ICLR 2024, assume
        ``||x|| <= L`` and bounded rewards for every algorithm they compare).
        """
        return math.isfinite(self.reward_bound)

    @property
    def horizon(self) -> int:
        """``T``: steps per silo."""
        return self.horizon_rounds * self.batch

    @property
    def copies(self) -> int:
        """Independent node noises in each value the server receives (1 for LDP)."""
        return self.min_silos if self.variant.amplified else 1

    def window_users(self, k: int) -> int:
        """Users one silo has in the node of sync ``k`` (``2**l B``)."""
        return (1 << tree.lowest_set_bit(k)) * self.batch

    def vecsum_params(self, k: int) -> shuffle.VecSumParams:
        """Randomiser parameters of the vector-sum node of sync ``k``."""
        eps0, delta0 = shuffle.per_node_budget(self.epsilon, self.delta, self.levels)
        return shuffle.VecSumParams.for_window(
            eps0, delta0, self.dim, self.num_silos * self.window_users(k),
            bound=self.feature_bound * max(self.feature_bound, self.reward_bound),
            scale=self.vecsum_scale)


def make_protocol(variant: str, lin: LinUCBConfig, dp: DPLinUCBConfig | None, dim: int,
                  num_silos: int, horizon_rounds: int) -> Protocol:
    """Derive the :class:`Protocol` from the operator's configuration (see the docs).

    Tree variants: the per-node noise makes ``kappa`` releases of one user's contribution cost
    exactly the target ``(epsilon, delta)`` (:func:`bouquet.privacy.tree.node_sigma`); for
    ``sdp-amp`` a released value is the shuffler's sum of at least ``min_silos`` nodes, so each
    node needs ``1/sqrt(min_silos)`` of that noise. Raises ``ValueError`` for settings under which
    the guarantee would not hold.
    """
    kind = variant_named(variant)
    levels = tree.num_levels(horizon_rounds)
    bound = lin.feature_bound
    if kind.calibration is None or dp is None:
        lam = lin.regularizer or math.sqrt(num_silos)
        reward_bound = lin.reward_clip or math.inf
        return Protocol(VARIANTS["none"], dim, num_silos, lin.batch_steps, horizon_rounds,
                        levels, 0.0, lam, 0.0, 0.0, reward_bound, bound)
    if lin.reward_clip:
        raise ValueError("linucb.reward-clip is fedlinucb's: the private variants always clip "
                         "rewards to dp-linucb.reward-bound (which calibrates their noise)")
    if num_silos < 1:
        raise ValueError("linucb.num-silos must be set (>= 1) for the private variants: the noise "
                         "is calibrated for the silos the operator runs, never for what nodes "
                         "report")
    min_silos = dp.min_silos or num_silos
    if min_silos > num_silos:
        raise ValueError(f"dp-linucb.min-silos ({min_silos}) exceeds linucb.num-silos "
                         f"({num_silos})")
    eps, delta = dp.epsilon, dp.delta
    sens = tree.user_sensitivity(bound, dp.reward_bound)
    sigma, lam = kind.calibration(dp, lin, levels, dim, num_silos, min_silos, sens)
    return Protocol(kind, dim, num_silos, lin.batch_steps, horizon_rounds, levels, sigma, lam,
                    eps, delta, dp.reward_bound, bound, dp.vecsum_scale, min_silos, sens)


def confidence_radius(t: int, proto: Protocol, lin: LinUCBConfig) -> float:
    """``beta_t`` of the reference code (Abbasi-Yadkori et al. 2011 with ``S = sqrt(d)``)."""
    d, lam, bound = proto.dim, proto.lam, proto.feature_bound
    inner = (d * math.log(1.0 + t * proto.num_silos * bound**2 / (d * lam))
             + math.log(1.0 / lin.alpha))
    return lin.crs * (math.sqrt(lam) * math.sqrt(d) + lin.reward_noise * math.sqrt(inner))


def env_section(sections: Mapping[str, Any]) -> Any:
    """Return the task's section that tells ``context_dim`` (every bandit task has one)."""
    for sec in sections.values():
        if hasattr(sec, "context_dim"):
            return sec
    raise ValueError("this method needs a bandit task (kind='bandit'), e.g. task='synth-bandit'")


def horizon_of(lin: LinUCBConfig, num_server_rounds: int) -> int:
    """Planned synchronisations: ``linucb.horizon-rounds`` or ``num-server-rounds``."""
    return lin.horizon_rounds or num_server_rounds


def planned_rounds(sections: Mapping[str, Any], num_server_rounds: int) -> PlannedRounds:
    """What the horizon fixes (``Method.planned_rounds`` of the four LinUCB methods).

    The horizon sets the tree's depth ``kappa`` (:func:`bouquet.privacy.tree.num_levels`), the
    silos' stored p-sums and, in the private variants (those with a ``dp-linucb`` section),
    every noise calibration and the shift ``lambda``, all through ``kappa`` alone. A resume
    that keeps ``kappa`` runs the same mechanism; one that changes it would release the later
    nodes with another noise than the earlier ones (and their reported epsilon would assume one
    noise for both), and a silo's tree could not hold the deeper nodes.
    """
    lin: LinUCBConfig = sections["linucb"]
    horizon = horizon_of(lin, num_server_rounds)
    levels = tree.num_levels(horizon)
    what = ("node noise, shift and tree depth" if "dp-linucb" in sections else "tree depth")
    return PlannedRounds(key="linucb.horizon-rounds" if lin.horizon_rounds else "num-server-rounds",
                         rounds=horizon, fixes=f"{levels} tree levels ({what})",
                         pinned_by="linucb.horizon-rounds")


def announced_values(proto: Protocol) -> dict[str, int]:
    """What the server announces each round (a silo refuses values that differ from its own)."""
    return dict(zip(ANNOUNCED, (proto.num_silos, proto.horizon_rounds, proto.batch), strict=True))
