"""quickstart-fedavg: a Flower ServerApp; the bouquet strategy is a one-line swap.

``from flwr.serverapp.strategy import FedAvg`` becomes ``from bouquet.strategies import FedAvg``:
the same arguments, the same ``start()``, plus bouquet's reply validation (a bad reply is dropped
and counted instead of ending the run) and measured bytes in the round metrics.
"""

from flwr.app import ArrayRecord, Context
from flwr.serverapp import Grid, ServerApp

from bouquet.strategies import FedAvg
from quickstart_fedavg.task import initial_model

app = ServerApp()


@app.main()
def main(grid: Grid, context: Context) -> None:
    """Run FedAvg for ``num-server-rounds`` rounds and print the final metrics."""
    strategy = FedAvg(fraction_train=context.run_config["fraction-train"])
    result = strategy.start(grid=grid, initial_arrays=ArrayRecord(initial_model()),
                            num_rounds=context.run_config["num-server-rounds"])
    last = max(result.evaluate_metrics_clientapp)
    print(f"quickstart-fedavg: round {last} "
          f"eval_acc={result.evaluate_metrics_clientapp[last]['eval_acc']:.3f}", flush=True)
