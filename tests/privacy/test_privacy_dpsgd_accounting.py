"""Independent privacy check of the private LoRA methods (DP-SGD), for the mechanism as run.

A real private run (in-process grid, ``tiny-bert-cls``) is observed from outside the code under
test, inside Opacus' ``DPOptimizer``:

* **sensitivity**: at every step the clipped sum is recomputed from Opacus' per-sample
  gradients and the configured clipping norm C (each row's contribution has norm <= C);
* **noise**: the noise actually added is read off (``grad - summed_grad``) and its standard
  deviation is compared with ``noise_multiplier * C``; every trainable tensor that is sent gets it;
* **sampling**: the batch sizes actually used tell Poisson sampling (varying sizes, mean ``q n``)
  from fixed-size shuffled batches (every row once per epoch).

From that record alone, a second accountant that is not the project's (Google's
``dp-accounting``, privacy-loss distributions) computes each client's epsilon: a
Poisson-subsampled Gaussian per step, or, for fixed-size batches where subsampling amplification
does not apply, one Gaussian per epoch. The epsilon every client reports, and the run's
``summary.json``, must be at least that.
"""

from __future__ import annotations

import json
import math
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from dp_accounting.pld import PLDAccountant
from dp_events import dpsgd_step
from flwr.app import RecordDict
from opacus.optimizers import DPOptimizer

from bouquet.apps.local_grid import LocalGrid
from bouquet.apps.runner import execute
from bouquet.clients import lora as client_lora
from bouquet.schema import CommonConfig
from bouquet.tasks.text import TinyBertCls
from bouquet.wire.arrays import to_numpy

NODES, BATCH, DELTA = 2, 8, 1e-5


class Recorder:
    """What the DP optimiser really did, step by step, per partition."""

    def __init__(self) -> None:
        self.current: tuple[int, str] = (-1, "")
        self.steps: dict[int, list[dict[str, Any]]] = defaultdict(list)
        self.rounds: dict[int, list[int]] = defaultdict(list)  # local steps per round
        self.noise: list[np.ndarray] = []

    def install(self, monkeypatch: pytest.MonkeyPatch) -> None:
        rec = self
        orig_clip, orig_noise = DPOptimizer.clip_and_accumulate, DPOptimizer.add_noise
        orig_train, orig_init = client_lora.LoraClient.train, client_lora.LoraClient.init_gradient

        def clip(opt: DPOptimizer) -> None:
            gs = [opt._get_flat_grad_sample(p) for p in opt.params]
            b = len(gs[0])
            before = [p.summed_grad.clone() if p.summed_grad is not None else 0.0
                      for p in opt.params]
            orig_clip(opt)
            if b:  # independent clipping: sum_i g_i min(1, C / |g_i|)
                norms = torch.stack([g.reshape(b, -1).norm(dim=1) for g in gs], 1).norm(dim=1)
                factor = (opt.max_grad_norm / (norms + 1e-6)).clamp(max=1.0)
                for p, g, s0 in zip(opt.params, gs, before, strict=True):
                    want = torch.einsum("i,i...", factor, g)
                    assert torch.allclose(p.summed_grad - s0, want, atol=1e-6, rtol=1e-4)
                assert float((norms * factor).max()) <= opt.max_grad_norm * (1 + 1e-5)
            pid, phase = rec.current
            rec.steps[pid].append({"batch": b, "phase": phase, "sigma": opt.noise_multiplier,
                                   "clip": opt.max_grad_norm, "expected": opt.expected_batch_size,
                                   "numel": sum(p.numel() for p in opt.params)})

        def noise(opt: DPOptimizer) -> None:
            summed = [p.summed_grad.clone() for p in opt.params]
            orig_noise(opt)
            added = torch.cat([(p.grad - s).reshape(-1) for p, s in zip(opt.params, summed,
                                                                          strict=True)])
            rec.noise.append((added / (opt.noise_multiplier * opt.max_grad_norm)).numpy())

        def train(self: Any, msg: Any, context: Any, env: Any) -> RecordDict:
            rec.current = (env.partition_id, "train")
            before = len(rec.steps[env.partition_id])
            out = orig_train(self, msg, context, env)
            if rec.current[1] == "train":
                rec.rounds[env.partition_id].append(len(rec.steps[env.partition_id]) - before)
            return out

        def init(self: Any, msg: Any, context: Any, env: Any, rnd: int) -> RecordDict:
            rec.current = (env.partition_id, "init")
            return orig_init(self, msg, context, env, rnd)

        monkeypatch.setattr(DPOptimizer, "clip_and_accumulate", clip)
        monkeypatch.setattr(DPOptimizer, "add_noise", noise)
        monkeypatch.setattr(client_lora.LoraClient, "train", train)
        monkeypatch.setattr(client_lora.LoraClient, "init_gradient", init)


