"""Benchmark suite ``lora``: FedIT vs FFA-LoRA vs Fed-SB on rt-minilm, plain and with DP-SGD.

Through the real ServerApp loop and ClientApp (in-process grid). Task ``rt-minilm``
(all-MiniLM-L6-v2 on Rotten Tomatoes snippets), LoRA on query/value of the 6 layers (12 matrices,
384 x 384) plus the 2-class head, AdamW.

* **Matched uplink** per client and round: FedIT r=2 (4 r (m+n) = 6,144 B per matrix), FFA-LoRA
  r=4 (4 r m = 6,144 B), Fed-SB r=40 (4 r^2 = 6,400 B).
* **Usual ranks** (full run only): FedIT r=8, FFA-LoRA r=8, Fed-SB r=64.
* **Privacy**: non-private, and DP-SGD with target epsilon in :data:`EPSILONS` (quick 3, 10;
  full 1, 3, 10), delta 1e-5 (< 1/n for every client), clipping C = 1, Poisson sampling, sigma
  calibrated up front for a client in every round (the accountant is the clients' own; nothing
  here weakens it).
* ``gsm-smollm`` (full run only): 4 clients, 2 rounds, Fed-SB r=16 and FFA-LoRA r=8 on
  SmolLM2-135M; exact match after each round.

Schedule (:data:`SCHEDULE`, the same for every arm, private or not, so that a drop under DP is
the mechanism's alone): 3 clients (the cross-silo count of both papers' DP experiments), IID,
all of them in every round, so each holds ~3,415 rows and its sampling rate is 64/3,415; Poisson
batch 64 (the noise per coordinate of the averaged gradient, sigma C / B, is ~3x smaller than with
10 clients at batch 16); 4 rounds x 8 local steps. Why the old private arms (10 clients, batch
16, 75 steps) stayed at the majority rate, and the private schedules tried since: RESULTS.md,
``## lora`` (in short: the fresh head holds >= 99.8 % of each clipped per-sample gradient, so the
adapters receive pure noise; no private schedule that learns was found yet).

Tuning protocol (the same for every arm): each arm (method x rank x privacy level) runs once per
learning rate of one declared grid, :data:`LR_GRID` (quick: 0.005 and 0.02; full: 0.002, 0.005,
0.01, 0.02), and per seed of :data:`SEEDS` (quick 0, 1; full 0, 1, 2), with the same budget. The
value reported for an arm is its seed-mean **final-round** central accuracy at the lr with the
best seed mean, the chosen lr printed beside it. rt-minilm has no separate validation split: the
selection uses the same 500 held-out rows as the result, so every arm's number is optimistic by
the same selection over the same grid. The papers tune FFA-LoRA (and LoRA-SB) on a larger lr than
LoRA; one shared grid lets each arm find its own.

Checks (:mod:`bouquet.apps.verdicts`): "FFA-LoRA degrades less than FedIT under DP" and "Fed-SB
degrades less than FedIT under DP" per epsilon (a drop is the non-private minus the private
accuracy, each arm at its own chosen lr; inconclusive within two binomial standard errors of the
difference of drops or the seed spread of the per-seed difference of drops, whichever is larger); "<private
arm> learns" (two standard errors above the majority rate 0.598); and, non-private, "FFA-LoRA /
Fed-SB matches or beats FedIT".

**Federated private comparison on rt-smollm** (``LORA_BENCH_TASK=rt-smollm`` in the environment,
:data:`SMOLLM`): SmolLM2-135M with the verbalizer read from its LM head, so every trainable
tensor is an adapter and each arm starts from the zero-shot answers (RESULTS.md, ``## lora``:
on rt-minilm's fresh head the private arms received pure noise). Rank 8 for every arm, 3 IID
clients (~3,415 rows each) in every round, Poisson batch 32, 2 rounds x 5 local steps, delta
1e-5, each arm at its method's preset lr (FedIT 0.005, FFA-LoRA 0.02, Fed-SB 0.02: one lr, not
tuned here) and clipping norm at its median per-sample gradient norm at the start (C = 1, 1,
0.2: the one-client probe's rule, ``benchmarks/dp_lora_probe.py norms``), non-private, eps 3
and eps 10, seeds 0 to 3 (RESULTS.md names the seeds each epsilon was run on). Runs are named
``<method>-r8-smollm-<nodp|eps3|eps10>-lr<lr>-s<seed>``. A second schedule, ``smollm10``, is the
same with 2 rounds x 10 local steps (the one-client probe's 20 private steps per client),
non-private, eps 3 and eps 10, seeds 0 to 3 (``SMOLLM["variants"]``; RESULTS.md names the
seeds run); its runs are named ``<method>-r8-smollm10-...`` and judged apart from the first.
A third label, ``tune10`` (:data:`SMOLLM_TUNING`), tunes each method's lr for ``smollm10``,
non-private, on one grid shared by all three (0.002, 0.005, 0.01, 0.02, 0.05; 0.002 joined in
session 23, since FedIT's best sat at the lowest lr of the first grid), choosing on held-out rows
400-1199 (validation) and reporting on the 400 result rows (:func:`tuning_report`); the same
grid, tuned apart, for the private runs at eps 3 (the ``smollm10`` private run but for its lr;
session 23), whose chosen lrs give a DP ordering with every arm tuned; the private grid goes
one step further, to 0.1, for every method (session 25: Fed-SB's private choice sat at 0.05,
the shared grid's upper edge). Its runs are named
``<method>-r8-tune10-<level>-lr<lr>-s<seed>`` and kept out of every other check. Levels
without a grid reuse another level's choices (``transfer``): eps 1 at the eps-3 lrs; and
``dirnodp`` / ``direps3``, the non-private and eps-3 choices on a label-Dirichlet(0.5) split of
the same rows over the same 3 clients, which also test "FFA-LoRA (Fed-SB) loses less than FedIT
to the Dirichlet 0.5 split".
The report judges them on the task's 400 held-out rows, and "learns" means above the pretrained
model's zero-shot accuracy on those rows (computed once, ``zero_shot.json`` of the fedkseed
suite).
The DP ordering is also tested per row (:func:`paired_degradation_checks`): each run's final
model is rebuilt from its last checkpoint, checked against the run's own accuracy and
re-evaluated on the same rows (``RUN/rows.npz``, kept when the checkpoint is not), and the
per-row difference of drops, averaged over the seeds, is judged at two paired standard errors:
a sharper test than the unpaired floor, about these rows.

Cost: one private 64-row step takes ~4.2 s on two shared cores, so one run takes ~7 minutes and
the quick suite (36 runs) ~4 hours; split it with ``only=`` (e.g. ``only=("-s0",)``, or one
method at a time) to keep each hold of the heavy lock short.

Run: ``python -c "from bouquet.apps.bench import run_suite; from pathlib import Path;
run_suite('lora', Path('/tmp/bench-lora'), quick=True, only=('fedit-',))"``.
"""

from __future__ import annotations

import functools
import math
import os
import re
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any

from bouquet.apps.bench import BenchRun, load_suite, lookup, parse_run
from bouquet.apps.results import read_metrics
from bouquet.apps.verdicts import (
    FAILS,
    HOLDS,
    INCONCLUSIVE,
    NOT_MEASURED,
    Check,
    improvement_check,
    paired_change,
    write_checks,
)

if TYPE_CHECKING:
    import numpy as np

COLUMNS = ["final.accuracy", "best.accuracy", "comm.up_bytes_per_client_round",
           "privacy.epsilon", "time.wall_s"]
PLOT_METRICS = ["accuracy", "train_loss", "epsilon"]

