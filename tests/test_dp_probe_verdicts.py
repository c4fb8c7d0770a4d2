"""The rt-smollm DP verdicts of ``benchmarks/dp_lora_probe.py`` (drops and learning vs zero-shot)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from typing import Any

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
    return {"task": "rt-smollm", "method": method, "eps": eps, "accuracy": [acc],
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