def true_epsilon(steps: list[dict[str, Any]], rounds: list[int], n: int, sampling: str) -> float:
    """dp-accounting's epsilon of one client's record (PLD), from what the optimiser did."""
    events: Counter[tuple[float, float]] = Counter()  # (sample rate, sigma) -> count
    train = [s for s in steps if s["phase"] == "train"]
    for s in steps:
        assert s["clip"] > 0 and s["sigma"] > 0
    q = BATCH / n
    for s in (s for s in steps if s["phase"] == "init"):  # one Poisson release of a sum
        events[(q, s["sigma"])] += 1
    sizes = np.array([s["batch"] for s in train])
    if sampling == "poisson":
        assert len(set(sizes.tolist())) > 1, "Poisson batches would vary in size"
        # mean batch size q n, within 5 binomial standard errors
        assert abs(sizes.mean() - q * n) < 5 * math.sqrt(q * n * (1 - q) / len(sizes))
        for s in train:
            events[(q, s["sigma"])] += 1
    else:
        per_epoch = math.ceil(n / BATCH)
        at = 0
        for k in rounds:  # batches restart each round; one full Gaussian per epoch touched
            chunk = train[at : at + k]
            at += k
            for e in range(0, k, per_epoch):
                epoch = chunk[e : e + per_epoch]
                assert all(s["batch"] == BATCH for s in epoch[:-1])
                events[(1.0, min(s["sigma"] for s in epoch))] += 1
    acc = PLDAccountant()
    for (rate, sigma), count in events.items():  # composition commutes
        acc.compose(dpsgd_step(rate, sigma), count)
    return float(acc.get_epsilon(DELTA))


CASES = {
    "ffa-lora-poisson": ("ffa-lora", {"dp.noise-multiplier": 1.1}),
    "fed-sb-poisson-target": ("fed-sb", {"dp.target-epsilon": 4.0}),
    "fedit-shuffle": ("fedit", {"dp.noise-multiplier": 3.0, "dp.sampling": "shuffle"}),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_reported_epsilon_bounds_the_mechanism_as_run(case: str, tmp_path: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    method, over = CASES[case]
    sampling = str(over.get("dp.sampling", "poisson"))
    cfg = {"method": method, "task": "tiny-bert-cls", "results-dir": str(tmp_path),
           "run-name": case, "num-server-rounds": 2, "local-steps": 6, "batch-size": BATCH,
           "lora.rank": 2, "lr": 0.01, "dp.enabled": True, "dp.delta": DELTA,
           "dp.max-grad-norm": 0.5, "evaluation": "none", "seed": 1, **over}
    rec = Recorder()
    rec.install(monkeypatch)
    grid = LocalGrid(NODES, cfg)
    reported: dict[int, float] = {}
    sent: dict[int, int] = {}
    for pid in range(NODES):
        def keep(c: RecordDict, pid: int = pid) -> RecordDict:
            if "epsilon" in c["metrics"]:  # type: ignore[operator]
                reported[pid] = float(c["metrics"]["epsilon"])  # type: ignore[index,arg-type]
            if "arrays" in c and "epsilon" in c["metrics"]:  # type: ignore[operator]
                sent[pid] = sum(a.size for a in to_numpy(c["arrays"]).values())  # type: ignore[arg-type]
            return c
        grid.corrupt[pid] = keep
    summary = json.loads(execute(grid, grid.run_config).read_text())

    noise = np.concatenate(rec.noise)
    assert abs(noise.std() - 1.0) < 0.05, "noise std is not noise_multiplier * C"
    assert reported, "no private reply"
    worst = 0.0
    for pid, eps in reported.items():
        steps = rec.steps[pid]
        assert all(s["clip"] == 0.5 for s in steps)
        assert all(s["numel"] == sent[pid] for s in steps if s["phase"] == "train"), \
            "a sent tensor is not noised"
        n = TinyBertCls().num_examples(pid, NODES, CommonConfig(seed=1))
        true = true_epsilon(steps, rec.rounds[pid], n, sampling)
        print(f"\n{case} partition {pid}: reported epsilon {eps:.4f} >= dp-accounting "
              f"(PLD) {true:.4f}")
        assert eps >= true * (1 - 1e-3), f"partition {pid}: reported {eps} < true {true}"
        worst = max(worst, true)
    assert summary["privacy"]["epsilon"] >= worst * (1 - 1e-3)
