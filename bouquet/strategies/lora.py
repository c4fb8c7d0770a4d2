"""Federated LoRA: FedIT, FFA-LoRA and Fed-SB (server side, numpy only).

All three adapt the same weight matrices ``W0`` (``m x n``, the ``lora.target-modules``) of a
pretrained model and differ in what is trained and what travels:

* **FedIT** (Zhang et al., "Towards Building the Federated GPT: Federated Instruction Tuning",
  ICASSP 2024): ``W = W0 + s B A``; A and B are trained and averaged separately. The average of
  products is not the product of averages, so aggregation is inexact.
* **FFA-LoRA** (Sun et al., "Improving LoRA in Privacy-preserving Federated Learning", ICLR 2024):
  A is frozen at a random initialisation derived from the run seed on every node (it never
  travels); only B is trained and averaged. ``mean(s B_i A) = s mean(B_i) A``: exact.
* **Fed-SB** (Singhal et al., "Fed-SB: A Silver Bullet for Extreme Communication Efficiency and
  Performance in (Private) Federated LoRA Fine-Tuning", arXiv 2502.15436, on LoRA-SB by Ponkshe et
  al., arXiv 2411.19557): ``W = W0 + s B R A`` with B, A frozen and only the ``r x r`` matrix R
  trained and averaged: exact, and ``r^2`` numbers per matrix whatever ``m, n``. B and A come from
  a one-time round-0 protocol: the sampled clients send the summed gradients of the adapted
  matrices; the server approximates the first full fine-tuning step as ``-lr1 sign(sum grad)``
  and sets ``B = U_r, R = S_r, A = V_r^T`` (truncated SVD). B and A go to each client once
  (the "frame"). ``fed-sb.init='random'`` is the data-free alternative (orthonormal B, A from the
  seed, R = 0).

The classification head (``lora.head-modules``), when the task has one, is trained, travels with
the adapters and is averaged the same way. The server holds the pretrained weights only to merge
``W0 + s * delta`` for central evaluation (:meth:`LoraStrategy.global_arrays`); they are not part
of the checkpointed state. What clients share with this module (adapter naming, the variants'
layouts, FFA's seeded A, the merge) lives in :mod:`bouquet.strategies.lora_layout` and is
re-exported here, so both sides agree on every array name and on A (FFA) without sending it,
and a client never imports this module.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np
from flwr.app import ArrayRecord, MessageType, MetricRecord, RecordDict
from flwr.serverapp import Grid

from bouquet.privacy.dp_config import DPConfig
from bouquet.strategies.arguments import BASE_COMMON_KEYS, LOCAL_TRAINING_KEYS, StrategySetup
from bouquet.strategies.base import BouquetStrategy

# The layout and merge clients share live in their own module; their names stay importable from
# here (``from bouquet.strategies.lora import adapted_modules`` still works).
from bouquet.strategies.lora_layout import VARIANTS as VARIANTS
from bouquet.strategies.lora_layout import (
    Adapted,
    adapted_modules,
    head_names,
    lora_a_init,
    lora_variant,
    merge,
    split_names,
)
from bouquet.strategies.lora_layout import LoraVariant as LoraVariant
from bouquet.strategies.lora_layout import merged_delta as merged_delta
from bouquet.strategies.round_log import NodeReply, RoundLog
from bouquet.strategies.sections.lora import FedSBConfig, LoraConfig
from bouquet.wire import validation as v
from bouquet.wire.arrays import to_numpy, to_record
from bouquet.wire.lora import (
    FRAME_ID_KEY,
    FRAME_RECORD,
    GRADS_RECORD,
    PHASE_EVALUATE,
    PHASE_INIT,
    PHASE_TRAIN,
)

#: What a private run reports or uses that its epsilon does not cover (summary.json names it).
NOT_COVERED = (
    "num-examples: each client's number of training rows (treated as public, as in Opacus)",
    "federated evaluation metrics (evaluation='federated'): computed on the nodes' held-out "
    "rows, which DP-SGD does not protect",
)


def _factor_shape(factor: str, a: Adapted, rank: int) -> tuple[int, int]:
    return {"lora_A": (rank, a.n), "lora_B": (a.m, rank), "lora_R": (rank, rank)}[factor]


def travelling_spec(variant: str, adapted: Sequence[Adapted], rank: int,
                    head: Mapping[str, tuple[int, ...]]) -> dict[str, tuple[int, ...]]:
    """Name -> shape of the arrays a client sends (and receives) each round, in order."""
    sends = lora_variant(variant).sends
    spec: dict[str, tuple[int, ...]] = {}
    for a in adapted:
        for factor in sends:
            spec[f"{a.module}.{factor}"] = _factor_shape(factor, a, rank)
    spec.update({k: tuple(s) for k, s in head.items()})
    return spec


def scale(cfg: LoraConfig) -> float:
    """LoRA scaling ``s = alpha / r`` (alpha 0 means alpha = r)."""
    return (cfg.alpha or cfg.rank) / cfg.rank


# --------------------------------------------------------------------------- initialisation
def initial_adapters(variant: str, adapted: Sequence[Adapted], rank: int, seed: int
                     ) -> dict[str, np.ndarray]:
    """The first global adapter arrays: B = 0 (and A random for FedIT); R = 0 for Fed-SB."""
    sends = lora_variant(variant).sends
    out: dict[str, np.ndarray] = {}
    for i, a in enumerate(adapted):
        for factor in sends:
            out[f"{a.module}.{factor}"] = (lora_a_init(seed, i, rank, a.n) if factor == "lora_A"
                                           else np.zeros(_factor_shape(factor, a, rank),
                                                         np.float32))
    return out


def random_frame(adapted: Sequence[Adapted], rank: int, seed: int) -> dict[str, np.ndarray]:
    """Data-free Fed-SB frame: orthonormal columns B (``m x r``) and rows A (``r x n``)."""
    out: dict[str, np.ndarray] = {}
    for i, a in enumerate(adapted):
        rng = np.random.default_rng([seed, 0x5B, i])
        qb, _ = np.linalg.qr(rng.standard_normal((a.m, rank)))
        qa, _ = np.linalg.qr(rng.standard_normal((a.n, rank)))
        out[f"{a.module}.lora_B"] = qb.astype(np.float32)
        out[f"{a.module}.lora_A"] = qa.T.astype(np.float32)
    return out


def svd_frame(grads: Mapping[str, np.ndarray], adapted: Sequence[Adapted], rank: int,
              lr1: float) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
    """LoRA-SB initialisation from summed full-weight gradients.

    ``dW = -lr1 * sign(sum grad) ~ U_r S_r V_r^T``; returns the frame ``{B = U_r, A = V_r^T}`` and
    ``{R = diag(S_r)}``. Exact SVD in float64 (the reference uses a randomised one).
    """
    frame: dict[str, np.ndarray] = {}
    r_init: dict[str, np.ndarray] = {}
    for a in adapted:
        dw = -lr1 * np.sign(np.asarray(grads[a.module], dtype=np.float64))
        u, s, vt = np.linalg.svd(dw, full_matrices=False)
        k = min(rank, len(s))
        b = np.zeros((a.m, rank))
        b[:, :k] = u[:, :k]
        at = np.zeros((rank, a.n))
        at[:k] = vt[:k]
        r = np.zeros((rank, rank))
        r[np.arange(k), np.arange(k)] = s[:k]
        frame[f"{a.module}.lora_B"] = b.astype(np.float32)
        frame[f"{a.module}.lora_A"] = at.astype(np.float32)
        r_init[f"{a.module}.lora_R"] = r.astype(np.float32)
    return frame, r_init


def _low_rank(left: Sequence[np.ndarray], right: Sequence[np.ndarray]
              ) -> tuple[np.ndarray, np.ndarray]:
    """``sum_i L_i R_i`` as the pair ``U = [L_1 ... L_k]``, ``V = [R_1; ...; R_k]`` (float64)."""
    return (np.concatenate([np.asarray(x, np.float64) for x in left], axis=1),
            np.concatenate([np.asarray(x, np.float64) for x in right], axis=0))


def _frobenius_inner(x: tuple[np.ndarray, np.ndarray], y: tuple[np.ndarray, np.ndarray]
                     ) -> float:
    """``<U V, U2 V2>_F = sum((U^T U2) * (V V2^T))`` for ``x = (U, V)``, ``y = (U2, V2)``.

    From the small Gram matrices (``k r`` by ``k2 r`` numbers whatever ``m, n``), never forming
    an ``m x n`` product.
    """
    (u, v), (u2, v2) = x, y
    return float(np.sum((u.T @ u2) * (v @ v2.T)))


@dataclass(frozen=True)
class AveragingGap:
    """FedIT's aggregation error in one round, relative to the exact round update.

    With ``E = mean(B_k A_k) - B_prev A_prev`` the update an exact average would apply and ``D =
    mean(B_k A_k) - mean(B) mean(A)`` what FedIT's product of averages misses of it, FedIT
    applies ``E - D = (1 - along) E - (D - along E)``: a step along ``E``, ``1 - along`` times
    as long, plus a part at right angles to ``E``. ``gap = ||D|| / ||E||`` splits accordingly,
    ``gap^2 = along^2 + across^2`` (Frobenius norms over every adapted matrix together).

    Attributes
    ----------
    gap : float
        ``||D||_F / ||E||_F`` (0 when ``E`` is 0).
    along : float
        ``<D, E>_F / ||E||_F^2``: the fraction of the exact update lost along its own direction.
        Between 0 and 1, FedIT's step is a shorter one in that direction (factors that disagree
        average to a smaller product); negative, a longer one; above 1, it points backwards.
    across : float
        ``||D - along E||_F / ||E||_F``: the part of the error at right angles to the exact
        update, which turns FedIT's step away from its direction.

    """

    gap: float
    along: float
    across: float


def averaging_gap(adapted: Sequence[Adapted], clients: Sequence[Mapping[str, np.ndarray]],
                  weights: np.ndarray, previous: Mapping[str, np.ndarray]) -> AveragingGap:
    """How far FedIT's product of averages is from the average of the clients' products.

    FedIT averages A and B apart, so the new adapter's product ``mean(B) mean(A)`` differs from
    ``mean(B_k A_k)``, the update an exact average would apply (FFA-LoRA and Fed-SB average
    exactly). It is the error FFA-LoRA's paper (Sun et al., ICLR 2024, its first
    "discordance") expects to grow with data heterogeneity and local steps, and under DP noise
    on both factors (its second). A diagnostic of the replies as sent (post-processing, also in
    private mode); the aggregation does not use it.

    Parameters
    ----------
    adapted : Sequence[Adapted]
        The adapted matrices (``lora_B`` is ``m x r``, ``lora_A`` ``r x n``).
    clients : Sequence[Mapping[str, np.ndarray]]
        Each reply's travelling arrays (validated).
    weights : np.ndarray
        The aggregation weights of the replies (normalised here to sum to 1).
    previous : Mapping[str, np.ndarray]
        The global adapters the clients started from.

    Returns
    -------
    AveragingGap
        The error relative to the exact round update, whole and split into the parts along and
        across that update; all 0 when the update is 0. The LoRA scale cancels. The error and
        the update are taken in centred form, ``D = sum_k w_k (B_k - mean B)(A_k - mean A)`` and
        ``E = sum_k w_k (B_k - B_prev) A_k + B_prev (mean A - A_prev)``, so a small spread
        between clients is not lost to cancellation; ``across`` is ``sqrt(gap^2 - along^2)``,
        and so loses precision only where the error is almost parallel to the update. Where the
        clients' products average back to the previous one, ``E`` is rounding noise and the
        ratios say nothing.

    """
    w = np.asarray(weights, np.float64) / float(np.sum(weights))
    gap = update = cross = 0.0
    for a in adapted:
        bs = [np.asarray(c[f"{a.module}.lora_B"], np.float64) for c in clients]
        as_ = [np.asarray(c[f"{a.module}.lora_A"], np.float64) for c in clients]
        # means shifted by the first reply: exactly it when every reply is the same
        b_bar = bs[0] + np.tensordot(w, np.stack(bs) - bs[0], axes=1)
        a_bar = as_[0] + np.tensordot(w, np.stack(as_) - as_[0], axes=1)
        b_prev = np.asarray(previous[f"{a.module}.lora_B"], np.float64)
        a_prev = np.asarray(previous[f"{a.module}.lora_A"], np.float64)
        error = _low_rank([wk * (b - b_bar) for wk, b in zip(w, bs, strict=True)],
                          [x - a_bar for x in as_])
        exact = _low_rank([*(wk * (b - b_prev) for wk, b in zip(w, bs, strict=True)), b_prev],
                          [*as_, a_bar - a_prev])
        gap += max(_frobenius_inner(error, error), 0.0)
        update += max(_frobenius_inner(exact, exact), 0.0)
        cross += _frobenius_inner(error, exact)
    if update <= 0:
        return AveragingGap(0.0, 0.0, 0.0)
    along = cross / update
    return AveragingGap(gap=float(np.sqrt(gap / update)), along=along,
                        across=float(np.sqrt(max(gap / update - along * along, 0.0))))


# --------------------------------------------------------------------------- strategy
class LoraStrategy(BouquetStrategy):
    """Server of the LoRA family (FedIT / FFA-LoRA / Fed-SB; see the module docstring).

    The initial model is the task's pretrained weights (``initial_arrays``, or the ``arrays`` of
    the first ``configure_train``); only adapters and the head travel. Subclasses set
    :attr:`variant`.
    """

    reply_records = ("arrays", "metrics", GRADS_RECORD)
    config_sections = {"lora": LoraConfig, "dp": DPConfig}
    prefixed_sections = ("dp",)
    common_keys = (*BASE_COMMON_KEYS, *LOCAL_TRAINING_KEYS)
    variant: ClassVar[str] = ""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        #: the variant's declaration (:data:`VARIANTS`)
        self.kind = lora_variant(self.variant)
        setup = self.setup
        self.cfg: LoraConfig = setup.sections["lora"]
        self.fedsb_cfg: FedSBConfig | None = setup.sections.get("fed-sb")
        self.dp = setup.sections.get("dp")
        dp = self.dp
        if dp is not None and dp.enabled and not (dp.target_epsilon > 0
                                                  or dp.noise_multiplier > 0):
            raise ValueError("dp.enabled needs dp.noise-multiplier > 0 or dp.target-epsilon > 0 "
                             "(without noise epsilon is infinite)")
        if dp is not None and dp.enabled and not 0.0 < dp.delta < 1.0:
            raise ValueError(f"dp.enabled needs 0 < dp.delta < 1 (got {dp.delta:g})")
        #: Fed-SB: frame id (0: none yet) and the partitions known to hold it.
        self.frame_id = 0
        self.has_frame: set[int] = set()
        #: Cumulative epsilon reported by each partition (private mode).
        self.epsilon: dict[int, float] = {}
        self.base: dict[str, np.ndarray] = {}
        if setup.initial_arrays is not None:
            self.bind_model(setup.initial_arrays)

    def needs_model(self) -> bool:
        """True until the pretrained weights are known."""
        return not self.base

    def bind_model(self, arrays: ArrayRecord) -> None:
        """Take the pretrained weights: find the adapted matrices, initialise the adapters."""
        variant, setup = self.variant, self.setup
        self.base = to_numpy(arrays)
        shapes = {k: tuple(a.shape) for k, a in self.base.items()}
        self.adapted = adapted_modules(shapes, split_names(self.cfg.target_modules))
        if not self.adapted:
            raise ValueError(
                f"lora.target-modules={self.cfg.target_modules!r} matches no 2-D weight of the "
                f"task {setup.task!r}"
            )
        self.head = {k: shapes[k] for k in head_names(shapes, split_names(self.cfg.head_modules))}
        self.spec = travelling_spec(variant, self.adapted, self.cfg.rank, self.head)
        self.scale = scale(self.cfg)
        seed = self.common.seed
        self.trainable: dict[str, np.ndarray] = {
            **initial_adapters(variant, self.adapted, self.cfg.rank, seed),
            **{k: self.base[k].astype(np.float32) for k in self.head},
        }
        #: Frozen arrays: FFA's A (from the seed, never sent), Fed-SB's B and A (the frame).
        self.fixed: dict[str, np.ndarray] = {}
        if self.kind.seeded_frozen_a:
            self.fixed = {f"{a.module}.lora_A": lora_a_init(seed, i, self.cfg.rank, a.n)
                          for i, a in enumerate(self.adapted)}

    # ------------------------------------------------------------------ helpers
    @property
    def private(self) -> bool:
        """True when clients run DP-SGD."""
        return bool(self.dp is not None and self.dp.enabled)

    def frame_spec(self) -> dict[str, tuple[int, ...]]:
        """Name -> shape of Fed-SB's frame (B and A of every adapted matrix)."""
        r = self.cfg.rank
        spec: dict[str, tuple[int, ...]] = {}
        for a in self.adapted:
            spec[f"{a.module}.lora_B"] = (a.m, r)
            spec[f"{a.module}.lora_A"] = (r, a.n)
        return spec

    def payload(self, rnd: int, pid: int, phase: str) -> RecordDict:
        """The instruction for one partition: travelling arrays, config, and the frame if due."""
        cfg = self.base_config(rnd)
        cfg["phase"] = phase
        content = RecordDict({"arrays": to_record(self.trainable), "config": cfg})
        if self.kind.framed:
            cfg[FRAME_ID_KEY] = self.frame_id
            if pid not in self.has_frame:
                content[FRAME_RECORD] = to_record(self.fixed)
        return content

    # ------------------------------------------------------------------ round
    def before_train(self, grid: Grid, rnd: int) -> RoundLog | None:
        """Fed-SB's one-time init (counted in this round's bytes) before its first round."""
        if self.kind.framed and not self.frame_id:
            assert self.fedsb_cfg is not None
            if self.fedsb_cfg.init == "random":
                self.fixed = random_frame(self.adapted, self.cfg.rank, self.common.seed)
                self.frame_id = 1
            else:
                return self.init_round(grid, rnd)
        return None

    def skip_training(self) -> bool:
        """The round ends after a failed Fed-SB init (no frame yet)."""
        return self.kind.framed and not self.frame_id

    def init_round(self, grid: Grid, rnd: int) -> RoundLog:
        """Fed-SB round 0: collect summed gradients of the adapted matrices; SVD; set the frame."""
        chosen, by_pid = self.round_nodes(grid, rnd)
        contents = {}
        for pid in chosen:
            cfg = self.base_config(rnd)
            cfg["phase"] = PHASE_INIT
            contents[pid] = RecordDict({"arrays": to_record(
                {k: self.trainable[k] for k in self.head}), "config": cfg})
        return self.run_phase(grid, rnd, contents, by_pid, MessageType.TRAIN, norm_key=PHASE_INIT)

    def admitting_init(self) -> bool:
        """Whether the replies being admitted answer Fed-SB's init phase (not a training round)."""
        phase = self.pending.get(MessageType.TRAIN)
        return phase is not None and phase.norm_key == PHASE_INIT

    def configure_round(self, rnd: int, partitions: list[int]) -> dict[int, RecordDict]:
        """Send the global adapters (+ head, + Fed-SB's frame where a client lacks it)."""
        return {pid: self.payload(rnd, pid, PHASE_TRAIN) for pid in partitions}

    def validate_reply(self, rnd: int, partition_id: int, content: RecordDict) -> float:
        """Exactly the travelling arrays (float32, shapes), num-examples, epsilon when private.

        Returns the norm of the update (Fed-SB init: of the summed gradients). A reported
        epsilon must lie between the node's last one and :meth:`epsilon_ceiling`.
        """
        if self.admitting_init():
            v.expect_records(content, (GRADS_RECORD, "metrics"))
            grads = v.arrays(content, GRADS_RECORD,
                             {a.module: ((a.m, a.n), np.float32) for a in self.adapted})
            norm = v.l2_norm(grads.values())
        else:
            v.expect_records(content, ("arrays", "metrics"))
            arrays = v.arrays(content, "arrays", {k: (s, np.float32) for k, s in self.spec.items()})
            norm = v.update_norm(arrays, self.trainable)
        v.num_examples(content)
        if self.private:
            eps = v.metric(content, "epsilon", min=0.0,
                           max=self.epsilon_ceiling(rnd, partition_id))
            before = self.epsilon.get(partition_id, 0.0)
            if eps < before - 1e-9:
                # A node that lost its accountant (wiped state folder) would under-report.
                raise v.InvalidReply(
                    f"epsilon went down from {before:.4g} to {eps:.4g}: the node lost its "
                    "privacy accountant; its update is not used"
                )
        return norm

    def epsilon_ceiling(self, rnd: int, partition_id: int) -> float:
        """The largest epsilon an honest node can report after round ``rnd`` (plausibility).

        With a budget (``dp.target-epsilon`` or ``dp.max-epsilon``) clients refuse to exceed it.
        Otherwise the bound is that of the Gaussian mechanism without subsampling composed over
        every step the node may have taken (``(rnd + 1) * max_local_steps``, the +1 for Fed-SB's
        init): RDP ``T a / (2 sigma^2)`` at the best order gives
        ``T / (2 sigma^2) + sqrt(2 T log(1/delta)) / sigma``, an upper bound on what a
        subsampled accountant reports. It is a sanity bound against absurd values (which would
        otherwise lock out the node's later honest ones), not a privacy claim.
        """
        dp = self.dp
        assert dp is not None
        budget = dp.target_epsilon or dp.max_epsilon
        if budget > 0:
            return budget * (1 + 1e-6) + 1e-9
        sigma = dp.noise_multiplier
        steps = (rnd + 1) * self.max_local_steps(partition_id)
        log_inv_delta = np.log(1 / dp.delta) if dp.delta > 0 else np.inf
        bound = steps / (2 * sigma**2) + np.sqrt(2 * steps * log_inv_delta) / sigma
        return float(2 * bound + 1)

    def state_is_finite(self) -> bool:
        """The travelling arrays are finite (cheaper than merging the model)."""
        return all(bool(np.all(np.isfinite(a))) for a in self.trainable.values())

    def _weights(self, replies: list[NodeReply]) -> np.ndarray:
        if self.cfg.weighting == "uniform":
            w = np.ones(len(replies))
        else:
            w = np.array([v.num_examples(r.content) for r in replies], dtype=np.float64)
        return w / w.sum()

    def aggregate_round(self, rnd: int, replies: list[NodeReply]) -> dict[str, float]:
        """Average the travelling arrays (Fed-SB init: sum gradients, SVD)."""
        metrics: dict[str, float] = {}
        if self.private:
            for r in replies:
                self.epsilon[r.partition_id] = v.metric(r.content, "epsilon", min=0.0)
            metrics["epsilon"] = max(self.epsilon.values())
            metrics["delta"] = float(self.dp.delta)  # type: ignore[union-attr]
        if self.admitting_init():
            assert self.fedsb_cfg is not None
            total = {a.module: np.zeros((a.m, a.n)) for a in self.adapted}
            for r in replies:
                g = to_numpy(r.content[GRADS_RECORD])  # type: ignore[arg-type]
                for k in total:
                    total[k] += g[k]
            self.fixed, r_init = svd_frame(total, self.adapted, self.cfg.rank,
                                           self.fedsb_cfg.init_lr)
            self.trainable.update(r_init)
            self.frame_id = 1
            return metrics
        w = self._weights(replies)
        arrays = [to_numpy(r.content["arrays"]) for r in replies]  # type: ignore[arg-type]
        if self.kind.averages_factors_apart:  # from the (private) replies: post-processing
            gap = averaging_gap(self.adapted, arrays, w, self.trainable)
            metrics |= {"averaging_gap": gap.gap, "averaging_gap_along": gap.along,
                        "averaging_gap_across": gap.across}
        self.trainable = {
            k: sum((wi * a[k].astype(np.float64) for wi, a in zip(w, arrays, strict=True)),
                   np.zeros(s)).astype(np.float32)
            for k, s in self.spec.items()
        }
        if self.kind.framed:
            self.has_frame |= {r.partition_id for r in replies}
        if self.private:  # a private reply's loss would be data outside the accountant: unused
            return metrics
        losses = [(wi, v.metric(r.content, "train_loss")) for wi, r in zip(w, replies, strict=True)
                  if "train_loss" in r.content["metrics"]]  # type: ignore[operator]
        if losses:
            metrics["train_loss"] = float(sum(wi * x for wi, x in losses) / sum(wi for wi, _ in losses))
        return metrics

    def summary_extras(self) -> dict[str, dict[str, Any]]:
        """In private mode, what ``privacy.epsilon`` covers and what it does not."""
        if not self.private:
            return {}
        assert self.dp is not None
        return {"privacy": {
            "epsilon": max(self.epsilon.values(), default=0.0),
            "delta": float(self.dp.delta),
            "mechanism": f"DP-SGD per client ({self.dp.sampling} sampling, clip "
                         f"{self.dp.max_grad_norm:g}), epsilon: max over clients",
            "not_covered": list(NOT_COVERED),
        }}

    # ------------------------------------------------------------------ evaluation
    def global_arrays(self) -> ArrayRecord | None:
        """The merged model ``W0 + s delta`` with the global head (None before it is known)."""
        return to_record(self.merged()) if self.base else None

    def merged(self) -> dict[str, np.ndarray]:
        """The merged global model as numpy arrays."""
        if self.kind.framed and not self.frame_id:
            return merge("ffa", self.base, [], {k: self.trainable[k] for k in self.head}, {}, 1.0)
        return merge(self.variant, self.base, self.adapted, self.trainable, self.fixed, self.scale)

    def evaluation_content(self, rnd: int, partition_id: int) -> RecordDict | None:
        """Federated evaluation with the adapters (not the merged model) on the wire."""
        if self.kind.framed and not self.frame_id:
            return None
        return self.payload(rnd, partition_id, PHASE_EVALUATE)

    # ------------------------------------------------------------------ state
    def state_dict(self) -> dict[str, Any]:
        """Adapters, head, Fed-SB's frame and holders, epsilons (not the pretrained weights)."""
        return {
            **super().state_dict(),
            "trainable": dict(self.trainable),
            "fixed": dict(self.fixed) if self.kind.framed else {},
            "frame_id": self.frame_id,
            "has_frame": sorted(self.has_frame),
            "epsilon": {str(k): e for k, e in self.epsilon.items()},
        }

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore :meth:`state_dict`."""
        super().load_state_dict(state)
        self.trainable = {k: np.asarray(a) for k, a in state["trainable"].items()}
        if self.kind.framed:
            self.fixed = {k: np.asarray(a) for k, a in state["fixed"].items()}
        self.frame_id = int(state["frame_id"])
        self.has_frame = {int(p) for p in state["has_frame"]}
        self.epsilon = {int(k): float(e) for k, e in state["epsilon"].items()}


class FedIT(LoraStrategy):
    """FedIT (Zhang et al., ICASSP 2024): FedAvg of LoRA adapters A and B (and the head)."""

    method_name = "fedit"
    variant = "fedit"


class FFALoRA(LoraStrategy):
    """FFA-LoRA (Sun et al., ICLR 2024): A frozen from the seed, only B (and the head) averaged."""

    method_name = "ffa-lora"
    variant = "ffa"


class FedSB(LoraStrategy):
    """Fed-SB (Singhal et al., 2025): LoRA-SB's W0 + B R A, only the r x r matrices R averaged."""

    method_name = "fed-sb"
    variant = "fedsb"
    config_sections = {**LoraStrategy.config_sections, "fed-sb": FedSBConfig}


