"""Probe of DP-SGD on the LoRA methods (issue 14 item 3): why a private arm does or does not learn.

Two measurements on ``rt-minilm`` (fresh head) or ``rt-smollm`` (``--task``; verbalizer read from
the tied LM head, no head: every trainable tensor is an adapter), with the code the clients run
(``build_adapted`` and ``local_train`` of :mod:`bouquet.clients.lora` /
:mod:`bouquet.privacy.dp`, Fed-SB's round-0 :func:`private_gradient_sum` and the server's
:func:`svd_frame` with ``--frame svd``), no federation:

* ``norms``: per-sample gradient norms at the start of training (fresh head, B = 0 / R = 0),
  split into the head's part and the adapters' part, for FedIT r=2, FFA-LoRA r=4, Fed-SB r=40
  (the suite's matched ranks, or ``--ranks``; Fed-SB on a random frame, on rt-smollm on the
  plain SVD frame of the same rows). Opacus' ``grad_sample`` with
  ``loss_reduction="mean"`` already holds each row's own gradient.
* ``train``: one client holding ``N`` training rows, ``T`` local steps of batch ``B`` (Poisson
  under DP, sigma calibrated for the ``T`` steps, plus Fed-SB's init release with ``--frame
  svd``, at ``--eps``, delta 1e-5), accuracy on the task's evaluation rows (rt-minilm 500,
  rt-smollm 400) every ``--every`` steps; ``--head`` off freezes rt-minilm's head.

Run (heavy: under ``flock /tmp/heavy.lock``)::

    python benchmarks/dp_lora_probe.py norms --rows 32
    python benchmarks/dp_lora_probe.py train --method fedit --rank 2 --rows 3415 --batch 32 \\
        --steps 30 --every 10 --lr 0.005 --eps 3
    python benchmarks/dp_lora_probe.py norms --task rt-smollm --rows 16 \\
        --ranks fedit=8,ffa-lora=8,fed-sb=8
    python benchmarks/dp_lora_probe.py train --task rt-smollm --method fed-sb --rank 8 \\
        --frame svd --rows 2843 --batch 32 --steps 20 --every 20 --lr 0.02 --eps 3

    python benchmarks/dp_lora_probe.py verdicts LOG... --out DIR

Results: benchmarks/RESULTS.md, ``## lora``.
"""

from __future__ import annotations

import argparse
import copy
import json
import time
from typing import Any

import numpy as np
import torch

VARIANT = {"fedit": "fedit", "ffa-lora": "ffa", "fed-sb": "fedsb"}
MATCHED = {"fedit": 2, "ffa-lora": 4, "fed-sb": 40}


def fedsb_frame(task: Any, base: torch.nn.Module, rank: int, x: torch.Tensor, y: torch.Tensor,
                sigma: float, clip: float, private: bool) -> tuple[dict[str, np.ndarray],
                                                              dict[str, np.ndarray]]:
    """Fed-SB's round-0 frame from ``(x, y)`` as one client and the server compute it.

    The client's summed full-weight gradients (:func:`private_gradient_sum` when ``private``:
    clipped to ``clip``, noise ``sigma * clip``; else the plain sum), then the server's
    truncated SVD (:func:`svd_frame`, ``fed-sb.init-lr`` default).
    """
    from bouquet.privacy.dp import private_gradient_sum, secret_generator
    from bouquet.strategies.lora import FedSBConfig, adapted_modules, split_names, svd_frame

    model = copy.deepcopy(base)
    shapes = {k: tuple(v.shape) for k, v in model.state_dict().items()}
    mods = adapted_modules(shapes, split_names(",".join(task.lora_targets)))
    named = dict(model.named_parameters())
    for p in model.parameters():
        p.requires_grad_(False)
    params = [named[a.weight] for a in mods]
    for p in params:
        p.requires_grad_(True)
    model.train()
    if private:
        grads = private_gradient_sum(model, params, task.example_losses, x, y,
                                     max_grad_norm=clip, noise_multiplier=sigma,
                                     noise_generator=secret_generator(11, 0xD9))
    else:
        (task.loss(model, x, y) * len(y)).backward()
        grads = [p.grad for p in params]  # type: ignore[misc]
    total = {a.module: g.detach().numpy().astype(np.float64)  # type: ignore[union-attr]
             for a, g in zip(mods, grads, strict=True)}
    return svd_frame(total, mods, rank, FedSBConfig().init_lr)


