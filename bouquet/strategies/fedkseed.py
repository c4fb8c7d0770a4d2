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

Wire format (fixed names; every number little-endian, packed without any header):

* downlink (train and evaluate): ConfigRecord ``"fedkseed"`` with the bytes field
  ``"accumulator"`` (K float32, ``4*K`` bytes) and, for Pro's training messages, ``"probabilities"``
  (K float32), next to the usual ``"config"`` record;
* uplink (train): ConfigRecord ``"pairs"`` with the bytes field ``"pairs"`` (one 8-byte entry per
  applied local step: int32 seed index then float32 scalar gradient), next to the ``"metrics"``
  MetricRecord (``num-examples``, ``loss``).

Raw bytes rather than numpy arrays in an ArrayRecord: each Array carries a 128-byte ``.npy`` header
plus its own framing, which for K=4096 and 200 steps would push the per-client traffic past the
paper's 18 KiB. :func:`pack_floats`/:func:`unpack_floats` and :func:`pack_pairs`/
:func:`unpack_pairs` are the one codec, used by server and clients alike.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

import numpy as np
from flwr.app import Array, ArrayRecord, ConfigRecord, MetricRecord, RecordDict

from bouquet.schema import key
from bouquet.strategies import validation as v
from bouquet.strategies.base import (
    BouquetStrategy,
    NodeReply,
    train_metrics,
)

#: Downlink ConfigRecord and its bytes fields (K little-endian float32 each).
DOWN_RECORD = "fedkseed"
ACCUMULATOR = "accumulator"
PROBABILITIES = "probabilities"
#: Uplink ConfigRecord and its one bytes field of packed (seed index, scalar gradient) pairs.
PAIRS_RECORD = "pairs"
PAIRS = "pairs"
#: One uplink entry: int32 seed index, float32 scalar gradient, little-endian, 8 bytes, no padding.
PAIR_DTYPE = np.dtype([("seed_index", "<i4"), ("grad", "<f4")])
#: One downlink value: a little-endian float32.
FLOAT_DTYPE = np.dtype("<f4")
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


def pack_floats(values: np.ndarray) -> bytes:
    """Encode a vector as raw little-endian float32 bytes (4 per value, no header)."""
    return np.ascontiguousarray(values, dtype=FLOAT_DTYPE).reshape(-1).tobytes()


def unpack_floats(data: object, count: int, label: str) -> np.ndarray:
    """Decode exactly ``count`` finite little-endian float32 values; return them as float64.

    Raises :class:`~bouquet.strategies.validation.InvalidReply` (a ``ValueError``) on anything else:
    a value that is not ``bytes``, a length other than ``4 * count``, a non-finite value.
    """
    if not isinstance(data, bytes):
        raise v.InvalidReply(f"{label}: expected bytes, got {type(data).__name__}")
    if len(data) != FLOAT_DTYPE.itemsize * count:
        raise v.InvalidReply(f"{label}: {len(data)} bytes, expected {FLOAT_DTYPE.itemsize} x "
                             f"{count}")
    out = np.frombuffer(data, dtype=FLOAT_DTYPE).astype(np.float64)
    if not np.all(np.isfinite(out)):
        raise v.InvalidReply(f"{label}: non-finite values")
    return out


def pack_pairs(seed_index: np.ndarray, grad: np.ndarray) -> bytes:
    """Encode (seed index, scalar gradient) pairs as ``n x (int32 LE, float32 LE)`` bytes."""
    idx = np.asarray(seed_index).reshape(-1)
    g = np.asarray(grad).reshape(-1)
    if idx.shape != g.shape:
        raise ValueError(f"{idx.size} seed indices but {g.size} gradients")
    if idx.size and (idx.min() < np.iinfo(np.int32).min or idx.max() > np.iinfo(np.int32).max):
        raise ValueError("seed index does not fit int32")
    out = np.empty(idx.size, dtype=PAIR_DTYPE)
    out["seed_index"] = idx
    out["grad"] = g
    return out.tobytes()


