"""ClientApp: FedKSeed's node side, forward passes only."""

import torch
from flwr.app import Context, Message, MetricRecord, RecordDict
from flwr.clientapp import ClientApp
from torch import nn

from bouquet.clients import fedkseed
from fedkseed_app.task import evaluate as evaluate_model
from fedkseed_app.task import initial_model, load_partition, loss_fn

app = ClientApp()
#: Names the initial model the global one is rebuilt from (the process caches the replica).
MODEL_KEY = "digits-mlp-seed0"


def forward_loss(model: nn.Module, batch: tuple[torch.Tensor, torch.Tensor]) -> float:
    """The loss of a batch, no gradients."""
    return float(loss_fn(model, batch))


def options(context: Context) -> dict[str, float | int]:
    """FedKSeed's client options (the same values the ServerApp gives the strategy)."""
    cfg = context.run_config
    return {"num_seeds": int(cfg["num-seeds"]), "local_steps": int(cfg["local-steps"]),
            "lr": float(cfg["lr"])}


@app.train()
def train(msg: Message, context: Context) -> Message:
    """One FedKSeed round from the rebuilt global model (w0 = initial_model())."""
    batches = load_partition(int(context.node_config["partition-id"]),
                             int(context.node_config["num-partitions"]))
    return fedkseed.train(msg, context, initial_model, batches, forward_loss,
                          model_key=MODEL_KEY, **options(context))


@app.evaluate()
def evaluate(msg: Message, context: Context) -> Message:
    """Rebuild the global model from the K scalars and evaluate it on this node's test share."""
    model = fedkseed.global_model(msg, initial_model, model_key=MODEL_KEY, **options(context))
    loss, acc, n = evaluate_model(model, load_partition(int(context.node_config["partition-id"]),
                                                        int(context.node_config["num-partitions"]),
                                                        split="test"))
    metrics = MetricRecord({"eval_loss": loss, "eval_acc": acc, "num-examples": n})
    return Message(content=RecordDict({"metrics": metrics}), reply_to=msg)
