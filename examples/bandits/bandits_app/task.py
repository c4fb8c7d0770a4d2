"""The app's own bandit environment: users with random arms and a hidden linear reward."""

from __future__ import annotations

import numpy as np

DIM, ARMS = 6, 8
THETA = np.linspace(-0.5, 0.5, DIM)


class Silo:
    """One silo's users; implements bouquet's RewardSource (and KnownMeans for the regret)."""

    def __init__(self, partition_id: int) -> None:
        self.partition_id = partition_id

    def contexts(self, rnd: int, step: int) -> np.ndarray:
        """Arm features of one user (unit vectors)."""
        x = np.random.default_rng([self.partition_id, rnd, step]).standard_normal((ARMS, DIM))
        return x / np.linalg.norm(x, axis=1, keepdims=True)

    def reward(self, rnd: int, step: int, arm: int) -> float:
        """Noisy linear reward of the chosen arm."""
        noise = np.random.default_rng([self.partition_id, rnd, step, 1]).normal(0.0, 0.1)
        return float(self.contexts(rnd, step)[arm] @ THETA + noise)

    def regret(self, rnd: int, step: int, arm: int) -> float:
        """Best expected reward minus the chosen arm's."""
        means = self.contexts(rnd, step) @ THETA
        return float(means.max() - means[arm])
