"""One rt-smollm arm of the ``fedkseed`` suite at more local steps, over several run seeds.

Issue 14 item 1 asks whether FedKSeed and FedKSeed-Pro improve over zero-shot on rt-smollm. One
trained model's paired standard error counts only the noise of the 400 held-out rows, not the
training's own randomness, so the claim is judged across run seeds. Three commands:

``run``
    Runs the suite's arm (``--arm prompt-fedkseed`` or ``prompt-fedkseed-pro``, the quick
    variant: 4 IID clients, 2 per round, 3 rounds) with ``fedkseed.local-steps`` set to
    ``--steps``, a 30-minute round timeout and the run config key ``seed`` set per seed
    (:func:`seed_run`). Each seed gets its own folder ``OUT/<arm>-s<seed>`` (the run's folder
    inside it), and the suite's report on it is printed: the accuracy verdict, the paired loss
    change against zero-shot and the exact sign test of the answers that changed. The zero-shot
    files of a sibling folder are copied in first, so the pretrained model is evaluated once.
``report``
    The suite's report over the ``prompt-*`` run folders found in ``--out`` (a folder written
    by the suite or by ``run``), e.g. to judge runs made before the report's paired verdicts.
``summarize``
    Reads those folders back (metrics.jsonl, summary.json and the per-row results the report
    cached: ``<arm>/rows.npz`` and ``zero_shot_rows.npz``), prints one table row per seed and the
    one-sample t test across seeds (:func:`scipy.stats.ttest_1samp`) of the per-seed paired loss
    and accuracy changes. ``--prior FILE`` adds seeds measured before (a JSON list of
    :class:`SeedResult` fields; a seed found in ``--out`` wins), ``--seeds`` restricts the test
    to some seeds, ``--save FILE`` writes the seeds tested in the same format.

Run (one lock hold per seed)::

    HF_HUB_OFFLINE=1 BOUQUET_TORCH_THREADS=2 PYTHONPATH=$PWD flock /tmp/heavy.lock timeout 900 \\
        python benchmarks/fedkseed_seeds.py run --arm prompt-fedkseed --steps 40 --seeds 3 \\
        --out /tmp/zo-seeds
    python benchmarks/fedkseed_seeds.py summarize --arm prompt-fedkseed --out /tmp/zo-seeds \\
        --prior benchmarks/seed_results/prompt-fedkseed.json
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import shutil
import sys
from collections.abc import Sequence
from pathlib import Path
from types import ModuleType
from typing import Any

from bouquet.apps.bench import BenchRun, load_suite, lookup, run_inprocess
from bouquet.apps.results import read_metrics
from bouquet.apps.verdicts import paired_change, sign_counts, sign_test_p

#: The rt-smollm arms this script runs.
ARMS = ("prompt-fedkseed", "prompt-fedkseed-pro")
#: Round timeout of every run (s): a 40-step round takes ~3 minutes on the two shared cores.
ROUND_TIMEOUT = 1800.0
#: Zero-shot files the suite's report caches in its output folder (key-checked or task-only).
ZERO_SHOT_FILES = ("zero_shot.json", "zero_shot_rows.npz")


@dataclasses.dataclass(frozen=True)
class SeedResult:
    """What one seed's run measured, against zero-shot on the same held-out rows.

    Attributes
    ----------
    seed : int
        The run config's ``seed``.
    loss_change, loss_se : float
        Mean paired change of the per-row loss (final model minus zero-shot) and its standard
        error over the rows.
    accuracy_change : float
        Mean paired change of correctness: (rows turned right - rows turned wrong) / rows.
    right, wrong : int
        Rows whose answer turned right / wrong.
    accuracy, loss : tuple[float, ...]
        Federated evaluation by round (1, 2, ...).
    wall_s : float
        The run's wall time.
    source : str
        Where the numbers come from (a folder, or a note for transcribed ones).
    zero_shot : tuple[float, ...]
        Zero-shot (accuracy, loss) on the held-out rows the changes are paired against; empty
        where unknown. Seeds tested together must share it (:func:`summarize`).

    """

    seed: int
    loss_change: float
    loss_se: float
    accuracy_change: float
    right: int
    wrong: int
    accuracy: tuple[float, ...] = ()
    loss: tuple[float, ...] = ()
    wall_s: float = float("nan")
    source: str = ""
    zero_shot: tuple[float, ...] = ()


def seed_run(suite: ModuleType, arm: str, steps: int, seed: int) -> BenchRun:
    """The suite's quick ``arm`` with ``steps`` local ZO steps, the round timeout and ``seed``.

    Nothing else of the arm's configuration changes (checked by the tests), so a seed here is
    the suite's arm at that seed.
    """
    if arm not in ARMS:
        raise ValueError(f"arm must be one of {ARMS}, got {arm!r}")
    run: BenchRun = next(r for r in suite.runs(True) if r.name == arm)
    return dataclasses.replace(run, config={**run.config, "fedkseed.local-steps": steps,
                                            "round-timeout": ROUND_TIMEOUT, "seed": seed})


def seed_folder(out: Path, arm: str, seed: int) -> Path:
    """``OUT/<arm>-s<seed>``: the suite's output folder for one seed (the run's folder inside)."""
    return out / f"{arm}-s{seed}"


def _reuse_zero_shot(out: Path, folder: Path) -> None:
    """Copy the zero-shot caches of a sibling seed folder into ``folder`` (where missing).

    The per-row file carries a digest of the held-out rows and the model and is recomputed when
    it does not match; ``zero_shot.json`` depends on the task alone.
    """
    for name in ZERO_SHOT_FILES:
        if (folder / name).is_file():
            continue
        source = next((p for p in sorted(out.glob(f"*/{name}")) if p.parent != folder), None)
        if source is not None:
            shutil.copy2(source, folder / name)


def run_seeds(arm: str, steps: int, seeds: Sequence[int], out: Path) -> None:
    """Run ``arm`` once per seed and print the suite's report on each folder."""
    suite = load_suite("fedkseed")
    out = out.resolve()
    for seed in seeds:
        folder = seed_folder(out, arm, seed)
        folder.mkdir(parents=True, exist_ok=True)
        _reuse_zero_shot(out, folder)
        run = seed_run(suite, arm, steps, seed)
        print(f"[fedkseed_seeds] {arm} steps={steps} seed={seed} -> {folder}", flush=True)
        summary = json.loads(run_inprocess(run, folder).read_text())
        print(suite.report({run.name: summary}, folder), flush=True)


