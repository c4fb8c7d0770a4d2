"""Named numpy arrays as a Flower ``ArrayRecord``, and back (the model's wire form)."""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
from flwr.app import Array, ArrayRecord


def to_numpy(record: object) -> dict[str, np.ndarray]:
    """Decode an ArrayRecord into an ordered ``{name: ndarray}`` mapping."""
    if not isinstance(record, ArrayRecord):
        raise TypeError(f"expected an ArrayRecord, got {type(record).__name__}")
    return {k: record[k].numpy() for k in record.keys()}


def to_record(arrays: Mapping[str, np.ndarray]) -> ArrayRecord:
    """Encode ``{name: ndarray}`` as an ArrayRecord (order kept)."""
    return ArrayRecord({k: Array(np.ascontiguousarray(a)) for k, a in arrays.items()})
