"""Fed-SB (Singhal et al., 2025): B and A frozen (the server's frame), only R trained.

The node side as a function for the user's own ``@app.train()``, on the user's own
PEFT-wrappable model::

    from bouquet.clients import fed_sb

    @app.train()
    def train(msg, context):
        model = AutoModelForSequenceClassification.from_pretrained(MODEL_ID)
        return fed_sb.train(msg, context, model, x_train, y_train,
                            lambda m, x, y: F.cross_entropy(m(input_ids=x).logits, y),
                            target_modules=["q_proj", "v_proj"], head_modules=["score"],
                            rank=4, lr=1e-3, local_steps=10, batch_size=16, seed=0)
"""

from __future__ import annotations

from typing import Any

import torch
from flwr.app import Context, Message

from bouquet.clients.local_training import section_from
from bouquet.clients.lora import FedSBClient, ModelSource, public_round
from bouquet.privacy.dp import LossFn
from bouquet.strategies.sections.lora import FedSBConfig


def train(msg: Message, context: Context, model: ModelSource, x: torch.Tensor, y: torch.Tensor,
          loss_fn: LossFn, *, init: str = "svd", init_samples: int = 32, init_lr: float = 1e-3,
          **options: Any) -> Message:
    """One Fed-SB round on the user's model and rows.

    Parameters
    ----------
    msg, context, model, x, y, loss_fn
        As :func:`bouquet.clients.lora.public_round`.
    init, init_samples, init_lr : str, int, float
        The server's ``fed-sb`` section: round-0 protocol and its samples (the node answers
        the init-gradient phase when the server asks for it).
    **options
        The arguments of :func:`bouquet.clients.lora.public_round` (the LoRA placement, the
        local schedule, ``seed``, optional DP-SGD), which also describes the reply.

    """
    fed_sb = section_from(FedSBConfig, {"init": init, "init_samples": init_samples,
                                        "init_lr": init_lr})
    return public_round(FedSBClient(), msg, context, model, x, y, loss_fn, fed_sb=fed_sb,
                        **options)
