"""Probes for the ``rt-smollm`` task: the prompt template, forward cost, a centralised ZO grid.

Three measurements, each in this one process (1-2 torch threads, as the shared machine allows):

``--templates N``
    Zero-shot accuracy of every template of :data:`bouquet.tasks.prompted.TEMPLATES` on the first
    ``N`` rows of the **training** split (the test split is never used to choose), and the
    forward time of :meth:`RtSmolLM.logits` at batch 16 (median of 5 after a warm-up) against
    the full-vocabulary forward ``model(x).logits`` on the same batch.
``--grid LRS EPSS STEPS BATCH [EVALS]``
    The quick centralised probe before any federated run: on one client's share (partition 0 of
    4, IID, seed 0), ``STEPS`` zeroth-order steps of FedKSeed's engine
    (:func:`bouquet.clients.zeroth_order.zo_steps`, seeds drawn uniformly from K=4096 candidates)
    for every (lr, eps) of the comma-separated lists; after every ``STEPS // EVALS`` steps
    (default: once, at the end) the mean two-point loss of those steps and the accuracy and loss
    on 200 **training** rows held apart from that client (the first rows of partition 1), so the
    choice never sees the test split, with the *paired* change of the per-row loss and
    correctness against step 0 and its standard error (:func:`bouquet.apps.verdicts.paired_change`).
    A run whose held-apart loss exceeds 10x the start (or is not finite) stops. Prints one JSON
    line per evaluation.

Run: ``PYTHONPATH=$PWD flock /tmp/heavy.lock python benchmarks/zo_prompt_probe.py --templates 512``
and ``... --grid 3e-6,1e-5 1e-3 60 4`` (torch threads: ``$BOUQUET_TORCH_THREADS``, default 2
here).
"""

from __future__ import annotations

import json
import statistics
import sys
import time

import torch


def _task(template: str = "mezo") -> object:
    from bouquet.tasks.prompted import TEMPLATES, RtSmolLM

    task = RtSmolLM()
    task.template = TEMPLATES[template]
    return task


def templates(rows: int) -> None:
    """Zero-shot training-split accuracy per template; logits vs full forward time at batch 16."""
    from bouquet.tasks.prompted import TEMPLATES, RtSmolLM

    model = None
    for name in TEMPLATES:
        task = _task(name)
        assert isinstance(task, RtSmolLM)
        model = model or task.pretrained
        x = torch.from_numpy(task.data.x_train[:rows])
        y = torch.from_numpy(task.data.y_train[:rows])
        t = time.perf_counter()
        m = task.evaluate_model(model, x, y)
        width = float((x != task.pad_id).sum(1).float().mean())
        print(json.dumps({"template": name, "rows": rows, "train_accuracy": m["accuracy"],
                          "train_loss": m["loss"], "fresh_share": float(y.float().mean()),
                          "mean_tokens": width, "eval_s": time.perf_counter() - t}), flush=True)
    task = _task("mezo")
    assert isinstance(task, RtSmolLM) and model is not None
    x = torch.from_numpy(task.data.x_train[:16])
    mask = x != task.pad_id
    width = int(mask.sum(1).max())

    def timed(fn: object) -> float:
        times = []
        with torch.inference_mode():
            fn()  # type: ignore[operator]
            for _ in range(5):
                t = time.perf_counter()
                fn()  # type: ignore[operator]
                times.append(time.perf_counter() - t)
        return statistics.median(times)

    ours = timed(lambda: task.logits(model, x))
    full = timed(lambda: model(input_ids=x[:, :width], attention_mask=mask[:, :width].long()))
    print(json.dumps({"batch": 16, "width": width, "logits_s": ours, "full_vocab_forward_s": full,
                      "threads": torch.get_num_threads()}), flush=True)


def grid(lrs: list[float], epss: list[float], steps: int, batch: int, evals: int = 1) -> None:
    """Centralised ZO probe on one client's share (see the module docstring)."""
    import numpy as np

    from bouquet.apps.verdicts import paired_change
    from bouquet.clients.zeroth_order import Directions, canonical_parameters, zo_steps
    from bouquet.schema import CommonConfig
    from bouquet.tasks.classification import generator
    from bouquet.tasks.prompted import RtSmolLM
    from bouquet.wire.fedkseed import candidate_seeds

    task = RtSmolLM()
    local = task.partition(0, 4, CommonConfig(seed=0))
    apart = task.partition(1, 4, CommonConfig(seed=0))
    x_eval, y_eval = apart.x_train[:200], apart.y_train[:200]
    seeds = candidate_seeds(0, 4096)
    every = max(1, steps // max(1, evals))  # evaluate after every `every` steps
    t0 = time.perf_counter()
    loss0, right0 = task.row_metrics(task.pretrained, x_eval, y_eval)  # same start for every lr
    print(json.dumps({"step": 0, "accuracy": float(right0.mean()), "loss": float(loss0.mean()),
                      "eval_s": time.perf_counter() - t0}), flush=True)
    for lr in lrs:
        for eps in epss:
            model = task.build_model()
            directions = Directions(canonical_parameters(model))
            batches = task.batches(local, batch, generator(0, 1, 0))
            rng = np.random.default_rng(0)
            done, train_s = 0, 0.0  # training seconds, evaluations excluded

            def loss(b: tuple[torch.Tensor, torch.Tensor], m: object = model) -> float:
                with torch.inference_mode():
                    return float(task.loss(m, *b))  # type: ignore[arg-type]

            while done < steps:
                n = min(every, steps - done)
                chosen = [int(seeds[i]) for i in rng.integers(0, 4096, n)]
                t = time.perf_counter()
                out = zo_steps(directions, chosen, batches, loss, eps=eps, lr=lr)
                train_s += time.perf_counter() - t
                done += n
                rows, right = task.row_metrics(model, x_eval, y_eval)
                dl, da = paired_change(loss0, rows), paired_change(right0, right)
                print(json.dumps({
                    "lr": lr, "eps": eps, "step": done,
                    "train_loss": float(np.mean([0.5 * (r.loss_plus + r.loss_minus)
                                                 for r in out])),
                    "mean_abs_g": float(np.mean([abs(r.grad) for r in out])),
                    "train_s": train_s, "accuracy": float(right.mean()),
                    "loss": float(rows.mean()), "paired_loss_change": dl.mean,
                    "paired_loss_se": dl.se, "paired_accuracy_change": da.mean,
                    "paired_accuracy_se": da.se}), flush=True)
                if not np.isfinite(rows.mean()) or rows.mean() > 10 * loss0.mean():
                    print(json.dumps({"lr": lr, "eps": eps, "diverged_at": done}), flush=True)
                    break


if __name__ == "__main__":
    import os

    os.environ.setdefault("BOUQUET_TORCH_THREADS", "2")  # bouquet's tasks set it on import
    if len(sys.argv) == 3 and sys.argv[1] == "--templates":
        templates(int(sys.argv[2]))
    elif len(sys.argv) in (6, 7) and sys.argv[1] == "--grid":
        grid([float(v) for v in sys.argv[2].split(",")], [float(v) for v in sys.argv[3].split(",")],
             int(sys.argv[4]), int(sys.argv[5]), int(sys.argv[6]) if len(sys.argv) == 7 else 1)
    else:
        print(__doc__)
