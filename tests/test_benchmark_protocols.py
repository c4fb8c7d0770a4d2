"""Benchmark suites' comparison protocols: every arm gets the same settings (no run, numpy only)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from bouquet.apps.bench import load_suite


def _without(cfg: Any, *keys: str) -> dict[str, Any]:
    return {k: v for k, v in cfg.items() if k not in keys}


def test_lora_suite_tunes_every_arm_on_the_same_lr_grid_and_budget() -> None:
    suite = load_suite("lora")
    for quick in (True, False):
        level = "quick" if quick else "full"
        runs = [r for r in suite.runs(quick) if suite.arm_of(r.name) is not None]
        grids: dict[str, list[float]] = {}
        seeds: dict[tuple[str, float], list[int]] = {}
        for r in runs:
            arm, lr = suite.arm_of(r.name)
            assert r.config["lr"] == lr
            grids.setdefault(arm, []).append(lr)
            seeds.setdefault((arm, lr), []).append(r.config["seed"])
            assert r.clients == suite.CLIENTS
        grid = list(suite.LR_GRID[level])
        assert len(grids) >= 9
        assert all(sorted(set(g)) == grid for g in grids.values())
        # every (arm, lr) on the same seeds (at least 2), so that seed means are comparable
        assert {tuple(sorted(s)) for s in seeds.values()} == {tuple(suite.SEEDS[level])}
        assert len(suite.SEEDS[level]) >= 2
        budget = {"num-server-rounds", "local-steps", "batch-size", "fraction-train",
                  "partition", "lora.optimizer", "dp.max-grad-norm", "dp.delta"}
        assert len({tuple(sorted((k, r.config[k]) for k in budget)) for r in runs}) == 1


def test_lora_private_arms_differ_from_their_reference_only_by_dp() -> None:
    suite = load_suite("lora")
    runs = {r.name: r for r in suite.runs(True)}
    eps_seen: set[float] = set()
    for name, r in runs.items():
        if "-eps" not in name:
            continue
        arm, lr, seed = suite.parse_run(name)
        ref = runs[f"{arm.rsplit('-', 1)[0]}-nodp-lr{lr:g}-s{seed}"]
        assert _without(r.config, "dp.enabled", "dp.target-epsilon") == ref.config
        assert r.config["dp.enabled"] is True
        eps_seen.add(r.config["dp.target-epsilon"])
    assert eps_seen == {3.0, 10.0}


def _lora_summaries(acc: dict[str, dict[float, list[float]]]) -> dict[str, Any]:
    return {f"{arm}-lr{lr:g}-s{seed}": {"final": {"accuracy": a}}
            for arm, by_lr in acc.items() for lr, seeds in by_lr.items()
            for seed, a in enumerate(seeds)}


def _lora_checks(suite: Any, acc: dict[str, dict[float, list[float]]], out: Path
                 ) -> dict[str, Any]:
    """The report's checks of these accuracies, by claim (read back from ``verdicts.json``)."""
    from bouquet.apps.verdicts import read_checks

    suite.report(_lora_summaries(acc), out)
    read = read_checks(out)
    assert read is not None
    return {c.claim: c for c in read[1]}


def test_lora_report_picks_each_arms_best_lr_and_prints_it(tmp_path: Path) -> None:
    suite = load_suite("lora")
    acc = {"fedit-r2-matched-nodp": {0.005: 0.70, 0.02: 0.60},
           "ffa-lora-r4-matched-nodp": {0.005: 0.62, 0.02: 0.72},
           "fed-sb-r40-matched-nodp": {0.005: 0.66, 0.02: 0.66}}
    summaries = {f"{arm}-lr{lr:g}": {"final": {"accuracy": a}}
                 for arm, by_lr in acc.items() for lr, a in by_lr.items()}
    text = suite.report(summaries, tmp_path)
    assert "| fedit-r2-matched-nodp | 0.005 | 0.700 |" in text
    assert "| ffa-lora-r4-matched-nodp | 0.02 | 0.720 |" in text
    assert "| fed-sb-r40-matched-nodp | 0.005 | 0.660 |" in text  # a tie goes to the smaller lr
    # the papers' check compares the tuned arms, not one shared lr
    assert "ffa-lora 0.720 vs FedIT 0.700" in text


def _gap_metrics(gap: float | tuple[float, float, float] | None) -> dict[str, float]:
    """A round's averaging-gap metrics: none, the gap alone (older runs), or with its parts."""
    if gap is None:
        return {}
    if isinstance(gap, float):
        return {"averaging_gap": gap}
    return dict(zip(("averaging_gap", "averaging_gap_along", "averaging_gap_across"), gap,
                    strict=True))


def test_lora_report_prints_fedits_averaging_gap_by_round_where_runs_report_it(
        tmp_path: Path) -> None:
    suite = load_suite("lora")
    rounds = {"fedit-r2-matched-nodp-lr0.005": [0.0312, 0.0457],
              "fedit-r2-matched-nodp-lr0.01": [None, 0.0400],  # round 1 without it
              "ffa-lora-r4-matched-nodp-lr0.02": [None, None], "fedit-r2-matched-nodp-lr0.02": [],
              "fedit-r2-matched-eps3-lr0.01": [(0.5, 0.3, 0.4), (0.25, -0.15, 0.2)]}
    for run, gaps in rounds.items():
        (tmp_path / run).mkdir()
        (tmp_path / run / "metrics.jsonl").write_text("".join(
            json.dumps({"round": i + 1, "accuracy": 0.7, "clients": 3, "up_bytes": 300,
                        **_gap_metrics(gaps[i] if i < len(gaps) else None)}) + "\n"
            for i in range(2)))
    text = suite.report({run: {"final": {"accuracy": 0.7}} for run in rounds}, tmp_path)
    table = text.split("FedIT's averaging gap")[1].split("\n\n")[1].splitlines()
    # the exact method reports none, nor does a run from before the metric: neither is listed;
    # each value sits under its own round
    assert table[2:] == ["| fedit-r2-matched-nodp-lr0.005 | 0.0312 | 0.0457 |",
                         "| fedit-r2-matched-nodp-lr0.01 | — | 0.0400 |",
                         # a run that also reports the parts along and across the update
                         "| fedit-r2-matched-eps3-lr0.01 | 0.5000 (+0.3000 / 0.4000) "
                         "| 0.2500 (-0.1500 / 0.2000) |"], table
    assert "averaging gap" not in suite.report(  # no run reports it: no table
        {"ffa-lora-r4-matched-nodp-lr0.02": {"final": {"accuracy": 0.7}}}, tmp_path)


def test_lora_report_chooses_the_lr_on_the_seed_mean(tmp_path: Path) -> None:
    suite = load_suite("lora")
    # lr 0.02 wins seed 0 but loses on the mean over both seeds
    acc = {"fedit-r2-matched-nodp": {0.005: [0.70, 0.70], 0.02: [0.74, 0.60]}}
    text = suite.report(_lora_summaries(acc), tmp_path)
    assert "| fedit-r2-matched-nodp | 0.005 | 0.700 | 0.700 ± 0.000 | 0.670 ± 0.070 |" in text


def test_lora_report_gives_the_dp_ordering_verdicts(tmp_path: Path) -> None:
    suite = load_suite("lora")
    acc = {  # per lr, per seed
        "fedit-r2-matched-nodp": {0.005: [0.74, 0.76], 0.02: [0.60, 0.60]},
        "fedit-r2-matched-eps3": {0.005: [0.60, 0.60], 0.02: [0.62, 0.60]},
        "ffa-lora-r4-matched-nodp": {0.005: [0.70, 0.70], 0.02: [0.74, 0.74]},
        "ffa-lora-r4-matched-eps3": {0.005: [0.72, 0.71], 0.02: [0.60, 0.60]},
        "fed-sb-r40-matched-nodp": {0.005: [0.74, 0.76], 0.02: [0.70, 0.70]},
        "fed-sb-r40-matched-eps3": {0.005: [0.61, 0.61], 0.02: [0.60, 0.60]},
        # at epsilon 10 the seeds disagree: the seed spread, not the mean, decides
        "fedit-r2-matched-eps10": {0.005: [0.60, 0.74], 0.02: [0.60, 0.60]},
        "ffa-lora-r4-matched-eps10": {0.005: [0.74, 0.60], 0.02: [0.60, 0.60]},
        "fed-sb-r40-matched-eps10": {0.005: [0.74, 0.60], 0.02: [0.60, 0.60]},
    }
    checks = _lora_checks(suite, acc, tmp_path)
    # FedIT drops 0.75 - 0.61 = 0.14, FFA-LoRA 0.74 - 0.715 = 0.025 (each at its own lr)
    ffa = checks["FFA-LoRA degrades less than FedIT under DP (eps3, matched ranks)"]
    assert ffa.verdict == "holds" and "drop FedIT +0.140" in ffa.measured
    # Fed-SB drops as much as FedIT: within the noise
    sb = checks["Fed-SB degrades less than FedIT under DP (eps3, matched ranks)"]
    assert sb.verdict == "inconclusive"
    wide = checks["FFA-LoRA degrades less than FedIT under DP (eps10, matched ranks)"]
    assert wide.verdict == "inconclusive" and "seed spread" in wide.measured
    assert checks["fedit-r2-matched-eps3 learns (above the majority rate 0.598)"].verdict == \
        "does not hold"
    assert checks["ffa-lora-r4-matched-eps3 learns (above the majority rate 0.598)"].verdict == \
        "holds"


