"""ClientApp: SCAFCOM's node side on the app's own model and batches."""

from flwr.app import Context, Message, MetricRecord, RecordDict
from flwr.clientapp import ClientApp

from bouquet.clients import scafcom
from scafcom_app.task import evaluate as evaluate_model
from scafcom_app.task import initial_model, load_partition, loss_fn

app = ClientApp()


@app.train()
def train(msg: Message, context: Context) -> Message:
    """One SCAFCOM round; c_i and v_i live in context.state."""
    cfg = context.run_config
    batches = load_partition(int(context.node_config["partition-id"]),
                             int(context.node_config["num-partitions"]))
    return scafcom.train(msg, context, initial_model(), batches, loss_fn,
                         lr=float(cfg["lr"]), local_steps=int(cfg["local-steps"]),
                         beta=float(cfg["beta"]), compressor="topk",
                         compressor_ratio=float(cfg["compressor-ratio"]))


@app.evaluate()
def evaluate(msg: Message, context: Context) -> Message:
    """Evaluate the received global model on this node's test share."""
    model = initial_model()
    model.load_state_dict(msg.content["arrays"].to_torch_state_dict())
    loss, acc, n = evaluate_model(model, load_partition(int(context.node_config["partition-id"]),
                                                        int(context.node_config["num-partitions"]),
                                                        split="test"))
    metrics = MetricRecord({"eval_loss": loss, "eval_acc": acc, "num-examples": n})
    return Message(content=RecordDict({"metrics": metrics}), reply_to=msg)