def adapted(task: Any, base: torch.nn.Module, method: str, rank: int, head: bool,
            frame: tuple[dict[str, np.ndarray], dict[str, np.ndarray]] | None = None) -> Any:
    """``base`` with the method's fresh adapters (and its head when ``head``).

    Fed-SB uses ``frame`` (its frame and initial R, :func:`fedsb_frame`) or, when None, a
    random frame with R = 0.
    """
    from bouquet.clients.lora import build_adapted, ffa_fixed
    from bouquet.strategies.lora import (
        LoraConfig,
        adapted_modules,
        initial_adapters,
        random_frame,
        split_names,
    )

    variant = VARIANT[method]
    cfg = LoraConfig(rank=rank, target_modules=",".join(task.lora_targets),
                     head_modules=",".join(task.head_modules) if head else "")
    shapes = {k: tuple(v.shape) for k, v in base.state_dict().items()}
    mods = adapted_modules(shapes, split_names(cfg.target_modules))
    fixed: dict[str, np.ndarray] = {}
    if variant == "fedsb" and frame is not None:
        fixed, arrays = dict(frame[0]), dict(frame[1])
    elif variant == "fedsb":
        fixed = random_frame(mods, rank, 0)
        arrays = {f"{a.module}.lora_R": np.zeros((rank, rank), np.float32) for a in mods}
    else:
        arrays = initial_adapters(variant, mods, rank, 0)
        fixed = ffa_fixed(mods, rank, 0) if variant == "ffa" else {}
    if head:
        arrays.update({k: v.detach().numpy() for k, v in base.state_dict().items()
                       if k.startswith(task.head_modules)})
    return build_adapted(None, variant, cfg, arrays, fixed, model=copy.deepcopy(base))


def make_task(name: str) -> Any:
    """``rt-minilm`` (fresh head) or ``rt-smollm`` (verbalizer, no head)."""
    if name == "rt-smollm":
        from bouquet.tasks.prompted import RtSmolLM

        return RtSmolLM()
    from bouquet.tasks.text import RtMiniLM

    return RtMiniLM()


def eval_rows(task: Any) -> tuple[torch.Tensor, torch.Tensor]:
    """The held-out rows every arm is scored on (rt-minilm: 500; rt-smollm: its 400)."""
    d = task.data
    k = min(len(d.y_test), task.eval_size)
    return torch.from_numpy(d.x_test[:k]), torch.from_numpy(d.y_test[:k])


def norms(task_name: str, rows: int, ranks: dict[str, int]) -> None:
    """Per-sample gradient norms (head / adapters) of the three arms at their starting point."""
    from opacus import GradSampleModule

    task = make_task(task_name)
    head = bool(task.head_modules)
    d = task.data
    idx = np.random.default_rng(0).choice(len(d.y_train), rows, replace=False)
    x, y = torch.from_numpy(d.x_train[idx]), torch.from_numpy(d.y_train[idx])
    torch.manual_seed(0)
    base = task.build_model()
    for method, rank in ranks.items():
        frame = (fedsb_frame(task, base, rank, x, y, 0.0, 0.0, private=False)
                 if method == "fed-sb" and not head else None)
        am = adapted(task, base, method, rank, head=head, frame=frame)
        am.model.train()  # Opacus records activations in training mode only
        net = GradSampleModule(am.model, batch_first=True, loss_reduction="mean")
        t0 = time.time()
        task.example_losses(net, x, y).mean().backward()
        seconds = time.time() - t0
        head_sq, adapter_sq = torch.zeros(rows), torch.zeros(rows)
        for name, p in am.params.items():
            sq = (p.grad_sample.reshape(rows, -1) ** 2).sum(1)  # type: ignore[attr-defined]
            if head and name.startswith(task.head_modules):
                head_sq += sq
            else:
                adapter_sq += sq
        total = (head_sq + adapter_sq).sqrt()
        print(json.dumps({
            "task": task_name, "method": method, "rank": rank,
            "trainable": sum(p.numel() for p in am.params.values()),
            "norm_median": round(float(total.median()), 4),
            "norm_p10": round(float(total.quantile(0.1)), 4),
            "norm_p90": round(float(total.quantile(0.9)), 4),
            "head_median": round(float(head_sq.sqrt().median()), 4),
            "adapters_median": round(float(adapter_sq.sqrt().median()), 4),
            "fwd_bwd_s": round(seconds, 2)}), flush=True)
        net._close()


