"""FedKSeed's wire format: the K-float downlink, the packed (seed index, gradient) uplink.

Fixed names; every number little-endian, packed without any header (see
:mod:`bouquet.strategies.fedkseed` for the method):

* downlink (train and evaluate): ConfigRecord ``"fedkseed"`` with the bytes field
  ``"accumulator"`` (K float32, ``4*K`` bytes) and, for Pro's training messages, ``"probabilities"``
  (K float32), next to the usual ``"config"`` record;
* uplink (train): ConfigRecord ``"pairs"`` with the bytes field ``"pairs"`` (one 8-byte entry per
  applied local step: int32 seed index then float32 scalar gradient), next to the ``"metrics"``
  MetricRecord (``num-examples``, ``loss``).

:func:`pack_floats`/:func:`unpack_floats` and :func:`pack_pairs`/:func:`unpack_pairs` are the one
codec, used by server and clients alike; :func:`candidate_seeds` is the seed list both derive.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
from flwr.app import ConfigRecord, RecordDict

from bouquet.wire import validation as v

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
#: Which direction generator turns a seed into ``z(s)`` (:mod:`bouquet.clients.zeroth_order`):
#: windows of one fixed pool picked by a counter hash, since issue 17. The accumulator ``A`` only
#: means something with the generator that made it, so a server checkpoint records this name and
#: a run made with another generator (the per-tensor mt19937 draws before) is not resumed.
DIRECTION_GENERATOR = "pool22-sfc64-splitmix64-block32768"


def candidate_seeds(master_seed: int, num_seeds: int) -> np.ndarray:
    """Return the K candidate seeds (int64, positive), identical on every node."""
    rng = np.random.default_rng(np.random.SeedSequence([master_seed, 0x5EED]))
    return rng.integers(1, 2**62, size=num_seeds, dtype=np.int64)


def pack_floats(values: np.ndarray) -> bytes:
    """Encode a vector as raw little-endian float32 bytes (4 per value, no header)."""
    return np.ascontiguousarray(values, dtype=FLOAT_DTYPE).reshape(-1).tobytes()


def unpack_floats(data: object, count: int, label: str) -> np.ndarray:
    """Decode exactly ``count`` finite little-endian float32 values; return them as float64.

    Raises :class:`~bouquet.wire.validation.InvalidReply` (a ``ValueError``) on anything else:
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
    """Decode and check packed pairs; raise :class:`~bouquet.wire.validation.InvalidReply`.

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
    :class:`~bouquet.wire.validation.InvalidReply`.
    """
    rec = v.config_record(content, name)
    keys = set(rec.keys())
    if not required <= keys <= required | optional:
        raise v.InvalidReply(f"{name}: expected fields {sorted(required)} "
                             f"(optional {sorted(optional)}), got {sorted(keys)}")
    return rec


def read_pairs(content: RecordDict, num_seeds: int, max_pairs: int
               ) -> tuple[np.ndarray, np.ndarray]:
    """Decode and check a reply's pairs; raise :class:`~bouquet.wire.validation.InvalidReply`.

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


class Downlink(NamedTuple):
    """A decoded downlink: the seed coefficients ``A`` and Pro's probabilities (float64)."""

    accumulator: np.ndarray
    probabilities: np.ndarray | None


def read_down(content: RecordDict, num_seeds: int) -> Downlink:
    """Decode a downlink message: ``A`` and, when sent, the probabilities (float64 copies).

    Raises :class:`~bouquet.wire.validation.InvalidReply` (a ``ValueError``) unless the record
    holds exactly ``4 * num_seeds`` finite float32 bytes per field and the probabilities are
    non-negative with a positive sum.
    """
    rec = _fields(content, DOWN_RECORD, frozenset({ACCUMULATOR}), frozenset({PROBABILITIES}))
    acc = unpack_floats(rec[ACCUMULATOR], num_seeds, f"{DOWN_RECORD}/{ACCUMULATOR}")
    if PROBABILITIES not in rec:
        return Downlink(acc, None)
    p = unpack_floats(rec[PROBABILITIES], num_seeds, f"{DOWN_RECORD}/{PROBABILITIES}")
    if p.min() < 0 or p.sum() <= 0:
        raise v.InvalidReply(f"{DOWN_RECORD}/{PROBABILITIES}: not a distribution")
    return Downlink(acc, p)
