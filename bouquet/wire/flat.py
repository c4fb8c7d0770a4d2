"""One flat float32 vector for a model given as named arrays, and back.

Control variates, momenta and compressed updates are vectors over every model coordinate; the
layout remembers names, shapes and offsets (in the model's order) so that both sides slice the
same vector the same way.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping

import numpy as np


@dataclasses.dataclass(frozen=True)
class Layout:
    """Names, shapes and offsets of a model's arrays inside one flat vector."""

    names: tuple[str, ...]
    shapes: tuple[tuple[int, ...], ...]

    @classmethod
    def of(cls, arrays: Mapping[str, np.ndarray]) -> Layout:
        """Layout of ``arrays`` (every array must be floating point)."""
        for k, a in arrays.items():
            if not np.issubdtype(np.asarray(a).dtype, np.floating):
                raise TypeError(f"array {k!r} has dtype {np.asarray(a).dtype}; a flat model "
                                "vector needs floating-point arrays only (no integer buffers)")
        return cls(tuple(arrays), tuple(tuple(np.asarray(a).shape) for a in arrays.values()))

    @property
    def sizes(self) -> tuple[int, ...]:
        """Number of elements of each array."""
        return tuple(int(np.prod(s)) for s in self.shapes)

    @property
    def size(self) -> int:
        """Length of the flat vector."""
        return int(sum(self.sizes))

    def flatten(self, arrays: Mapping[str, np.ndarray]) -> np.ndarray:
        """Concatenate ``arrays`` in layout order as float32."""
        if set(arrays) != set(self.names):
            raise KeyError("arrays do not match the layout's names")
        return np.concatenate(
            [np.asarray(arrays[n], dtype=np.float32).ravel() for n in self.names]
        ) if self.names else np.zeros(0, dtype=np.float32)

    def unflatten(self, vector: np.ndarray) -> dict[str, np.ndarray]:
        """Split a flat vector into named float32 arrays."""
        if vector.shape != (self.size,):
            raise ValueError(f"vector of shape {vector.shape}, layout needs ({self.size},)")
        out: dict[str, np.ndarray] = {}
        offset = 0
        for name, shape, n in zip(self.names, self.shapes, self.sizes, strict=True):
            out[name] = np.asarray(vector[offset : offset + n], dtype=np.float32).reshape(shape)
            offset += n
        return out
