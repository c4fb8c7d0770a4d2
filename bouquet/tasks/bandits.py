"""Contextual-bandit environments for the federated LinUCB family (numpy/scikit-learn only).

A bandit task gives every silo (partition) its own stream of users. ``partition`` returns a
:class:`SiloStream`; the client asks it for one synchronisation's worth of steps with
``stream.block(round, steps, section)`` and gets, for every step, the ``K`` arms' feature vectors
the learner sees, their mean rewards (for the regret) and the realised rewards. Streams are drawn
from ``(seed, partition, round)``, so a silo's users never depend on what it or others did.

Tasks:

``synth-bandit``
    The synthetic generator of Zhou & Chowdhury (ICLR 2024, §6; after Vaswani et al. 2020): at
    every step, ``K`` arms whose raw features are random unit vectors in ``R^{d-1}`` plus a
    constant-1 bias coordinate, the first ``d`` arms replaced by the basis vectors ``e_j`` (with
    the bias coordinate set); ``theta*`` is a random direction of norm 0.5 in the first ``d-1``
    coordinates plus 0.5 on the bias. Rewards use the raw features plus Gaussian noise; the
    learner sees unit-normalised features.
``digits-bandit``
    Multi-class to bandit (one arm per class, reward 1 for the true label, 0 otherwise) on
    scikit-learn's bundled digits, reduced by PCA; arm ``a``'s features are the user's
    (normalised) PCA vector plus a bias placed in block ``a`` (a disjoint linear model per arm),
    so ``d = 10 (p + 1)``. Each silo serves users drawn from its own share of the images.

The config section of a bandit task exposes ``context_dim`` and ``num_arms`` so that a server can
check message shapes without loading any data.
"""

from __future__ import annotations

import dataclasses
from functools import cache
from typing import Any, Protocol

import numpy as np

from bouquet.schema import CommonConfig, key


class BanditEnvConfig(Protocol):
    """What a bandit task's config section tells servers and clients."""

    @property
    def context_dim(self) -> int:
        """Dimension of the arms' feature vectors."""

    @property
    def num_arms(self) -> int:
        """Arms per step."""


@dataclasses.dataclass(frozen=True)
class Block:
    """One synchronisation's steps of one silo.

    Attributes
    ----------
    features : ndarray, shape (steps, K, d)
        What the learner sees for each arm (norm at most 1).
    means : ndarray, shape (steps, K)
        Expected reward of each arm (for the pseudo-regret).
    rewards : ndarray, shape (steps, K)
        The reward the silo would observe for each arm.

    """

    features: np.ndarray
    means: np.ndarray
    rewards: np.ndarray


def stream_rng(seed: int, partition_id: int, rnd: int) -> np.random.Generator:
    """Return the environment's generator for one silo and one round."""
    return np.random.default_rng([seed, partition_id, rnd, 0xB4])


# ----------------------------------------------------------------------------- synthetic
@dataclasses.dataclass(frozen=True)
class SynthBanditConfig:
    """Keys of ``synth-bandit`` (prefix ``synth-bandit``)."""

    arms: int = key(30, "arms per step (K >= dim)", min=2)
    dim: int = key(6, "feature dimension d (the last coordinate is the bias)", min=2)
    noise: float = key(0.5, "standard deviation of the Gaussian reward noise", min=0.0)
    env_seed: int = key(2, "seed of theta* (fixed across runs, as in the reference)", min=0)

    @property
    def context_dim(self) -> int:
        """Dimension of the arms' feature vectors."""
        return self.dim

    @property
    def num_arms(self) -> int:
        """Arms per step."""
        return self.arms


def synth_theta(dim: int, env_seed: int) -> np.ndarray:
    """``theta*``: norm 0.5 in the first ``d-1`` coordinates, 0.5 on the bias."""
    rng = np.random.default_rng([env_seed, dim])
    theta = rng.standard_normal(dim - 1)
    theta *= 0.5 / np.linalg.norm(theta)
    return np.append(theta, 0.5)


def synth_arms(rng: np.random.Generator, steps: int, arms: int, dim: int) -> np.ndarray:
    """Raw arm features, shape (steps, K, d): unit vectors + bias, first d arms the basis."""
    if arms < dim:
        raise ValueError(f"synth-bandit needs arms >= dim (got {arms} < {dim})")
    x = rng.standard_normal((steps, arms, dim - 1))
    x /= np.linalg.norm(x, axis=2, keepdims=True)
    x = np.concatenate([x, np.ones((steps, arms, 1))], axis=2)
    basis = np.eye(dim)
    basis[:, -1] = 1.0
    x[:, :dim, :] = basis
    return x


