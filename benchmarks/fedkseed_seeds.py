"""The rt-smollm arms of the ``fedkseed`` suite, one per run seed, and tests over those seeds.

Issue 14 item 1 asks whether FedKSeed and FedKSeed-Pro improve over zero-shot on rt-smollm. One
trained model's paired standard error counts only the noise of the 400 held-out rows, not the
training's own randomness, so the claim is judged across run seeds. Six commands:

``run``
    Runs the suite's arm (``--arm prompt-fedkseed`` or ``prompt-fedkseed-pro``, or a LoRA arm
    ``prompt-fedit``, ``prompt-ffa-lora``, ``prompt-fed-sb``; the quick variant: 4 IID clients,
    2 per round, 3 rounds) with its local steps set to ``--steps`` (``fedkseed.local-steps``,
    or ``local-steps`` for a LoRA arm; the suite's own when omitted), a 30-minute round timeout
    and the run config key ``seed`` set per seed (:func:`seed_run`). Each seed gets its own
    folder ``OUT/<arm>-s<seed>`` (the run's folder inside it), and the suite's report on it is
    printed: for a ZO arm the accuracy verdict, the paired loss change against zero-shot and
    the exact sign test of the answers that changed; for a LoRA arm its accuracy by round. The zero-shot
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
``confirm``
    Section 9's pre-declared test (RESULTS.md ``## fedkseed``): each seed's final model, rebuilt
    from its accumulator, and the zero-shot model are evaluated centrally on held-out rows
    ``--rows START:STOP`` of the fixed split (:func:`fedkseed.final_rows`,
    :func:`fedkseed.zero_shot_rows`, cached per row range beside the default 400-row files), and
    the paired per-row changes are tested over seeds and rows together (:func:`seed_row_test`,
    :func:`verdict`); the verdict is on the loss, or on the accuracy with ``--primary accuracy``
    (section 12's plan). ``--save-rows FILE`` writes the per-row arrays (float32 losses) and
    ``--prior-rows FILE`` reads them back, so that the test is recomputed without a run; a seed
    found in ``--out`` is evaluated (a heavy job) and must agree with the file where both have it.
``contrast``
    Two arms' per-row files saved by ``confirm --save-rows`` on the same rows (e.g. FedKSeed-Pro
    and FedKSeed), on the files' seeds (the same in both) or those ``--seeds`` names: the
    second's final models minus the first's, seed by seed, and section 9's statistic of those
    differences with a two-sided p, descriptive (:func:`contrast_report`). No model is
    evaluated.
``compare``
    A ZO arm against each LoRA arm at equal wall time and at equal uplink bytes, seed by seed
    and judged over seeds (:func:`compare_arms`; the suite's own comparison made per seed, with
    one wall budget per pair of arms). Reads the finished runs' files, checked to be the suite's
    arms at their seeds; no model is evaluated.

Run (one lock hold per seed)::

    HF_HUB_OFFLINE=1 BOUQUET_TORCH_THREADS=2 PYTHONPATH=$PWD flock /tmp/heavy.lock timeout 900 \\
        python benchmarks/fedkseed_seeds.py run --arm prompt-fedkseed --steps 40 --seeds 3 \\
        --out /tmp/zo-seeds
    python benchmarks/fedkseed_seeds.py summarize --arm prompt-fedkseed --out /tmp/zo-seeds \\
        --prior benchmarks/seed_results/prompt-fedkseed.json
    HF_HUB_OFFLINE=1 BOUQUET_TORCH_THREADS=2 PYTHONPATH=$PWD flock /tmp/heavy.lock \\
        python benchmarks/fedkseed_seeds.py confirm --out /tmp/zo-confirm --rows 400:1600 \\
        --seeds 5,6,7,8,9,10 --save-rows benchmarks/seed_results/prompt-fedkseed-rows-400-1600.npz
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import shutil
import sys
from collections.abc import Sequence
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any, Literal

from bouquet.apps.bench import BenchRun, load_suite, lookup, run_inprocess
from bouquet.apps.results import read_metrics
from bouquet.apps.verdicts import (
    FAILS,
    HOLDS,
    INCONCLUSIVE,
    NOT_MEASURED,
    Check,
    paired_change,
    sign_counts,
    sign_test_p,
)

if TYPE_CHECKING:
    import numpy as np

#: The rt-smollm arms this script runs: the zeroth-order ones, then the LoRA ones.
ZO_ARMS = ("prompt-fedkseed", "prompt-fedkseed-pro")
LORA_ARMS = ("prompt-fedit", "prompt-ffa-lora", "prompt-fed-sb")
ARMS = ZO_ARMS + LORA_ARMS
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


def seed_run(suite: ModuleType, arm: str, steps: int | None, seed: int) -> BenchRun:
    """The suite's quick ``arm`` with ``steps`` local steps (ZO steps for a ZO arm, optimiser
    steps for a LoRA arm; the suite's own where None), the round timeout and ``seed``.

    Nothing else of the arm's configuration changes (checked by the tests), so a seed here is
    the suite's arm at that seed.
    """
    if arm not in ARMS:
        raise ValueError(f"arm must be one of {ARMS}, got {arm!r}")
    run: BenchRun = next(r for r in suite.runs(True) if r.name == arm)
    key = "fedkseed.local-steps" if arm in ZO_ARMS else "local-steps"
    local = {} if steps is None else {key: steps}
    return dataclasses.replace(run, config={**run.config, **local,
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


def run_seeds(arm: str, steps: int | None, seeds: Sequence[int], out: Path) -> None:
    """Run ``arm`` once per seed and print the suite's report on each folder."""
    suite = load_suite("fedkseed")
    out = out.resolve()
    for seed in seeds:
        folder = seed_folder(out, arm, seed)
        folder.mkdir(parents=True, exist_ok=True)
        _reuse_zero_shot(out, folder)
        run = seed_run(suite, arm, steps, seed)
        print(f"[fedkseed_seeds] {arm} steps={'the suite' if steps is None else steps} "
              f"seed={seed} -> {folder}", flush=True)
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


