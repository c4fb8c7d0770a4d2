"""Benchmark suite ``fedkseed``: bytes vs model size, learning at equal rounds, cost of a step.

1. **Bytes per round vs model size.** One client, one round, K=4096 seeds, 200 steps (batch 1, as
   in the paper), evaluation off, so ``summary.json``'s per-client traffic is exactly the training
   exchange as Flower serializes it. Tasks of growing size: digits-mlp (4.8k parameters),
   tiny-bert-cls, rt-minilm (22.7M) and, in the full suite, gsm-smollm (135M). The same tasks with
   a full-model method (FedIT when registered, FedAvg always) show traffic that grows with the model.
   Payload (4 B per seed down, +4 B for Pro; 8 B per pair up) and framing are reported separately.
2. **Learning at equal rounds.** digits-mlp (10 clients, ZO from a random init), rt-minilm (small)
   and, in the full suite, gsm-smollm (tiny): FedKSeed vs FedKSeed-Pro vs a first-order baseline
   (FedIT if registered, else FedAvg); accuracy and cumulative bytes.
3. **Cost of a step.** Measured in separate processes (``python benchmarks/fedkseed.py --probe
   TASK MODE BATCH``): one zeroth-order step vs two forward passes on the same batch, and the peak
   resident memory of inference, of ZO steps and of backprop + Adam over the model-loaded baseline.

Run: ``python -c "from bouquet.apps.bench import run_suite; from pathlib import Path;
run_suite('fedkseed', Path('/tmp/bench-fedkseed'), quick=True)"``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from bouquet.apps.bench import BenchRun, lookup
from bouquet.apps.registry import methods

K, STEPS = 4096, 200
TARGET_BYTES = 18_432
COLUMNS = ["final.accuracy", "best.accuracy", "final.exact_match", "comm.up_bytes_total",
           "comm.down_bytes_total", "comm.up_bytes_per_client_round",
           "comm.down_bytes_per_client_round", "time.wall_s"]
PLOT_METRICS = ["accuracy", "exact_match"]

#: Zeroth-order settings per task (learning part): lr, eps, batch size.
ZO = {
    "digits-mlp": {"fedkseed.lr": 1e-2, "fedkseed.eps": 1e-3, "batch-size": 32},
    "rt-minilm": {"fedkseed.lr": 3e-4, "fedkseed.eps": 1e-3, "batch-size": 16},
    "gsm-smollm": {"fedkseed.lr": 1e-6, "fedkseed.eps": 1e-3, "batch-size": 1},
}


def baseline() -> str:
    """The first-order comparison: FedIT when the LoRA family is registered, else FedAvg."""
    return "fedit" if "fedit" in methods() else "fedavg"


def _bytes_runs(quick: bool) -> list[BenchRun]:
    tasks = ["digits-mlp", "tiny-bert-cls", "rt-minilm"] + ([] if quick else ["gsm-smollm"])
    common = {"num-server-rounds": 1, "evaluation": "none", "seed": 0}
    zo = {"fedkseed.num-seeds": K, "fedkseed.local-steps": STEPS, "batch-size": 1,
          "fedkseed.lr": 1e-6, "fedkseed.eps": 1e-3}
    runs = []
    for task in tasks:
        runs.append(BenchRun(f"bytes-fedkseed-{task}",
                             {**common, **zo, "method": "fedkseed", "task": task}, clients=1))
        if task == "digits-mlp" or not quick:
            runs.append(BenchRun(f"bytes-fedkseed-pro-{task}",
                                 {**common, **zo, "method": "fedkseed-pro", "task": task},
                                 clients=1))
        full_model = ["fedavg"] + ([baseline()] if baseline() != "fedavg"
                                   and task != "digits-mlp" else [])
        for m in full_model:
            runs.append(BenchRun(f"bytes-{m}-{task}",
                                 {**common, "method": m, "task": task, "local-steps": 1,
                                  "batch-size": 4, "lr": 1e-3}, clients=1))
    return runs


def _learning_runs(quick: bool) -> list[BenchRun]:
    base = baseline()
    runs: list[BenchRun] = []
    # digits-mlp: zeroth-order from a random init, 10 clients, half of them per round
    rounds, steps = (10, 100) if quick else (30, 200)
    common = {"task": "digits-mlp", "num-server-rounds": rounds, "fraction-train": 0.5,
              "partition": "dirichlet", "dirichlet-alpha": 0.5, "seed": 0}
    for m in ("fedkseed", "fedkseed-pro"):
        runs.append(BenchRun(f"learn-digits-mlp-{m}",
                             {**common, **ZO["digits-mlp"], "method": m,
                              "fedkseed.num-seeds": 1024, "fedkseed.local-steps": steps},
                             clients=10))
    runs.append(BenchRun("learn-digits-mlp-fedavg",
                         {**common, "method": "fedavg", "local-epochs": 1, "lr": 0.1},
                         clients=10))
    # rt-minilm: full-parameter ZO on a pretrained body with a new head (small on CPU)
    rounds, steps = (3, 25) if quick else (8, 100)
    common = {"task": "rt-minilm", "num-server-rounds": rounds, "fraction-train": 0.5,
              "partition": "dirichlet", "dirichlet-alpha": 0.5, "seed": 0}
    for m in ("fedkseed", "fedkseed-pro"):
        runs.append(BenchRun(f"learn-rt-minilm-{m}",
                             {**common, **ZO["rt-minilm"], "method": m,
                              "fedkseed.num-seeds": K, "fedkseed.local-steps": steps},
                             clients=4))
    runs.append(BenchRun(f"learn-rt-minilm-{base}",
                         {**common, "method": base, "local-steps": steps, "batch-size": 16,
                          "lr": 1e-3 if base == "fedit" else 1e-2}, clients=4))
    if not quick:
        common = {"task": "gsm-smollm", "num-server-rounds": 2, "seed": 0}
        for m in ("fedkseed", "fedkseed-pro"):
            runs.append(BenchRun(f"learn-gsm-smollm-{m}",
                                 {**common, **ZO["gsm-smollm"], "method": m,
                                  "fedkseed.num-seeds": K, "fedkseed.local-steps": 10},
                                 clients=2))
    return runs


def runs(quick: bool) -> list[BenchRun]:
    """Every configuration of the suite (the quick variant fits in minutes on 2 cores)."""
    return _bytes_runs(quick) + _learning_runs(quick)


# ------------------------------------------------------------------------------ report
def _payload(run: str) -> tuple[int, int] | None:
    """Payload bytes (down, up) per client and round of a bytes run (ZO methods only)."""
    if run.startswith("bytes-fedkseed-pro-"):
        return 8 * K, 8 * STEPS
    if run.startswith("bytes-fedkseed-"):
        return 4 * K, 8 * STEPS
    return None


def _bytes_table(summaries: Mapping[str, Mapping[str, Any]]) -> list[str]:
    lines = ["### 1. Bytes per client and round vs model size", "",
             f"K={K} seeds, {STEPS} steps, one client, one round, evaluation off: the traffic is "
             "the training exchange exactly as Flower serializes it (framing = measured - payload).",
             "", "| run | params | down B | up B | total B | payload B | framing B | "
             f"< {TARGET_BYTES} B |", "|---|---|---|---|---|---|---|---|"]
    params = _param_counts(summaries)
    for run, s in summaries.items():
        if not run.startswith("bytes-"):
            continue
        down = lookup(s, "comm.down_bytes_per_client_round") or 0.0
        up = lookup(s, "comm.up_bytes_per_client_round") or 0.0
        total = down + up
        pay = _payload(run)
        if pay is None:
            cells = ["—", "—"]
        else:
            cells = [f"{sum(pay):,}", f"{total - sum(pay):,.0f}"]
        ok = "yes" if total < TARGET_BYTES else "no"
        lines.append(f"| {run} | {params.get(str(s.get('task')), '?')} | {down:,.0f} | {up:,.0f} | "
                     f"{total:,.0f} | {cells[0]} | {cells[1]} | {ok} |")
    return lines


def _param_counts(summaries: Mapping[str, Mapping[str, Any]]) -> dict[str, str]:
    """Parameter count per task, from the FedAvg bytes runs (4 B per fp32 value)."""
    out = {}
    for run, s in summaries.items():
        if run.startswith("bytes-fedavg-"):
            up = lookup(s, "comm.up_bytes_per_client_round") or 0.0
            out[str(s.get("task"))] = f"~{up / 4 / 1e6:.3g}M"
    return out


def _learning_table(summaries: Mapping[str, Mapping[str, Any]]) -> list[str]:
    lines = ["### 2. Learning at equal rounds", "",
             "| run | rounds | final accuracy / exact match | best | cumulative up+down B | "
             "wall s |", "|---|---|---|---|---|---|"]
    for run, s in summaries.items():
        if not run.startswith("learn-"):
            continue
        metric = "exact_match" if "gsm" in run else "accuracy"
        final, best = lookup(s, f"final.{metric}"), lookup(s, f"best.{metric}")
        total = (lookup(s, "comm.up_bytes_total") or 0) + (lookup(s, "comm.down_bytes_total") or 0)
        lines.append(f"| {run} | {s.get('rounds')} | {_f(final)} | {_f(best)} | {total:,} | "
                     f"{_f(lookup(s, 'time.wall_s'))} |")
    lines += ["", "Cumulative bytes include the federated evaluation messages of the ZO methods "
              "(every node receives A each round to evaluate the global model)."]
    return lines


def _f(v: Any) -> str:
    return f"{v:.4g}" if isinstance(v, int | float) else "—"


# ------------------------------------------------------------------------------ step cost probe
def _vm(field: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) * 1024
    return 0


def probe(task_name: str, mode: str, batch: int, reps: int) -> dict[str, float]:
    """Time and peak memory of one mode on one task, in this (fresh) process."""
    import gc

    import torch

    from bouquet.apps.registry import get_task
    from bouquet.clients import zeroth_order as zo
    from bouquet.schema import CommonConfig
    from bouquet.tasks.classification import generator

    task = get_task(task_name).load()
    model = task.model_from(task.initial_arrays(0))
    task.__dict__.pop("pretrained", None)  # keep only the model under test
    local = task.partition(0, 4, CommonConfig())
    x, y = next(task.batches(local, batch, generator(0, 1, 0)))
    gc.collect()
    model.eval()
    numel = sum(p.numel() for p in model.parameters())
    base = _vm("VmRSS")
    Path("/proc/self/clear_refs").write_text("5")  # reset the peak (VmHWM) to the current RSS
    out: dict[str, float] = {"params": float(numel), "rss_base": float(base)}

    def loss() -> float:
        with torch.inference_mode():
            return float(task.loss(model, x, y))

    loss()  # warm-up
    if mode == "inference":
        t = time.perf_counter()
        for _ in range(reps):
            loss()
            loss()
        out["two_forward_s"] = (time.perf_counter() - t) / reps
    elif mode == "zo":
        d = zo.Directions(zo.canonical_parameters(model))
        t = time.perf_counter()
        for s in range(reps):
            zo.zo_step(d, 1000 + s, loss, eps=1e-3, lr=1e-7)
        out["zo_step_s"] = (time.perf_counter() - t) / reps
        t = time.perf_counter()
        for s in range(reps):
            d.add_(2000 + s, 0.0)
        out["regenerate_s"] = (time.perf_counter() - t) / reps
    elif mode == "backprop":
        model.train()
        opt = torch.optim.Adam(model.parameters(), lr=1e-5)
        t = time.perf_counter()
        for _ in range(reps):
            opt.zero_grad(set_to_none=True)
            task.loss(model, x, y).backward()
            opt.step()
        out["adam_step_s"] = (time.perf_counter() - t) / reps
    else:
        raise ValueError(mode)
    out["rss_peak"] = float(_vm("VmHWM"))
    return out


def _run_probe(task: str, mode: str, batch: int, reps: int) -> dict[str, float]:
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "BOUQUET_TORCH_THREADS": "1"}
    proc = subprocess.run([sys.executable, __file__, "--probe", task, mode, str(batch), str(reps)],
                          capture_output=True, text=True, env=env, timeout=3600)
    if proc.returncode != 0:
        raise RuntimeError(f"probe {task} {mode} failed: {proc.stderr[-2000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]


def _cost_section(out_dir: Path, tasks: list[str]) -> list[str]:
    lines = ["### 3. Cost of a step and memory", "",
             "Separate processes, 1 torch thread. ratio = one ZO step / two forward passes on the "
             "same batch (ideal 1.0); regenerate = drawing one direction over all parameters and "
             "adding it. Memory: peak resident set over the model-loaded baseline.", "",
             "| task | batch | params | 2 forwards s | ZO step s | ratio | regenerate s | "
             "Adam step s | inference +MB | ZO +MB | Adam +MB |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    results = {}
    for task in tasks:
        for batch in (1,) if task == "gsm-smollm" else (1, 16):
            reps = 3 if task == "gsm-smollm" else 10
            r = {m: _run_probe(task, m, batch, reps) for m in ("inference", "zo", "backprop")}
            results[f"{task}-b{batch}"] = r
            inf, zo_, bp = r["inference"], r["zo"], r["backprop"]

            def extra(x: dict[str, float]) -> str:
                return f"{(x['rss_peak'] - x['rss_base']) / 2**20:,.0f}"

            lines.append(
                f"| {task} | {batch} | {inf['params'] / 1e6:.1f}M | {inf['two_forward_s']:.3f} | "
                f"{zo_['zo_step_s']:.3f} | {zo_['zo_step_s'] / inf['two_forward_s']:.2f} | "
                f"{zo_['regenerate_s']:.3f} | {bp['adam_step_s']:.3f} | {extra(inf)} | "
                f"{extra(zo_)} | {extra(bp)} |")
    (out_dir / "step_cost.json").write_text(json.dumps(results, indent=1))
    return lines


def report(summaries: Mapping[str, Mapping[str, Any]], out_dir: Path) -> str:
    """Markdown: the three parts of the issue, computed from the runs and the probes."""
    base = baseline()
    full = any("gsm-smollm" in r for r in summaries)
    lines = [f"First-order baseline: `{base}`"
             + ("" if base == "fedit" else " (FedIT is not registered in this checkout)") + ".", ""]
    lines += _bytes_table(summaries) + [""]
    lines += _learning_table(summaries) + [""]
    lines += _cost_section(out_dir, ["rt-minilm"] + (["gsm-smollm"] if full else []))
    return "\n".join(lines)


if __name__ == "__main__":
    if len(sys.argv) == 6 and sys.argv[1] == "--probe":
        print(json.dumps(probe(sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5]))))
    else:
        print("usage: python benchmarks/fedkseed.py --probe TASK inference|zo|backprop BATCH REPS")
