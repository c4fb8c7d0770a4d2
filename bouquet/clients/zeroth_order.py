"""Zeroth-order (two-point SPSA) steps with seed-regenerated, in-place perturbations.

This is the engine of FedKSeed (Qin et al., "Federated Full-Parameter Tuning of Billion-Sized
Language Models with Communication Cost under 18 Kilobytes", ICML 2024, arXiv:2312.06353), which
builds on MeZO (Malladi et al., "Fine-Tuning Language Models with Just Forward Passes", NeurIPS
2023). It works on any ``torch.nn.Module`` and knows nothing about federated learning.

A *direction* ``z(s)`` is a standard Gaussian vector over every trainable parameter, defined by an
integer seed ``s``:

* the parameters are taken in a canonical order: ``model.named_parameters()`` order (shared
  tensors once), keeping those with ``requires_grad``;
* the part of ``z(s)`` for the ``i``-th tensor is drawn with a fresh CPU ``torch.Generator`` seeded
  from ``(s, i)`` (:func:`bouquet.tasks.classification.generator`), in fp32, then moved to the
  tensor's device. The CPU generator and the fp32 draw are what make a CPU server, CPU clients and
  GPU clients regenerate the same direction (CUDA generators give other streams; drawing in
  another dtype consumes the stream differently);
* ``z(s)`` is never stored: it is regenerated tensor by tensor into one scratch buffer the size of
  the largest parameter tensor, so that a step needs the model, that buffer and the activations of
  an inference forward pass, no gradients and no optimizer state.

Parameters must be fp32 ("master weights"): in fp16/bf16 an update ``lr * g * z`` of order 1e-7 is
below the spacing of most weights and disappears, and perturb/restore round-off accumulates.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Sequence

import numpy as np
import torch
from torch import nn

from bouquet.tasks.classification import generator


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


def tensor_generator(seed: int, index: int) -> torch.Generator:
    """Return the CPU generator that draws the part of ``z(seed)`` for the ``index``-th tensor."""
    return generator(int(seed), int(index))


class Directions:
    """Regenerates seeded Gaussian directions over a fixed list of parameters and applies them.

    Parameters
    ----------
    params : Sequence[torch.Tensor]
        The perturbed tensors, in canonical order (see :func:`canonical_parameters`).

    """

    def __init__(self, params: Sequence[torch.Tensor]) -> None:
        self.params = list(params)
        self.numel = sum(p.numel() for p in self.params)
        #: The one scratch buffer (CPU, fp32), as large as the largest tensor.
        self.scratch = torch.empty(max(p.numel() for p in self.params), dtype=torch.float32)

    def draw(self, seed: int, index: int) -> torch.Tensor:
        """Write the part of ``z(seed)`` for tensor ``index`` into the scratch buffer; return it."""
        p = self.params[index]
        z = self.scratch[: p.numel()].view(p.shape)
        z.normal_(0.0, 1.0, generator=tensor_generator(seed, index))
        return z

    @torch.no_grad()
    def add_(self, seed: int, scale: float) -> None:
        """In place: ``params += scale * z(seed)``."""
        for i, p in enumerate(self.params):
            z = self.draw(seed, i)
            p.add_(z if p.device.type == "cpu" else z.to(p.device), alpha=scale)

    @torch.no_grad()
    def vector(self, seed: int) -> torch.Tensor:
        """Return the whole direction ``z(seed)`` as one flat CPU tensor (tests, diagnostics)."""
        return torch.cat([self.draw(seed, i).reshape(-1).clone() for i in range(len(self.params))])


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


def to_float32(value: float) -> float:
    """Round to the nearest fp32 value (what travels and what is applied)."""
    return float(np.float32(value))


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
    ``w - lr*g*z``: restoring and updating share one regeneration of ``z`` (three per step in all).
    A non-finite loss only restores ``w`` (the reference implementation skips such steps).

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
    loss_plus = float(loss())
    directions.add_(seed, -2.0 * eps)
    loss_minus = float(loss())
    grad = to_float32((loss_plus - loss_minus) / (2.0 * eps))
    result = StepResult(grad, loss_plus, loss_minus)
    directions.add_(seed, eps - lr * grad if result.applied else eps)
    return result


def replay(directions: Directions, seeds: np.ndarray, coefficients: np.ndarray, lr: float) -> int:
    """Move the weights by ``-lr * sum_k coefficients[k] * z(seeds[k])``, seed by seed.

    Zero coefficients are skipped; the others are applied in index order. Returns how many
    directions were regenerated.
    """
    changed = np.flatnonzero(coefficients)
    for k in changed:
        directions.add_(int(seeds[k]), -lr * float(coefficients[k]))
    return int(changed.size)
