"""The compressor interface: ``compress(x, rng) -> payload``, ``decompress(payload) -> x_hat``.

A *payload* is a plain ``dict[str, numpy.ndarray]`` whose keys and dtypes are fixed per compressor
(:attr:`Compressor.fields`), so it packs one-to-one into a Flower ``ArrayRecord``
(:mod:`bouquet.compression.records`). Every payload carries the input's ``shape`` (``int64``, one
entry per dimension, 8 bytes each); the rest is bit-packed where the format says so, and the
payload's :func:`encoded_bytes` is its exact size without Flower's framing.

Compressors work on ``float32``: any real input is cast to ``float32`` and ``decompress`` returns
``float32`` of the original shape.
"""

from __future__ import annotations

import abc
import dataclasses
import math
from collections.abc import Mapping

import numpy as np

from bouquet.compression.errors import PayloadError

Payload = dict[str, np.ndarray]

#: Largest number of elements a payload may declare (guards against memory bombs).
MAX_ELEMENTS = 1 << 31


@dataclasses.dataclass(frozen=True)
class Guarantee:
    """What a compressor promises for a vector of length ``d``.

    Attributes
    ----------
    unbiased : bool
        ``E[C(x)] = x``.
    omega : float or None
        For unbiased compressors: ``E||C(x) - x||^2 <= omega ||x||^2``.
    delta : float or None
        Contraction: ``||C(x) - x||^2 <= (1 - delta) ||x||^2`` (in expectation for random
        compressors). ``None`` when no positive ``delta`` is guaranteed.

    """

    unbiased: bool
    omega: float | None = None
    delta: float | None = None

    def describe(self) -> str:
        """Human-readable property, for docs and logs."""
        if self.unbiased:
            return f"unbiased, omega={self.omega:.4g}"
        if self.delta is not None:
            return f"biased, contractive, delta={self.delta:.4g}"
        return "biased, no contraction guaranteed"


class Compressor(abc.ABC):
    """Base class of every compressor (stateless; error feedback wraps one)."""

    #: Registry name (``make_compressor(name, ...)``).
    name: str = ""

    #: Payload keys and their dtypes, ``shape`` included.
    fields: Mapping[str, np.dtype] = {}

    @abc.abstractmethod
    def compress(self, x: np.ndarray, rng: np.random.Generator) -> Payload:
        """Encode ``x``; random compressors draw only from ``rng``."""

    @abc.abstractmethod
    def decode(self, payload: Payload, shape: tuple[int, ...]) -> np.ndarray:
        """Decode a payload already checked for keys and dtypes into a flat float32 vector."""

    @abc.abstractmethod
    def guarantee(self, d: int) -> Guarantee:
        """Return the declared property for vectors of length ``d``."""

    def size_bytes(self, shape: tuple[int, ...]) -> int | None:
        """Exact payload bytes for an input of ``shape``; None when the size depends on data."""
        return None

    def params(self) -> dict[str, float | int]:
        """Return the compressor's parameters (for logs and docs)."""
        return {}

    # ------------------------------------------------------------------ shared plumbing
    def decompress(self, payload: Payload) -> np.ndarray:
        """Check and decode a payload; raise :class:`PayloadError` if it does not decode."""
        check_fields(payload, self.fields)
        shape = payload_shape(payload)
        flat = self.decode(payload, shape)
        if flat.shape != (math.prod(shape),):
            raise PayloadError(f"decoded {flat.shape[0]} values for shape {shape}")
        if not np.all(np.isfinite(flat)):
            raise PayloadError("decoded non-finite values")
        return flat.astype(np.float32, copy=False).reshape(shape)

    def __repr__(self) -> str:
        args = ", ".join(f"{k}={v!r}" for k, v in self.params().items())
        return f"{type(self).__name__}({args})"


def as_vector(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(flat float32 copy, int64 shape array)`` of an input."""
    arr = np.asarray(x)
    if not np.issubdtype(arr.dtype, np.floating) and not np.issubdtype(arr.dtype, np.integer):
        raise TypeError(f"cannot compress an array of dtype {arr.dtype}")
    return arr.astype(np.float32).ravel(), np.asarray(arr.shape, dtype=np.int64)


def check_fields(payload: Mapping[str, np.ndarray], fields: Mapping[str, np.dtype]) -> None:
    """Exactly the expected keys, each a 1-D array of the expected dtype."""
    if set(payload) != set(fields):
        raise PayloadError(
            f"payload fields {sorted(payload)} differ from expected {sorted(fields)}"
        )
    for key, dtype in fields.items():
        arr = payload[key]
        if not isinstance(arr, np.ndarray):
            raise PayloadError(f"payload field {key!r} is not an array")
        if arr.dtype != np.dtype(dtype):
            raise PayloadError(f"payload field {key!r} has dtype {arr.dtype}, expected {dtype}")
        if arr.ndim != 1:
            raise PayloadError(f"payload field {key!r} must be 1-D, got shape {arr.shape}")
        if np.issubdtype(arr.dtype, np.floating) and not np.all(np.isfinite(arr)):
            raise PayloadError(f"payload field {key!r} holds non-finite values")


def payload_shape(payload: Mapping[str, np.ndarray]) -> tuple[int, ...]:
    """Return the declared input shape, checked for sanity."""
    shape = payload["shape"]
    if np.any(shape < 0):
        raise PayloadError(f"negative dimension in shape {shape.tolist()}")
    dims = tuple(int(s) for s in shape)
    if math.prod(dims) > MAX_ELEMENTS:
        raise PayloadError(f"shape {dims} is too large")
    return dims


def encoded_bytes(payload: Mapping[str, np.ndarray]) -> int:
    """Exact size of a payload's content in bytes (no framing)."""
    return int(sum(np.asarray(a).nbytes for a in payload.values()))


def shape_bytes(shape: tuple[int, ...]) -> int:
    """Bytes of the ``shape`` header every payload carries."""
    return 8 * len(shape)


def count_for(ratio: float, k: int, d: int) -> int:
    """Count kept coordinates: ``k`` if positive, else ``ceil(ratio * d)``; in [1, d]."""
    n = k if k > 0 else math.ceil(ratio * d)
    return max(1, min(int(n), d)) if d > 0 else 0