#: Rows of the central evaluation (rt-minilm's ``eval_size``); sets the noise floor of a verdict.
EVAL_ROWS = 500
#: Majority-class rate of those rows: an arm at this accuracy has learnt nothing.
MAJORITY = 0.598
MATCHED = {"fedit": 2, "ffa-lora": 4, "fed-sb": 40}
USUAL = {"fedit": 8, "ffa-lora": 8, "fed-sb": 64}
#: The learning-rate grid every arm is tuned on (same values, same budget for each arm).
LR_GRID = {"quick": (0.005, 0.02), "full": (0.002, 0.005, 0.01, 0.02)}
#: Seeds every (arm, lr) runs with; an arm's lr is chosen on the mean over them.
SEEDS = {"quick": (0, 1), "full": (0, 1, 2)}
#: Target epsilons of the private arms (delta 1e-5), beside the non-private reference.
EPSILONS = {"quick": (3.0, 10.0), "full": (1.0, 3.0, 10.0)}
#: The schedule shared by every arm, private or not (see the module docstring).
SCHEDULE: dict[str, Any] = {
    "task": "rt-minilm", "partition": "iid", "fraction-train": 1.0,
    "batch-size": 64, "num-server-rounds": 4, "local-steps": 8,
    "lora.optimizer": "adamw", "dp.delta": 1e-5, "dp.max-grad-norm": 1.0,
}
CLIENTS = 3
#: ``LORA_BENCH_TASK=rt-smollm``: the federated private comparison on rt-smollm (module
#: docstring). ``clip`` is each method's median per-sample gradient norm at the start (the
#: one-client probe's rule), set in its private and non-private runs alike.
SMOLLM: dict[str, Any] = {
    "schedule": {"task": "rt-smollm", "partition": "iid", "fraction-train": 1.0,
                 "batch-size": 32, "num-server-rounds": 2,
                 "lora.optimizer": "adamw", "dp.delta": 1e-5},
    "rank": 8,
    "lr": {"fedit": 0.005, "ffa-lora": 0.02, "fed-sb": 0.02},
    "clip": {"fedit": 1.0, "ffa-lora": 1.0, "fed-sb": 0.2},
    #: Run label -> local steps per round, target epsilons and seeds. ``smollm``: 2 x 5 steps
    #: (sessions 16-17); ``smollm10``: 2 x 10 steps, the one-client probe's 20 private steps
    #: per client (sessions 18-19). Labels are distinct words: ``-smollm-`` selects only the first.
    "variants": {
        "smollm": {"local-steps": 5, "epsilons": (3.0, 10.0), "seeds": (0, 1, 2, 3)},
        "smollm10": {"local-steps": 10, "epsilons": (3.0, 10.0), "seeds": (0, 1, 2, 3)},
    },
}
#: rt-smollm's held-out rows (the task's ``eval_size``).
SMOLLM_EVAL_ROWS = 400
#: A label-Dirichlet split of the same training rows over the same 3 clients (FFA-LoRA's
#: experiments split 3 clients by a label Dirichlet; alpha 0.5 is that of FedSA-LoRA's re-run of
#: them): the ``split`` of a :data:`SMOLLM_TUNING` level.
DIRICHLET_SPLIT: dict[str, Any] = {"partition": "dirichlet", "dirichlet-alpha": 0.5}
#: ``tune10``: each method's lr tuned on one shared grid for the ``smollm10`` schedule,
#: non-private (issue 14 item 2) and at each target epsilon of ``epsilons`` (item 3; the
#: private grid is tuned apart, the same way). Every method runs every lr of its level's grid
#: (``lrs``, then the level's ``beyond`` steps: :func:`tuning_lrs`) on
#: ``grid-seeds`` with the same budget, per level; its lr is the one whose final model scores
#: the best mean accuracy over those
#: seeds on the ``validation`` rows of the task's held-out split (rows after the 400 the results
#: are read on, so the choice does not see them; ties go to the smaller lr), and its result is
#: that lr's final accuracy on the 400 rows (``seeds`` lists those a run may use: the grid's,
#: then confirmation seeds at the chosen lr, which the comparison reads where there are any:
#: :func:`tuning_report`). ``beyond`` extends one level's grid past the shared one, for every
#: method of that level alike (:func:`tuning_lrs`): where a choice sat at the grid's edge.
#: ``transfer`` gives a level no grid of its own: each method runs, on the confirmation seeds
#: only, at the lr another level chose for it, declared here before its runs
#: (:func:`transferred_lrs`; the report checks that the other level still chooses it). eps 1
#: reuses the eps-3 choices (session 26): where does DP cost accuracy, and does the papers'
#: ordering appear there? A ``transfer`` level with a ``split`` keeps its source's privacy and
#: deals the rows out by that split instead (:func:`level_split`, :func:`level_epsilon`):
#: ``dirnodp`` and ``direps3`` run the non-private and eps-3 choices on a label-Dirichlet(0.5)
#: split of the same rows (session 27: does FedIT, whose average of A and B is not the average
#: of the clients' updates, lose more to heterogeneity than the exact methods?), on their own
#: ``seeds`` (1 and 2 in session 27; 3 added in session 28).
SMOLLM_TUNING: dict[str, Any] = {
    "label": "tune10", "variant": "smollm10", "lrs": (0.002, 0.005, 0.01, 0.02, 0.05),
    "grid-seeds": (0,), "seeds": (0, 1, 2, 3), "validation": (400, 1200),
    "epsilons": (3.0, 1.0), "beyond": {"eps3": (0.1,)},
    "transfer": {
        "eps1": {"from": "eps3", "lrs": {"fedit": 0.01, "ffa-lora": 0.02, "fed-sb": 0.05}},
        "dirnodp": {"from": "nodp", "split": DIRICHLET_SPLIT, "seeds": (1, 2, 3),
                    "lrs": {"fedit": 0.002, "ffa-lora": 0.02, "fed-sb": 0.01}},
        "direps3": {"from": "eps3", "split": DIRICHLET_SPLIT, "seeds": (1, 2, 3),
                    "lrs": {"fedit": 0.01, "ffa-lora": 0.02, "fed-sb": 0.05}},
    },
}


def runs(quick: bool) -> list[BenchRun]:
    """The configurations of the suite: arm x lr of the grid x seed.

    ``LORA_BENCH_TASK=rt-smollm`` in the environment gives the federated private comparison on
    rt-smollm instead (:func:`smollm_runs`); the default, ``rt-minilm``, the suite above.
    """
    task = os.environ.get("LORA_BENCH_TASK", "rt-minilm")
    if task == "rt-smollm":
        return smollm_runs()
    if task != "rt-minilm":
        raise ValueError(f"LORA_BENCH_TASK must be rt-minilm or rt-smollm, got {task!r}")
    level = "quick" if quick else "full"
    ranks = {"matched": MATCHED} if quick else {"matched": MATCHED, "usual": USUAL}
    out: list[BenchRun] = []
    for label, table in ranks.items():
        for method, rank in table.items():
            base = {**SCHEDULE, "method": method, "lora.rank": rank}
            arms = [(f"{method}-r{rank}-{label}-nodp", base)]
            arms += [(f"{method}-r{rank}-{label}-eps{eps:g}",
                      {**base, "dp.enabled": True, "dp.target-epsilon": eps})
                     for eps in EPSILONS[level]]
            for arm, cfg in arms:
                for lr in LR_GRID[level]:
                    for seed in SEEDS[level]:
                        out.append(BenchRun(f"{arm}-lr{lr:g}-s{seed}",
                                            {**cfg, "lr": lr, "seed": seed}, clients=CLIENTS,
                                            group=f"{arm}-lr{lr:g}"))
    if not quick:
        gsm = {"task": "gsm-smollm", "num-server-rounds": 2, "local-steps": 4, "batch-size": 4,
               "lr": 0.001, "partition": "iid", "seed": 0}
        out.append(BenchRun("gsm-fed-sb-r16", {**gsm, "method": "fed-sb", "lora.rank": 16},
                            clients=4))
        out.append(BenchRun("gsm-ffa-lora-r8", {**gsm, "method": "ffa-lora", "lora.rank": 8},
                            clients=4))
    return out


def _smollm_base(method: str, label: str, lr: float) -> dict[str, Any]:
    """The config of ``method``'s non-private rt-smollm run of schedule ``label`` at ``lr``."""
    return {**SMOLLM["schedule"], "local-steps": SMOLLM["variants"][label]["local-steps"],
            "method": method, "lora.rank": SMOLLM["rank"], "lr": lr,
            "dp.max-grad-norm": SMOLLM["clip"][method]}


def smollm_runs() -> list[BenchRun]:
    """rt-smollm: each method at rank 8, its preset lr and clip, non-private and private, per
    schedule of ``SMOLLM["variants"]``; then the lr grid of :data:`SMOLLM_TUNING`."""
    out: list[BenchRun] = []
    rank = SMOLLM["rank"]
    for label, variant in SMOLLM["variants"].items():
        for method, lr in SMOLLM["lr"].items():
            base = _smollm_base(method, label, lr)
            arm = f"{method}-r{rank}-{label}"
            levels = [("nodp", base)] + [(f"eps{eps:g}", {**base, "dp.enabled": True,
                                                         "dp.target-epsilon": eps})
                                        for eps in variant["epsilons"]]
            for level, cfg in levels:
                for seed in variant["seeds"]:
                    out.append(BenchRun(f"{arm}-{level}-lr{lr:g}-s{seed}", {**cfg, "seed": seed},
                                        clients=CLIENTS, group=f"{arm}-{level}-lr{lr:g}"))
    tune = SMOLLM_TUNING
    for level in tuning_levels():
        eps = level_epsilon(level)
        private = {} if eps is None else {"dp.enabled": True, "dp.target-epsilon": eps}
        for method in SMOLLM["lr"]:
            arm = f"{method}-r{rank}-{tune['label']}-{level}"
            moved = transferred_lrs(level)
            lrs = tuning_lrs(level) if moved is None else (moved[method],)
            seeds = tune["seeds"] if moved is None else transfer_seeds(level)
            for lr in lrs:
                for seed in seeds:
                    cfg = {**_smollm_base(method, tune["variant"], lr), **level_split(level),
                           **private, "seed": seed}
                    out.append(BenchRun(f"{arm}-lr{lr:g}-s{seed}", cfg, clients=CLIENTS,
                                        group=f"{arm}-lr{lr:g}"))
    return out


