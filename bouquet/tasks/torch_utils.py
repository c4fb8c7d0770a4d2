"""Torch helpers shared by tasks and client procedures.

Model <-> named arrays, seeded generators, and the plain local SGD loop over any iterable of
batches.

Nothing here knows about tasks, configs or federated learning; a user's own ``nn.Module`` and
batches work as well as the catalogue's.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any

import numpy as np
import torch
from torch import nn

#: ``loss_fn(model, batch) -> scalar tensor``: the loss closure of the gradient methods.
BatchLoss = Callable[[nn.Module, Any], torch.Tensor]
#: ``correct_grad(model)``: edits the gradients in place before each optimiser step.
GradientHook = Callable[[nn.Module], None]


def get_arrays(model: nn.Module) -> dict[str, np.ndarray]:
    """Named numpy copies of every tensor in ``model.state_dict()`` (order kept)."""
    return {k: v.detach().cpu().numpy().copy() for k, v in model.state_dict().items()}


def set_arrays(model: nn.Module, arrays: Mapping[str, np.ndarray]) -> None:
    """Load named numpy arrays into ``model`` (strict: names and shapes must match)."""
    model.load_state_dict({k: torch.from_numpy(np.asarray(a).copy()) for k, a in arrays.items()},
                          strict=True)


def generator(*seed_parts: int) -> torch.Generator:
    """A torch generator seeded from several integers (run seed, round, partition...)."""
    ss = np.random.SeedSequence(list(seed_parts))
    return torch.Generator().manual_seed(int(ss.generate_state(1, dtype=np.uint64)[0] >> 1))


def batch_stream(batches: Iterable[Any]) -> Iterator[Any]:
    """Endless stream over ``batches``, iterating it afresh at the end of every epoch.

    Raises
    ------
    ValueError
        If an epoch yields no batch at all.

    """
    while True:
        empty = True
        for batch in batches:
            empty = False
            yield batch
        if empty:
            raise ValueError("the batches yield nothing: no local data to train on")


def count_batches(batches: Iterable[Any]) -> int:
    """Batches per epoch: ``len(batches)`` when defined, else one counting pass."""
    try:
        return len(batches)  # type: ignore[arg-type]
    except TypeError:
        return sum(1 for _ in batches)


def count_examples(batches: Iterable[Any]) -> int:
    """Examples per epoch: ``len(batches.dataset)`` (a DataLoader), else the summed batch sizes.

    A batch's size is the length of its first element when it is a tuple or list (``(x, y)``),
    of the batch itself otherwise.
    """
    dataset = getattr(batches, "dataset", None)
    if dataset is not None:
        try:
            return len(dataset)
        except TypeError:
            pass
    total = 0
    for batch in batches:
        first = batch[0] if isinstance(batch, tuple | list) else batch
        total += len(first)
    return total


def sgd_steps(
    model: nn.Module,
    stream: Iterator[Any],
    loss_fn: BatchLoss,
    *,
    steps: int,
    lr: float,
    correct_grad: GradientHook | None = None,
) -> dict[str, float]:
    """Run ``steps`` plain SGD steps on batches drawn from ``stream``.

    Parameters
    ----------
    model : nn.Module
        Trained in place (every parameter that requires a gradient).
    stream : Iterator
        Source of batches (see :func:`batch_stream`).
    loss_fn : BatchLoss
        ``loss_fn(model, batch)`` -> mean loss of the batch.
    steps : int
        Number of optimiser steps.
    lr : float
        Learning rate.
    correct_grad : GradientHook, optional
        Called after ``backward`` and before each step (control variates).

    Returns
    -------
    dict
        ``train_loss`` (mean over the steps) and ``steps``.

    """
    opt = torch.optim.SGD(model.parameters(), lr=lr)
    model.train()
    total = 0.0
    for _ in range(steps):
        batch = next(stream)
        opt.zero_grad(set_to_none=True)
        loss = loss_fn(model, batch)
        loss.backward()
        if correct_grad is not None:
            correct_grad(model)
        opt.step()
        total += float(loss.detach())
    return {"train_loss": total / max(steps, 1), "steps": float(steps)}
