"""Node side of FedAvg with a compressed uplink and of Fed-EF (error feedback).

See :mod:`bouquet.strategies.compressed_fedavg`. The client sends ``C(x - y)``; Fed-EF adds its
residual first and keeps the new one (staged until the server confirms the reply, see
:mod:`bouquet.clients.staged_state`).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import numpy as np
from flwr.app import Context, Message
from torch import nn

from bouquet.clients.local_training import section_from
from bouquet.clients.scaffold import LocalRound, VectorClient, public_round
from bouquet.compression import Compressor, ErrorFeedback
from bouquet.strategies.sections.compressed_fedavg import FedAvgCompressedConfig
from bouquet.tasks.torch_utils import BatchLoss


class FedAvgCompressedClient(VectorClient):
    """Send the compressed pseudo-gradient ``C(x - y)``; no client state."""

    prefix = "fedavg-compressed"

    def uplink(self, run: LocalRound, state: dict[str, np.ndarray], c: np.ndarray | None,
               section: Any, comp: Compressor, rng: np.random.Generator
               ) -> tuple[dict[str, dict[str, np.ndarray]], dict[str, np.ndarray]]:
        """Compress the model change."""
        return {"payload": comp.compress((run.x - run.y).astype(np.float32), rng)}, {}


class FedEFClient(VectorClient):
    """Fed-EF: ``p = x - y + decay e``, send ``C(p)``, keep ``e <- p - C(p)``."""

    prefix = "fed-ef"

    def uplink(self, run: LocalRound, state: dict[str, np.ndarray], c: np.ndarray | None,
               section: Any, comp: Compressor, rng: np.random.Generator
               ) -> tuple[dict[str, dict[str, np.ndarray]], dict[str, np.ndarray]]:
        """Error-feedback step with the residual from the node's state."""
        ef = ErrorFeedback(comp, decay=section.ef_decay)
        update = (run.x - run.y).astype(np.float32)
        residual = state.get("e", ef.init(update.shape))
        payload, _, residual = ef.step(update, residual, rng)
        return {"payload": payload}, {"e": residual}


def train(msg: Message, context: Context, model: nn.Module, batches: Iterable[Any],
          loss_fn: BatchLoss, *, lr: float = 0.05, local_steps: int = 0, local_epochs: int = 1,
          num_examples: int | None = None, seed: int = 0, **options: Any) -> Message:
    """One round of FedAvg with a compressed uplink (``fedavg-compressed``), no client state.

    Parameters
    ----------
    msg, context, model, batches, loss_fn, lr, local_steps, local_epochs, num_examples, seed
        As :func:`bouquet.clients.scaffold.train`.
    **options
        The client keys of the ``fedavg-compressed`` section: ``compressor`` ("topk"),
        ``compressor_ratio`` (0.02), ``compressor_k``, ``compressor_levels``,
        ``compressor_bucket``, ``compressor_chunk``, ``compressor_bits``.

    Returns
    -------
    Message
        The reply: ``payload`` (``C(x - y)``) and ``metrics``.

    """
    return public_round(FedAvgCompressedClient(), section_from(FedAvgCompressedConfig, options),
                        msg, context, model, batches, loss_fn, lr=lr, local_steps=local_steps,
                        local_epochs=local_epochs, num_examples=num_examples, seed=seed)
