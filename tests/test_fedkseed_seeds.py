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


@pytest.mark.parametrize("arm", ["prompt-fedkseed", "prompt-fedkseed-pro"])
def test_a_seed_run_is_the_suites_arm_with_only_steps_timeout_and_seed_changed(arm: str) -> None:
    s, suite = script(), load_suite("fedkseed")
    original = next(r for r in suite.runs(True) if r.name == arm)
    run = s.seed_run(suite, arm, 40, 3)
    assert (run.name, run.clients, run.faults) == (original.name, original.clients, original.faults)
    changed = {k for k in run.config if run.config[k] != original.config.get(k)}
    assert changed == {"fedkseed.local-steps", "round-timeout", "seed"}
    assert set(original.config) - set(run.config) == set()
    assert (run.config["fedkseed.local-steps"], run.config["round-timeout"],
            run.config["seed"]) == (40, 1800.0, 3)
    # seed 0 at 20 steps is the suite's own arm apart from the timeout
    same = s.seed_run(suite, arm, original.config["fedkseed.local-steps"], original.config["seed"])
    assert {**same.config, "round-timeout": None} == {**original.config, "round-timeout": None}
    with pytest.raises(ValueError, match="arm must be one of"):
        s.seed_run(suite, "prompt-fedit", 40, 0)


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
