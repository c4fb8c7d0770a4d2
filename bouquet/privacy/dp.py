"""Sample-level DP-SGD for any torch client, with Opacus (client-only; Opacus imported lazily).

:func:`local_train` runs a client's local steps, plainly or privately: per-sample gradients
(Opacus ``GradSampleModule``), per-sample clipping to ``dp.max-grad-norm`` C and Gaussian noise of
standard deviation ``sigma * C`` on the summed gradient (Opacus ``DPOptimizer``), then the optimiser
step (Abadi et al., "Deep Learning with Differential Privacy", CCS 2016). With ``dp.sampling =
'shuffle'`` the private and the plain path see the same batches, so with sigma = 0 and no clipping
they give the same update (a test checks it). :func:`private_gradient_sum` releases one clipped,
noised sum of per-sample gradients (Fed-SB's initialisation step in private mode).

The clipping bound C holds for one example only if that example's per-sample gradient depends
on it alone, so the private path never differentiates a batch loss that the caller chose: it takes
the task's per-example losses (``task.example_losses(model, x, y)``, shape ``(B,)``) and averages
them itself (:func:`mean_of_examples`). A token mean over a whole batch (a causal LM's usual loss)
would weight each example by the other examples' lengths.

Clipping bounds only what Opacus sees: :func:`check_per_sample_coverage` refuses, at the first
private backward pass, a trainable tensor whose per-sample gradients do not add up to its whole
gradient (a tied embedding read outside its module's forward, as ``rt-smollm``'s verbalizer) and a
trainable tensor the private optimiser does not hold.

The randomness of the mechanism (which rows a step uses, and the noise) must be unknown to
whoever sees the release: :func:`secret_generator` draws it from OS entropy, or from the node's
own ``dp-seed`` (node config, never sent) for reproducible simulations; never from the run seed,
which the server knows.

Accounting lives in :mod:`bouquet.privacy.accountant`; this module only runs the mechanism.
"""

from __future__ import annotations

import secrets
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import numpy as np
import torch
from torch import nn

LossFn = Callable[[nn.Module, torch.Tensor, torch.Tensor], torch.Tensor]
#: ``fn(model, x, y)`` -> the loss of every example, shape ``(len(x),)``.
ExampleLossFn = Callable[[nn.Module, torch.Tensor, torch.Tensor], torch.Tensor]


