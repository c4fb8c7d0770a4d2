"""bouquet's FedAvg against Flower's own FedAvg with a plain ClientApp (issue 17, target 2).

Both sides train the same model (the catalogue task's), on the same partitions, with the same
local steps, batch size and learning rate, on the same nodes for the same rounds, every node
every round, and the same evaluation (none by default; ``--evaluation central``: the task's test
set on the server after each round):

* **flower**: ``flwr.serverapp.strategy.FedAvg`` and a plain ClientApp
  (benchmarks/flower_plain_app.py, what a Flower quickstart writes);
* **bouquet**: ``method=fedavg`` through bouquet's runner and ClientApp (config resolution,
  reply validation, measured bytes, node-state persistence, results files, checkpoints,
  progress lines, plots).

Engines: ``inprocess`` runs both on the in-process grid (the ClientApps are called in this
process, so nothing but the two code paths differs; repeated, alternating, best of ``--repeat``),
then profiles one bouquet run with cProfile (server and clients, one process) and prints where
bouquet's extra time goes. ``simulation`` runs both through ``flwr run`` in Flower's
simulation engine (Ray), one after the other, and prints the wall times of the whole command and
of the rounds.

    python benchmarks/perf_overhead.py --engine inprocess --nodes 10 --rounds 5
    python benchmarks/perf_overhead.py --engine simulation --nodes 10 --rounds 5
"""

from __future__ import annotations

import argparse
import cProfile
import json
import os
import pstats
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH))

import flower_plain_app  # noqa: E402

from bouquet.apps import simulation  # noqa: E402
from bouquet.apps.local_grid import LocalGrid  # noqa: E402
from bouquet.apps.runner import execute  # noqa: E402

FMNIST = Path("/usr/share/datasets/fashion-mnist")

#: Where bouquet's extra time goes: a category and its (source file, function or None) entries.
CATEGORIES: list[tuple[str, tuple[tuple[str, str | None], ...]]] = [
    ("reply checks (records, metrics, weight, method's validation, norm screen)",
     (("strategies/base.py", "admit_train_reply"), ("wire/validation.py", None),
      ("strategies/admission.py", "screen_norms"),
      ("strategies/admission.py", "cap_undeclared_weights"))),
    ("aggregation, with the rollback snapshot", (("strategies/admission.py", "aggregate_safely"),)),
    ("byte measurement", (("strategies/accounting.py", None),)),
    ("discovery (hello to the sampled nodes)", (("strategies/directory.py", "introduce"),)),
    ("node-state persistence", (("clients/persistence.py", None),
                                ("clients/staged_state.py", None), ("node_state.py", None))),
    ("results files, checkpoints, progress lines", (("apps/recorder.py", "__call__"),
                                                    ("strategies/checkpoint.py", None))),
    ("summary and plots (end of run)", (("apps/recorder.py", "finish"),)),
    ("config resolution and checks", (("apps/config.py", None), ("apps/compat.py", None),
                                      ("apps/resume.py", None))),
]


def common_config(args: argparse.Namespace) -> dict[str, Any]:
    """The settings both sides share."""
    task = "fmnist-cnn" if FMNIST.is_dir() else "digits-mlp"
    return {"task": task, "num-server-rounds": args.rounds, "local-steps": args.local_steps,
            "batch-size": args.batch_size, "lr": 0.05, "seed": 0, "partition": "iid",
            "evaluation": args.evaluation}


def bouquet_config(args: argparse.Namespace, out: Path, name: str) -> dict[str, Any]:
    """bouquet's run config for the same run."""
    return {**common_config(args), "method": "fedavg", "fraction-train": 1.0,
            "results-dir": str(out), "run-name": name}


# --------------------------------------------------------------------------- in process
def inprocess_flower(args: argparse.Namespace) -> float:
    """One plain Flower run on the in-process grid; its wall time."""
    cfg = common_config(args)
    grid = LocalGrid(args.nodes, {"method": "fedavg", **cfg}, client=flower_plain_app.client)
    t0 = time.perf_counter()
    flower_plain_app.run_plain(grid, grid.run_config)
    return time.perf_counter() - t0


