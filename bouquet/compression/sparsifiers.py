"""Identity, top-k, rand-k and scaled sign.

* Identity: the dense float32 vector; 32 d bits.
* Top-k (Stich et al., NeurIPS 2018; Alistarh et al., NeurIPS 2018): the ``k`` entries of largest
  magnitude; bit-packed indices of ``ceil(log2 d)`` bits plus float32 values, so
  ``k (32 + ceil(log2 d))`` bits. Contractive with ``delta = k / d``.
* Rand-k, scaled (Stich et al. 2018; Konecny & Richtarik 2018): ``k`` coordinates drawn uniformly
  without replacement, scaled by ``d / k``. The mask is a function of a 64-bit seed that travels
  instead of the indices: ``32 k + 64`` bits. Unbiased with ``omega = d / k - 1``.
* Scaled sign (Bernstein et al. 2018; Karimireddy et al., ICML 2019): ``(||x||_1 / d) sign(x)``;
  ``d + 32`` bits; contractive with ``delta = ||x||_1^2 / (d ||x||_2^2) >= 1 / d``.

Every payload also carries the input shape (8 bytes per dimension).
"""

from __future__ import annotations

import numpy as np

from bouquet.compression.base import (
    Compressor,
    Guarantee,
    Payload,
    as_vector,
    count_for,
    shape_bytes,
)
from bouquet.compression.bitpack import index_width, pack_uint, packed_size, unpack_uint
from bouquet.compression.errors import PayloadError

_F32 = np.dtype(np.float32)
_I64 = np.dtype(np.int64)
_U8 = np.dtype(np.uint8)
_U64 = np.dtype(np.uint64)


class Identity(Compressor):
    """No compression: the dense float32 vector."""

    name = "identity"
    fields = {"shape": _I64, "values": _F32}

    def compress(self, x: np.ndarray, rng: np.random.Generator) -> Payload:
        """Send ``x`` as is."""
        flat, shape = as_vector(x)
        return {"shape": shape, "values": flat}

    def decode(self, payload: Payload, shape: tuple[int, ...]) -> np.ndarray:
        """Return the values themselves."""
        return payload["values"]

    def guarantee(self, d: int) -> Guarantee:
        """Exact: unbiased with omega 0 and contractive with delta 1."""
        return Guarantee(unbiased=True, omega=0.0, delta=1.0)

    def size_bytes(self, shape: tuple[int, ...]) -> int:
        """``4 d`` plus the shape header."""
        return 4 * int(np.prod(shape)) + shape_bytes(shape)


class TopK(Compressor):
    """Keep the ``k`` largest-magnitude entries (ties broken by position).

    Parameters
    ----------
    ratio : float
        Fraction of coordinates kept (``k = ceil(ratio * d)``, at least 1).
    k : int
        Absolute count; overrides ``ratio`` when positive.

    """

    name = "topk"
    fields = {"shape": _I64, "indices": _U8, "values": _F32}

    def __init__(self, ratio: float = 0.01, k: int = 0) -> None:
        if not 0.0 < ratio <= 1.0 and k <= 0:
            raise ValueError(f"topk: ratio must be in (0, 1], got {ratio}")
        self.ratio, self.k = float(ratio), int(k)

    def params(self) -> dict[str, float | int]:
        """Ratio and absolute k."""
        return {"ratio": self.ratio, "k": self.k}

    def count(self, d: int) -> int:
        """Count kept entries for length ``d``."""
        return count_for(self.ratio, self.k, d)

    def compress(self, x: np.ndarray, rng: np.random.Generator) -> Payload:
        """Encode the sorted, bit-packed indices and the values of the k largest magnitudes."""
        flat, shape = as_vector(x)
        d = flat.size
        k = self.count(d)
        if k == d:
            idx = np.arange(d)
        else:
            # stable argsort on -|x| breaks ties by position, so the choice is deterministic
            idx = np.sort(np.argsort(-np.abs(flat), kind="stable")[:k])
        return {"shape": shape, "indices": pack_uint(idx, index_width(d)), "values": flat[idx]}

    def decode(self, payload: Payload, shape: tuple[int, ...]) -> np.ndarray:
        """Scatter the values back; indices must be strictly increasing and below ``d``."""
        d = int(np.prod(shape))
        values = payload["values"]
        if values.size != self.count(d):
            raise PayloadError(f"topk: {values.size} values, expected {self.count(d)} for d={d}")
        idx = sparse_indices(payload["indices"], values.size, d)
        out = np.zeros(d, dtype=np.float32)
        out[idx] = values
        return out

    def guarantee(self, d: int) -> Guarantee:
        """Contractive with ``delta = k / d``."""
        return Guarantee(unbiased=False, delta=self.count(d) / d if d else 1.0)

    def size_bytes(self, shape: tuple[int, ...]) -> int:
        """``4 k + ceil(k ceil(log2 d) / 8)`` plus the shape header."""
        d = int(np.prod(shape))
        k = self.count(d)
        return 4 * k + packed_size(k, index_width(d)) + shape_bytes(shape)


