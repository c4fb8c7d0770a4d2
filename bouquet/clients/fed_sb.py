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

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import torch
from flwr.app import Context, Message
from torch import nn

from bouquet.clients.local_training import section_from
from bouquet.clients.lora import FedSBClient, public_round
from bouquet.privacy.dp import ExampleLossFn, LossFn
from bouquet.privacy.dp_config import DPConfig
from bouquet.strategies.lora import FedSBConfig


def train(msg: Message, context: Context, model: nn.Module | Callable[[], nn.Module],
          x: torch.Tensor, y: torch.Tensor, loss_fn: LossFn, *,
          target_modules: str | Sequence[str] = "query,value,q_proj,v_proj",
          head_modules: str | Sequence[str] = "classifier,score", lr: float = 1e-3,
          local_steps: int = 0, local_epochs: int = 1, batch_size: int = 32, seed: int = 0,
          dp: DPConfig | Mapping[str, Any] | None = None,
          example_loss_fn: ExampleLossFn | None = None, num_server_rounds: int = 1,
          init: str = "svd", init_samples: int = 32, init_lr: float = 1e-3,
          **options: Any) -> Message:
    """One Fed-SB round on the user's model and rows.

    Parameters
    ----------
    init, init_samples, init_lr : str, int, float
        The server's ``fed-sb`` section: round-0 protocol and its samples (the node answers
        the init-gradient phase when the server asks for it).
    msg, context : Message, Context
        What Flower passes to ``@app.train()``; the DP accountant (and Fed-SB's frame) live in
        ``context.state``. Node config ``dp-seed`` and ``dp-max-epsilon`` are honoured.
    model : nn.Module or callable
        The user's pretrained transformers (or any torch) model, fresh for this call (LoRA
        layers are injected in place with PEFT), or a zero-argument factory building it.
    x, y : torch.Tensor
        The node's training rows: model inputs (e.g. token ids) and labels.
    loss_fn : callable
        ``loss_fn(model, x, y)`` -> mean loss of a batch.
    target_modules, head_modules : str or sequence of str
        Modules whose 2-D weight gets LoRA (last name component or full name), and modules
        trained in full and sent (the task head); as the server's ``lora`` section.
    lr, local_steps, local_epochs, batch_size : float, int, int, int
        Local schedule (``local_steps`` 0: ``local_epochs`` passes over the rows).
    seed : int
        The run seed (FFA-LoRA's frozen A derives from it: use the server's).
    dp : DPConfig or mapping, optional
        DP-SGD with Opacus (``pip install flwr-bouquet[dp]``): a :class:`DPConfig` or its fields
        (``noise_multiplier``, ``target_epsilon``, ``delta``, ``max_grad_norm``,
        ``max_epsilon``, ``sampling``); needs ``example_loss_fn``.
    example_loss_fn : callable, optional
        ``fn(model, x, y)`` -> one loss per example (DP-SGD bounds each example's gradient).
    num_server_rounds : int
        Rounds the privacy calibration plans for (``dp.target_epsilon`` mode).
    **options
        Further ``lora`` keys: ``rank`` (8), ``alpha`` (0: r), ``optimizer`` ("adamw").

    Returns
    -------
    Message
        ``arrays`` (the trained adapters and head) and ``metrics`` (``num-examples``; with
        DP ``epsilon``, ``delta``, ``noise_multiplier``).

    """
    return public_round(FedSBClient(), msg, context, model, x, y, loss_fn,
                        target_modules=target_modules, head_modules=head_modules, lr=lr,
                        local_steps=local_steps, local_epochs=local_epochs,
                        batch_size=batch_size, seed=seed, dp=dp, example_loss_fn=example_loss_fn,
                        num_server_rounds=num_server_rounds,
                        fed_sb=section_from(FedSBConfig, {"init": init,
                                                          "init_samples": init_samples,
                                                          "init_lr": init_lr}), **options)
