"""The distributed binary-tree (prefix-sum) mechanism for federated linear bandits (numpy only).

Zhou & Chowdhury, "On Differentially Private Federated Linear Contextual Bandits", ICLR 2024,
§4-5: synchronisations happen on a fixed schedule (every ``B`` local steps); at synchronisation
``k`` (1-based) every silo releases one noisy *tree node*, the exact sum of its batch statistics
over the window of batches ``(k - 2**l, k]`` where ``l`` is the index of the lowest set bit of
``k``, plus fresh Gaussian noise. The server adds the silos' nodes per level and estimates the
prefix sum over batches ``1..k`` as the sum of its stored level sums over the set bits of ``k``.
Each batch therefore enters at most ``num_levels(K)`` nodes (one per level), which is what the
privacy composition counts.

Statistics are flat float64 vectors (a Gram matrix and a vector packed together, see
:func:`pack`); the tree code itself does not care what they hold.

The noise is calibrated to the exact privacy of what is released (:func:`node_sigma`): one user's
contribution has L2 sensitivity :func:`user_sensitivity` and enters at most ``num_levels`` nodes;
docs/methods/dp-fedlinucb.md derives both. (The authors' reference code calibrates for
sensitivity 1 and does not spend the reward bound; this package does not reuse that calibration.)
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from typing import Any

import numpy as np

from bouquet.privacy import gaussian


# ----------------------------------------------------------------------------- schedule
def num_levels(num_syncs: int) -> int:
    """Levels of the tree for ``num_syncs`` synchronisations: ``floor(log2(K)) + 1``."""
    if num_syncs < 1:
        raise ValueError("num_syncs must be >= 1")
    return int(math.floor(math.log2(num_syncs))) + 1


def lowest_set_bit(k: int) -> int:
    """Index of the lowest set bit of ``k >= 1`` (the tree level a silo releases at sync ``k``)."""
    if k < 1:
        raise ValueError("synchronisation index must be >= 1")
    return (k & -k).bit_length() - 1


def node_window(k: int) -> tuple[int, int]:
    """Return the batches ``(start, end]`` that the node released at sync ``k`` covers."""
    return k - (1 << lowest_set_bit(k)), k


def prefix_nodes(k: int) -> list[tuple[int, int]]:
    """``(level, sync)`` of the nodes whose sum is the prefix over batches ``1..k``.

    For every set bit ``j`` of ``k`` the node at level ``j`` formed at the sync ``k`` with its
    bits below ``j`` cleared, e.g. ``k = 6`` -> ``[(1, 6), (2, 4)]``.
    """
    out = []
    j = 0
    while (1 << j) <= k:
        if k & (1 << j):
            out.append((j, (k >> j) << j))
        j += 1
    return out


# ----------------------------------------------------------------------------- statistics
def stats_size(dim: int) -> int:
    """Length of a packed statistic: a ``dim x dim`` Gram matrix and a ``dim`` vector."""
    return dim * dim + dim


def pack(gram: np.ndarray, vec: np.ndarray) -> np.ndarray:
    """Flatten ``(gram, vec)`` into one float64 vector."""
    return np.concatenate([np.asarray(gram, np.float64).ravel(), np.asarray(vec, np.float64)])


def unpack(stats: np.ndarray, dim: int) -> tuple[np.ndarray, np.ndarray]:
    """Inverse of :func:`pack`."""
    return stats[: dim * dim].reshape(dim, dim), stats[dim * dim :]


def gaussian_node_noise(rng: np.random.Generator, dim: int, sigma: float) -> np.ndarray:
    """Noise of one released node, packed like the statistics.

    Gram part: ``(G + G^T) / 2`` with ``G_ab ~ N(0, sigma^2)`` (symmetric; variance ``sigma^2``
    on the diagonal, ``sigma^2 / 2`` off it); vector part: ``N(0, sigma^2 I)``.
    """
    if sigma == 0.0:
        return np.zeros(stats_size(dim))
    g = rng.normal(0.0, sigma, size=(dim, dim))
    return pack((g + g.T) / 2.0, rng.normal(0.0, sigma, size=dim))


# ----------------------------------------------------------------------------- silo side
@dataclasses.dataclass
class SiloTree:
    """One silo's exact p-sums, one per level, with the sync at which each was formed.

    Attributes
    ----------
    psums : ndarray, shape (levels, n)
        Exact (noise-free) sums of the silo's batch statistics over each level's last window.
    syncs : ndarray of int64, shape (levels,)
        Sync index at which each stored p-sum was formed (0: never).

    """

    psums: np.ndarray
    syncs: np.ndarray

    @classmethod
    def empty(cls, levels: int, size: int) -> SiloTree:
        """Return a tree with nothing stored."""
        return cls(np.zeros((levels, size)), np.zeros(levels, dtype=np.int64))

    @property
    def levels(self) -> int:
        """Number of levels."""
        return int(self.psums.shape[0])

    def release(self, k: int, batch: np.ndarray) -> np.ndarray:
        """Form, store and return the exact node of sync ``k`` from this sync's ``batch``.

        The node is the batch plus the stored p-sums of the lower levels that lie in its window
        (those formed at syncs ``k - 2**j``); a lower p-sum that is missing (the silo skipped that
        sync) counts as zero. The caller adds noise before anything leaves the silo.
        """
        level = lowest_set_bit(k)
        if level >= self.levels:
            raise ValueError(f"sync {k} needs tree level {level}, the tree has {self.levels}")
        node = np.array(batch, dtype=np.float64, copy=True)
        for j in range(level):
            if int(self.syncs[j]) == k - (1 << j):
                node += self.psums[j]
        self.psums[level] = node
        self.syncs[level] = k
        return node.copy()

    def state(self) -> dict[str, np.ndarray]:
        """Arrays for ``context.state``."""
        return {"psums": self.psums, "syncs": self.syncs}

    @classmethod
    def from_state(cls, arrays: Mapping[str, np.ndarray]) -> SiloTree:
        """Inverse of :meth:`state`."""
        return cls(np.array(arrays["psums"], np.float64), np.array(arrays["syncs"], np.int64))


# ----------------------------------------------------------------------------- server side
@dataclasses.dataclass
class ServerTree:
    """The server's per-level sums of the silos' noisy nodes and its prefix estimate.

    Attributes
    ----------
    sums : ndarray, shape (levels, n)
        Sum over silos of the (noisy) nodes last received at each level.
    syncs : ndarray of int64, shape (levels,)
        Sync index of each stored level sum (0: never). A level sum is used only for the prefix it
        belongs to, so a sync with no usable reply leaves the state untouched and still gives a
        correct (if less complete) estimate.

    """

    sums: np.ndarray
    syncs: np.ndarray

    @classmethod
    def empty(cls, levels: int, size: int) -> ServerTree:
        """Return a tree with nothing received."""
        return cls(np.zeros((levels, size)), np.zeros(levels, dtype=np.int64))

    def store(self, k: int, total: np.ndarray) -> None:
        """Keep the sum of the nodes released at sync ``k``."""
        level = lowest_set_bit(k)
        self.sums[level] = total
        self.syncs[level] = k

    def prefix(self, k: int) -> np.ndarray:
        """Estimate of the sum of all silos' statistics over batches ``1..k`` (zeros for k=0)."""
        out = np.zeros(self.sums.shape[1])
        for level, sync in prefix_nodes(k):
            if level < self.sums.shape[0] and int(self.syncs[level]) == sync:
                out += self.sums[level]
        return out

    def state(self) -> dict[str, Any]:
        """Arrays for the checkpoint."""
        return {"sums": self.sums.copy(), "syncs": self.syncs.copy()}

    @classmethod
    def from_state(cls, arrays: Mapping[str, Any]) -> ServerTree:
        """Inverse of :meth:`state`."""
        return cls(np.array(arrays["sums"], np.float64), np.array(arrays["syncs"], np.int64))


