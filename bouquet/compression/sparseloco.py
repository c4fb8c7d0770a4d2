"""SparseLoCo-style compression (Sarfi, Therien, Lidin, Belilovsky; arXiv 2508.15706).

Chunk-wise top-k followed by a 2-bit "statistical" quantiser:

1. The flattened vector is cut into chunks of ``chunk`` coordinates (the paper's production
   setting tiles matrices into 64 x 64 = 4,096 entries); each chunk keeps its ``k`` entries of
   largest magnitude (the last, shorter chunk keeps ``min(k, its length)``).
2. The kept values are centred by their mean and cut into ``2^bits`` bins of width
   ``range_sigmas * std / 2^bits`` around it (values beyond the range are clamped into the outer
   bins). Each bin is decoded as the mean of the values that fell into it (a lookup table of
   ``2^bits`` float32, shift included).
3. Per kept entry: ``bits`` bits of bin id and ``ceil(log2 chunk)`` bits of index within its chunk,
   bit-packed. Size: ``32 * 2^bits + K (bits + ceil(log2 chunk))`` bits plus the shape header,
   with ``K`` the total kept count.

Biased; in SparseLoCo it is always used inside decayed error feedback
(``ErrorFeedback(SparseLoCo(), decay=beta)``). As with FedZip, bin means make
``||C(x) - x|| <= ||x||`` without a positive contraction factor.
"""

from __future__ import annotations

import math

import numpy as np

from bouquet.compression.base import Compressor, Guarantee, Payload, as_vector, shape_bytes
from bouquet.compression.bitpack import index_width, pack_uint, packed_size, unpack_uint
from bouquet.compression.errors import PayloadError


class SparseLoCo(Compressor):
    """Chunked top-k with a few-bit lookup-table quantiser.

    Parameters
    ----------
    chunk : int
        Coordinates per chunk.
    k : int
        Entries kept per chunk (``ratio`` is used instead when ``k`` is 0).
    ratio : float
        Fraction kept per chunk when ``k`` is 0.
    bits : int
        Quantiser bits (``2`` in the paper).
    range_sigmas : float
        Width of the quantiser's range in standard deviations.

    """

    name = "sparseloco"
    fields = {"shape": np.dtype(np.int64), "lookup": np.dtype(np.float32),
              "codes": np.dtype(np.uint8), "indices": np.dtype(np.uint8)}

    def __init__(self, chunk: int = 4096, k: int = 32, ratio: float = 0.0,
                 bits: int = 2, range_sigmas: float = 6.0) -> None:
        if chunk < 1 or bits < 1 or bits > 8 or (k < 1 and not 0.0 < ratio <= 1.0):
            raise ValueError("sparseloco: need chunk >= 1, 1 <= bits <= 8 and k >= 1 or a ratio")
        self.chunk, self.bits, self.range_sigmas = int(chunk), int(bits), float(range_sigmas)
        self.k = int(k) if k > 0 else max(1, math.ceil(ratio * chunk))

    def params(self) -> dict[str, float | int]:
        """Chunk, k per chunk, bits and range."""
        return {"chunk": self.chunk, "k": self.k, "bits": self.bits,
                "range_sigmas": self.range_sigmas}

    def kept(self, d: int) -> int:
        """Total entries kept for length ``d``."""
        full, rest = divmod(d, self.chunk)
        return full * min(self.k, self.chunk) + min(self.k, rest)

    def _positions(self, flat: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(global sorted positions, within-chunk offsets) of the kept entries."""
        d = flat.size
        starts = range(0, d, self.chunk)
        pos = []
        for s in starts:
            part = flat[s : s + self.chunk]
            kk = min(self.k, part.size)
            pos.append(s + np.sort(np.argsort(-np.abs(part), kind="stable")[:kk]))
        glob = np.concatenate(pos) if pos else np.zeros(0, dtype=np.int64)
        return glob, glob % self.chunk

    def compress(self, x: np.ndarray, rng: np.random.Generator) -> Payload:
        """Deterministic: ``rng`` is not used."""
        flat, shape = as_vector(x)
        glob, local = self._positions(flat)
        v = flat[glob].astype(np.float64)
        nbins = 1 << self.bits
        lookup = np.zeros(nbins)
        codes = np.zeros(v.size, dtype=np.int64)
        if v.size:
            mean, std = v.mean(), v.std()
            width = self.range_sigmas * std / nbins
            if width > 0:
                codes = np.clip(np.floor((v - mean) / width + nbins / 2), 0, nbins - 1)
                codes = codes.astype(np.int64)
            else:
                codes[:] = nbins // 2
            lookup = mean + (np.arange(nbins) - nbins / 2 + 0.5) * width
            for b in range(nbins):
                members = codes == b
                if members.any():
                    lookup[b] = v[members].mean()
        return {"shape": shape, "lookup": lookup.astype(np.float32),
                "codes": pack_uint(codes, self.bits),
                "indices": pack_uint(local, index_width(self.chunk))}

    def decode(self, payload: Payload, shape: tuple[int, ...]) -> np.ndarray:
        """Rebuild positions chunk by chunk; offsets must be strictly increasing in a chunk."""
        d = int(np.prod(shape))
        nbins = 1 << self.bits
        if payload["lookup"].size != nbins:
            raise PayloadError(f"sparseloco: expected {nbins} lookup values")
        n = self.kept(d)
        local = unpack_uint(payload["indices"], index_width(self.chunk), n)
        codes = unpack_uint(payload["codes"], self.bits, n)
        per_chunk = [min(self.k, max(0, min(self.chunk, d - s))) for s in range(0, d, self.chunk)]
        chunk_of = np.repeat(np.arange(len(per_chunk)), per_chunk)
        starts = chunk_of * self.chunk
        lengths = np.minimum(self.chunk, d - starts)
        if n and np.any(local >= lengths):
            raise PayloadError("sparseloco: index out of its chunk")
        glob = starts + local
        if n > 1 and np.any((np.diff(glob) <= 0) & (np.diff(chunk_of) == 0)):
            raise PayloadError("sparseloco: indices within a chunk not strictly increasing")
        out = np.zeros(d, dtype=np.float32)
        out[glob] = payload["lookup"][codes]
        return out

    def guarantee(self, d: int) -> Guarantee:
        """Biased; no positive delta guaranteed."""
        return Guarantee(unbiased=False, delta=None)

    def size_bytes(self, shape: tuple[int, ...]) -> int:
        """Lookup table + packed codes + packed within-chunk indices + shape header."""
        n = self.kept(int(np.prod(shape)))
        return (4 * (1 << self.bits) + packed_size(n, self.bits)
                + packed_size(n, index_width(self.chunk)) + shape_bytes(shape))