def mean_of_examples(example_losses: ExampleLossFn) -> LossFn:
    """The batch loss DP-SGD differentiates: the mean of the per-example losses.

    With Opacus' ``loss_reduction="mean"`` the per-sample gradient of row i is then the gradient
    of row i's own loss. The shape is checked, so a batch-reduced loss cannot slip in.
    """
    def loss(model: nn.Module, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        out = example_losses(model, x, y)
        if tuple(out.shape) != (len(x),):
            raise ValueError(f"example_losses must return one loss per example, shape "
                             f"({len(x)},); got {tuple(out.shape)}")
        return out.mean()

    return loss


def example_losses_of(task: Any) -> ExampleLossFn:
    """The task's ``example_losses``; a clear error for a task that has none (no DP-SGD)."""
    fn = getattr(task, "example_losses", None)
    if not callable(fn):
        raise ValueError(
            f"task {getattr(task, 'name', task)!r} defines no example_losses(model, x, y) "
            "(one loss per example): DP-SGD cannot bound one example's contribution without it"
        )
    return fn  # type: ignore[no-any-return]


def secret_generator(node_seed: int | None, *parts: int) -> torch.Generator:
    """Randomness of the DP mechanism: OS entropy, or the node's own seed (simulations).

    Parameters
    ----------
    node_seed : int or None
        The node's ``dp-seed`` (node config, never sent to the server). None: fresh entropy
        from :mod:`secrets`, so nobody (the server included) can reproduce the draw.
    *parts : int
        Further seed parts (round, purpose) when ``node_seed`` is given.

    """
    if node_seed is None:
        return torch.Generator().manual_seed(secrets.randbits(63))
    ss = np.random.SeedSequence([int(node_seed), *parts])
    return torch.Generator().manual_seed(int(ss.generate_state(1, dtype=np.uint64)[0] >> 1))


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


def check_per_sample_coverage(model: nn.Module, params: Sequence[torch.Tensor],
                              rtol: float = 1e-3) -> None:
    """Refuse DP-SGD when Opacus' per-sample gradients miss part of a trainable tensor's gradient.

    Opacus computes a tensor's per-sample gradients (``p.grad_sample``) in the hooks of the
    modules whose forward uses it; the private step then clips and noises those and *replaces*
    ``p.grad`` with the result. A tensor also read outside its module's forward (a tied input
    embedding that the task reads as its verbalizer, ``model.lm_head.weight[word_ids]``) gets a
    per-sample gradient of only part of its use: the rest of its gradient is silently dropped,
    and the trained model is not the one the user asked for. A trainable tensor that the
    optimiser does not hold would escape clipping and noise altogether. Both are refused here,
    after the first backward pass of a private step, by checking that the mean of the per-sample
    gradients (``loss_reduction="mean"``) equals the gradient autograd accumulated, tensor by
    tensor (a structural check: it holds or fails whatever the rows).

    Parameters
    ----------
    model : nn.Module
        The model (not its ``GradSampleModule``), after ``backward``.
    params : sequence of torch.Tensor
        The tensors the private optimiser updates.
    rtol : float
        Relative tolerance of the comparison (float rounding is ~1e-7).

    Raises
    ------
    ValueError
        Naming each tensor not fully covered (names only: no value computed from the rows).

    """
    names: dict[int, str] = {}
    for n, w in model.named_parameters(remove_duplicate=False):  # tied tensors: every name
        names[id(w)] = f"{names[id(w)]} = {n}" if id(w) in names else n
    given = {id(p) for p in params}
    stray = sorted({n for n, w in model.named_parameters() if w.requires_grad and id(w) not in given})
    if stray:
        raise ValueError(f"DP-SGD: trainable tensor(s) {stray} are not among the privately trained "
                         "ones; they would escape per-sample clipping: freeze them")
    partial: list[str] = []
    for p in params:
        name = names.get(id(p), f"<tensor of shape {tuple(p.shape)} outside the model>")
        sample = getattr(p, "grad_sample", None)
        if sample is None or p.grad is None:
            partial.append(f"{name} (no per-sample gradient)")
            continue
        if isinstance(sample, list):
            sample = torch.cat(sample)
        mean, full = sample.mean(0), p.grad
        gap = float((mean - full).norm())
        # against the rows' own gradient scale, so that rows whose gradients cancel in the mean
        # cannot make float rounding look like a missing part (the verdict must not depend on
        # the data); the message names the tensor only: it may reach the server, and a number
        # computed from private rows would leave the node outside the accountant
        scale = max(float(sample.flatten(1).norm(dim=1).mean()), float(full.norm()))
        if gap > rtol * scale + 1e-12:
            partial.append(name)
    if partial:
        raise ValueError(
            "DP-SGD: Opacus' per-sample gradients miss part of the gradient of " + ", ".join(partial)
            + ": the tensor is used outside the forward of the module that holds it (e.g. a tied "
            "embedding read as the verbalizer), so the private step would silently drop that part. "
            "Freeze it (leave it out of lora.head-modules) or use it through its module's forward"
        )


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
    example_loss_fn: ExampleLossFn | None = None,
) -> dict[str, float]:
    """Run ``steps`` local steps on ``(x, y)`` updating ``params``; DP-SGD when ``dp`` is given.

    Parameters
    ----------
    model : nn.Module
        The model; only ``params`` require gradients.
    params : sequence of nn.Parameter
        The trainable tensors.
    loss_fn : callable
        ``loss_fn(model, x, y)`` -> mean loss of the batch (non-private path).
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
        Drives the Gaussian noise (:func:`secret_generator`).
    example_loss_fn : callable or None
        Required with ``dp``: ``fn(model, x, y)`` -> per-example losses ``(B,)``; the private
        path differentiates their mean (:func:`mean_of_examples`), never ``loss_fn``.

    Returns
    -------
    dict
        ``steps``; without DP also ``train_loss`` (mean over the steps). A private run returns
        nothing computed from the data outside the mechanism.

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

        if example_loss_fn is None:
            raise ValueError("DP-SGD needs example_loss_fn (one loss per example)")
        loss_fn = mean_of_examples(example_loss_fn)
        net = GradSampleModule(model, batch_first=True, loss_reduction="mean")
        opt = DPOptimizer(opt, noise_multiplier=noise_multiplier,
                          max_grad_norm=dp.max_grad_norm, expected_batch_size=batch_size,
                          loss_reduction="mean", generator=noise_generator, secure_mode=True)
    model.train()
    losses: list[float] = []
    checked = dp is None
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
                if not checked:
                    check_per_sample_coverage(model, params)
                    checked = True
                if dp is None:
                    losses.append(float(loss.detach()))
            opt.step()
    finally:
        if net is not model:
            net._close()  # type: ignore[operator]
    if dp is not None:
        return {"steps": float(steps)}
    return {"train_loss": float(np.mean(losses)) if losses else float("nan"),
            "steps": float(steps)}


def private_gradient_sum(
    model: nn.Module,
    params: Sequence[torch.Tensor],
    example_loss_fn: ExampleLossFn,
    x: torch.Tensor,
    y: torch.Tensor,
    *,
    max_grad_norm: float,
    noise_multiplier: float,
    noise_generator: torch.Generator | None = None,
) -> list[torch.Tensor]:
    """One Gaussian-mechanism release: ``sum_i clip_C(grad_i) + N(0, (sigma C)^2)`` per tensor.

    ``grad_i`` is the gradient of row i's own loss (``example_loss_fn``, per-example losses).
    """
    from opacus import GradSampleModule
    from opacus.optimizers import DPOptimizer

    net = GradSampleModule(model, batch_first=True, loss_reduction="mean")
    opt = DPOptimizer(torch.optim.SGD(list(params), lr=0.0), noise_multiplier=noise_multiplier,
                      max_grad_norm=max_grad_norm, expected_batch_size=1,
                      loss_reduction="mean", generator=noise_generator, secure_mode=True)
    try:
        opt.zero_grad(set_to_none=True)
        if len(y) == 0:
            for p in params:
                p.grad_sample = torch.zeros((0, *p.shape), dtype=p.dtype)  # type: ignore[attr-defined]
        else:
            mean_of_examples(example_loss_fn)(net, x, y).backward()
            check_per_sample_coverage(model, params)
        opt.pre_step()  # clip, sum, add noise, divide by expected_batch_size (1)
        return [p.grad.detach().clone() for p in params]  # type: ignore[union-attr]
    finally:
        net._close()
