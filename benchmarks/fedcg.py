"""Benchmark suite ``fedcg``: simulated time and uplink to a target accuracy, straggler gap.

FedCG (Jiang et al., IEEE INFOCOM 2023) against its ablations under label skew and heterogeneous
clients, through the real ServerApp loop and ClientApp (in-process grid):

* ``fedavg``: random selection, dense updates (``random-topk`` with ``fedcg.uniform-ratio=1``;
  numerically FedAvg, with the same simulated clock as the others), no warm-up;
* ``random-topk-warm``: random selection, uniform top-k at 10 % with error feedback;
* ``select-only``: FedCG's facility-location selection, uniform top-k at 10 %;
* ``lp-only-warm``: random selection, FedCG's LP ratios;
* ``fedcg``: selection and ratio program alternated, with the defaults (convex error term
  ``(1 - theta)/theta``, ``fedcg.error-weight`` 0.01, normalised time weight 0.5, every
  candidate costed from its profile), and ``fedcg-linear``: the earlier linear LP
  (``fedcg.lp-error=linear``, error-weight 0.5, whose ratios swing between regimes);
* ``*-mild``: random vs facility-location selection under milder skew (Dirichlet alpha = 1);
* ``*-fixed``: fedavg, random-topk-warm, select-only, lp-only-warm and fedcg with uplinks fixed
  per client (``fedcg.uplink-per-round=false``), the setting in which the earlier FedCG locked
  in on the same clients.

FedCG's selection needs a warm-up round in which all 100 clients train (charged on the clock and
in bytes). That round is also a full-participation FedAvg step, which helps by itself, so the
random-selection ablations (``-warm``) get the same round (``fedcg.warmup-random``); ``fedavg``
stays plain FedAvg, as in the paper's comparison. The full suite adds ``random-topk`` and
``lp-only`` without the warm-up.

System model (simulation protocol restated from the paper, second-hand): 100 clients, 10 per
round, per-step compute time ~ U[0.1, 0.5] s fixed per client, uplink ~ U[1, 5] Mb/s redrawn per
client and round. The real models are tiny, so the time model charges a **virtual model of 2.8 M
parameters** (AlexNet-sized, as the reference suggests) with 32-bit values plus index bits per
kept coordinate; measured uplink bytes are those of the real model.

Quick: digits-mlp, 2 classes per client (pathological), 40 rounds, seeds 0-2, target 0.8.
Full: fmnist-cnn, same skew, at most 100 rounds, seeds 0-2, target 0.7, ``stop-at-target``: a
run ends at the round that reaches 0.7 (an arm that does not reach it in 100 rounds is "never").
Time, uplink and rounds to the target are those of a full run; best/final accuracy, totals and
per-round means of a stopped run cover its rounds up to the stop (the report says so).

Run: ``python -c "from bouquet.apps.bench import run_suite; from pathlib import Path;
run_suite('fedcg', Path('/tmp/bench-fedcg'), quick=True)"``.
"""

from __future__ import annotations

import json
import statistics
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from bouquet.apps.bench import BenchRun, lookup
from bouquet.apps.verdicts import FAILS, HOLDS, NOT_MEASURED, Check, write_checks

VIRTUAL_PARAMS = 2_800_000
COLUMNS = ["best.accuracy", "time.sim_time_to_target_s", "target.round", "target.up_bytes",
           "time.sim_time_s", "comm.up_bytes_total", "stopped_at_target.round"]
PLOT_METRICS = ["accuracy", "sim_time_cum_s", "straggler_gap_s", "mean_ratio"]

