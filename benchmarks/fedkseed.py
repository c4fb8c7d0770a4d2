"""Benchmark suite ``fedkseed``: bytes vs model size, learning at equal rounds, cost of a step.

1. **Bytes per round vs model size.** One client, one round, K=4096 seeds, 200 steps (batch 1, as
   in the paper), evaluation off, so ``summary.json``'s per-client traffic is exactly the training
   exchange as Flower serializes it. Tasks of growing size: digits-mlp (4.8k parameters),
   tiny-bert-cls, rt-minilm (22.7M) and, in the full suite, gsm-smollm (135M). The same tasks with
   a full-model method (FedIT when registered, FedAvg always) show traffic that grows with the model.
   Payload (4 B per seed down, +4 B for Pro; 8 B per pair up) and framing are reported separately.
2. **Learning at equal rounds.** digits-mlp (10 clients, ZO from a random init), rt-minilm (small)
   and, in the full suite, gsm-smollm (tiny): FedKSeed vs FedKSeed-Pro vs a first-order baseline
   (FedIT if registered, else FedAvg); accuracy and cumulative bytes.
3. **A task where zeroth-order tuning learns: rt-smollm** (issue 14). Prompt-based sentiment with
   SmolLM2-135M read through its LM head (``bouquet/tasks/prompted.py``), so the pretrained model
   starts from its zero-shot answers (measured once on the task's 400 held-out rows, round 0).
   FedKSeed and FedKSeed-Pro with the values the centralised probe chose
   (``benchmarks/zo_prompt_probe.py --grid``, same grid for both; :data:`ZO`), and the LoRA arms
   (FedIT, FFA-LoRA, Fed-SB at their own default lr, :data:`LORA_LR`) on the same clients, rounds and
   evaluation rows; every round's accuracy against cumulative wall seconds and uplink bytes,
   and the accuracy of each arm at the largest budget every arm reached (equal wall time, equal
   uplink bytes). Verdicts (:mod:`bouquet.apps.verdicts`): does FedKSeed (Pro) beat zero-shot;
   how it stands against the LoRA arms per second and per byte. Beside the accuracy verdict, a
   paired one per ZO arm: its last checkpoint's model is rebuilt from the accumulator and
   evaluated centrally on the same 400 rows, and the per-row loss and correctness changes against
   zero-shot are judged at two paired standard errors (:func:`final_rows`, :func:`paired_checks`).
4. **Cost of a step.** Measured in separate processes (``python benchmarks/fedkseed.py --probe
   TASK MODE BATCH``): one zeroth-order step vs two forward passes on the same batch, and the peak
   resident memory of inference, of ZO steps and of backprop + Adam over the model-loaded baseline.

Run: ``python -c "from bouquet.apps.bench import run_suite; from pathlib import Path;
run_suite('fedkseed', Path('/tmp/bench-fedkseed'), quick=True)"``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from bouquet.apps.bench import BenchRun, lookup
from bouquet.apps.registry import methods
from bouquet.apps.results import read_metrics
from bouquet.apps.verdicts import (
    INCONCLUSIVE,
    Check,
    improvement_check,
    paired_change,
    sign_test_check,
    write_checks,
)

if TYPE_CHECKING:
    import numpy as np

K, STEPS = 4096, 200
#: rt-smollm's zeroth-order lr and eps (the centralised probe's choice).
ZO_LR, ZO_EPS = 1e-05, 1e-3
#: rt-smollm's batch size, every arm (a step's two forwards of 4 prompts cost ~1 s on 2 cores).
PROMPT_BATCH = 4
TARGET_BYTES = 18_432
COLUMNS = ["final.accuracy", "best.accuracy", "final.exact_match", "comm.up_bytes_total",
           "comm.down_bytes_total", "comm.up_bytes_per_client_round",
           "comm.down_bytes_per_client_round", "time.wall_s"]
PLOT_METRICS = ["accuracy", "exact_match"]

#: Zeroth-order settings per task (learning part): lr, eps, batch size.
ZO = {
    "digits-mlp": {"fedkseed.lr": 1e-2, "fedkseed.eps": 1e-3, "batch-size": 32},
    "rt-minilm": {"fedkseed.lr": 3e-4, "fedkseed.eps": 1e-3, "batch-size": 16},
    "gsm-smollm": {"fedkseed.lr": 1e-6, "fedkseed.eps": 1e-3, "batch-size": 1},
    # chosen by the centralised probe (benchmarks/zo_prompt_probe.py --grid; RESULTS.md)
    "rt-smollm": {"fedkseed.lr": ZO_LR, "fedkseed.eps": ZO_EPS, "batch-size": PROMPT_BATCH},
}

#: rt-smollm: the LoRA arms at their own default learning rate (bouquet/apps/conf/<method>.yaml).
LORA_LR = {"fedit": 0.005, "ffa-lora": 0.02, "fed-sb": 0.02}
#: rt-smollm: clients, clients per round, rounds, ZO steps and LoRA steps per client and round.
PROMPT = {"quick": {"clients": 4, "fraction": 0.5, "rounds": 3, "zo_steps": 20, "lora_steps": 5},
          "full": {"clients": 8, "fraction": 0.25, "rounds": 10, "zo_steps": 100,
                   "lora_steps": 20}}


def baseline() -> str:
    """The first-order comparison: FedIT when the LoRA family is registered, else FedAvg."""
    return "fedit" if "fedit" in methods() else "fedavg"


def _bytes_runs(quick: bool) -> list[BenchRun]:
    tasks = ["digits-mlp", "tiny-bert-cls", "rt-minilm"] + ([] if quick else ["gsm-smollm"])
    common = {"num-server-rounds": 1, "evaluation": "none", "seed": 0}
    zo = {"fedkseed.num-seeds": K, "fedkseed.local-steps": STEPS, "batch-size": 1,
          "fedkseed.lr": 1e-6, "fedkseed.eps": 1e-3}
    runs = []
    for task in tasks:
        runs.append(BenchRun(f"bytes-fedkseed-{task}",
                             {**common, **zo, "method": "fedkseed", "task": task}, clients=1))
        if task == "digits-mlp" or not quick:
            runs.append(BenchRun(f"bytes-fedkseed-pro-{task}",
                                 {**common, **zo, "method": "fedkseed-pro", "task": task},
                                 clients=1))
        full_model = ["fedavg"] + ([baseline()] if baseline() != "fedavg"
                                   and task != "digits-mlp" else [])
        for m in full_model:
            runs.append(BenchRun(f"bytes-{m}-{task}",
                                 {**common, "method": m, "task": task, "local-steps": 1,
                                  "batch-size": 4, "lr": 1e-3}, clients=1))
    return runs


def _learning_runs(quick: bool) -> list[BenchRun]:
    base = baseline()
    runs: list[BenchRun] = []
    # digits-mlp: zeroth-order from a random init, 10 clients, half of them per round
    rounds, steps = (10, 100) if quick else (30, 200)
    common = {"task": "digits-mlp", "num-server-rounds": rounds, "fraction-train": 0.5,
              "partition": "dirichlet", "dirichlet-alpha": 0.5, "seed": 0}
    for m in ("fedkseed", "fedkseed-pro"):
        runs.append(BenchRun(f"learn-digits-mlp-{m}",
                             {**common, **ZO["digits-mlp"], "method": m,
                              "fedkseed.num-seeds": 1024, "fedkseed.local-steps": steps},
                             clients=10))
    runs.append(BenchRun("learn-digits-mlp-fedavg",
                         {**common, "method": "fedavg", "local-epochs": 1, "lr": 0.1},
                         clients=10))
    # rt-minilm: full-parameter ZO on a pretrained body with a new head (small on CPU)
    rounds, steps = (3, 25) if quick else (8, 100)
    common = {"task": "rt-minilm", "num-server-rounds": rounds, "fraction-train": 0.5,
              "partition": "dirichlet", "dirichlet-alpha": 0.5, "seed": 0}
    for m in ("fedkseed", "fedkseed-pro"):
        runs.append(BenchRun(f"learn-rt-minilm-{m}",
                             {**common, **ZO["rt-minilm"], "method": m,
                              "fedkseed.num-seeds": K, "fedkseed.local-steps": steps},
                             clients=4))
    runs.append(BenchRun(f"learn-rt-minilm-{base}",
                         {**common, "method": base, "local-steps": steps, "batch-size": 16,
                          "lr": 1e-3 if base == "fedit" else 1e-2}, clients=4))
    if not quick:
        common = {"task": "gsm-smollm", "num-server-rounds": 2, "seed": 0}
        for m in ("fedkseed", "fedkseed-pro"):
            runs.append(BenchRun(f"learn-gsm-smollm-{m}",
                                 {**common, **ZO["gsm-smollm"], "method": m,
                                  "fedkseed.num-seeds": K, "fedkseed.local-steps": 10},
                                 clients=2))
    return runs


def _prompt_runs(quick: bool) -> list[BenchRun]:
    """rt-smollm: FedKSeed, Pro and the LoRA arms on the same clients, rounds and evaluation."""
    p = PROMPT["quick" if quick else "full"]
    common = {"task": "rt-smollm", "num-server-rounds": p["rounds"],
              "fraction-train": p["fraction"], "partition": "iid", "seed": 0,
              "batch-size": PROMPT_BATCH}
    runs = [BenchRun(f"prompt-{m}", {**common, **ZO["rt-smollm"], "method": m,
                                     "fedkseed.num-seeds": K,
                                     "fedkseed.local-steps": p["zo_steps"]}, clients=p["clients"])
            for m in ("fedkseed", "fedkseed-pro")]
    for m in (m for m in LORA_LR if m in methods()):
        runs.append(BenchRun(f"prompt-{m}", {**common, "method": m, "lr": LORA_LR[m],
                                             "local-steps": p["lora_steps"]},
                             clients=p["clients"]))
    return runs


def runs(quick: bool) -> list[BenchRun]:
    """Every configuration of the suite (the quick variant fits in minutes on 2 cores)."""
    return _bytes_runs(quick) + _learning_runs(quick) + _prompt_runs(quick)


# ------------------------------------------------------------------------------ report
def _payload(run: str) -> tuple[int, int] | None:
    """Payload bytes (down, up) per client and round of a bytes run (ZO methods only)."""
    if run.startswith("bytes-fedkseed-pro-"):
        return 8 * K, 8 * STEPS
    if run.startswith("bytes-fedkseed-"):
        return 4 * K, 8 * STEPS
    return None


def _bytes_table(summaries: Mapping[str, Mapping[str, Any]]) -> list[str]:
    lines = ["### 1. Bytes per client and round vs model size", "",
             f"K={K} seeds, {STEPS} steps, one client, one round, evaluation off: the traffic is "
             "the training exchange exactly as Flower serializes it (framing = measured - payload).",
             "", "| run | params | down B | up B | total B | payload B | framing B | "
             f"< {TARGET_BYTES} B |", "|---|---|---|---|---|---|---|---|"]
    params = _param_counts(summaries)
    for run, s in summaries.items():
        if not run.startswith("bytes-"):
            continue
        down = lookup(s, "comm.down_bytes_per_client_round") or 0.0
        up = lookup(s, "comm.up_bytes_per_client_round") or 0.0
        total = down + up
        pay = _payload(run)
        if pay is None:
            cells = ["—", "—"]
        else:
            cells = [f"{sum(pay):,}", f"{total - sum(pay):,.0f}"]
        ok = "yes" if total < TARGET_BYTES else "no"
        lines.append(f"| {run} | {params.get(str(s.get('task')), '?')} | {down:,.0f} | {up:,.0f} | "
                     f"{total:,.0f} | {cells[0]} | {cells[1]} | {ok} |")
    return lines


def _param_counts(summaries: Mapping[str, Mapping[str, Any]]) -> dict[str, str]:
    """Parameter count per task, from the FedAvg bytes runs (4 B per fp32 value)."""
    out = {}
    for run, s in summaries.items():
        if run.startswith("bytes-fedavg-"):
            up = lookup(s, "comm.up_bytes_per_client_round") or 0.0
            out[str(s.get("task"))] = f"~{up / 4 / 1e6:.3g}M"
    return out


def _learning_table(summaries: Mapping[str, Mapping[str, Any]]) -> list[str]:
    lines = ["### 2. Learning at equal rounds", "",
             "| run | rounds | final accuracy / exact match | best | cumulative up+down B | "
             "wall s |", "|---|---|---|---|---|---|"]
    for run, s in summaries.items():
        if not run.startswith("learn-"):
            continue
        metric = "exact_match" if "gsm" in run else "accuracy"
        final, best = lookup(s, f"final.{metric}"), lookup(s, f"best.{metric}")
        total = (lookup(s, "comm.up_bytes_total") or 0) + (lookup(s, "comm.down_bytes_total") or 0)
        lines.append(f"| {run} | {s.get('rounds')} | {_f(final)} | {_f(best)} | {total:,} | "
                     f"{_f(lookup(s, 'time.wall_s'))} |")
    lines += ["", "Cumulative bytes include the federated evaluation messages of the ZO methods "
              "(every node receives A each round to evaluate the global model)."]
    return lines


def _f(v: Any) -> str:
    return f"{v:.4g}" if isinstance(v, int | float) else "—"


# ------------------------------------------------------------------------------ rt-smollm
#: Two standard errors of one accuracy on the 400 held-out rows near 0.7 (a difference smaller
#: than this between two arms, or from zero-shot, is called inconclusive; 2 SE of a difference of
#: two unpaired accuracies would be sqrt(2) larger, the paired verdicts are the sharper test).
MARGIN = 2 * (0.7 * 0.3 / 400) ** 0.5


def zero_shot(out_dir: Path) -> dict[str, float]:
    """Round 0: the pretrained rt-smollm on its held-out rows (cached in ``zero_shot.json``)."""
    path = out_dir / "zero_shot.json"
    if path.is_file():
        return json.loads(path.read_text())  # type: ignore[no-any-return]
    import torch

    from bouquet.tasks.prompted import RtSmolLM

    task = RtSmolLM()
    d = task.data
    m = task.evaluate_model(task.pretrained, torch.from_numpy(d.x_test), torch.from_numpy(d.y_test))
    m["majority"] = float(max(d.y_test.mean(), 1 - d.y_test.mean()))
    path.write_text(json.dumps(m))
    return m


#: Per-row held-out loss and correctness of a model, cached beside what they were computed from.
ROWS_FILE = "rows.npz"
#: (per-row loss, per-row correctness) on the task's held-out rows.
Rows = tuple["np.ndarray", "np.ndarray"]


def read_cached_rows(path: Path, key: str) -> Rows | None:
    """The rows cached in ``path`` under ``key``; None when absent, damaged, of an older format
    or computed from something else (another model, data or config, e.g. a copied folder)."""
    import zipfile

    import numpy as np

    if not path.is_file():
        return None
    try:
        with np.load(path) as z:
            if str(z["key"]) == key:
                return z["loss"].copy(), z["correct"].copy()
    except (OSError, ValueError, KeyError, EOFError, zipfile.BadZipFile):
        pass
    return None


def cached_rows(path: Path, key: str, compute: Callable[[], Rows]) -> Rows:
    """``compute()``'s rows, cached in ``path`` under ``key`` (a digest of what they come from).

    The rows are recomputed when :func:`read_cached_rows` finds none; the file is replaced
    atomically.
    """
    import io

    import numpy as np

    from bouquet.strategies.checkpoint import atomic_write

    cached = read_cached_rows(path, key)
    if cached is not None:
        return cached
    loss, correct = compute()
    buf = io.BytesIO()
    np.savez(buf, loss=loss, correct=correct, key=np.str_(key))
    atomic_write(path, buf.getvalue(), fsync=False)
    return loss, correct


def rows_key(kind: str, *parts: bytes) -> str:
    """A digest of what a set of rows is computed from: its kind and the bytes of its inputs."""
    import hashlib

    h = hashlib.sha256(kind.encode())
    for part in parts:
        h.update(len(part).to_bytes(8, "little"))
        h.update(part)
    return h.hexdigest()


def _task_fingerprint(task: Any) -> bytes:
    """The held-out rows (prompts and labels) and the model's source of rt-smollm."""
    d = task.data
    return (d.x_test.tobytes() + d.y_test.tobytes() + task.model_source().encode())


