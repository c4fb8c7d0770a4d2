"""The user's own model and data: softmax regression in numpy on scikit-learn's digits (offline)."""

from __future__ import annotations

import numpy as np
from sklearn.datasets import load_digits

NUM_CLASSES = 10
NUM_FEATURES = 64


def initial_model() -> list[np.ndarray]:
    """Weights and bias of a softmax regression, zero-initialised."""
    return [np.zeros((NUM_FEATURES, NUM_CLASSES), np.float32), np.zeros(NUM_CLASSES, np.float32)]


def load_data(partition_id: int, num_partitions: int) -> tuple[np.ndarray, ...]:
    """The node's shard of the digits (train and test split), features scaled to [0, 1]."""
    x, y = load_digits(return_X_y=True)
    x = (x / 16.0).astype(np.float32)
    order = np.random.default_rng(0).permutation(len(y))
    shard = np.array_split(order, num_partitions)[partition_id]
    cut = int(0.8 * len(shard))
    return x[shard[:cut]], y[shard[:cut]], x[shard[cut:]], y[shard[cut:]]


def _probabilities(model: list[np.ndarray], x: np.ndarray) -> np.ndarray:
    logits = x @ model[0] + model[1]
    logits -= logits.max(axis=1, keepdims=True)
    p = np.exp(logits)
    return p / p.sum(axis=1, keepdims=True)  # type: ignore[no-any-return]


def evaluate(model: list[np.ndarray], x: np.ndarray, y: np.ndarray) -> tuple[float, float]:
    """Cross-entropy loss and accuracy."""
    p = _probabilities(model, x)
    loss = float(-np.mean(np.log(p[np.arange(len(y)), y] + 1e-12)))
    return loss, float(np.mean(p.argmax(axis=1) == y))


def train(model: list[np.ndarray], x: np.ndarray, y: np.ndarray, epochs: int, lr: float,
          batch_size: int = 32) -> float:
    """Mini-batch gradient descent in place; returns the last epoch's training loss."""
    rng = np.random.default_rng(len(y))
    onehot = np.eye(NUM_CLASSES, dtype=np.float32)[y]
    for _ in range(epochs):
        for idx in np.array_split(rng.permutation(len(y)), max(1, len(y) // batch_size)):
            grad = (_probabilities(model, x[idx]) - onehot[idx]) / len(idx)
            model[0] -= lr * (x[idx].T @ grad).astype(np.float32)
            model[1] -= lr * grad.sum(axis=0).astype(np.float32)
    return evaluate(model, x, y)[0]