def train(args: argparse.Namespace) -> None:
    """One client's local DP-SGD (or plain) steps per arm, evaluated every ``--every`` steps.

    The arms are ``--method``/``--lr``/``--eps``, or ``--arms METHOD:LR:EPS[:CLIP],...`` run one after
    the other in this process on the same rows, schedule and evaluation (an arm is not started
    once ``--deadline-s`` has passed). Under DP, sigma is calibrated for all the client's
    releases at rate ``B / N``: the ``T`` steps, plus Fed-SB's round-0 gradient release with
    ``--frame svd`` (as the client counts it); the epsilon printed is the accountant's for
    exactly those releases.
    """
    task = make_task(args.task)
    d = task.data
    rows = np.random.default_rng(0).permutation(len(d.y_train))[: args.rows]
    x, y = torch.from_numpy(d.x_train[rows]), torch.from_numpy(d.y_train[rows])
    xt, yt = eval_rows(task)
    torch.manual_seed(0)
    base = task.build_model()
    arms = [(args.method, args.lr, args.eps, args.clip)]
    if args.arms:
        fields = [arm.split(":") for arm in args.arms.split(",")]
        arms = [(f[0], float(f[1]), float(f[2]), float(f[3]) if len(f) > 3 else args.clip)
                for f in fields]
    start = time.time()
    for method, lr, eps, clip in arms:
        if args.deadline_s and time.time() - start > args.deadline_s:
            print(json.dumps({"skipped": [method, lr, eps, clip], "reason": "deadline"}),
                  flush=True)
            continue
        one = argparse.Namespace(**{**vars(args), "method": method, "lr": lr, "eps": eps,
                                    "clip": clip, "arms": ""})
        train_arm(task, base, x, y, xt, yt, one)