def inprocess_bouquet(args: argparse.Namespace, out: Path, name: str) -> float:
    """One bouquet run on the in-process grid; its wall time."""
    grid = LocalGrid(args.nodes, bouquet_config(args, out, name))
    t0 = time.perf_counter()
    execute(grid, grid.run_config)
    return time.perf_counter() - t0


def breakdown(stats: pstats.Stats, total: float) -> list[tuple[str, float]]:
    """Seconds per category: the cumulative time of the outermost calls into its entries."""
    raw: dict[tuple[str, int, str], Any] = stats.stats  # type: ignore[attr-defined]
    out = []
    for label, entries in CATEGORIES:
        def inside(key: tuple[str, int, str],
                   entries: tuple[tuple[str, str | None], ...] = entries) -> bool:
            return any(key[0].endswith(f) and (fn is None or key[2] == fn) for f, fn in entries)

        seconds = 0.0
        for key, (_, _, _, cumtime, callers) in raw.items():
            if inside(key) and not any(inside(c) for c in callers):
                seconds += cumtime  # entered from outside the category: not counted twice
        out.append((label, seconds))
    out.append(("(whole run)", total))
    return out


def run_inprocess(args: argparse.Namespace, out: Path) -> None:
    """Alternate the two sides ``--repeat`` times; profile one bouquet run."""
    inprocess_flower(args)  # warm-up: imports, dataset and model loads of this process
    inprocess_bouquet(args, out, "bq-warm-up")
    flower_s, bouquet_s = [], []
    for i in range(args.repeat):
        flower_s.append(inprocess_flower(args))
        bouquet_s.append(inprocess_bouquet(args, out, f"bq-{i}"))
    f, b = min(flower_s), min(bouquet_s)
    print(f"in-process, {args.nodes} nodes x {args.rounds} rounds, {args.local_steps} local "
          f"steps, task {common_config(args)['task']}, evaluation {args.evaluation}; best of "
          f"{args.repeat}")
    print("| run | wall s (each) | best s |")
    print("|---|---|---|")
    print(f"| flower FedAvg + plain ClientApp | {', '.join(f'{x:.2f}' for x in flower_s)} | "
          f"{f:.2f} |")
    print(f"| bouquet fedavg | {', '.join(f'{x:.2f}' for x in bouquet_s)} | {b:.2f} |")
    print(f"\nratio bouquet / flower: {b / f:.3f}\n")

    prof = cProfile.Profile()
    t0 = time.perf_counter()
    prof.enable()
    inprocess_bouquet(args, out, "bq-profiled")
    prof.disable()
    total = time.perf_counter() - t0
    stats = pstats.Stats(prof)
    print("bouquet's extra costs (cProfile of one run, server and clients in one process; "
          "profiling inflates every figure alike):")
    print("| part | s | share of the run |")
    print("|---|---|---|")
    for label, seconds in breakdown(stats, total):
        print(f"| {label} | {seconds:.3f} | {seconds / total:.1%} |")
    if args.profile_out:
        stats.dump_stats(args.profile_out)


# --------------------------------------------------------------------------- simulation
PLAIN_PYPROJECT = """[build-system]
requires = ["hatchling"]
build-backend = "hatchling.build"

[project]
name = "plainfedavg"
version = "1.0.0"
description = "Flower's FedAvg with a plain ClientApp (bouquet's overhead benchmark)"
license = "Apache-2.0"
dependencies = ["flwr"]

[tool.hatch.build.targets.wheel]
packages = ["."]

[tool.flwr.app]
publisher = "bouquetbench"

[tool.flwr.app.components]
serverapp = "plain_app:server"
clientapp = "plain_app:client"

[tool.flwr.app.config]
{config}
"""


