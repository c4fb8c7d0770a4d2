"""Sample-level DP-SGD for any torch client, with Opacus (client-only; Opacus imported lazily).

:func:`local_train` runs a client's local steps, plainly or privately: per-sample gradients
(Opacus ``GradSampleModule``), per-sample clipping to ``dp.max-grad-norm`` C and Gaussian noise of
standard deviation ``sigma * C`` on the summed gradient (Opacus ``DPOptimizer``), then the optimiser
step (Abadi et al., "Deep Learning with Differential Privacy", CCS 2016). With ``dp.sampling =
'shuffle'`` the private and the plain path see the same batches, so with sigma = 0 and no clipping
they give the same update (a test checks it). :func:`private_gradient_sum` releases one clipped,
noised sum of per-sample gradients (Fed-SB's initialisation step in private mode).

Accounting lives in :mod:`bouquet.privacy.accountant`; this module only runs the mechanism.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from typing import Any

import numpy as np
import torch
from torch import nn

LossFn = Callable[[nn.Module, torch.Tensor, torch.Tensor], torch.Tensor]


def shuffled_batches(n: int, batch_size: int, generator: torch.Generator) -> Iterator[torch.Tensor]:
    """Endless fixed-size batches of a fresh permutation per epoch (row indices)."""
    while True:
        perm = torch.randperm(n, generator=generator)
        for i in range(0, n, batch_size):
            yield perm[i : i + batch_size]


def poisson_batches(n: int, batch_size: int, generator: torch.Generator) -> Iterator[torch.Tensor]:
    """Endless Poisson batches: each row joins with probability ``batch_size / n``."""
    q = min(1.0, batch_size / max(n, 1))
    while True:
        yield torch.nonzero(torch.rand(n, generator=generator) < q).reshape(-1)


def make_optimizer(name: str, params: Sequence[torch.Tensor], lr: float) -> torch.optim.Optimizer:
    """A fresh local optimiser (``adamw`` or ``sgd``, no weight decay)."""
    if name == "sgd":
        return torch.optim.SGD(list(params), lr=lr)
    return torch.optim.AdamW(list(params), lr=lr, weight_decay=0.0)


def local_train(
    model: nn.Module,
    params: Sequence[torch.Tensor],
    loss_fn: LossFn,
    x: torch.Tensor,
    y: torch.Tensor,
    *,
    steps: int,
    batch_size: int,
    lr: float,
    optimizer: str,
    generator: torch.Generator,
    dp: Any | None = None,
    noise_multiplier: float = 0.0,
    noise_generator: torch.Generator | None = None,
) -> dict[str, float]:
    """Run ``steps`` local steps on ``(x, y)`` updating ``params``; DP-SGD when ``dp`` is given.

    Parameters
    ----------
    model : nn.Module
        The model; only ``params`` require gradients.
    params : sequence of nn.Parameter
        The trainable tensors.
    loss_fn : callable
        ``loss_fn(model, x, y)`` -> mean loss of the batch.
    x, y : torch.Tensor
        Local training rows.
    steps, batch_size, lr, optimizer : int, int, float, str
        Local schedule.
    generator : torch.Generator
        Drives batch selection.
    dp : DPConfig or None
        When given, per-sample clipping to ``dp.max_grad_norm`` and noise ``noise_multiplier``.
    noise_multiplier : float
        sigma (the run's, from :func:`bouquet.privacy.accountant.noise_for`).
    noise_generator : torch.Generator or None
        Drives the Gaussian noise (seeded for reproducible simulations).

    Returns
    -------
    dict
        ``train_loss`` (mean over non-empty steps) and ``steps``.

    """
    n = len(y)
    opt = make_optimizer(optimizer, params, lr)
    if dp is None or dp.sampling == "shuffle":
        batches = shuffled_batches(n, batch_size, generator)
    else:
        batches = poisson_batches(n, batch_size, generator)
    net: nn.Module = model
    if dp is not None:
        from opacus import GradSampleModule
        from opacus.optimizers import DPOptimizer

        net = GradSampleModule(model, batch_first=True, loss_reduction="mean")
        opt = DPOptimizer(opt, noise_multiplier=noise_multiplier,
                          max_grad_norm=dp.max_grad_norm, expected_batch_size=batch_size,
                          loss_reduction="mean", generator=noise_generator)
    model.train()
    losses: list[float] = []
    try:
        for _ in range(steps):
            idx = next(batches)
            opt.zero_grad(set_to_none=True)
            if len(idx) == 0:  # an empty Poisson batch still takes a (pure noise) step
                for p in params:
                    p.grad_sample = torch.zeros((0, *p.shape), dtype=p.dtype)  # type: ignore[attr-defined]
            else:
                loss = loss_fn(net, x[idx], y[idx])
                loss.backward()
                losses.append(float(loss.detach()))
            opt.step()
    finally:
        if net is not model:
            net._close()  # type: ignore[operator]
    return {"train_loss": float(np.mean(losses)) if losses else float("nan"),
            "steps": float(steps)}


def private_gradient_sum(
    model: nn.Module,
    params: Sequence[torch.Tensor],
    loss_fn: LossFn,
    x: torch.Tensor,
    y: torch.Tensor,
    *,
    max_grad_norm: float,
    noise_multiplier: float,
    noise_generator: torch.Generator | None = None,
) -> list[torch.Tensor]:
    """One Gaussian-mechanism release: ``sum_i clip_C(grad_i) + N(0, (sigma C)^2)`` per tensor."""
    from opacus import GradSampleModule
    from opacus.optimizers import DPOptimizer

    net = GradSampleModule(model, batch_first=True, loss_reduction="mean")
    opt = DPOptimizer(torch.optim.SGD(list(params), lr=0.0), noise_multiplier=noise_multiplier,
                      max_grad_norm=max_grad_norm, expected_batch_size=1,
                      loss_reduction="mean", generator=noise_generator)
    try:
        opt.zero_grad(set_to_none=True)
        if len(y) == 0:
            for p in params:
                p.grad_sample = torch.zeros((0, *p.shape), dtype=p.dtype)  # type: ignore[attr-defined]
        else:
            loss_fn(net, x, y).backward()
        opt.pre_step()  # clip, sum, add noise, divide by expected_batch_size (1)
        return [p.grad.detach().clone() for p in params]  # type: ignore[union-attr]
    finally:
        net._close()