#: The test a pre-declared plan gives its verdict on (:data:`PRIMARY_TESTS`).
Primary = Literal["loss", "accuracy"]
#: Section 9's verdicts beside :data:`bouquet.apps.verdicts.HOLDS` and ``FAILS``.
NOT_SHOWN, NO_VERDICT = "not shown", "no verdict"
#: Section 9: the fewest seeds that get a verdict, and the one-sided level.
MIN_SEEDS, ALPHA = 4, 0.05
#: The tests ``confirm`` can give its verdict on: the loss (sections 9-10, the default) or the
#: accuracy (section 12's plan); the other one is reported as secondary.
PRIMARY_TESTS: tuple[Primary, ...] = ("loss", "accuracy")


@dataclasses.dataclass(frozen=True)
class SeedRowTest:
    """The mean paired change over seeds and rows, with both sources of noise in its SE.

    Attributes
    ----------
    name : str
        What changed (``loss``, ``accuracy``).
    seeds, rows : int
        S and R.
    mean : float
        D, the mean over seeds and rows of ``d[s, r]``.
    se_seed : float
        SD (ddof 1) of the S per-seed means over sqrt(S): the training's randomness.
    se_row : float
        SD (ddof 1) of the R seed-averaged per-row changes over sqrt(R): the rows' sampling.
    se : float
        ``sqrt(se_seed**2 + se_row**2)`` (over-counts the seed x row interaction: errs towards
        "not shown").
    t : float
        ``mean / se``.
    df : int
        S - 1.
    p : float
        One-sided p in the improving direction: ``P(T <= t)`` where lower is better (loss),
        ``P(T >= t)`` where higher is (accuracy); Student's t with ``df``.
    lower_is_better : bool
        The improving direction.

    """

    name: str
    seeds: int
    rows: int
    mean: float
    se_seed: float
    se_row: float
    se: float
    t: float
    df: int
    p: float
    lower_is_better: bool

    @property
    def two_sided_p(self) -> float:
        """``P(|T| >= |t|)``: for a difference with no improving direction (nan where t is)."""
        from scipy.stats import t as student

        return float(2 * student.sf(abs(self.t), self.df))

    def describe(self, *, two_sided: bool = False) -> str:
        """``loss: D = -0.0081, SE_seed 0.0020, SE_row 0.0015, SE 0.0025, t = -3.24 (4 df), ...``
        ending in the one-sided p, or in :attr:`two_sided_p` where ``two_sided``."""
        side = "P(T <= t)" if self.lower_is_better else "P(T >= t)"
        p = f"two-sided p = {self.two_sided_p:.3g}" if two_sided else \
            f"one-sided p = {side} = {self.p:.3g}"
        return (f"{self.name}: D = {self.mean:+.4f} over {self.seeds} seeds x {self.rows} rows, "
                f"SE_seed {self.se_seed:.4f}, SE_row {self.se_row:.4f}, SE {self.se:.4f}, "
                f"t = {self.t:.2f} ({self.df} df), {p}")