def steady_uplink(run_dir: Path) -> float | None:
    """Uplink per client per round after round 1 (Fed-SB's round 1 also carries its init)."""
    recs = [r for r in read_metrics(run_dir) if r["round"] > 1 and r["clients"]]
    if not recs:
        return None
    return sum(r["up_bytes"] for r in recs) / sum(r["clients"] for r in recs)


def arm_of(run: str) -> tuple[str, float] | None:
    """``"fedit-r2-matched-nodp-lr0.005-s0"`` -> ``("fedit-r2-matched-nodp", 0.005)``."""
    parsed = parse_run(run)
    return None if parsed is None else parsed[:2]


def _mean(xs: list[float]) -> float:
    return sum(xs) / len(xs)


def _spread(xs: list[float]) -> float:
    """Half the range (the ``±`` of the suite's tables)."""
    return (max(xs) - min(xs)) / 2


def tuned(acc: Mapping[str, float]) -> tuple[dict[str, float], dict[str, float],
                                             dict[str, dict[float, float]]]:
    """Per arm: the best seed-mean final accuracy over its grid, the lr that gave it, the grid.

    Ties go to the smaller lr (the grid is scanned in increasing order).
    """
    grid, _ = seeds_by_lr(acc)
    best: dict[str, float] = {}
    chosen: dict[str, float] = {}
    for arm, by_lr in grid.items():
        lr = max(sorted(by_lr), key=lambda x: by_lr[x])
        best[arm], chosen[arm] = by_lr[lr], lr
    return best, chosen, grid


def seeds_by_lr(acc: Mapping[str, float]) -> tuple[dict[str, dict[float, float]],
                                                   dict[str, dict[float, dict[int, float]]]]:
    """Per arm and lr: the mean over seeds, and each seed's accuracy (seed -1: no suffix)."""
    per_seed: dict[str, dict[float, dict[int, float]]] = {}
    for run, a in acc.items():
        parsed = parse_run(run)
        if parsed is not None:
            arm, lr, seed = parsed
            per_seed.setdefault(arm, {}).setdefault(lr, {})[-1 if seed is None else seed] = a
    means = {arm: {lr: _mean(list(s.values())) for lr, s in by_lr.items()}
             for arm, by_lr in per_seed.items()}
    return means, per_seed


def setting(label: str) -> str:
    """How a claim names a run label: ``matched ranks``, ``usual ranks``, ``rt-smollm, r=8``
    (2 x 5 steps), ``rt-smollm, r=8, 2x10 steps``."""
    if label not in SMOLLM["variants"]:
        return f"{label} ranks"
    steps = SMOLLM["variants"][label]["local-steps"]
    rounds = SMOLLM["schedule"]["num-server-rounds"]
    return f"rt-smollm, r={SMOLLM['rank']}" + ("" if label == "smollm"
                                               else f", {rounds}x{steps} steps")


def smollm_label(arm: str) -> str | None:
    """The rt-smollm run label in an arm's name (``fedit-r8-smollm10-eps3`` -> ``smollm10``)."""
    return next((v for v in SMOLLM["variants"] if f"-{v}-" in arm), None)


def eval_rows(label: str) -> int:
    """Held-out rows behind the accuracies of a run label's runs (rt-smollm: 400)."""
    return SMOLLM_EVAL_ROWS if label in SMOLLM["variants"] else EVAL_ROWS


def _verdict(diff: float, claim_holds: bool, floor: float = 0.0, *, terms: int = 2,
             seeds: int = 1, rows: int = EVAL_ROWS) -> str:
    """'holds' / 'does not hold', or 'inconclusive' within two binomial standard errors.

    ``diff`` is a signed sum of ``terms`` accuracies near 0.5, each a mean over ``seeds`` runs
    (2 for a difference of accuracies, 4 for a difference of drops) on ``rows`` evaluation rows;
    ``floor`` raises the noise floor (the seed spread of the difference).
    """
    se = math.sqrt(terms * 0.25 / (rows * max(seeds, 1)))
    if abs(diff) < max(2 * se, floor):
        why = (f"the seed spread {floor:.3f}" if floor > 2 * se
               else f"2 standard errors = {2 * se:.3f}")
        return f"inconclusive (|difference| {abs(diff):.3f} < {why})"
    return HOLDS if claim_holds else FAILS


def degradation_checks(acc: Mapping[str, float], label: str, table: Mapping[str, int]
                       ) -> list[tuple[str, str, str]]:
    """``(claim, verdict, measured)`` of the papers' DP ordering, per epsilon.

    An arm's drop is its non-private accuracy minus its private one, each at its own chosen lr,
    averaged over the seeds that all four compared runs share (seed means when they share none,
    so that a private arm run on fewer seeds is compared like for like). "X degrades less than
    FedIT" holds when FedIT's drop exceeds X's by more than the noise floor: two binomial
    standard errors of a difference of drops (four accuracies, each a mean over the seeds), or
    the spread over seeds of the per-seed difference of drops when that is larger (each seed's
    runs at the chosen lrs).
    """
    means, per_seed = seeds_by_lr(acc)
    _, chosen, _ = tuned(acc)
    out: list[tuple[str, str, str]] = []
    eps_keys = sorted({a.rsplit("-", 1)[1] for a in means if f"-{label}-eps" in a},
                      key=lambda k: float(k[3:]))

    def at_chosen(arm: str) -> dict[int, float]:
        return per_seed[arm][chosen[arm]]

    for key in eps_keys:
        names = {m: (f"{m}-r{r}-{label}-nodp", f"{m}-r{r}-{label}-{key}") for m, r in table.items()}
        if not all(a in means for pair in names.values() for a in pair):
            continue
        seed_drop = {m: {s: at_chosen(p)[s] - at_chosen(d)[s]
                         for s in at_chosen(p).keys() & at_chosen(d).keys()}
                     for m, (p, d) in names.items()}
        for m, short in (("ffa-lora", "FFA-LoRA"), ("fed-sb", "Fed-SB")):
            if m not in names:
                continue
            common = sorted(seed_drop["fedit"].keys() & seed_drop[m].keys())
            if common:  # both drops over the same seeds: like for like
                drop = {k: _mean([seed_drop[k][s] for s in common]) for k in ("fedit", m)}
            else:
                drop = {k: means[names[k][0]][chosen[names[k][0]]]
                        - means[names[k][1]][chosen[names[k][1]]] for k in ("fedit", m)}
            diff = drop["fedit"] - drop[m]
            paired = [seed_drop["fedit"][s] - seed_drop[m][s] for s in common]
            floor = _spread(paired) if len(paired) > 1 else 0.0
            measured = (f"{key}, {setting(label)}: drop FedIT {drop['fedit']:+.3f} (lr "
                        f"{chosen[names['fedit'][1]]:g}), {short} {drop[m]:+.3f} (lr "
                        f"{chosen[names[m][1]]:g}); per-seed difference of drops "
                        + ", ".join(f"{x:+.3f}" for x in paired))
            out.append((f"{short} degrades less than FedIT under DP ({key}, {setting(label)})",
                        _verdict(diff, diff > 0, floor, terms=4,
                                 seeds=len(paired), rows=eval_rows(label)), measured))
    return out


def learning_checks(acc: Mapping[str, float], zero_shot: float | None = None
                    ) -> list[tuple[str, str, str]]:
    """Whether each private arm ends two standard errors above where it started.

    rt-minilm's arms start at the majority rate (a fresh head); rt-smollm's at the pretrained
    model's ``zero_shot`` accuracy on the same rows (its arms are skipped when it is None).
    """
    best, chosen, _ = tuned(acc)
    out = []
    for arm in sorted(best):
        if "-eps" not in arm:
            continue
        if smollm_label(arm) is not None:
            if zero_shot is None:
                continue
            start, rows, what = zero_shot, SMOLLM_EVAL_ROWS, f"zero-shot {zero_shot:.4f}"
        else:
            start, rows, what = MAJORITY, EVAL_ROWS, f"the majority rate {MAJORITY}"
        se = math.sqrt(start * (1 - start) / rows)
        gain = best[arm] - start
        verdict = HOLDS if gain > 2 * se else FAILS
        out.append((f"{arm} learns (above {what})", verdict,
                    f"{best[arm]:.3f} at lr {chosen[arm]:g}, {gain:+.3f} vs 2 standard "
                    f"errors {2 * se:.3f}"))
    return out


@functools.cache
def _fedkseed_suite() -> ModuleType:
    """The fedkseed suite, loaded once: its zero-shot figures, held-out rows and row cache."""
    return load_suite("fedkseed")


@functools.cache
def _smollm_held_out() -> Any:
    """rt-smollm's 400 held-out rows with the task (the fedkseed suite's), loaded once."""
    return _fedkseed_suite().held_out()


