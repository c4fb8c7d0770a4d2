"""SCALLION's node side as a function for the user's own ``@app.train()``.

Huang, Li, Li, ICLR 2024 (arXiv 2308.08165): single-uplink SCAFFOLD with an unbiased compressor.
``c_i`` lives in ``context.state`` (staged until the server confirms the reply).

For example::

    from bouquet.clients import scallion
    scallion.train(msg, context, MyNet(), loader, loss_fn, lr=0.05, local_steps=10,
                   compressor="randk", compressor_ratio=0.1)
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from flwr.app import Context, Message
from torch import nn

from bouquet.clients.local_training import section_from
from bouquet.clients.scaffold import ScallionClient, public_round
from bouquet.strategies.sections.scaffold import ScallionConfig
from bouquet.tasks.torch_utils import BatchLoss


def train(msg: Message, context: Context, model: nn.Module, batches: Iterable[Any],
          loss_fn: BatchLoss, *, lr: float = 0.05, local_steps: int = 0, local_epochs: int = 1,
          num_examples: int | None = None, seed: int = 0, **options: Any) -> Message:
    """One SCALLION round on the user's model and batches.

    Parameters
    ----------
    msg, context, model, batches, loss_fn, lr, local_steps, local_epochs, num_examples, seed
        As :func:`bouquet.clients.scaffold.train`.
    **options
        The client keys of the ``scallion`` section: ``compressor`` ("randk"),
        ``compressor_ratio`` (0.02), ``compressor_k``, ``compressor_levels``,
        ``compressor_bucket``, ``compressor_chunk``, ``compressor_bits``, ``alpha``
        (0: ``1/(1 + omega)``). They must match the server's.

    Returns
    -------
    Message
        The reply: ``payload`` (``C(delta_i)``) and ``metrics``.

    """
    return public_round(ScallionClient(), section_from(ScallionConfig, options), msg, context,
                        model, batches, loss_fn, lr=lr, local_steps=local_steps,
                        local_epochs=local_epochs, num_examples=num_examples, seed=seed)