#: A range ``(start, stop)`` of rt-smollm's held-out rows, ``[start, stop)`` of its fixed split.
RowRange = tuple[int, int]


class HeldOut:
    """The held-out rows of rt-smollm a model is evaluated on centrally (:func:`held_out`).

    Attributes
    ----------
    task : RtSmolLM
        The task object; its pretrained model is loaded once and shared by every evaluation.
    rows : RowRange or None
        None: the task's own held-out rows (its first ``test_rows``, the ones the runs'
        federated evaluation uses). A range: those rows of the fixed split instead, read
        through a task object whose ``test_rows`` is the range's stop (set on that object
        only: the task's default, its fingerprint and the runs are unchanged).

    A plain class: the suite is loaded under a module name that is not in ``sys.modules``
    (:func:`bouquet.apps.bench.load_suite`), where a dataclass cannot be built.
    """

    def __init__(self, task: Any, rows: RowRange | None = None) -> None:
        self.task, self.rows = task, rows

    @property
    def suffix(self) -> str:
        """``""`` for the task's own rows, ``"_400-1600"`` for a range (cache file names)."""
        return "" if self.rows is None else f"_{self.rows[0]}-{self.rows[1]}"

    def arrays(self) -> tuple[np.ndarray, np.ndarray]:
        """(prompt ids, labels) of the rows.

        Raises
        ------
        ValueError
            If the fixed split has fewer held-out rows than the range's stop.

        """
        d = self.task.data
        if self.rows is None:
            return d.x_test, d.y_test
        start, stop = self.rows
        if len(d.y_test) < stop:
            raise ValueError(f"the split has {len(d.y_test)} held-out rows, not {stop}")
        return d.x_test[start:stop], d.y_test[start:stop]

    def fingerprint(self) -> bytes:
        """The rows' bytes and the model's source (the task's own: :func:`_task_fingerprint`)."""
        if self.rows is None:
            return _task_fingerprint(self.task)
        x, y = self.arrays()
        return x.tobytes() + y.tobytes() + self.task.model_source().encode()

    def row_metrics(self, model: Any) -> Rows:
        """Per-row loss and correctness of ``model`` on the rows (the task's ``row_metrics``)."""
        import torch

        x, y = self.arrays()
        return self.task.row_metrics(model, torch.from_numpy(x), torch.from_numpy(y))


