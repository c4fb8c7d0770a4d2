"""The app's own model and data: a small MLP on scikit-learn's digits (offline)."""

from __future__ import annotations

import numpy as np
import torch
from sklearn.datasets import load_digits
from torch import nn


class Net(nn.Module):
    """A two-layer MLP (the user's own model)."""

    def __init__(self) -> None:
        super().__init__()
        self.hidden = nn.Linear(64, 32)
        self.out = nn.Linear(32, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Logits of ``x``."""
        return self.out(torch.relu(self.hidden(x)))


def initial_model(seed: int = 0) -> Net:
    """The same initial model on every node and on the server."""
    torch.manual_seed(seed)
    return Net()


def load_partition(partition_id: int, num_partitions: int, split: str = "train",
                   batch_size: int = 32) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """Return this node's IID share of digits (80% train, 20% test), as a list of (x, y) batches."""
    x, y = load_digits(return_X_y=True)
    rows = np.random.default_rng(0).permutation(len(y))[partition_id::num_partitions]
    cut = int(0.8 * len(rows))
    rows = rows[:cut] if split == "train" else rows[cut:]
    xt = torch.tensor(x[rows] / 16.0, dtype=torch.float32)
    yt = torch.tensor(y[rows], dtype=torch.int64)
    return [(xt[i : i + batch_size], yt[i : i + batch_size]) for i in range(0, len(yt), batch_size)]


def loss_fn(model: nn.Module, batch: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
    """Mean cross-entropy of a batch."""
    x, y = batch
    return nn.functional.cross_entropy(model(x), y)


@torch.no_grad()
def evaluate(model: nn.Module, batches: list[tuple[torch.Tensor, torch.Tensor]]
             ) -> tuple[float, float, int]:
    """Mean cross-entropy, accuracy and number of examples of ``batches``."""
    loss = correct = n = 0.0
    for x, y in batches:
        logits = model(x)
        loss += float(nn.functional.cross_entropy(logits, y, reduction="sum"))
        correct += float((logits.argmax(dim=1) == y).sum())
        n += len(y)
    return loss / n, correct / n, int(n)
