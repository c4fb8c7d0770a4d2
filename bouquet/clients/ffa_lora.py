"""FFA-LoRA (Sun et al., ICLR 2024): A frozen (from the run seed), B trained and sent.

The node side as a function for the user's own ``@app.train()``, on the user's own
PEFT-wrappable model::

    from bouquet.clients import ffa_lora

    @app.train()
    def train(msg, context):
        model = AutoModelForSequenceClassification.from_pretrained(MODEL_ID)
        return ffa_lora.train(msg, context, model, x_train, y_train,
                            lambda m, x, y: F.cross_entropy(m(input_ids=x).logits, y),
                            target_modules=["q_proj", "v_proj"], head_modules=["score"],
                            rank=4, lr=1e-3, local_steps=10, batch_size=16, seed=0)
"""

from __future__ import annotations

from typing import Any

import torch
from flwr.app import Context, Message

from bouquet.clients.lora import FFALoraClient, ModelSource, public_round
from bouquet.privacy.dp import LossFn


def train(msg: Message, context: Context, model: ModelSource, x: torch.Tensor, y: torch.Tensor,
          loss_fn: LossFn, **options: Any) -> Message:
    """One FFA-LoRA round on the user's model and rows.

    The arguments (the LoRA placement, the local schedule, ``seed``, optional DP-SGD) and the
    reply are those of :func:`bouquet.clients.lora.public_round`.
    """
    return public_round(FFALoraClient(), msg, context, model, x, y, loss_fn, **options)
