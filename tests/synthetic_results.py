"""Small synthetic results folders (the files a run writes, DESIGN §4) for the plot and report tests.

No training: each run's curves are a seeded, deterministic function of its method, task and seed,
so the plots and pages built from them are reproducible.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any


def write_run(run_dir: Path, *, method: str, task: str, seed: int, rounds: int = 8,
              up_bytes: int = 20_000, extra: dict[str, Any] | None = None,
              sim_time: bool = False) -> Path:
    """One run folder: config.yaml, metrics.jsonl, summary.json."""
    run_dir.mkdir(parents=True, exist_ok=True)
    speed = 0.15 + 0.05 * (sum(map(ord, method)) % 7)
    records = []
    sim = 0.0
    for r in range(1, rounds + 1):
        acc = 0.9 - 0.8 * math.exp(-speed * r) + 0.01 * ((seed * 7 + r) % 3 - 1)
        rec: dict[str, Any] = {"round": r, "accuracy": round(acc, 4), "loss": round(2.3 * (1 - acc), 4),
                               "up_bytes": up_bytes, "down_bytes": 2 * up_bytes, "clients": 5,
                               "rejected": 0, "errors": 0, "missing": 0, "wall_s": 0.5,
                               **(extra or {})}
        if sim_time:
            sim += 10.0 + seed
            rec["sim_time_cum_s"] = sim
        records.append(rec)
    (run_dir / "metrics.jsonl").write_text("".join(json.dumps(x) + "\n" for x in records))
    (run_dir / "config.yaml").write_text(
        f"method: {method}\ntask: {task}\nseed: {seed}\nnum-server-rounds: {rounds}\n"
        f"run-name: {run_dir.name}\nresults-dir: {run_dir.parent}\n")
    accs = [x["accuracy"] for x in records]
    summary = {"method": method, "task": task, "seed": seed, "rounds": rounds,
               "final": {"accuracy": accs[-1], "loss": records[-1]["loss"]},
               "best": {"accuracy": max(accs), "loss": min(x["loss"] for x in records)},
               "comm": {"up_bytes_total": up_bytes * rounds, "down_bytes_total": 2 * up_bytes * rounds,
                        "up_bytes_per_client_round": up_bytes / 5,
                        "down_bytes_per_client_round": 2 * up_bytes / 5},
               "privacy": None, "time": {"wall_s": 0.5 * rounds},
               "failures": {"errors": 0, "rejected": 0, "missing": 0},
               "versions": {"bouquet": "0.1.0", "flwr": "1.42.0", "torch": ""}}
    (run_dir / "summary.json").write_text(json.dumps(summary, indent=2))
    return run_dir


def write_suite(root: Path, methods: Sequence[str] = ("fedavg", "scaffold", "scafcom"),
                seeds: Sequence[int] = (0, 1), tasks: Sequence[str] = ("digits-mlp",)) -> Path:
    """A benchmark-style folder: ``<task>-<method>-s<seed>/`` run folders and a table.md."""
    root.mkdir(parents=True, exist_ok=True)
    for task in tasks:
        for i, method in enumerate(methods):
            for seed in seeds:
                prefix = f"{task}-" if len(tasks) > 1 else ""
                write_run(root / f"{prefix}{method}-s{seed}", method=method, task=task, seed=seed,
                          up_bytes=20_000 // (i + 1))
    (root / "table.md").write_text("# Benchmark `synthetic` (quick)\n\n| run | n |\n|---|---|\n")
    return root
