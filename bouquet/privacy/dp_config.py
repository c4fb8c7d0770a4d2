"""The ``dp.*`` configuration section of sample-level DP-SGD on torch clients (no heavy imports).

The section is declared here, apart from the Opacus code in :mod:`bouquet.privacy.dp`, so that a
server (numpy only) can resolve a run config that enables DP. See docs/privacy.md.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from bouquet.registration import PlannedRounds
from bouquet.schema import key

#: Node-config key (``flower-supernode --node-config "dp-seed=..."``) seeding a node's DP
#: randomness for reproducible simulations. Never sent; unset on a real node (OS entropy).
DP_SEED_KEY = "dp-seed"
#: Node-config key: the node's own epsilon budget. The run config is the server's word, so a node
#: that sets this refuses to train without DP-SGD, or beyond this epsilon, whatever the run says.
DP_MAX_EPSILON_KEY = "dp-max-epsilon"


@dataclasses.dataclass(frozen=True)
class DPConfig:
    """Sample-level DP-SGD (Abadi et al., CCS 2016) with Opacus on each client.

    One accountant per client lives across rounds, so the reported epsilon is cumulative.
    """

    enabled: bool = key(False, "train with DP-SGD (per-sample clipping + Gaussian noise)")
    noise_multiplier: float = key(
        1.0, "noise std / max-grad-norm; used when dp.target-epsilon is 0", min=0.0
    )
    target_epsilon: float = key(
        0.0,
        "if > 0: noise is calibrated up front so that a client taking part in every round ends "
        "at this epsilon, and no client goes beyond it",
        min=0.0,
    )
    delta: float = key(1e-5, "delta of (epsilon, delta)-DP", min=0.0, max=1.0)
    max_grad_norm: float = key(1.0, "per-sample gradient clipping norm C", min=0.0)
    max_epsilon: float = key(
        0.0, "budget in noise-multiplier mode: a client refuses to go beyond it (0: no budget)",
        min=0.0,
    )
    sampling: str = key(
        "poisson",
        "poisson: each example joins a step with probability batch-size/n (accounted as a "
        "subsampled Gaussian); shuffle: fixed-size batches of a permutation (no subsampling "
        "amplification: accounted as one full Gaussian per epoch)",
        choices=("poisson", "shuffle"),
    )


def planned_rounds(sections: Mapping[str, Any], num_server_rounds: int) -> PlannedRounds | None:
    """What ``num-server-rounds`` fixes of DP-SGD (``Method.planned_rounds`` of the LoRA family).

    In target-epsilon mode every client calibrates its noise multiplier for a client taking part
    in all ``num-server-rounds`` rounds, so any other number changes the noise of the rounds still
    to come: the rounds already released used a noise that spent the target by the planned end,
    and the extra rounds could only be refused by every node's budget check. With a fixed
    ``dp.noise-multiplier`` (or DP off) nothing depends on the number of rounds (None).
    """
    dp = sections.get("dp")
    if not isinstance(dp, DPConfig) or not dp.enabled or dp.target_epsilon <= 0:
        return None
    return PlannedRounds(key="num-server-rounds", rounds=num_server_rounds,
                         fixes=f"DP-SGD noise calibrated to dp.target-epsilon="
                               f"{dp.target_epsilon:g} over {num_server_rounds} rounds")
