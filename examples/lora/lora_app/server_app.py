"""ServerApp: bouquet's FFA-LoRA strategy run by Flower's own strategy.start().

The one-line swap: ``from flwr.serverapp.strategy import FedAvg`` becomes
``from bouquet.strategies import FFALoRA``; the keyword arguments are Flower's names plus the
method's own (the same names as the client function's). This app has no ``@app.evaluate()``,
so federated evaluation is off (``fraction_evaluate=0``) and the training metrics are printed.
"""

from flwr.app import ArrayRecord, Context
from flwr.serverapp import Grid, ServerApp

from bouquet.strategies import FFALoRA
from lora_app.task import pretrained_model

app = ServerApp()


@app.main()
def main(grid: Grid, context: Context) -> None:
    """Run the rounds (the initial arrays are the pretrained weights); print the train metrics."""
    cfg = context.run_config
    strategy = FFALoRA(fraction_train=1.0, min_train_nodes=2, min_available_nodes=2,
                       fraction_evaluate=0.0, rank=int(cfg["rank"]), lr=float(cfg["lr"]),
                       local_steps=int(cfg["local-steps"]), batch_size=16,
                       target_modules="q_proj,v_proj", head_modules="score")
    result = strategy.start(grid=grid,
                            initial_arrays=ArrayRecord(pretrained_model().state_dict()),
                            num_rounds=int(cfg["num-server-rounds"]), timeout=60)
    for rnd in (min(result.train_metrics_clientapp), max(result.train_metrics_clientapp)):
        metrics = result.train_metrics_clientapp[rnd]
        print(f"lora: round {rnd} train_loss={metrics['train_loss']:.4f}", flush=True)
