"""Zeroth-order (two-point SPSA) steps with seed-addressed, in-place perturbations.

This is the engine of FedKSeed (Qin et al., "Federated Full-Parameter Tuning of Billion-Sized
Language Models with Communication Cost under 18 Kilobytes", ICML 2024, arXiv:2312.06353), which
builds on MeZO (Malladi et al., "Fine-Tuning Language Models with Just Forward Passes", NeurIPS
2023). It works on any ``torch.nn.Module`` and knows nothing about federated learning.

A *direction* ``z(s)`` is a vector over every trainable parameter, defined by an integer seed
``s``, with Gaussian-like coordinates of mean 0 and variance 1:

* the parameters are taken in a canonical order: ``model.named_parameters()`` order (shared
  tensors once), keeping those with ``requires_grad``, and indexed as one flat vector;
* one fixed **pool** ``P`` of :data:`POOL_SIZE` values is built once per process, the same on every
  machine (:func:`gaussian_pool`): each value is the sum of 12 uniform 16-bit integers from numpy's
  SFC64 bit generator, centred and scaled to unit variance (Irwin-Hall with 12 terms, the classic
  approximation of a standard normal: kurtosis 2.9, support +-6). Integer sums and one fp32 scaling
  make it bit-identical on every platform;
* the flat vector is cut into blocks of :data:`BLOCK` coordinates. Block ``b`` of ``z(s)`` is
  ``sign * P[o : o + BLOCK]`` (cyclic), where the offset ``o`` and the sign are bits of a
  counter-based 64-bit hash (SplitMix64) of ``(s, b)`` (:func:`block_keys`). Nothing is drawn per
  step: a direction is a list of pool windows, and adding one to the weights is one multiply-add
  over contiguous memory, on any device (the pool is copied once to each device). Values are
  copies of pool values, so CPU and GPU nodes, and every process, use exactly the same direction.

Over random seeds the directions are isotropic up to the pool's empirical autocorrelation:
``E[z z^T] = I`` across blocks (independent signs) and, within a block, the Toeplitz matrix of the
pool's circular autocorrelation (off-diagonal entries of order ``POOL_SIZE ** -0.5``; its
eigenvalues lie within about ``1 +- 4 sqrt(BLOCK / POOL_SIZE)``). Each block is thus a row of a
partial random circulant matrix with random signs, a standard fast substitute for i.i.d. Gaussian
projections (Krahmer, Mendelson, Rauhut, "Suprema of chaos processes and the restricted isometry
property", CPAM 2014). The directions before issue 17 were i.i.d. normal draws of a per-tensor
mt19937 generator; they cost 7-8x more per use (benchmarks/zo_speed.py).

A step needs the model, the pool and the activations of an inference forward pass: no gradients,
no optimizer state, no buffer the size of the model. Parameters must be fp32 ("master weights"):
in fp16/bf16 an update ``lr * g * z`` of order 1e-7 is below the spacing of most weights and
disappears, and perturb/restore round-off accumulates.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any

import numpy as np
import torch
from torch import nn

#: log2 of the number of values in the shared pool.
POOL_BITS = 22
#: Values in the shared pool (16 MiB of fp32).
POOL_SIZE = 1 << POOL_BITS
#: Coordinates per block: one pool window, one multiply-add call.
BLOCK = 1 << 15
#: Seed of the pool's bit generator (part of the definition of every direction).
POOL_SEED = 20_240_617
#: Uniform 16-bit terms summed per pool value.
IRWIN_HALL_TERMS = 12
#: Directions applied together per pass in :meth:`Directions.add_many_` (bounds the keys held).
GROUP = 64

_MASK64 = (1 << 64) - 1
_GAMMA = np.uint64(0x9E3779B97F4A7C15)
_SEED_TAG = 0x2545F4914F6CDD1D


def mix64(x: np.ndarray) -> np.ndarray:
    """SplitMix64's finaliser on a uint64 array (a bijection with full avalanche), in place."""
    x ^= x >> np.uint64(30)
    x *= np.uint64(0xBF58476D1CE4E5B9)
    x ^= x >> np.uint64(27)
    x *= np.uint64(0x94D049BB133111EB)
    x ^= x >> np.uint64(31)
    return x


def block_keys(seed: int, num_blocks: int) -> tuple[list[int], list[float]]:
    """Pool offset and sign of every block of ``z(seed)``: a counter-based hash of ``(seed, b)``.

    ``h_b = mix64(key + (b + 1) * gamma)`` with ``key = mix64(seed ^ tag)`` (SplitMix64 addressed
    by the block index); the offset is the top :data:`POOL_BITS` bits of ``h_b``, the sign its
    lowest bit.
    """
    key = mix64(np.array([(int(seed) ^ _SEED_TAG) & _MASK64], dtype=np.uint64))
    h = np.arange(1, num_blocks + 1, dtype=np.uint64)
    h *= _GAMMA
    h += key
    mix64(h)
    offsets = (h >> np.uint64(64 - POOL_BITS)).astype(np.int64)
    signs = 1.0 - 2.0 * (h & np.uint64(1)).astype(np.float64)
    return offsets.tolist(), signs.tolist()


