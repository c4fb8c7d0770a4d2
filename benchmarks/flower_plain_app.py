"""Flower's own FedAvg with a plain ClientApp: the baseline of benchmarks/perf_overhead.py.

What a Flower user writes from the quickstart: ``flwr.serverapp.strategy.FedAvg`` and a
``ClientApp`` whose ``@app.train()`` loads the arrays into the model, runs ``local-steps`` of SGD
on its partition and replies ``arrays`` and ``metrics`` with ``num-examples``. The model, the
partition, the batches and the central evaluation are bouquet's catalogue task's (the same on
both sides of the comparison); nothing else of bouquet runs. Run config keys: ``task``,
``num-server-rounds``, ``local-steps``, ``batch-size``, ``lr``, ``seed``, ``partition``,
``evaluation`` (``central``: the task's test set after every round), ``timing-file`` (where the
ServerApp writes its wall times, JSON).
"""

from __future__ import annotations

import json
import time
from functools import lru_cache
from pathlib import Path
from typing import Any

import torch
from flwr.app import ArrayRecord, Context, Message, MetricRecord, RecordDict
from flwr.clientapp import ClientApp
from flwr.serverapp import Grid, ServerApp
from flwr.serverapp.strategy import FedAvg

from bouquet.apps.config import resolve
from bouquet.apps.registry import get_task

client = ClientApp()
server = ServerApp()


def _setup(run_config: dict[str, Any]) -> tuple[Any, Any]:
    """The catalogue task and the common settings of the plain run (loaded once per process,
    as a Flower user keeps a dataset in a module-level cache)."""
    return _loaded(str(run_config["task"]), int(run_config["local-steps"]),
                   int(run_config["batch-size"]), float(run_config["lr"]),
                   int(run_config["seed"]), str(run_config["partition"]))


@lru_cache(maxsize=4)
def _loaded(task: str, local_steps: int, batch_size: int, lr: float, seed: int,
            partition: str) -> tuple[Any, Any]:
    cfg = resolve({"method": "fedavg", "task": task, "local-steps": local_steps,
                   "batch-size": batch_size, "lr": lr, "seed": seed, "partition": partition})
    return get_task(cfg.task_name).load(), cfg.common


@client.train()
def train(msg: Message, context: Context) -> Message:
    """Local SGD from the global model; reply the model and ``num-examples``."""
    task, common = _setup(dict(context.run_config))
    pid = int(context.node_config["partition-id"])  # type: ignore[arg-type]
    n = int(context.node_config["num-partitions"])  # type: ignore[arg-type]
    local = task.partition(pid, n, common)
    model = task.build_model()
    model.load_state_dict(msg.content["arrays"].to_torch_state_dict())
    opt = torch.optim.SGD(model.parameters(), lr=common.lr)
    gen = torch.Generator().manual_seed(common.seed * 1_000_003 + pid)
    batches = task.batches(local, common.batch_size, gen)
    model.train()
    total = 0.0
    for _ in range(common.local_steps):
        x, y = next(batches)
        opt.zero_grad()
        loss = task.loss(model, x, y)
        loss.backward()
        opt.step()
        total += float(loss)
    metrics = MetricRecord({"train_loss": total / common.local_steps,
                            "num-examples": int(local.num_train)})
    return Message(RecordDict({"arrays": ArrayRecord(model.state_dict()), "metrics": metrics}),
                   reply_to=msg)


def run_plain(grid: Grid, run_config: dict[str, Any]) -> dict[str, float]:
    """Flower's FedAvg: every node trains every round; central evaluation after each round.

    Returns ``rounds_s`` (``strategy.start``), ``server_s`` (with the set-up) and the final
    ``accuracy``.
    """
    started = time.monotonic()
    task, common = _setup(run_config)
    torch.manual_seed(common.seed)
    initial = ArrayRecord(task.build_model().state_dict())
    nodes = len(list(grid.get_node_ids()))

    def evaluate(rnd: int, arrays: ArrayRecord) -> MetricRecord | None:
        if rnd == 0:
            return None
        return MetricRecord(dict(task.evaluate(
            {k: v.numpy() for k, v in arrays.to_torch_state_dict().items()})))

    central = run_config.get("evaluation") == "central"
    strategy = FedAvg(fraction_train=1.0, fraction_evaluate=0.0, min_train_nodes=nodes,
                      min_available_nodes=nodes)
    t0 = time.monotonic()
    result = strategy.start(grid=grid, initial_arrays=initial,
                            num_rounds=int(run_config["num-server-rounds"]), timeout=600,
                            evaluate_fn=evaluate if central else None)
    rounds_s = time.monotonic() - t0
    evaluated = result.evaluate_metrics_serverapp
    accuracy = float(evaluated[max(evaluated)]["accuracy"]) if evaluated else float("nan")  # type: ignore[arg-type]
    return {"rounds_s": rounds_s, "server_s": time.monotonic() - started, "accuracy": accuracy}


@server.main()
def main(grid: Grid, context: Context) -> None:
    """:func:`run_plain`, its times written to the run config's ``timing-file``."""
    run_config = dict(context.run_config)
    timing = run_plain(grid, run_config)
    Path(str(run_config["timing-file"])).write_text(json.dumps(timing))