def build_fedit(setup: StrategySetup) -> LoraStrategy:
    """Strategy factory of ``fedit``."""
    return FedIT.from_setup(setup)


def build_ffa(setup: StrategySetup) -> LoraStrategy:
    """Strategy factory of ``ffa-lora``."""
    return FFALoRA.from_setup(setup)


def build_fedsb(setup: StrategySetup) -> LoraStrategy:
    """Strategy factory of ``fed-sb``."""
    return FedSB.from_setup(setup)


def bad_replies(content: RecordDict) -> list[tuple[str, RecordDict]]:
    """Method-specific malformed replies for the conformance suite.

    An extra array (a LoRA A that must never travel in FFA-LoRA / Fed-SB, or a stray tensor in
    FedIT), a missing adapter array, and a non-positive ``num-examples``.
    """
    arrays = to_numpy(content["arrays"])  # type: ignore[arg-type]
    first = next(iter(arrays))
    extra = {**arrays, "stray.lora_A": np.zeros((2, 2), np.float32)}
    short = {k: a for k, a in arrays.items() if k != first}
    metrics = MetricRecord({**dict(content["metrics"]), "num-examples": 0})  # type: ignore[arg-type]
    return [
        ("extra array", RecordDict({"arrays": to_record(extra), "metrics": content["metrics"]})),
        ("missing array", RecordDict({"arrays": to_record(short), "metrics": content["metrics"]})),
        ("zero num-examples", RecordDict({"arrays": content["arrays"], "metrics": metrics})),
        ("init gradients in a training reply",
         RecordDict({"arrays": content["arrays"], "metrics": content["metrics"],
                     "grads": ArrayRecord()})),
    ]
