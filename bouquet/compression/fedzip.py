"""FedZip-style compression (Malekijoo, Fadaeieslam, Malekinezhad, Naghibzadeh; arXiv 2102.01593).

Three stages, applied to the whole (flattened) vector:

1. **Top-z sparsification**: keep the ``ceil(z d)`` entries of largest magnitude (the authors'
   code keeps 20 % per weight tensor; here the caller decides what one vector is).
2. **3-centroid k-means** of the kept values: centroids start evenly spaced between the minimum
   and the maximum, then ``iterations`` Lloyd steps (assign, then move each centroid to the mean
   of its members), so every kept value is replaced by the mean of its cluster. A cluster that
   empties keeps its previous centroid.
3. **Encoding**: cluster ids with the Huffman code of three symbols (1 bit for the most frequent,
   2 bits for the other two), written as two bit streams of identical total length (a "major?"
   flag per kept value, then one bit per non-major value choosing between the two minor
   centroids), and the positions by difference-of-addresses (gap) coding with LEB128 varints.
   Three float32 centroids per vector. (The reference code's size estimate uses code lengths
   (2, 1, 1), which is not a valid prefix code for three symbols; the real lengths are used here.)

Biased and deterministic. Since every centroid is the mean of its members, the quantisation error
of a cluster never exceeds the energy of its values, so ``||C(x) - x|| <= ||x||``; no positive
contraction factor is guaranteed. The size depends on the data:
``12 + ceil(k / 8) + ceil(k_minor / 8) + varint bytes`` plus the shape header.
"""

from __future__ import annotations

import numpy as np

from bouquet.compression.base import Compressor, Guarantee, Payload, as_vector, count_for
from bouquet.compression.bitpack import decode_varint, encode_varint, pack_uint, unpack_uint
from bouquet.compression.errors import PayloadError


class FedZip(Compressor):
    """Top-z, 3-means quantisation, Huffman ids and gap-coded positions.

    Parameters
    ----------
    ratio : float
        ``z``, the fraction of coordinates kept.
    iterations : int
        Lloyd iterations of the 3-means step.

    """

    name = "fedzip"
    fields = {"shape": np.dtype(np.int64), "centroids": np.dtype(np.float32),
              "flags": np.dtype(np.uint8), "minor": np.dtype(np.uint8),
              "gaps": np.dtype(np.uint8)}

    def __init__(self, ratio: float = 0.2, iterations: int = 4) -> None:
        if not 0.0 < ratio <= 1.0:
            raise ValueError(f"fedzip: ratio must be in (0, 1], got {ratio}")
        self.ratio, self.iterations = float(ratio), int(iterations)

    def params(self) -> dict[str, float | int]:
        """Return z (the kept fraction) and the Lloyd iterations."""
        return {"ratio": self.ratio, "iterations": self.iterations}

    def _kmeans(self, values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        v = values.astype(np.float64)
        centroids = np.linspace(v.min(), v.max(), 3)
        assign = np.zeros(v.size, dtype=np.int64)
        for _ in range(max(1, self.iterations)):
            assign = np.abs(v[:, None] - centroids[None, :]).argmin(axis=1)
            for j in range(3):
                members = assign == j
                if members.any():
                    centroids[j] = v[members].mean()
        return centroids, assign

    def compress(self, x: np.ndarray, rng: np.random.Generator) -> Payload:
        """Deterministic: ``rng`` is not used."""
        flat, shape = as_vector(x)
        d = flat.size
        k = count_for(self.ratio, 0, d)
        idx = np.sort(np.argsort(-np.abs(flat), kind="stable")[:k])
        if k == 0:
            centroids = np.zeros(3)
            assign = np.zeros(0, dtype=np.int64)
        else:
            centroids, assign = self._kmeans(flat[idx])
        counts = np.bincount(assign, minlength=3)
        order = np.argsort(-counts, kind="stable")  # order[0] is the 1-bit symbol
        rank = np.empty(3, dtype=np.int64)
        rank[order] = np.arange(3)
        sym = rank[assign]
        gaps = np.diff(idx, prepend=0)
        if gaps.size:
            gaps[0] = idx[0]
        return {
            "shape": shape,
            "centroids": centroids[order].astype(np.float32),
            "flags": pack_uint(sym > 0, 1),
            "minor": pack_uint(sym[sym > 0] == 2, 1),
            "gaps": encode_varint(gaps),
        }

    def decode(self, payload: Payload, shape: tuple[int, ...]) -> np.ndarray:
        """Rebuild positions from gaps, symbols from the two bit streams."""
        d = int(np.prod(shape))
        if payload["centroids"].size != 3:
            raise PayloadError("fedzip: expected 3 centroids")
        gaps = decode_varint(payload["gaps"])
        k = gaps.size
        if k != count_for(self.ratio, 0, d):
            raise PayloadError(f"fedzip: {k} positions, expected {count_for(self.ratio, 0, d)}")
        if k > d or (k > 1 and np.any(gaps[1:] <= 0)):
            raise PayloadError("fedzip: positions not strictly increasing")
        pos = np.cumsum(gaps)
        if k and pos[-1] >= d:
            raise PayloadError("fedzip: position out of range")
        is_minor = unpack_uint(payload["flags"], 1, k)
        which = unpack_uint(payload["minor"], 1, int(is_minor.sum()))
        sym = is_minor.copy()
        sym[is_minor == 1] += which
        out = np.zeros(d, dtype=np.float32)
        out[pos] = payload["centroids"][sym]
        return out

    def guarantee(self, d: int) -> Guarantee:
        """Biased; ``||C(x) - x|| <= ||x||`` but no positive delta."""
        return Guarantee(unbiased=False, delta=None)
