"""Zeroth-order speed (issue 17, target 4): one ZO step against two forward passes, side by side.

For each case (rt-minilm at batch 16 and 1, gsm-smollm at batch 1), in one process with one torch
thread, on the same model and batch, interleaving the measurements rep by rep (the machine may be
shared: interleaving exposes every variant to the same load, and the fastest rep of each is
reported, since load only ever adds time):

* ``2 fwd``: two forward passes (the ideal cost of a two-point step);
* ``step``: one step of :func:`bouquet.clients.zeroth_order.zo_steps` (pool-window directions, two
  passes over the weights per step), timed over :data:`FUSED` consecutive steps and divided; its
  ratio is taken against ``2 * FUSED`` forwards timed in one block too (the same exposure to load);
* ``step 3-pass``: :func:`~bouquet.clients.zeroth_order.zo_step` (same directions, three passes);
* ``old step``: the step as it was before issue 17 (i.i.d. normal directions from a per-tensor
  mt19937 ``torch.Generator`` seeded from ``(seed, tensor index)``, regenerated three times),
  rebuilt here for the comparison only (:class:`LegacyDirections`);
* ``direction``: adding one direction to the weights (the unit cost of a replay), new vs old, also
  per million parameters; and, for reference, drawing one direction with a counter-based hash and
  Box-Muller in torch ops (:func:`hash_box_muller`), the other candidate that is identical on CPU
  and GPU.

Run: ``PYTHONPATH=$PWD flock /tmp/heavy.lock python benchmarks/zo_speed.py [--quick] [--reps N]
[--device cuda] [--only TASK]`` (``--quick`` skips gsm-smollm).
"""

from __future__ import annotations

import argparse
import math
import os
import time
from collections.abc import Callable
from typing import Any

os.environ.setdefault("BOUQUET_TORCH_THREADS", "1")
os.environ.setdefault("HF_HUB_OFFLINE", "1")

import numpy as np  # noqa: E402
import torch  # noqa: E402

from bouquet.clients import zeroth_order as zo  # noqa: E402
from bouquet.tasks.torch_utils import generator  # noqa: E402


class LegacyDirections:
    """The directions before issue 17: per-tensor mt19937 normal draws into one scratch buffer."""

    def __init__(self, params: list[torch.Tensor]) -> None:
        self.params = params
        self.scratch = torch.empty(max(p.numel() for p in params), dtype=torch.float32)

    @torch.no_grad()
    def add_(self, seed: int, scale: float) -> None:
        """``params += scale * z(seed)``, regenerating ``z`` tensor by tensor on the CPU."""
        for i, p in enumerate(self.params):
            z = self.scratch[: p.numel()].view(p.shape)
            z.normal_(0.0, 1.0, generator=generator(int(seed), int(i)))
            p.add_(z if p.device.type == "cpu" else z.to(p.device), alpha=scale)


#: Steps per timed call of ``zo_steps`` (a round runs hundreds; the last closing pass is shared).
FUSED = 4
_M1, _M2 = 0xBF58476D1CE4E5B9 - 2**64, 0x94D049BB133111EB - 2**64  # as signed int64


