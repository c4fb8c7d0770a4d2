"""QSGD stochastic quantisation (Alistarh, Grubic, Li, Tomioka, Vojnovic; NeurIPS 2017).

The vector is cut into buckets of ``bucket`` coordinates. For a bucket ``v`` with Euclidean norm
``n``, coordinate ``j`` becomes ``n sign(v_j) l_j / s`` where the level ``l_j`` is
``floor(s |v_j| / n)`` or one more, the upper one with probability ``s |v_j| / n - floor(...)``,
which makes the quantiser unbiased. Variance: ``E||Q(v) - v||^2 <= min(b / s^2, sqrt(b) / s)
||v||^2`` for a bucket of ``b`` coordinates (Lemma 3.1 of the paper).

Encoding (fixed length, no Elias coding): one float32 norm per bucket, one sign bit and
``ceil(log2(s + 1))`` level bits per coordinate, bit-packed:
``32 ceil(d / b) + d (1 + ceil(log2(s + 1)))`` bits, plus the shape header.
"""

from __future__ import annotations

import math

import numpy as np

from bouquet.compression.base import Compressor, Guarantee, Payload, as_vector, shape_bytes
from bouquet.compression.bitpack import pack_uint, packed_size, unpack_uint
from bouquet.compression.errors import PayloadError


class QSGD(Compressor):
    """Unbiased stochastic quantisation with ``levels`` levels per bucket.

    Parameters
    ----------
    levels : int
        ``s``, the number of non-zero levels (``s = 1`` is ternary quantisation).
    bucket : int
        Coordinates per bucket (each bucket has its own norm).

    """

    name = "qsgd"
    fields = {"shape": np.dtype(np.int64), "norms": np.dtype(np.float32),
              "signs": np.dtype(np.uint8), "levels": np.dtype(np.uint8)}

    def __init__(self, levels: int = 4, bucket: int = 512) -> None:
        if levels < 1 or bucket < 1:
            raise ValueError(f"qsgd: levels and bucket must be >= 1, got {levels}, {bucket}")
        self.levels, self.bucket = int(levels), int(bucket)

    def params(self) -> dict[str, float | int]:
        """Levels and bucket size."""
        return {"levels": self.levels, "bucket": self.bucket}

    @property
    def level_bits(self) -> int:
        """``ceil(log2(s + 1))``."""
        return self.levels.bit_length()

    def _buckets(self, d: int) -> int:
        return math.ceil(d / self.bucket) if d else 0

    def compress(self, x: np.ndarray, rng: np.random.Generator) -> Payload:
        """Per-bucket norms, signs and stochastic levels."""
        flat, shape = as_vector(x)
        d, b, s = flat.size, self.bucket, self.levels
        nb = self._buckets(d)
        padded = np.zeros(nb * b, dtype=np.float64)
        padded[:d] = flat
        blocks = padded.reshape(nb, b)
        norms = np.linalg.norm(blocks, axis=1).astype(np.float32)
        safe = np.where(norms > 0, norms.astype(np.float64), 1.0)
        ratio = np.minimum(s * np.abs(blocks) / safe[:, None], s)
        low = np.floor(ratio)
        level = low + (rng.random(ratio.shape) < (ratio - low))
        level = level.ravel()[:d].astype(np.int64)
        return {"shape": shape, "norms": norms, "signs": pack_uint(flat < 0, 1),
                "levels": pack_uint(level, self.level_bits)}

    def decode(self, payload: Payload, shape: tuple[int, ...]) -> np.ndarray:
        """``norm * sign * level / s``."""
        d = int(np.prod(shape))
        nb = self._buckets(d)
        norms = payload["norms"]
        if norms.size != nb or np.any(norms < 0):
            raise PayloadError(f"qsgd: expected {nb} non-negative norms, got {norms.size}")
        neg = unpack_uint(payload["signs"], 1, d)
        level = unpack_uint(payload["levels"], self.level_bits, d)
        if level.size and level.max() > self.levels:
            raise PayloadError(f"qsgd: level above s={self.levels}")
        per_coord = np.repeat(norms.astype(np.float64), self.bucket)[:d]
        return (per_coord * (1.0 - 2.0 * neg) * level / self.levels).astype(np.float32)

    def guarantee(self, d: int) -> Guarantee:
        """Unbiased with ``omega = min(b / s^2, sqrt(b) / s)``, ``b = min(bucket, d)``."""
        b = min(self.bucket, max(d, 1))
        s = self.levels
        return Guarantee(unbiased=True, omega=min(b / s**2, math.sqrt(b) / s))

    def size_bytes(self, shape: tuple[int, ...]) -> int:
        """Norms + packed sign bits + packed level bits + shape header."""
        d = int(np.prod(shape))
        return (4 * self._buckets(d) + packed_size(d, 1) + packed_size(d, self.level_bits)
                + shape_bytes(shape))
