"""ClientApp: FFA-LoRA's node side on the app's own transformers model."""

from flwr.app import Context, Message
from flwr.clientapp import ClientApp

from bouquet.clients import ffa_lora
from lora_app.task import load_partition, loss_fn, pretrained_model

app = ClientApp()


@app.train()
def train(msg: Message, context: Context) -> Message:
    """One FFA-LoRA round: A frozen (from the seed), B and the head trained and sent."""
    cfg = context.run_config
    x, y = load_partition(int(context.node_config["partition-id"]))
    return ffa_lora.train(msg, context, pretrained_model, x, y, loss_fn,
                          target_modules=["q_proj", "v_proj"], head_modules=["score"],
                          rank=int(cfg["rank"]), lr=float(cfg["lr"]),
                          local_steps=int(cfg["local-steps"]), batch_size=16, seed=0)
