"""The uplink-compressor keys shared by the compressed methods (FedAvg-compressed, Fed-EF, SCALLION, SCAFCOM).

Standard library, :mod:`bouquet.schema` and :mod:`bouquet.compression` (for the compressor
names; it imports numpy), see :mod:`bouquet.strategies.sections`.
"""

from __future__ import annotations

import dataclasses

from bouquet.compression import COMPRESSORS
from bouquet.schema import key


@dataclasses.dataclass(frozen=True)
class UplinkCompression:
    """Config keys choosing the uplink compressor (shared by the compressed methods)."""

    compressor: str = key("topk", "uplink compressor", choices=tuple(COMPRESSORS))
    compressor_ratio: float = key(
        0.02, "fraction kept by topk / randk / fedzip (and sparseloco when compressor-k is 0)",
        min=1e-6, max=1.0)
    compressor_k: int = key(
        0, "absolute k for topk / randk, k per chunk for sparseloco; 0 means use the ratio", min=0)
    compressor_levels: int = key(4, "QSGD levels s", min=1)
    compressor_bucket: int = key(512, "QSGD bucket size", min=1)
    compressor_chunk: int = key(4096, "SparseLoCo chunk size", min=1)
    compressor_bits: int = key(2, "SparseLoCo quantiser bits", min=1, max=8)