def seed_row_test(name: str, changes: Sequence[Sequence[float]], *,
                  lower_is_better: bool) -> SeedRowTest:
    """Section 9's statistic of paired changes ``changes[s][r]`` (S seeds x R rows).

    Raises
    ------
    ValueError
        With fewer than two seeds or rows, or rows of unequal length.

    """
    import numpy as np
    from scipy.stats import t as student

    d = np.asarray(changes, dtype=np.float64)
    if d.ndim != 2 or d.shape[0] < 2 or d.shape[1] < 2:
        raise ValueError(f"{name}: need at least 2 seeds x 2 rows of changes, got shape {d.shape}")
    s, r = d.shape
    se_seed = float(d.mean(axis=1).std(ddof=1)) / s ** 0.5
    se_row = float(d.mean(axis=0).std(ddof=1)) / r ** 0.5
    mean, se = float(d.mean()), (se_seed ** 2 + se_row ** 2) ** 0.5
    t = mean / se if se > 0 else math.copysign(math.inf, mean) if mean else math.nan
    p = float(student.cdf(t, s - 1) if lower_is_better else student.sf(t, s - 1))
    return SeedRowTest(name, s, r, mean, se_seed, se_row, se, t, s - 1, p, lower_is_better)


def verdict(test: SeedRowTest | None, seeds: int) -> str:
    """Section 9's verdict on a test: holds (p < 0.05), does not hold (no improvement at all: D
    on the wrong side of 0 or at it), else not shown; no verdict with fewer than 4 seeds.
    """
    if test is None or seeds < MIN_SEEDS:
        return NO_VERDICT
    if test.p < ALPHA:
        return HOLDS
    worse = test.mean >= 0 if test.lower_is_better else test.mean <= 0
    return FAILS if worse else NOT_SHOWN


@dataclasses.dataclass(frozen=True)
class ConfirmRows:
    """Per-row results of :func:`confirm` on one row range, as saved by ``--save-rows``.

    Attributes
    ----------
    rows : tuple[int, int]
        The held-out range ``[start, stop)``.
    zero_loss, zero_correct : np.ndarray
        The zero-shot model's per-row loss (float32) and correctness (bool), ``(R,)``.
    seeds : tuple[int, ...]
        The seeds, in the order tested.
    loss, correct : np.ndarray
        Each seed's final model: ``(S, R)`` float32 and bool.
    rounds : tuple[int, ...]
        The checkpoint round each final model was rebuilt from.

    """

    rows: tuple[int, int]
    zero_loss: np.ndarray
    zero_correct: np.ndarray
    seeds: tuple[int, ...]
    loss: np.ndarray
    correct: np.ndarray
    rounds: tuple[int, ...]

    def save(self, path: Path) -> None:
        """A compressed npz (float32 losses, bool correctness)."""
        import numpy as np

        np.savez_compressed(path, rows=np.asarray(self.rows), zero_loss=self.zero_loss,
                            zero_correct=self.zero_correct, seeds=np.asarray(self.seeds),
                            loss=self.loss, correct=self.correct, rounds=np.asarray(self.rounds))

    @classmethod
    def load(cls, path: Path) -> ConfirmRows:
        """Read back what :meth:`save` wrote."""
        import numpy as np

        with np.load(path) as z:
            return cls((int(z["rows"][0]), int(z["rows"][1])), z["zero_loss"].copy(),
                       z["zero_correct"].copy(), tuple(int(v) for v in z["seeds"]),
                       z["loss"].copy(), z["correct"].copy(), tuple(int(v) for v in z["rounds"]))


