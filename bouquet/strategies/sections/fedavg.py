"""FedAvg's keys (prefix ``fedavg``).

Standard library and :mod:`bouquet.schema` only (see :mod:`bouquet.strategies.sections`).
"""

from __future__ import annotations

import dataclasses

from bouquet.schema import key


@dataclasses.dataclass(frozen=True)
class FedAvgConfig:
    """Keys of FedAvg (prefix ``fedavg``)."""

    aggregator: str = key(
        "mean", "mean: weighted by num-examples (FedAvg); median / trimmed-mean: coordinate-wise, "
        "unweighted (robust to a minority of hostile replies)",
        choices=("mean", "median", "trimmed-mean"))
    trim_fraction: float = key(
        0.2, "trimmed-mean: fraction cut from each end per coordinate", min=0.0, max=0.49)
