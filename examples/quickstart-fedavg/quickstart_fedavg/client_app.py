"""quickstart-fedavg: a Flower ClientApp, written as Flower's quickstarts are (no bouquet import)."""

from flwr.app import ArrayRecord, Context, Message, MetricRecord, RecordDict
from flwr.clientapp import ClientApp

from quickstart_fedavg.task import evaluate as evaluate_model
from quickstart_fedavg.task import load_data
from quickstart_fedavg.task import train as train_model

app = ClientApp()


@app.train()
def train(msg: Message, context: Context) -> Message:
    """Train the received model on local data."""
    model = msg.content["arrays"].to_numpy_ndarrays()
    x, y, _, _ = load_data(context.node_config["partition-id"],
                           context.node_config["num-partitions"])
    loss = train_model(model, x, y, epochs=context.run_config["local-epochs"],
                       lr=context.run_config["lr"])
    metrics = MetricRecord({"train_loss": loss, "num-examples": len(y)})
    content = RecordDict({"arrays": ArrayRecord(model), "metrics": metrics})
    return Message(content=content, reply_to=msg)


@app.evaluate()
def evaluate(msg: Message, context: Context) -> Message:
    """Evaluate the received model on local test data."""
    model = msg.content["arrays"].to_numpy_ndarrays()
    _, _, x, y = load_data(context.node_config["partition-id"],
                           context.node_config["num-partitions"])
    loss, acc = evaluate_model(model, x, y)
    metrics = MetricRecord({"eval_loss": loss, "eval_acc": acc, "num-examples": len(y)})
    return Message(content=RecordDict({"metrics": metrics}), reply_to=msg)