def held_out(rows: RowRange | None = None) -> HeldOut:
    """rt-smollm's own held-out rows (None) or rows ``[start, stop)`` of its fixed split.

    Raises
    ------
    ValueError
        If the range is empty or starts below 0.

    """
    from bouquet.tasks.prompted import RtSmolLM

    task = RtSmolLM()
    if rows is not None:
        start, stop = rows
        if not 0 <= start < stop:
            raise ValueError(f"a row range needs 0 <= start < stop, got {rows}")
        task.test_rows = stop  # this object only: the first `stop` rows of the same split
    return HeldOut(task, rows)


def zero_shot_rows(out_dir: Path, held: HeldOut | None = None) -> Rows:
    """Per-row loss and correctness of the pretrained rt-smollm on held-out rows (cached).

    ``held`` defaults to the task's own rows (cached in ``zero_shot_rows.npz``); a range is
    cached beside it, e.g. ``zero_shot_rows_400-1600.npz``.
    """
    held = held_out() if held is None else held
    key = rows_key("zero-shot", held.fingerprint())
    return cached_rows(out_dir / f"zero_shot_rows{held.suffix}.npz", key,
                        lambda: held.row_metrics(held.task.pretrained))


def final_rows(out_dir: Path, run: str, held: HeldOut | None = None
               ) -> tuple[int, Rows] | None:
    """(round, per-row loss and correctness) of a ZO arm's model at its last checkpoint.

    FedKSeed's server holds no model, so its federated evaluation reports only each node's
    means. The model is rebuilt here from the checkpoint's accumulator, ``w0 - lr sum_k A[k]
    z(s_k)`` (:func:`bouquet.clients.fedkseed.sync`, the nodes' own replay), and evaluated
    centrally on held-out rows (``held``, by default the same 400 rows as the runs): one
    evaluation per arm and rows, cached in ``RUN/rows.npz`` (a range: ``RUN/rows_400-1600.npz``)
    under a digest of the checkpoint's round and accumulator, the run's config and the rows.
    None without a checkpoint.
    """
    from bouquet.strategies.checkpoint import load_checkpoint

    folder = out_dir / run
    if not (folder / "checkpoint" / "meta.json").is_file() or not (
            folder / "config.yaml").is_file():
        return None
    rnd, state, _ = load_checkpoint(folder / "checkpoint")
    if "accumulator" not in state:
        return None

    import numpy as np

    held = held_out() if held is None else held
    task = held.task
    config_text = (folder / "config.yaml").read_text()
    accumulator = np.asarray(state["accumulator"], dtype=np.float64)

    def compute() -> Rows:
        import yaml

        from bouquet.clients.fedkseed import sync
        from bouquet.strategies.fedkseed import FedKSeedConfig

        flat = yaml.safe_load(config_text)
        cfg = FedKSeedConfig(num_seeds=int(flat["fedkseed.num-seeds"]),
                             lr=float(flat["fedkseed.lr"]),
                             master_seed=int(flat["fedkseed.master-seed"]))
        rep, _ = sync(("bench-report", str(folder), rnd), task.build_model, cfg, accumulator)
        return held.row_metrics(rep.model)

    key = rows_key("final", str(rnd).encode(), accumulator.tobytes(), config_text.encode(),
                    held.fingerprint())
    return rnd, cached_rows(folder / f"rows{held.suffix}.npz", key, compute)


