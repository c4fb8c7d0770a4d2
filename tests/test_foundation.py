"""Foundation behaviour: results files, byte accounting, sampling, partitions, checkpoints."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from bouquet.apps.config import resolve
from bouquet.apps.local_grid import LocalGrid
from bouquet.apps.runner import build_strategy, execute, initial_arrays, load_server_task
from bouquet.strategies.base import NotEnoughNodes
from bouquet.strategies.checkpoint import CheckpointError, load_checkpoint, save_checkpoint
from bouquet.tasks.digits import DigitsMLP
from bouquet.tasks.partition import partition_rows

SUMMARY_KEYS = {"method", "task", "seed", "rounds", "final", "best", "comm", "privacy", "time",
                "failures", "versions"}
ROUND_KEYS = {"round", "accuracy", "loss", "up_bytes", "down_bytes", "clients", "rejected",
              "errors", "missing", "wall_s"}


@pytest.fixture(scope="module")
def fedavg_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("res")
    grid = LocalGrid(10, {"method": "fedavg", "task": "digits-mlp", "num-server-rounds": 5,
                          "results-dir": str(out), "run-name": "fedavg"})
    return execute(grid, grid.run_config)


def test_results_files_follow_the_contract(fedavg_run: Path) -> None:
    run = fedavg_run.parent
    assert (run / "config.yaml").is_file()
    summary = json.loads(fedavg_run.read_text())
    assert set(summary) == SUMMARY_KEYS
    assert summary["rounds"] == 5
    lines = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
    assert [r["round"] for r in lines] == [1, 2, 3, 4, 5]
    assert all(ROUND_KEYS <= set(r) for r in lines)
    assert summary["privacy"] is None
    assert sorted(p.name for p in (run / "plots").glob("*.png"))


def test_plots_false_writes_every_results_file_but_the_plots(tmp_path: Path) -> None:
    grid = LocalGrid(3, {"method": "fedavg", "task": "digits-mlp", "num-server-rounds": 1,
                         "local-steps": 1, "results-dir": str(tmp_path), "run-name": "quiet",
                         "plots": False})
    run = execute(grid, grid.run_config).parent
    assert {p.name for p in run.iterdir()} >= {"config.yaml", "metrics.jsonl", "summary.json"}
    assert not (run / "plots").exists()
    assert "plots: false" in (run / "config.yaml").read_text()


def test_a_resume_may_turn_plots_off_and_leaves_no_stale_curves(tmp_path: Path) -> None:
    cfg = {"method": "fedavg", "task": "digits-mlp", "local-steps": 1,
           "results-dir": str(tmp_path), "run-name": "first", "num-server-rounds": 1}
    grid = LocalGrid(3, cfg)
    run = execute(grid, grid.run_config).parent
    assert (run / "plots" / "accuracy_vs_round.png").is_file()
    more = LocalGrid(3, {**cfg, "run-name": "", "num-server-rounds": 2, "resume-from": str(run),
                         "plots": False})
    summary = json.loads(execute(more, more.run_config).read_text())
    assert summary["rounds"] == 2
    assert not (run / "plots").exists()  # the round-1 curves would stop short of round 2


def test_fedavg_on_digits_learns(fedavg_run: Path) -> None:
    summary = json.loads(fedavg_run.read_text())
    assert summary["final"]["accuracy"] > 0.8  # chance is 0.1
    assert summary["best"]["loss"] <= summary["final"]["loss"] + 1e-12


def test_measured_bytes_match_the_model_size(fedavg_run: Path) -> None:
    summary = json.loads(fedavg_run.read_text())
    model = DigitsMLP().initial_arrays(0)
    payload = sum(a.nbytes for a in model.values())
    per_up = summary["comm"]["up_bytes_per_client_round"]
    per_down = summary["comm"]["down_bytes_per_client_round"]
    # Serialized size = raw array bytes + small per-array headers and record framing.
    overhead = 400 * len(model) + 400
    assert payload < per_up < payload + overhead
    assert payload < per_down < payload + overhead
    assert summary["comm"]["up_bytes_total"] == per_up * 50


def _setup(tmp_path: Path, n: int, **over: object) -> tuple[LocalGrid, object]:
    grid = LocalGrid(n, {"method": "fedavg", "results-dir": str(tmp_path), "local-steps": 1,
                         "sample-deadline": 0.5, **over})
    cfg = resolve(grid.run_config)
    return grid, build_strategy(cfg, initial_arrays(cfg, load_server_task(cfg), grid))


def test_sampling_is_seeded_and_sized(tmp_path: Path) -> None:
    grid, strat = _setup(tmp_path, 10, **{"fraction-train": 0.3})
    a = strat.train_round(grid, 1).sampled  # type: ignore[attr-defined]
    grid2, strat2 = _setup(tmp_path, 10, **{"fraction-train": 0.3})
    b = strat2.train_round(grid2, 1).sampled  # type: ignore[attr-defined]
    c = strat2.train_round(grid2, 2).sampled  # type: ignore[attr-defined]
    assert a == b and len(a) == 3
    assert c != a or len(set(c)) == 3


def test_sampling_gives_up_after_the_deadline(tmp_path: Path) -> None:
    grid, strat = _setup(tmp_path, 3, **{"min-train-nodes": 3})
    grid.offline.add(1000)
    with pytest.raises(NotEnoughNodes, match="min-train-nodes"):
        strat.train_round(grid, 1)  # type: ignore[attr-defined]


def test_offline_node_is_not_sampled(tmp_path: Path) -> None:
    grid, strat = _setup(tmp_path, 4)
    grid.offline.add(1001)
    rlog = strat.train_round(grid, 1)  # type: ignore[attr-defined]
    assert 1 not in rlog.sampled and rlog.clients == 3


@pytest.mark.parametrize("scheme", ["iid", "dirichlet", "pathological"])
def test_partitions_cover_the_data_without_overlap(scheme: str) -> None:
    labels = np.repeat(np.arange(10), 50)
    parts = [partition_rows(labels, scheme=scheme, num_partitions=5, partition_id=i, seed=1,
                            alpha=0.3, classes_per_client=2) for i in range(5)]
    flat = np.concatenate(parts)
    assert len(flat) == len(set(flat.tolist()))
    if scheme == "pathological":
        assert all(len(set(labels[p].tolist())) <= 2 for p in parts)
    else:
        assert len(flat) == len(labels)


@pytest.mark.parametrize("threads_env", [None, "1"])
def test_central_evaluation_uses_every_core_unless_the_user_fixed_the_threads(
        monkeypatch: pytest.MonkeyPatch, threads_env: str | None) -> None:
    # The server evaluates between rounds, when no node trains: one thread would idle the rest.
    import torch

    from bouquet.tasks import torch_utils

    task = DigitsMLP()
    arrays = task.initial_arrays(seed=0)
    before = torch.get_num_threads()
    monkeypatch.setattr(torch_utils, "usable_cores", lambda: before + 2)
    if threads_env is None:
        monkeypatch.delenv(torch_utils.THREADS_ENV, raising=False)
    else:
        monkeypatch.setenv(torch_utils.THREADS_ENV, threads_env)
    seen: list[int] = []
    evaluate_model = task.evaluate_model

    def counting(*args: Any) -> dict[str, float]:
        seen.append(torch.get_num_threads())
        return evaluate_model(*args)

    monkeypatch.setattr(task, "evaluate_model", counting)
    metrics = task.evaluate(arrays)
    assert 0.0 <= metrics["accuracy"] <= 1.0
    assert seen == ([before + 2] if threads_env is None else [before])
    assert torch.get_num_threads() == before  # restored for the training that follows


def _sgd_probe_model(seed: int) -> Any:
    import torch
    from torch import nn

    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(6, 5), nn.ReLU(), nn.Linear(5, 3))


def test_sgd_steps_is_torch_sgd_bit_for_bit() -> None:
    """The written-out step equals ``torch.optim.SGD`` exactly, also with a gradient hook."""
    import torch

    from bouquet.tasks.torch_utils import sgd_steps

    gen = torch.Generator().manual_seed(3)
    batches = [(torch.randn(4, 6, generator=gen), torch.randint(0, 3, (4,), generator=gen))
               for _ in range(5)]

    def loss(model: Any, batch: Any) -> Any:
        return torch.nn.functional.cross_entropy(model(batch[0]), batch[1])

    def hook(model: Any) -> None:  # as SCAFFOLD's control correction: edits the gradients
        for p in model.parameters():
            if p.grad is not None:
                p.grad.add_(0.01)

    ours, ref = _sgd_probe_model(1), _sgd_probe_model(1)
    ours[0].bias.requires_grad_(False)  # a frozen parameter is left alone by both
    ref[0].bias.requires_grad_(False)
    stats = sgd_steps(ours, iter(batches), loss, steps=5, lr=0.07, correct_grad=hook)
    opt = torch.optim.SGD(ref.parameters(), lr=0.07)
    total = 0.0
    for batch in batches:
        opt.zero_grad(set_to_none=True)
        value = loss(ref, batch)
        value.backward()
        hook(ref)
        opt.step()
        total += float(value.detach())
    for a, b in zip(ours.state_dict().values(), ref.state_dict().values(), strict=True):
        assert torch.equal(a, b)
    assert stats == {"train_loss": total / 5, "steps": 5.0}
    assert not torch.equal(ours[0].weight, _sgd_probe_model(1)[0].weight)  # it trained
    assert torch.equal(ours[0].bias, _sgd_probe_model(1)[0].bias)  # the frozen one did not


def test_local_sgd_does_not_import_torch_dynamo() -> None:
    """A node's local SGD loads no ``torch._dynamo`` (torch.optim's first optimiser does).

    A node without a warm worker runs each message in a fresh process, so that import (about
    1.3-1.8 CPU s here, about as much as torch itself) was paid on every training message.
    """
    import subprocess
    import sys

    code = ("import sys, torch\n"
            "from bouquet.tasks.torch_utils import sgd_steps\n"
            "m = torch.nn.Linear(4, 2)\n"
            "batches = iter([(torch.ones(3, 4), torch.zeros(3, dtype=torch.long))] * 2)\n"
            "sgd_steps(m, batches, lambda m, b: torch.nn.functional.cross_entropy(m(b[0]), b[1]),"
            " steps=2, lr=0.1)\n"
            "print('torch._dynamo' in sys.modules)\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.strip() == "False"


def test_digits_are_read_as_scikit_learn_loads_them() -> None:
    """digits-mlp reads scikit-learn's file itself: the same images and labels as load_digits."""
    from sklearn.datasets import load_digits

    from bouquet.tasks.digits import read_digits

    x, y = load_digits(return_X_y=True)
    sources = DigitsMLP().data_sources()
    assert sources is not None
    ours_x, ours_y = read_digits(sources[0])
    np.testing.assert_array_equal(ours_x, x)
    np.testing.assert_array_equal(ours_y, y)
    assert ours_x.dtype == x.dtype and ours_y.dtype == np.int64
    data = DigitsMLP().load_arrays()  # its fixed split: a fifth of each class
    assert (len(data.y_train), len(data.y_test)) == (1442, 355)
    assert np.array_equal(np.bincount(data.y_test), np.bincount(y) // 5)


def test_digits_without_scikit_learn_is_an_import_error_naming_the_install(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # an ImportError, as before (the pre-start check and the nodes' errors expect that type)
    import dataclasses

    from bouquet.tasks import digits

    gone = dataclasses.replace(digits.SCIKIT_LEARN_DIGITS, module="sklearn_not_installed_here")
    monkeypatch.setattr(digits, "SCIKIT_LEARN_DIGITS", gone)
    with pytest.raises(ImportError, match=r"digits-mlp needs .*pip install \"flwr-bouquet\[torch\]"):
        DigitsMLP().load_arrays()


def test_natural_partition_groups_rows() -> None:
    labels = np.zeros(12, dtype=int)
    groups = np.array(list("aabbccddeeff"))
    parts = [partition_rows(labels, scheme="natural", num_partitions=3, partition_id=i, seed=0,
                            groups=groups) for i in range(3)]
    for p in parts:
        assert len(set(groups[p].tolist())) == 2


def test_a_checkpoint_writer_killed_between_its_two_files_leaves_the_previous_one(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The new state file never replaces the one the current meta.json names (a kill between
    the state's and the meta's rename used to leave a checksum mismatch: no resume at all)."""
    import bouquet.strategies.checkpoint as ckpt

    save_checkpoint(tmp_path, 1, {"w": np.zeros(3)})
    real = ckpt.staged_write

    def killed_at_the_meta(path: Path, data: bytes, **kw: Any) -> Path:
        if path.name == ckpt.META_FILE:
            raise KeyboardInterrupt("killed")
        return real(path, data, **kw)

    monkeypatch.setattr(ckpt, "staged_write", killed_at_the_meta)
    with pytest.raises(KeyboardInterrupt):
        save_checkpoint(tmp_path, 2, {"w": np.ones(3)})
    monkeypatch.setattr(ckpt, "staged_write", real)
    rnd, back, _ = load_checkpoint(tmp_path)
    assert rnd == 1 and np.array_equal(back["w"], np.zeros(3))
    save_checkpoint(tmp_path, 2, {"w": np.ones(3)})  # the next save removes the stray state
    assert len(list(tmp_path.glob("state*.npz"))) == 1
    assert load_checkpoint(tmp_path)[0] == 2


def test_a_checkpoint_of_an_earlier_release_still_loads(tmp_path: Path) -> None:
    save_checkpoint(tmp_path, 3, {"w": np.arange(4.0)})
    (state_file,) = tmp_path.glob("state-*.npz")
    state_file.rename(tmp_path / "state.npz")  # the layout before state files were named
    meta = json.loads((tmp_path / "meta.json").read_text())
    del meta["state_file"]
    (tmp_path / "meta.json").write_text(json.dumps(meta))
    assert np.array_equal(load_checkpoint(tmp_path)[1]["w"], np.arange(4.0))
    meta["state_file"] = "../outside.npz"
    (tmp_path / "meta.json").write_text(json.dumps(meta))
    with pytest.raises(CheckpointError, match="unexpected state file"):
        load_checkpoint(tmp_path)


def test_checkpoint_detects_corruption(tmp_path: Path) -> None:
    state = {"w": {"a": np.arange(6.0).reshape(2, 3)}, "n": 3, "name": "x"}
    save_checkpoint(tmp_path, 4, state)
    rnd, back, _ = load_checkpoint(tmp_path)
    assert rnd == 4 and back["n"] == 3 and np.array_equal(back["w"]["a"], state["w"]["a"])
    (state_file,) = tmp_path.glob("state-*.npz")
    blob = state_file.read_bytes()
    state_file.write_bytes(blob[: len(blob) // 2])
    with pytest.raises(CheckpointError, match=state_file.name):
        load_checkpoint(tmp_path)
    (tmp_path / "meta.json").write_text("{not json")
    with pytest.raises(CheckpointError, match="meta.json"):
        load_checkpoint(tmp_path)


def test_resume_continues_an_interrupted_run(tmp_path: Path) -> None:
    def run(rounds: int, **over: object) -> Path:
        grid = LocalGrid(4, {"method": "fedavg", "results-dir": str(tmp_path),
                             "num-server-rounds": rounds, "local-steps": 2, **over})
        return execute(grid, grid.run_config)

    full = run(3, **{"run-name": "full"})
    part = run(1, **{"run-name": "part"})
    resumed = run(3, **{"resume-from": str(part.parent)})
    assert resumed == part

    def strip(p: Path) -> list[dict]:
        rows = [json.loads(x) for x in (p.parent / "metrics.jsonl").read_text().splitlines()]
        return [{k: v for k, v in r.items() if k != "wall_s"} for r in rows]

    assert strip(full) == strip(resumed)


def test_failed_client_is_mapped_to_its_node(tmp_path: Path) -> None:
    grid, strat = _setup(tmp_path, 3)
    grid.fail.add(2)
    rlog = strat.train_round(grid, 1)  # type: ignore[attr-defined]
    assert rlog.errors == 1 and rlog.failures[0]["partition_id"] == 2
    assert "injected client failure" in rlog.failures[0]["reason"]