@dataclasses.dataclass(frozen=True)
class SiloStream:
    """A silo's user stream (what ``partition`` returns)."""

    task: Any
    partition_id: int
    num_partitions: int
    seed: int
    rows: np.ndarray | None = None

    def block(self, rnd: int, steps: int, section: Any) -> Block:
        """Return the ``steps`` users this silo serves in round ``rnd``."""
        return self.task.block(self, rnd, steps, section)  # type: ignore[no-any-return]


class SyntheticBandit:
    """The paper's synthetic linear bandit (see the module docstring)."""

    name = "synth-bandit"
    kind = "bandit"
    section_prefix = "synth-bandit"

    def partition(self, partition_id: int, num_partitions: int, common: CommonConfig) -> SiloStream:
        """Return the silo's stream (users are generated on demand from the seed)."""
        return SiloStream(self, partition_id, num_partitions, common.seed)

    def num_examples(self, partition_id: int, num_partitions: int, common: CommonConfig) -> int:
        """0: a synthetic stream has no finite pool of users."""
        return 0

    def block(self, stream: SiloStream, rnd: int, steps: int, cfg: SynthBanditConfig) -> Block:
        """Arms, means and noisy rewards of one round."""
        rng = stream_rng(stream.seed, stream.partition_id, rnd)
        raw = synth_arms(rng, steps, cfg.arms, cfg.dim)
        means = raw @ synth_theta(cfg.dim, cfg.env_seed)
        rewards = means + cfg.noise * rng.standard_normal(means.shape)
        features = raw / np.linalg.norm(raw, axis=2, keepdims=True)
        return Block(features, means, rewards)


# ----------------------------------------------------------------------------- digits
@dataclasses.dataclass(frozen=True)
class DigitsBanditConfig:
    """Keys of ``digits-bandit`` (prefix ``digits-bandit``)."""

    pca_dim: int = key(4, "PCA components of the 8x8 images (d = 10 (p + 1))", min=1, max=64)

    @property
    def context_dim(self) -> int:
        """Ten blocks of ``p`` PCA components plus a bias."""
        return 10 * (self.pca_dim + 1)

    @property
    def num_arms(self) -> int:
        """One arm per digit."""
        return 10


@cache
def _digits() -> tuple[np.ndarray, np.ndarray]:
    from sklearn.datasets import load_digits

    x, y = load_digits(return_X_y=True)
    return (x / 16.0).astype(np.float64), y.astype(np.int64)


@cache
def _digits_pca(pca_dim: int) -> np.ndarray:
    """Unit-norm ``[pca(x), 1]`` per image (PCA fitted once on all images, fixed seed)."""
    from sklearn.decomposition import PCA

    x, _ = _digits()
    z = PCA(n_components=pca_dim, random_state=0).fit_transform(x)
    z = z / np.abs(z).max()
    z = np.hstack([z, np.ones((len(z), 1))])
    return z / np.linalg.norm(z, axis=1, keepdims=True)  # type: ignore[no-any-return]


class DigitsBandit:
    """Multi-class-to-bandit on scikit-learn's digits (see the module docstring)."""

    name = "digits-bandit"
    kind = "bandit"
    section_prefix = "digits-bandit"
    num_classes = 10

    def partition(self, partition_id: int, num_partitions: int, common: CommonConfig) -> SiloStream:
        """Return the silo's share of the images (by the configured partition scheme)."""
        from bouquet.tasks.partition import partition_rows

        _, y = _digits()
        rows = partition_rows(
            y, scheme=common.partition, num_partitions=num_partitions,
            partition_id=partition_id, seed=common.seed, alpha=common.dirichlet_alpha,
            classes_per_client=common.classes_per_client,
        )
        return SiloStream(self, partition_id, num_partitions, common.seed, rows)

    def num_examples(self, partition_id: int, num_partitions: int, common: CommonConfig) -> int:
        """Images in the silo's pool."""
        rows = self.partition(partition_id, num_partitions, common).rows
        return 0 if rows is None else len(rows)

    def block(self, stream: SiloStream, rnd: int, steps: int, cfg: DigitsBanditConfig) -> Block:
        """Draw ``steps`` users uniformly from the silo's pool; reward 1 for the true class."""
        assert stream.rows is not None
        rng = stream_rng(stream.seed, stream.partition_id, rnd)
        users = stream.rows[rng.integers(0, len(stream.rows), size=steps)]
        z = _digits_pca(cfg.pca_dim)[users]  # (steps, p+1)
        k, width = self.num_classes, z.shape[1]
        features = np.zeros((steps, k, k * width))
        for a in range(k):
            features[:, a, a * width : (a + 1) * width] = z
        labels = _digits()[1][users]
        means = (np.arange(k)[None, :] == labels[:, None]).astype(np.float64)
        return Block(features, means, means.copy())