#: The paired comparisons of a ZO arm's final model against zero-shot: metric, claim's verb.
PAIRED = (("loss", "lowers the held-out loss"), ("accuracy", "raises the held-out accuracy"))


def paired_checks(arm: str, final: tuple[int, Rows] | None, zero: Rows | None) -> list[Check]:
    """The paired loss and accuracy changes of ``arm``'s final model against zero-shot.

    Per-row differences on the same held-out rows (``final``: round and rows, ``zero``: the
    zero-shot rows): the loss by :func:`bouquet.apps.verdicts.improvement_check` at two paired
    standard errors, the correctness by the exact sign test at the same level
    (:func:`bouquet.apps.verdicts.sign_test_check`, since only the few rows that change their
    answer carry evidence). Both are about this one trained model on these rows: the training's
    own randomness (seeds) is not in them. They do not replace the accuracy verdict's unpaired
    margin. ``not measured`` when either is None (no checkpoint).
    """
    out = []
    for name, verb in PAIRED:
        claim = (f"{arm} {verb} against zero-shot on rt-smollm (paired per row, last "
                 "checkpoint)")
        label = name if final is None else f"round {final[0]}: {name}"
        if final is None or zero is None:
            out.append(improvement_check(claim, None, lower_is_better=name == "loss"))
            continue
        column = 0 if name == "loss" else 1
        before = [float(v) for v in zero[column]]
        after = [float(v) for v in final[1][column]]
        if name == "loss":
            out.append(improvement_check(claim, paired_change(before, after),
                                         lower_is_better=True, name=label))
        else:
            out.append(sign_test_check(claim, before, after, name=label))
    return out


