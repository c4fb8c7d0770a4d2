"""ClientApp: a federated LinUCB silo on the app's own users."""

from flwr.app import Context, Message
from flwr.clientapp import ClientApp

from bandits_app.task import DIM, Silo
from bouquet.clients import linucb

app = ClientApp()


@app.train()
def train(msg: Message, context: Context) -> Message:
    """One synchronisation: batch-steps users served, then the silo's statistics released."""
    cfg = context.run_config
    return linucb.train(msg, context, Silo(int(context.node_config["partition-id"])),
                        context_dim=DIM, variant="none",
                        num_silos=int(context.node_config["num-partitions"]),
                        horizon_rounds=int(cfg["num-server-rounds"]),
                        batch_steps=int(cfg["batch-steps"]))
