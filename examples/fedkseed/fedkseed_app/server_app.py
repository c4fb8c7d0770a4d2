"""ServerApp: bouquet's FedKSeed strategy run by Flower's own strategy.start()."""

from flwr.app import ArrayRecord, Context
from flwr.serverapp import Grid, ServerApp

from bouquet.strategies import FedKSeed
from fedkseed_app.task import initial_model

app = ServerApp()


@app.main()
def main(grid: Grid, context: Context) -> None:
    """Run the rounds (the server keeps K scalars, no model)."""
    cfg = context.run_config
    strategy = FedKSeed(fraction_train=1.0, min_train_nodes=2, num_seeds=int(cfg["num-seeds"]),
                        local_steps=int(cfg["local-steps"]), lr=float(cfg["lr"]))
    result = strategy.start(grid=grid, initial_arrays=ArrayRecord(initial_model().state_dict()),
                            num_rounds=int(cfg["num-server-rounds"]), timeout=60)
    print(result.train_metrics_clientapp)