def smollm_zero_shot(out_dir: Path) -> float:
    """The pretrained rt-smollm's accuracy on the held-out rows (the fedkseed suite's round 0,
    cached in ``OUT_DIR/zero_shot.json``; computing it loads the model once)."""
    return float(_fedkseed_suite().zero_shot(out_dir)["accuracy"])


#: (per-row loss, per-row correctness) of a model on rt-smollm's 400 held-out rows.
Rows = tuple["np.ndarray", "np.ndarray"]


class RebuildError(ValueError):
    """A run's model rebuilt from its checkpoint is not the model its central evaluation scored."""


def final_rows(out_dir: Path, run: str, held: Any = None) -> Rows | None:
    """Per-row loss and correctness of an rt-smollm run's final global model (paired tests).

    The runs' metrics keep only means. The model is rebuilt from the run's last checkpoint the
    way its server held it (the strategy's state on the task's pretrained weights, merged
    ``W0 + s delta``: the arrays its central evaluation scored) and evaluated by the task's
    ``row_metrics`` on the same 400 rows (``held``: the fedkseed suite's ``held_out()``, made
    here when None), or on another range of the split (``held_out((start, stop))``: the
    validation rows of :func:`validation_rows`). The rows are cached in ``RUN/rows.npz`` (a
    range: ``RUN/rows_400-1200.npz``; the fedkseed suite's cache) under a digest of the run's
    config, its last evaluated round and the rows, so a folder without its checkpoint (the
    committed runs) still reads them. None when the run has neither, or no evaluated round.

    Raises
    ------
    RebuildError
        If the checkpoint is of another round than the run's last evaluation, or, on the run's
        own rows, the rebuilt model's accuracy differs from the run's own final accuracy
        (nothing is cached then).

    """
    fk = _fedkseed_suite()
    folder = out_dir / run
    scored = [r for r in read_metrics(folder) if isinstance(r.get("accuracy"), int | float)]
    if not (folder / "config.yaml").is_file() or not scored:
        return None
    last = scored[-1]
    config_text = (folder / "config.yaml").read_text()
    held = _smollm_held_out() if held is None else held
    suffix = getattr(held, "suffix", "")  # "" for the runs' own rows
    key = fk.rows_key("lora-final", str(last["round"]).encode(), config_text.encode(),
                      held.fingerprint())
    path = folder / f"rows{suffix}.npz"
    if not (folder / "checkpoint" / "meta.json").is_file():
        rows: Rows | None = fk.read_cached_rows(path, key)
        if rows is not None and not suffix:
            _check_rebuild(run, rows, last)
        return rows

    def compute() -> Rows:
        rnd, got = _rebuild_rows(folder, config_text, held)
        if rnd != last["round"]:
            raise RebuildError(f"{run}: the checkpoint is of round {rnd}, the last evaluation "
                               f"of round {last['round']}")
        if not suffix:
            _check_rebuild(run, got, last)
        return got

    return fk.cached_rows(path, key, compute)  # type: ignore[no-any-return]


def validation_rows(out_dir: Path, run: str, validation: Any, held: Any = None) -> Rows | None:
    """``run``'s final model on the ``validation`` rows (:func:`final_rows` on a range of the
    split), once the same rebuilt model has scored the run's own accuracy on its own rows
    (``held``, the runs' 400 rows, made when None). None when either is unavailable.

    Raises
    ------
    RebuildError
        If the rebuilt model is not the run's (:func:`final_rows`).

    """
    if final_rows(out_dir, run, held) is None:
        return None
    return final_rows(out_dir, run, validation)


@functools.cache
def _smollm_validation() -> Any:
    """The validation rows of :data:`SMOLLM_TUNING` (a range of rt-smollm's split), loaded once."""
    return _fedkseed_suite().held_out(tuple(SMOLLM_TUNING["validation"]))


def tuning_report(out_dir: Path, acc: Mapping[str, float], held: Any = None,
                  validation: Any = None) -> tuple[list[str], list[Check]]:
    """The ``tune10`` grids (:data:`SMOLLM_TUNING`): each method's lr chosen on validation rows,
    per privacy level, then the comparisons at the chosen lrs.

    Per level (non-private, each target epsilon, then the levels on a split), a method gets a
    chosen lr only when every lr of the grid has a final model scored on the validation rows for
    every grid seed (a partial grid would favour the arms run further). "FFA-LoRA (Fed-SB) matches or beats
    FedIT" is judged per level on the 400 result rows at the chosen lrs, over the confirmation
    seeds both were run at there (seeds beyond the grid's; the grid seeds only where there are
    none, named so in the check: their models won the choice, partly by their own training
    noise): unpaired by the suite's rule (two binomial standard errors of one seed, since every
    seed reads the same rows, or the spread of the per-seed differences when that is larger),
    and paired per row (the per-row correctness averaged over those seeds, two paired standard
    errors). Per private level, "FFA-LoRA (Fed-SB) degrades less than FedIT under DP" is judged
    per row as well: each method's drop is its non-private model's correctness at its
    non-private chosen lr minus its private model's at its private chosen lr, over the seeds
    all four runs share (confirmation seeds where there are any), from the non-private level of
    the same split (:func:`dp_reference`). A level on a ``split`` is also judged on "FFA-LoRA
    (Fed-SB) loses less than FedIT to the split": each method's drop from its source level (the
    same privacy, IID) to this one, per row, the same way. Each private level's table is
    followed by what its tuning spent in privacy (:func:`_sweep_privacy_line`: the grid's runs
    composed, since the choice releases all of them). ``held`` and ``validation``:
    the rows (made on first need when None). Returns the markdown lines and the checks; nothing
    when no tuning run is in ``acc``.
    """
    tune = SMOLLM_TUNING
    _, per_seed = seeds_by_lr(acc)
    levels = tuning_levels()
    for level in levels:
        source = transfer_source(level)
        if source is not None and (source not in levels
                                   or levels.index(source) > levels.index(level)):
            raise ValueError(f"{level} reuses {source}'s choices, which must be made first: "
                             "a tuned level listed earlier in SMOLLM_TUNING")
    arms = {(m, level): f"{m}-r{SMOLLM['rank']}-{tune['label']}-{level}"
            for level in levels for m in SMOLLM["lr"]}
    if not any(a in per_seed for a in arms.values()):
        return [], []
    cache: dict[tuple[str, bool], Rows | str | None] = {}  # a failed rebuild: its message

    def rows_of(run: str, on_validation: bool) -> Rows | str | None:
        """A run's rows (validation or result rows), the message of a failed rebuild, or None
        where there are none; each computed once."""
        nonlocal held, validation
        if (run, on_validation) in cache:
            return cache[run, on_validation]
        if (out_dir / run / "config.yaml").is_file():  # loads the task only when needed
            held = _smollm_held_out() if held is None else held
            validation = _smollm_validation() if validation is None else validation
        got: Rows | str | None = None
        if held is not None:
            try:
                got = (validation_rows(out_dir, run, validation, held) if on_validation
                       else final_rows(out_dir, run, held))
            except RebuildError as exc:
                got = str(exc)
        cache[run, on_validation] = got
        return got

    chosen: dict[str, float] = {}  # arm -> its chosen lr
    start, stop = tune["validation"]
    lines = [f"Each method's lr on its level's grid (the same for every method), chosen on "
             f"held-out rows {start}-{stop - 1} (validation; seeds "
             f"{', '.join(map(str, tune['grid-seeds']))}), its result read "
             f"on the {SMOLLM_EVAL_ROWS} result rows (cells: validation / result accuracy of "
             "the grid seeds; the chosen lr's result over every seed run at it):", ""]
    why_not: dict[str, str] = {}  # a transferred arm without a choice: why
    for level in levels:
        level_arms = {m: arms[m, level] for m in SMOLLM["lr"]}
        if not any(a in per_seed for a in level_arms.values()):
            continue
        moved, source = transferred_lrs(level), transfer_source(level)
        if moved is not None and source is not None:
            source_arms = {m: arms[m, source] for m in SMOLLM["lr"]}
            lines += _transferred_table(level, source, level_arms, moved, source_arms,
                                        chosen, why_not, per_seed)
            if level_epsilon(level) is not None:
                lines += [_transfer_privacy_line(out_dir, level, source, level_arms,
                                                 source_arms, moved, acc), ""]
            continue
        lrs = tuning_lrs(level)
        lines += [f"{level_name(level)}:", "",
                  "| method | " + " | ".join(f"lr {lr:g}" for lr in lrs)
                  + " | chosen lr | result at the chosen lr (seeds) |",
                  "|---|" + "---|" * (len(lrs) + 2)]
        for m, arm in level_arms.items():
            val: dict[float, float] = {}
            for lr in lrs:
                scores = []
                for seed in tune["grid-seeds"]:
                    run = f"{arm}-lr{lr:g}-s{seed}"
                    got = rows_of(run, True) if run in acc else None  # a run of this report
                    if not isinstance(got, tuple):
                        break
                    scores.append(float(got[1].mean()))
                else:
                    val[lr] = _mean(scores)
            if len(val) == len(lrs):
                chosen[arm] = max(sorted(val), key=lambda x: val[x])
            lines.append(f"| {m} | " + " | ".join(_tuning_cell(val.get(lr), per_seed, arm, lr)
                                                  for lr in lrs)
                         + f" | {_chosen_cell(arm, chosen, per_seed)} |")
        lines.append("")
        if level != "nodp":
            lines += [_sweep_privacy_line(out_dir, level, level_arms, acc), ""]

    checks: list[Check] = []
    for level in levels:
        if not any(arms[m, level] in per_seed for m in SMOLLM["lr"]):
            continue
        source = transfer_source(level)
        setting_ = (f"{setting(tune['variant'])}, each at its lr chosen on validation rows"
                    if source is None
                    else f"{setting(tune['variant'])}, each at its {level_name(source)} choice")
        for m, short in (("ffa-lora", "FFA-LoRA"), ("fed-sb", "Fed-SB")):
            claim = f"{m} matches or beats FedIT ({setting_}, {level_name(level)})"
            paired_claim = claim[:-1] + "; paired per row)"
            pair = (arms[m, level], arms["fedit", level])
            if not all(a in chosen for a in pair):
                why = "; ".join(
                    f"{k}: {why_not.get(arms[k, level]) or _no_choice(arms[k, level], per_seed)}"
                    for k in ("fedit", m) if arms[k, level] not in chosen)
                checks += [Check(c, NOT_MEASURED, f"no chosen lr ({why})")
                           for c in (claim, paired_claim)]
            else:
                checks += _tuned_comparison(claim, paired_claim, (m, short), pair, chosen,
                                            per_seed, rows_of)
            # (claim, the level the drop is from or why there is none, the two sides' names)
            drops: list[tuple[str, str | None, tuple[str, str]]] = []
            if level_epsilon(level) is not None:
                drops.append((f"{short} degrades less than FedIT under DP ({level_name(level)}, "
                              f"{setting_}; paired per row)", dp_reference(level),
                              ("non-private", "private")))
            split = level_split(level)
            if split and source is not None:
                drops.append((f"{short} loses less than FedIT to the {split_name(split)} "
                              f"({level_name(source)}, {setting_}; paired per row)", source,
                              ("IID", split_name(split))))
            for drop_claim, origin, sides in drops:
                if origin is None:
                    checks.append(Check(drop_claim, NOT_MEASURED, "no non-private level on the "
                                        f"{split_name(split)} is declared"))
                    continue
                quad = (arms[m, origin], pair[0], arms["fedit", origin], pair[1])
                missing = [a for a in quad if a not in chosen]
                if missing:
                    checks.append(Check(drop_claim, NOT_MEASURED, "no chosen lr (" + "; ".join(
                        f"{a}: {why_not.get(a) or _no_choice(a, per_seed)}" for a in missing)
                        + ")"))
                else:
                    checks.append(_tuned_degradation(drop_claim, short, quad, chosen, per_seed,
                                                     rows_of, sides))
    lines += [*(f"- rebuild failed: {p}" for p in cache.values() if isinstance(p, str)), ""]
    return lines, checks