def sparse_indices(packed: np.ndarray, count: int, d: int) -> np.ndarray:
    """Unpack ``count`` sorted indices of a length-``d`` vector; reject duplicates and overflow."""
    if count > d:
        raise PayloadError(f"{count} values for a vector of length {d}")
    idx = unpack_uint(packed, index_width(d), count)
    if idx.size and (idx[-1] >= d or np.any(np.diff(idx) <= 0)):
        raise PayloadError("indices out of range or not strictly increasing")
    return idx


class RandK(Compressor):
    """Scaled random-k sparsification; the mask is regenerated from a seed that travels.

    Parameters
    ----------
    ratio : float
        Fraction of coordinates kept.
    k : int
        Absolute count; overrides ``ratio`` when positive.

    """

    name = "randk"
    fields = {"shape": _I64, "seed": _U64, "values": _F32}

    def __init__(self, ratio: float = 0.01, k: int = 0) -> None:
        if not 0.0 < ratio <= 1.0 and k <= 0:
            raise ValueError(f"randk: ratio must be in (0, 1], got {ratio}")
        self.ratio, self.k = float(ratio), int(k)

    def params(self) -> dict[str, float | int]:
        """Ratio and absolute k."""
        return {"ratio": self.ratio, "k": self.k}

    def count(self, d: int) -> int:
        """Count kept entries for length ``d``."""
        return count_for(self.ratio, self.k, d)

    @staticmethod
    def mask(seed: int, d: int, k: int) -> np.ndarray:
        """Sorted indices drawn without replacement from the seed (both sides call this)."""
        return np.sort(np.random.default_rng(seed).choice(d, size=k, replace=False))

    def compress(self, x: np.ndarray, rng: np.random.Generator) -> Payload:
        """Draw a fresh seed from ``rng``; send it and the unscaled values at its mask."""
        flat, shape = as_vector(x)
        d = flat.size
        k = self.count(d)
        seed = int(rng.integers(0, 2**63 - 1))
        return {"shape": shape, "seed": np.asarray([seed], dtype=np.uint64),
                "values": flat[self.mask(seed, d, k)]}

    def decode(self, payload: Payload, shape: tuple[int, ...]) -> np.ndarray:
        """Scatter ``(d / k) values`` at the mask of the seed."""
        d = int(np.prod(shape))
        values = payload["values"]
        seed = payload["seed"]
        if seed.size != 1:
            raise PayloadError(f"randk: expected one seed, got {seed.size}")
        k = values.size
        if k != self.count(d):
            raise PayloadError(f"randk: {k} values, expected {self.count(d)} for d={d}")
        out = np.zeros(d, dtype=np.float32)
        out[self.mask(int(seed[0]), d, k)] = values * np.float32(d / k)
        return out

    def guarantee(self, d: int) -> Guarantee:
        """Unbiased with ``omega = d / k - 1``."""
        k = self.count(d)
        return Guarantee(unbiased=True, omega=d / k - 1.0 if k else 0.0)

    def size_bytes(self, shape: tuple[int, ...]) -> int:
        """``4 k + 8`` (the seed) plus the shape header."""
        return 4 * self.count(int(np.prod(shape))) + 8 + shape_bytes(shape)


class ScaledSign(Compressor):
    """``(||x||_1 / d) sign(x)``: one bit per coordinate and one float32 scale."""

    name = "sign"
    fields = {"shape": _I64, "scale": _F32, "signs": _U8}

    def compress(self, x: np.ndarray, rng: np.random.Generator) -> Payload:
        """Bit 1 for negative entries, 0 otherwise; scale = mean absolute value."""
        flat, shape = as_vector(x)
        scale = float(np.abs(flat.astype(np.float64)).mean()) if flat.size else 0.0
        return {"shape": shape, "scale": np.asarray([scale], dtype=np.float32),
                "signs": pack_uint(flat < 0, 1)}

    def decode(self, payload: Payload, shape: tuple[int, ...]) -> np.ndarray:
        """``scale * (+1 or -1)``."""
        d = int(np.prod(shape))
        if payload["scale"].size != 1:
            raise PayloadError("sign: expected one scale")
        neg = unpack_uint(payload["signs"], 1, d)
        return (payload["scale"][0] * (1.0 - 2.0 * neg)).astype(np.float32)

    def guarantee(self, d: int) -> Guarantee:
        """Contractive with the worst-case ``delta = 1 / d`` (the bound is data-dependent)."""
        return Guarantee(unbiased=False, delta=1.0 / d if d else 1.0)

    def size_bytes(self, shape: tuple[int, ...]) -> int:
        """``ceil(d / 8) + 4`` plus the shape header."""
        return packed_size(int(np.prod(shape)), 1) + 4 + shape_bytes(shape)
