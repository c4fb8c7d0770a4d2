"""Keys of the LoRA family (``lora``) and Fed-SB's initialisation (``fed-sb``).

Standard library and :mod:`bouquet.schema` only (see :mod:`bouquet.strategies.sections`).
"""

from __future__ import annotations

import dataclasses

from bouquet.schema import key


@dataclasses.dataclass(frozen=True)
class LoraConfig:
    """Keys shared by the LoRA family (prefix ``lora``)."""

    rank: int = key(8, "LoRA rank r", min=1)
    alpha: float = key(0.0, "LoRA alpha; the update is scaled by alpha/r (0: alpha = r, scale 1)",
                       min=0.0)
    target_modules: str = key(
        "query,value,q_proj,v_proj",
        "comma-separated module names (last name component or full name) whose 2-D weight is "
        "adapted; names absent from the model are ignored",
    )
    head_modules: str = key(
        "classifier,score",
        "comma-separated modules trained in full and sent (the task head); absent ones ignored",
    )
    optimizer: str = key("adamw", "local optimiser (fresh each round)", choices=("adamw", "sgd"))
    weighting: str = key(
        "examples", "average weighted by num-examples, or uniform (Fed-SB's reference code)",
        choices=("examples", "uniform"),
    )


@dataclasses.dataclass(frozen=True)
class FedSBConfig:
    """Fed-SB's initialisation (prefix ``fed-sb``)."""

    init: str = key(
        "svd",
        "svd: round-0 protocol (clients' summed gradients -> truncated SVD of -lr1*sign); "
        "random: data-free orthonormal B, A from the seed and R = 0",
        choices=("svd", "random"),
    )
    init_samples: int = key(
        32, "examples per client for the init gradient (non-private; DP uses one Poisson batch)",
        min=1,
    )
    init_lr: float = key(
        1e-3, "lr1 of the approximate first step -lr1*sign(grad) that B R A starts from", min=0.0
    )