def unpack_pairs(data: object, num_seeds: int, max_pairs: int) -> tuple[np.ndarray, np.ndarray]:
    """Decode and check packed pairs; raise :class:`~bouquet.strategies.validation.InvalidReply`.

    ``data`` must be ``bytes`` whose length is a multiple of 8, holding at most ``max_pairs``
    pairs, every index in ``[0, num_seeds)`` and every gradient finite. Returns the int32 indices
    and the float32 gradients (native byte order).
    """
    label = f"{PAIRS_RECORD}/{PAIRS}"
    if not isinstance(data, bytes):
        raise v.InvalidReply(f"{label}: expected bytes, got {type(data).__name__}")
    if len(data) % PAIR_DTYPE.itemsize:
        raise v.InvalidReply(f"{label}: {len(data)} bytes, not a multiple of "
                             f"{PAIR_DTYPE.itemsize}")
    n = len(data) // PAIR_DTYPE.itemsize
    if n > max_pairs:
        raise v.InvalidReply(f"{label}: {n} pairs, more than the {max_pairs} local steps")
    pairs = np.frombuffer(data, dtype=PAIR_DTYPE)
    idx = pairs["seed_index"].astype(np.int32)
    grad = pairs["grad"].astype(np.float32)
    if n and (idx.min() < 0 or idx.max() >= num_seeds):
        raise v.InvalidReply(f"{label}: seed index outside [0, {num_seeds})")
    if not np.all(np.isfinite(grad)):
        raise v.InvalidReply(f"{label}: non-finite scalar gradient")
    return idx, grad


def pairs_record(seed_index: np.ndarray, grad: np.ndarray) -> ConfigRecord:
    """Build the uplink record: one bytes field of packed pairs (see :func:`pack_pairs`)."""
    return ConfigRecord({PAIRS: pack_pairs(seed_index, grad)})


def _fields(content: RecordDict, name: str, required: frozenset[str],
            optional: frozenset[str] = frozenset()) -> ConfigRecord:
    """Return the ConfigRecord ``name`` if it holds all ``required`` fields and no others.

    Fields in ``optional`` may also appear; anything else raises
    :class:`~bouquet.strategies.validation.InvalidReply`.
    """
    rec = v.config_record(content, name)
    keys = set(rec.keys())
    if not required <= keys <= required | optional:
        raise v.InvalidReply(f"{name}: expected fields {sorted(required)} "
                             f"(optional {sorted(optional)}), got {sorted(keys)}")
    return rec


def read_pairs(content: RecordDict, num_seeds: int, max_pairs: int
               ) -> tuple[np.ndarray, np.ndarray]:
    """Decode and check a reply's pairs; raise :class:`~bouquet.strategies.validation.InvalidReply`.

    The ConfigRecord ``"pairs"`` with exactly the bytes field ``"pairs"``, checked by
    :func:`unpack_pairs`.
    """
    rec = _fields(content, PAIRS_RECORD, frozenset({PAIRS}))
    return unpack_pairs(rec[PAIRS], num_seeds, max_pairs)


def down_record(accumulator: np.ndarray, probabilities: np.ndarray | None) -> ConfigRecord:
    """Encode the downlink record: ``A`` (and Pro's probabilities) as float32 bytes."""
    rec = ConfigRecord({ACCUMULATOR: pack_floats(accumulator)})
    if probabilities is not None:
        rec[PROBABILITIES] = pack_floats(probabilities)
    return rec


def read_down(content: RecordDict, num_seeds: int) -> tuple[np.ndarray, np.ndarray | None]:
    """Decode a downlink message: ``A`` and, when sent, the probabilities (float64 copies).

    Raises :class:`~bouquet.strategies.validation.InvalidReply` (a ``ValueError``) unless the record
    holds exactly ``4 * num_seeds`` finite float32 bytes per field and the probabilities are
    non-negative with a positive sum.
    """
    rec = _fields(content, DOWN_RECORD, frozenset({ACCUMULATOR}), frozenset({PROBABILITIES}))
    acc = unpack_floats(rec[ACCUMULATOR], num_seeds, f"{DOWN_RECORD}/{ACCUMULATOR}")
    if PROBABILITIES not in rec:
        return acc, None
    p = unpack_floats(rec[PROBABILITIES], num_seeds, f"{DOWN_RECORD}/{PROBABILITIES}")
    if p.min() < 0 or p.sum() <= 0:
        raise v.InvalidReply(f"{DOWN_RECORD}/{PROBABILITIES}: not a distribution")
    return acc, p


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