WARM = {"fedcg.warmup-random": True}
MILD = {"partition": "dirichlet", "dirichlet-alpha": 1.0}
ARMS: dict[str, dict[str, Any]] = {
    "fedavg": {"method": "random-topk", "fedcg.uniform-ratio": 1.0},
    "random-topk-warm": {"method": "random-topk", "fedcg.uniform-ratio": 0.1, **WARM},
    "select-only": {"method": "fedcg-select-only", "fedcg.uniform-ratio": 0.1},
    "lp-only-warm": {"method": "fedcg-lp-only", **WARM},
    "fedcg": {"method": "fedcg"},
    "fedcg-linear": {"method": "fedcg", "fedcg.lp-error": "linear", "fedcg.error-weight": 0.5},
    # Milder label skew: does selection matter less?
    "random-topk-warm-mild": {"method": "random-topk", "fedcg.uniform-ratio": 0.1, **WARM,
                              **MILD},
    "select-only-mild": {"method": "fedcg-select-only", "fedcg.uniform-ratio": 0.1, **MILD},
}
#: The main arms again with every client's uplink fixed for the whole run.
FIXED = {"fedcg.uplink-per-round": False}
FIXED_ARMS = ("fedavg", "random-topk-warm", "select-only", "lp-only-warm", "fedcg")
ARMS.update({f"{arm}-fixed": {**ARMS[arm], **FIXED} for arm in FIXED_ARMS})
#: Only in the full suite: the random baselines without the warm-up round.
FULL_ONLY: dict[str, dict[str, Any]] = {
    "random-topk": {"method": "random-topk", "fedcg.uniform-ratio": 0.1},
    "lp-only": {"method": "fedcg-lp-only"},
}


def _setting(quick: bool) -> tuple[dict[str, Any], list[int]]:
    common: dict[str, Any] = {
        "fraction-train": 0.1, "partition": "pathological", "classes-per-client": 2,
        "fedcg.virtual-params": VIRTUAL_PARAMS, "batch-size": 16,
    }
    if quick:
        common.update({"task": "digits-mlp", "num-server-rounds": 40, "local-steps": 20,
                       "lr": 0.05, "target-accuracy": 0.8})
        return common, [0, 1, 2]
    common.update({"task": "fmnist-cnn", "num-server-rounds": 100, "local-steps": 20,
                   "lr": 0.05, "target-accuracy": 0.7, "stop-at-target": True})
    return common, [0, 1, 2]


def runs(quick: bool) -> list[BenchRun]:
    """Every arm for every seed, 100 clients each."""
    common, seeds = _setting(quick)
    arms = ARMS if quick else {**ARMS, **FULL_ONLY}
    return [BenchRun(f"{arm}-s{seed}", {**common, **over, "seed": seed}, clients=100)
            for arm, over in arms.items() for seed in seeds]


def _lines(out_dir: Path, run: str) -> list[dict[str, Any]]:
    path = out_dir / run / "metrics.jsonl"
    return [json.loads(x) for x in path.read_text().splitlines()] if path.is_file() else []


def _mean(xs: list[float]) -> float | None:
    return statistics.fmean(xs) if xs else None


def _fmt(x: float | None, unit: str = "", digits: int = 3) -> str:
    return "—" if x is None else f"{x:.{digits}g}{unit}"


def _to_target(summary: Mapping[str, Any]) -> float | None:
    value = lookup(summary, "time.sim_time_to_target_s")
    return None if value is None else float(value)


def per_seed(summaries: Mapping[str, Mapping[str, Any]]) -> list[str]:
    """Markdown: simulated time to target (round) of every arm and seed ("never": not reached)."""
    arms: dict[str, dict[int, Mapping[str, Any]]] = {}
    for run, summary in summaries.items():
        arm, _, seed = run.rpartition("-s")
        arms.setdefault(arm, {})[int(seed)] = summary
    seeds = sorted({s for by_seed in arms.values() for s in by_seed})
    rows = ["| arm | " + " | ".join(f"seed {s}" for s in seeds) + " |",
            "|---|" + "---|" * len(seeds)]
    for arm, by_seed in arms.items():
        cells = []
        for s in seeds:
            t = _to_target(by_seed[s]) if s in by_seed else None
            cells.append("not run" if s not in by_seed else "never" if t is None else
                         f"{t:.4g} ({lookup(by_seed[s], 'target.round')})")
        rows.append(f"| {arm} | " + " | ".join(cells) + " |")
    return rows


def paired(summaries: Mapping[str, Mapping[str, Any]], mine: str, rival: str) -> str:
    """FedCG against one rival, seed by seed: wins, losses and ties in time to target.

    A seed counts when both arms ran it; reaching the target beats never reaching it, two arms
    that never reach it tie.
    """
    wins = losses = ties = 0
    for run, summary in summaries.items():
        arm, _, seed = run.rpartition("-s")
        other = summaries.get(f"{rival}-s{seed}")
        if arm != mine or other is None:
            continue
        a, b = _to_target(summary), _to_target(other)
        if a == b:  # both never (or the same time)
            ties += 1
        elif b is None or (a is not None and a < b):
            wins += 1
        else:
            losses += 1
    n = wins + losses + ties
    return (f"{mine} vs {rival}: {wins} wins, {losses} losses, {ties} ties over {n} paired seeds"
            if n else f"{mine} vs {rival}: no paired seed")


