"""Keys of ``fedavg-compressed`` and ``fed-ef``.

Standard library, :mod:`bouquet.schema` and :mod:`bouquet.compression` (for the compressor
names; it imports numpy), see :mod:`bouquet.strategies.sections`.
"""

from __future__ import annotations

import dataclasses

from bouquet.schema import key
from bouquet.strategies.sections.uplink import UplinkCompression


@dataclasses.dataclass(frozen=True)
class FedAvgCompressedConfig(UplinkCompression):
    """Keys of ``fedavg-compressed`` (prefix ``fedavg-compressed``)."""

    server_lr: float = key(1.0, "global step size eta_g", min=0.0)


@dataclasses.dataclass(frozen=True)
class FedEFConfig(FedAvgCompressedConfig):
    """Keys of ``fed-ef`` (prefix ``fed-ef``)."""

    ef_decay: float = key(1.0, "error-feedback decay: 1 = plain EF, < 1 = decayed (SparseLoCo)",
                          min=0.0, max=1.0)