def _transferred_table(level: str, source: str, level_arms: Mapping[str, str],
                       moved: Mapping[str, float], source_arms: Mapping[str, str],
                       chosen: dict[str, float], why_not: dict[str, str],
                       per_seed: Mapping[str, Mapping[float, Mapping[int, float]]]) -> list[str]:
    """A ``transfer`` level's table: each method at the lr declared for it, which counts as its
    choice (into ``chosen``) only where it was run and while ``source``'s grid still chooses
    that lr (else the reason goes into ``why_not``)."""
    lines = [f"{level_name(level)}: no grid of its own; each method at the lr the "
             f"{level_name(source)} grid chose for it, declared before these runs "
             "(`SMOLLM_TUNING[\"transfer\"]`):", "",
             f"| method | declared lr | {level_name(source)}'s choice now | result at the "
             "declared lr (seeds) |", "|---|---|---|---|"]
    for m, arm in level_arms.items():
        lr, now = moved[m], chosen.get(source_arms[m])
        at = per_seed.get(arm, {}).get(lr, {})
        if now is None:
            why_not[arm] = (f"{level_name(source)} has no choice for it to confirm the declared "
                            f"lr {lr:g}")
        elif now != lr:
            why_not[arm] = f"{level_name(source)} now chooses {now:g}, not the declared {lr:g}"
        elif not at:
            why_not[arm] = f"not run at the declared lr {lr:g}"
        else:
            chosen[arm] = lr
        result = (f"{_mean(list(at.values())):.4f} ({', '.join(map(str, sorted(at)))})" if at
                  else "— (not run)")
        lines.append(f"| {m} | {lr:g} | {'—' if now is None else f'{now:g}'} | {result} |")
    return [*lines, ""]


def _transfer_privacy_line(out_dir: Path, level: str, source: str,
                           level_arms: Mapping[str, str], source_arms: Mapping[str, str],
                           moved: Mapping[str, float], acc: Mapping[str, float]) -> str:
    """What a user who chose a transferred level's lrs this way would release.

    ``source``'s grid runs and a run of this level deal the same pool of training rows out
    among the same clients (an IID split gives every seed the same blocks; a level's ``split``
    deals the pool anew), so they read the same records: for them, the grid's runs and the run
    compose. Per method, the composition of the grid's runs with the costliest of this level's
    runs (:func:`bouquet.privacy.accountant.sweep_epsilon`, each run's worst client), read as
    :func:`_sweep_privacy_line` reads the grid.
    """
    from bouquet.privacy.accountant import sweep_epsilon

    tune = SMOLLM_TUNING
    delta = float(SMOLLM["schedule"]["dp.delta"])
    parts = []
    for m, arm in level_arms.items():
        grid = [f"{source_arms[m]}-lr{lr:g}-s{s}" for lr in tuning_lrs(source)
                for s in tune["grid-seeds"]]
        own = [run for s in transfer_seeds(level)
               if (run := f"{arm}-lr{moved[m]:g}-s{s}") in acc]
        if not own or any(run not in acc for run in grid):
            parts.append(f"{m} — ({level_name(source)} grid or {level_name(level)} runs "
                         "missing)")
            continue
        histories = _histories(out_dir, grid + own)
        if isinstance(histories, str):
            parts.append(f"{m} — ({histories})")
            continue
        graded, runs_ = histories[:len(grid)], histories[len(grid):]
        alone = max(_run_epsilon(r, delta) for r in runs_)
        together = max(sweep_epsilon([*graded, r], delta) for r in runs_)
        parts.append(f"{m} {together:.2f} ({level_name(level)} run alone {alone:.2f})")
    return (f"Privacy: a {level_name(level)} run's epsilon covers that run alone. Its lr comes "
            f"from the {level_name(source)} grid, whose runs read the same pool of training "
            "rows, so a user who chose lrs this way releases, for those rows, the "
            f"{level_name(source)} grid's runs and the run together; "
            f"composed at delta {delta:g} (RDP, each run's clients maxed order by order, the "
            "costliest run of the level): " + "; ".join(parts) + ".")


def _run_epsilon(clients: list[list[tuple[float, float, int]]], delta: float) -> float:
    """One run's epsilon from its clients' histories: its worst client's own.

    Within one run a row sits on one client, so the run spends what that client spends. The
    clients' curves maxed order by order (:func:`~bouquet.privacy.accountant.sweep_epsilon`
    of the run) also bound it, but more loosely where clients differ (a label-Dirichlet split's
    sampling rates): that bound is for rows that move between clients across runs.
    """
    from bouquet.privacy.accountant import sweep_epsilon

    return max(sweep_epsilon([[history]], delta) for history in clients)


def _histories(out_dir: Path, runs: list[str]
               ) -> list[list[list[tuple[float, float, int]]]] | str:
    """Each run's clients' accountant histories (:func:`spent_histories`), or why they cannot
    be counted (an unreadable or inconsistent state, a run with none)."""
    from bouquet.clients.persistence import StateRestoreError

    try:
        spent = [spent_histories(out_dir, run) for run in runs]
    except (StateRestoreError, ValueError, KeyError, TypeError, OSError) as exc:
        return f"unreadable client state: {exc}"
    got = [h for h in spent if h is not None]
    return got if len(got) == len(runs) else "no client histories for every run"


