"""FedKSeed and FedKSeed-Pro: zeroth-order full-parameter federated tuning with K shared seeds.

Qin, Chen, Yao, Ding, Li, Chen, Li. "Federated Full-Parameter Tuning of Billion-Sized Language
Models with Communication Cost under 18 Kilobytes." ICML 2024, arXiv:2312.06353.

Every node holds the same pre-trained weights ``w0`` and derives the same K candidate seeds
``s_1..s_K`` from one master seed. The global model is *defined* by a K-vector ``A``::

    w = w0 - lr * sum_k A[k] * z(s_k)

where ``z(s)`` is the Gaussian direction regenerated from seed ``s`` (bouquet.clients.zeroth_order).
A round: the server sends ``A`` (K fp32 values; FedKSeed-Pro adds K seed probabilities); each client
rebuilds ``w``, runs ``local-steps`` two-point zeroth-order steps, each along one candidate seed,
and returns its (seed index int32, scalar gradient fp32) pairs; the server adds the pairs into
``A``, weighted by the clients' example counts. Because every local step is a move along one seed's
direction, this equals FedAvg of the clients' model deltas. The server never holds or sends model
arrays: ``A`` (and Pro's per-seed statistics) is its whole state. This module is numpy only.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

import numpy as np
from flwr.app import Array, ArrayRecord, MessageType, RecordDict
from flwr.serverapp import Grid

from bouquet.schema import key
from bouquet.strategies import validation as v
from bouquet.strategies.base import (
    BouquetStrategy,
    NodeReply,
    RoundLog,
    StrategySetup,
    weighted_metrics,
)

#: Downlink record and its arrays.
DOWN_RECORD = "fedkseed"
ACCUMULATOR = "accumulator"
PROBABILITIES = "probabilities"
#: Uplink record and its arrays: one entry per local step.
PAIRS_RECORD = "pairs"
SEED_INDEX = "seed-index"
GRAD = "grad"
#: Pro's importance statistic: ``+1e-10`` in the min-max normalisation, as in the reference.
PRO_NORM_EPS = 1e-10


@dataclasses.dataclass(frozen=True)
class FedKSeedConfig:
    """Keys of ``fedkseed`` and ``fedkseed-pro`` (prefix ``fedkseed``)."""

    num_seeds: int = key(4096, "K: number of candidate seeds shared by all nodes", min=1,
                         max=2**31 - 1)
    local_steps: int = key(200, "zeroth-order steps per client and round (one pair each)", min=1)
    eps: float = key(1e-3, "perturbation scale of the two-point estimator", min=1e-12)
    lr: float = key(3e-4, "learning rate of the zeroth-order update", min=0.0)
    master_seed: int = key(42, "seed from which the K candidate seeds derive", min=0)
    equal_weight: bool = key(False, "weight clients equally instead of by their example counts")
    pro_clip: float = key(1000.0, "fedkseed-pro: |g| clip in the seed-importance statistic",
                          min=0.0)


def candidate_seeds(master_seed: int, num_seeds: int) -> np.ndarray:
    """Return the K candidate seeds (int64, positive), identical on every node."""
    rng = np.random.default_rng(np.random.SeedSequence([master_seed, 0x5EED]))
    return rng.integers(1, 2**62, size=num_seeds, dtype=np.int64)


def pro_probabilities(abs_sum: np.ndarray, count: np.ndarray) -> np.ndarray:
    """FedKSeed-Pro's seed probabilities from per-seed statistics (float64, sums to 1).

    The importance of seed k is the mean of ``|clip(g)|`` over its history (which starts with one
    0.0 entry, hence ``count >= 1``); importances are min-max normalised to [0, 1] (``+1e-10`` in
    the denominator) and passed through a softmax, so the likeliest seed is at most e times as
    likely as the least likely one.
    """
    psi = abs_sum / count
    norm = (psi - psi.min()) / (psi.max() - psi.min() + PRO_NORM_EPS)
    e = np.exp(norm - norm.max())
    return e / e.sum()  # type: ignore[no-any-return]


def pairs_record(seed_index: np.ndarray, grad: np.ndarray) -> ArrayRecord:
    """Build the uplink ArrayRecord of (int32 seed index, fp32 scalar gradient) pairs."""
    return ArrayRecord({SEED_INDEX: Array(np.ascontiguousarray(seed_index, dtype=np.int32)),
                        GRAD: Array(np.ascontiguousarray(grad, dtype=np.float32))})


def read_pairs(content: RecordDict, num_seeds: int, max_pairs: int
               ) -> tuple[np.ndarray, np.ndarray]:
    """Decode and check a reply's pairs; raise :class:`~bouquet.strategies.validation.InvalidReply`.

    Two 1-D arrays of equal length at most ``max_pairs``: int32 indices in ``[0, num_seeds)`` and
    finite fp32 gradients.
    """
    rec = v.array_record(content, PAIRS_RECORD)
    if set(rec.keys()) != {SEED_INDEX, GRAD}:
        raise v.InvalidReply(f"{PAIRS_RECORD}: expected arrays {SEED_INDEX!r} and {GRAD!r}, got "
                             f"{sorted(rec.keys())}")
    try:
        idx, grad = rec[SEED_INDEX].numpy(), rec[GRAD].numpy()
    except Exception as exc:
        raise v.InvalidReply(f"{PAIRS_RECORD}: cannot decode ({type(exc).__name__})") from exc
    n = idx.shape[0] if idx.ndim == 1 else -1
    v.check_array(idx, f"{PAIRS_RECORD}/{SEED_INDEX}", (n,), np.int32)
    v.check_array(grad, f"{PAIRS_RECORD}/{GRAD}", (n,), np.float32)
    if n > max_pairs:
        raise v.InvalidReply(f"{PAIRS_RECORD}: {n} pairs, more than the {max_pairs} local steps")
    if n and (idx.min() < 0 or idx.max() >= num_seeds):
        raise v.InvalidReply(f"{PAIRS_RECORD}/{SEED_INDEX}: index outside [0, {num_seeds})")
    return idx, grad


def read_accumulator(content: RecordDict, num_seeds: int) -> np.ndarray:
    """Return the accumulator of a downlink message (float64 copy of the fp32 values sent)."""
    rec = content[DOWN_RECORD]
    if not isinstance(rec, ArrayRecord):
        raise TypeError(f"record {DOWN_RECORD!r} is not an ArrayRecord")
    acc = rec[ACCUMULATOR].numpy()
    if acc.shape != (num_seeds,) or acc.dtype != np.float32:
        raise ValueError(f"accumulator is {acc.dtype}{acc.shape}, expected float32({num_seeds},)")
    return acc.astype(np.float64)


class FedKSeed(BouquetStrategy):
    """Server of FedKSeed: the K-float accumulator is the whole global state.

    Parameters
    ----------
    setup : StrategySetup
        Needs the ``fedkseed`` section; ``initial_arrays`` is ignored (the server holds no model).

    """

    #: Read by the runner: no initial model is built and evaluation is federated.
    holds_model = False
    #: FedKSeed-Pro sends seed probabilities and keeps per-seed statistics.
    pro = False
    reply_records = (PAIRS_RECORD, "metrics")

    def __init__(self, setup: StrategySetup) -> None:
        super().__init__(setup)
        self.cfg: FedKSeedConfig = setup.sections["fedkseed"]
        k = self.cfg.num_seeds
        #: Scalar-gradient accumulator, float64 here, sent as fp32.
        self.accumulator = np.zeros(k, dtype=np.float64)
        #: Pro's history of each seed, kept as sum of |clip(g)| and length (starts at [0.0]).
        self.abs_sum = np.zeros(k, dtype=np.float64)
        self.count = np.ones(k, dtype=np.float64)

    # ------------------------------------------------------------------ downlink
    def probabilities(self) -> np.ndarray:
        """Return this round's seed-sampling probabilities (Pro) as float64."""
        return pro_probabilities(self.abs_sum, self.count)

    def down_record(self, *, with_probabilities: bool) -> ArrayRecord:
        """Encode ``A`` as fp32 (plus Pro's probabilities as fp32)."""
        arrays = {ACCUMULATOR: Array(self.accumulator.astype(np.float32))}
        if with_probabilities:
            arrays[PROBABILITIES] = Array(self.probabilities().astype(np.float32))
        return ArrayRecord(arrays)

    def configure_round(self, rnd: int, partitions: list[int]) -> dict[int, RecordDict]:
        """Every sampled client gets ``A`` (Pro: and the probabilities) and the round number."""
        return {pid: RecordDict({DOWN_RECORD: self.down_record(with_probabilities=self.pro),
                                 "config": self.base_config(rnd)})
                for pid in partitions}

    # ------------------------------------------------------------------ uplink
    def validate_reply(self, rnd: int, partition_id: int, content: RecordDict) -> None:
        """Pairs within bounds (index range, finiteness, at most ``local-steps``), a weight."""
        read_pairs(content, self.cfg.num_seeds, self.cfg.local_steps)
        v.num_examples(content)

    def aggregate_round(self, rnd: int, replies: list[NodeReply]) -> dict[str, float]:
        """``A[k] += sum_i w_i * sum_{steps of i on seed k} g``; Pro also updates its history."""
        weights = np.array([1.0 if self.cfg.equal_weight else float(v.num_examples(r.content))
                            for r in replies])
        weights /= weights.sum()
        pairs = 0
        for w, r in zip(weights, replies, strict=True):
            idx, grad = read_pairs(r.content, self.cfg.num_seeds, self.cfg.local_steps)
            g = grad.astype(np.float64)
            np.add.at(self.accumulator, idx, w * g)
            if self.pro:
                clip = self.cfg.pro_clip
                np.add.at(self.abs_sum, idx, np.abs(np.clip(g, -clip, clip)))
                np.add.at(self.count, idx, 1.0)
            pairs += idx.size
        metrics = {f"train_{k}": x for k, x in weighted_metrics(replies).items()}
        metrics.update({
            "pairs_per_client": pairs / len(replies),
            "train_up_bytes_per_client": float(np.mean([r.up_bytes for r in replies])),
            "train_down_bytes_per_client": float(np.mean([r.down_bytes for r in replies])),
            "seeds_used": float(np.count_nonzero(self.accumulator)),
        })
        return metrics

    # ------------------------------------------------------------------ evaluation
    def evaluate_round(self, grid: Grid, rnd: int) -> RoundLog:
        """Federated evaluation: every online node rebuilds the model from ``A`` and evaluates."""
        by_pid = self.discover(grid)
        contents = {pid: RecordDict({DOWN_RECORD: self.down_record(with_probabilities=False),
                                     "config": self.base_config(rnd)})
                    for pid in sorted(by_pid)}
        return self.run_phase(grid, rnd, contents, by_pid, MessageType.EVALUATE, aggregate=False)

    # ------------------------------------------------------------------ state
    def state_dict(self) -> dict[str, Any]:
        """Return the base state, ``A`` and (Pro) the per-seed statistics."""
        state = {**super().state_dict(), "accumulator": self.accumulator.copy()}
        if self.pro:
            state["abs_sum"] = self.abs_sum.copy()
            state["count"] = self.count.copy()
        return state

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore :meth:`state_dict`, checking the number of seeds."""
        super().load_state_dict(state)
        k = self.cfg.num_seeds
        acc = np.asarray(state["accumulator"], dtype=np.float64)
        if acc.shape != (k,):
            raise ValueError(f"checkpoint has {acc.shape[0]} seeds, this run has {k}")
        self.accumulator = acc.copy()
        if self.pro:
            self.abs_sum = np.asarray(state["abs_sum"], dtype=np.float64).copy()
            self.count = np.asarray(state["count"], dtype=np.float64).copy()


class FedKSeedPro(FedKSeed):
    """FedKSeed-Pro: clients sample seeds with probabilities that favour important seeds."""

    pro = True


def bad_replies(content: RecordDict) -> list[tuple[str, RecordDict]]:
    """Malformed variants of a valid reply for the conformance suite.

    An index equal to ``2**31 - 1`` (out of range for any K that fits int32) and ``-1``, a NaN and
    an infinite scalar, twice the pairs plus one (more than ``local-steps``), and index and scalar
    arrays of different lengths.
    """
    rec = content[PAIRS_RECORD]
    assert isinstance(rec, ArrayRecord)
    idx, grad = rec[SEED_INDEX].numpy().copy(), rec[GRAD].numpy().copy()
    assert idx.size, "the reply has no pairs"

    def reply(i: np.ndarray, g: np.ndarray) -> RecordDict:
        out = RecordDict({PAIRS_RECORD: pairs_record(i, g)})
        for name, r in content.items():
            if name != PAIRS_RECORD:
                out[name] = r
        return out

    def edited(arr: np.ndarray, value: float) -> np.ndarray:
        out = arr.copy()
        out[0] = value
        return out

    return [
        ("seed index out of range", reply(edited(idx, 2**31 - 1), grad)),
        ("negative seed index", reply(edited(idx, -1), grad)),
        ("NaN scalar", reply(idx, edited(grad, np.nan))),
        ("infinite scalar", reply(idx, edited(grad, np.inf))),
        ("too many pairs", reply(np.tile(idx, 3)[: 2 * idx.size + 1],
                                 np.tile(grad, 3)[: 2 * idx.size + 1])),
        ("lengths differ", reply(idx, grad[:-1])),
    ]

