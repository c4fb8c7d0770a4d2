"""Torch helpers shared by tasks and client procedures.

Model <-> named arrays, seeded generators, the plain local SGD loop over any iterable of
batches, and the thread count of central evaluation (:func:`central_threads`, which reads
``BOUQUET_TORCH_THREADS``).

Apart from that variable nothing here knows about tasks or configs; a user's own ``nn.Module``
and batches work as well as the catalogue's.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import numpy as np
import torch
from torch import nn

#: Environment variable that fixes torch's threads in every bouquet process. Unset, a process
#: trains on one thread (a simulation runs one process per actor; more threads each would make
#: them compete for the cores) and evaluates centrally on all of them (:func:`central_threads`).
THREADS_ENV = "BOUQUET_TORCH_THREADS"

#: ``loss_fn(model, batch) -> scalar tensor``: the loss closure of the gradient methods.
BatchLoss = Callable[[nn.Module, Any], torch.Tensor]
#: ``correct_grad(model)``: edits the gradients in place before each optimiser step.
GradientHook = Callable[[nn.Module], None]


def usable_cores() -> int:
    """The number of CPU cores this process may run on (its affinity where the OS has one)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # no affinity on this OS
        return os.cpu_count() or 1


@contextlib.contextmanager
def central_threads() -> Iterator[None]:
    """Run the block (or the decorated function) on every core this process may use.

    For the server's central evaluation of the global model: a round evaluates once its replies
    are in, when the nodes of a synchronous round have finished (one past ``round-timeout`` may
    still train), so the one thread a process gets by default (:data:`THREADS_ENV`) would leave
    the other cores idle. Where ``BOUQUET_TORCH_THREADS`` is set, it is the user's count and is
    kept (set it where the server shares its machine with nodes or other runs). The previous
    count is restored afterwards, also on an error.
    """
    before = torch.get_num_threads()
    wanted = before if THREADS_ENV in os.environ else max(before, usable_cores())
    if wanted != before:
        torch.set_num_threads(wanted)
    try:
        yield
    finally:
        if wanted != before:
            torch.set_num_threads(before)


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

    Each step is ``p -= lr * grad`` on every trainable parameter that received a gradient:
    ``torch.optim.SGD`` without momentum or weight decay, written out. On the CPU the result is
    the same bit for bit (``param.add_(grad, alpha=-lr)`` is SGD's own single-tensor update;
    tests/test_foundation.py compares them). ``torch.optim`` is not used because its first
    optimiser in a process imports ``torch._dynamo`` (1.3-1.8 CPU s here, about as much as
    importing torch), which a node paid on every message it ran in a fresh process
    (benchmarks/RESULTS.md, perf-tests).

    Parameters
    ----------
    model : nn.Module
        Trained in place (every parameter that requires a gradient).
    stream : Iterator
        Source of batches (see :func:`bouquet.clients.local_training.batch_stream`).
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
    params = [p for p in model.parameters() if p.requires_grad]
    model.train()
    total = 0.0
    for _ in range(steps):
        batch = next(stream)
        for p in params:
            p.grad = None
        loss = loss_fn(model, batch)
        loss.backward()
        if correct_grad is not None:
            correct_grad(model)
        with torch.no_grad():
            for p in params:
                if p.grad is not None:
                    p.add_(p.grad, alpha=-lr)
        total += float(loss.detach())
    return {"train_loss": total / max(steps, 1), "steps": float(steps)}
