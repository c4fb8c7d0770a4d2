"""Fed-EF's node side as a function for the user's own ``@app.train()``.

Li & Li, ICML 2023: FedAvg with a compressed uplink and client error feedback. The residual
``e`` lives in ``context.state`` (staged until the server confirms the reply).

For example::

    from bouquet.clients import fed_ef
    fed_ef.train(msg, context, MyNet(), loader, loss_fn, lr=0.05, local_steps=10,
                 compressor="topk", compressor_ratio=0.05)
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from flwr.app import Context, Message
from torch import nn

from bouquet.clients.compressed_fedavg import FedEFClient
from bouquet.clients.local_training import section_from
from bouquet.clients.scaffold import public_round
from bouquet.strategies.sections.compressed_fedavg import FedEFConfig
from bouquet.tasks.torch_utils import BatchLoss


def train(msg: Message, context: Context, model: nn.Module, batches: Iterable[Any],
          loss_fn: BatchLoss, *, lr: float = 0.05, local_steps: int = 0, local_epochs: int = 1,
          num_examples: int | None = None, seed: int = 0, **options: Any) -> Message:
    """One Fed-EF round on the user's model and batches.

    Parameters
    ----------
    msg, context, model, batches, loss_fn, lr, local_steps, local_epochs, num_examples, seed
        As :func:`bouquet.clients.scaffold.train`.
    **options
        The client keys of the ``fed-ef`` section: ``ef_decay`` (1.0), ``compressor`` ("topk"),
        ``compressor_ratio`` (0.02), ``compressor_k``, ``compressor_levels``,
        ``compressor_bucket``, ``compressor_chunk``, ``compressor_bits``.

    Returns
    -------
    Message
        The reply: ``payload`` (``C(x - y + decay e)``) and ``metrics``.

    """
    return public_round(FedEFClient(), section_from(FedEFConfig, options), msg, context, model,
                        batches, loss_fn, lr=lr, local_steps=local_steps,
                        local_epochs=local_epochs, num_examples=num_examples, seed=seed)
