"""System heterogeneity for FedCG: compute speeds, uplink bandwidths and round times.

FedCG (Jiang et al., "Heterogeneity-Aware Federated Learning with Adaptive Client Selection and
Gradient Compression", IEEE INFOCOM 2023) plans each round from every client's compute speed and
current uplink bandwidth. This module supplies those two numbers and the time model the plan uses:

* :class:`SimulatedProfile` draws them from a seeded profile. The defaults follow the simulation
  protocol restated from the paper's Sec. VI-C (second-hand, see the method page): per-step compute
  time ~ U[0.1, 0.5] s fixed per client, uplink bandwidth ~ U[1, 5] Mb/s redrawn for every client in
  every round.
* :class:`MeasuredProfile` is for deployments: it keeps what nodes report (their measured seconds
  per local step and their uplink in Mb/s) as exponential moving averages, and fills clients that
  have not reported yet with the median of those that have.
* :class:`TimeModel` turns them into finish times: ``steps * step_time + payload_bits / uplink``
  for an update of ``params`` coordinates compressed to a keep-ratio (a virtual model size may be
  charged instead of the real one, so that upload time matters for small models).

Numpy only (server side).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping
from typing import Any

import numpy as np

from bouquet.compression.base import count_for

#: Separate random streams of the profile (so that compute and bandwidth draws never collide).
_STEP_STREAM = 11
_BANDWIDTH_STREAM = 12


def _draw(rng: np.random.Generator, low: float, high: float, dist: str) -> float:
    if high <= low:
        return float(low)
    if dist == "uniform":
        return float(rng.uniform(low, high))
    if dist == "loguniform":
        return float(np.exp(rng.uniform(np.log(low), np.log(high))))
    raise ValueError(f"unknown distribution {dist!r} (uniform or loguniform)")


@dataclasses.dataclass(frozen=True)
class SimulatedProfile:
    """Seeded compute speeds and uplink bandwidths of simulated clients.

    Parameters
    ----------
    seed : int
        Run seed; every draw is a pure function of (seed, stream, partition, round).
    step_time_min, step_time_max : float
        Range of a client's seconds per local step (fixed per client).
    step_time_dist : str
        ``uniform`` or ``loguniform`` over that range.
    uplink_min_mbps, uplink_max_mbps : float
        Range of a client's uplink bandwidth in megabits per second.
    uplink_dist : str
        ``uniform`` or ``loguniform`` over that range.
    uplink_per_round : bool
        Redraw the bandwidth every round (time-varying links) or keep one value per client.

    """

    seed: int = 0
    step_time_min: float = 0.1
    step_time_max: float = 0.5
    step_time_dist: str = "uniform"
    uplink_min_mbps: float = 1.0
    uplink_max_mbps: float = 5.0
    uplink_dist: str = "uniform"
    uplink_per_round: bool = True

    def step_time(self, partition_id: int) -> float:
        """Seconds per local step of ``partition_id``."""
        rng = np.random.default_rng([self.seed, _STEP_STREAM, partition_id])
        return _draw(rng, self.step_time_min, self.step_time_max, self.step_time_dist)

    def uplink_bps(self, partition_id: int, rnd: int) -> float:
        """Uplink bandwidth of ``partition_id`` in round ``rnd`` (bits per second)."""
        key = [self.seed, _BANDWIDTH_STREAM, partition_id]
        if self.uplink_per_round:
            key.append(rnd)
        rng = np.random.default_rng(key)
        return 1e6 * _draw(rng, self.uplink_min_mbps, self.uplink_max_mbps, self.uplink_dist)


class MeasuredProfile:
    """Compute speeds and bandwidths as reported by nodes (deployment).

    Each report updates an exponential moving average per client; a client without a report gets
    the median over clients that have one, or the fallback values until anyone has reported.

    Parameters
    ----------
    smoothing : float
        Weight of a new report in the moving average (1 keeps only the latest).
    fallback_step_time : float
        Seconds per step assumed before any report.
    fallback_uplink_mbps : float
        Uplink assumed before any report.

    """

    def __init__(self, smoothing: float = 0.5, fallback_step_time: float = 0.3,
                 fallback_uplink_mbps: float = 3.0) -> None:
        self.smoothing = smoothing
        self.fallback_step_time = fallback_step_time
        self.fallback_uplink_mbps = fallback_uplink_mbps
        self.step_s: dict[int, float] = {}
        self.uplink_mbps: dict[int, float] = {}

    def report(self, partition_id: int, step_time: float | None, uplink_mbps: float | None) -> None:
        """Fold one node's measurements in (``None`` leaves that estimate unchanged)."""
        a = self.smoothing
        if step_time is not None and step_time > 0:
            old = self.step_s.get(partition_id)
            self.step_s[partition_id] = step_time if old is None else a * step_time + (1 - a) * old
        if uplink_mbps is not None and uplink_mbps > 0:
            old = self.uplink_mbps.get(partition_id)
            self.uplink_mbps[partition_id] = (uplink_mbps if old is None
                                              else a * uplink_mbps + (1 - a) * old)

    def step_time(self, partition_id: int) -> float:
        """Estimated seconds per local step."""
        if partition_id in self.step_s:
            return self.step_s[partition_id]
        if self.step_s:
            return float(np.median(list(self.step_s.values())))
        return self.fallback_step_time

    def uplink_bps(self, partition_id: int, rnd: int) -> float:
        """Estimated uplink in bits per second (``rnd`` is unused: the latest estimate counts)."""
        if partition_id in self.uplink_mbps:
            return 1e6 * self.uplink_mbps[partition_id]
        if self.uplink_mbps:
            return 1e6 * float(np.median(list(self.uplink_mbps.values())))
        return 1e6 * self.fallback_uplink_mbps

    def state_dict(self) -> dict[str, Any]:
        """Estimates for checkpoints."""
        return {"step_s": {str(k): v for k, v in self.step_s.items()},
                "uplink_mbps": {str(k): v for k, v in self.uplink_mbps.items()}}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore :meth:`state_dict`."""
        self.step_s = {int(k): float(v) for k, v in state.get("step_s", {}).items()}
        self.uplink_mbps = {int(k): float(v) for k, v in state.get("uplink_mbps", {}).items()}


@dataclasses.dataclass(frozen=True)
class TimeModel:
    """Finish time of a client: local computation plus the upload of its compressed update.

    Parameters
    ----------
    params : int
        Coordinates of the update charged in the model (the real or a virtual model size).
    value_bits : int
        Bits per kept value (float32: 32).
    index_bits : int
        Bits per kept index (``ceil(log2 params)`` when indices are charged, else 0). A dense
        update (every coordinate kept) carries no indices.

    Notes
    -----
    Planning uses a cost linear in the keep-ratio, ``ratio * params * (value_bits + index_bits)``
    (that is what makes the ratio problem an LP); :meth:`finish_s` charges the exact payload,
    which is cheaper for a dense update when indices are charged.

    """

    params: int
    value_bits: int = 32
    index_bits: int = 0

    def kept(self, ratio: float) -> int:
        """Coordinates kept at ``ratio`` (``ceil(ratio * params)``, at least 1)."""
        return count_for(ratio, 0, self.params)

    def payload_bits(self, ratio: float) -> float:
        """Bits of the update at ``ratio``: dense, or kept values plus their indices."""
        k = self.kept(ratio)
        if k >= self.params:
            return float(self.params) * self.value_bits
        return float(k) * (self.value_bits + self.index_bits)

    def compute_s(self, steps: int, step_time: float) -> float:
        """Seconds of local computation."""
        return steps * step_time

    def upload_s(self, uplink_bps: float) -> float:
        """Planning cost of ratio 1: seconds per unit of keep-ratio (linear model)."""
        return float(self.params) * (self.value_bits + self.index_bits) / uplink_bps

    def finish_s(self, steps: int, step_time: float, uplink_bps: float, ratio: float) -> float:
        """Seconds from the start of the round until the client's update has arrived."""
        return self.compute_s(steps, step_time) + self.payload_bits(ratio) / uplink_bps


def round_time(finish_times: Iterable[float]) -> tuple[float, float]:
    """Round time (the slowest selected client) and straggler gap (max minus median finish)."""
    t = np.asarray(list(finish_times), dtype=np.float64)
    if t.size == 0:
        return 0.0, 0.0
    return float(t.max()), float(t.max() - np.median(t))