def _paired_table(finals: Mapping[str, tuple[int, Rows] | None], zero: Rows | None
                  ) -> list[str]:
    """Central re-evaluation of each ZO arm's last checkpoint, paired with zero-shot per row."""
    if zero is None:
        return []
    lines = ["", "Paired per row against zero-shot (the ZO arms' last checkpoint rebuilt and "
             "evaluated centrally on the same held-out rows; +- is two paired standard errors):",
             "", "| run | round | loss zero-shot -> final | paired loss change | "
             "accuracy zero-shot -> final | paired accuracy change |", "|---|---|---|---|---|---|"]
    for r, final in finals.items():
        if final is None:
            continue
        rnd, (loss, correct) = final
        dl = paired_change([float(v) for v in zero[0]], [float(v) for v in loss])
        da = paired_change([float(v) for v in zero[1]], [float(v) for v in correct])
        lines.append(f"| {r} | {rnd} | {sum(zero[0]) / len(zero[0]):.4f} -> "
                     f"{sum(loss) / len(loss):.4f} | {dl.mean:+.4f} +- {2 * dl.se:.4f} | "
                     f"{sum(zero[1]) / len(zero[1]):.4f} -> {sum(correct) / len(correct):.4f} | "
                     f"{da.mean:+.4f} +- {2 * da.se:.4f} |")
    return lines


