"""The rt-smollm DP verdicts of ``benchmarks/dp_lora_probe.py`` (drops and learning vs zero-shot)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from typing import Any

import pytest

from bouquet.apps.verdicts import FAILS, HOLDS, INCONCLUSIVE, NOT_MEASURED


def probe() -> Any:
    path = Path(__file__).resolve().parents[1] / "benchmarks" / "dp_lora_probe.py"
    spec = importlib.util.spec_from_file_location("dp_lora_probe", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("dp_lora_probe", module)
    spec.loader.exec_module(module)
    return module


def line(method: str, eps: float, acc: float) -> dict[str, Any]:
    return {"task": "rt-smollm", "method": method, "eps": eps, "seed": 0, "accuracy": [acc],
            "eval_rows": 400}


def verdicts(results: list[dict[str, Any]]) -> dict[str, str]:
    return {c.claim: c.verdict for c in probe().rt_smollm_checks(results)}


def test_drops_compare_against_fedit_beyond_two_standard_errors() -> None:
    got = verdicts([line("fedit", 0, 0.88), line("fedit", 3, 0.70),     # drop 0.18
                    line("ffa-lora", 0, 0.86), line("ffa-lora", 3, 0.84),  # drop 0.02
                    line("fed-sb", 0, 0.845), line("fed-sb", 3, 0.80)])  # drop 0.045
    assert got["FFA-LoRA degrades less than FedIT under DP (rt-smollm, eps 3)"] == HOLDS
    assert got["Fed-SB degrades less than FedIT under DP (rt-smollm, eps 3)"] == HOLDS
    assert got["FedIT learns under DP (rt-smollm, eps 3: above zero-shot)"] == FAILS
    assert got["FFA-LoRA learns under DP (rt-smollm, eps 3: above zero-shot)"] == INCONCLUSIVE
    assert got["Fed-SB learns under DP (rt-smollm, eps 3: above zero-shot)"] == INCONCLUSIVE


def test_close_drops_are_inconclusive_and_a_missing_arm_not_measured() -> None:
    got = verdicts([line("fedit", 0, 0.88), line("fedit", 3, 0.86),
                    line("ffa-lora", 0, 0.86), line("ffa-lora", 3, 0.87),
                    line("fed-sb", 3, 0.90)])
    assert got["FFA-LoRA degrades less than FedIT under DP (rt-smollm, eps 3)"] == INCONCLUSIVE
    assert got["Fed-SB degrades less than FedIT under DP (rt-smollm, eps 3)"] == NOT_MEASURED
    assert got["Fed-SB learns under DP (rt-smollm, eps 3: above zero-shot)"] == HOLDS


def test_drops_pair_arms_by_seed_and_skip_a_seed_with_half_a_pair() -> None:
    def at(seed: int, method: str, eps: float, acc: float) -> dict[str, Any]:
        return {**line(method, eps, acc), "seed": seed}

    # Seed 0: FFA-LoRA's drop 0.02 below FedIT's. Seed 1 has FFA-LoRA's private arm only;
    # pooling every run per arm would make the drops 0.12 and 0.01, a difference that "holds".
    results = [at(0, "fedit", 0, 0.88), at(0, "fedit", 3, 0.80),
               at(0, "ffa-lora", 0, 0.86), at(0, "ffa-lora", 3, 0.80),
               at(1, "fedit", 0, 0.86), at(1, "fedit", 3, 0.70),
               at(1, "ffa-lora", 3, 0.90)]
    checks = {c.claim: c for c in probe().rt_smollm_checks(results)}
    drop = checks["FFA-LoRA degrades less than FedIT under DP (rt-smollm, eps 3)"]
    assert drop.verdict == INCONCLUSIVE
    assert "difference +0.0200" in drop.measured and "1 seed(s)" in drop.measured
    learns = checks["FFA-LoRA learns under DP (rt-smollm, eps 3: above zero-shot)"]
    assert "2 seed(s)" in learns.measured


def test_two_complete_seeds_report_each_seeds_difference() -> None:
    results = [{**line(m, e, a), "seed": s} for s, m, e, a in [
        (0, "fedit", 0, 0.88), (0, "fedit", 3, 0.70), (0, "fed-sb", 0, 0.86),
        (0, "fed-sb", 3, 0.84), (1, "fedit", 0, 0.86), (1, "fedit", 3, 0.76),
        (1, "fed-sb", 0, 0.85), (1, "fed-sb", 3, 0.85)]]
    check = {c.claim: c for c in probe().rt_smollm_checks(results)}[
        "Fed-SB degrades less than FedIT under DP (rt-smollm, eps 3)"]
    assert check.verdict == HOLDS  # mean difference (0.16 + 0.10) / 2 = 0.13 > 2 SE 0.055
    assert "per seed 0: +0.1600, 1: +0.1000" in check.measured


def test_zero_shot_error_does_not_shrink_with_the_seeds() -> None:
    # Three seeds at +0.0342 over zero-shot: the seed mean's error shrinks by sqrt(3), the
    # once-measured zero-shot's does not (2 SE 0.045, not 0.032 as if it were re-measured).
    results = [{**line("fedit", 3, a), "seed": s} for s, a in enumerate([0.84, 0.84, 0.8525])]
    check = {c.claim: c for c in probe().rt_smollm_checks(results)}[
        "FedIT learns under DP (rt-smollm, eps 3: above zero-shot)"]
    assert check.verdict == INCONCLUSIVE
    assert "2 standard errors 0.045" in check.measured


def test_a_second_run_of_the_same_arm_and_seed_is_refused() -> None:
    results = [{**line("fedit", 3, 0.84), "seed": 1}, {**line("fedit", 3, 0.85), "seed": 1}]
    with pytest.raises(ValueError, match="two runs of fedit at eps 3"):
        probe().rt_smollm_checks(results)


def test_runs_of_one_method_with_another_setting_or_no_seed_are_refused() -> None:
    base = {**line("fedit", 0, 0.85), "lr": 0.005, "rank": 8}
    other = {**line("fedit", 3, 0.84), "lr": 0.02, "rank": 8, "seed": 0}
    with pytest.raises(ValueError, match="different lr"):
        probe().rt_smollm_checks([base, other])
    # a transcribed run that lacks the key is not compared on it
    probe().rt_smollm_checks([base, {**line("fedit", 3, 0.84), "rank": 8}])
    unseeded = {k: v for k, v in line("fedit", 3, 0.84).items() if k != "seed"}
    with pytest.raises(ValueError, match="names no seed"):
        probe().rt_smollm_checks([base, unseeded])


def test_two_epsilons_are_judged_apart_on_the_same_non_private_reference() -> None:
    # One non-private reference per arm and seed, private runs at eps 3 and eps 10. Each
    # epsilon's drop uses only its own private runs: at eps 3 FedIT drops 0.18 and FFA-LoRA
    # 0.02 (holds); at eps 10 both drop 0.02 (inconclusive). Pooling the epsilons would give
    # FedIT's drop 0.10 at both.
    results = [line("fedit", 0, 0.88), line("fedit", 3, 0.70), line("fedit", 10, 0.86),
               line("ffa-lora", 0, 0.86), line("ffa-lora", 3, 0.84), line("ffa-lora", 10, 0.84)]
    checks = {c.claim: c for c in probe().rt_smollm_checks(results)}
    at3 = checks["FFA-LoRA degrades less than FedIT under DP (rt-smollm, eps 3)"]
    at10 = checks["FFA-LoRA degrades less than FedIT under DP (rt-smollm, eps 10)"]
    assert at3.verdict == HOLDS and "FedIT +0.1800" in at3.measured
    assert at10.verdict == INCONCLUSIVE and "FedIT +0.0200" in at10.measured
    assert "difference +0.0000" in at10.measured
    learns = checks["FedIT learns under DP (rt-smollm, eps 10: above zero-shot)"]
    assert learns.measured.startswith("0.8600") and "1 seed(s)" in learns.measured
    assert checks["Fed-SB degrades less than FedIT under DP (rt-smollm, eps 10)"].verdict \
        == NOT_MEASURED
