"""Shuffle-model vector summation for the tree mechanism (numpy only).

Zhou & Chowdhury, ICLR 2024, §5.2 (SDP-FedLinUCB with a vector-sum protocol, their Thm 5.5)
plug the shuffle-model summation protocol of Cheu, Joseph, Mao & Peng (2021) into each node of
the tree mechanism. Every *user* in a node's window encodes each coordinate ``v in [-L, L]`` of
its contribution (the upper triangle of ``x x^T`` and ``x y``) with a 1-D randomiser: shift to
``[0, 2L]``, scale by ``g/L``, round up with probability equal to the fractional part, add
``Binomial(b, p)``. A trusted **shuffler** receives the messages of every silo, permutes them (per
coordinate) and passes on the multiset; the **analyser** (the server) sums, removes the expected
binomial noise and the shift, and rescales. The analyser's output is an unbiased estimate of the
sum of the users' contributions.

Trust: the privacy guarantee holds against the analyser only if the shuffler is a separate party
that does not collude with it and hides which silo sent which message. In this package's
simulation the shuffler is a component the strategy calls before the analyser; the server process
therefore sees the unshuffled messages, which a real deployment must prevent (see
docs/methods/dp-fedlinucb.md).

Protocol constants (``g = max(2 sqrt(n), d, 4)``, ``p = 1/4``,
``b = scale g^2 ln(d^2/delta)^2 / (eps^2 n)``) are the authors' reference code's. Unlike that
code, which spends the whole ``(eps, delta)`` on every node, :func:`per_node_budget` splits the
budget over the ``kappa`` nodes a user enters (advanced composition), so that the stated
``(eps, delta)`` holds for the whole run under the protocol's per-node guarantee.
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np

#: Probability of each bit of the binomial noise (reference code).
BIT_PROBABILITY = 0.25


# ----------------------------------------------------------------------------- budget
def per_node_budget(epsilon: float, delta: float, levels: int) -> tuple[float, float]:
    """Per-node ``(eps0, delta0)`` whose ``levels``-fold composition is ``(epsilon, delta)``.

    The better of basic composition (``eps/kappa``) and advanced composition (Dwork, Rothblum &
    Vadhan 2010) with ``delta' = delta/2``: the largest ``eps0`` with
    ``eps0 sqrt(2 kappa ln(2/delta)) + kappa eps0 (e^eps0 - 1) <= epsilon``; ``delta0 =
    delta / (2 kappa)`` in both cases.
    """
    basic = epsilon / levels
    log_term = math.sqrt(2.0 * levels * math.log(2.0 / delta))

    def total(e0: float) -> float:
        return e0 * log_term + levels * e0 * math.expm1(e0)

    lo, hi = 0.0, epsilon
    for _ in range(100):
        mid = (lo + hi) / 2.0
        if total(mid) <= epsilon:
            lo = mid
        else:
            hi = mid
    return max(basic, lo), delta / (2.0 * levels)


# ----------------------------------------------------------------------------- contributions
def num_coordinates(dim: int) -> int:
    """Coordinates per user: the upper triangle of ``x x^T`` and the vector ``x y``."""
    return dim * (dim + 1) // 2 + dim


def user_rows(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Each user's contribution as one row: ``(x x^T)[triu]`` then ``x * y``; shape (n, C)."""
    x = np.atleast_2d(np.asarray(x, np.float64))
    iu = np.triu_indices(x.shape[1])
    outer = x[:, :, None] * x[:, None, :]
    return np.hstack([outer[:, iu[0], iu[1]], x * np.asarray(y, np.float64)[:, None]])


def rows_to_stats(total: np.ndarray, dim: int) -> tuple[np.ndarray, np.ndarray]:
    """Turn a summed row (length C) back into a symmetric Gram matrix and a vector."""
    iu = np.triu_indices(dim)
    tri = total[: len(iu[0])]
    gram = np.zeros((dim, dim))
    gram[iu] = tri
    gram[(iu[1], iu[0])] = tri
    return gram, np.array(total[len(iu[0]) :], dtype=np.float64)


# ----------------------------------------------------------------------------- protocol
@dataclasses.dataclass(frozen=True)
class VecSumParams:
    """Parameters of the 1-D randomiser for one node.

    Attributes
    ----------
    g : float
        Precision (scale of the fixed-point encoding).
    b : int
        Number of noise bits per message.
    p : float
        Probability of each noise bit.
    bound : float
        ``L``: every coordinate lies in ``[-L, L]``.

    """

    g: float
    b: int
    p: float
    bound: float

    @classmethod
    def for_window(cls, eps0: float, delta0: float, dim: int, num_users: int,
                   bound: float = 1.0, scale: float = 1.0) -> VecSumParams:
        """Return the reference code's parameters for a node over ``num_users`` users."""
        n = max(int(num_users), 1)
        g = max(2.0 * math.sqrt(n), float(dim), 4.0)
        b = scale * g * g * math.log(dim * dim / delta0) ** 2 / (eps0 * eps0 * n)
        return cls(g=g, b=max(1, int(math.ceil(b))), p=BIT_PROBABILITY, bound=bound)

    def max_code(self) -> int:
        """Largest value a message can take (``2g`` rounded up plus ``b`` noise bits)."""
        return int(math.ceil(2.0 * self.g)) + self.b

    def encode(self, rows: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        """Apply the local randomiser to every coordinate of every user; return int64 codes."""
        v = np.clip(np.asarray(rows, np.float64), -self.bound, self.bound)
        w = (v + self.bound) * self.g / self.bound
        base = np.floor(w)
        up = rng.random(w.shape) < (w - base)
        noise = rng.binomial(self.b, self.p, size=w.shape)
        return base.astype(np.int64) + up.astype(np.int64) + noise

    def analyse(self, shuffled: np.ndarray) -> np.ndarray:
        """Unbiased estimate of the column sums of the users' rows from the shuffled codes."""
        n = shuffled.shape[0]
        z = shuffled.sum(axis=0, dtype=np.float64)
        return self.bound / self.g * (z - self.p * self.b * n) - n * self.bound

    def variance(self, num_users: int) -> float:
        """Upper bound on the analyser's variance per coordinate (rounding + binomial)."""
        return (self.bound / self.g) ** 2 * num_users * (self.b * self.p * (1 - self.p) + 0.25)


class Shuffler:
    """The trusted shuffler: merges every silo's messages and permutes them per coordinate.

    In a deployment this must be a separate party between the silos and the server; here the
    strategy calls it before the analyser (see the module docstring).

    Parameters
    ----------
    rng : numpy.random.Generator
        Source of the permutations.

    """

    def __init__(self, rng: np.random.Generator) -> None:
        self.rng = rng

    def shuffle(self, batches: list[np.ndarray]) -> np.ndarray:
        """Concatenate the silos' message rows and permute each column independently."""
        if not batches:
            raise ValueError("nothing to shuffle")
        merged = np.concatenate(batches, axis=0)
        return np.asarray(self.rng.permuted(merged, axis=0))
