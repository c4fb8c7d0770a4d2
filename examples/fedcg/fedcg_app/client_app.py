"""ClientApp: FedCG's node side (top-k at the ratio the server sends)."""

from flwr.app import Context, Message, MetricRecord, RecordDict
from flwr.clientapp import ClientApp

from bouquet.clients import fedcg
from fedcg_app.task import evaluate as evaluate_model
from fedcg_app.task import initial_model, load_partition, loss_fn

app = ClientApp()


@app.train()
def train(msg: Message, context: Context) -> Message:
    """One FedCG round; the error-feedback residual lives in context.state."""
    cfg = context.run_config
    batches = load_partition(int(context.node_config["partition-id"]),
                             int(context.node_config["num-partitions"]))
    return fedcg.train(msg, context, initial_model(), batches, loss_fn, lr=float(cfg["lr"]),
                       local_steps=int(cfg["local-steps"]), error_feedback=True)


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
