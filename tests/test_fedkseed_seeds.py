"""``benchmarks/fedkseed_seeds.py``: the arm it runs per seed and the t test across seeds."""

from __future__ import annotations

import importlib.util
import json
import math
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from bouquet.apps.bench import load_suite

PRIOR = Path(__file__).resolve().parents[1] / "benchmarks" / "seed_results" / "prompt-fedkseed.json"


def script() -> Any:
    path = Path(__file__).resolve().parents[1] / "benchmarks" / "fedkseed_seeds.py"
    spec = importlib.util.spec_from_file_location("fedkseed_seeds", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["fedkseed_seeds"] = module  # dataclasses look their module up here
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize(("arm", "steps_key"), [
    ("prompt-fedkseed", "fedkseed.local-steps"), ("prompt-fedkseed-pro", "fedkseed.local-steps"),
    ("prompt-fedit", "local-steps"), ("prompt-ffa-lora", "local-steps"),
    ("prompt-fed-sb", "local-steps")])
def test_a_seed_run_is_the_suites_arm_with_only_steps_timeout_and_seed_changed(
        arm: str, steps_key: str) -> None:
    s, suite = script(), load_suite("fedkseed")
    original = next(r for r in suite.runs(True) if r.name == arm)
    run = s.seed_run(suite, arm, 40, 3)
    assert (run.name, run.clients, run.faults) == (original.name, original.clients, original.faults)
    changed = {k for k in run.config if run.config[k] != original.config.get(k)}
    assert changed == {steps_key, "round-timeout", "seed"}
    assert set(original.config) - set(run.config) == set()
    assert (run.config[steps_key], run.config["round-timeout"], run.config["seed"]) == (40, 1800.0, 3)
    # seed 0 at the suite's steps (None) is the suite's own arm apart from the timeout
    same = s.seed_run(suite, arm, None, original.config["seed"])
    assert {**same.config, "round-timeout": None} == {**original.config, "round-timeout": None}
    with pytest.raises(ValueError, match="arm must be one of"):
        s.seed_run(suite, "prompt-nothing", 40, 0)


def _finished_run(out: Path, arm: str, seed: int, rounds: list[tuple[float, float, float]]) -> Path:
    """``OUT/<arm>-s<seed>`` holding a finished run of the suite's arm at ``seed``, as the run
    writes it: its config, setup, summary and (wall s, uplink B, accuracy) per round."""
    import yaml

    from bouquet.apps import bench
    from bouquet.apps.config import full_run_config, resolve

    s, suite = script(), load_suite("fedkseed")
    folder = s.seed_folder(out, arm, seed)
    run = s.seed_run(suite, arm, None, seed)
    overrides = bench.run_overrides(run, folder)
    cfg = resolve(full_run_config(overrides), list(overrides))
    run_dir = folder / arm
    run_dir.mkdir(parents=True)
    (run_dir / "config.yaml").write_text(yaml.safe_dump(dict(cfg.flat)))
    (run_dir / "bench.json").write_text(json.dumps(bench.run_setup(run)))
    (run_dir / "metrics.jsonl").write_text("".join(
        json.dumps({"round": k + 1, "wall_s": w, "up_bytes": u, "accuracy": a}) + "\n"
        for k, (w, u, a) in enumerate(rounds)))
    (run_dir / "summary.json").write_text(json.dumps(
        {"rounds": len(rounds), "failures": {"errors": 0, "rejected": 0, "missing": 0}}))
    (folder / "zero_shot.json").write_text(json.dumps({"accuracy": 0.80, "majority": 0.6}))
    return run_dir


def test_compare_judges_the_zo_arm_against_each_lora_arm_over_seeds(tmp_path: Path) -> None:
    """Per seed: each arm's accuracy at the last round within the budget (the shorter run's
    wall time; the ZO run's uplink), zero-shot where none fits; over seeds: the mean difference
    against the larger of the one-accuracy margin and 2 SE over seeds."""
    s = script()
    zo = [(100.0, 800.0, 0.81), (100.0, 800.0, 0.81), (100.0, 800.0, 0.82)]  # 300 s, 2,400 B
    fed_sb = {0: 0.91, 1: 0.71, 2: 1.0}  # at 150 s: differences -0.10, +0.10, -0.19
    for seed in (0, 1, 2, 3):
        _finished_run(tmp_path, "prompt-fedkseed", seed, zo)
        _finished_run(tmp_path, "prompt-fedit", seed,
                      [(50.0, 1e6, 0.83), (50.0, 1e6, 0.86), (50.0, 1e6, 0.88)])
        _finished_run(tmp_path, "prompt-ffa-lora", seed,
                      [(50.0, 1e6, 0.80), (50.0, 1e6, 0.79), (50.0, 1e6, 0.81)])
        _finished_run(tmp_path, "prompt-fed-sb", seed,
                      [(50.0, 1e8, 0.5), (50.0, 1e8, 0.5), (50.0, 1e8, fed_sb.get(seed, 0.9))])
    lines, checks = s.compare_arms(tmp_path, "prompt-fedkseed", [0, 1, 2])
    got = {c.claim: c for c in checks}
    fedit = got["fedkseed >= fedit at equal wall time (rt-smollm, seeds 0, 1, 2)"]
    # the budget is FedIT's 150 s: FedKSeed has one round (0.81) against FedIT's 0.88
    assert fedit.verdict == "does not hold" and "mean difference -0.0700" in fedit.measured
    assert got["fedkseed >= ffa-lora at equal wall time (rt-smollm, seeds 0, 1, 2)"].verdict == \
        "inconclusive"
    spread = got["fedkseed >= fed-sb at equal wall time (rt-smollm, seeds 0, 1, 2)"]
    assert spread.verdict == "inconclusive" and "2 SE over seeds (0.171)" in spread.measured
    # at 2,400 B every LoRA arm still reads as zero-shot (its first round sent more)
    bytes_ = got["fedkseed >= fedit at equal uplink bytes (rt-smollm, seeds 0, 1, 2)"]
    assert bytes_.verdict == "inconclusive" and "+0.0200" in bytes_.measured
    assert "| 0 | prompt-fedit | 150 | 0.8100 / 0.8800 | 2,400 | 0.8200 / 0.8000 |" in lines
    # two seeds: figures, no verdict; no seeds or a repeated one: refused
    _, two = s.compare_arms(tmp_path, "prompt-fedkseed", [0, 1])
    assert {c.verdict for c in two} == {"not measured"}
    for bad in ([], [0, 0, 1]):
        with pytest.raises(ValueError, match="distinct seeds"):
            s.compare_arms(tmp_path, "prompt-fedkseed", bad)
    with pytest.raises(ValueError, match="prompt-fedkseed seed 4: no finished run"):
        s.compare_arms(tmp_path, "prompt-fedkseed", [0, 4])


@pytest.mark.parametrize("damage", ["stopped", "other lr", "failures", "no zero-shot", "no curve"])
def test_compare_refuses_a_run_that_is_not_the_plans_finished_run(tmp_path: Path,
                                                                  damage: str) -> None:
    s = script()
    rounds = [(50.0, 1e6, 0.83), (50.0, 1e6, 0.86), (50.0, 1e6, 0.88)]
    for arm in ("prompt-fedkseed", *s.LORA_ARMS):
        run_dir = _finished_run(tmp_path, arm, 1, rounds)
    summary = json.loads((run_dir / "summary.json").read_text())
    if damage == "stopped":  # a run that lost its nodes writes a summary of fewer rounds
        summary.update(rounds=2, stopped={"after_round": 2})
        message = "stopped before its last round"
    elif damage == "other lr":
        text = (run_dir / "config.yaml").read_text().replace("lr: 0.02", "lr: 0.03")
        (run_dir / "config.yaml").write_text(text)
        message = "another configuration"
    elif damage == "failures":
        summary["failures"]["missing"] = 1
        message = "replies lost or refused"
    elif damage == "no zero-shot":
        (run_dir.parent / "zero_shot.json").unlink()
        message = "no zero_shot.json"
    else:  # rounds recorded without their evaluation
        (run_dir / "metrics.jsonl").write_text("".join(
            json.dumps({"round": k, "wall_s": 50.0, "up_bytes": 1e6}) + "\n" for k in (1, 2, 3)))
        message = "0 evaluated rounds"
    (run_dir / "summary.json").write_text(json.dumps(summary))
    with pytest.raises(ValueError, match=message):
        s.compare_arms(tmp_path, "prompt-fedkseed", [1])


def test_the_t_test_across_seeds_reproduces_the_three_recorded_seeds() -> None:
    s = script()
    prior = [r for r in s.read_prior(PRIOR) if r.seed in (0, 1, 2)]
    loss = s.across_seeds("loss", [r.loss_change for r in prior])
    changes = [-0.0040, -0.0116, -0.0142]
    mean = sum(changes) / 3
    se = math.sqrt(sum((c - mean) ** 2 for c in changes) / 2 / 3)
    assert (loss.n, loss.mean, loss.se) == (3, pytest.approx(mean), pytest.approx(se))
    assert loss.t == pytest.approx(mean / se)
    # RESULTS.md fedkseed 7: t = -3.25, p = 0.083; accuracy +0.0050, t = 1.31, p = 0.32
    assert (round(loss.t, 2), round(loss.p, 3)) == (-3.25, 0.083)
    acc = s.across_seeds("accuracy", [r.accuracy_change for r in prior])
    assert (round(acc.mean, 4), round(acc.t, 2), round(acc.p, 2)) == (0.005, 1.31, 0.32)
    assert "t = -3.25, two-sided p = 0.0832 (2 df)" in loss.describe()
    with pytest.raises(ValueError, match="at least two"):
        s.across_seeds("loss", [-0.01])


def _seed_folder(s: Any, out: Path, seed: int, shift: float, flips: tuple[int, int]) -> None:
    """A seed folder as the suite's report leaves it: zero-shot rows, final rows, metrics."""
    folder = s.seed_folder(out, "prompt-fedkseed", seed)
    (folder / "prompt-fedkseed").mkdir(parents=True)
    loss0 = np.linspace(0.1, 1.0, 10)
    correct0 = np.array([1.0] * 5 + [0.0] * 5)
    correct = correct0.copy()
    correct[5:5 + flips[0]] = 1.0  # turned right
    correct[:flips[1]] = 0.0  # turned wrong
    np.savez(folder / "zero_shot_rows.npz", loss=loss0, correct=correct0, key=np.str_("z"))
    np.savez(folder / "prompt-fedkseed" / "rows.npz", loss=loss0 + shift, correct=correct,
             key=np.str_("f"))
    metrics = [{"round": k, "accuracy": 0.5 + 0.01 * k, "loss": 0.6 - 0.01 * k} for k in (1, 2)]
    (folder / "prompt-fedkseed" / "metrics.jsonl").write_text(
        "\n".join(json.dumps(m) for m in metrics) + "\n")
    (folder / "prompt-fedkseed" / "summary.json").write_text(json.dumps({"time": {"wall_s": 12.5}}))


def test_summarize_reads_the_seed_folders_and_tests_them_with_the_prior_seeds(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    s = script()
    _seed_folder(s, tmp_path, 3, -0.02, (2, 1))
    _seed_folder(s, tmp_path, 4, -0.01, (0, 0))
    r = s.read_seed(tmp_path, "prompt-fedkseed", 3)
    assert (r.seed, r.right, r.wrong) == (3, 2, 1)
    assert r.loss_change == pytest.approx(-0.02) and r.loss_se == pytest.approx(0.0, abs=1e-12)
    assert r.accuracy_change == pytest.approx(0.1)
    assert (r.accuracy, r.loss, r.wall_s) == ((0.51, 0.52), (0.59, 0.58), 12.5)
    assert r.zero_shot == (pytest.approx(0.5), pytest.approx(0.55))
    # the recorded seeds were paired against the real zero-shot model, these synthetic ones not:
    # testing them together is refused
    assert s.main(["summarize", "--out", str(tmp_path), "--prior", str(PRIOR),
                   "--seeds", "1,2,3,4"]) == 1
    assert "different zero-shot figures" in capsys.readouterr().err
    prior = tmp_path / "prior.json"  # the recorded seeds with their baseline marked unknown
    prior.write_text(json.dumps([{**row, "zero_shot": []} for row in json.loads(PRIOR.read_text())]))
    saved = tmp_path / "seeds.json"
    assert s.main(["summarize", "--out", str(tmp_path), "--prior", str(prior),
                   "--seeds", "1,2,3,4", "--save", str(saved)]) == 0
    text = capsys.readouterr().out
    assert "Across seeds 1, 2, 3, 4:" in text
    expected = s.across_seeds("loss", [-0.0116, -0.0142, -0.02, -0.01])
    assert expected.describe() in text
    assert "| 3 | 0.5100 0.5200 | 0.5900 0.5800 | -0.0200 +- 0.0000 | +0.1000 | 2 / 1 (1) | 12 |" in (
        text)
    assert [row["seed"] for row in json.loads(saved.read_text())] == [1, 2, 3, 4]
    assert s.read_prior(saved)[2] == r
    # a seed asked for but not measured is an error, not a silently smaller test
    assert s.main(["summarize", "--out", str(tmp_path), "--seeds", "3,4,5"]) == 1
    with pytest.raises(FileNotFoundError, match="run and report seed 7"):
        s.read_seed(tmp_path, "prompt-fedkseed", 7)


def test_the_seed_row_test_matches_a_hand_computation_and_scipy() -> None:
    s = script()
    # d = [[-1, -3], [0, -2]]: seed means -2, -1 -> SE_seed = (1/sqrt 2)/sqrt 2 = 0.5; row means
    # -0.5, -2.5 -> SE_row = sqrt(2)/sqrt(2) = 1; D = -1.5, SE = sqrt(1.25); with 1 df Student's
    # t is Cauchy: P(T <= t) = 1/2 + atan(t)/pi
    test = s.seed_row_test("loss", [[-1.0, -3.0], [0.0, -2.0]], lower_is_better=True)
    t = -1.5 / math.sqrt(1.25)
    assert (test.seeds, test.rows, test.df) == (2, 2, 1)
    assert (test.mean, test.se_seed, test.se_row) == (-1.5, pytest.approx(0.5), pytest.approx(1.0))
    assert test.se == pytest.approx(math.sqrt(1.25)) and test.t == pytest.approx(t)
    assert test.p == pytest.approx(0.5 + math.atan(t) / math.pi)
    up = s.seed_row_test("accuracy", [[-1.0, -3.0], [0.0, -2.0]], lower_is_better=False)
    assert up.p == pytest.approx(0.5 - math.atan(t) / math.pi)
    # against scipy on an unbalanced random matrix (6 seeds x 50 rows)
    import statistics

    from scipy.stats import t as student

    d = np.random.default_rng(0).normal(-0.01, 0.05, size=(6, 50)) + np.linspace(-0.02, 0.02, 6)[
        :, None]
    test = s.seed_row_test("loss", d.tolist(), lower_is_better=True)
    se_seed = statistics.stdev(d.mean(axis=1).tolist()) / math.sqrt(6)
    se_row = statistics.stdev(d.mean(axis=0).tolist()) / math.sqrt(50)
    se = math.sqrt(se_seed**2 + se_row**2)
    assert (test.se_seed, test.se_row, test.se) == (pytest.approx(se_seed), pytest.approx(se_row),
                                                     pytest.approx(se))
    assert test.p == pytest.approx(float(student.cdf(d.mean() / se, 5)))
    with pytest.raises(ValueError, match="at least 2 seeds"):
        s.seed_row_test("loss", [[-1.0, -2.0]], lower_is_better=True)


def test_the_declared_verdicts() -> None:
    s = script()

    def test(mean: float, p: float) -> Any:
        return s.SeedRowTest("loss", 6, 1200, mean, 0.0, 0.0, 1.0, mean, 5, p, True)

    assert s.verdict(test(-0.01, 0.049), 6) == "holds"
    assert s.verdict(test(-0.01, 0.05), 6) == "not shown"
    assert s.verdict(test(0.0, 0.5), 6) == "does not hold"
    assert s.verdict(test(0.002, 0.8), 4) == "does not hold"
    assert s.verdict(test(-0.01, 0.001), 3) == "no verdict"  # fewer than 4 seeds
    assert s.verdict(None, 6) == "no verdict"


def _confirm_rows(s: Any, seeds: tuple[int, ...], rows: tuple[int, int] = (10, 16)) -> Any:
    rng = np.random.default_rng(1)
    r = rows[1] - rows[0]
    zero = rng.uniform(0.1, 1.0, r).astype(np.float32)
    zero_correct = np.arange(r) % 3 != 0
    loss = (zero[None] - rng.uniform(0.0, 0.02, (len(seeds), r))).astype(np.float32)
    correct = np.tile(zero_correct, (len(seeds), 1))
    correct[:, 0] = True  # every seed turns row 0 right
    return s.ConfirmRows(rows, zero, zero_correct, seeds, loss, correct, (3,) * len(seeds))


def test_confirm_recomputes_the_test_from_saved_rows_without_a_run(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    s = script()
    saved = tmp_path / "rows.npz"
    result = _confirm_rows(s, (5, 6, 7, 8))
    result.save(saved)
    back = s.ConfirmRows.load(saved)
    assert (back.rows, back.seeds, back.rounds) == ((10, 16), (5, 6, 7, 8), (3, 3, 3, 3))
    assert back.loss.dtype == np.float32 and np.array_equal(back.loss, result.loss)
    assert back.correct.dtype == bool and np.array_equal(back.correct, result.correct)
    empty = tmp_path / "out"
    empty.mkdir()
    args = ["confirm", "--out", str(empty), "--rows", "10:16", "--prior-rows", str(saved)]
    assert s.main([*args, "--seeds", "5,6,7,8"]) == 0
    text = capsys.readouterr().out
    assert text.strip() == "\n".join(s.confirm_report(back))
    d = (back.loss.astype(np.float64) - back.zero_loss.astype(np.float64))
    expected = s.seed_row_test("loss", d.tolist(), lower_is_better=True)
    assert expected.describe() in text and "verdict" in text
    assert "| 5 | 3 |" in text and "accuracy: D = +0.1667" in text
    # a subset in the declared order: 3 seeds get no verdict
    assert s.main([*args, "--seeds", "5,6,7"]) == 0
    assert "): no verdict" in capsys.readouterr().out
    # a seed neither run nor saved, or saved rows of another range, is an error
    assert s.main([*args, "--seeds", "5,6,7,8,9"]) == 1
    assert "seed(s) [9]" in capsys.readouterr().err
    assert s.main(["confirm", "--out", str(empty), "--rows", "0:6", "--prior-rows", str(saved),
                   "--seeds", "5"]) == 1
    assert "not (0, 6)" in capsys.readouterr().err


def test_confirm_evaluates_a_seed_found_in_out_and_checks_it_against_the_saved_rows(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    s = script()
    saved = _confirm_rows(s, (5, 6))
    evaluated: list[tuple[Path, tuple[int, int]]] = []

    class Suite:
        """The suite's evaluation of a seed folder, with the saved rows as its results."""

        @staticmethod
        def held_out(rows: tuple[int, int]) -> tuple[int, int]:
            return rows

        @staticmethod
        def zero_shot_rows(out: Path, held: tuple[int, int]) -> tuple[Any, Any]:
            return saved.zero_loss.astype(np.float64), saved.zero_correct

        @staticmethod
        def final_rows(folder: Path, arm: str, held: tuple[int, int]) -> Any:
            evaluated.append((folder, held))
            return 3, (saved.loss[1].astype(np.float64) + shift, saved.correct[1])

    monkeypatch.setattr(s, "load_suite", lambda name: Suite)
    (s.seed_folder(tmp_path, "prompt-fedkseed", 6) / "prompt-fedkseed" / "checkpoint").mkdir(
        parents=True)
    (s.seed_folder(tmp_path, "prompt-fedkseed", 6) / "prompt-fedkseed" / "checkpoint"
     / "meta.json").write_text("{}")
    shift = 0.0
    result = s.evaluate_rows(tmp_path, "prompt-fedkseed", [5, 6], (10, 16), saved)
    assert evaluated == [(s.seed_folder(tmp_path.resolve(), "prompt-fedkseed", 6), (10, 16))]
    assert np.array_equal(result.loss, saved.loss) and result.seeds == (5, 6)
    shift = 1e-3  # the folder's model is not the one whose rows were saved
    with pytest.raises(ValueError, match="seed 6: the rows evaluated here differ"):
        s.evaluate_rows(tmp_path, "prompt-fedkseed", [5, 6], (10, 16), saved)
    # without the saved rows, seed 5 has no results
    with pytest.raises(ValueError, match=r"seed\(s\) \[5\]"):
        s.evaluate_rows(tmp_path, "prompt-fedkseed", [5, 6], (10, 16))


#: RESULTS.md fedkseed 9 (FedKSeed) and 10 (FedKSeed-Pro): per-row file, arm, seeds, D, SE_seed,
#: SE_row, SE, t, p (loss), D and p (accuracy).
CONFIRMED = {
    "section-9": (PRIOR.parent / "prompt-fedkseed-rows-400-1600.npz", "prompt-fedkseed",
                  (5, 6, 7, 8, 9, 10), -0.0058, 0.0012, 0.0013, 0.0018, -3.31, 0.0106, 0.0074,
                  0.085),
    "section-10": (PRIOR.parent / "prompt-fedkseed-pro-rows-400-1600.npz", "prompt-fedkseed-pro",
                   (5, 6, 7, 8, 9, 10), -0.0079, 0.0017, 0.0018, 0.0024, -3.29, 0.0109, 0.0076,
                   0.137),
    # section 12's 120-step models on section 9's rows (its descriptive part)
    "section-12-rows-400-1599": (PRIOR.parent / "prompt-fedkseed-120-rows-400-1600.npz",
                                 "prompt-fedkseed", (11, 12, 13, 14, 15, 16), -0.0194, 0.0025,
                                 0.0023, 0.0034, -5.66, 0.00119, 0.0167, 0.0227),
}


@pytest.mark.parametrize("section", sorted(CONFIRMED))
def test_the_committed_rows_reproduce_the_confirmatory_tests_with_no_run(
        section: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    s = script()
    path, arm, seeds, d, se_seed, se_row, se, t, p, acc, acc_p = CONFIRMED[section]
    saved = s.ConfirmRows.load(path)
    assert saved.rows == (400, 1600) and saved.seeds == seeds
    assert saved.loss.shape == (len(seeds), 1200) and saved.rounds == (3,) * len(seeds)
    assert s.main(["confirm", "--arm", arm, "--out", str(tmp_path), "--rows", "400:1600",
                   "--seeds", ",".join(map(str, seeds)), "--prior-rows", str(path)]) == 0
    text = capsys.readouterr().out
    assert (f"loss: D = {d:+.4f} over {len(seeds)} seeds x 1200 rows, SE_seed {se_seed:.4f}, "
            f"SE_row {se_row:.4f}, SE {se:.4f}, t = {t:.2f} ({len(seeds) - 1} df), one-sided "
            f"p = P(T <= t) = {p:.3g}") in text
    assert "at least 4 seeds): holds" in text
    assert f"accuracy: D = {acc:+.4f}" in text and f"= {acc_p:.3g} (secondary" in text


def test_the_committed_rows_reproduce_section_12s_accuracy_test_with_no_run(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Section 12 declared the accuracy change its primary test: the verdict is given on it."""
    s = script()
    path = PRIOR.parent / "prompt-fedkseed-120-rows-1600-2562.npz"
    seeds = "11,12,13,14,15,16"
    saved = s.ConfirmRows.load(path)
    assert saved.rows == (1600, 2562) and saved.loss.shape == (6, 962)
    assert s.main(["confirm", "--out", str(tmp_path), "--rows", "1600:2562", "--seeds", seeds,
                   "--prior-rows", str(path), "--primary", "accuracy"]) == 0
    text = capsys.readouterr().out
    assert ("accuracy: D = +0.0180 over 6 seeds x 962 rows, SE_seed 0.0026, SE_row 0.0064, "
            "SE 0.0069, t = 2.61 (5 df), one-sided p = P(T >= t) = 0.0238\n") in text
    assert "verdict (accuracy higher than zero-shot, one-sided, alpha 0.05, at least 4 seeds): " \
        "holds" in text
    assert "= 0.000838 (secondary, no verdict)" in text  # the loss, now secondary
    assert "loss lower" not in text
    # the default keeps sections 9-10's roles: the loss judged, the accuracy secondary
    assert s.main(["confirm", "--out", str(tmp_path), "--rows", "1600:2562", "--seeds", seeds,
                   "--prior-rows", str(path)]) == 0
    text = capsys.readouterr().out
    assert "verdict (loss lower than zero-shot" in text and "= 0.0238 (secondary" in text


def test_the_committed_rows_reproduce_section_13s_pro_test_and_its_contrast_with_no_run(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Section 13: FedKSeed-Pro at 120 steps, accuracy primary, on section 12's rows and seeds;
    and Pro minus FedKSeed there, seed by seed."""
    s = script()
    pro = PRIOR.parent / "prompt-fedkseed-pro-120-rows-1600-2562.npz"
    ks = PRIOR.parent / "prompt-fedkseed-120-rows-1600-2562.npz"
    seeds = "11,12,13,14,15,16"
    assert s.ConfirmRows.load(pro).rounds == (3,) * 6
    assert s.main(["confirm", "--arm", "prompt-fedkseed-pro", "--out", str(tmp_path), "--rows",
                   "1600:2562", "--seeds", seeds, "--prior-rows", str(pro), "--primary",
                   "accuracy"]) == 0
    text = capsys.readouterr().out
    assert ("accuracy: D = +0.0165 over 6 seeds x 962 rows, SE_seed 0.0039, SE_row 0.0066, "
            "SE 0.0076, t = 2.15 (5 df), one-sided p = P(T >= t) = 0.0419\n") in text
    assert "at least 4 seeds): holds\n" in text
    assert "loss: D = -0.0172 over 6 seeds x 962 rows" in text and "= 0.00364 (secondary" in text
    assert "| 11 | 3 | 0.4965 -> 0.4675 | -0.0290 +- 0.0086 | +0.0333 | 56 / 24 " in text
    assert s.main(["contrast", str(ks), str(pro)]) == 0
    text = capsys.readouterr().out
    assert "- per-seed loss differences: mean -0.0004, SD over seeds 0.0071\n" in text
    assert ("- accuracy difference: D = -0.0016 over 6 seeds x 962 rows, SE_seed 0.0054, SE_row "
            "0.0029, SE 0.0061, t = -0.25 (5 df), two-sided p = 0.809") in text


def _accuracy_rows(changes: list[list[int]]) -> Any:
    """A ConfirmRows whose seeds change each row's correctness by ``changes[s][r]`` (-1, 0, 1)."""
    import numpy as np

    s = script()
    d = np.asarray(changes)
    # a row turns wrong only if zero-shot had it right, and right only if it had it wrong
    zero_correct = (d < 0).any(axis=0)
    assert not ((d > 0).any(axis=0) & zero_correct).any(), "a row both rises and falls"
    correct = np.where(d > 0, True, np.where(d < 0, False, zero_correct[None, :]))
    loss = np.full(d.shape, 0.5, dtype=np.float32) - 0.01 * d
    return s.ConfirmRows((0, d.shape[1]), np.full(d.shape[1], 0.5, dtype=np.float32),
                         zero_correct, tuple(range(len(d))), loss.astype(np.float32), correct,
                         (3,) * len(d))


def test_confirm_gives_the_accuracy_verdict_by_section_9s_rule() -> None:
    """With accuracy primary: holds, does not hold on a fall, not shown, no verdict, bad name."""
    s = script()
    rise = [[1, 1, 0, 1, 0, 1, 0, 1] * 4] * 4  # every seed turns the same 16 of 32 rows right
    fall = [[-v for v in row] for row in rise]
    noisy = [[1, -1] * 16 for _ in range(4)]
    noisy[0][1] = 0  # one row fewer turned wrong: a rise of 1/128, far inside the rows' noise
    for changes, expected in ((rise, s.HOLDS), (fall, s.FAILS), (noisy, s.NOT_SHOWN)):
        text = "\n".join(s.confirm_report(_accuracy_rows(changes), "accuracy"))
        assert f"(accuracy higher than zero-shot, one-sided, alpha 0.05, at least 4 seeds): " \
            f"{expected}\n" in text + "\n"
        lines = text.splitlines()
        assert lines[-3].startswith("- accuracy: D = ") and lines[-1].endswith(
            "(secondary, no verdict)") and lines[-1].startswith("- loss: D = ")
    three = "\n".join(s.confirm_report(_accuracy_rows(rise[:3]), "accuracy"))
    assert three.endswith("(secondary, no verdict)") and f"seeds): {s.NO_VERDICT}" in three
    one = s.confirm_report(_accuracy_rows(rise[:1]), "accuracy")
    assert one[-1] == f"- fewer than 2 seeds: no test; verdict: {s.NO_VERDICT}"
    with pytest.raises(ValueError, match="not 'bogus'"):
        s.confirm_report(_accuracy_rows(rise[:1]), "bogus")


def test_both_arms_were_scored_against_the_same_zero_shot_rows() -> None:
    """Sections 9 and 10 share their rows: the same zero-shot per-row results in both files."""
    import numpy as np

    s = script()
    ks, pro = (s.ConfirmRows.load(v[0]) for v in (CONFIRMED["section-9"], CONFIRMED["section-10"]))
    assert np.array_equal(ks.zero_loss, pro.zero_loss)
    assert np.array_equal(ks.zero_correct, pro.zero_correct)
    assert not np.array_equal(ks.loss, pro.loss)  # two arms, not one file twice


def test_contrast_reproduces_section_10s_pro_minus_fedkseed_from_the_committed_rows(
        capsys: pytest.CaptureFixture[str]) -> None:
    """Section 10's descriptive Pro minus FedKSeed, seed by seed, from the two committed files."""
    s = script()
    ks, pro = (str(CONFIRMED[k][0]) for k in ("section-9", "section-10"))
    assert s.main(["contrast", ks, pro]) == 0
    text = capsys.readouterr().out
    assert text.startswith(f"{pro} minus {ks} on held-out rows 400-1599 (1200 rows)")
    per_seed = ("+0.0035", "+0.0016", "+0.0025", "-0.0059", "-0.0022", "-0.0121")
    for seed, loss in zip(range(5, 11), per_seed, strict=True):
        assert f"| {seed} | {loss} | " in text
    assert "- per-seed loss differences: mean -0.0021, SD over seeds 0.0060\n" in text
    # D is the difference of the two sections' confirmed loss changes
    assert round(CONFIRMED["section-10"][3] - CONFIRMED["section-9"][3], 4) == -0.0021
    assert ("- loss difference: D = -0.0021 over 6 seeds x 1200 rows, SE_seed 0.0025, SE_row "
            "0.0008, SE 0.0026, t = -0.81 (5 df), two-sided p = 0.456 (descriptive, no "
            "verdict)\n") in text
    assert ("- accuracy difference: D = +0.0003 over 6 seeds x 1200 rows, SE_seed 0.0025, "
            "SE_row 0.0026, SE 0.0036, t = 0.08 (5 df), two-sided p = 0.941 (descriptive, no "
            "verdict)\n") in text
    # swapping the arms flips every sign and leaves the two-sided p alone
    assert s.main(["contrast", pro, ks]) == 0
    swapped = capsys.readouterr().out
    assert "| 5 | -0.0035 | " in swapped and "mean +0.0021, SD over seeds 0.0060" in swapped
    assert "t = 0.81 (5 df), two-sided p = 0.456" in swapped
    # --seeds pairs a subset, in the order named
    assert s.main(["contrast", ks, pro, "--seeds", "8,5"]) == 0
    subset = capsys.readouterr().out
    assert "| 8 | -0.0059 | " in subset and "| 5 | +0.0035 | " in subset
    assert subset.index("| 8 |") < subset.index("| 5 |") and "| 6 |" not in subset
    assert "over 2 seeds x 1200 rows" in subset


def test_contrast_refuses_files_it_cannot_pair(tmp_path: Path,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    """Other rows, other zero-shot results or other seeds: a clear error, no statistic."""
    import dataclasses

    s = script()
    base = _accuracy_rows([[1, 0, -1, 0]] * 3)
    others = {
        "[0, 4) and [4, 8)": (dataclasses.replace(base, rows=(4, 8)), None),
        "different zero-shot per-row results on rows 0-3": (
            dataclasses.replace(base, zero_loss=base.zero_loss + 0.1), None),
        "different zero-shot per-row results": (
            dataclasses.replace(base, zero_correct=~base.zero_correct), None),
        "seeds [0, 1, 2] and [2, 1, 0]; name the seeds": (
            dataclasses.replace(base, seeds=(2, 1, 0)), None),
        "seeds [0, 1, 2] and [0, 1, 5]; name": (dataclasses.replace(base, seeds=(0, 1, 5)), None),
        "must be distinct and in both files ([0, 1, 2] and [0, 1, 5]), got [1, 5]": (
            dataclasses.replace(base, seeds=(0, 1, 5)), "1,5"),
        "must be distinct and in both files ([0, 1, 2] and [0, 1, 2]), got [1, 1]": (base, "1,1"),
    }
    first = tmp_path / "first.npz"
    base.save(first)
    for i, (message, (other, seeds)) in enumerate(others.items()):
        path = tmp_path / f"other{i}.npz"
        other.save(path)
        argv = ["contrast", str(first), str(path)] + (["--seeds", seeds] if seeds else [])
        assert s.main(argv) == 1
        out, err = capsys.readouterr()
        assert message in err and out == ""
    # the same seeds in another order pair once named
    reordered = tmp_path / "reordered.npz"
    dataclasses.replace(base, seeds=(2, 1, 0)).save(reordered)
    assert s.main(["contrast", str(first), str(reordered), "--seeds", "0,1,2"]) == 0
    assert "over 3 seeds x 4 rows" in capsys.readouterr().out
    one = s.contrast_report(_accuracy_rows([[1, 0]]), _accuracy_rows([[1, 0]]))
    assert one[-1] == "- fewer than 2 seeds: no statistic over seeds"
    # identical arms: no difference, and the statistic says it has nothing to test (nan)
    same = s.contrast_report(base, base)
    assert same[-1].endswith("t = nan (2 df), two-sided p = nan (descriptive, no verdict)")


def test_the_committed_comparison_reproduces_section_11_with_no_run() -> None:
    """RESULTS.md fedkseed section 11: the committed runs' files give its figures and verdicts."""
    s = script()
    out = Path(__file__).resolve().parents[1] / "benchmarks" / "seed_results" / "prompt-compare"
    lines, checks = s.compare_arms(out, "prompt-fedkseed", [1, 2, 3, 0])
    assert {c.verdict for c in checks} == {"inconclusive"}
    got = {c.claim.split(" (")[0]: c.measured for c in checks}
    assert got["fedkseed >= fedit at equal wall time"].startswith("mean difference -0.0113")
    assert got["fedkseed >= ffa-lora at equal wall time"].startswith("mean difference +0.0387")
    assert got["fedkseed >= fed-sb at equal wall time"].startswith("mean difference -0.0162")
    assert got["fedkseed >= fedit at equal uplink bytes"].startswith("mean difference +0.0037")
    assert "| 0 | prompt-fedit | 103 | 0.8100 / 0.8800 | 2,364 | 0.8075 / 0.8100 |" in lines