# ----------------------------------------------------------------------------- calibrations
def user_sensitivity(feature_bound: float, reward_bound: float) -> float:
    """L2 sensitivity of one user's contribution ``(x x^T, x y)`` in the noise's own metric.

    With the symmetric Gram noise of :func:`gaussian_node_noise` (variance ``sigma^2`` on the
    diagonal, ``sigma^2 / 2`` off it) and ``N(0, sigma^2)`` on the vector, whitening the released
    upper triangle turns the contribution into a vector of squared norm
    ``||x||^4 + ||x||^2 y^2``; with ``||x|| <= L`` and ``|y| <= Y`` that is at most
    ``L^2 (L^2 + Y^2)``. Neighbouring streams differ by one user's contribution (present or
    zero), the add/remove relation that Opacus also uses.
    """
    return feature_bound * math.sqrt(feature_bound**2 + reward_bound**2)


def node_sigma(epsilon: float, delta: float, levels: int, sensitivity: float,
               copies: int = 1) -> float:
    """Per-node noise so that ``levels`` releases cost exactly ``(epsilon, delta)``.

    A user's contribution enters at most ``levels`` released nodes; each release is a Gaussian
    mechanism of sensitivity ``sensitivity`` whose noise is the sum of ``copies`` independent
    node noises (1 for silo-level LDP, where the server sees each node; the number of nodes in
    a released sum when only sums leave the shuffler). The composition is ``mu``-GDP with
    ``mu = sqrt(levels) * sensitivity / (sqrt(copies) * sigma)`` (:mod:`bouquet.privacy.gaussian`).
    """
    if copies < 1:
        raise ValueError("copies must be >= 1")
    return sensitivity * math.sqrt(levels) / (gaussian.mu_for(epsilon, delta) * math.sqrt(copies))


def shift(sigma: float, levels: int, dim: int, alpha: float, num_silos: int) -> float:
    """Regularisation shift that keeps the noisy Gram matrix positive definite (w.h.p.).

    ``lambda = sqrt(M kappa) sigma (sqrt(kappa + ln(1/alpha)) + sqrt(d))``: a high-probability
    bound on the spectral norm of the sum of ``M kappa`` symmetric Gaussian noise matrices (pass
    ``num_silos=1`` for the vector-sum protocol, whose noise does not grow with ``M``).
    """
    return (math.sqrt(num_silos * levels) * sigma
            * (math.sqrt(levels + math.log(1.0 / alpha)) + math.sqrt(dim)))