def curve(out_dir: Path, run: str) -> list[tuple[int, float, float, float]]:
    """(round, cumulative wall s, cumulative uplink B, accuracy) of every evaluated round."""
    out, wall, up = [], 0.0, 0.0
    for row in read_metrics(out_dir / run):
        wall += float(row.get("wall_s") or 0.0)
        up += float(row.get("up_bytes") or 0.0)
        if isinstance(row.get("accuracy"), int | float):
            out.append((int(row["round"]), wall, up, float(row["accuracy"])))
    return out


def at_budget(points: list[tuple[int, float, float, float]], index: int, budget: float
              ) -> float | None:
    """Accuracy of the last evaluated round whose cumulative ``index`` is within ``budget``."""
    within = [p[3] for p in points if p[index] <= budget * (1 + 1e-9)]
    return within[-1] if within else None


def _prompt_section(summaries: Mapping[str, Mapping[str, Any]], out_dir: Path
                    ) -> tuple[list[str], list[Check]]:
    runs = [r for r in summaries if r.startswith("prompt-")]
    z = zero_shot(out_dir)
    curves = {r: curve(out_dir, r) for r in runs}
    lines = ["### 3. rt-smollm: zeroth-order tuning vs LoRA at equal wall time and bytes", "",
             f"Zero-shot (round 0) accuracy on the 400 held-out rows: {z['accuracy']:.4f} "
             f"(majority class {z['majority']:.4f}).", "",
             "| run | round | wall s (cumulative) | uplink B (cumulative) | accuracy |",
             "|---|---|---|---|---|"]
    for r in runs:
        lines += [f"| {r} | 0 | 0 | 0 | {z['accuracy']:.4f} |"]
        lines += [f"| {r} | {k} | {w:.0f} | {u:,.0f} | {a:.4f} |" for k, w, u, a in curves[r]]
    have = [r for r in runs if curves[r]]
    checks: list[Check] = []
    if not have:
        return lines, checks
    wall_budget = min(curves[r][-1][1] for r in have)
    zo_runs = [r for r in have if "fedkseed" in r]
    byte_budget = min((curves[r][-1][2] for r in zo_runs), default=0.0)
    lines += ["", f"At equal budgets: wall time {wall_budget:.0f} s (the shortest arm's total) "
              f"and uplink {byte_budget:,.0f} B (the ZO arms' smallest total; an arm whose first "
              "round already sent more reads as 'zero-shot', i.e. it has nothing to show yet).",
              "", "| run | accuracy at equal wall time | accuracy at equal uplink bytes | "
              "best | last |", "|---|---|---|---|---|"]
    for r in have:
        w = at_budget(curves[r], 1, wall_budget)
        b = at_budget(curves[r], 2, byte_budget)
        lines.append(f"| {r} | {_f(w if w is not None else z['accuracy'])} | "
                     f"{_f(b if b is not None else z['accuracy'])} | "
                     f"{max(p[3] for p in curves[r]):.4f} | {curves[r][-1][3]:.4f} |")
    for r in zo_runs:
        best, last = max(p[3] for p in curves[r]), curves[r][-1][3]
        gain = last - z["accuracy"]
        measured = (f"zero-shot {z['accuracy']:.4f}, last {last:.4f}, best {best:.4f}, "
                    f"{curves[r][-1][0]} rounds; margin {MARGIN:.3f} = 2 SE of one accuracy "
                    "near 0.7 on 400 rows")
        claim = f"{r.removeprefix('prompt-')} improves over zero-shot on rt-smollm (last round)"
        if abs(gain) < MARGIN:
            checks.append(Check(claim, INCONCLUSIVE, measured))
        else:
            checks.append(Check.of(claim, gain > 0, measured))
    finals = {r: final_rows(out_dir, r) for r in zo_runs}
    zero = zero_shot_rows(out_dir) if any(f is not None for f in finals.values()) else None
    lines += _paired_table(finals, zero)
    for r in zo_runs:
        checks += paired_checks(r.removeprefix("prompt-"), finals[r], zero)
    lora = [r for r in have if "fedkseed" not in r]
    for r in zo_runs:
        for other in lora:
            for what, index, budget in (("wall time", 1, wall_budget),
                                        ("uplink bytes", 2, byte_budget)):
                mine = at_budget(curves[r], index, budget)
                theirs = at_budget(curves[other], index, budget)
                a = z["accuracy"] if mine is None else mine
                b = z["accuracy"] if theirs is None else theirs
                claim = (f"{r.removeprefix('prompt-')} >= {other.removeprefix('prompt-')} at "
                         f"equal {what}")
                measured = f"{a:.4f} vs {b:.4f} at {budget:,.0f} {'s' if index == 1 else 'B'}"
                if abs(a - b) < MARGIN:
                    checks.append(Check(claim, INCONCLUSIVE, measured))
                else:
                    checks.append(Check.of(claim, a > b, measured))
    return lines, checks