def hash_box_muller(seed: int, numel: int, device: torch.device, chunk: int = 1 << 20) -> None:
    """Draw ``numel`` normals from SplitMix64(seed, index) + Box-Muller in torch ops (timing only).

    Integer steps are exact on any device; the log/sqrt/cos of Box-Muller are not bitwise equal
    across CPU and CUDA math libraries, so this candidate would also need its own transcendental
    functions to be cross-device exact. Only its cost is measured here.
    """
    base = torch.arange(chunk // 2, dtype=torch.int64, device=device)
    for lo in range(0, numel, chunk):
        h = base + (seed * 0x9E3779B9 + lo)
        for m, s in ((_M1, 30), (_M2, 27)):
            h ^= (h >> s) & ((1 << (64 - s)) - 1)
            h *= m
        h ^= (h >> 31) & ((1 << 33) - 1)
        u1 = ((h & 0xFFFFFF) + 1).to(torch.float32) * 2.0**-24
        u2 = ((h >> 24) & 0xFFFFFF).to(torch.float32) * 2.0**-24
        r = torch.sqrt(-2.0 * torch.log(u1))
        torch.cat([r * torch.cos(2 * math.pi * u2), r * torch.sin(2 * math.pi * u2)])


def setup(task_name: str, batch: int, device: str) -> tuple[torch.nn.Module, Callable[[], float]]:
    """The task's initial model (eval mode) and the loss of one fixed batch."""
    from bouquet.apps.registry import get_task
    from bouquet.schema import CommonConfig

    task = get_task(task_name).load()
    model = task.model_from(task.initial_arrays(0)).to(device)
    model.eval()
    local = task.partition(0, 4, CommonConfig())
    x, y = next(task.batches(local, batch, generator(0, 1, 0)))
    if device != "cpu":
        x = {k: v.to(device) for k, v in x.items()} if isinstance(x, dict) else x.to(device)
        y = y.to(device)

    def loss() -> float:
        with torch.inference_mode():
            return float(task.loss(model, x, y))

    return model, loss


def _sync(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def measure(task_name: str, batch: int, reps: int, device: str) -> dict[str, Any]:
    """Fastest seconds of every variant over the reps, interleaved rep by rep."""
    model, loss = setup(task_name, batch, device)
    params = zo.canonical_parameters(model)
    new, old = zo.Directions(params), LegacyDirections(params)
    numel = new.numel
    loss()
    new.add_(1, 0.0)  # build the pool (and its device copy) outside the timings
    times: dict[str, list[float]] = {k: [] for k in
                                     ("two_forward", "fused_forward", "step", "step_3pass",
                                      "old_step",
                                      "direction", "old_direction", "hash_box_muller")}
    rng = iter(range(10_000, 10**9))

    def timed(key: str, fn: Callable[[], Any]) -> None:
        _sync(device)
        t = time.perf_counter()
        fn()
        _sync(device)
        times[key].append(time.perf_counter() - t)

    for _ in range(reps):
        timed("two_forward", lambda: (loss(), loss()))
        timed("fused_forward", lambda: [loss() for _ in range(2 * FUSED)])
        timed("step", lambda: zo.zo_steps(new, [next(rng) for _ in range(FUSED)],
                                          iter([None] * FUSED), lambda _: loss(),
                                          eps=1e-3, lr=1e-7))
        timed("step_3pass", lambda: zo.zo_step(new, next(rng), loss, eps=1e-3, lr=1e-7))
        timed("old_step", lambda: zo.zo_step(old, next(rng), loss,  # type: ignore[arg-type]
                                             eps=1e-3, lr=1e-7))
        timed("direction", lambda: new.add_(next(rng), 0.0))
        timed("old_direction", lambda: old.add_(next(rng), 0.0))
        timed("hash_box_muller", lambda: hash_box_muller(next(rng), numel, torch.device(device)))
    med = {k: min(v) for k, v in times.items()}
    med["step"] /= FUSED
    med["fused_forward"] /= FUSED
    return {"task": task_name, "batch": batch, "params": numel, "device": device, **med}


def table(rows: list[dict[str, Any]]) -> str:
    """Markdown table of the fastest times and their ratios."""
    out = ["| task | batch | device | params | 2 fwd s | 2 fwd in 8 s | step s | ratio | "
           "3-pass ratio | old step s | old ratio | direction ms/M | old direction ms/M | "
           "hash+Box-Muller ms/M |", "|" + "---|" * 14]
    for r in rows:
        f2, per_m = r["two_forward"], 1e3 * 1e6 / r["params"]
        out.append(
            f"| {r['task']} | {r['batch']} | {r['device']} | {r['params'] / 1e6:.1f}M | "
            f"{f2:.3f} | {r['fused_forward']:.3f} | {r['step']:.3f} | "
            f"**{r['step'] / r['fused_forward']:.2f}** | "
            f"{r['step_3pass'] / f2:.2f} | {r['old_step']:.3f} | {r['old_step'] / f2:.2f} | "
            f"{r['direction'] * per_m:.2f} | {r['old_direction'] * per_m:.2f} | "
            f"{r['hash_box_muller'] * per_m:.2f} |")
    return "\n".join(out)


def main() -> None:
    """Measure every case and print the table."""
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true", help="skip gsm-smollm")
    ap.add_argument("--reps", type=int, default=0, help="reps per case (default 7, 3 for smollm)")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--only", default="", help="run only this task")
    args = ap.parse_args()
    cases = [("rt-minilm", 16), ("rt-minilm", 1)] + ([] if args.quick else [("gsm-smollm", 1)])
    cases = [c for c in cases if args.only in ("", c[0])]
    rows = []
    for task_name, batch in cases:
        reps = args.reps or (3 if task_name == "gsm-smollm" else 7)
        t = time.perf_counter()
        rows.append(measure(task_name, batch, reps, args.device))
        print(f"# {task_name} batch {batch}: {reps} reps in {time.perf_counter() - t:.0f} s",
              flush=True)
    print(f"torch {torch.__version__}, numpy {np.__version__}, threads {torch.get_num_threads()}")
    print(table(rows))


if __name__ == "__main__":
    main()
