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

The shuffler/analyser boundary passes **sums only**. :class:`SumShuffler` folds every message
into a running per-coordinate sum as it arrives and keeps no message; the analyser
(:meth:`VecSumParams.analyse`) receives that sum and the number of users behind it, nothing else.
Releasing only the sum is post-processing of the shuffled multiset, so it can only help the
guarantee, and it is what the same class does for the amplification variant, whose released
value is the sum of the silos' noisy nodes (docs/methods/dp-fedlinucb.md).

Trust: the guarantee holds against the analyser only if the shuffler is a separate party that
does not collude with it. In this package's simulation the shuffler is a component the strategy
feeds each validated message to; the server *process* therefore receives the messages, which a
real deployment must prevent (see docs/methods/dp-fedlinucb.md).

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

    def analyse(self, sums: np.ndarray, count: int) -> np.ndarray:
        """Unbiased estimate of the column sums of the users' rows.

        Parameters
        ----------
        sums : ndarray, shape (C,)
            Per-coordinate sums of the codes of ``count`` users (what the shuffler releases).
        count : int
            Number of users (message rows) behind ``sums``.

        """
        z = np.asarray(sums, dtype=np.float64)
        if z.ndim != 1:
            raise ValueError("the analyser takes per-coordinate sums, never individual codes")
        return self.bound / self.g * (z - self.p * self.b * count) - count * self.bound

    def check(self, codes: np.ndarray) -> None:
        """Raise ``ValueError`` unless every code lies in ``0..max_code()``."""
        if codes.size and (int(codes.min()) < 0 or int(codes.max()) > self.max_code()):
            raise ValueError(f"codes outside 0..{self.max_code()}")

    def variance(self, num_users: int) -> float:
        """Upper bound on the analyser's variance per coordinate (rounding + binomial)."""
        return (self.bound / self.g) ** 2 * num_users * (self.b * self.p * (1 - self.p) + 0.25)


class SumShuffler:
    """The trusted shuffler: releases the per-coordinate sum of what it received, nothing else.

    Each message is added to a running sum on arrival and not kept, so no object downstream of
    :meth:`submit` (the analyser, the strategy, a checkpoint) can hold an individual message. A
    release needs messages from at least ``min_senders`` senders: the noise of a released sum is
    calibrated for that many contributions, and fewer would release a less noisy value.

    In a deployment this must be a separate party between the silos and the server; here the
    strategy feeds it (see the module docstring).

    Parameters
    ----------
    size : int
        Length of a message row.
    min_senders : int
        Fewest senders whose messages may be released as one sum.

    """

    def __init__(self, size: int, min_senders: int) -> None:
        if min_senders < 1:
            raise ValueError("min_senders must be >= 1")
        self.size = size
        self.min_senders = min_senders
        self._sum = np.zeros(size, dtype=np.float64)
        self._rows = 0
        self._senders: list[int] = []

    def submit(self, sender: int, message: np.ndarray) -> None:
        """Fold one sender's message (a row, or rows of users) into the running sum."""
        rows = np.atleast_2d(np.asarray(message, dtype=np.float64))
        if rows.shape[1] != self.size:
            raise ValueError(f"message rows of length {rows.shape[1]}, expected {self.size}")
        if sender in self._senders:
            raise ValueError(f"sender {sender} already submitted")
        self._sum += rows.sum(axis=0)
        self._rows += rows.shape[0]
        self._senders.append(int(sender))

    def release(self) -> tuple[np.ndarray, int, list[int]] | None:
        """``(sum, rows, senders)`` and reset, or None (and reset) below ``min_senders``."""
        out = (self._sum.copy(), self._rows, sorted(self._senders))
        self._sum = np.zeros(self.size, dtype=np.float64)
        self._rows = 0
        self._senders = []
        if len(out[2]) < self.min_senders:
            return None
        return out