def train_arm(task: Any, base: torch.nn.Module, x: torch.Tensor, y: torch.Tensor,
              xt: torch.Tensor, yt: torch.Tensor, args: argparse.Namespace) -> None:
    """One arm of :func:`train` (prints one JSON line)."""
    from bouquet.privacy.accountant import ClientAccountant, calibrate_noise, check_delta
    from bouquet.privacy.dp import local_train, poisson_batches, secret_generator
    from bouquet.privacy.dp_config import DPConfig
    from bouquet.strategies.lora import FedSBConfig
    from bouquet.tasks.torch_utils import generator

    head = args.head and bool(task.head_modules)
    private = args.eps > 0
    delta = 1e-5
    n = len(y)
    q = args.batch / n
    svd_init = args.method == "fed-sb" and args.frame == "svd"
    releases = args.steps + (1 if svd_init else 0)
    sigma = 0.0
    if private:
        check_delta(delta, n)
        sigma = calibrate_noise(args.eps, delta, q, releases)
    t0 = time.time()
    frame = None
    if svd_init:
        if private:  # a Poisson batch at the training rate, from the node's secret randomness
            idx = next(poisson_batches(n, args.batch, secret_generator(11 + args.seed, 0x5B)))
        else:
            idx = torch.randperm(n, generator=generator(args.seed, 0x5B))[
                : FedSBConfig().init_samples]
        frame = fedsb_frame(task, base, args.rank, x[idx], y[idx], sigma, args.clip, private)
    am = adapted(task, base, args.method, args.rank, head=head, frame=frame)
    dp = DPConfig(enabled=True, target_epsilon=args.eps, max_grad_norm=args.clip) if private \
        else None
    accs = []
    for k in range(args.steps // args.every):
        local_train(am.model, list(am.params.values()), task.loss, x, y, steps=args.every,
                    batch_size=args.batch, lr=args.lr, optimizer=args.optimizer,
                    generator=generator(args.seed, k), dp=dp, noise_multiplier=sigma,
                    noise_generator=secret_generator(7 + 1000 * args.seed, k),
                    example_loss_fn=task.example_losses)
        accs.append(round(task.evaluate_model(am.model, xt, yt)["accuracy"], 4))
    eps = ClientAccountant.epsilon_of([(sigma, q, releases)], delta) if private else 0.0
    print(json.dumps({**{k: v for k, v in vars(args).items() if k not in ("what", "arms")},
                      "head": head, "trainable": sum(p.numel() for p in am.params.values()),
                      "sigma": round(sigma, 4), "epsilon": round(eps, 3), "delta": delta,
                      "eval_rows": len(yt), "accuracy": accs,
                      "seconds": round(time.time() - t0)}), flush=True)


#: rt-smollm's zero-shot accuracy on its 400 held-out rows (RESULTS.md ``## fedkseed``, section 5).
ZERO_SHOT = 0.81
NAMES = {"fedit": "FedIT", "ffa-lora": "FFA-LoRA", "fed-sb": "Fed-SB"}


#: What must be the same in every run of a method that the verdicts compare (the private and
#: non-private arms differ only in ``eps``; transcribed runs lack most keys and are not checked
#: on those).
SETTING_KEYS = ("lr", "clip", "rank", "steps", "rows", "batch", "frame", "eval_rows", "optimizer",
                "head")


def rt_smollm_checks(results: list[dict[str, Any]]) -> list[Any]:
    """The issue's DP checks from :func:`train`'s JSON lines (rt-smollm, final accuracies).

    * "<A> degrades less than FedIT under DP (eps E)": drop = non-private minus private
      accuracy on the same schedule and seed, averaged over the seeds at which all four arms
      ran (a seed with half a pair is left out, so no drop mixes seeds); inconclusive within
      two standard errors of a difference of drops (four accuracies on the same rows counted as
      independent, sqrt(4 p (1-p) / (rows seeds)), p the zero-shot rate).
    * "<arm> learns under DP (eps E)": above zero-shot by more than two standard errors of a
      difference of two accuracies, sqrt(p (1-p) (1 + 1/seeds) / rows): the seed mean's
      variance shrinks with the seeds, the zero-shot figure's (measured once) does not; does
      not hold below it by as much; inconclusive between (the private arm is then not
      measurably below zero-shot).
    """
    import math

    from bouquet.apps.verdicts import FAILS, HOLDS, INCONCLUSIVE, NOT_MEASURED, Check

    acc: dict[tuple[str, float], dict[int, float]] = {}
    setting: dict[str, dict[str, Any]] = {}  # a method's training setting, as first seen
    rows = 400
    for r in results:
        if "accuracy" in r and r.get("task") == "rt-smollm":
            if "seed" not in r:
                raise ValueError(f"a run of {r['method']} at eps {r['eps']} names no seed")
            known = setting.setdefault(r["method"], {})
            for key in SETTING_KEYS:
                if key in r and known.setdefault(key, r[key]) != r[key]:
                    raise ValueError(f"{r['method']}: runs with different {key} "
                                     f"({known[key]!r} and {r[key]!r}) cannot be compared")
            runs = acc.setdefault((r["method"], float(r["eps"])), {})
            seed = int(r["seed"])
            if seed in runs:
                raise ValueError(f"two runs of {r['method']} at eps {r['eps']}, seed {seed}")
            runs[seed] = float(r["accuracy"][-1])
            rows = int(r["eval_rows"])
    p = ZERO_SHOT
    checks: list[Any] = []

    def mean(xs: list[float]) -> float:
        return sum(xs) / len(xs)

    for eps in sorted({e for _, e in acc if e > 0}):
        for arm in ("ffa-lora", "fed-sb"):
            claim = f"{NAMES[arm]} degrades less than FedIT under DP (rt-smollm, eps {eps:g})"
            need = [(arm, 0.0), (arm, eps), ("fedit", 0.0), ("fedit", eps)]
            if any(k not in acc for k in need):
                checks.append(Check(claim, NOT_MEASURED, "an arm was not run"))
                continue
            seeds = sorted(set.intersection(*(set(acc[k]) for k in need)))
            if not seeds:
                checks.append(Check(claim, NOT_MEASURED, "no seed with all four arms"))
                continue
            drops = {m: [acc[(m, 0.0)][s] - acc[(m, eps)][s] for s in seeds]
                     for m in (arm, "fedit")}
            diffs = [f - a for f, a in zip(drops["fedit"], drops[arm], strict=True)]
            drop = {m: mean(ds) for m, ds in drops.items()}
            diff = mean(diffs)
            se = math.sqrt(4 * p * (1 - p) / (rows * len(seeds)))
            verdict = INCONCLUSIVE if abs(diff) < 2 * se else HOLDS if diff > 0 else FAILS
            per_seed = ""
            if len(seeds) > 1:
                per_seed = "; per seed " + ", ".join(
                    f"{s}: {d:+.4f}" for s, d in zip(seeds, diffs, strict=True))
            checks.append(Check(claim, verdict, (
                f"drop {NAMES[arm]} {drop[arm]:+.4f} vs FedIT {drop['fedit']:+.4f}, difference "
                f"{diff:+.4f}{per_seed}; 2 standard errors {2 * se:.3f}; {len(seeds)} seed(s), "
                f"{rows} rows")))
        for arm in NAMES:
            claim = f"{NAMES[arm]} learns under DP (rt-smollm, eps {eps:g}: above zero-shot)"
            if (arm, eps) not in acc:
                checks.append(Check(claim, NOT_MEASURED, "not run"))
                continue
            xs = list(acc[(arm, eps)].values())
            gain = mean(xs) - p
            se = math.sqrt(p * (1 - p) * (1 + 1 / len(xs)) / rows)
            verdict = HOLDS if gain > 2 * se else FAILS if gain < -2 * se else INCONCLUSIVE
            note = "; not below zero-shot by 2 standard errors" if verdict == INCONCLUSIVE else ""
            checks.append(Check(claim, verdict, (
                f"{mean(xs):.4f} vs zero-shot {p:.4f} ({gain:+.4f}); 2 standard errors "
                f"{2 * se:.3f}; {len(xs)} seed(s){note}")))
    return checks


def verdicts(paths: list[str], out: str) -> None:
    """Print the checks of :func:`rt_smollm_checks` and write them to ``OUT/verdicts.json``."""
    from pathlib import Path

    from bouquet.apps.verdicts import write_checks

    results = []
    for path in paths:
        for line in Path(path).read_text().splitlines():
            if line.startswith("{"):
                results.append(json.loads(line))
    checks = rt_smollm_checks(results)
    for c in checks:
        print(c.markdown())
    if out:
        Path(out).mkdir(parents=True, exist_ok=True)
        write_checks(Path(out), "lora-dp-rt-smollm", checks)


def main() -> None:
    """Command line (see the module docstring)."""
    import os

    torch.set_num_threads(int(os.environ.get("BOUQUET_TORCH_THREADS", "2")))
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("what", choices=("norms", "train", "verdicts"))
    parser.add_argument("logs", nargs="*", help="verdicts: train's JSON-line outputs")
    parser.add_argument("--out", default="", help="verdicts: folder for verdicts.json")
    parser.add_argument("--task", choices=("rt-minilm", "rt-smollm"), default="rt-minilm")
    parser.add_argument("--rows", type=int, default=32)
    parser.add_argument("--method", choices=tuple(VARIANT), default="fedit")
    parser.add_argument("--rank", type=int, default=2)
    parser.add_argument("--ranks", default="",
                        help="norms: method=rank,... (default: the matched ranks)")
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--every", type=int, default=10)
    parser.add_argument("--lr", type=float, default=0.005)
    parser.add_argument("--eps", type=float, default=0.0, help="target epsilon (0: no DP)")
    parser.add_argument("--clip", type=float, default=1.0)
    parser.add_argument("--seed", type=int, default=0, help="batches and noise of the run")
    parser.add_argument("--arms", default="",
                        help="train: METHOD:LR:EPS[:CLIP],... run in turn (eps 0: no DP)")
    parser.add_argument("--deadline-s", type=float, default=0.0,
                        help="train: start no further arm after this many seconds (0: none)")
    parser.add_argument("--optimizer", choices=("adamw", "sgd"), default="adamw")
    parser.add_argument("--head", action=argparse.BooleanOptionalAction, default=True,
                        help="train the task's head (rt-minilm; rt-smollm has none)")
    parser.add_argument("--frame", choices=("random", "svd"), default="random",
                        help="Fed-SB's frame: random (R = 0) or the round-0 SVD of the "
                             "(private) gradient, as the client and server compute it")
    args = parser.parse_args()
    if args.what == "verdicts":
        verdicts(args.logs, args.out)
    elif args.what == "norms":
        ranks = dict(MATCHED)
        if args.ranks:
            ranks = {m: int(r) for m, r in (kv.split("=") for kv in args.ranks.split(","))}
        norms(args.task, args.rows, ranks)
    else:
        train(args)


if __name__ == "__main__":
    main()
