"""ServerApp: bouquet's Scafcom strategy run by Flower's own strategy.start().

The one-line swap: ``from flwr.serverapp.strategy import FedAvg`` becomes
``from bouquet.strategies import Scafcom``; the keyword arguments are Flower's names plus the
method's own (the same names as the client function's).
"""

from flwr.app import ArrayRecord, Context
from flwr.serverapp import Grid, ServerApp

from bouquet.strategies import Scafcom
from scafcom_app.task import initial_model

app = ServerApp()


@app.main()
def main(grid: Grid, context: Context) -> None:
    """Run the rounds; print the evaluation of the first and the last round."""
    cfg = context.run_config
    strategy = Scafcom(fraction_train=1.0, min_train_nodes=2, min_available_nodes=2,
                       local_steps=int(cfg["local-steps"]), lr=float(cfg["lr"]),
                       beta=float(cfg["beta"]), compressor="topk",
                       compressor_ratio=float(cfg["compressor-ratio"]))
    result = strategy.start(grid=grid, initial_arrays=ArrayRecord(initial_model().state_dict()),
                            num_rounds=int(cfg["num-server-rounds"]), timeout=60)
    for rnd in (min(result.evaluate_metrics_clientapp), max(result.evaluate_metrics_clientapp)):
        metrics = result.evaluate_metrics_clientapp[rnd]
        print(f"scafcom: round {rnd} eval_loss={metrics['eval_loss']:.4f} "
              f"eval_acc={metrics['eval_acc']:.4f}", flush=True)