def _sweep_privacy_line(out_dir: Path, level: str, level_arms: Mapping[str, str],
                        acc: Mapping[str, float]) -> str:
    """What choosing among a private level's grid runs spends: their composed epsilon.

    Every run of a method's grid trains on the same rows (the grid seeds' partitions), and the
    lr is chosen by comparing their models, so a user who tuned this way would have released
    all of them (:func:`bouquet.privacy.accountant.sweep_epsilon`). Read from each run's
    clients' accountant histories (:func:`spent_histories`); a method is left out, with the
    reason, while some grid run has none or they do not account for the run.
    """
    from bouquet.privacy.accountant import sweep_epsilon

    tune = SMOLLM_TUNING
    delta = float(SMOLLM["schedule"]["dp.delta"])
    parts = []
    grid_runs = len(tuning_lrs(level)) * len(tune["grid-seeds"])
    for m, arm in level_arms.items():
        grid = [f"{arm}-lr{lr:g}-s{s}" for lr in tuning_lrs(level) for s in tune["grid-seeds"]]
        if any(run not in acc for run in grid):
            parts.append(f"{m} — (grid incomplete)")
            continue
        runs_ = _histories(out_dir, grid)
        if isinstance(runs_, str):
            parts.append(f"{m} — ({runs_})")
            continue
        costliest = max(_run_epsilon(r, delta) for r in runs_)
        parts.append(f"{m} {sweep_epsilon(runs_, delta):.2f} (costliest single run "
                     f"{costliest:.2f})")
    seeds = ", ".join(map(str, tune["grid-seeds"]))
    return (f"Privacy spent by the tuning itself: a method's {grid_runs} grid runs (grid seeds "
            f"{seeds}) read the same training rows and the choice compares their models, so "
            "tuning this way releases something of each (Papernot and Steinke 2022), bounded "
            f"by their composition at delta {delta:g} (RDP, each run's worst client, order by "
            "order): " + "; ".join(parts) + ". Not counted: the held-out rows that choose, which "
            "no epsilon covers, and the confirmation seeds, which measure the choice (a model "
            "retrained at the chosen lr would add its own run).")


_PARTITION = re.compile(r"^partition-(\d+)$")


def spent_histories(out_dir: Path, run: str) -> list[list[tuple[float, float, int]]] | None:
    """Each client's accountant history of a finished private run, checked against the run.

    Read from the run's saved node state (``RUN/client-state/partition-<id>``,
    :func:`bouquet.clients.persistence.spent_history`) and kept in ``RUN/privacy.json`` under
    a digest of the run's config and reported privacy, so a folder without its node state (the
    committed runs) still has them, and a cache of another run is refused. None when the run
    has neither.

    Raises
    ------
    ValueError
        If the histories do not account for the run: fewer clients than it had, a client that
        recorded nothing, a one-run epsilon below the one the run reported, or a stale cache.
    StateRestoreError
        If a saved version is corrupt.

    """
    import hashlib
    import json

    from bouquet.clients.persistence import spent_history
    from bouquet.privacy.history import parse_history
    from bouquet.strategies.checkpoint import atomic_write

    folder = out_dir / run
    summary = json.loads((folder / "summary.json").read_text())
    privacy = summary["privacy"]
    key = hashlib.sha256((folder / "config.yaml").read_bytes()
                         + repr((privacy["epsilon"], privacy["delta"])).encode()).hexdigest()
    states = {int(m[1]): p for p in (folder / "client-state").glob("partition-*")
              if (m := _PARTITION.match(p.name))}
    cache = folder / "privacy.json"
    if states:
        got = [spent_history(states[pid], pid) for pid in sorted(states)]
    elif cache.is_file():
        data = json.loads(cache.read_text())
        if data.get("key") != key:
            raise ValueError(f"{run}: privacy.json was written for another run (its config or "
                             "reported privacy differ)")
        got = [parse_history(h) for h in data["clients"]]
    else:
        return None
    clients = int(json.loads((folder / "bench.json").read_text())["clients"])
    if len(got) != clients or not all(got):
        raise ValueError(f"{run}: {sum(map(bool, got))} of its {clients} clients have a history")
    one = _run_epsilon(got, float(privacy["delta"]))
    if one < float(privacy["epsilon"]) - 1e-6:
        raise ValueError(f"{run}: the histories give epsilon {one:.4f}, below the "
                         f"{float(privacy['epsilon']):.4f} the run reported")
    if states:
        atomic_write(cache, (json.dumps({"key": key, "clients": got}) + "\n").encode(),
                     fsync=False)
    return got


def tuning_levels() -> list[str]:
    """The levels :data:`SMOLLM_TUNING` runs: ``nodp``, then ``eps<e>`` per epsilon, then the
    ``transfer`` levels that are not privacy levels (a split's), in their declared order."""
    tune = SMOLLM_TUNING
    levels = ["nodp", *(f"eps{eps:g}" for eps in tune["epsilons"])]
    return [*levels, *(k for k in tune.get("transfer", {}) if k not in levels)]


def tuning_lrs(level: str) -> tuple[float, ...]:
    """The lr grid of one tuning level: the shared grid, then the level's ``beyond`` steps;
    none for a level that reuses another's choices (:func:`transferred_lrs`)."""
    tune = SMOLLM_TUNING
    if transferred_lrs(level) is not None:
        return ()
    return (*tune["lrs"], *tune["beyond"].get(level, ()))


def _transfer(level: str) -> Mapping[str, Any] | None:
    """A ``transfer`` level's declaration in :data:`SMOLLM_TUNING`; None for a tuned level."""
    moved: Mapping[str, Any] | None = SMOLLM_TUNING.get("transfer", {}).get(level)
    return moved


def transferred_lrs(level: str) -> dict[str, float] | None:
    """Per method, the lr a ``transfer`` level runs at (another level's choice, declared before
    its runs); None for a level tuned on its own grid."""
    moved = _transfer(level)
    return None if moved is None else dict(moved["lrs"])


def transfer_source(level: str) -> str | None:
    """The level whose chosen lrs a ``transfer`` level reuses; None for a tuned level."""
    moved = _transfer(level)
    return None if moved is None else str(moved["from"])


def level_split(level: str) -> dict[str, Any]:
    """The partition keys a level's runs override (a ``split``): none for the IID levels."""
    moved = _transfer(level)
    return {} if moved is None else dict(moved.get("split", {}))


def level_epsilon(level: str) -> float | None:
    """A level's target epsilon: None for ``nodp``, ``e`` for ``eps<e>``; a level with a
    ``split`` keeps its source's.

    Raises
    ------
    ValueError
        If a level without a split is named neither ``nodp`` nor ``eps<e>``.

    """
    moved = _transfer(level)
    if moved is not None and "split" in moved:
        return level_epsilon(str(moved["from"]))
    if level == "nodp":
        return None
    if not re.fullmatch(r"eps\d+(\.\d+)?", level):
        raise ValueError(f"level {level!r}: a level without a split is nodp or eps<e>")
    return float(level.removeprefix("eps"))


def transfer_seeds(level: str) -> tuple[int, ...]:
    """The seeds a ``transfer`` level runs: its own ``seeds``, else the confirmation seeds.

    Raises
    ------
    ValueError
        If ``level`` is a tuned level (it runs every seed of :data:`SMOLLM_TUNING`).

    """
    moved = _transfer(level)
    if moved is None:
        raise ValueError(f"{level} is a tuned level, not a transfer one")
    return tuple(moved["seeds"]) if "seeds" in moved else confirmation_seeds()


def dp_reference(level: str) -> str | None:
    """The non-private level a private level's drop under DP is read from: the one with the
    same split (``nodp`` for the IID levels); None for a non-private level or where none is
    declared."""
    if level_epsilon(level) is None:
        return None
    split = level_split(level)
    return next((lv for lv in tuning_levels()
                 if level_epsilon(lv) is None and level_split(lv) == split), None)


def confirmation_seeds() -> tuple[int, ...]:
    """The tuning's seeds that chose nothing: those the comparisons read."""
    tune = SMOLLM_TUNING
    return tuple(s for s in tune["seeds"] if s not in tune["grid-seeds"])


def split_name(split: Mapping[str, Any]) -> str:
    """How a claim names a split: ``Dirichlet 0.5 split`` (``partition`` and its key)."""
    if split.get("partition") == "dirichlet":
        return f"Dirichlet {float(split['dirichlet-alpha']):g} split"
    return f"{split.get('partition', 'iid')} split"


def level_name(level: str) -> str:
    """How a claim names a level: ``non-private`` or ``eps3``, after its split where it has one
    (``Dirichlet 0.5 split, eps3``)."""
    eps = level_epsilon(level)
    privacy = "non-private" if eps is None else f"eps{eps:g}"
    split = level_split(level)
    return f"{split_name(split)}, {privacy}" if split else privacy


def _tuning_cell(val: float | None, per_seed: Mapping[str, Mapping[float, Mapping[int, float]]],
                 arm: str, lr: float) -> str:
    """A grid cell: validation / result accuracy of the grid seeds (``—`` where missing)."""
    grid = [per_seed.get(arm, {}).get(lr, {}).get(s) for s in SMOLLM_TUNING["grid-seeds"]]
    result = "—" if None in grid else f"{_mean([float(g) for g in grid if g is not None]):.4f}"
    return f"{'—' if val is None else f'{val:.4f}'} / {result}"


