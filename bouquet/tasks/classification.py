"""Shared machinery for supervised classification tasks (torch).

A concrete task provides :meth:`ClassificationTask.load_arrays` (numpy features and labels) and
:meth:`ClassificationTask.build_model`. Everything else (partitions, batches, the local SGD loop,
evaluation, converting between a model and named numpy arrays) is here, once. Data are loaded once
per process and kept: a simulation actor serves many clients.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable, Iterator, Mapping
from functools import cached_property
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from bouquet.schema import CommonConfig
from bouquet.tasks.fingerprint import digest_of, fingerprint_inputs
from bouquet.tasks.partition import partition_rows
from bouquet.tasks.torch_utils import (
    THREADS_ENV,
    central_threads,
    generator,
    get_arrays,
    set_arrays,
    sgd_steps,
)

__all__ = ["Arrays", "ClassificationTask", "LocalData", "MiniBatches", "generator", "get_arrays",
           "set_arrays"]

torch.set_num_threads(max(1, int(os.environ.get(THREADS_ENV, "1"))))


@dataclasses.dataclass
class LocalData:
    """One node's share: training rows and a held-out evaluation share."""

    x_train: torch.Tensor
    y_train: torch.Tensor
    x_test: torch.Tensor
    y_test: torch.Tensor

    @property
    def num_train(self) -> int:
        """Number of local training examples."""
        return int(self.y_train.shape[0])


@dataclasses.dataclass
class Arrays:
    """Numpy features and labels of a whole dataset, plus an optional natural group per row."""

    x_train: np.ndarray
    y_train: np.ndarray
    x_test: np.ndarray
    y_test: np.ndarray
    groups: np.ndarray | None = None


class MiniBatches:
    """Mini-batching shared by every task whose local data has ``x_train``/``y_train`` tensors."""

    def batches(
        self, local: Any, batch_size: int, generator: torch.Generator
    ) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        """Endless stream of shuffled mini-batches (reshuffled every epoch)."""
        n = int(local.y_train.shape[0])
        while True:
            perm = torch.randperm(n, generator=generator)
            for i in range(0, n, batch_size):
                idx = perm[i : i + batch_size]
                yield local.x_train[idx], local.y_train[idx]

    def num_steps(self, common: CommonConfig, num_train: int) -> int:
        """Local steps per round: ``local-steps`` or ``local-epochs`` worth of batches."""
        if common.local_steps > 0:
            return common.local_steps
        return max(1, common.local_epochs * int(np.ceil(num_train / common.batch_size)))