# ------------------------------------------------------------------------------ step cost probe
def _vm(field: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) * 1024
    return 0


def probe(task_name: str, mode: str, batch: int, reps: int) -> dict[str, float]:
    """Time and peak memory of one mode on one task, in this (fresh) process."""
    import gc

    import torch

    from bouquet.apps.registry import get_task
    from bouquet.clients import zeroth_order as zo
    from bouquet.schema import CommonConfig
    from bouquet.tasks.classification import generator

    task = get_task(task_name).load()
    model = task.model_from(task.initial_arrays(0))
    task.__dict__.pop("pretrained", None)  # keep only the model under test
    local = task.partition(0, 4, CommonConfig())
    x, y = next(task.batches(local, batch, generator(0, 1, 0)))
    gc.collect()
    model.eval()
    numel = sum(p.numel() for p in model.parameters())
    base = _vm("VmRSS")
    Path("/proc/self/clear_refs").write_text("5")  # reset the peak (VmHWM) to the current RSS
    out: dict[str, float] = {"params": float(numel), "rss_base": float(base)}

    def loss() -> float:
        with torch.inference_mode():
            return float(task.loss(model, x, y))

    loss()  # warm-up
    if mode == "inference":
        t = time.perf_counter()
        for _ in range(reps):
            loss()
            loss()
        out["two_forward_s"] = (time.perf_counter() - t) / reps
    elif mode == "zo":
        d = zo.Directions(zo.canonical_parameters(model))
        t = time.perf_counter()
        for s in range(reps):
            zo.zo_step(d, 1000 + s, loss, eps=1e-3, lr=1e-7)
        out["zo_step_s"] = (time.perf_counter() - t) / reps
        t = time.perf_counter()
        for s in range(reps):
            d.add_(2000 + s, 0.0)
        out["regenerate_s"] = (time.perf_counter() - t) / reps
    elif mode == "backprop":
        model.train()
        opt = torch.optim.Adam(model.parameters(), lr=1e-5)
        t = time.perf_counter()
        for _ in range(reps):
            opt.zero_grad(set_to_none=True)
            task.loss(model, x, y).backward()
            opt.step()
        out["adam_step_s"] = (time.perf_counter() - t) / reps
    else:
        raise ValueError(mode)
    out["rss_peak"] = float(_vm("VmHWM"))
    return out


