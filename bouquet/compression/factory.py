"""``make_compressor(name, **params)``: build a compressor from its registry name."""

from __future__ import annotations

import inspect
from typing import Any

from bouquet.compression.base import Compressor
from bouquet.compression.fedzip import FedZip
from bouquet.compression.qsgd import QSGD
from bouquet.compression.sparseloco import SparseLoCo
from bouquet.compression.sparsifiers import Identity, RandK, ScaledSign, TopK

#: Registry name -> class.
COMPRESSORS: dict[str, type[Compressor]] = {
    cls.name: cls for cls in (Identity, TopK, RandK, QSGD, ScaledSign, FedZip, SparseLoCo)
}


def make_compressor(name: str, **params: Any) -> Compressor:
    """Build the compressor called ``name`` with keyword parameters.

    Unknown names or parameters raise ``ValueError`` naming what is allowed. ``None`` values are
    ignored (so callers can pass optional config keys through).

    Examples
    --------
    >>> make_compressor("topk", ratio=0.01)
    TopK(ratio=0.01, k=0)

    """
    if name not in COMPRESSORS:
        raise ValueError(f"unknown compressor {name!r}; known: {', '.join(COMPRESSORS)}")
    cls = COMPRESSORS[name]
    allowed = [p for p in inspect.signature(cls.__init__).parameters if p != "self"]
    given = {k: v for k, v in params.items() if v is not None}
    unknown = sorted(set(given) - set(allowed))
    if unknown:
        raise ValueError(
            f"compressor {name!r} has no parameter(s) {unknown}; allowed: {allowed or 'none'}"
        )
    return cls(**given)
