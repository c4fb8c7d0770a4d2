"""SCAFFOLD / SCALLION / SCAFCOM vs FedAvg and compressed baselines under extreme label skew.

Setting (docs/methods/scafcom.md, issue 3): 50 clients, each holding 2 classes (pathological
partition), 10 % of the clients per round, a few local SGD steps, plain SGD with one local
learning rate for every method (chosen once on FedAvg/SCAFFOLD, not per method).

* quick: digits-mlp (bundled), one seed.
* full: fmnist-cnn (Fashion-MNIST from /usr/share/datasets), three seeds.

Runs: FedAvg; SCAFFOLD (two dense vectors), also with the server's norm screen off
(``scaffold-unscreened``, ``norm-bound-factor = 0``) and with option I controls
(``scaffold-opt1``); single-uplink SCAFFOLD; FedAvg + top-k without error
feedback; Fed-EF (top-k + EF); SCALLION (rand-k, alpha = 1/(1 + omega)); SCAFCOM (top-k,
beta = 0.2, momentum started at the first gradient, the default), also with the zero momentum start
(``scafcom-zero``) and with the momentum inside the local steps (the alternative reading); SCAFCOM
with beta = 1 (ablation).

``SCAFCOM_BENCH_LR=<lr>`` gives every run that learning rate and names it ``ARM-lrLR-sSEED``: the
per-arm grid of :data:`LR_GRID` (benchmarks/RESULTS.md, scafcom) runs one call per lr into one
folder. Such runs are left out of the checks (they hold at the suite's shared lr); the report
tabulates every grid run in the folder, earlier calls' too, each arm at its best lr
(:func:`lr_grid`).

``SCAFCOM_BENCH_FRACTION=<f>`` runs every arm with that fraction of the clients per round
(``fraction-train``, the suite's 0.1 otherwise) and adds ``-fracF`` to each name: such runs are
left out of the checks, which are declared for 10 % participation, and out of the lr grid.
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from bouquet.apps.bench import BenchRun, parse_run
from bouquet.apps.results import read_metrics
from bouquet.apps.verdicts import Check, write_checks

COLUMNS = ["final.accuracy", "best.accuracy", "target.round", "target.up_bytes",
           "comm.up_bytes_total", "comm.up_bytes_per_client_round", "time.wall_s"]
PLOT_METRICS = ["accuracy", "loss"]

RATIO = 0.02  # uplink kept fraction for top-k / rand-k

QUICK = {"task": "digits-mlp", "num-server-rounds": 200, "local-steps": 10, "lr": 0.05,
         "batch-size": 16, "target-accuracy": 0.80}
FULL = {"task": "fmnist-cnn", "num-server-rounds": 200, "local-steps": 10, "lr": 0.05,
        "batch-size": 32, "target-accuracy": 0.70}
COMMON = {"partition": "pathological", "classes-per-client": 2, "fraction-train": 0.1,
          "evaluation": "central"}
CLIENTS = 50
#: The per-arm learning-rate grid (``SCAFCOM_BENCH_LR``), the shared lr 0.05 in the middle.
LR_GRID = (0.02, 0.05, 0.1)
#: Rounds at the end of a run whose mean accuracy the grid reports beside the best accuracy.
LAST_ROUNDS = 10

VARIANTS: dict[str, dict[str, Any]] = {
    "fedavg": {"method": "fedavg"},
    "scaffold": {"method": "scaffold"},
    "scaffold-1up": {"method": "scaffold-1up"},
    # the paper's option I controls (c_i = the gradient at x over one more pass of the data)
    "scaffold-opt1": {"method": "scaffold", "scaffold.controls": "I"},
    # the control for the server's norm screen, which turned away 2-4 % of SCAFFOLD's honest
    # replies on fmnist-cnn (benchmarks/RESULTS.md, scafcom): the same SCAFFOLD with it off
    "scaffold-unscreened": {"method": "scaffold", "norm-bound-factor": 0.0},
    "fedavg-topk": {"method": "fedavg-compressed", "fedavg-compressed.compressor": "topk",
                    "fedavg-compressed.compressor-ratio": RATIO},
    "fed-ef": {"method": "fed-ef", "fed-ef.compressor": "topk",
               "fed-ef.compressor-ratio": RATIO},
    "scallion-randk": {"method": "scallion", "scallion.compressor": "randk",
                       "scallion.compressor-ratio": RATIO},
    "scafcom-topk": {"method": "scafcom", "scafcom.compressor": "topk",
                     "scafcom.compressor-ratio": RATIO, "scafcom.beta": 0.2},
    "scafcom-zero": {"method": "scafcom", "scafcom.compressor": "topk",
                     "scafcom.compressor-ratio": RATIO, "scafcom.beta": 0.2,
                     "scafcom.momentum-init": "zero"},
    "scafcom-local": {"method": "scafcom", "scafcom.compressor": "topk",
                      "scafcom.compressor-ratio": RATIO, "scafcom.beta": 0.2,
                      "scafcom.momentum-placement": "local-steps"},
    "scafcom-beta1": {"method": "scafcom", "scafcom.compressor": "topk",
                      "scafcom.compressor-ratio": RATIO, "scafcom.beta": 1.0},
}


def runs(quick: bool) -> list[BenchRun]:
    """Every variant, one seed (quick) or three (full).

    ``SCAFCOM_BENCH_ROUNDS=<n>`` in the environment overrides the number of rounds (the longer
    checks in benchmarks/RESULTS.md use 200 and 600); ``SCAFCOM_BENCH_LR=<lr>`` sets every run's
    learning rate and adds ``-lrLR`` to its name (one lr of the grid, :data:`LR_GRID`);
    ``SCAFCOM_BENCH_FRACTION=<f>`` sets the clients per round and adds ``-fracF``;
    ``SCAFCOM_BENCH_SEEDS=<s,s,...>`` replaces the seeds (e.g. more seeds of the quick setting).
    """
    base = {**COMMON, **(QUICK if quick else FULL)}
    if int(os.environ.get("SCAFCOM_BENCH_ROUNDS", "0")) > 0:
        base["num-server-rounds"] = int(os.environ["SCAFCOM_BENCH_ROUNDS"])
    tag = ""
    if os.environ.get("SCAFCOM_BENCH_LR"):
        lr = float(os.environ["SCAFCOM_BENCH_LR"])
        if not 0 < lr < 10:
            raise ValueError(f"SCAFCOM_BENCH_LR must be a learning rate in (0, 10), got {lr}")
        base["lr"], tag = lr, f"-lr{lr:g}"
    if os.environ.get("SCAFCOM_BENCH_FRACTION"):
        fraction = float(os.environ["SCAFCOM_BENCH_FRACTION"])
        if not 0 < fraction <= 1:
            raise ValueError("SCAFCOM_BENCH_FRACTION must be a fraction of the clients in "
                             f"(0, 1], got {fraction}")
        base["fraction-train"], tag = fraction, f"{tag}-frac{fraction:g}"
    seeds = _seeds(os.environ.get("SCAFCOM_BENCH_SEEDS", ""), quick)
    return [BenchRun(name=f"{name}{tag}-s{seed}", config={**base, **cfg, "seed": seed},
                     clients=CLIENTS)
            for name, cfg in VARIANTS.items() for seed in seeds]


def _seeds(spec: str, quick: bool) -> list[int]:
    """The run seeds: ``spec`` (comma-separated non-negative integers) if given, else one seed
    (quick) or three (full)."""
    if not spec.strip():
        return [0] if quick else [0, 1, 2]
    try:
        seeds = sorted({int(part) for part in spec.split(",")})
    except ValueError:
        raise ValueError("SCAFCOM_BENCH_SEEDS must be comma-separated seeds such as 0,1,2, "
                         f"got {spec!r}") from None
    if seeds[0] < 0:
        raise ValueError(f"SCAFCOM_BENCH_SEEDS must be non-negative, got {spec!r}")
    return seeds


GridCells = dict[str, dict[float, dict[int, tuple[float, float, int]]]]


def _grid_runs(out_dir: Path) -> tuple[GridCells, dict[str, list[dict[str, Any]]]]:
    """OUT_DIR's grid runs: arm -> lr -> seed -> (best accuracy, last-rounds mean, rounds), and
    each run's ``metrics.jsonl`` records (read once, for the table and the plots).

    Every folder named ``ARM-lrLR-sSEED`` (:func:`bouquet.apps.bench.parse_run`) counts, so
    that one call reports the runs earlier calls at other lrs left in the folder. Non-finite
    accuracies (``null`` in the file) are skipped.
    """
    cells: GridCells = {}
    records: dict[str, list[dict[str, Any]]] = {}
    for run_dir in sorted(p for p in out_dir.iterdir() if p.is_dir()):
        parsed = parse_run(run_dir.name)
        if parsed is None:
            continue
        arm, lr, seed = parsed
        if seed is None:
            continue
        rows = records[run_dir.name] = read_metrics(run_dir)
        accs = [float(r["accuracy"]) for r in rows if isinstance(r.get("accuracy"), int | float)
                and math.isfinite(r["accuracy"])]
        if accs:
            tail = accs[-LAST_ROUNDS:]
            cells.setdefault(arm, {}).setdefault(lr, {})[seed] = (
                max(accs), sum(tail) / len(tail), len(rows))
    return cells, records


def lr_grid(out_dir: Path) -> list[str]:
    """The descriptive per-arm lr grid of OUT_DIR as markdown lines (empty without grid runs).

    Each cell gives the best accuracy and the mean of the last :data:`LAST_ROUNDS` rounds,
    averaged over the cell's seeds (the best round favours arms that swing, hence both). An
    arm's lr is the one with the highest mean best accuracy (the measure of the suite's checks,
    compared at four decimals; ties go to the smaller lr), and only when every cell of the arm
    has the same seeds and the same number of rounds: otherwise none is chosen.

    Parameters
    ----------
    out_dir : Path
        The suite's output folder; its ``ARM-lrLR-sSEED`` folders are read.

    Returns
    -------
    list[str]
        The section's lines, to append to the report. The grid's curves are drawn to
        ``OUT_DIR/plots-lr-grid`` (a colour per arm, a line style per lr).

    """
    cells, records = _grid_runs(out_dir)
    if not cells:
        return []
    from bouquet.apps.plots import plot_curves

    plot_curves(records, PLOT_METRICS,
                out_dir / "plots-lr-grid", title="scafcom per-arm lr grid",
                family=lambda group: (parse_run(group) or (group,))[0])
    lrs = sorted({lr for by_lr in cells.values() for lr in by_lr})
    lines = ["", "### Per-arm lr grid (descriptive, no verdict)", "",
             f"Best accuracy / mean of the last {LAST_ROUNDS} rounds, averaged over the seeds "
             "each cell has; the chosen lr has the highest best accuracy.", "",
             "| arm | " + " | ".join(f"lr {lr:g}" for lr in lrs) + " | chosen lr | seeds | rounds |",
             "|---|" + "---|" * (len(lrs) + 3)]
    for arm, by_lr in cells.items():
        means = {lr: (sum(b for b, _, _ in v.values()) / len(v),
                      sum(m for _, m, _ in v.values()) / len(v)) for lr, v in by_lr.items()}
        seed_sets = {tuple(sorted(v)) for v in by_lr.values()}
        rounds = {n for v in by_lr.values() for _, _, n in v.values()}
        chosen = "- (cells differ in seeds or rounds)"
        if len(seed_sets) == 1 and len(rounds) == 1:
            chosen = f"{max(sorted(means), key=lambda x: round(means[x][0], 4)):g}"
        row = [f"{means[lr][0]:.4f} / {means[lr][1]:.4f}" if lr in means else "-" for lr in lrs]
        lines.append(f"| {arm} | " + " | ".join(row) + f" | {chosen} | "
                     + "; ".join(",".join(map(str, ss)) for ss in sorted(seed_sets)) + " | "
                     + "/".join(map(str, sorted(rounds))) + " |")
    return lines


def _group(summaries: Mapping[str, Mapping[str, Any]], name: str) -> list[Mapping[str, Any]]:
    return [s for run, s in summaries.items() if run.rsplit("-s", 1)[0] == name]


def _mean(values: list[float]) -> float | None:
    return sum(values) / len(values) if values else None


def _stat(summaries: Mapping[str, Mapping[str, Any]], name: str, path: str) -> float | None:
    vals = []
    for s in _group(summaries, name):
        cur: Any = s
        for part in path.split("."):
            cur = cur.get(part) if isinstance(cur, Mapping) else None
        if isinstance(cur, int | float):
            vals.append(float(cur))
    return _mean(vals)


def _payload_bytes(out_dir: Path, name: str) -> float | None:
    """Mean over seeds of the summed payload-only uplink bytes (no Flower framing)."""
    totals = []
    for run_dir in sorted(out_dir.glob(f"{name}-s*")):
        recs = read_metrics(run_dir)
        if recs:
            totals.append(sum(float(r.get("uplink_payload_bytes", 0.0)) for r in recs))
    return _mean(totals) if totals and any(totals) else None


def report(summaries: Mapping[str, Mapping[str, Any]], out_dir: Path) -> str:
    """Checks against what the SCAFCOM paper leads us to expect."""
    acc = {n: _stat(summaries, n, "best.accuracy") for n in VARIANTS}
    fin = {n: _stat(summaries, n, "final.accuracy") for n in VARIANTS}
    up = {n: _stat(summaries, n, "comm.up_bytes_total") for n in VARIANTS}
    lines = ["### Checks (measured; best accuracy averaged over seeds)", ""]
    checks: list[Check] = []
    ref, ref_up = acc["scaffold"], up["scaffold"]
    for name in ("scafcom-topk", "scallion-randk"):
        a, u = acc[name], up[name]
        if a is None or u is None or ref is None or ref_up is None:
            continue
        gap, ratio = 100 * (ref - a), ref_up / u
        checks.append(Check.of(
            f"{name} within 1.5 points of SCAFFOLD's best accuracy with >= 20x fewer uplink bytes",
            gap <= 1.5 and ratio >= 20, f"SCAFFOLD minus {name} = {gap:+.1f} points, "
            f"{ratio:.1f}x fewer bytes (measured on the wire)"))
    sc = acc["scafcom-topk"]
    if acc["fedavg-topk"] is not None and sc is not None:
        gap = 100 * (sc - acc["fedavg-topk"])
        checks.append(Check.of("FedAvg+top-k (no EF) falls clearly behind SCAFCOM (> 3 points)",
                               gap > 3, f"SCAFCOM minus FedAvg+top-k = {gap:+.1f} points"))
    if acc["fed-ef"] is not None and sc is not None:
        gap = 100 * (sc - acc["fed-ef"])
        checks.append(Check.of("Fed-EF stays behind SCAFCOM", gap > 0,
                               f"SCAFCOM minus Fed-EF = {gap:+.1f} points"))
    if acc["scafcom-beta1"] is not None and sc is not None:
        gap = 100 * (sc - acc["scafcom-beta1"])
        checks.append(Check.of("beta = 1 ablation is worse than beta = 0.2", gap > 0,
                               f"beta 0.2 minus beta 1 = {gap:+.1f} points"))
    s1, s2 = fin["scaffold-1up"], fin["scaffold"]
    if s1 is not None and s2 is not None and up["scaffold-1up"] and ref_up:
        checks.append(Check.of("single-uplink SCAFFOLD == SCAFFOLD (same final accuracy)",
                               abs(s1 - s2) < 1e-9, f"final accuracy {s1:.4f} vs {s2:.4f}, "
                               f"uplink ratio {up['scaffold-1up'] / ref_up:.3f}"))
    write_checks(out_dir, "scafcom", checks)
    lines += [c.markdown() for c in checks]
    # the screen's control is descriptive: a one-sided "within 1.5 points" check would pass
    # whenever the unscreened reference collapses, which says nothing about SCAFCOM
    unscreened, unscreened_final = acc["scaffold-unscreened"], fin["scaffold-unscreened"]
    sc_best = acc["scafcom-topk"]
    if None not in (unscreened, unscreened_final, sc_best, ref):
        lines.append(f"- descriptive, no verdict: SCAFFOLD without the norm screen has best "
                     f"accuracy {unscreened:.4f} and final {unscreened_final:.4f} "
                     f"(screened {ref:.4f}, scafcom-topk {sc_best:.4f})")
    option_i, option_i_final = acc["scaffold-opt1"], fin["scaffold-opt1"]
    if None not in (option_i, option_i_final, ref):
        lines.append(f"- descriptive, no verdict: SCAFFOLD with option I controls has best "
                     f"accuracy {option_i:.4f} and final {option_i_final:.4f} (option II "
                     f"{ref:.4f} and {fin['scaffold']:.4f})")
    lines += lr_grid(out_dir)
    lines += ["", "Payload-only uplink bytes (compressor output, no Flower framing or metrics), "
              "summed over the run:", ""]
    for name in VARIANTS:
        pb = _payload_bytes(out_dir, name)
        if pb is not None:
            lines.append(f"- {name}: {pb:,.0f} B")
    return "\n".join(lines)