def _as_saved(loss: Any, correct: Any) -> tuple[np.ndarray, np.ndarray]:
    """Per-row arrays at the precision they are saved in (the test is computed from these)."""
    import numpy as np

    return np.asarray(loss, dtype=np.float32), np.asarray(correct, dtype=bool)


def evaluate_rows(out: Path, arm: str, seeds: Sequence[int], rows: tuple[int, int],
                  prior: ConfirmRows | None = None) -> ConfirmRows:
    """The per-row results of ``seeds`` on held-out ``rows``: from ``out`` or from ``prior``.

    A seed whose folder in ``out`` holds a checkpoint is evaluated there (cached,
    :func:`fedkseed.final_rows` on the range, and the zero-shot model once,
    :func:`fedkseed.zero_shot_rows`, in ``out``); the others come from ``prior``.

    Raises
    ------
    ValueError
        If a seed is in neither, if ``prior`` is on other rows, or if a seed (or the zero-shot
        model) evaluated here disagrees with ``prior`` beyond float32 rounding.

    """
    import numpy as np

    if prior is not None and prior.rows != (rows[0], rows[1]):
        raise ValueError(f"the saved rows are {prior.rows}, not {(rows[0], rows[1])}")
    local = [s for s in seeds
             if (seed_folder(out, arm, s) / arm / "checkpoint" / "meta.json").is_file()]
    missing = [s for s in seeds if s not in local and (prior is None or s not in prior.seeds)]
    if missing:
        raise ValueError(f"no run or saved rows for seed(s) {missing}")
    zero: tuple[np.ndarray, np.ndarray] | None = None
    finals: dict[int, tuple[int, np.ndarray, np.ndarray]] = {}
    if local:
        suite = load_suite("fedkseed")
        held = suite.held_out((rows[0], rows[1]))
        zero = _as_saved(*suite.zero_shot_rows(out.resolve(), held))
        for s in local:
            rnd, (loss, correct) = suite.final_rows(seed_folder(out.resolve(), arm, s), arm, held)
            finals[s] = (rnd, *_as_saved(loss, correct))
    if prior is not None:
        if zero is not None and not (np.array_equal(zero[0], prior.zero_loss)
                                     and np.array_equal(zero[1], prior.zero_correct)):
            raise ValueError("the zero-shot rows evaluated here differ from the saved ones")
        zero = zero or (prior.zero_loss, prior.zero_correct)
        for i, s in enumerate(prior.seeds):
            saved = (prior.rounds[i], prior.loss[i], prior.correct[i])
            if s in finals and not (finals[s][0] == saved[0] and np.array_equal(
                    finals[s][1], saved[1]) and np.array_equal(finals[s][2], saved[2])):
                raise ValueError(f"seed {s}: the rows evaluated here differ from the saved ones")
            finals.setdefault(s, saved)
    assert zero is not None
    return ConfirmRows((rows[0], rows[1]), zero[0], zero[1], tuple(seeds),
                       np.stack([finals[s][1] for s in seeds]),
                       np.stack([finals[s][2] for s in seeds]),
                       tuple(finals[s][0] for s in seeds))