def report_folder(out: Path) -> str:
    """The suite's report over the ``prompt-*`` run folders in ``out`` (summary.json if any)."""
    suite = load_suite("fedkseed")
    out = out.resolve()
    summaries = {d.name: (json.loads((d / "summary.json").read_text())
                          if (d / "summary.json").is_file() else {})
                 for d in sorted(out.iterdir()) if d.is_dir() and d.name.startswith("prompt-")}
    return str(suite.report(summaries, out))


def _rows(path: Path) -> tuple[list[float], list[float]]:
    """(per-row loss, per-row correctness) of a rows file the suite's report cached."""
    import numpy as np

    with np.load(path) as z:
        return [float(v) for v in z["loss"]], [float(v) for v in z["correct"]]


def read_seed(out: Path, arm: str, seed: int) -> SeedResult:
    """One seed's :class:`SeedResult` from its folder (run first, then the suite's report).

    Raises
    ------
    FileNotFoundError
        If the report's per-row files are missing (the run did not finish or was not reported).

    """
    folder = seed_folder(out, arm, seed)
    zero_path, final_path = folder / "zero_shot_rows.npz", folder / arm / "rows.npz"
    for path in (zero_path, final_path):
        if not path.is_file():
            raise FileNotFoundError(f"{path}: run and report seed {seed} first")
    (zero_loss, zero_correct), (loss, correct) = _rows(zero_path), _rows(final_path)
    dl = paired_change(zero_loss, loss)
    da = paired_change(zero_correct, correct)
    right, wrong = sign_counts(zero_correct, correct)
    metrics = [m for m in read_metrics(folder / arm) if isinstance(m.get("accuracy"), int | float)]
    summary_path = folder / arm / "summary.json"
    wall = (lookup(json.loads(summary_path.read_text()), "time.wall_s")
            if summary_path.is_file() else None)
    return SeedResult(seed, dl.mean, dl.se, da.mean, right, wrong,
                      tuple(float(m["accuracy"]) for m in metrics),
                      tuple(float(m["loss"]) for m in metrics if "loss" in m),
                      float(wall) if isinstance(wall, int | float) else float("nan"), str(folder),
                      (sum(zero_correct) / len(zero_correct), sum(zero_loss) / len(zero_loss)))


def read_prior(path: Path) -> list[SeedResult]:
    """Seeds measured before, from a JSON list of :class:`SeedResult` fields."""
    rows: list[dict[str, Any]] = json.loads(path.read_text())
    out = []
    for row in rows:
        row = {**row, "accuracy": tuple(row.get("accuracy", ())),
               "loss": tuple(row.get("loss", ())), "zero_shot": tuple(row.get("zero_shot", ()))}
        out.append(SeedResult(**row))
    return out


@dataclasses.dataclass(frozen=True)
class AcrossSeeds:
    """A one-sample t test of per-seed changes against zero (the training's randomness in it).

    Attributes
    ----------
    name : str
        What changed (``loss``, ``accuracy``).
    n : int
        Number of seeds.
    mean, se : float
        Mean of the per-seed changes and its standard error (sample SD over sqrt(n)).
    t, p : float
        The t statistic and its two-sided p value (n - 1 degrees of freedom).

    """

    name: str
    n: int
    mean: float
    se: float
    t: float
    p: float

    def describe(self) -> str:
        """``loss: -0.0099 +- 0.0031 (SE over 3 seeds), t = -3.25, two-sided p = 0.083``."""
        return (f"{self.name}: {self.mean:+.4f} +- {self.se:.4f} (SE over {self.n} seeds), "
                f"t = {self.t:.2f}, two-sided p = {self.p:.3g} ({self.n - 1} df)")


