"""SCAFCOM's node side as a function for the user's own ``@app.train()``.

Huang, Li, Li, ICLR 2024 (arXiv 2308.08165): single-uplink SCAFFOLD with a biased compressor and
a local momentum ``v_i``. ``c_i`` and ``v_i`` live in ``context.state`` (staged until the server
confirms the reply, :mod:`bouquet.clients.staged_state`).

For example::

    from bouquet.clients import scafcom

    @app.train()
    def train(msg, context):
        return scafcom.train(msg, context, MyNet(), loader,
                             lambda m, b: F.cross_entropy(m(b[0]), b[1]),
                             lr=0.05, local_steps=10, beta=0.2, compressor="topk")
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from flwr.app import Context, Message
from torch import nn

from bouquet.clients.local_training import section_from
from bouquet.clients.scaffold import ScafcomClient, public_round
from bouquet.strategies.sections.scaffold import ScafcomConfig
from bouquet.tasks.torch_utils import BatchLoss


def train(msg: Message, context: Context, model: nn.Module, batches: Iterable[Any],
          loss_fn: BatchLoss, *, lr: float = 0.05, local_steps: int = 0, local_epochs: int = 1,
          num_examples: int | None = None, seed: int = 0, **options: Any) -> Message:
    """One SCAFCOM round on the user's model and batches.

    Parameters
    ----------
    msg, context, model, batches, loss_fn, lr, local_steps, local_epochs, num_examples, seed
        As :func:`bouquet.clients.scaffold.train`.
    **options
        The client keys of the ``scafcom`` config section, named as its fields:
        ``beta`` (0.2), ``alpha`` (0: automatic), ``momentum_init`` ("first"),
        ``momentum_placement`` ("round"), ``compressor`` ("topk"), ``compressor_ratio`` (0.02),
        ``compressor_k``, ``compressor_levels``, ``compressor_bucket``, ``compressor_chunk``,
        ``compressor_bits``. They must match the server's (its validation rejects a reply
        compressed otherwise).

    Returns
    -------
    Message
        The reply: ``payload`` (``C(v_i - c_i)``) and ``metrics`` (``num-examples``,
        ``local-steps``, ``train_loss``).

    """
    return public_round(ScafcomClient(), section_from(ScafcomConfig, options), msg, context,
                        model, batches, loss_fn, lr=lr, local_steps=local_steps,
                        local_epochs=local_epochs, num_examples=num_examples, seed=seed)