def confirm_report(result: ConfirmRows, primary: Primary = "loss") -> list[str]:
    """Per-seed table, then the ``primary`` test with its verdict and the other one with none.

    Parameters
    ----------
    result : ConfirmRows
        The seeds' and the zero-shot model's per-row results on one row range.
    primary : {"loss", "accuracy"}
        The test the plan declared: the loss lower than zero-shot (sections 9 and 10) or the
        accuracy higher (section 12). With ``"loss"`` the output is sections 9-10's.

    Raises
    ------
    ValueError
        If ``primary`` is neither.

    """
    import numpy as np

    if primary not in PRIMARY_TESTS:
        raise ValueError(f"the primary test is one of {PRIMARY_TESTS}, not {primary!r}")
    zero_loss = result.zero_loss.astype(np.float64)
    zero_correct = result.zero_correct.astype(np.float64)
    start, stop = result.rows
    lines = [f"Held-out rows {start}-{stop - 1} ({stop - start} rows); zero-shot accuracy "
             f"{zero_correct.mean():.4f}, loss {zero_loss.mean():.4f}.", "",
             "| seed | round | loss zero-shot -> final | paired loss change +- 2 SE | "
             "accuracy change | turned right / wrong (sign test p) |",
             "|---|---|---|---|---|---|"]
    changes: dict[Primary, list[Any]] = {"loss": [], "accuracy": []}
    for i, seed in enumerate(result.seeds):
        loss = result.loss[i].astype(np.float64)
        correct = result.correct[i].astype(np.float64)
        dl = paired_change(list(zero_loss), list(loss))
        right, wrong = sign_counts(list(zero_correct), list(correct))
        changes["loss"].append(loss - zero_loss)
        changes["accuracy"].append(correct - zero_correct)
        lines.append(f"| {seed} | {result.rounds[i]} | {zero_loss.mean():.4f} -> "
                     f"{loss.mean():.4f} | {dl.mean:+.4f} +- {2 * dl.se:.4f} | "
                     f"{(right - wrong) / len(loss):+.4f} | {right} / {wrong} "
                     f"({sign_test_p(right, wrong):.3g}) |")
    seeds = len(result.seeds)
    lines += ["", f"Across seeds {', '.join(str(s) for s in result.seeds)} (seeds x rows):"]
    if seeds < 2:
        return [*lines, f"- fewer than 2 seeds: no test; verdict: {NO_VERDICT}"]
    secondary: Primary = "accuracy" if primary == "loss" else "loss"
    judged = seed_row_test(primary, changes[primary], lower_is_better=primary == "loss")
    other = seed_row_test(secondary, changes[secondary], lower_is_better=secondary == "loss")
    claim = f"{primary} {'lower' if judged.lower_is_better else 'higher'} than zero-shot"
    return [*lines, "- " + judged.describe(),
            f"- verdict ({claim}, one-sided, alpha {ALPHA}, at least {MIN_SEEDS} seeds): "
            f"{verdict(judged, seeds)}",
            "- " + other.describe() + " (secondary, no verdict)"]


def contrast_report(first: ConfirmRows, second: ConfirmRows, seeds: Sequence[int] | None = None,
                    names: tuple[str, str] = ("first", "second")) -> list[str]:
    """Two arms' final models on the same rows and seeds: ``second`` minus ``first``, no verdict.

    The descriptive comparison of sections 10 and 13 (RESULTS.md ``## fedkseed``): per seed, the
    mean difference of the two final models' per-row loss and correctness (the zero-shot model
    cancels); over seeds and rows, section 9's statistic of those differences
    (:func:`seed_row_test`) with a two-sided p (:attr:`SeedRowTest.two_sided_p`). Pairing by
    seed is valid whatever the two arms share within a seed: the seeds are independent of each
    other, so SE_seed of the per-seed differences counts both arms' training randomness.

    Parameters
    ----------
    first, second : ConfirmRows
        The two arms' per-row results (``confirm --save-rows``) on one row range, scored
        against one zero-shot evaluation.
    seeds : sequence of int, optional
        The seeds to pair, each in both files; default: the files' seeds, which must then be
        the same seeds in the same order.
    names : tuple of str
        How the output names the two arms.

    Returns
    -------
    list of str
        The per-seed table, the per-seed loss differences' mean and SD, and the statistic of
        the loss and the accuracy differences.

    Raises
    ------
    ValueError
        If the two hold other row ranges or other zero-shot per-row results, if ``seeds`` is
        empty, repeated or not in both files, or, without ``seeds``, if the files hold
        different seeds or the same seeds in a different order.

    """
    import numpy as np

    if first.rows != second.rows:
        raise ValueError(f"the two files hold the row ranges [{first.rows[0]}, {first.rows[1]}) "
                         f"and [{second.rows[0]}, {second.rows[1]})")
    start, stop = first.rows
    if not (np.array_equal(first.zero_loss, second.zero_loss)
            and np.array_equal(first.zero_correct, second.zero_correct)):
        raise ValueError(f"the two files hold different zero-shot per-row results on rows "
                         f"{start}-{stop - 1}: not one zero-shot evaluation")
    if seeds is None:
        if first.seeds != second.seeds:
            raise ValueError(f"the two files hold seeds {list(first.seeds)} and "
                             f"{list(second.seeds)}; name the seeds to pair with --seeds")
        seeds = first.seeds
    missing = [s for s in seeds if s not in first.seeds or s not in second.seeds]
    if not seeds or len(set(seeds)) != len(seeds) or missing:
        raise ValueError(f"the seeds to pair must be distinct and in both files "
                         f"({list(first.seeds)} and {list(second.seeds)}), got {list(seeds)}")

    def pick(result: ConfirmRows) -> tuple[np.ndarray, np.ndarray]:
        index = [result.seeds.index(s) for s in seeds]
        return (result.loss[index].astype(np.float64),
                result.correct[index].astype(np.float64))

    (loss_a, correct_a), (loss_b, correct_b) = pick(first), pick(second)
    loss, correct = loss_b - loss_a, correct_b - correct_a
    lines = [f"{names[1]} minus {names[0]} on held-out rows {start}-{stop - 1} "
             f"({stop - start} rows), seed by seed:", "",
             "| seed | loss difference | accuracy difference |", "|---|---|---|"]
    lines += [f"| {seed} | {loss[i].mean():+.4f} | {correct[i].mean():+.4f} |"
              for i, seed in enumerate(seeds)]
    per_seed = loss.mean(axis=1)
    spread = f", SD over seeds {per_seed.std(ddof=1):.4f}" if len(per_seed) > 1 else ""
    lines += ["", f"- per-seed loss differences: mean {per_seed.mean():+.4f}{spread}"]
    if len(seeds) < 2:
        return [*lines, "- fewer than 2 seeds: no statistic over seeds"]
    for name, d in (("loss difference", loss), ("accuracy difference", correct)):
        per_row: list[Any] = list(d)
        # the direction only sets the one-sided p, which is not printed
        test = seed_row_test(name, per_row, lower_is_better=True)
        lines.append(f"- {test.describe(two_sided=True)} (descriptive, no verdict)")
    return lines


