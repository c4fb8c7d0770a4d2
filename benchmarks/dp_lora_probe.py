"""Probe of DP-SGD on the LoRA methods (issue 14 item 3): why a private arm does or does not learn.

Two measurements on ``rt-minilm``, with the code the clients run (``build_adapted`` and
``local_train`` of :mod:`bouquet.clients.lora` / :mod:`bouquet.privacy.dp`), no federation:

* ``norms``: per-sample gradient norms at the start of training (fresh head, B = 0 / R = 0),
  split into the head's part and the adapters' part, for FedIT r=2, FFA-LoRA r=4, Fed-SB r=40
  (the suite's matched ranks; Fed-SB on a random frame). Opacus' ``grad_sample`` with
  ``loss_reduction="mean"`` already holds each row's own gradient.
* ``train``: one client holding ``N`` training rows, ``T`` local steps of batch ``B`` (Poisson
  under DP, sigma calibrated for the ``T`` steps at ``--eps``), accuracy on the 500 evaluation
  rows every ``--every`` steps; ``--head`` off freezes the head at its random init.

Run (heavy: under ``flock /tmp/heavy.lock``)::

    python benchmarks/dp_lora_probe.py norms --rows 32
    python benchmarks/dp_lora_probe.py train --method fedit --rank 2 --rows 3415 --batch 32 \\
        --steps 30 --every 10 --lr 0.005 --eps 3

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


def adapted(task: Any, base: torch.nn.Module, method: str, rank: int, head: bool) -> Any:
    """``base`` with the method's fresh adapters (and its head when ``head``)."""
    from bouquet.clients.lora import build_adapted, ffa_fixed
    from bouquet.strategies.lora import (
        LoraConfig,
        adapted_modules,
        initial_adapters,
        random_frame,
        split_names,
    )

    variant = VARIANT[method]
    cfg = LoraConfig(rank=rank, head_modules="classifier" if head else "")
    shapes = {k: tuple(v.shape) for k, v in base.state_dict().items()}
    mods = adapted_modules(shapes, split_names(cfg.target_modules))
    fixed: dict[str, np.ndarray] = {}
    if variant == "fedsb":
        fixed = random_frame(mods, rank, 0)
        arrays = {f"{a.module}.lora_R": np.zeros((rank, rank), np.float32) for a in mods}
    else:
        arrays = initial_adapters(variant, mods, rank, 0)
        fixed = ffa_fixed(mods, rank, 0) if variant == "ffa" else {}
    if head:
        arrays.update({k: v.detach().numpy() for k, v in base.state_dict().items()
                       if k.startswith(task.head_modules)})
    return build_adapted(None, variant, cfg, arrays, fixed, model=copy.deepcopy(base))


def norms(rows: int) -> None:
    """Per-sample gradient norms (head / adapters) of the three matched arms."""
    from opacus import GradSampleModule

    from bouquet.tasks.text import RtMiniLM

    task = RtMiniLM()
    d = task.data
    idx = np.random.default_rng(0).choice(len(d.y_train), rows, replace=False)
    x, y = torch.from_numpy(d.x_train[idx]), torch.from_numpy(d.y_train[idx])
    torch.manual_seed(0)
    base = task.build_model()
    for method, rank in MATCHED.items():
        am = adapted(task, base, method, rank, head=True)
        am.model.train()  # Opacus records activations in training mode only
        net = GradSampleModule(am.model, batch_first=True, loss_reduction="mean")
        t0 = time.time()
        task.example_losses(net, x, y).mean().backward()
        seconds = time.time() - t0
        head_sq, adapter_sq = torch.zeros(rows), torch.zeros(rows)
        for name, p in am.params.items():
            sq = (p.grad_sample.reshape(rows, -1) ** 2).sum(1)  # type: ignore[attr-defined]
            if name.startswith(task.head_modules):
                head_sq += sq
            else:
                adapter_sq += sq
        total = (head_sq + adapter_sq).sqrt()
        print(json.dumps({
            "method": method, "rank": rank,
            "trainable": sum(p.numel() for p in am.params.values()),
            "norm_median": round(float(total.median()), 4),
            "norm_p10": round(float(total.quantile(0.1)), 4),
            "norm_p90": round(float(total.quantile(0.9)), 4),
            "head_median": round(float(head_sq.sqrt().median()), 4),
            "adapters_median": round(float(adapter_sq.sqrt().median()), 4),
            "fwd_bwd_s": round(seconds, 2)}), flush=True)
        net._close()


def train(args: argparse.Namespace) -> None:
    """One client's local DP-SGD (or plain) steps, evaluated every ``--every`` steps."""
    from bouquet.privacy.accountant import calibrate_noise
    from bouquet.privacy.dp import local_train, secret_generator
    from bouquet.privacy.dp_config import DPConfig
    from bouquet.tasks.text import RtMiniLM
    from bouquet.tasks.torch_utils import generator

    task = RtMiniLM()
    d = task.data
    rows = np.random.default_rng(0).permutation(len(d.y_train))[: args.rows]
    x, y = torch.from_numpy(d.x_train[rows]), torch.from_numpy(d.y_train[rows])
    xt, yt = torch.from_numpy(d.x_test[:500]), torch.from_numpy(d.y_test[:500])
    torch.manual_seed(0)
    am = adapted(task, task.build_model(), args.method, args.rank, head=args.head)
    private = args.eps > 0
    dp = DPConfig(enabled=True, target_epsilon=args.eps, max_grad_norm=args.clip) if private \
        else None
    sigma = (calibrate_noise(args.eps, 1e-5, args.batch / args.rows, args.steps) if private
             else 0.0)
    t0, accs = time.time(), []
    for k in range(args.steps // args.every):
        local_train(am.model, list(am.params.values()), task.loss, x, y, steps=args.every,
                    batch_size=args.batch, lr=args.lr, optimizer=args.optimizer,
                    generator=generator(0, k), dp=dp, noise_multiplier=sigma,
                    noise_generator=secret_generator(7, k), example_loss_fn=task.example_losses)
        accs.append(round(task.evaluate_model(am.model, xt, yt)["accuracy"], 3))
    print(json.dumps({**{k: v for k, v in vars(args).items() if k != "what"},
                      "sigma": round(sigma, 3), "accuracy": accs,
                      "seconds": round(time.time() - t0)}), flush=True)


def main() -> None:
    """Command line (see the module docstring)."""
    torch.set_num_threads(2)
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("what", choices=("norms", "train"))
    parser.add_argument("--rows", type=int, default=32)
    parser.add_argument("--method", choices=tuple(VARIANT), default="fedit")
    parser.add_argument("--rank", type=int, default=2)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--every", type=int, default=10)
    parser.add_argument("--lr", type=float, default=0.005)
    parser.add_argument("--eps", type=float, default=0.0, help="target epsilon (0: no DP)")
    parser.add_argument("--clip", type=float, default=1.0)
    parser.add_argument("--optimizer", choices=("adamw", "sgd"), default="adamw")
    parser.add_argument("--head", action=argparse.BooleanOptionalAction, default=True)
    args = parser.parse_args()
    if args.what == "norms":
        norms(args.rows)
    else:
        train(args)


if __name__ == "__main__":
    main()
