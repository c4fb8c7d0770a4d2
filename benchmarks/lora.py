"""Benchmark suite ``lora``: FedIT vs FFA-LoRA vs Fed-SB on rt-minilm, plain and with DP-SGD.

Through the real ServerApp loop and ClientApp (in-process grid). Task ``rt-minilm``
(all-MiniLM-L6-v2 on Rotten Tomatoes snippets), 10 clients, Dirichlet(0.5) on the label, LoRA on
query/value of the 6 layers (12 matrices, 384 x 384) plus the 2-class head, AdamW.

* **Matched uplink** per client and round: FedIT r=2 (4 r (m+n) = 6,144 B per matrix), FFA-LoRA
  r=4 (4 r m = 6,144 B), Fed-SB r=40 (4 r^2 = 6,400 B).
* **Usual ranks** (full run only): FedIT r=8, FFA-LoRA r=8, Fed-SB r=64.
* Privacy: non-private, and DP-SGD with target epsilon in {1, 3, 10} (full) or {3} (quick),
  delta 1e-5, clipping C = 1, noise calibrated up front for the whole run.
* ``gsm-smollm`` (full run only): 4 clients, 2 rounds, Fed-SB r=16 and FFA-LoRA r=8 on
  SmolLM2-135M; exact match after each round.

Tuning protocol (the same for every arm): each arm (method x rank x privacy level) runs once per
learning rate of one declared grid, :data:`LR_GRID` (quick: 0.005 and 0.02; full: 0.002, 0.005,
0.01, 0.02), with the same budget (rounds, local steps, batch 16, seed). The value reported for an
arm is its run at the lr with the best **final-round** central accuracy, and the chosen lr is
printed beside it. rt-minilm has no separate validation split: the selection uses the same 500
held-out rows as the result, so every arm's number is optimistic by the same selection over the
same grid (a best-of-2 or best-of-4), never tuned on more values than another arm. The papers tune
FFA-LoRA (and LoRA-SB) on a larger lr than LoRA; one shared grid lets each arm find its own.

Local schedule: AdamW, batch 16. The step count and the first grid point come from a one-client
check without federation (LoRA r=2 on query/value plus the head, all
10,246 training rows, a fresh AdamW every 15 steps as a client gets each round): at lr 0.002 the
held-out accuracy was still at the majority rate (0.598-0.604) after 60 steps; at lr 0.005 it
read 0.598 / 0.604 / 0.664 / 0.732 after 15 / 30 / 45 / 60 steps; at lr 0.01 it reached 0.730
after 60 steps too but not monotonically (0.688 after 30, 0.634 after 45). So lr 0.005 (the top
of the usual LoRA range) and a chain of at least ~60-75 local steps per client lineage.

Quick: the matched-uplink arms, non-private and epsilon 3, each at the 2 grid lrs (12 runs);
**IID partition** (the full run keeps Dirichlet 0.5), 3 clients per round (fraction 0.3), 5 rounds
of 15 local steps (75 steps along a lineage), central evaluation on 500 held-out snippets; about
18 minutes per grid point on two shared CPU cores (36 for the quick grid).
Why IID: Dirichlet(0.5) on two labels leaves 4 of the 10 clients almost one-class (positive rate
0.003 to 0.999). With that split two attempts at this schedule stayed uninformative: 2 clients
per round swung FedIT between all-positive and all-negative (accuracy 0.598 / 0.402 / 0.654 /
0.598 / 0.402), and 4 clients per round kept FedIT at 0.598 after 5 rounds (loss 0.771 -> 0.653)
and FedIT at epsilon 3 at 0.598 throughout. The label skew, not the LoRA schedule, then decides
the outcome, and a longer run does not fit the quick budget.

Run: ``python -c "from bouquet.apps.bench import run_suite; from pathlib import Path;
run_suite('lora', Path('/tmp/bench-lora2'), quick=True)"``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from bouquet.apps.bench import BenchRun, lookup
from bouquet.apps.results import read_metrics
from bouquet.apps.verdicts import INCONCLUSIVE, Check, write_checks

COLUMNS = ["final.accuracy", "best.accuracy", "comm.up_bytes_per_client_round",
           "privacy.epsilon", "time.wall_s"]
PLOT_METRICS = ["accuracy", "train_loss", "epsilon"]

#: Rows of the central evaluation (rt-minilm's ``eval_size``); sets the noise floor of a verdict.
EVAL_ROWS = 500
MATCHED = {"fedit": 2, "ffa-lora": 4, "fed-sb": 40}
#: The learning-rate grid every arm is tuned on (same values, same budget for each arm).
LR_GRID = {"quick": (0.005, 0.02), "full": (0.002, 0.005, 0.01, 0.02)}
USUAL = {"fedit": 8, "ffa-lora": 8, "fed-sb": 64}


def runs(quick: bool) -> list[BenchRun]:
    """The configurations of the suite."""
    common: dict[str, Any] = {
        "task": "rt-minilm", "partition": "dirichlet", "dirichlet-alpha": 0.5,
        "batch-size": 16, "lora.optimizer": "adamw", "dp.delta": 1e-5,
        "dp.max-grad-norm": 1.0, "seed": 0,
    }
    if quick:
        common.update({"num-server-rounds": 5, "local-steps": 15, "fraction-train": 0.3,
                       "partition": "iid"})
        epsilons: list[float] = [3.0]
        ranks = {"matched": MATCHED}
    else:
        common.update({"num-server-rounds": 10, "local-steps": 10, "fraction-train": 0.3})
        epsilons = [1.0, 3.0, 10.0]
        ranks = {"matched": MATCHED, "usual": USUAL}
    out: list[BenchRun] = []
    for label, table in ranks.items():
        for method, rank in table.items():
            base = {**common, "method": method, "lora.rank": rank}
            arms = [(f"{method}-r{rank}-{label}-nodp", base)]
            arms += [(f"{method}-r{rank}-{label}-eps{eps:g}",
                      {**base, "dp.enabled": True, "dp.target-epsilon": eps}) for eps in epsilons]
            for arm, cfg in arms:
                for lr in LR_GRID["quick" if quick else "full"]:
                    name = f"{arm}-lr{lr:g}"
                    out.append(BenchRun(name, {**cfg, "lr": lr}, clients=10, group=name))
    if not quick:
        gsm = {"task": "gsm-smollm", "num-server-rounds": 2, "local-steps": 4, "batch-size": 4,
               "lr": 0.001, "partition": "iid", "seed": 0}
        out.append(BenchRun("gsm-fed-sb-r16", {**gsm, "method": "fed-sb", "lora.rank": 16},
                            clients=4))
        out.append(BenchRun("gsm-ffa-lora-r8", {**gsm, "method": "ffa-lora", "lora.rank": 8},
                            clients=4))
    return out


def steady_uplink(run_dir: Path) -> float | None:
    """Uplink per client per round after round 1 (Fed-SB's round 1 also carries its init)."""
    recs = [r for r in read_metrics(run_dir) if r["round"] > 1 and r["clients"]]
    if not recs:
        return None
    return sum(r["up_bytes"] for r in recs) / sum(r["clients"] for r in recs)


def arm_of(run: str) -> tuple[str, float] | None:
    """``"fedit-r2-matched-nodp-lr0.005"`` -> ``("fedit-r2-matched-nodp", 0.005)``."""
    arm, sep, lr = run.rpartition("-lr")
    try:
        return (arm, float(lr)) if sep else None
    except ValueError:
        return None


def tuned(acc: Mapping[str, float]) -> tuple[dict[str, float], dict[str, float],
                                             dict[str, dict[float, float]]]:
    """Per arm: the best final accuracy over its grid, the lr that gave it, every grid value.

    Ties go to the smaller lr (the grid is scanned in increasing order).
    """
    grid: dict[str, dict[float, float]] = {}
    for run, a in acc.items():
        parsed = arm_of(run)
        if parsed is not None:
            grid.setdefault(parsed[0], {})[parsed[1]] = a
    best: dict[str, float] = {}
    chosen: dict[str, float] = {}
    for arm, by_lr in grid.items():
        lr = max(sorted(by_lr), key=lambda x: by_lr[x])
        best[arm], chosen[arm] = by_lr[lr], lr
    return best, chosen, grid


def _verdict(diff: float, claim_holds: bool) -> str:
    """'holds' / 'does not hold', or 'inconclusive' within two binomial standard errors."""
    se = math.sqrt(2 * 0.25 / EVAL_ROWS)  # difference of two accuracies near 0.5
    if abs(diff) < 2 * se:
        return f"inconclusive (|difference| {abs(diff):.3f} < 2 standard errors = {2 * se:.3f})"
    return "holds" if claim_holds else "does not hold"


def report(summaries: Mapping[str, Mapping[str, Any]], out_dir: Path) -> str:
    """Per-arm table (steady uplink, init cost, accuracy, epsilon) and the papers' predictions."""
    lines = ["| run | final acc | steady uplink B/client/round | Fed-SB init uplink B/client | "
             "epsilon |", "|---|---|---|---|---|"]
    acc: dict[str, float] = {}
    for name, s in summaries.items():
        recs = read_metrics(out_dir / name)
        init = [r.get("init_up_bytes") for r in recs if r.get("init_up_bytes")]
        first = recs[0] if recs else {}
        init_per = (init[0] / max(first.get("clients", 1) + first.get("errors", 0), 1)
                    if init else None)
        a = lookup(s, "final.accuracy")
        if isinstance(a, int | float):
            acc[name] = float(a)
        up = steady_uplink(out_dir / name)
        eps = lookup(s, "privacy.epsilon")
        lines.append(f"| {name} | {a if a is None else f'{a:.3f}'} | "
                     f"{'—' if up is None else f'{up:,.0f}'} | "
                     f"{'—' if init_per is None else f'{init_per:,.0f}'} | "
                     f"{'—' if eps is None else f'{eps:.3g}'} |")
    lines.append("")
    acc, chosen, grid = tuned(acc)
    lrs = sorted({lr for by_lr in grid.values() for lr in by_lr})
    tuning = ["Each arm at its chosen lr (best final-round accuracy over the shared grid; the "
              "selection uses the evaluation rows themselves, the same way for every arm):", "",
              "| arm | chosen lr | final acc | " + " | ".join(f"lr {lr:g}" for lr in lrs) + " |",
              "|---|---|---|" + "---|" * len(lrs)]
    for arm in sorted(grid):
        cells = [f"{grid[arm][lr]:.3f}" if lr in grid[arm] else "—" for lr in lrs]
        tuning.append(f"| {arm} | {chosen[arm]:g} | {acc[arm]:.3f} | " + " | ".join(cells) + " |")
    lines += ["", "### Tuning", "", *tuning, ""]
    checks = []
    verdicts: list[Check] = []  # the same verdicts, machine-readable (verdicts.json)

    def record(claim: str, said: str, measured: str) -> None:
        kind = INCONCLUSIVE if said.startswith(INCONCLUSIVE) else said
        verdicts.append(Check(claim, kind, measured + said[len(INCONCLUSIVE):]
                              if kind == INCONCLUSIVE else measured))

    for label in ("matched", "usual"):
        table = MATCHED if label == "matched" else USUAL
        plain = {m: acc.get(f"{m}-r{r}-{label}-nodp") for m, r in table.items()}
        if all(v is not None for v in plain.values()):
            fedit = plain["fedit"]
            for m in ("ffa-lora", "fed-sb"):
                v = plain[m]
                assert v is not None and fedit is not None
                verdict = _verdict(v - fedit, v >= fedit)
                record(f"{m} matches or beats FedIT ({label} ranks, non-private)", verdict,
                       f"{m} {v:.3f} vs FedIT {fedit:.3f}")
                checks.append(f"- {label} ranks, non-private: {m} {v:.3f} vs FedIT {fedit:.3f} "
                              f"-> 'matches or beats FedIT' {verdict}.")
        for name in sorted(acc):
            if name.startswith(tuple(f"{m}-r{r}-{label}-eps" for m, r in table.items())):
                method = name.split("-r")[0]
                ref = plain.get(method)
                if ref is not None:
                    checks.append(f"- {name} (lr {chosen[name]:g}): accuracy {acc[name]:.3f}, "
                                  f"drop vs non-private (lr "
                                  f"{chosen[f'{method}-r{table[method]}-{label}-nodp']:g}) "
                                  f"{ref - acc[name]:+.3f}.")
    drops: dict[str, dict[str, float]] = {}
    for name, a in acc.items():
        if "-eps" in name:
            method, rest = name.split("-r", 1)
            label = "matched" if "-matched-" in rest else "usual"
            ref = acc.get(f"{method}-r{rest.split('-')[0]}-{label}-nodp")
            if ref is not None:
                drops.setdefault(name.rsplit("-", 1)[1] + "/" + label, {})[method] = ref - a
    for key, d in sorted(drops.items()):
        if len(d) == 3:
            worst = max(d, key=lambda m: d[m])
            runner_up = max(x for m, x in d.items() if m != worst)
            verdict = _verdict(d[worst] - runner_up, worst == "fedit")
            record(f"FedIT degrades most under DP ({key})", verdict,
                   f"largest drop {worst} {d[worst]:+.3f}, next {runner_up:+.3f}")
            checks.append(f"- {key}: largest DP drop is {worst} ({d[worst]:+.3f}) -> 'FedIT "
                          f"degrades most under DP' {verdict}.")
    write_checks(out_dir, "lora", verdicts)
    return "\n".join(["### Per run", "", *lines, "### Checks against the papers", "", *checks])