#: The fewest complete seeds ``compare`` gives a verdict on (section 11's plan).
COMPARE_MIN_SEEDS = 3


def finished_run(suite: ModuleType, arm: str, seed: int, out: Path) -> list[Any]:
    """The per-round curve of ``OUT/<arm>-s<seed>``'s run, checked to be the plan's run.

    The folder must hold the suite's quick ``arm`` at ``seed`` with the suite's steps
    (:func:`seed_run`), every round done (:func:`bouquet.apps.bench.earlier_run`), no reply
    lost or refused, and its zero-shot file (so that nothing is evaluated here).

    Raises
    ------
    ValueError
        Naming what is missing or different.

    """
    from bouquet.apps.bench import earlier_run
    from bouquet.strategies.checkpoint import CheckpointError

    folder = seed_folder(out, arm, seed)
    run = seed_run(suite, arm, None, seed)
    summary = folder / arm / "summary.json"
    if not summary.is_file():
        raise ValueError(f"{arm} seed {seed}: no finished run in {folder / arm}")
    try:
        action = earlier_run(run, folder)
    except CheckpointError:
        action = "resume"
    if action != "reuse":
        raise ValueError(f"{arm} seed {seed}: the run in {folder / arm} "
                         + ("holds no round" if action == "run" else
                            "stopped before its last round"))
    failures = json.loads(summary.read_text()).get("failures") or {}
    if any(failures.values()):
        raise ValueError(f"{arm} seed {seed}: replies lost or refused ({failures}), so its "
                         "evaluation did not cover every held-out row")
    if not (folder / "zero_shot.json").is_file():
        raise ValueError(f"{arm} seed {seed}: no zero_shot.json in {folder}")
    curve = list(suite.curve(folder, arm))
    if len(curve) != int(run.config["num-server-rounds"]):
        raise ValueError(f"{arm} seed {seed}: {len(curve)} evaluated rounds, the run has "
                         f"{run.config['num-server-rounds']}")
    return curve


