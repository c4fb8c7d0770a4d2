"""Keys of ``fedkseed`` and ``fedkseed-pro`` (prefix ``fedkseed``).

Standard library and :mod:`bouquet.schema` only (see :mod:`bouquet.strategies.sections`).
"""

from __future__ import annotations

import dataclasses

from bouquet.schema import key


@dataclasses.dataclass(frozen=True)
class FedKSeedConfig:
    """Keys of ``fedkseed`` and ``fedkseed-pro`` (prefix ``fedkseed``)."""

    num_seeds: int = key(4096, "K: number of candidate seeds shared by all nodes", min=1,
                         max=2**31 - 1)
    local_steps: int = key(200, "zeroth-order steps per client and round (one pair each)", min=1)
    eps: float = key(1e-3, "perturbation scale of the two-point estimator", min=1e-12)
    lr: float = key(3e-4, "learning rate of the zeroth-order update", min=0.0)
    master_seed: int = key(42, "seed from which the K candidate seeds derive", min=0)
    equal_weight: bool = key(False, "weight clients equally instead of by their example counts")
    pro_clip: float = key(1000.0, "fedkseed-pro: |g| clip in the seed-importance statistic",
                          min=0.0)
