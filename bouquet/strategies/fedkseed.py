"""FedKSeed and FedKSeed-Pro: zeroth-order full-parameter federated tuning with K shared seeds.

Qin, Chen, Yao, Ding, Li, Chen, Li. "Federated Full-Parameter Tuning of Billion-Sized Language
Models with Communication Cost under 18 Kilobytes." ICML 2024, arXiv:2312.06353.

Every node holds the same pre-trained weights ``w0`` and derives the same K candidate seeds
``s_1..s_K`` from one master seed. The global model is *defined* by a K-vector ``A``::

    w = w0 - lr * sum_k A[k] * z(s_k)

where ``z(s)`` is the direction addressed by seed ``s`` (bouquet.clients.zeroth_order).
A round: the server sends ``A`` (K fp32 values; FedKSeed-Pro adds K seed probabilities); each client
rebuilds ``w``, runs ``local-steps`` two-point zeroth-order steps, each along one candidate seed,
and returns its (seed index int32, scalar gradient fp32) pairs; the server adds the pairs into
``A``, weighted by the clients' example counts. Because every local step is a move along one seed's
direction, this equals FedAvg of the clients' model deltas. The server never holds or sends model
arrays: ``A`` (and Pro's per-seed statistics) is its whole state. This module is numpy only.

Wire format: :mod:`bouquet.wire.fedkseed` (raw little-endian bytes rather than numpy arrays in an
ArrayRecord: each Array carries a 128-byte ``.npy`` header plus its own framing, which for K=4096
and 200 steps would push the per-client traffic past the paper's 18 KiB).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
from flwr.app import Array, ArrayRecord, ConfigRecord, MetricRecord, RecordDict

from bouquet.strategies.base import BouquetStrategy
from bouquet.strategies.round_log import NodeReply, train_metrics
from bouquet.strategies.sections.fedkseed import FedKSeedConfig
from bouquet.wire import validation as v
from bouquet.wire.fedkseed import (
    DIRECTION_GENERATOR,
    DOWN_RECORD,
    PAIR_DTYPE,
    PAIRS,
    PAIRS_RECORD,
    down_record,
    pack_pairs,
    read_pairs,
)

#: Pro's importance statistic: ``+1e-10`` in the min-max normalisation, as in the reference.
PRO_NORM_EPS = 1e-10


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


class FedKSeed(BouquetStrategy):
    """FedKSeed server (Qin et al., ICML 2024): the K-float accumulator is the whole global state.

    The server holds no model: ``start(initial_arrays=ArrayRecord(), ...)`` is fine, and the
    ``arrays`` of Flower's ``Result`` stay empty (nodes rebuild the model from the seeds).
    Its clients send (seed index, scalar) pairs (bouquet's client half).
    """

    method_name = "fedkseed"
    config_sections = {"fedkseed": FedKSeedConfig}
    #: Read by the runner: no initial model is built and evaluation is federated.
    holds_model = False
    #: FedKSeed-Pro sends seed probabilities and keeps per-seed statistics.
    pro = False
    reply_records = (PAIRS_RECORD, "metrics")

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        k = self.cfg.num_seeds
        #: Scalar-gradient accumulator, float64 here, sent as fp32.
        self.accumulator = np.zeros(k, dtype=np.float64)
        #: Pro's history of each seed, kept as sum of |clip(g)| and length (starts at [0.0]).
        self.abs_sum = np.zeros(k, dtype=np.float64)
        self.count = np.ones(k, dtype=np.float64)

    @property
    def cfg(self) -> FedKSeedConfig:
        """The ``fedkseed`` section."""
        return self.setup.sections["fedkseed"]  # type: ignore[no-any-return]

    # ------------------------------------------------------------------ downlink
    def probabilities(self) -> np.ndarray:
        """Return this round's seed-sampling probabilities (Pro) as float64."""
        return pro_probabilities(self.abs_sum, self.count)

    def down_record(self, *, with_probabilities: bool) -> ConfigRecord:
        """Encode ``A`` (plus Pro's probabilities) as float32 bytes, see :func:`down_record`."""
        return down_record(self.accumulator,
                           self.probabilities() if with_probabilities else None)

    def configure_round(self, rnd: int, partitions: list[int]) -> dict[int, RecordDict]:
        """Every sampled client gets ``A`` (Pro: and the probabilities) and the round number."""
        return {pid: RecordDict({DOWN_RECORD: self.down_record(with_probabilities=self.pro),
                                 "config": self.base_config(rnd)})
                for pid in partitions}

    # ------------------------------------------------------------------ uplink
    def validate_reply(self, rnd: int, partition_id: int, content: RecordDict) -> float:
        """Pairs within bounds (index range, finiteness, at most ``local-steps``), a weight.

        Returns the norm of the projected-gradient scalars (the accumulator moves by them).
        """
        _, grad = read_pairs(content, self.cfg.num_seeds, self.cfg.local_steps)
        v.num_examples(content)
        return v.l2_norm([grad])

    def state_is_finite(self) -> bool:
        """The accumulator (and Pro's statistics) are finite."""
        parts = [self.accumulator, *([self.abs_sum, self.count] if self.pro else [])]
        return all(bool(np.all(np.isfinite(p))) for p in parts)

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
        metrics = train_metrics(replies)
        metrics.update({
            "pairs_per_client": pairs / len(replies),
            "train_up_bytes_per_client": float(np.mean([r.up_bytes for r in replies])),
            "train_down_bytes_per_client": float(np.mean([r.down_bytes for r in replies])),
            "seeds_used": float(np.count_nonzero(self.accumulator)),
        })
        return metrics

    # ------------------------------------------------------------------ evaluation
    def evaluation_content(self, rnd: int, partition_id: int) -> RecordDict:
        """Federated evaluation: every node rebuilds the model from ``A`` and evaluates."""
        return RecordDict({DOWN_RECORD: self.down_record(with_probabilities=False),
                           "config": self.base_config(rnd)})

    # ------------------------------------------------------------------ state
    def state_dict(self) -> dict[str, Any]:
        """Return the base state, ``A`` and (Pro) the per-seed statistics."""
        state = {**super().state_dict(), "accumulator": self.accumulator.copy(),
                 "direction_generator": DIRECTION_GENERATOR}
        if self.pro:
            state["abs_sum"] = self.abs_sum.copy()
            state["count"] = self.count.copy()
        return state

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore :meth:`state_dict`, checking the number of seeds and the direction generator.

        Raises
        ------
        ValueError
            When the checkpoint's accumulator was built with another direction generator
            (a checkpoint without the entry predates issue 17's generator), or has another K.

        """
        made_with = str(state.get("direction_generator", "per-tensor mt19937 (before issue 17)"))
        if made_with != DIRECTION_GENERATOR:
            raise ValueError(f"checkpoint's seeds were replayed with the direction generator "
                             f"{made_with!r}; this version uses {DIRECTION_GENERATOR!r}, which "
                             "turns the same seeds into other directions: start a new run")
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

    method_name = "fedkseed-pro"
    pro = True


def bad_replies(content: RecordDict) -> list[tuple[str, RecordDict]]:
    """Malformed variants of a valid reply for the conformance suite, in the packed format.

    An index equal to ``2**31 - 1`` (out of range for any K that fits int32) and ``-1``, a NaN and
    an infinite scalar, twice the pairs plus one (more than ``local-steps``), the bytes cut by 3
    and extended by 4 (neither a multiple of 8), the field as a list of ints, as a string and
    missing, an extra field, and the record sent as an ArrayRecord or a MetricRecord.
    """
    rec = content[PAIRS_RECORD]
    assert isinstance(rec, ConfigRecord)
    data = rec[PAIRS]
    assert isinstance(data, bytes) and data, "the reply has no pairs"
    pairs = np.frombuffer(data, dtype=PAIR_DTYPE)
    idx, grad = pairs["seed_index"].copy(), pairs["grad"].copy()

    def reply(record: Any) -> RecordDict:
        out = RecordDict({PAIRS_RECORD: record})
        for name, r in content.items():
            if name != PAIRS_RECORD:
                out[name] = r
        return out

    def packed(i: np.ndarray, g: np.ndarray) -> RecordDict:
        return reply(ConfigRecord({PAIRS: pack_pairs(i, g)}))

    def edited(arr: np.ndarray, value: float) -> np.ndarray:
        out = arr.copy()
        out[0] = value
        return out

    many = 2 * idx.size + 1
    return [
        ("seed index out of range", packed(edited(idx, 2**31 - 1), grad)),
        ("negative seed index", packed(edited(idx, -1), grad)),
        ("NaN scalar", packed(idx, edited(grad, np.nan))),
        ("infinite scalar", packed(idx, edited(grad, np.inf))),
        ("too many pairs", packed(np.resize(idx, many), np.resize(grad, many))),
        ("truncated bytes", reply(ConfigRecord({PAIRS: data[:-3]}))),
        ("half a pair extra", reply(ConfigRecord({PAIRS: data + data[:4]}))),
        ("wrong type: list of ints", reply(ConfigRecord({PAIRS: list(data)}))),
        ("wrong type: string", reply(ConfigRecord({PAIRS: data.hex()}))),
        ("missing field", reply(ConfigRecord({"other": data}))),
        ("extra field", reply(ConfigRecord({PAIRS: data, "extra": b""}))),
        ("wrong record type: ArrayRecord",
         reply(ArrayRecord({PAIRS: Array(np.frombuffer(data, dtype=np.uint8).copy())}))),
        ("wrong record type: MetricRecord", reply(MetricRecord({PAIRS: 1.0}))),
    ]