def simulation_flower(args: argparse.Namespace, out: Path) -> dict[str, float]:
    """The plain app through ``flwr run`` (simulation engine); wall times."""
    timing = out / "flower-timing.json"
    cfg = {**common_config(args), "timing-file": str(timing)}
    with simulation.flower_home() as home:
        app = home / "plain"
        app.mkdir()
        shutil.copy(BENCH / "flower_plain_app.py", app / "plain_app.py")
        (app / "pyproject.toml").write_text(PLAIN_PYPROJECT.format(config="\n".join(
            f"{k} = {simulation.toml_value(v)}" for k, v in cfg.items())))
        env = simulation.flower_env(home)
        env["FLWR_LOCAL_SUPERLINK_HTTP_API_PORT"] = str(simulation.free_port())
        env["FLWR_LOCAL_CONTROL_API_PORT"] = str(simulation.free_port())
        cmd = [str(Path(sys.executable).parent / "flwr"), "run", str(app), "--stream",
               "--federation-config", f"num-supernodes={args.nodes} client-resources-num-cpus=1"]
        t0 = time.perf_counter()
        proc = subprocess.run(cmd, cwd=home, env=env, check=False, stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, timeout=1200)
        wall = time.perf_counter() - t0
    if proc.returncode != 0 or not timing.is_file():
        raise RuntimeError(proc.stdout.decode(errors="replace")[-3000:])
    return {"wall_s": wall, **json.loads(timing.read_text())}


def simulation_bouquet(args: argparse.Namespace, out: Path) -> dict[str, float]:
    """bouquet's fedavg through ``flwr run``; wall times."""
    t0 = time.perf_counter()
    summary = simulation.run_simulation(bouquet_config(args, out, "bq-sim"), args.nodes,
                                        stream=False)
    wall = time.perf_counter() - t0
    lines = [json.loads(x) for x in (summary.parent / "metrics.jsonl").read_text().splitlines()]
    data = json.loads(summary.read_text())
    return {"wall_s": wall, "rounds_s": sum(float(x["wall_s"]) for x in lines),
            "accuracy": float(data["final"].get("accuracy", float("nan")))}


def run_simulation_engine(args: argparse.Namespace, out: Path) -> None:
    """Both sides through ``flwr run``, one after the other."""
    f = simulation_flower(args, out)
    b = simulation_bouquet(args, out)
    print(f"flwr run (Ray simulation), {args.nodes} nodes x {args.rounds} rounds, "
          f"{args.local_steps} local steps, task {common_config(args)['task']}, evaluation "
          f"{args.evaluation}")
    print("| run | flwr run wall s | rounds s | final accuracy |")
    print("|---|---|---|---|")
    print(f"| flower FedAvg + plain ClientApp | {f['wall_s']:.1f} | {f['rounds_s']:.1f} | "
          f"{f['accuracy']:.4f} |")
    print(f"| bouquet fedavg | {b['wall_s']:.1f} | {b['rounds_s']:.1f} | {b['accuracy']:.4f} |")
    print(f"\nratio bouquet / flower: whole command {b['wall_s'] / f['wall_s']:.3f}, "
          f"rounds {b['rounds_s'] / f['rounds_s']:.3f}")


def main() -> None:
    """Parse the options; run the chosen engine."""
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--engine", choices=("inprocess", "simulation"), default="inprocess")
    p.add_argument("--nodes", type=int, default=10)
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--local-steps", type=int, default=10)
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--repeat", type=int, default=3, help="in-process runs per side")
    p.add_argument("--evaluation", choices=("none", "central"), default="none",
                   help="central: both evaluate the task's test set after every round (the "
                   "same cost on both sides, which hides the overhead in a 2-core machine)")
    p.add_argument("--profile-out", help="write the cProfile stats of the profiled run here")
    p.add_argument("--out", help="results folder (default: a temporary one)")
    args = p.parse_args()
    out = Path(args.out or tempfile.mkdtemp(prefix="perf-overhead-")).resolve()
    out.mkdir(parents=True, exist_ok=True)
    if args.engine == "inprocess":
        run_inprocess(args, out)
    else:
        run_simulation_engine(args, out)
    print(f"\nresults in {out}; {os.cpu_count()} CPUs, load average "
          f"{os.getloadavg()[0]:.1f} at the end")


if __name__ == "__main__":
    main()
