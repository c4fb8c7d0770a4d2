"""ServerApp: bouquet's FFA-LoRA strategy run by Flower's own strategy.start()."""

from flwr.app import ArrayRecord, Context
from flwr.serverapp import Grid, ServerApp

from bouquet.strategies import FFALoRA
from lora_app.task import pretrained_model

app = ServerApp()


@app.main()
def main(grid: Grid, context: Context) -> None:
    """Run the rounds; the initial arrays are the pretrained weights."""
    cfg = context.run_config
    strategy = FFALoRA(fraction_train=1.0, min_train_nodes=2, rank=int(cfg["rank"]),
                       target_modules="q_proj,v_proj", head_modules="score")
    result = strategy.start(grid=grid,
                            initial_arrays=ArrayRecord(pretrained_model().state_dict()),
                            num_rounds=int(cfg["num-server-rounds"]), timeout=60)
    print(result.train_metrics_clientapp)
