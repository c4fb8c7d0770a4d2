"""ServerApp: bouquet's FedLinUCB strategy run by Flower's own strategy.start().

The one-line swap: ``from flwr.serverapp.strategy import FedAvg`` becomes
``from bouquet.strategies import FedLinUCB``; the keyword arguments are Flower's names plus the
method's own (the same names as the client function's). A bandit run has no model and no
federated evaluation: the regret, a training metric, is what it reports.
"""

from flwr.app import Context
from flwr.serverapp import Grid, ServerApp

from bandits_app.task import DIM
from bouquet.strategies import FedLinUCB

app = ServerApp()


@app.main()
def main(grid: Grid, context: Context) -> None:
    """Run the synchronisations (the state is the shared statistics); print the train metrics."""
    cfg = context.run_config
    rounds = int(cfg["num-server-rounds"])
    strategy = FedLinUCB(fraction_train=1.0, min_train_nodes=2, min_available_nodes=2,
                         context_dim=DIM, num_silos=2, horizon_rounds=rounds,
                         num_server_rounds=rounds, batch_steps=int(cfg["batch-steps"]))
    result = strategy.start(grid=grid, num_rounds=rounds, timeout=60)
    for rnd in (min(result.train_metrics_clientapp), max(result.train_metrics_clientapp)):
        metrics = result.train_metrics_clientapp[rnd]
        print("bandits: round", rnd, " ".join(f"{k}={float(v):.4f}" for k, v in metrics.items()
                                             if isinstance(v, int | float)), flush=True)
