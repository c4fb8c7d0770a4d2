"""ServerApp: bouquet's FedLinUCB strategy run by Flower's own strategy.start()."""

from flwr.app import Context
from flwr.serverapp import Grid, ServerApp

from bandits_app.task import DIM
from bouquet.strategies import FedLinUCB

app = ServerApp()


@app.main()
def main(grid: Grid, context: Context) -> None:
    """Run the synchronisations (no model: the state is the shared statistics)."""
    cfg = context.run_config
    rounds = int(cfg["num-server-rounds"])
    strategy = FedLinUCB(fraction_train=1.0, min_train_nodes=2, context_dim=DIM, num_silos=2,
                         horizon_rounds=rounds, batch_steps=int(cfg["batch-steps"]))
    result = strategy.start(grid=grid, num_rounds=rounds, timeout=60)
    print(result.train_metrics_clientapp)