def test_lora_rt_smollm_variant_gives_every_arm_the_same_budget(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LORA_BENCH_TASK", "rt-smollm")
    suite = load_suite("lora")
    runs = {r.name: r for r in suite.runs(True)}
    assert {r.config["task"] for r in runs.values()} == {"rt-smollm"}
    budget = {"num-server-rounds", "local-steps", "batch-size", "fraction-train", "partition",
              "lora.optimizer", "lora.rank", "dp.delta"}
    budgets: dict[str, set[tuple[tuple[str, Any], ...]]] = {}
    seeds: dict[str, set[int]] = {}
    for name, r in runs.items():
        arm, lr, seed = suite.parse_run(name)
        label = suite.smollm_label(arm)
        if label is None:  # the lr grids: test_lora_rt_smollm_lr_grid_...
            assert "-tune10-" in arm
            continue
        variant = suite.SMOLLM["variants"][label]
        budgets.setdefault(label, set()).add(tuple(sorted((k, r.config[k]) for k in budget)))
        assert r.config["local-steps"] == variant["local-steps"]
        method = r.config["method"]
        assert lr == r.config["lr"] == suite.SMOLLM["lr"][method]
        assert r.config["dp.max-grad-norm"] == suite.SMOLLM["clip"][method]
        seeds.setdefault(arm, set()).add(seed)
        if "-eps" in name:  # the private run is its reference plus DP, nothing else
            ref = runs[f"{arm.rsplit('-', 1)[0]}-nodp-lr{lr:g}-s{seed}"]
            assert _without(r.config, "dp.enabled", "dp.target-epsilon") == ref.config
            assert r.config["dp.target-epsilon"] in variant["epsilons"]
    # one budget per schedule, shared by every arm of it; the schedules differ in steps only
    assert set(budgets) == {"smollm", "smollm10"}
    assert all(len(b) == 1 for b in budgets.values())
    (five,), (ten,) = budgets["smollm"], budgets["smollm10"]
    assert {k for (k, v), (_, w) in zip(five, ten, strict=True) if v != w} == {"local-steps"}
    assert {frozenset(s) for a, s in seeds.items() if "-smollm-" in a} == {frozenset(range(4))}
    assert {frozenset(s) for a, s in seeds.items() if "-smollm10-" in a} == {frozenset(range(4))}
    assert len(seeds) == 2 * 9  # per schedule, 3 methods x (nodp, eps3, eps10)
    monkeypatch.setenv("LORA_BENCH_TASK", "rt-tiny")
    with pytest.raises(ValueError, match="LORA_BENCH_TASK"):
        suite.runs(True)


def test_lora_rt_smollm_report_judges_learning_against_zero_shot(tmp_path: Path) -> None:
    import json

    suite = load_suite("lora")
    (tmp_path / "zero_shot.json").write_text(json.dumps({"accuracy": 0.81}))
    acc = {  # per lr, per seed; 400 rows: 2 SE above 0.81 is 0.039
        "fedit-r8-smollm-nodp": {0.005: [0.87, 0.87]},
        "fedit-r8-smollm-eps3": {0.005: [0.84, 0.84]},
        "ffa-lora-r8-smollm-nodp": {0.02: [0.86, 0.86]},
        "ffa-lora-r8-smollm-eps3": {0.02: [0.86, 0.85]},
        "fed-sb-r8-smollm-nodp": {0.02: [0.86, 0.86]},
        "fed-sb-r8-smollm-eps3": {0.02: [0.85, 0.85]},
    }
    checks = _lora_checks(suite, acc, tmp_path)
    # +0.03 over zero-shot is within 2 SE of 400 rows; +0.045 beyond it
    fedit = checks["fedit-r8-smollm-eps3 learns (above zero-shot 0.8100)"]
    assert fedit.verdict == "does not hold" and "2 standard errors 0.039" in fedit.measured
    assert checks["ffa-lora-r8-smollm-eps3 learns (above zero-shot 0.8100)"].verdict == "holds"
    # FedIT drops 0.03, FFA-LoRA 0.005: 2 SE of a difference of drops on 400 rows x 2 seeds
    # is 0.071 (0.063 on 500 rows), so the ordering is not shown
    ffa = checks["FFA-LoRA degrades less than FedIT under DP (eps3, rt-smollm, r=8)"]
    assert ffa.verdict == "inconclusive" and "0.071" in ffa.measured
    assert "ffa-lora matches or beats FedIT (rt-smollm, r=8, non-private)" in checks
    # without the runs' folders there are no per-row results to pair
    paired = checks["FFA-LoRA degrades less than FedIT under DP (eps3, rt-smollm, r=8; paired "
                    "per row)"]
    assert paired.verdict == "not measured"


def test_lora_rt_smollm_schedules_are_judged_apart(tmp_path: Path) -> None:
    """The 2 x 10-step runs get their own checks; they never enter the 2 x 5-step ones."""
    import json

    suite = load_suite("lora")
    (tmp_path / "zero_shot.json").write_text(json.dumps({"accuracy": 0.81}))
    acc = {f"{m}-r8-smollm-{level}": {lr: [a, a]}
           for m, lr in (("fedit", 0.005), ("ffa-lora", 0.02), ("fed-sb", 0.02))
           for level, a in (("nodp", 0.86), ("eps3", 0.81))}
    acc |= {f"{m}-r8-smollm10-{level}": {lr: [a, a]}
            for m, lr in (("fedit", 0.005), ("ffa-lora", 0.02), ("fed-sb", 0.02))
            for level, a in (("nodp", 0.87), ("eps3", 0.87 if m == "ffa-lora" else 0.72))}
    checks = _lora_checks(suite, acc, tmp_path)
    five = checks["FFA-LoRA degrades less than FedIT under DP (eps3, rt-smollm, r=8)"]
    assert "drop FedIT +0.050 (lr 0.005), FFA-LoRA +0.050 (lr 0.02)" in five.measured
    ten = checks["FFA-LoRA degrades less than FedIT under DP (eps3, rt-smollm, r=8, 2x10 steps)"]
    assert ten.verdict == "holds", ten  # FedIT drops 0.15, FFA-LoRA nothing
    assert checks["ffa-lora-r8-smollm10-eps3 learns (above zero-shot 0.8100)"].verdict == "holds"
    assert checks["fedit-r8-smollm-eps3 learns (above zero-shot 0.8100)"].verdict == \
        "does not hold"
    paired = [c for c in checks if c.endswith("paired per row)")]
    assert len(paired) == 4 and sum("2x10 steps" in c for c in paired) == 2


def test_lora_drops_are_taken_over_the_seeds_all_four_runs_share() -> None:
    """A private arm run on fewer seeds than its non-private reference is compared on those
    seeds only: seeds 2-3 of the references (here much better than seeds 0-1) must not enter
    one method's drop and not the other's."""
    suite = load_suite("lora")
    acc = {}
    for method, lr, private in (("fedit", 0.005, [0.80, 0.80]), ("ffa-lora", 0.02, [0.85, 0.85])):
        for seed, a in enumerate([0.85, 0.85, 0.95, 0.95]):
            acc[f"{method}-r8-smollm-nodp-lr{lr:g}-s{seed}"] = a if method == "fedit" else 0.85
        for seed, a in enumerate(private):
            acc[f"{method}-r8-smollm-eps10-lr{lr:g}-s{seed}"] = a
    checks = {c: (v, m) for c, v, m in suite.degradation_checks(
        acc, "smollm", {"fedit": 8, "ffa-lora": 8})}
    verdict, measured = checks["FFA-LoRA degrades less than FedIT under DP (eps10, rt-smollm, "
                               "r=8)"]
    # seeds 0-1: FedIT drops 0.05, FFA-LoRA 0 (all-seed means would give FedIT 0.10)
    assert "drop FedIT +0.050" in measured and "FFA-LoRA +0.000" in measured
    assert "per-seed difference of drops +0.050, +0.050" in measured
    assert verdict.startswith("inconclusive")  # 0.05 < 2 SE of 2 seeds on 400 rows (0.071)


class _FixtureRows:
    """Stands in for the fedkseed suite's held-out rows: only their digest is read."""

    @staticmethod
    def fingerprint() -> bytes:
        return b"fixture rows"


def test_lora_paired_check_pairs_the_runs_rows_and_refuses_a_model_that_is_not_the_runs(
        tmp_path: Path) -> None:
    """Per-row correctness turns a difference of drops that the unpaired floor cannot separate
    into a verdict; rows that do not score the run's own accuracy are not used."""
    import json

    import numpy as np

    suite = load_suite("lora")
    fedkseed = load_suite("fedkseed")
    n = 400
    right = {  # rows each run gets right, the same on both seeds
        "fedit-r8-smollm-nodp": np.arange(n) >= 40,  # 0.90
        "fedit-r8-smollm-eps3": np.arange(n) >= 60,  # 0.85: FedIT drops 0.05
        "ffa-lora-r8-smollm-nodp": np.arange(n) >= 40,
        "ffa-lora-r8-smollm-eps3": np.arange(n) >= 40,  # FFA-LoRA drops nothing
        "fed-sb-r8-smollm-nodp": np.arange(n) >= 40,
        "fed-sb-r8-smollm-eps3": np.arange(n) >= 44,
    }
    lrs = {"fedit": 0.005, "ffa-lora": 0.02, "fed-sb": 0.02}
    acc = {}
    for arm, correct in right.items():
        lr = lrs[arm.split("-r8-")[0]]
        for seed in (0, 1):
            run = f"{arm}-lr{lr:g}-s{seed}"
            acc[run] = float(correct.mean())
            folder = tmp_path / run
            folder.mkdir()
            config = f"run-name: {run}\nseed: {seed}\n"
            (folder / "config.yaml").write_text(config)
            (folder / "metrics.jsonl").write_text(
                json.dumps({"round": 1, "accuracy": 0.81}) + "\n"
                + json.dumps({"round": 2, "accuracy": acc[run]}) + "\n")
            # Fed-SB's private seed-0 rows score 0.02 less than its run: not its model
            rows = correct & (np.arange(n) >= 52) if run == "fed-sb-r8-smollm-eps3-lr0.02-s0" \
                else correct
            key = fedkseed.rows_key("lora-final", b"2", config.encode(), b"fixture rows")
            fedkseed.cached_rows(folder / fedkseed.ROWS_FILE, key,
                                 lambda rows=rows: (np.zeros(n), rows))
    # the suite's unpaired rule cannot separate a 0.05 difference of drops on 2 seeds...
    unpaired = dict((c, v) for c, v, _ in suite.degradation_checks(
        acc, "smollm", {m: 8 for m in lrs}))
    assert unpaired["FFA-LoRA degrades less than FedIT under DP (eps3, rt-smollm, r=8)"] \
        .startswith("inconclusive")
    # ...the same runs paired per row can: 20 rows lost by FedIT, none by FFA-LoRA
    checks = {c.claim: c for c in suite.paired_degradation_checks(tmp_path, acc, _FixtureRows())}
    ffa = checks["FFA-LoRA degrades less than FedIT under DP (eps3, rt-smollm, r=8; paired per "
                 "row)"]
    assert ffa.verdict == "holds", ffa
    assert "seeds 0, 1" in ffa.measured and "+0.0500" in ffa.measured
    fed_sb = checks["Fed-SB degrades less than FedIT under DP (eps3, rt-smollm, r=8; paired per "
                    "row)"]
    assert fed_sb.verdict == "not measured" and "scores 0.8700" in fed_sb.measured
    # a folder whose config changed since its rows were cached has no rows to pair
    (tmp_path / "fedit-r8-smollm-nodp-lr0.005-s1" / "config.yaml").write_text("seed: 9\n")
    again = {c.claim: c for c in suite.paired_degradation_checks(tmp_path, acc, _FixtureRows())}
    assert "seeds 0;" in again["FFA-LoRA degrades less than FedIT under DP (eps3, rt-smollm, "
                               "r=8; paired per row)"].measured


def test_lora_rt_smollm_lr_grid_differs_from_its_schedule_in_the_lr_alone(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Every method runs every lr of one grid on the same seeds, per privacy level, and each
    run is the ``smollm10`` schedule's run of its level but for its lr (and, on a level with a
    split, but for the split's partition keys)."""
    monkeypatch.setenv("LORA_BENCH_TASK", "rt-smollm")
    suite = load_suite("lora")
    runs = {r.name: r for r in suite.runs(True)}
    tune = suite.SMOLLM_TUNING
    grid: dict[tuple[str, str], set[tuple[float, int]]] = {}
    for name, r in runs.items():
        arm, lr, seed = suite.parse_run(name)
        if "-tune10-" not in arm:
            continue
        level = arm.rsplit("-", 1)[1]
        grid.setdefault((r.config["method"], level), set()).add((lr, seed))
        # a level the schedule does not run (eps 1) is its eps-3 run but for the target; a
        # level on a split is its source level's run on that split
        split = suite.level_split(level)
        privacy = suite.transfer_source(level) if split else level
        ran = privacy in {"nodp", *(f"eps{e:g}" for e in suite.SMOLLM["variants"]["smollm10"]
                                    ["epsilons"])}
        reference = runs[f"{r.config['method']}-r8-smollm10-{privacy if ran else 'eps3'}-lr"
                         f"{suite.SMOLLM['lr'][r.config['method']]:g}-s{seed}"]
        want = {**_without(reference.config, "lr"), **split}
        if not ran:
            want["dp.target-epsilon"] = float(level[3:])
        assert _without(r.config, "lr") == want
        assert r.config["lr"] == lr
    assert suite.tuning_levels() == ["nodp", "eps3", "eps1", "dirnodp", "direps3"]
    assert [suite.level_epsilon(lv) for lv in suite.tuning_levels()] == [None, 3, 1, None, 3]
    assert suite.level_split("dirnodp") == {"partition": "dirichlet", "dirichlet-alpha": 0.5}
    assert suite.level_split("eps1") == {} and suite.dp_reference("direps3") == "dirnodp"
    assert suite.level_split("direps3") == suite.level_split("dirnodp")
    assert suite.dp_reference("eps1") == suite.dp_reference("eps3") == "nodp"
    assert suite.dp_reference("dirnodp") is None
    # sessions 27-28: seeds 1, 2 and 3 on the split; eps 1 on every confirmation seed
    assert suite.transfer_seeds("dirnodp") == suite.transfer_seeds("direps3") == (1, 2, 3)
    assert suite.transfer_seeds("eps1") == (1, 2, 3)
    with pytest.raises(ValueError, match="tuned level"):
        suite.transfer_seeds("eps3")
    tuned_levels = [lv for lv in suite.tuning_levels() if suite.transferred_lrs(lv) is None]
    expected = {(m, level): {(lr, s) for lr in suite.tuning_lrs(level) for s in tune["seeds"]}
                for m in suite.SMOLLM["lr"] for level in tuned_levels}
    # a level that reuses another's choices runs each method at that lr on the confirmation
    # seeds alone (the grid seeds chose the lrs), and declares the lrs the other level chose
    for level, moved in tune["transfer"].items():
        assert suite.tuning_lrs(level) == ()
        assert moved["from"] in tuned_levels and set(moved["lrs"]) == set(suite.SMOLLM["lr"])
        expected |= {(m, level): {(lr, s) for s in suite.transfer_seeds(level)}
                     for m, lr in moved["lrs"].items()}
        assert set(suite.transfer_seeds(level)) <= set(suite.confirmation_seeds())
        # a split changes the partition alone, and keeps the privacy of the level it moves
        assert set(suite.level_split(level)) <= {"partition", "dirichlet-alpha"}
        if suite.level_split(level):
            assert suite.level_epsilon(level) == suite.level_epsilon(moved["from"])
    assert suite.confirmation_seeds() == (1, 2, 3)
    assert grid == expected
    # a level's grid is the shared one, extended past its upper edge for every method alike
    assert set(tune["beyond"]) <= set(suite.tuning_levels())
    assert suite.tuning_lrs("nodp") == tune["lrs"]
    assert suite.tuning_lrs("eps3") == (*tune["lrs"], 0.1)
    assert set(tune["grid-seeds"]) <= set(tune["seeds"])
    start, stop = tune["validation"]
    assert start >= suite.SMOLLM_EVAL_ROWS  # the choice never sees the result rows


class _Rows:
    """Stands in for a range of held-out rows: its digest and cache-file suffix."""

    def __init__(self, name: bytes, suffix: str = "") -> None:
        self.name, self.suffix = name, suffix

    def fingerprint(self) -> bytes:
        return self.name


def _tuning_run(folder: Path, own: Any, validation: Any) -> float:
    """A finished tune10 run folder whose rows are cached on both ranges; its final accuracy."""
    import json

    import numpy as np

    fedkseed = load_suite("fedkseed")
    folder.mkdir()
    config = f"run-name: {folder.name}\n"
    (folder / "config.yaml").write_text(config)
    (folder / "metrics.jsonl").write_text(json.dumps({"round": 2, "accuracy": float(own.mean())})
                                          + "\n")
    for rows, correct in ((_OWN, own), (_VALIDATION, validation)):
        key = fedkseed.rows_key("lora-final", b"2", config.encode(), rows.fingerprint())
        fedkseed.cached_rows(folder / f"rows{rows.suffix}.npz", key,
                             lambda c=correct: (np.zeros(len(c)), c))
    return float(own.mean())


_OWN, _VALIDATION = _Rows(b"result rows"), _Rows(b"validation rows", "_400-1200")


def test_lora_tuning_chooses_each_lr_on_validation_rows_and_compares_there(
        tmp_path: Path) -> None:
    """The chosen lr is the best on the validation rows, not on the result rows; the
    comparison reads the result rows at the chosen lrs, unpaired and paired per row."""
    import numpy as np

    suite = load_suite("lora")
    n = 400
    lrs = suite.SMOLLM_TUNING["lrs"]
    acc: dict[str, float] = {}
    for method in suite.SMOLLM["lr"]:
        for i, lr in enumerate(lrs):
            # validation: best at the second lr for every method; result rows: best at the last
            val = np.arange(n) >= (20 if i == 1 else 60)
            own = np.arange(n) >= (100 - 10 * i)
            if method == "ffa-lora" and i == 1:
                own = np.arange(n) >= 50  # FFA-LoRA at its chosen lr: 40 rows above FedIT
            run = f"{method}-r8-tune10-nodp-lr{lr:g}-s0"
            acc[run] = _tuning_run(tmp_path / run, own, val)
    lines, checks = suite.tuning_report(tmp_path, acc, _OWN, _VALIDATION)
    by_claim = {c.claim: c for c in checks}
    table = "\n".join(lines)
    assert "| fedit | " in table and f"| {lrs[1]:g} | 0.7750 (0) |" in table
    setting = "rt-smollm, r=8, 2x10 steps, each at its lr chosen on validation rows"
    ffa = by_claim[f"ffa-lora matches or beats FedIT ({setting}, non-private)"]
    assert f"(lr {lrs[1]:g})" in ffa.measured and ffa.verdict == "holds", ffa  # +0.10
    paired = by_claim[f"ffa-lora matches or beats FedIT ({setting}, non-private; paired per "
                      "row)"]
    assert paired.verdict == "holds" and "+0.1000" in paired.measured, paired
    fed_sb = by_claim[f"fed-sb matches or beats FedIT ({setting}, non-private; paired per row)"]
    assert fed_sb.verdict == "inconclusive"  # the same rows right: no difference
    # a report of some runs only (``--only``) chooses from those, even with the others' folders
    some = {run: a for run, a in acc.items() if not run.startswith("fedit-") or "lr0.05" in run}
    _, checks = suite.tuning_report(tmp_path, some, _OWN, _VALIDATION)
    assert {c.claim: c.verdict for c in checks}[
        f"ffa-lora matches or beats FedIT ({setting}, non-private)"] == "not measured"
    # a grid with one lr missing chooses nothing for that method
    missing = f"fed-sb-r8-tune10-nodp-lr{lrs[-1]:g}-s0"
    acc.pop(missing)
    import shutil

    shutil.rmtree(tmp_path / missing)
    _, checks = suite.tuning_report(tmp_path, acc, _OWN, _VALIDATION)
    assert {c.claim: c.verdict for c in checks}[
        f"fed-sb matches or beats FedIT ({setting}, non-private)"] == "not measured"


def test_lora_tuning_judges_on_confirmation_seeds_and_names_a_failed_rebuild(
        tmp_path: Path) -> None:
    """With seeds beyond the grid's at the chosen lrs, the comparison reads those (the grid
    seed's model won the choice); a confirmation run whose rebuilt model is not its own makes
    the paired check "not measured" and is named in the report."""
    import json

    import numpy as np

    suite = load_suite("lora")
    n, lrs = 400, suite.SMOLLM_TUNING["lrs"]
    acc: dict[str, float] = {}
    for method in ("fedit", "ffa-lora", "fed-sb"):
        for i, lr in enumerate(lrs):  # every method chooses the first lr
            run = f"{method}-r8-tune10-nodp-lr{lr:g}-s0"
            val = np.arange(800) >= (8 if i == 0 else 80)
            # on the grid seed FFA-LoRA is far ahead of FedIT...
            own = np.arange(n) >= (0 if method == "ffa-lora" else 80)
            acc[run] = _tuning_run(tmp_path / run, own, val)
        for seed in (1, 2):  # ...on the confirmation seeds it ties
            run = f"{method}-r8-tune10-nodp-lr{lrs[0]:g}-s{seed}"
            acc[run] = _tuning_run(tmp_path / run, np.arange(n) >= 40, np.arange(800) >= 8)
    lines, checks = suite.tuning_report(tmp_path, acc, _OWN, _VALIDATION)
    by_claim = {c.claim: c for c in checks}
    setting = "rt-smollm, r=8, 2x10 steps, each at its lr chosen on validation rows"
    ffa = by_claim[f"ffa-lora matches or beats FedIT ({setting}, non-private)"]
    assert ffa.verdict == "inconclusive" and "confirmation seeds 1, 2" in ffa.measured, ffa
    # a confirmation run of Fed-SB whose cached rows are not its model's
    (tmp_path / f"fed-sb-r8-tune10-nodp-lr{lrs[0]:g}-s2" / "metrics.jsonl").write_text(
        json.dumps({"round": 2, "accuracy": 0.5}) + "\n")
    lines, checks = suite.tuning_report(tmp_path, acc, _OWN, _VALIDATION)
    paired = {c.claim: c for c in checks}[
        f"fed-sb matches or beats FedIT ({setting}, non-private; paired per row)"]
    assert paired.verdict == "not measured" and "scores 0.9000" in paired.measured
    assert any(line.startswith("- rebuild failed:") for line in lines)


def test_lora_private_tuning_chooses_apart_and_tests_the_dp_ordering_at_the_chosen_lrs(
        tmp_path: Path) -> None:
    """The eps3 grid chooses its own lrs on validation rows; "degrades less" reads each
    method's drop from its non-private chosen lr to its private chosen lr, per row."""
    import numpy as np

    suite = load_suite("lora")
    n, lrs = 400, suite.SMOLLM_TUNING["lrs"]
    acc: dict[str, float] = {}
    for level in ("nodp", "eps3"):
        for method in ("fedit", "ffa-lora", "fed-sb"):
            for i, lr in enumerate(suite.tuning_lrs(level)):
                # non-private: every method chooses the first lr; private: the second
                best = 0 if level == "nodp" else 1
                val = np.arange(800) >= (8 if i == best else 80)
                right = 40  # every chosen non-private model misses the first 40 rows
                if level == "eps3" and i == best:
                    # FedIT loses 80 more rows to privacy, FFA-LoRA none, Fed-SB 4
                    right = {"fedit": 120, "ffa-lora": 40, "fed-sb": 44}[method]
                elif i != best:
                    right = 0  # an lr not chosen: better on the result rows than the choice
                run = f"{method}-r8-tune10-{level}-lr{lr:g}-s0"
                acc[run] = _tuning_run(tmp_path / run, np.arange(n) >= right, val)
    lines, checks = suite.tuning_report(tmp_path, acc, _OWN, _VALIDATION)
    table = "\n".join(lines)
    assert "Non-private:" not in table and "non-private:" in table and "eps3:" in table
    assert f"| {lrs[1]:g} | 0.7000 (0) |" in table  # FedIT's private choice, not lr 0
    by_claim = {c.claim: c for c in checks}
    setting = "rt-smollm, r=8, 2x10 steps, each at its lr chosen on validation rows"
    drop = by_claim[f"FFA-LoRA degrades less than FedIT under DP (eps3, {setting}; paired "
                    "per row)"]
    assert drop.verdict == "holds", drop  # FedIT's drop 0.20 against none
    assert f"chosen lrs {lrs[0]:g}, {lrs[1]:g}, {lrs[0]:g}, {lrs[1]:g}" in drop.measured
    assert "the grid seeds that chose the lrs 0" in drop.measured
    assert "drop FedIT +0.2000, FFA-LoRA +0.0000" in drop.measured
    fed_sb = by_claim[f"Fed-SB degrades less than FedIT under DP (eps3, {setting}; paired "
                      "per row)"]
    assert fed_sb.verdict == "holds" and "Fed-SB +0.0100" in fed_sb.measured, fed_sb
    private = by_claim[f"ffa-lora matches or beats FedIT ({setting}, eps3)"]
    assert "(lr 0.005)" in private.measured and private.verdict == "holds", private
    # confirmation seeds: the drop reads only the seeds all four runs have at their chosen lrs
    for level, method, seeds in (("nodp", "fedit", (1, 2, 3)), ("nodp", "ffa-lora", (1, 2)),
                                 ("eps3", "fedit", (2, 3)), ("eps3", "ffa-lora", (2, 3))):
        lr = lrs[0 if level == "nodp" else 1]
        for seed in seeds:  # a tie on every seed but 2, where FedIT loses 40 rows to privacy
            right = 80 if (level, method, seed) == ("eps3", "fedit", 2) else 40
            run = f"{method}-r8-tune10-{level}-lr{lr:g}-s{seed}"
            acc[run] = _tuning_run(tmp_path / run, np.arange(n) >= right, np.arange(800) >= 8)
    _, checks = suite.tuning_report(tmp_path, acc, _OWN, _VALIDATION)
    got = {c.claim: c for c in checks}[drop.claim]
    assert "confirmation seeds 2;" in got.measured and "drop FedIT +0.1000" in got.measured, got
    # without its non-private grid, FFA-LoRA's drop is not measured
    for lr in lrs:
        acc.pop(f"ffa-lora-r8-tune10-nodp-lr{lr:g}-s0")
    _, checks = suite.tuning_report(tmp_path, acc, _OWN, _VALIDATION)
    got = {c.claim: c for c in checks}[drop.claim]
    assert got.verdict == "not measured" and "grid incomplete" in got.measured
    # the private grid's step beyond the shared one is part of it: without it, no choice
    beyond = suite.tuning_lrs("eps3")[-1]
    assert beyond not in lrs and f"| lr {beyond:g} | chosen lr |" in table
    acc.pop(f"fed-sb-r8-tune10-eps3-lr{beyond:g}-s0")
    _, checks = suite.tuning_report(tmp_path, acc, _OWN, _VALIDATION)
    got = {c.claim: c for c in checks}[fed_sb.claim]
    assert got.verdict == "not measured" and "fed-sb-r8-tune10-eps3: grid incomplete" in \
        got.measured, got


def _chosen_grids(tmp_path: Path, suite: Any) -> dict[str, float]:
    """The seed-0 grids of the non-private and eps-3 levels, every method alike: non-private
    chooses the first lr of its grid, eps 3 the second; every model misses the first 40 of the
    400 result rows. Returns the runs' final accuracies."""
    import numpy as np

    acc: dict[str, float] = {}
    for level in ("nodp", "eps3"):
        best = 0 if level == "nodp" else 1
        for method in suite.SMOLLM["lr"]:
            for i, lr in enumerate(suite.tuning_lrs(level)):
                run = f"{method}-r8-tune10-{level}-lr{lr:g}-s0"
                acc[run] = _tuning_run(tmp_path / run, np.arange(400) >= 40,
                                       np.arange(800) >= (8 if i == best else 80))
    return acc


def test_lora_a_transferred_level_runs_at_the_other_levels_choice_and_tests_the_ordering(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """eps 1 has no grid: each method's eps-3 choice counts as its eps-1 lr only while the eps-3
    grid still chooses the declared lr; the checks then read the confirmation seeds."""
    import numpy as np

    suite = load_suite("lora")
    n, lrs = 400, suite.SMOLLM_TUNING["lrs"]
    acc = _chosen_grids(tmp_path, suite)
    for method in suite.SMOLLM["lr"]:
        for seed in (1, 2):  # confirmation seeds, non-private
            run = f"{method}-r8-tune10-nodp-lr{lrs[0]:g}-s{seed}"
            acc[run] = _tuning_run(tmp_path / run, np.arange(n) >= 40, np.arange(800) >= 8)
    for method in suite.SMOLLM["lr"]:
        for seed in (1, 2):  # eps 1: FedIT loses 80 rows to privacy, FFA-LoRA none, Fed-SB 4
            right = {"fedit": 120, "ffa-lora": 40, "fed-sb": 44}[method]
            run = f"{method}-r8-tune10-eps1-lr{lrs[1]:g}-s{seed}"
            acc[run] = _tuning_run(tmp_path / run, np.arange(n) >= right, np.arange(800) >= 8)
    declared = {"fedit": lrs[1], "ffa-lora": lrs[1], "fed-sb": lrs[1]}
    monkeypatch.setitem(suite.SMOLLM_TUNING, "transfer",
                        {"eps1": {"from": "eps3", "lrs": declared}})
    lines, checks = suite.tuning_report(tmp_path, acc, _OWN, _VALIDATION)
    table = "\n".join(lines)
    assert "eps1: no grid of its own" in table and f"| fedit | {lrs[1]:g} | {lrs[1]:g} | 0.7000 " \
        "(1, 2) |" in table, table
    assert "Privacy: a eps1 run's epsilon covers that run alone" in table
    assert "; fed-sb — (" in table  # these folders have no client state to read
    by_claim = {c.claim: c for c in checks}
    setting = "rt-smollm, r=8, 2x10 steps, each at its eps3 choice"
    drop = by_claim[f"FFA-LoRA degrades less than FedIT under DP (eps1, {setting}; paired "
                    "per row)"]
    assert drop.verdict == "holds" and "confirmation seeds 1, 2;" in drop.measured, drop
    assert "drop FedIT +0.2000, FFA-LoRA +0.0000" in drop.measured
    assert by_claim[f"ffa-lora matches or beats FedIT ({setting}, eps1)"].verdict == "holds"
    # part of the level run: a method without its runs, and two arms without a common seed
    partial = {run: a for run, a in acc.items()
               if not (run.startswith("fed-sb-r8-tune10-eps1") or run.endswith("eps1-lr"
                       f"{lrs[1]:g}-s2") and run.startswith("fedit")
                       or run.endswith(f"eps1-lr{lrs[1]:g}-s1") and run.startswith("ffa"))}
    _, checks = suite.tuning_report(tmp_path, partial, _OWN, _VALIDATION)
    got = {c.claim: c for c in checks}
    fed_sb = got[f"fed-sb matches or beats FedIT ({setting}, eps1)"]
    assert fed_sb.verdict == "not measured" and "not run at the declared lr" in fed_sb.measured
    ffa = got[f"ffa-lora matches or beats FedIT ({setting}, eps1)"]
    assert ffa.verdict == "not measured" and "no seed run by both arms" in ffa.measured, ffa
    assert got[drop.claim].verdict == "not measured"
    # a level may only reuse a tuned level's choices made before it
    monkeypatch.setitem(suite.SMOLLM_TUNING, "epsilons", (1.0, 3.0))
    with pytest.raises(ValueError, match="eps1 reuses eps3's choices, which must be made first"):
        suite.tuning_report(tmp_path, acc, _OWN, _VALIDATION)
    monkeypatch.setitem(suite.SMOLLM_TUNING, "epsilons", (3.0, 1.0))
    # a declared lr the eps-3 grid no longer chooses is no choice, and says so
    monkeypatch.setitem(suite.SMOLLM_TUNING, "transfer",
                        {"eps1": {"from": "eps3", "lrs": {**declared, "fed-sb": lrs[2]}}})
    _, checks = suite.tuning_report(tmp_path, acc, _OWN, _VALIDATION)
    got = {c.claim: c for c in checks}[
        f"Fed-SB degrades less than FedIT under DP (eps1, {setting}; paired per row)"]
    assert got.verdict == "not measured", got
    assert f"eps3 now chooses {lrs[1]:g}, not the declared {lrs[2]:g}" in got.measured, got


def test_lora_a_level_on_a_split_tests_the_loss_to_heterogeneity_and_to_dp_on_it(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A transferred level with a ``split`` keeps its source's privacy: its drop from the source
    (IID) is judged per row, and a private one's drop under DP is read from the non-private
    level on the same split, not from the IID one."""
    import numpy as np

    suite = load_suite("lora")
    n, lrs = 400, suite.SMOLLM_TUNING["lrs"]
    split = {"partition": "dirichlet", "dirichlet-alpha": 0.5}
    monkeypatch.setitem(suite.SMOLLM_TUNING, "transfer", {
        "eps1": {"from": "eps3", "lrs": dict.fromkeys(suite.SMOLLM["lr"], lrs[1])},
        "dirnodp": {"from": "nodp", "split": split, "seeds": (1, 2),
                    "lrs": dict.fromkeys(suite.SMOLLM["lr"], lrs[0])},
        "direps3": {"from": "eps3", "split": split, "seeds": (1, 2),
                    "lrs": dict.fromkeys(suite.SMOLLM["lr"], lrs[1])}})
    assert suite.tuning_levels() == ["nodp", "eps3", "eps1", "dirnodp", "direps3"]
    # rows each run misses (a run is right from this row on): IID every method misses 40;
    # on the split FedIT misses 80 more, non-private and private alike, FFA-LoRA none
    # non-private and 40 more under DP, Fed-SB 4 more in both
    wrong = {"dirnodp": {"fedit": 120, "ffa-lora": 40, "fed-sb": 44},
             "direps3": {"fedit": 120, "ffa-lora": 80, "fed-sb": 44}}
    acc = _chosen_grids(tmp_path, suite)
    for level in ("nodp", "eps3"):
        best = 0 if level == "nodp" else 1  # the level's choice (:func:`_chosen_grids`)
        for method in suite.SMOLLM["lr"]:
            for seed in (1, 2):
                run = f"{method}-r8-tune10-{level}-lr{lrs[best]:g}-s{seed}"
                acc[run] = _tuning_run(tmp_path / run, np.arange(n) >= 40, np.arange(800) >= 8)
                lv = f"dir{level}"
                run = f"{method}-r8-tune10-{lv}-lr{lrs[best]:g}-s{seed}"
                acc[run] = _tuning_run(tmp_path / run, np.arange(n) >= wrong[lv][method],
                                       np.arange(800) >= 8)
                if level == "eps3":  # eps 1 at the eps-3 choice: IID, no split
                    run = f"{method}-r8-tune10-eps1-lr{lrs[1]:g}-s{seed}"
                    acc[run] = _tuning_run(tmp_path / run, np.arange(n) >= 40,
                                           np.arange(800) >= 8)
    lines, checks = suite.tuning_report(tmp_path, acc, _OWN, _VALIDATION)
    table = "\n".join(lines)
    assert ("Dirichlet 0.5 split, non-private: no grid of its own; each method at the lr the "
            "non-private grid chose for it") in table, table
    assert "Privacy: a Dirichlet 0.5 split, non-private run" not in table  # it spends nothing
    assert "Privacy: a Dirichlet 0.5 split, eps3 run's epsilon covers that run alone" in table
    by_claim = {c.claim: c for c in checks}
    plain = "rt-smollm, r=8, 2x10 steps, each at its non-private choice"
    private = "rt-smollm, r=8, 2x10 steps, each at its eps3 choice"
    hetero = by_claim[f"FFA-LoRA loses less than FedIT to the Dirichlet 0.5 split (non-private, "
                      f"{plain}; paired per row)"]
    assert hetero.verdict == "holds", hetero  # FedIT loses 0.20, FFA-LoRA nothing
    assert "confirmation seeds 1, 2;" in hetero.measured
    assert "drop FedIT +0.2000, FFA-LoRA +0.0000" in hetero.measured
    assert "(FFA-LoRA IID, Dirichlet 0.5 split; FedIT IID, Dirichlet 0.5 split)" in \
        hetero.measured
    hetero_dp = by_claim[f"FFA-LoRA loses less than FedIT to the Dirichlet 0.5 split (eps3, "
                         f"{private}; paired per row)"]
    assert hetero_dp.verdict == "holds" and "FFA-LoRA +0.1000" in hetero_dp.measured, hetero_dp
    # under DP on the split, from the split's own non-private runs: FedIT loses nothing more
    dp = by_claim[f"FFA-LoRA degrades less than FedIT under DP (Dirichlet 0.5 split, eps3, "
                  f"{private}; paired per row)"]
    assert dp.verdict == "does not hold", dp
    assert "drop FedIT +0.0000, FFA-LoRA +0.1000" in dp.measured
    assert f"chosen lrs {lrs[0]:g}, {lrs[1]:g}, {lrs[0]:g}, {lrs[1]:g}" in dp.measured
    assert by_claim[f"fed-sb matches or beats FedIT ({plain}, Dirichlet 0.5 split, "
                    "non-private)"].verdict == "holds"
    assert not any("under DP (Dirichlet 0.5 split, non-private" in c for c in by_claim)
    # eps 1 (a transfer without a split) and the IID levels lose nothing to a split
    eps1 = [c for c in by_claim if "eps1" in c]
    assert len(eps1) == 6 and not any(" loses less than FedIT " in c for c in eps1), eps1
    losses = [c for c in by_claim if " loses less than FedIT " in c]
    assert len(losses) == 4 and all("Dirichlet 0.5 split (" in c for c in losses), losses
    # a private level on a split with no non-private level on that split: said, not skipped
    alone = dict(suite.SMOLLM_TUNING["transfer"])
    alone.pop("dirnodp")
    monkeypatch.setitem(suite.SMOLLM_TUNING, "transfer", alone)
    _, checks = suite.tuning_report(tmp_path, acc, _OWN, _VALIDATION)
    got = {c.claim: c for c in checks}[dp.claim]
    assert got.verdict == "not measured" and "no non-private level on the Dirichlet 0.5 " \
        "split is declared" in got.measured, got
    monkeypatch.setitem(suite.SMOLLM_TUNING, "transfer", {**alone, "dirnodp": dict(
        split=split, seeds=(1, 2), lrs=dict.fromkeys(suite.SMOLLM["lr"], lrs[0]),
        **{"from": "nodp"})})
    # without FedIT's non-private runs on the split, the private level's drop under DP is not
    # measured, and says why; the same without any non-private run on the split
    partial = {r: a for r, a in acc.items() if not r.startswith("fedit-r8-tune10-dirnodp")}
    _, checks = suite.tuning_report(tmp_path, partial, _OWN, _VALIDATION)
    got = {c.claim: c for c in checks}[dp.claim]
    assert got.verdict == "not measured" and "not run at the declared lr" in got.measured, got
    partial = {r: a for r, a in acc.items() if "-dirnodp-" not in r}
    _, checks = suite.tuning_report(tmp_path, partial, _OWN, _VALIDATION)
    got = {c.claim: c for c in checks}[dp.claim]
    assert got.verdict == "not measured", got
    assert "Dirichlet 0.5 split, non-private not run at its declared lr" in got.measured, got


def test_lora_private_tuning_reports_the_privacy_the_whole_grid_spent(tmp_path: Path) -> None:
    """Choosing among a private grid's runs releases all of them: the report prints their
    composed epsilon, read from the clients' saved state and kept for the committed runs; a
    run whose histories do not account for it is named, never counted as free."""
    import json
    import shutil

    import numpy as np
    from flwr.app import ConfigRecord, Context, RecordDict

    from bouquet.clients.persistence import ACCOUNTANT_KEY, NodeStore, persist, restore
    from bouquet.privacy.accountant import sweep_epsilon

    suite = load_suite("lora")
    lrs = suite.tuning_lrs("eps3")
    acc: dict[str, float] = {}
    history = [(0.66, 0.0094, 20)]
    one = sweep_epsilon([[history]], 1e-5)

    def save(run: str, pid: int, spent: list[tuple[float, float, int]] = history) -> None:
        ctx = Context(7, pid, {"partition-id": pid, "num-partitions": 2}, RecordDict(), {})
        store = NodeStore(tmp_path / run / "client-state" / f"partition-{pid}", pid, 7, False)
        restore(ctx, store, 2)
        ctx.state[ACCOUNTANT_KEY] = ConfigRecord({"history": json.dumps(spent)})
        persist(ctx, store, 2)

    for method in ("fedit", "ffa-lora", "fed-sb"):
        for lr in lrs:
            run = f"{method}-r8-tune10-eps3-lr{lr:g}-s0"
            acc[run] = _tuning_run(tmp_path / run, np.arange(400) >= 40, np.arange(800) >= 8)
            (tmp_path / run / "bench.json").write_text(json.dumps({"clients": 2}))
            (tmp_path / run / "summary.json").write_text(json.dumps(
                {"privacy": {"epsilon": one, "delta": 1e-5}}))
            if method == "ffa-lora" and lr == lrs[-1]:
                continue  # one grid run without its clients' state
            for pid in (0, 1) if method != "fed-sb" or lr != lrs[0] else (0,):
                save(run, pid)  # Fed-SB: one run has lost a client's state
    composed = sweep_epsilon([[history]] * len(lrs), 1e-5)
    lines, _ = suite.tuning_report(tmp_path, acc, _OWN, _VALIDATION)
    said = next(line for line in lines if line.startswith("Privacy spent by the tuning"))
    assert f"a method's {len(lrs)} grid runs" in said
    assert f"fedit {composed:.2f} (costliest single run {one:.2f})" in said
    assert composed > one + 0.1
    assert "ffa-lora — (no client histories for every run)" in said
    assert "fed-sb — (unreadable client state: " in said and "1 of its 2 clients" in said
    # eps 1 at FedIT's eps-3 choice: its runs compose with the eps-3 grid they took the lr from
    # a small client (a label-Dirichlet split's) samples more often at more noise: within one
    # run a row sits on one client, so the run alone spends its worst client's own epsilon,
    # below the two clients' curves maxed order by order
    strong, small = [(0.62, 0.0058, 20)], [(0.9, 0.0465, 20)]  # each about eps 3
    alone = max(sweep_epsilon([[strong]], 1e-5), sweep_epsilon([[small]], 1e-5))
    assert alone < sweep_epsilon([[strong, small]], 1e-5) - 0.01
    for seed in (1, 2):
        run = f"fedit-r8-tune10-eps1-lr{suite.transferred_lrs('eps1')['fedit']:g}-s{seed}"
        acc[run] = _tuning_run(tmp_path / run, np.arange(400) >= 40, np.arange(800) >= 8)
        (tmp_path / run / "bench.json").write_text(json.dumps({"clients": 2}))
        (tmp_path / run / "summary.json").write_text(json.dumps(
            {"privacy": {"epsilon": alone, "delta": 1e-5}}))
        save(run, 0, strong)
        save(run, 1, small)
    lines, _ = suite.tuning_report(tmp_path, acc, _OWN, _VALIDATION)
    moved = next(line for line in lines if line.startswith("Privacy: a eps1 run"))
    together = sweep_epsilon([[history]] * len(lrs) + [[strong, small]], 1e-5)
    assert f"fedit {together:.2f} (eps1 run alone {alone:.2f})" in moved, moved
    assert together > composed and together > alone
    assert "ffa-lora — (eps3 grid or eps1 runs missing)" in moved
    for seed in (1, 2):
        acc.pop(f"fedit-r8-tune10-eps1-lr{suite.transferred_lrs('eps1')['fedit']:g}-s{seed}")
    # the committed runs keep privacy.json, not the node state
    for lr in lrs:
        shutil.rmtree(tmp_path / f"fedit-r8-tune10-eps3-lr{lr:g}-s0" / "client-state")
    again, _ = suite.tuning_report(tmp_path, acc, _OWN, _VALIDATION)
    assert said in again
    # a cache left by another run in the same folder is refused
    (tmp_path / f"fedit-r8-tune10-eps3-lr{lrs[1]:g}-s0" / "config.yaml").write_text("other\n")
    lines, _ = suite.tuning_report(tmp_path, acc, _OWN, _VALIDATION)
    assert "fedit — (unreadable client state: " in "\n".join(lines)
    assert "written for another run" in "\n".join(lines)
    # a run reporting more than its histories give is not accounted for by them
    run = f"ffa-lora-r8-tune10-eps3-lr{lrs[0]:g}-s0"
    (tmp_path / run / "summary.json").write_text(json.dumps(
        {"privacy": {"epsilon": one + 0.5, "delta": 1e-5}}))
    with pytest.raises(ValueError, match="below the"):
        suite.spent_histories(tmp_path, run)
    lines, _ = suite.tuning_report(tmp_path, {r: a for r, a in acc.items() if "-lr0.05-" not in r},
                                   _OWN, _VALIDATION)
    assert "fedit — (grid incomplete)" in "\n".join(lines)


def test_lora_tuning_refuses_validation_rows_of_a_model_that_is_not_the_runs(
        tmp_path: Path) -> None:
    """Validation rows are read only after the rebuilt model scored the run's own accuracy."""
    import json

    import numpy as np

    suite = load_suite("lora")
    run = "fedit-r8-tune10-nodp-lr0.01-s0"
    _tuning_run(tmp_path / run, np.arange(400) >= 40, np.arange(800) >= 8)
    assert suite.validation_rows(tmp_path, run, _VALIDATION, _OWN)[1].mean() == 0.99
    # the run's own accuracy no longer matches its cached rows
    (tmp_path / run / "metrics.jsonl").write_text(json.dumps({"round": 2, "accuracy": 0.5}))
    with pytest.raises(suite.RebuildError, match="scores 0.9000"):
        suite.validation_rows(tmp_path, run, _VALIDATION, _OWN)


def test_bandits_suite_runs_the_non_private_arm_clipped_like_the_private_ones() -> None:
    suite = load_suite("bandits")
    runs = suite.runs(True)
    by_m: dict[int, set[str]] = {}
    for r in runs:
        kind, m = r.name.split("-")[0], int(r.config["linucb.num-silos"])
        by_m.setdefault(m, set()).add(kind)
        if kind == "npc":
            assert r.config["linucb.reward-clip"] == suite.REWARD_BOUND
        elif kind == "np":
            assert "linucb.reward-clip" not in r.config
        else:
            assert r.config["dp-linucb.reward-bound"] == suite.REWARD_BOUND
    assert all({"np", "npc"} <= kinds for kinds in by_m.values())


def test_bandits_report_says_not_measured_for_arms_not_run() -> None:
    """An arm left out (``--only``) is "not measured", never a failed prediction."""
    suite = load_suite("bandits")
    nan = float("nan")
    assert suite._mark(nan < 1.0, nan, 1.0) == "not measured"
    assert suite._mark(0.5 < 1.0, 0.5, 1.0) == "holds"
    assert suite._mark(2.0 < 1.0, 2.0, 1.0) == "**does not hold**"


def test_fedcg_suite_runs_every_arm_over_three_seeds_in_both_variants() -> None:
    # issue 14: FedCG's claims are checked over 3 seeds, also in the quick (digits) variant
    suite = load_suite("fedcg")
    for quick in (True, False):
        seeds: dict[str, set[int]] = {}
        for r in suite.runs(quick):
            seeds.setdefault(r.name.rsplit("-s", 1)[0], set()).add(r.config["seed"])
        assert seeds and all(s == {0, 1, 2} for s in seeds.values())


def test_fedcg_full_variant_stops_at_its_target_and_the_report_says_so(tmp_path: Path) -> None:
    """Time to target needs a run only up to the target; best/totals then end at the stop."""
    suite = load_suite("fedcg")
    assert all(r.config["stop-at-target"] and r.config["num-server-rounds"] == 100
               for r in suite.runs(False))
    assert not any(r.config.get("stop-at-target") for r in suite.runs(True))
    run = {"time": {"sim_time_to_target_s": 50.0}, "target": {"round": 5, "up_bytes": 10}}
    summaries = {"fedcg-s0": {**run, "stopped_at_target": {"round": 5}},
                 "fedavg-s0": {"time": {"sim_time_to_target_s": None}, "target": {"round": None}}}
    text = suite.report(summaries, tmp_path)
    assert "1 of 2 runs stopped at the round that reached the target" in text
    assert "stopped" not in suite.report({"fedavg-s0": summaries["fedavg-s0"]}, tmp_path)
    assert "| fedcg | 50 (5) |" in text and "| fedavg | never |" in text
    assert "fedcg vs fedavg: 1 wins, 0 losses, 0 ties over 1 paired seeds" in text


def test_fedcg_pairs_seeds_reaching_beats_never_and_two_nevers_tie() -> None:
    suite = load_suite("fedcg")

    def s(t: float | None) -> dict[str, Any]:
        return {"time": {"sim_time_to_target_s": t}}

    runs = {"fedcg-s0": s(10.0), "fedcg-s1": s(30.0), "fedcg-s2": s(None), "fedcg-s3": s(None),
            "a-s0": s(20.0), "a-s1": s(20.0), "a-s2": s(5.0), "a-s3": s(None)}
    assert suite.paired(runs, "fedcg", "a") == (
        "fedcg vs a: 1 wins, 2 losses, 1 ties over 4 paired seeds")
    assert suite.paired(runs, "fedcg", "b") == "fedcg vs b: no paired seed"


def test_fedkseed_prompt_arms_share_clients_rounds_and_evaluation() -> None:
    suite = load_suite("fedkseed")
    for quick in (True, False):
        runs = [r for r in suite.runs(quick) if r.name.startswith("prompt-")]
        assert {r.config["method"] for r in runs} >= {"fedkseed", "fedkseed-pro"}
        shared = {"task", "num-server-rounds", "fraction-train", "partition", "seed",
                  "batch-size"}
        assert len({tuple(sorted((k, r.config[k]) for k in shared)) for r in runs}) == 1
        assert len({r.clients for r in runs}) == 1
        zo = [r for r in runs if "fedkseed" in r.config["method"]]
        assert all(r.config["fedkseed.lr"] == suite.ZO["rt-smollm"]["fedkseed.lr"] for r in zo)


def _prompt_run(folder: Path, accuracies: list[float], wall: float, up: int) -> dict[str, Any]:
    import json

    folder.mkdir(parents=True)
    rows = [{"round": i + 1, "accuracy": a, "wall_s": wall, "up_bytes": up}
            for i, a in enumerate(accuracies)]
    (folder / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return {"final": {"accuracy": accuracies[-1]}}


def test_fedkseed_report_judges_zero_shot_and_equal_budgets(tmp_path: Path) -> None:
    import json

    suite = load_suite("fedkseed")
    (tmp_path / "zero_shot.json").write_text(json.dumps({"accuracy": 0.70, "majority": 0.6}))
    summaries = {
        "prompt-fedkseed": _prompt_run(tmp_path / "prompt-fedkseed", [0.72, 0.76, 0.80], 10.0,
                                       2_000),
        "prompt-fedkseed-pro": _prompt_run(tmp_path / "prompt-fedkseed-pro", [0.70, 0.71, 0.70],
                                           10.0, 2_000),
        "prompt-fedit": _prompt_run(tmp_path / "prompt-fedit", [0.85, 0.86], 20.0, 900_000),
    }
    text = suite.report(summaries, tmp_path)
    checks = {c["claim"]: c["verdict"] for c in
              json.loads((tmp_path / "verdicts.json").read_text())["checks"]}
    assert checks["fedkseed improves over zero-shot on rt-smollm (last round)"] == "holds"
    assert checks["fedkseed-pro improves over zero-shot on rt-smollm (last round)"] == (
        "inconclusive")
    # equal wall time (30 s, the shortest arm's total): fedkseed's 0.80 vs fedit's round 1, 0.85
    assert checks["fedkseed >= fedit at equal wall time"] == "does not hold"
    # equal uplink bytes (6,000 B): fedit has not finished a round, so it stands at zero-shot
    assert checks["fedkseed >= fedit at equal uplink bytes"] == "holds"
    assert "| prompt-fedkseed | 0 | 0 | 0 | 0.7000 |" in text


@pytest.mark.parametrize("method", ["fedkseed", "fedkseed-pro"])
def test_fedkseed_rt_smollm_preset_holds_the_suites_values_and_section_12s_steps(
        method: str) -> None:
    """The preset gives both ZO methods the schedule RESULTS.md fedkseed sections 12 (FedKSeed)
    and 13 (FedKSeed-Pro) confirmed."""
    from bouquet.apps.config import resolve

    suite = load_suite("fedkseed")
    cfg = resolve({"method": method, "preset": "fedkseed-rt-smollm"})
    zo = suite.ZO["rt-smollm"]
    assert cfg.task_name == "rt-smollm" and cfg.common.batch_size == zo["batch-size"]
    section = cfg.sections["fedkseed"]
    assert (section.lr, section.eps) == (zo["fedkseed.lr"], zo["fedkseed.eps"])
    # the quick schedule's clients and rounds, with the 120 steps per client and round at which
    # RESULTS.md fedkseed section 12 confirmed the accuracy gain (the quick arm runs 20)
    quick = suite.PROMPT["quick"]
    assert section.local_steps == 120
    assert quick["zo_steps"] < section.local_steps
    assert cfg.common.fraction_train == quick["fraction"]
    assert cfg.common.num_server_rounds == quick["rounds"]


def test_fedkseed_report_adds_paired_verdicts_from_the_rebuilt_final_model(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import json

    import numpy as np

    suite = load_suite("fedkseed")
    (tmp_path / "zero_shot.json").write_text(json.dumps({"accuracy": 0.75, "majority": 0.6}))
    summaries = {r: _prompt_run(tmp_path / r, [0.75, 0.75], 10.0, 2_000)
                 for r in ("prompt-fedkseed", "prompt-fedkseed-pro")}
    # zero-shot rows of varied difficulty; fedkseed's final model 0.01 lower on every row
    # (accuracy unchanged); fedkseed-pro left no checkpoint, so nothing to pair
    zero = np.linspace(0.1, 2.0, 400)
    right = np.arange(400) % 4 != 0
    # the rows are cached under a digest of what they come from (here a stand-in for the
    # task's held-out rows and model): written as the suite writes them, so nothing is evaluated
    monkeypatch.setattr(suite, "_task_fingerprint", lambda task: b"fixture rows")
    suite.cached_rows(tmp_path / f"zero_shot_{suite.ROWS_FILE}",
                       suite.rows_key("zero-shot", b"fixture rows"), lambda: (zero, right))
    checkpoint = tmp_path / "prompt-fedkseed" / "checkpoint"
    from bouquet.strategies.checkpoint import save_checkpoint

    save_checkpoint(checkpoint, 2, {"accumulator": np.zeros(8)})
    config = "fedkseed.lr: 1.0e-05\n"
    (tmp_path / "prompt-fedkseed" / "config.yaml").write_text(config)
    key = suite.rows_key("final", b"2", np.zeros(8).tobytes(), config.encode(), b"fixture rows")
    suite.cached_rows(tmp_path / "prompt-fedkseed" / suite.ROWS_FILE, key,
                       lambda: (zero - 0.01, right))
    text = suite.report(summaries, tmp_path)
    checks = {c["claim"]: c["verdict"] for c in
              json.loads((tmp_path / "verdicts.json").read_text())["checks"]}
    paired = "against zero-shot on rt-smollm (paired per row, last checkpoint)"
    assert checks[f"fedkseed lowers the held-out loss {paired}"] == "holds"
    assert checks[f"fedkseed raises the held-out accuracy {paired}"] == "inconclusive"
    assert checks[f"fedkseed-pro lowers the held-out loss {paired}"] == "not measured"
    # the accuracy verdict stays as it was: 0.75 -> 0.75 is within the unpaired margin
    assert checks["fedkseed improves over zero-shot on rt-smollm (last round)"] == "inconclusive"
    assert "| prompt-fedkseed | 2 | 1.0500 -> 1.0400 | -0.0100 +- 0.0000 |" in text


def test_scafcom_report_gives_the_unscreened_control_no_verdict(tmp_path: Path) -> None:
    """A one-sided "within 1.5 points" check passes whenever its reference collapses: the
    norm-screen control (SCAFFOLD at chance) is reported beside the checks, never as one."""
    import json

    suite = load_suite("scafcom")

    def summary(best: float, final: float, up: float) -> dict[str, Any]:
        return {"best": {"accuracy": best}, "final": {"accuracy": final},
                "comm": {"up_bytes_total": up}}

    summaries = {"scaffold-s0": summary(0.76, 0.72, 2.3e8),
                 "scaffold-unscreened-s0": summary(0.68, 0.10, 2.3e8),
                 "scaffold-opt1-s0": summary(0.77, 0.75, 2.3e8),
                 "scafcom-topk-s0": summary(0.755, 0.74, 4.0e6)}
    text = suite.report(summaries, tmp_path)
    claims = [c["claim"] for c in json.loads((tmp_path / "verdicts.json").read_text())["checks"]]
    assert claims == ["scafcom-topk within 1.5 points of SCAFFOLD's best accuracy with >= 20x "
                      "fewer uplink bytes"]
    assert "descriptive, no verdict: SCAFFOLD without the norm screen has best accuracy 0.6800 " \
           "and final 0.1000" in text
    # option I controls are an arm of their own, never SCAFFOLD's reference
    assert "SCAFFOLD minus scafcom-topk = +0.5 points" in text
    assert "SCAFFOLD with option I controls has best accuracy 0.7700 and final 0.7500 " \
           "(option II 0.7600 and 0.7200)" in text


def test_scafcom_fraction_runs_are_named_and_kept_out_of_the_checks(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``SCAFCOM_BENCH_FRACTION`` sets the clients per round and tags each name, so that the
    checks (declared for 10 % participation) and the lr grid never read such a run."""
    import json

    suite = load_suite("scafcom")
    monkeypatch.setenv("SCAFCOM_BENCH_FRACTION", "1")
    runs = {r.name: r for r in suite.runs(False)}
    assert runs["scaffold-frac1-s2"].config["fraction-train"] == 1.0
    assert all(name.endswith(("-frac1-s0", "-frac1-s1", "-frac1-s2")) for name in runs)
    for bad in ("0", "1.5"):
        monkeypatch.setenv("SCAFCOM_BENCH_FRACTION", bad)
        with pytest.raises(ValueError, match="fraction"):
            suite.runs(False)
    summaries = {name: {"best": {"accuracy": 0.7}, "final": {"accuracy": 0.7},
                        "comm": {"up_bytes_total": 1.0}}
                 for name in ("scaffold-frac1-s0", "scafcom-topk-frac1-s0")}
    suite.report(summaries, tmp_path)
    assert json.loads((tmp_path / "verdicts.json").read_text())["checks"] == []


def test_scafcom_seeds_can_be_chosen(monkeypatch: pytest.MonkeyPatch) -> None:
    """``SCAFCOM_BENCH_SEEDS`` replaces the seeds of either setting; bad lists are refused."""
    suite = load_suite("scafcom")
    assert {r.config["seed"] for r in suite.runs(True)} == {0}
    monkeypatch.setenv("SCAFCOM_BENCH_SEEDS", "3,1, 2")
    runs = {r.name: r for r in suite.runs(True)}
    assert runs["scaffold-opt1-s3"].config["seed"] == 3
    assert {r.config["seed"] for r in runs.values()} == {1, 2, 3}
    for bad in ("a", "-1", "1,,2"):
        monkeypatch.setenv("SCAFCOM_BENCH_SEEDS", bad)
        with pytest.raises(ValueError, match="SCAFCOM_BENCH_SEEDS"):
            suite.runs(True)


def test_scafcom_lr_grid_names_its_runs_and_keeps_them_out_of_the_checks(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``SCAFCOM_BENCH_LR`` runs are named by lr and left out of the shared-lr checks and byte
    counts; the report tabulates every grid run of the folder, each arm at its best lr, and
    chooses none where the arm's cells differ in seeds or rounds."""
    import json

    suite = load_suite("scafcom")
    monkeypatch.setenv("SCAFCOM_BENCH_LR", "0.02")
    runs = suite.runs(False)
    assert {r.config["lr"] for r in runs} == {0.02}
    assert "fedavg-lr0.02-s2" in {r.name for r in runs}
    monkeypatch.setenv("SCAFCOM_BENCH_LR", "-1")
    with pytest.raises(ValueError, match="learning rate"):
        suite.runs(False)

    def run(name: str, accs: list[float | None], up: float = 1.0) -> dict[str, Any]:
        (tmp_path / name).mkdir()
        (tmp_path / name / "metrics.jsonl").write_text("".join(
            json.dumps({"round": i + 1, "accuracy": a, "uplink_payload_bytes": up}) + "\n"
            for i, a in enumerate(accs)))
        finite = [a for a in accs if a is not None]
        return {"best": {"accuracy": max(finite)}, "final": {"accuracy": finite[-1]},
                "comm": {"up_bytes_total": up * len(accs)}}

    # the shared-lr runs the checks use, and grid runs of the same arms that would change them
    summaries = {"scaffold-s0": run("scaffold-s0", [0.70] * 12, up=100.0),
                 "scafcom-topk-s0": run("scafcom-topk-s0", [0.69] * 12, up=1.0),
                 "scaffold-lr0.02-s0": run("scaffold-lr0.02-s0", [0.90] * 12, up=7.0),
                 "scafcom-topk-lr0.1-s0": run("scafcom-topk-lr0.1-s0", [0.10] * 12, up=9.0)}
    # grid runs an earlier call left in the folder (not in this call's summaries)
    run("fedavg-lr0.02-s0", [0.5] * 12)
    run("fedavg-lr0.02-s1", [0.7] * 12)
    run("fedavg-lr0.1-s0", [0.1] * 11 + [0.9])
    run("fedavg-lr0.1-s1", [0.1] * 11 + [0.9, None])  # a non-finite round is skipped
    run("fed-ef-lr0.02-s0", [0.6] * 12)
    run("fed-ef-lr0.1-s1", [0.8] * 12)  # another seed: not comparable
    text = suite.report(summaries, tmp_path)
    [check] = json.loads((tmp_path / "verdicts.json").read_text())["checks"]
    assert "+1.0 points, 100.0x fewer bytes" in check["measured"], check
    assert "- scaffold: 1,200 B" in text and "- scafcom-topk: 12 B" in text
    assert "| fed-ef | 0.6000 / 0.6000 | 0.8000 / 0.8000 | - (cells differ in seeds or rounds) |" \
        in text
    # fedavg's lr-0.1 seed 1 has 13 rounds: its cells differ in rounds, so no lr is chosen
    assert "| fedavg | 0.6000 / 0.6000 | 0.9000 / 0.1800 | - (cells differ in seeds or rounds) " \
           "| 0,1 | 12/13 |" in text
    (tmp_path / "fedavg-lr0.1-s1" / "metrics.jsonl").write_text("".join(
        json.dumps({"round": i + 1, "accuracy": a}) + "\n" for i, a in enumerate([0.1] * 11 + [0.9])))
    text = suite.report(summaries, tmp_path)
    # lr 0.1's best (0.9) beats lr 0.02's seed mean (0.6), though its last-10 mean is 0.18
    assert "| fedavg | 0.6000 / 0.6000 | 0.9000 / 0.1800 | 0.1 | 0,1 | 12 |" in text
    assert "| scaffold | 0.9000 / 0.9000 | - | 0.02 | 0 | 12 |" in text
    assert (tmp_path / "plots-lr-grid" / "accuracy_vs_round.png").is_file()
