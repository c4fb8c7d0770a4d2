"""Benchmark suite ``robust``: one hostile node against FedAvg's aggregation rules.

digits-mlp, 10 clients (all sampled), 10 rounds of 2 local epochs, seeds 0-1. Partition 0 is
hostile in the runs marked ``rogue``: its train replies carry its model multiplied by 1e4 (a
finite, absurd update) or by -3 (a sign flip that stays within an order of magnitude). Arms:

* aggregator ``mean`` (FedAvg), ``median`` and ``trimmed-mean`` (trim 0.2), each
* without the rogue, with it and the norm screen off (``norm-bound-factor=0``: the
  defence before this suite existed), and with it and the screen on (the default, 10).

The report checks: the screen alone keeps FedAvg within noise of the rogue-free run; without the
screen the mean collapses while median and trimmed mean stay within a few points; the robust
rules cost little accuracy without a rogue.

Run: ``bouquet bench robust --quick --out DIR`` (in-process engine: the faults are injected in
the in-process grid).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from bouquet.apps.bench import BenchRun, lookup
from bouquet.apps.verdicts import Check, write_checks

COLUMNS = ["final.accuracy", "best.accuracy", "comm.up_bytes_total", "time.wall_s"]
AGGREGATORS = ("mean", "median", "trimmed-mean")
ATTACKS = {"none": {}, "x1e4-noscreen": {0: "scale-1e4"}, "x1e4": {0: "scale-1e4"},
           "flip-noscreen": {0: "sign-flip-x3"}, "flip": {0: "sign-flip-x3"}}


def runs(quick: bool) -> list[BenchRun]:
    """Every aggregator against every attack, 2 seeds (quick) or 3."""
    seeds = (0, 1) if quick else (0, 1, 2)
    out = []
    for agg in AGGREGATORS:
        for attack, faults in ATTACKS.items():
            for seed in seeds:
                cfg: dict[str, Any] = {
                    "method": "fedavg", "task": "digits-mlp", "num-server-rounds": 10,
                    "local-epochs": 2, "fraction-train": 1.0, "seed": seed,
                    "fedavg.aggregator": agg, "fedavg.trim-fraction": 0.2,
                }
                if attack.endswith("noscreen"):
                    cfg["norm-bound-factor"] = 0.0
                out.append(BenchRun(f"{agg}-{attack}-s{seed}", cfg, clients=10,
                                    faults=faults))
    return out


def _mean(summaries: Mapping[str, Mapping[str, Any]], prefix: str) -> float:
    vals = [float(lookup(s, "final.accuracy") or 0.0) for k, s in summaries.items()
            if k.rpartition("-s")[0] == prefix]
    return sum(vals) / len(vals) if vals else float("nan")


def report(summaries: Mapping[str, Mapping[str, Any]], out: Path) -> str:
    """Verdicts of the checks named in the module docstring (final accuracy, seed means)."""
    acc = {f"{a}-{t}": _mean(summaries, f"{a}-{t}") for a in AGGREGATORS for t in ATTACKS}
    lines = ["Final accuracy, mean over seeds (rows: aggregator; columns: attack on partition 0):",
             "", "| aggregator | " + " | ".join(ATTACKS) + " |",
             "|---|" + "---|" * len(ATTACKS)]
    for a in AGGREGATORS:
        lines.append(f"| {a} | " + " | ".join(f"{acc[f'{a}-{t}']:.3f}" for t in ATTACKS) + " |")
    clean = acc["mean-none"]
    x1e4 = acc["mean-x1e4-noscreen"]
    robust = [acc[f"{a}-x1e4-noscreen"] for a in AGGREGATORS[1:]]
    plain = [acc[f"{a}-none"] for a in AGGREGATORS[1:]]
    checks = [
        Check.of("norm screen keeps FedAvg within 0.03 of the rogue-free run under x1e4",
                 abs(acc["mean-x1e4"] - clean) <= 0.03, f"{acc['mean-x1e4']:.3f} vs {clean:.3f}"),
        Check.of("without the screen, the mean collapses under x1e4 (below 0.3)", x1e4 < 0.3,
                 f"{x1e4:.3f}"),
        Check.of("without the screen, median and trimmed mean stay within 0.05 of FedAvg's "
                 "rogue-free accuracy under x1e4", all(clean - a <= 0.05 for a in robust),
                 ", ".join(f"{a:.3f}" for a in robust)),
        Check.of("the robust rules cost at most 0.05 without a rogue",
                 all(clean - a <= 0.05 for a in plain), ", ".join(f"{a:.3f}" for a in plain)),
    ]
    write_checks(out, "robust", checks)
    lines += ["", "Checks:", *(c.markdown() for c in checks)]
    return "\n".join(lines)
