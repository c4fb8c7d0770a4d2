"""ServerApp: bouquet's SCAFCOM strategy run by Flower's own strategy.start()."""

from flwr.app import ArrayRecord, Context
from flwr.serverapp import Grid, ServerApp

from bouquet.strategies import Scafcom
from scafcom_app.task import initial_model

app = ServerApp()


@app.main()
def main(grid: Grid, context: Context) -> None:
    """Run the rounds; the same keyword names as the client's."""
    cfg = context.run_config
    strategy = Scafcom(fraction_train=1.0, min_train_nodes=2, beta=float(cfg["beta"]),
                       compressor="topk", compressor_ratio=float(cfg["compressor-ratio"]))
    result = strategy.start(grid=grid, initial_arrays=ArrayRecord(initial_model().state_dict()),
                            num_rounds=int(cfg["num-server-rounds"]), timeout=60)
    print(result.train_metrics_clientapp)