@functools.lru_cache(maxsize=1)
def gaussian_pool() -> torch.Tensor:
    """The shared pool, fp32 on the CPU, with its first :data:`BLOCK` values repeated at the end.

    ``P[j] = (sum_{t<12} u_{12 j + t} - 6 (2^16 - 1)) / sqrt(2^32 - 1)`` where the ``u`` are the
    uint16 lanes (little-endian) of ``SFC64(SeedSequence(POOL_SEED)).random_raw()``; the repeat
    makes every cyclic window one contiguous slice.
    """
    raw = np.random.SFC64(np.random.SeedSequence(POOL_SEED)).random_raw(
        POOL_SIZE * IRWIN_HALL_TERMS // 4)
    lanes = raw.astype("<u8").view("<u2").reshape(IRWIN_HALL_TERMS, POOL_SIZE)
    total = lanes[0].astype(np.int32)
    for t in range(1, IRWIN_HALL_TERMS):
        total += lanes[t]
    total -= np.int32(IRWIN_HALL_TERMS // 2 * 0xFFFF)
    pool = total.astype(np.float32) * np.float32(1.0 / math.sqrt(2.0**32 - 1.0))
    return torch.from_numpy(np.concatenate([pool, pool[:BLOCK]]))


_DEVICE_POOLS: dict[str, torch.Tensor] = {}


def pool_on(device: torch.device) -> torch.Tensor:
    """The pool on ``device`` (copied once per process and device; values unchanged)."""
    if device.type == "cpu":
        return gaussian_pool()
    key = str(device)
    if key not in _DEVICE_POOLS:
        _DEVICE_POOLS[key] = gaussian_pool().to(device)
    return _DEVICE_POOLS[key]


def canonical_parameters(model: nn.Module) -> list[nn.Parameter]:
    """Return the trainable parameters of ``model`` in canonical (``named_parameters``) order.

    Raises
    ------
    TypeError
        If a trainable parameter is not fp32.

    """
    params = [p for _, p in model.named_parameters() if p.requires_grad]
    for name, p in model.named_parameters():
        if p.requires_grad and p.dtype != torch.float32:
            raise TypeError(f"zeroth-order tuning needs fp32 master weights; {name} is {p.dtype}")
    if not params:
        raise ValueError("the model has no trainable parameters")
    return params


@dataclasses.dataclass(frozen=True)
class Segment:
    """The part of one block that lies in one tensor.

    Attributes
    ----------
    tensor : int
        Index of the tensor in the canonical list.
    lo, hi : int
        The flat range ``[lo, hi)`` inside that tensor.
    block : int
        The block (of the flat vector) the range belongs to.
    within : int
        Position of ``lo`` inside the block (the pool window starts ``within`` further).

    """

    tensor: int
    lo: int
    hi: int
    block: int
    within: int


def segments(sizes: Sequence[int]) -> list[Segment]:
    """Cut tensors of ``sizes`` (in canonical order) along the blocks of the flat vector."""
    out: list[Segment] = []
    start = 0
    for i, n in enumerate(sizes):
        pos = 0
        while pos < n:
            block, within = divmod(start + pos, BLOCK)
            length = min(n - pos, BLOCK - within)
            out.append(Segment(i, pos, pos + length, block, within))
            pos += length
        start += n
    return out


#: One move of the weights: ``params += scale * z(seed)``.
Move = tuple[int, float]


class Directions:
    """Applies seeded directions (pool windows) to a fixed list of parameters, in place.

    Parameters
    ----------
    params : Sequence[torch.Tensor]
        The perturbed tensors, in canonical order (see :func:`canonical_parameters`); each must be
        contiguous (its flat view is written in place).

    """

    def __init__(self, params: Sequence[torch.Tensor]) -> None:
        self.params = list(params)
        for p in self.params:
            if not p.is_contiguous():
                raise ValueError("zeroth-order directions need contiguous parameter tensors")
        self.numel = sum(p.numel() for p in self.params)
        self.num_blocks = -(-self.numel // BLOCK)
        self.segments = segments([p.numel() for p in self.params])

    @torch.no_grad()
    def add_many_(self, moves: Sequence[Move]) -> None:
        """In place: ``params += scale * z(seed)`` for every ``(seed, scale)``, in that order.

        Every coordinate receives the moves in the given order, one rounded multiply-add each, so
        the result is bitwise that of applying the moves one after the other; doing all of them
        segment by segment keeps the segment in cache (one pass over the weights per
        :data:`GROUP` moves).
        """
        flats = [p.view(-1) for p in self.params]
        pools = [pool_on(p.device) for p in self.params]
        for g in range(0, len(moves), GROUP):
            keyed = [(*block_keys(seed, self.num_blocks), float(scale))
                     for seed, scale in moves[g:g + GROUP]]
            for seg in self.segments:
                dst = flats[seg.tensor][seg.lo:seg.hi]
                pool = pools[seg.tensor]
                n = seg.hi - seg.lo
                for offsets, signs, scale in keyed:
                    o = offsets[seg.block] + seg.within
                    dst.add_(pool[o:o + n], alpha=signs[seg.block] * scale)

    def add_(self, seed: int, scale: float) -> None:
        """In place: ``params += scale * z(seed)``."""
        self.add_many_([(seed, scale)])

    @torch.no_grad()
    def vector(self, seed: int) -> torch.Tensor:
        """Return the whole direction ``z(seed)`` as one flat CPU tensor (tests, diagnostics)."""
        z = torch.zeros(self.numel, dtype=torch.float32)
        Directions([z]).add_(seed, 1.0)
        return z


@dataclasses.dataclass(frozen=True)
class StepResult:
    """One two-point step: the projected gradient and the two losses."""

    grad: float
    loss_plus: float
    loss_minus: float

    @property
    def applied(self) -> bool:
        """False when a loss or the gradient was not finite (the model was only restored)."""
        return all(math.isfinite(v) for v in (self.grad, self.loss_plus, self.loss_minus))

    def closing_scale(self, eps: float, lr: float) -> float:
        """Scale of the move from ``w - eps z`` to the step's end: ``eps - lr g`` or ``eps``."""
        return eps - lr * self.grad if self.applied else eps


def to_float32(value: float) -> float:
    """Round to the nearest fp32 value (what travels and what is applied)."""
    return float(np.float32(value))


def _two_points(directions: Directions, seed: int, loss: Callable[[], float], eps: float
                ) -> StepResult:
    """From ``w + eps z`` (already applied): ``L+``, move to ``w - eps z``, ``L-``, ``g``."""
    loss_plus = float(loss())
    directions.add_(seed, -2.0 * eps)
    loss_minus = float(loss())
    grad = to_float32((loss_plus - loss_minus) / (2.0 * eps))
    return StepResult(grad, loss_plus, loss_minus)


def zo_step(
    directions: Directions,
    seed: int,
    loss: Callable[[], float],
    *,
    eps: float,
    lr: float,
) -> StepResult:
    """One MeZO two-point step along ``z(seed)``, in place.

    Evaluates ``loss()`` at ``w + eps*z`` and ``w - eps*z``, sets
    ``g = (L+ - L-) / (2 eps)`` (rounded to fp32, the value that travels), then moves to
    ``w - lr*g*z``: restoring and updating share one pass (three passes per step in all; see
    :func:`zo_steps` for two). A non-finite loss only restores ``w`` (the reference
    implementation skips such steps).

    Parameters
    ----------
    directions : Directions
        The model's perturbation engine.
    seed : int
        The direction's seed.
    loss : Callable[[], float]
        Loss of the current weights on a fixed mini-batch (no gradients needed).
    eps, lr : float
        Perturbation scale and learning rate.

    """
    directions.add_(seed, eps)
    result = _two_points(directions, seed, loss, eps)
    directions.add_(seed, result.closing_scale(eps, lr))
    return result


def zo_steps(
    directions: Directions,
    seeds: Iterable[int],
    batches: Iterator[Any],
    loss: Callable[[Any], float],
    *,
    eps: float,
    lr: float,
) -> list[StepResult]:
    """Consecutive :func:`zo_step` s, one batch each, with two passes over the weights per step.

    The closing move of step ``t`` (``eps - lr g_t`` along ``z_t``) and the opening move of step
    ``t + 1`` (``+eps`` along ``z_{t+1}``) are applied in one pass (:meth:`Directions.add_many_`),
    so every coordinate sees the same rounded operations in the same order as with
    :func:`zo_step`: the weights are bitwise those of the step-by-step loop.

    Parameters
    ----------
    directions : Directions
        The model's perturbation engine.
    seeds : Iterable[int]
        The direction of every step.
    batches : Iterator
        One batch is taken per step.
    loss : Callable[[Any], float]
        ``loss(batch)`` -> loss of the current weights on ``batch`` (forward only).
    eps, lr : float
        Perturbation scale and learning rate.

    """
    results: list[StepResult] = []
    closing: list[Move] = []
    for seed in seeds:
        batch = next(batches)
        directions.add_many_([*closing, (int(seed), eps)])
        result = _two_points(directions, int(seed), functools.partial(loss, batch), eps)
        closing = [(int(seed), result.closing_scale(eps, lr))]
        results.append(result)
    if closing:
        directions.add_many_(closing)
    return results


def replay(directions: Directions, seeds: np.ndarray, coefficients: np.ndarray, lr: float) -> int:
    """Move the weights by ``-lr * sum_k coefficients[k] * z(seeds[k])``.

    Zero coefficients are skipped; the others are applied in index order (bitwise as one after
    the other, :data:`GROUP` at a time per pass). Returns how many directions were applied.
    """
    changed = np.flatnonzero(coefficients)
    directions.add_many_([(int(seeds[k]), -lr * float(coefficients[k])) for k in changed])
    return int(changed.size)
