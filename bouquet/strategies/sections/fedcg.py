"""Keys of FedCG and its baselines (prefix ``fedcg``).

Standard library and :mod:`bouquet.schema` only (see :mod:`bouquet.strategies.sections`).
"""

from __future__ import annotations

import dataclasses

from bouquet.schema import key


@dataclasses.dataclass(frozen=True)
class FedcgConfig:
    """Keys of FedCG and its baselines (prefix ``fedcg``)."""

    warmup_rounds: int = key(1, "first rounds in which every online client trains (signals)", min=0)
    warmup_random: bool = key(
        False, "give the random-selection baselines the same warm-up rounds (fair ablations)")
    warmup_fraction: float = key(
        1.0, "fraction of online clients that train in a warm-up round", min=0.0, max=1.0)
    diversity_weight: float = key(
        1.0, "lam_sel: weight of the facility-location error against round time in J (which "
        "plan of the selection/ratio alternation is kept)", min=0.0)
    time_weight: float = key(
        0.5, "weight of the extra round time a pick adds against its representativeness gain "
        "in greedy selection, both normalised to [0, 1] per step; below 1 time cannot make the "
        "selection skip the client that represents the most", min=0.0, max=0.99)
    error_weight: float = key(
        0.01, "lam_cmp: weight of the compression error term sum gamma phi(theta) against round "
        "time (time in units of the median dense finish time); 0.5 was the linear form's "
        "default", min=0.0)
    lp_error: str = key(
        "convex", "compression error term phi: convex = (1-theta)/theta, the variance factor of "
        "k-of-d sparsification (ratios move smoothly); linear = 1-theta (an LP, bang-bang "
        "ratios)", choices=("convex", "linear"))
    theta_min: float = key(0.01, "smallest keep-ratio the LP may give", min=1e-6, max=1.0)
    uniform_ratio: float = key(
        0.1, "keep-ratio of fedcg-select-only and random-topk (1 = dense)", min=1e-6, max=1.0)
    max_iterations: int = key(5, "most selection/LP alternations per round", min=1)
    lp_form: str = key("tradeoff", "tradeoff: min T + lam*error; budget: max kept under a time "
                       "budget", choices=("tradeoff", "budget"))
    time_budget: float = key(
        1.0, "round-time budget for lp-form=budget, in units of the median dense finish time",
        min=0.0)
    client_weights: str = key(
        "uniform", "weight of a client in facility location and aggregation: uniform (paper) "
        "or examples (data size)", choices=("uniform", "examples"))
    error_feedback: bool = key(True, "clients keep the top-k residual (error feedback)")
    server_lr: float = key(1.0, "server step on the weighted sum of decoded updates", min=0.0)
    system: str = key("simulated", "simulated: seeded profile; measured: nodes report step time "
                      "and uplink", choices=("simulated", "measured"))
    step_time_min: float = key(0.1, "simulated seconds per local step: lower end", min=0.0)
    step_time_max: float = key(0.5, "simulated seconds per local step: upper end", min=0.0)
    step_time_dist: str = key("uniform", "distribution of the step time",
                              choices=("uniform", "loguniform"))
    uplink_min_mbps: float = key(1.0, "simulated uplink Mb/s: lower end", min=1e-6)
    uplink_max_mbps: float = key(5.0, "simulated uplink Mb/s: upper end", min=1e-6)
    uplink_dist: str = key("uniform", "distribution of the uplink",
                           choices=("uniform", "loguniform"))
    uplink_per_round: bool = key(True, "redraw every client's uplink every round")
    virtual_params: int = key(
        0, "model size (coordinates) charged in the time model; 0 = the real model", min=0)
    charge_index_bits: bool = key(
        True, "charge ceil(log2 d) index bits per kept coordinate in the time model")
    measured_smoothing: float = key(
        0.5, "weight of a node's new report in the measured estimates", min=0.0, max=1.0)