def _chosen_cell(arm: str, chosen: Mapping[str, float],
                 per_seed: Mapping[str, Mapping[float, Mapping[int, float]]]) -> str:
    """The chosen lr and its result over every seed run at it, or why there is none."""
    if arm not in chosen:
        return f"— ({_no_choice(arm, per_seed)}) | —"
    runs_at = per_seed[arm][chosen[arm]]
    return (f"{chosen[arm]:g} | {_mean(list(runs_at.values())):.4f} "
            f"({', '.join(map(str, sorted(runs_at)))})")


def _judged_seeds(seed_sets: list[set[int]]) -> tuple[list[int], str]:
    """The seeds a tuned comparison reads: those every run has, confirmation seeds first."""
    common = sorted(set.intersection(*seed_sets))
    seeds = [s for s in common if s not in SMOLLM_TUNING["grid-seeds"]] or common
    which = ("confirmation seeds" if set(seeds).isdisjoint(SMOLLM_TUNING["grid-seeds"])
             else "the grid seeds that chose the lrs")
    return seeds, which


def _tuned_comparison(claim: str, paired_claim: str, names: tuple[str, str],
                      pair: tuple[str, str],
                      chosen: Mapping[str, float],
                      per_seed: Mapping[str, Mapping[float, Mapping[int, float]]],
                      rows_of: Callable[[str, bool], Rows | str | None]) -> list[Check]:
    """"X matches or beats FedIT" at the chosen lrs, unpaired and paired per row; ``names``:
    X's method id and display name, ``pair``: the arms of X and of FedIT."""
    method, short = names
    theirs_at, fedit_at = (per_seed[a][chosen[a]] for a in pair)
    seeds, which = _judged_seeds([set(theirs_at), set(fedit_at)])
    if not seeds:  # only a level without a grid seed can get here (a transferred one)
        return [Check(c, NOT_MEASURED, "no seed run by both arms at their chosen lrs")
                for c in (claim, paired_claim)]
    v, fedit = _mean([theirs_at[s] for s in seeds]), _mean([fedit_at[s] for s in seeds])
    diffs = [theirs_at[s] - fedit_at[s] for s in seeds]
    said = _verdict(v - fedit, v >= fedit, _spread(diffs) if len(diffs) > 1 else 0.0,
                    rows=SMOLLM_EVAL_ROWS)
    named = ", ".join(map(str, seeds))
    out = [_as_check(claim, said, f"{method} {v:.4f} (lr {chosen[pair[0]]:g}) vs FedIT "
                                  f"{fedit:.4f} (lr {chosen[pair[1]]:g}), {which} {named}")]
    got = _seed_rows(pair, seeds, chosen, rows_of)
    if isinstance(got, str):
        return [*out, Check(paired_claim, NOT_MEASURED, f"{which} {seeds}: {got}")]
    theirs, fedit_rows = (_mean_rows(r) for r in got)
    check = improvement_check(paired_claim, paired_change(list(fedit_rows), list(theirs)),
                              lower_is_better=False, name=f"{short} minus FedIT, per row:")
    return [*out, Check(paired_claim, check.verdict, f"{which} {named}; {check.measured}")]


def _tuned_degradation(claim: str, short: str, quad: tuple[str, str, str, str],
                       chosen: Mapping[str, float],
                       per_seed: Mapping[str, Mapping[float, Mapping[int, float]]],
                       rows_of: Callable[[str, bool], Rows | str | None],
                       sides: tuple[str, str] = ("non-private", "private")) -> Check:
    """"X degrades less than FedIT" from one level to another (under DP, or on a split), per
    row, each run at its level's chosen lr.

    ``quad``: X before, X after, FedIT before, FedIT after; ``sides`` names before and after.
    """
    seeds, which = _judged_seeds([set(per_seed[a][chosen[a]]) for a in quad])
    if not seeds:
        return Check(claim, NOT_MEASURED, "no seed run by all four arms at their chosen lrs")
    got = _seed_rows(quad, seeds, chosen, rows_of)
    if isinstance(got, str):
        return Check(claim, NOT_MEASURED, f"{which} {seeds}: {got}")
    plain, private, fedit_plain, fedit_private = (_mean_rows(r) for r in got)
    theirs, fedit = list(plain - private), list(fedit_plain - fedit_private)
    check = improvement_check(claim, paired_change(theirs, fedit), lower_is_better=False,
                              name="FedIT's drop minus " + short + "'s, per row:")
    lrs = ", ".join(f"{chosen[a]:g}" for a in quad)
    return Check(claim, check.verdict,
                 f"{which} {', '.join(map(str, seeds))}; chosen lrs {lrs} ({short} "
                 f"{sides[0]}, {sides[1]}; FedIT {sides[0]}, {sides[1]}); drop FedIT "
                 f"{sum(fedit) / len(fedit):+.4f}, {short} {sum(theirs) / len(theirs):+.4f}; "
                 f"{check.measured}")


def _mean_rows(per_seed: list[np.ndarray]) -> np.ndarray:
    """The row-wise mean of per-seed row vectors."""
    total = per_seed[0].copy()
    for rows in per_seed[1:]:
        total += rows
    return total / len(per_seed)


def _seed_rows(arms: tuple[str, ...], seeds: list[int], chosen: Mapping[str, float],
               rows_of: Callable[[str, bool], Rows | str | None]
               ) -> list[list[np.ndarray]] | str:
    """Per arm, each seed's per-row correctness (floats) at its chosen lr; or why not (the
    failed rebuilds' messages, or that some run has no per-row results)."""
    got = [[rows_of(f"{a}-lr{chosen[a]:g}-s{s}", False) for s in seeds] for a in arms]
    failed = [r for per_arm in got for r in per_arm if isinstance(r, str)]
    if failed:
        return "; ".join(dict.fromkeys(failed))
    usable = [[r[1].astype(float) for r in per_arm if isinstance(r, tuple)] for per_arm in got]
    if any(len(per_arm) < len(seeds) for per_arm in usable):
        return "no per-row results for every seed"
    return usable


def _as_check(claim: str, said: str, measured: str) -> Check:
    """A :func:`_verdict` string as a :class:`Check` (an inconclusive one's reason joins
    ``measured``)."""
    if said.startswith(INCONCLUSIVE):
        return Check(claim, INCONCLUSIVE, measured + said[len(INCONCLUSIVE):])
    return Check(claim, said, measured)


def _no_choice(arm: str, per_seed: Mapping[str, Mapping[float, Mapping[int, float]]]) -> str:
    """Why a tune10 arm has no chosen lr: runs of its grid missing, or no validation rows; for a
    ``transfer`` level with no runs (its table only names the arms of a level that ran), that."""
    tune = SMOLLM_TUNING
    ran = per_seed.get(arm, {})
    level = arm.rsplit("-", 1)[1]
    moved = transferred_lrs(level)
    if moved is not None:
        return f"{level_name(level)} not run at its declared lr"
    if all(s in ran.get(lr, {}) for lr in tuning_lrs(level) for s in tune["grid-seeds"]):
        return "no validation rows for every grid run (no checkpoint, or a rebuild failed)"
    return "grid incomplete"


def _check_rebuild(run: str, rows: Rows, last: Mapping[str, Any]) -> None:
    """Raise :class:`RebuildError` unless ``rows`` score the run's own final accuracy."""
    rebuilt = float(rows[1].mean())
    if abs(rebuilt - float(last["accuracy"])) > 1e-9:
        raise RebuildError(f"{run}: the model rebuilt from its checkpoint scores {rebuilt:.4f}, "
                           f"the run's round {last['round']} {float(last['accuracy']):.4f}")


def _rebuild_rows(folder: Path, config_text: str, held: Any) -> tuple[int, Rows]:
    """(round, rows) of the global model in ``folder``'s checkpoint, on ``held``'s rows."""
    import yaml

    from bouquet.apps.config import resolve
    from bouquet.apps.runner import build_strategy, restore_strategy
    from bouquet.strategies.checkpoint import load_checkpoint
    from bouquet.wire.arrays import to_record

    rnd, state, _ = load_checkpoint(folder / "checkpoint")
    cfg = resolve(yaml.safe_load(config_text))
    task = held.task
    strategy = build_strategy(cfg, to_record(task.initial_arrays(cfg.common.seed)),
                              online_nodes=CLIENTS)
    restore_strategy(strategy, state, folder)
    merged = strategy.merged()  # type: ignore[attr-defined]
    return rnd, held.row_metrics(task.model_from(merged))


