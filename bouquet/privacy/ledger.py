"""What the server was actually given by the tree mechanism, and what it costs (numpy only).

The bandit methods do not report their *target* epsilon: :class:`TreeLedger` records, sync by
sync, which silos' noisy nodes reached the server and how many independent node noises each
released value carried, and computes from that record the epsilon of the noise actually added,
per silo and for the run.

A user of silo ``i`` served in batch ``b`` enters every node released at a sync ``k`` whose window
``(k - 2**l, k]`` holds ``b`` (:func:`bouquet.privacy.tree.node_window`). A release of a value
whose noise is the sum of ``c`` node noises of standard deviation ``sigma`` is a Gaussian
mechanism with ``mu_k = s / (sqrt(c) sigma)`` for that user (``s``: the contribution's
sensitivity), and the releases compose to ``mu``-GDP with ``mu^2 = max_b sum_k mu_k^2`` (Dong,
Roth & Su 2022), which :mod:`bouquet.privacy.gaussian` turns into ``(epsilon, delta)``.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterable, Mapping
from typing import Any

import numpy as np

from bouquet.privacy import gaussian, tree


@dataclasses.dataclass
class TreeLedger:
    """Releases of the tree mechanism as the server received them.

    Attributes
    ----------
    num_silos : int
        ``M`` (partitions ``0..M-1``).
    syncs : list of int
        Sync index of each release.
    copies : list of int
        Independent node noises in each released value (1 when every node is seen on its own).
    members : list of list of int
        Silos whose data entered each release.

    """

    num_silos: int
    syncs: list[int] = dataclasses.field(default_factory=list)
    copies: list[int] = dataclasses.field(default_factory=list)
    members: list[list[int]] = dataclasses.field(default_factory=list)

    @classmethod
    def everyone(cls, num_silos: int, syncs: int) -> TreeLedger:
        """Every silo's node seen on its own at every sync ``1..syncs`` (an upper bound)."""
        out = cls(num_silos)
        for k in range(1, syncs + 1):
            out.record(k, range(num_silos), copies=1)
        return out

    def record(self, sync: int, silos: Iterable[int], copies: int) -> None:
        """Note that the values of ``silos`` at ``sync`` reached the server with ``copies`` noises."""
        if copies < 1:
            raise ValueError("a release carries at least one node's noise")
        self.syncs.append(int(sync))
        self.copies.append(int(copies))
        self.members.append(sorted(int(s) for s in silos))

    def silo_mu(self, silo: int, sensitivity: float, sigma: float) -> float:
        """``mu`` of everything released about the worst-placed user of ``silo``."""
        if sigma <= 0.0:
            return math.inf if any(silo in m for m in self.members) else 0.0
        per_batch: dict[int, float] = {}
        for k, c, m in zip(self.syncs, self.copies, self.members, strict=True):
            if silo not in m:
                continue
            start, end = tree.node_window(k)
            for b in range(start + 1, end + 1):
                per_batch[b] = per_batch.get(b, 0.0) + 1.0 / c
        worst = max(per_batch.values(), default=0.0)
        return sensitivity / sigma * math.sqrt(worst)

    def silo_epsilon(self, silo: int, sensitivity: float, sigma: float, delta: float) -> float:
        """Epsilon at ``delta`` of everything released about ``silo``'s users."""
        return gaussian.epsilon_at(self.silo_mu(silo, sensitivity, sigma), delta)

    def epsilons(self, sensitivity: float, sigma: float, delta: float) -> dict[int, float]:
        """Per-silo epsilon of every silo ``0..M-1``."""
        return {i: self.silo_epsilon(i, sensitivity, sigma, delta) for i in range(self.num_silos)}

    def state(self) -> dict[str, Any]:
        """Arrays for the server checkpoint."""
        members = np.zeros((len(self.syncs), self.num_silos), dtype=np.uint8)
        for row, m in enumerate(self.members):
            members[row, m] = 1
        return {"syncs": np.array(self.syncs, dtype=np.int64),
                "copies": np.array(self.copies, dtype=np.int64), "members": members}

    @classmethod
    def from_state(cls, num_silos: int, arrays: Mapping[str, Any]) -> TreeLedger:
        """Inverse of :meth:`state`."""
        if num_silos < 1:
            return cls(max(num_silos, 0))
        members = np.asarray(arrays["members"]).astype(bool).reshape(-1, num_silos)
        return cls(num_silos, [int(k) for k in np.asarray(arrays["syncs"]).ravel()],
                   [int(c) for c in np.asarray(arrays["copies"]).ravel()],
                   [np.flatnonzero(row).tolist() for row in members])