def _run_probe(task: str, mode: str, batch: int, reps: int) -> dict[str, float]:
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "BOUQUET_TORCH_THREADS": "1"}
    proc = subprocess.run([sys.executable, __file__, "--probe", task, mode, str(batch), str(reps)],
                          capture_output=True, text=True, env=env, timeout=3600)
    if proc.returncode != 0:
        raise RuntimeError(f"probe {task} {mode} failed: {proc.stderr[-2000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]


def _cost_section(out_dir: Path, tasks: list[str]) -> list[str]:
    lines = ["### 4. Cost of a step and memory", "",
             "Separate processes, 1 torch thread. ratio = one ZO step / two forward passes on the "
             "same batch (ideal 1.0); regenerate = drawing one direction over all parameters and "
             "adding it. Memory: peak resident set over the model-loaded baseline.", "",
             "| task | batch | params | 2 forwards s | ZO step s | ratio | regenerate s | "
             "Adam step s | inference +MB | ZO +MB | Adam +MB |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    results = {}
    for task in tasks:
        for batch in (1,) if task == "gsm-smollm" else (1, 16):
            reps = 3 if task == "gsm-smollm" else 10
            r = {m: _run_probe(task, m, batch, reps) for m in ("inference", "zo", "backprop")}
            results[f"{task}-b{batch}"] = r
            inf, zo_, bp = r["inference"], r["zo"], r["backprop"]

            def extra(x: dict[str, float]) -> str:
                return f"{(x['rss_peak'] - x['rss_base']) / 2**20:,.0f}"

            lines.append(
                f"| {task} | {batch} | {inf['params'] / 1e6:.1f}M | {inf['two_forward_s']:.3f} | "
                f"{zo_['zo_step_s']:.3f} | {zo_['zo_step_s'] / inf['two_forward_s']:.2f} | "
                f"{zo_['regenerate_s']:.3f} | {bp['adam_step_s']:.3f} | {extra(inf)} | "
                f"{extra(zo_)} | {extra(bp)} |")
    (out_dir / "step_cost.json").write_text(json.dumps(results, indent=1))
    return lines


def report(summaries: Mapping[str, Mapping[str, Any]], out_dir: Path) -> str:
    """Markdown: the three parts of the issue, computed from the runs and the probes."""
    base = baseline()
    full = any("gsm-smollm" in r for r in summaries)
    lines = [f"First-order baseline: `{base}`"
             + ("" if base == "fedit" else " (FedIT is not registered in this checkout)") + ".", ""]
    if any(r.startswith("bytes-") for r in summaries):
        lines += _bytes_table(summaries) + [""]
    if any(r.startswith("learn-") for r in summaries):
        lines += _learning_table(summaries) + [""]
    checks: list[Check] = []
    if any(r.startswith("prompt-") for r in summaries):
        prompt_lines, checks = _prompt_section(summaries, out_dir)
        lines += prompt_lines + [""]
    if any(r.startswith("bytes-") for r in summaries):  # the probes cost minutes: only with them
        lines += _cost_section(out_dir, ["rt-minilm"] + (["gsm-smollm"] if full else []))
    write_checks(out_dir, "fedkseed", checks)
    lines += ["", "### Verdicts", ""] + [c.markdown() for c in checks]
    return "\n".join(lines)


if __name__ == "__main__":
    if len(sys.argv) == 6 and sys.argv[1] == "--probe":
        print(json.dumps(probe(sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5]))))
    else:
        print("usage: python benchmarks/fedkseed.py --probe TASK inference|zo|backprop BATCH REPS")