def compare_arms(out: Path, zo_arm: str, seeds: Sequence[int]) -> tuple[list[str], list[Check]]:
    """``zo_arm`` against each LoRA arm at equal wall time and equal uplink bytes, over seeds.

    Per seed, as the suite's report does for one seed (:func:`fedkseed._prompt_section`, which
    takes one wall budget for every arm, where this takes one per pair): each arm's accuracy on
    the 400 held-out rows (its own evaluation: federated for a ZO arm, central for a LoRA arm,
    as the suite runs them) at the last round within the budget,
    zero-shot where no round fits. The wall budget is the shorter of the two runs' totals, the
    byte budget the ZO run's total uplink. Over seeds, "ZO >= LoRA" is judged on the mean D of
    the per-seed differences (:func:`bouquet.apps.verdicts.paired_change`): inconclusive while
    ``|D|`` is below the larger of the suite's margin (two standard errors of one accuracy near
    0.7 on 400 rows: every seed reads the same rows, so their noise does not average out) and
    two standard errors of D over the seeds; else it holds when D > 0 and does not hold when
    D < 0. With fewer than :data:`COMPARE_MIN_SEEDS` seeds the claims get no verdict. Reads the
    runs' ``config.yaml``, ``bench.json``, ``summary.json`` and ``metrics.jsonl`` and the seed
    folders' ``zero_shot.json`` (:func:`finished_run`); no model is evaluated.

    Raises
    ------
    ValueError
        If the seeds are empty or repeated, a seed lacks a finished run of an arm
        (:func:`finished_run`), or the seeds' zero-shot accuracies differ.

    """
    if not seeds or len(set(seeds)) != len(seeds):
        raise ValueError(f"compare needs distinct seeds, got {list(seeds)}")
    suite = load_suite("fedkseed")
    zero: dict[int, float] = {}
    accs_at: dict[tuple[str, str], tuple[list[float], list[float]]] = {}
    lines = [f"{zo_arm} against the LoRA arms per seed (accuracy on the 400 held-out rows at the "
             "budget; zero-shot where no round fits):", "",
             "| seed | LoRA arm | wall budget s | ZO / LoRA at equal wall time | uplink budget B "
             "| ZO / LoRA at equal uplink bytes |", "|---|---|---|---|---|---|"]
    for seed in seeds:
        curves = {arm: finished_run(suite, arm, seed, out) for arm in (zo_arm, *LORA_ARMS)}
        for arm in curves:
            got = float(suite.zero_shot(seed_folder(out, arm, seed))["accuracy"])
            if zero.setdefault(seed, got) != got:
                raise ValueError(f"seed {seed}: the arms' zero-shot accuracies differ")
        z = zero[seed]
        for other in LORA_ARMS:
            budgets = (("wall time", 1, min(curves[zo_arm][-1][1], curves[other][-1][1])),
                       ("uplink bytes", 2, curves[zo_arm][-1][2]))
            cells = []
            for what, index, budget in budgets:
                mine, theirs = (suite.at_budget(curves[name], index, budget)
                                for name in (zo_arm, other))
                zo_acc = z if mine is None else mine
                lora_acc = z if theirs is None else theirs
                lora_accs, zo_accs = accs_at.setdefault((other, what), ([], []))
                lora_accs.append(lora_acc)
                zo_accs.append(zo_acc)
                cells += [f"{budget:,.0f}", f"{zo_acc:.4f} / {lora_acc:.4f}"]
            lines.append(f"| {seed} | {other} | " + " | ".join(cells) + " |")
    if len(set(zero.values())) > 1:
        raise ValueError(f"the seeds' zero-shot accuracies differ: {zero}")
    checks = []
    named = ", ".join(map(str, seeds))
    for (other, what), (lora_accs, zo_accs) in accs_at.items():
        d = paired_change(lora_accs, zo_accs)
        margin = max(suite.MARGIN, 2 * d.se)
        claim = (f"{zo_arm.removeprefix('prompt-')} >= {other.removeprefix('prompt-')} at equal "
                 f"{what} (rt-smollm, seeds {named})")
        per_seed = ", ".join(f"{b - a:+.4f}" for a, b in zip(lora_accs, zo_accs, strict=True))
        measured = (f"mean difference {d.mean:+.4f} (per seed {per_seed}); margin "
                    f"{margin:.3f} = the larger of 2 SE of one accuracy on 400 rows "
                    f"({suite.MARGIN:.3f}) and 2 SE over seeds ({2 * d.se:.3f})")
        if len(seeds) < COMPARE_MIN_SEEDS:
            checks.append(Check(claim, NOT_MEASURED, f"{measured}; fewer than "
                                f"{COMPARE_MIN_SEEDS} seeds, no verdict"))
        elif abs(d.mean) < margin:
            checks.append(Check(claim, INCONCLUSIVE, measured))
        else:
            checks.append(Check.of(claim, d.mean > 0, measured))
    lines += ["", *(c.markdown() for c in checks)]
    return lines, checks