def across_seeds(name: str, changes: Sequence[float]) -> AcrossSeeds:
    """The one-sample t test (:func:`scipy.stats.ttest_1samp`) of ``changes`` against 0.

    Raises
    ------
    ValueError
        With fewer than two seeds (no spread to test against).

    """
    if len(changes) < 2:
        raise ValueError(f"{name}: a t test across seeds needs at least two, got {len(changes)}")
    from scipy.stats import sem, ttest_1samp

    result = ttest_1samp(list(changes), 0.0)
    mean = sum(changes) / len(changes)
    return AcrossSeeds(name, len(changes), mean, float(sem(list(changes))),
                       float(result.statistic), float(result.pvalue))


def table_row(r: SeedResult) -> str:
    """One markdown row: accuracy and loss by round, paired loss change, sign counts, wall s."""
    p = sign_test_p(r.right, r.wrong)
    wall = "—" if r.wall_s != r.wall_s else f"{r.wall_s:.0f}"
    return (f"| {r.seed} | {' '.join(f'{a:.4f}' for a in r.accuracy)} | "
            f"{' '.join(f'{v:.4f}' for v in r.loss)} | {r.loss_change:+.4f} +- "
            f"{2 * r.loss_se:.4f} | {r.accuracy_change:+.4f} | {r.right} / {r.wrong} ({p:.3g}) | "
            f"{wall} |")


def summarize(results: Sequence[SeedResult]) -> list[str]:
    """The per-seed table and the across-seed t tests of the loss and accuracy changes.

    Raises
    ------
    ValueError
        If two seeds were paired against different zero-shot figures (to 4 decimals, the
        precision of transcribed seeds): their changes are not on the same rows or model.

    """
    baselines = {tuple(round(v, 4) for v in r.zero_shot) for r in results if r.zero_shot}
    if len(baselines) > 1:
        raise ValueError(f"the seeds were measured against different zero-shot figures: "
                         f"{sorted(baselines)}")
    lines = ["| seed | accuracy by round | loss by round | paired loss change +- 2 SE | "
             "accuracy change | turned right / wrong (sign test p) | wall s |",
             "|---|---|---|---|---|---|---|"]
    lines += [table_row(r) for r in sorted(results, key=lambda r: r.seed)]
    if len(results) >= 2:
        seeds = ", ".join(str(r.seed) for r in sorted(results, key=lambda r: r.seed))
        lines += ["", f"Across seeds {seeds}:",
                  "- " + across_seeds("loss", [r.loss_change for r in results]).describe(),
                  "- " + across_seeds("accuracy", [r.accuracy_change for r in results]).describe()]
    return lines


def _seeds(text: str) -> list[int]:
    return [int(s) for s in text.split(",") if s.strip()]


def main(argv: Sequence[str] | None = None) -> int:
    """Command line: ``run``, ``report`` or ``summarize`` (see the module docstring)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    run_p = sub.add_parser("run", help="run the arm once per seed and print the suite's report")
    run_p.add_argument("--steps", type=int, default=40, help="fedkseed.local-steps")
    rep = sub.add_parser("report", help="the suite's report over the run folders in --out")
    rep.add_argument("--out", type=Path, required=True, help="the suite's output folder")
    summ = sub.add_parser("summarize", help="per-seed table and the t test across seeds")
    summ.add_argument("--prior", type=Path, help="JSON list of seeds measured before")
    summ.add_argument("--save", type=Path, help="write the seeds tested as a JSON list here")
    for p in (run_p, summ):
        p.add_argument("--arm", choices=ARMS, default="prompt-fedkseed")
        p.add_argument("--out", type=Path, required=True, help="folder of the per-seed folders")
    run_p.add_argument("--seeds", type=_seeds, required=True, help="comma-separated run seeds")
    summ.add_argument("--seeds", type=_seeds, default=None,
                      help="comma-separated seeds to test (default: every seed found)")
    args = parser.parse_args(argv)
    if args.command == "run":
        run_seeds(args.arm, args.steps, args.seeds, args.out)
        return 0
    if args.command == "report":
        print(report_folder(args.out))
        return 0
    found = sorted(int(p.name.rsplit("-s", 1)[1]) for p in args.out.glob(f"{args.arm}-s*")
                   if p.name.rsplit("-s", 1)[1].isdigit() and (p / args.arm / "rows.npz").is_file())
    results = {s: read_seed(args.out, args.arm, s) for s in found}
    for r in read_prior(args.prior) if args.prior else []:
        results.setdefault(r.seed, r)
    wanted = args.seeds if args.seeds is not None else sorted(results)
    missing = [s for s in wanted if s not in results]
    if missing:
        print(f"no results for seed(s) {missing}", file=sys.stderr)
        return 1
    chosen = [results[s] for s in wanted]
    if args.save:
        rows = ",\n ".join(json.dumps(dataclasses.asdict(r)) for r in chosen)
        args.save.write_text(f"[{rows}]\n")
    try:
        print("\n".join(summarize(chosen)))
    except ValueError as exc:
        print(exc, file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
