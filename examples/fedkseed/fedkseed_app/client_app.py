"""ClientApp: FedKSeed's node side, forward passes only."""

import torch
from flwr.app import Context, Message
from flwr.clientapp import ClientApp
from torch import nn

from bouquet.clients import fedkseed
from fedkseed_app.task import initial_model, load_partition, loss_fn

app = ClientApp()


def forward_loss(model: nn.Module, batch: tuple[torch.Tensor, torch.Tensor]) -> float:
    """The loss of a batch, no gradients."""
    return float(loss_fn(model, batch))


@app.train()
def train(msg: Message, context: Context) -> Message:
    """One FedKSeed round from the rebuilt global model (w0 = initial_model())."""
    cfg = context.run_config
    batches = load_partition(int(context.node_config["partition-id"]),
                             int(context.node_config["num-partitions"]))
    return fedkseed.train(msg, context, initial_model, batches, forward_loss,
                          model_key="digits-mlp-seed0", num_seeds=int(cfg["num-seeds"]),
                          local_steps=int(cfg["local-steps"]), lr=float(cfg["lr"]))