class ClassificationTask(MiniBatches):
    """Base of classification tasks; metrics are ``accuracy`` and ``loss``."""

    name = "classification"
    kind = "classification"
    num_classes = 10
    #: Distributions whose versions shape the loaded arrays (part of :meth:`data_fingerprint`).
    data_packages: tuple[str, ...] = ("numpy", "flwr-datasets", "datasets")
    #: Further modules whose source shapes the arrays (part of :meth:`data_fingerprint`).
    fingerprint_modules: tuple[str, ...] = ()
    #: Environment variables that choose :meth:`data_sources` (part of :meth:`data_fingerprint`).
    data_environment: tuple[str, ...] = ()
    #: Attributes whose values shape the rows; their ``repr`` on the object is part of
    #: :meth:`data_fingerprint` (a missing one counts as None).
    fingerprint_attributes: tuple[str, ...] = (
        "max_length", "train_rows", "test_rows", "train_size", "eval_size", "template",
        "num_classes")

    # --------------------------------------------------------------- to implement
    def load_arrays(self) -> Arrays:
        """Return the whole dataset as numpy arrays (called once per process)."""
        raise NotImplementedError

    def build_model(self) -> nn.Module:
        """Return a freshly initialised model."""
        raise NotImplementedError

    def data_sources(self) -> list[Path] | None:
        """The local files :meth:`load_arrays` reads; None when unknown (never cached on disk).

        A task that lists them lets a node keep its partition on disk
        (:mod:`bouquet.tasks.partition_cache`); the default, None, suits a task that downloads
        or generates its data.
        """
        return None

    # --------------------------------------------------------------- data
    def data_fingerprint(self) -> str | None:
        """Digest of this task's code, data files and reading packages (None: not cacheable).

        See :mod:`bouquet.tasks.fingerprint`; a node's partition cache is keyed by it.
        """
        inputs = self.data_fingerprint_inputs()
        return None if inputs is None else digest_of(inputs)

    def data_fingerprint_inputs(self) -> dict[str, Any] | None:
        """What :meth:`data_fingerprint` digests (None: not cacheable)."""
        sources = self.data_sources()
        if sources is None:
            return None
        return fingerprint_inputs(type(self), sources, self.data_packages,
                                  self.fingerprint_modules, self.data_environment,
                                  {n: repr(getattr(self, n, None))
                                   for n in self.fingerprint_attributes})

    @cached_property
    def data(self) -> Arrays:
        """The dataset, loaded on first use and kept for the life of the process."""
        return self.load_arrays()

    def partition(self, partition_id: int, num_partitions: int, common: CommonConfig) -> LocalData:
        """Rows of ``partition_id``: training rows by the configured scheme, test rows IID."""
        d = self.data
        rows = partition_rows(
            d.y_train, scheme=common.partition, num_partitions=num_partitions,
            partition_id=partition_id, seed=common.seed, alpha=common.dirichlet_alpha,
            classes_per_client=common.classes_per_client, groups=d.groups,
        )
        test_rows = np.arange(partition_id, len(d.y_test), num_partitions)
        return LocalData(
            torch.from_numpy(d.x_train[rows]), torch.from_numpy(d.y_train[rows]),
            torch.from_numpy(d.x_test[test_rows]), torch.from_numpy(d.y_test[test_rows]),
        )

    def num_examples(self, partition_id: int, num_partitions: int, common: CommonConfig) -> int:
        """Size of a partition's training share."""
        return self.partition(partition_id, num_partitions, common).num_train

    # --------------------------------------------------------------- model <-> arrays
    def initial_arrays(self, seed: int) -> dict[str, np.ndarray]:
        """The initial global model, identical for a given seed."""
        torch.manual_seed(seed)
        return get_arrays(self.build_model())

    def model_from(self, arrays: Mapping[str, np.ndarray]) -> nn.Module:
        """A model holding ``arrays``."""
        model = self.build_model()
        set_arrays(model, arrays)
        return model

    # --------------------------------------------------------------- training
    def example_losses(self, model: nn.Module, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        """Cross-entropy of each example, ``(B,)``: example i's depends on row i alone (DP-SGD)."""
        return nn.functional.cross_entropy(model(x), y, reduction="none")

    def loss(self, model: nn.Module, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        """Mean cross-entropy of a batch."""
        return self.example_losses(model, x, y).mean()

    def train(
        self,
        model: nn.Module,
        local: LocalData,
        common: CommonConfig,
        generator: torch.Generator,
        *,
        steps: int | None = None,
        lr: float | None = None,
        correct_grad: Callable[[nn.Module], None] | None = None,
    ) -> dict[str, float]:
        """Plain local SGD; ``correct_grad(model)`` may edit gradients before each step.

        Returns the mean training loss and the number of steps taken.
        """
        steps = self.num_steps(common, local.num_train) if steps is None else steps
        return sgd_steps(model, self.batches(local, common.batch_size, generator),
                         lambda m, batch: self.loss(m, *batch), steps=steps,
                         lr=common.lr if lr is None else lr, correct_grad=correct_grad)

    # --------------------------------------------------------------- evaluation
    @torch.no_grad()
    def evaluate_model(self, model: nn.Module, x: torch.Tensor, y: torch.Tensor) -> dict[str, float]:
        """Accuracy and mean loss of ``model`` on ``(x, y)``."""
        model.eval()
        correct, loss_sum = 0, 0.0
        for i in range(0, len(y), 1024):
            logits = model(x[i : i + 1024])
            loss_sum += float(nn.functional.cross_entropy(logits, y[i : i + 1024], reduction="sum"))
            correct += int((logits.argmax(1) == y[i : i + 1024]).sum())
        n = max(len(y), 1)
        return {"accuracy": correct / n, "loss": loss_sum / n}

    @central_threads()
    def evaluate(self, arrays: Mapping[str, np.ndarray]) -> dict[str, float]:
        """Central evaluation of a global model on the whole test set (on every core)."""
        d = self.data
        return self.evaluate_model(
            self.model_from(arrays), torch.from_numpy(d.x_test), torch.from_numpy(d.y_test)
        )