def _row_range(text: str) -> tuple[int, int]:
    start, _, stop = text.partition(":")
    return int(start), int(stop)


def _seeds(text: str) -> list[int]:
    return [int(s) for s in text.split(",") if s.strip()]


def main(argv: Sequence[str] | None = None) -> int:
    """Command line: ``run``, ``report``, ``summarize``, ``confirm``, ``contrast`` or ``compare``
    (see the module docstring)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    run_p = sub.add_parser("run", help="run the arm once per seed and print the suite's report")
    run_p.add_argument("--steps", type=int, default=None,
                       help="fedkseed.local-steps (ZO arms) or local-steps (LoRA arms); "
                            "default: the suite's")
    rep = sub.add_parser("report", help="the suite's report over the run folders in --out")
    rep.add_argument("--out", type=Path, required=True, help="the suite's output folder")
    summ = sub.add_parser("summarize", help="per-seed table and the t test across seeds")
    summ.add_argument("--prior", type=Path, help="JSON list of seeds measured before")
    summ.add_argument("--save", type=Path, help="write the seeds tested as a JSON list here")
    conf = sub.add_parser("confirm", help="section 9's test over seeds and held-out rows")
    conf.add_argument("--rows", type=_row_range, required=True,
                      help="held-out rows START:STOP of the fixed split")
    conf.add_argument("--seeds", type=_seeds, required=True,
                      help="comma-separated run seeds, in the declared order")
    conf.add_argument("--prior-rows", type=Path, help="per-row results saved before (npz)")
    conf.add_argument("--save-rows", type=Path, help="write the seeds' per-row results here")
    conf.add_argument("--primary", choices=PRIMARY_TESTS, default="loss",
                      help="the test the verdict is given on: loss (sections 9-10, the "
                           "default) or accuracy (section 12); the other is secondary")
    cont = sub.add_parser("contrast", help="two arms' saved per-row results: the second "
                          "minus the first, seed by seed (descriptive)")
    cont.add_argument("first", type=Path, help="per-row results of one arm (npz, --save-rows)")
    cont.add_argument("second", type=Path, help="the other arm's, on the same rows")
    cont.add_argument("--seeds", type=_seeds, default=None,
                      help="comma-separated seeds to pair, each in both files (default: the "
                           "files' seeds, which must then match)")
    comp = sub.add_parser("compare", help="a ZO arm against the LoRA arms at equal budgets")
    comp.add_argument("--seeds", type=_seeds, required=True, help="comma-separated run seeds")
    run_p.add_argument("--arm", choices=ARMS, default="prompt-fedkseed")
    for p in (summ, conf, comp):
        p.add_argument("--arm", choices=ZO_ARMS, default="prompt-fedkseed")
    for p in (run_p, summ, conf, comp):
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
    if args.command == "contrast":
        try:
            lines = contrast_report(ConfirmRows.load(args.first), ConfirmRows.load(args.second),
                                    args.seeds, (str(args.first), str(args.second)))
        except ValueError as exc:
            print(exc, file=sys.stderr)
            return 1
        print("\n".join(lines))
        return 0
    if args.command == "compare":
        try:
            lines, _ = compare_arms(args.out.resolve(), args.arm, args.seeds)
        except ValueError as exc:
            print(exc, file=sys.stderr)
            return 1
        print("\n".join(lines))
        return 0
    if args.command == "confirm":
        try:
            prior = ConfirmRows.load(args.prior_rows) if args.prior_rows else None
            result = evaluate_rows(args.out, args.arm, args.seeds, args.rows, prior)
        except ValueError as exc:
            print(exc, file=sys.stderr)
            return 1
        if args.save_rows:
            result.save(args.save_rows)
        print("\n".join(confirm_report(result, args.primary)))
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
