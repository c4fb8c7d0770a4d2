"""What client procedures and the ClientApp may ask of a task: typed protocols, not ``hasattr``.

A task of bouquet's catalogue (or a third party's) satisfies the protocols that fit it; the client
side checks them with ``isinstance`` (they are ``runtime_checkable``) and then uses the typed
methods. Torch-free on purpose: the signatures name tensors and modules as ``Any``.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any, Protocol, runtime_checkable

import numpy as np

from bouquet.schema import CommonConfig


@runtime_checkable
class Task(Protocol):
    """Every task: a name, a kind, and each node's share of the data."""

    name: str
    kind: str

    def partition(self, partition_id: int, num_partitions: int, common: CommonConfig) -> Any:
        """Return this node's local data."""
        ...

    def num_examples(self, partition_id: int, num_partitions: int, common: CommonConfig) -> int:
        """Size of a partition's training share (0: an unbounded stream)."""
        ...


@runtime_checkable
class ModelTask(Task, Protocol):
    """A task with a model that travels as named arrays."""

    def build_model(self) -> Any:
        """A fresh (or pretrained) ``nn.Module``."""
        ...

    def model_from(self, arrays: Mapping[str, np.ndarray]) -> Any:
        """A model holding ``arrays``."""
        ...

    def initial_arrays(self, seed: int) -> dict[str, np.ndarray]:
        """The initial global model, identical for a given seed."""
        ...


@runtime_checkable
class SupervisedTask(ModelTask, Protocol):
    """Classification and language-model tasks: batches and a loss (gradient, LoRA, ZO methods).

    The local data has ``x_train``, ``y_train`` and ``num_train``.
    """

    def batches(self, local: Any, batch_size: int, generator: Any) -> Iterator[Any]:
        """Endless shuffled ``(x, y)`` mini-batches of the local data."""
        ...

    def num_steps(self, common: CommonConfig, num_train: int) -> int:
        """Local steps per round."""
        ...

    def loss(self, model: Any, x: Any, y: Any) -> Any:
        """Mean loss of a batch (a scalar tensor)."""
        ...


@runtime_checkable
class EvaluatedTask(SupervisedTask, Protocol):
    """A supervised task that evaluates a model on the node's held-out rows."""

    def evaluate_model(self, model: Any, x: Any, y: Any) -> dict[str, Any]:
        """Metrics of ``model`` on ``(x, y)``."""
        ...


@runtime_checkable
class PrivateTask(SupervisedTask, Protocol):
    """A supervised task DP-SGD can train: one loss per example."""

    def example_losses(self, model: Any, x: Any, y: Any) -> Any:
        """Loss of every example, shape ``(B,)``."""
        ...


@runtime_checkable
class BanditTask(Task, Protocol):
    """A contextual-bandit environment: ``partition`` gives a stream with ``block(...)``."""

    section_prefix: str


@runtime_checkable
class CacheableTask(Protocol):
    """A task whose node partitions may be kept on the node's disk (:mod:`~bouquet.tasks.partition_cache`).

    ``partition`` returns :class:`~bouquet.tasks.classification.LocalData` and ``num_examples`` is
    its ``num_train``.
    """

    def data_fingerprint(self) -> str | None:
        """A digest of the task's code, data files and reading packages (None: do not cache)."""
        ...


@runtime_checkable
class PackagedTask(Protocol):
    """A task whose data or model ship as a separate package (a clear pip line when absent)."""

    def require(self) -> None:
        """Raise with the pip command when the package is missing."""
        ...


def require_kind(task: object, kind: type[Any], need: str) -> Any:
    """``task`` when it satisfies ``kind``; else a ``TypeError`` saying what the method needs."""
    if not isinstance(task, kind):
        raise TypeError(f"this method needs {need}; task {getattr(task, 'name', task)!r} is not "
                        f"a {kind.__name__}")
    return task