def paired_degradation_checks(out_dir: Path, acc: Mapping[str, float], held: Any = None,
                              label: str = "smollm") -> list[Check]:
    """rt-smollm's DP ordering tested per row (secondary to :func:`degradation_checks`).

    Per epsilon and X in FFA-LoRA, Fed-SB: the seeds where all four runs (FedIT and X,
    non-private and private, each at its chosen lr) have per-row results (:func:`final_rows`).
    Per row, each method's drop (non-private minus private correctness) is averaged over those
    seeds; "X degrades less than FedIT" holds when the mean of the per-row difference of drops
    (FedIT's minus X's) exceeds two paired standard errors over the rows, does not hold below
    minus two, and is inconclusive in between. The rows are the unit: the trainings' own
    randomness enters only through the seeds averaged. ``not measured`` without per-row results
    or when a rebuild fails (:class:`RebuildError`, named in the check). ``held``: the rows
    (:func:`final_rows`), made on first need when None; ``label``: the rt-smollm schedule's
    run label (``SMOLLM["variants"]``).
    """
    _, per_seed = seeds_by_lr(acc)
    _, chosen, _ = tuned(acc)
    rank = SMOLLM["rank"]
    eps_keys = sorted({a.rsplit("-", 1)[1] for a in per_seed if f"-{label}-eps" in a},
                      key=lambda k: float(k[3:]))
    cache: dict[str, Rows | RebuildError | None] = {}  # a failed rebuild is not tried again

    def rows(arm: str, seed: int) -> Rows | None:
        nonlocal held
        run = f"{arm}-lr{chosen[arm]:g}-s{seed}"
        if run not in cache:
            if held is None and (out_dir / run / "config.yaml").is_file():
                held = _smollm_held_out()  # loads the task: only when needed
            try:
                cache[run] = None if held is None else final_rows(out_dir, run, held)
            except RebuildError as exc:
                cache[run] = exc
        got = cache[run]
        if isinstance(got, RebuildError):
            raise got
        return got

    def drop(pair: tuple[str, str], seeds: list[int]) -> list[float]:
        """Per row, the non-private minus the private correctness, averaged over ``seeds``."""
        per_seed_rows = []
        for s in seeds:
            plain, private = rows(pair[0], s), rows(pair[1], s)
            assert plain is not None and private is not None  # the seeds are the usable ones
            per_seed_rows.append(plain[1].astype(float) - private[1].astype(float))
        return [float(v) for v in sum(per_seed_rows) / len(per_seed_rows)]

    out: list[Check] = []
    for key in eps_keys:
        names = {m: (f"{m}-r{rank}-{label}-nodp", f"{m}-r{rank}-{label}-{key}")
                 for m in SMOLLM["lr"]}
        if not all(a in chosen for pair in names.values() for a in pair):
            continue
        for m, short in (("ffa-lora", "FFA-LoRA"), ("fed-sb", "Fed-SB")):
            arms = (*names["fedit"], *names[m])
            seeds = sorted(set.intersection(*(set(per_seed[a][chosen[a]]) for a in arms)))
            claim = (f"{short} degrades less than FedIT under DP ({key}, {setting(label)}; "
                     "paired per row)")
            try:
                usable = [s for s in seeds if all(rows(a, s) is not None for a in arms)]
            except RebuildError as exc:
                out.append(Check(claim, NOT_MEASURED, f"rebuild failed: {exc}"))
                continue
            if not usable:
                out.append(Check(claim, NOT_MEASURED, "no per-row results (no checkpoints)"))
                continue
            theirs, fedit = drop(names[m], usable), drop(names["fedit"], usable)
            check = improvement_check(claim, paired_change(theirs, fedit), lower_is_better=False,
                                      name="FedIT's drop minus " + short + "'s, per row:")
            out.append(Check(claim, check.verdict,
                             f"seeds {', '.join(map(str, usable))}; drop FedIT "
                             f"{sum(fedit) / len(fedit):+.4f}, {short} "
                             f"{sum(theirs) / len(theirs):+.4f}; {check.measured}"))
    return out


def averaging_gap_lines(runs: Iterable[str], out_dir: Path) -> list[str]:
    """FedIT's ``averaging_gap`` per round, for every run whose rounds report it.

    The error of averaging A and B apart relative to the exact round update
    (:func:`bouquet.strategies.lora.averaging_gap`), with its parts along and across that update
    where the round reports them (``gap (along / across)``); runs from before the metric
    existed, and the exact methods, have none and are left out.
    """
    rows: dict[str, dict[int, str]] = {}
    for run in runs:
        cells: dict[int, str] = {}
        for r in read_metrics(out_dir / run):
            if r.get("averaging_gap") is None:
                continue
            cell = f"{float(r['averaging_gap']):.4f}"
            if (r.get("averaging_gap_along") is not None
                    and r.get("averaging_gap_across") is not None):
                cell += (f" ({float(r['averaging_gap_along']):+.4f} / "
                         f"{float(r['averaging_gap_across']):.4f})")
            cells[int(r["round"])] = cell
        if cells:
            rows[run] = cells
    if not rows:
        return []
    rounds = sorted({rnd for cells in rows.values() for rnd in cells})
    lines = ["FedIT's averaging gap, ||weighted mean of B_k A_k - mean(B) mean(A)||_F over the "
             "round's exact update (0: exact); in brackets, where reported, its parts along "
             "the exact update (FedIT's step there is 1 - along times as long) and across it, "
             "gap^2 = along^2 + across^2:", "",
             "| run | " + " | ".join(f"round {rnd}" for rnd in rounds) + " |",
             "|---|" + "---|" * len(rounds)]
    for run, cells in rows.items():
        lines.append(f"| {run} | " + " | ".join(cells.get(rnd, "—") for rnd in rounds) + " |")
    return [*lines, ""]


def report(summaries: Mapping[str, Mapping[str, Any]], out_dir: Path) -> str:
    """Per-run table, per-arm tuning, and the papers' predictions with their verdicts."""
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
    lines += averaging_gap_lines(summaries, out_dir)
    tag = f"-{SMOLLM_TUNING['label']}-"
    tune_acc = {run: a for run, a in acc.items() if tag in run}
    acc = {run: a for run, a in acc.items() if tag not in run}  # chosen on validation rows
    best, chosen, grid = tuned(acc)
    _, per_seed = seeds_by_lr(acc)
    lrs = sorted({lr for by_lr in grid.values() for lr in by_lr})
    tuning = ["Each arm at its chosen lr (best seed-mean final-round accuracy over the shared "
              "grid; the selection uses the evaluation rows themselves, the same way for every "
              "arm; ± is half the range over seeds):", "",
              "| arm | chosen lr | final acc | " + " | ".join(f"lr {lr:g}" for lr in lrs) + " |",
              "|---|---|---|" + "---|" * len(lrs)]
    for arm in sorted(grid):
        cells = []
        for lr in lrs:
            seeds = list(per_seed[arm].get(lr, {}).values())
            cells.append("—" if not seeds else f"{_mean(seeds):.3f}" if len(seeds) == 1
                         else f"{_mean(seeds):.3f} ± {_spread(seeds):.3f}")
        tuning.append(f"| {arm} | {chosen[arm]:g} | {best[arm]:.3f} | " + " | ".join(cells)
                      + " |")
    if grid:  # only the tune10 grid ran: its own section below
        lines += ["", "### Tuning", "", *tuning, ""]
    verdicts: list[Check] = []  # the same verdicts, machine-readable (verdicts.json)

    def record(claim: str, said: str, measured: str) -> None:
        verdicts.append(_as_check(claim, said, measured))

    smollm = {m: SMOLLM["rank"] for m in SMOLLM["lr"]}
    labels = [("matched", MATCHED), ("usual", USUAL),
              *((label, smollm) for label in SMOLLM["variants"])]
    for label, table in labels:
        plain = {m: best.get(f"{m}-r{r}-{label}-nodp") for m, r in table.items()}
        fedit = plain["fedit"]
        for m in ("ffa-lora", "fed-sb"):
            v = plain[m]
            if v is not None and fedit is not None:
                record(f"{m} matches or beats FedIT ({setting(label)}, non-private)",
                       _verdict(v - fedit, v >= fedit, rows=eval_rows(label)),
                       f"{m} {v:.3f} vs FedIT {fedit:.3f}")
        for claim, verdict, measured in degradation_checks(acc, label, table):
            record(claim, verdict, measured)
    private_smollm = {smollm_label(arm) for arm in best if "-eps" in arm} - {None}
    zero = smollm_zero_shot(out_dir) if private_smollm else None
    for claim, verdict, measured in learning_checks(acc, zero):
        record(claim, verdict, measured)
    for label in SMOLLM["variants"]:
        if label in private_smollm:
            verdicts += paired_degradation_checks(out_dir, acc, label=label)
    tune_lines, tune_checks = tuning_report(out_dir, tune_acc)
    if tune_lines:
        lines += [f"### Tuning on validation rows ({SMOLLM_TUNING['label']})", "", *tune_lines]
    verdicts += tune_checks
    write_checks(out_dir, "lora", verdicts)
    return "\n".join(["### Per run", "", *lines, "### Checks against the papers", "",
                      *(c.markdown() for c in verdicts)])