def report(summaries: Mapping[str, Mapping[str, Any]], out_dir: Path) -> str:
    """Per arm (mean over seeds): time and uplink to target, round time, straggler gap, ratios."""
    arms: dict[str, list[str]] = {}
    for run in summaries:
        arms.setdefault(run.rsplit("-s", 1)[0], []).append(run)
    rows = ["| arm | seeds reaching target | sim time to target (s) | uplink to target (B) | "
            "rounds to target | mean round time (s) | mean straggler gap (s) | gap / round time "
            "| mean keep-ratio |", "|---|---|---|---|---|---|---|---|---|"]
    stats: dict[str, dict[str, float | None]] = {}
    for arm, names in arms.items():
        t_target = [float(v) for n in names
                    if (v := lookup(summaries[n], "time.sim_time_to_target_s")) is not None]
        up_target = [float(v) for n in names
                     if (v := lookup(summaries[n], "target.up_bytes")) is not None]
        r_target = [float(v) for n in names
                    if (v := lookup(summaries[n], "target.round")) is not None]
        lines = [line for n in names for line in _lines(out_dir, n)]
        rt = [float(x["sim_round_time_s"]) for x in lines if "sim_round_time_s" in x]
        gap = [float(x["straggler_gap_s"]) for x in lines if "straggler_gap_s" in x]
        ratio = [float(x["mean_ratio"]) for x in lines if "mean_ratio" in x]
        s = {"t": _mean(t_target) if len(t_target) == len(names) else None,
             "up": _mean(up_target) if len(up_target) == len(names) else None,
             "gap": _mean(gap), "rt": _mean(rt)}
        stats[arm] = s
        rel = (s["gap"] / s["rt"]) if s["gap"] is not None and s["rt"] else None
        rows.append(f"| {arm} | {len(t_target)}/{len(names)} | {_fmt(_mean(t_target))} | "
                    f"{_fmt(_mean(up_target))} | {_fmt(_mean(r_target))} | {_fmt(s['rt'])} | "
                    f"{_fmt(s['gap'])} | {_fmt(rel, '', 2)} | {_fmt(_mean(ratio), '', 2)} |")
    text = ["Means over seeds; time/uplink to target are averaged only when every seed reached "
            "it. Uplink is measured (real model); time charges the virtual model.", "",
            *rows, ""]
    stopped = sorted(n for n, s in summaries.items() if lookup(s, "stopped_at_target.round"))
    if stopped:
        text += [f"{len(stopped)} of {len(summaries)} runs stopped at the round that reached the "
                 "target (stop-at-target): for them best accuracy, total simulated time and "
                 "uplink (the table above) and the mean round time, straggler gap and keep-ratio "
                 "(this table) cover the rounds up to the stop, not the round cap. Time, uplink "
                 "and rounds to the target are unchanged by the stop.", ""]
    text += ["Simulated time to target (s), per seed, with the round that reached it:", "",
             *per_seed(summaries), "", "Paired by seed (time to target; fedcg first):", ""]
    for suffix in ("", "-fixed"):
        for rival in ("select-only", "lp-only-warm", "fedavg"):
            if f"fedcg{suffix}" in arms and f"{rival}{suffix}" in arms:
                text.append(f"- {paired(summaries, f'fedcg{suffix}', f'{rival}{suffix}')}.")
    text += ["", "Checks against what the paper leads us to expect:", ""]

    def ratio_of(a: str, b: str, key: str) -> float | None:
        x, y = stats.get(a, {}).get(key), stats.get(b, {}).get(key)
        return (x / y) if x is not None and y else None

    def verdict(ok: bool, *needed: str) -> str:
        absent = [a for a in needed if a not in stats]
        if absent:
            return f"not measured: {', '.join(absent)} not run"
        missed = [a for a in needed if stats[a]["t"] is None]
        if missed and not ok:
            return f"cannot be checked: {', '.join(missed)} did not reach the target in every seed"
        return "holds" if ok else "does not hold"

    checks: list[Check] = []  # the same verdicts, machine-readable (verdicts.json)

    def check(claim: str, said: str, measured: str) -> None:
        """``said`` is a verdict() text; "not measured: ..." / "cannot be checked: ..." keep why."""
        kind = said if said in (HOLDS, FAILS) else NOT_MEASURED
        checks.append(Check(claim, kind, measured if kind == said else f"{measured}; {said}"))

    speed = ratio_of("fedavg", "fedcg", "t")
    traffic = ratio_of("fedavg", "fedcg", "up")
    said = verdict(bool(speed and speed >= 2.5), "fedavg", "fedcg")
    check("FedCG reaches the target ~3x sooner than FedAvg", said, f"{_fmt(speed, 'x')} sooner")
    text.append(f"- FedCG reaches the target ~3x sooner than FedAvg: measured "
                f"{_fmt(speed, 'x')} ({said}).")
    said = verdict(bool(traffic and traffic >= 2), "fedavg", "fedcg")
    check("FedCG needs several times less uplink to the target", said,
          f"{_fmt(traffic, 'x')} less")
    text.append(f"- FedCG needs several times less uplink to the target: measured "
                f"{_fmt(traffic, 'x')} less ({said}).")
    for base in ("fedavg", "random-topk-warm"):
        g = ratio_of("lp-only-warm", base, "gap")
        ok = g is not None and g < 0.5
        said = "holds" if ok else verdict(False, "lp-only-warm", base)
        check(f"LP alone removes most of the straggler gap (vs {base})", said,
              f"lp-only's mean gap is {_fmt(None if g is None else 100 * g, '%')} of {base}'s")
        text.append(f"- LP alone removes most of the straggler gap (vs {base}): lp-only's mean gap "
                    f"is {_fmt(None if g is None else 100 * g, '%')} of {base}'s ({said}).")
    sel = ratio_of("random-topk-warm", "select-only", "t")
    mild = ratio_of("random-topk-warm-mild", "select-only-mild", "t")
    skew_arms = ("random-topk-warm", "select-only", "random-topk-warm-mild", "select-only-mild")
    said = verdict(bool(sel and mild and sel > mild), *skew_arms)
    check("Selection matters more as label skew grows (same warm-up and uniform ratio)", said,
          f"selection reaches the target {_fmt(sel, 'x')} sooner than random under 2 classes per "
          f"client, {_fmt(mild, 'x')} sooner under Dirichlet(1)")
    text.append(f"- Selection matters more as label skew grows: with the same warm-up and uniform "
                f"ratio, facility-location selection reaches the target {_fmt(sel, 'x')} sooner "
                f"than random under 2 classes per client and {_fmt(mild, 'x')} sooner under "
                f"Dirichlet(1) ({said} for these two levels).")
    lp_gain = ratio_of("select-only", "fedcg", "t")
    text.append(f"- The LP on top of selection (fedcg vs select-only): time to target "
                f"{_fmt(lp_gain, 'x')} shorter (below 1 means slower).")
    for suffix, profile in (("", "uplinks redrawn every round"), ("-fixed", "uplinks fixed")):
        rivals = [f"{a}{suffix}" for a in ("select-only", "lp-only-warm", "fedavg")]
        mine = stats.get(f"fedcg{suffix}", {}).get("t")
        others = {r: stats.get(r, {}).get("t") for r in rivals}
        beaten = [r for r, t in others.items() if t is not None and mine is not None and mine < t]
        missing = [r for r in rivals + [f"fedcg{suffix}"] if r not in stats]
        cells = ", ".join(f"{r} {_fmt(t, ' s')}" for r, t in others.items())
        ok = mine is not None and len(beaten) == len(rivals)
        check(f"FedCG beats select-only, random+LP and FedAvg in simulated time to target "
              f"({profile})", f"not measured: {', '.join(missing)} not run" if missing else
              "holds" if ok else "does not hold", f"fedcg {_fmt(mine, ' s')} vs {cells}")
        text.append(f"- FedCG beats select-only, random+LP and FedAvg in simulated time to "
                    f"target ({profile}): fedcg {_fmt(mine, ' s')} vs {cells} -> "
                    + (f"not measured: {', '.join(missing)} not run" if missing else
                       "holds" if ok else f"**does not hold** (beats {len(beaten)} of 3)") + ".")
    write_checks(out_dir, "fedcg", checks)
    return "\n".join(text)
