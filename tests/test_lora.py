"""FedIT / FFA-LoRA / Fed-SB: exact aggregation, measured bytes, client-server agreement."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from flwr.app import RecordDict

from bouquet.apps.config import resolve
from bouquet.apps.local_grid import LocalGrid
from bouquet.apps.runner import build_strategy, initial_arrays, load_server_task
from bouquet.clients.lora import build_adapted
from bouquet.strategies import lora as L
from bouquet.wire.arrays import to_numpy

NODES = 3
VARIANT = {"fedit": "fedit", "ffa-lora": "ffa", "fed-sb": "fedsb"}


def make(method: str, tmp_path: Path, **over: Any) -> tuple[LocalGrid, L.LoraStrategy]:
    cfg = {"method": method, "task": "tiny-bert-cls", "results-dir": str(tmp_path),
           "run-name": "x", "local-steps": 4, "batch-size": 16, "lora.rank": 2, "lr": 0.05,
           "partition": "dirichlet", "dirichlet-alpha": 0.3, "seed": 5, **over}
    grid = LocalGrid(NODES, cfg)
    rc = resolve(grid.run_config)
    strategy = build_strategy(rc, initial_arrays(rc, load_server_task(rc), grid))
    assert isinstance(strategy, L.LoraStrategy)
    return grid, strategy


def capture(grid: LocalGrid) -> dict[int, RecordDict]:
    seen: dict[int, RecordDict] = {}
    for pid in range(NODES):
        def keep(content: RecordDict, pid: int = pid) -> RecordDict:
            if "arrays" in content:
                seen[pid] = content
            return content
        grid.corrupt[pid] = keep
    return seen


def merged_average(strategy: L.LoraStrategy, replies: dict[int, RecordDict]) -> dict[str, np.ndarray]:
    """Weighted average of the clients' merged weights (float64)."""
    weights = np.array([float(r["metrics"]["num-examples"]) for r in replies.values()])
    weights /= weights.sum()
    out: dict[str, np.ndarray] = {}
    for w, r in zip(weights, replies.values(), strict=True):
        merged = L.merge(strategy.variant, strategy.base, strategy.adapted,
                         to_numpy(r["arrays"]), strategy.fixed, strategy.scale)
        for a in strategy.adapted:
            out[a.weight] = out.get(a.weight, 0.0) + w * merged[a.weight].astype(np.float64)
    return out


@pytest.mark.parametrize("method", ["fedit", "ffa-lora", "fed-sb"])
def test_merged_global_equals_mean_of_merged_clients_except_fedit(method: str,
                                                                  tmp_path: Path) -> None:
    grid, strategy = make(method, tmp_path)
    strategy.train_round(grid, 1)
    replies = capture(grid)
    rlog = strategy.train_round(grid, 2)
    assert rlog.clients == NODES and len(replies) == NODES
    expected = merged_average(strategy, replies)
    glob = strategy.merged()
    errs = []
    for a in strategy.adapted:
        delta = np.abs(expected[a.weight] - strategy.base[a.weight]).max()
        assert delta > 1e-4, "the clients did not move the adapted weights"
        err = np.abs(glob[a.weight] - expected[a.weight]).max()
        errs.append(err / delta)
    if method == "fedit":
        assert max(errs) > 1e-3, f"FedIT unexpectedly exact: {errs}"
    else:
        scale = max(np.abs(strategy.base[a.weight]).max() for a in strategy.adapted)
        assert all(
            np.abs(glob[a.weight] - expected[a.weight]).max() <= 4 * np.finfo(np.float32).eps * scale
            for a in strategy.adapted), errs


def _formula(method: str, strategy: L.LoraStrategy, rank: int) -> int:
    head = sum(4 * int(np.prod(s)) for s in strategy.head.values())
    if method == "fedit":
        return head + sum(4 * rank * (a.m + a.n) for a in strategy.adapted)
    if method == "ffa-lora":
        return head + sum(4 * rank * a.m for a in strategy.adapted)
    return head + 4 * rank * rank * len(strategy.adapted)


@pytest.mark.parametrize("method", ["fedit", "ffa-lora", "fed-sb"])
def test_uplink_bytes_match_the_formula(method: str, tmp_path: Path) -> None:
    per_client = {}
    for rank in (2, 4):
        grid, strategy = make(method, tmp_path, **{"lora.rank": rank, "local-steps": 1})
        strategy.train_round(grid, 1)
        rlog = strategy.train_round(grid, 2)  # round 1 of Fed-SB also carries the init
        assert rlog.clients == NODES
        per_client[rank] = rlog.up_bytes / NODES
        payload = _formula(method, strategy, rank)
        n_arrays = len(strategy.spec)
        overhead = per_client[rank] - payload
        # framing: array names, dtype/shape headers (np.save header 128 B), the metrics record
        assert 0 < overhead <= 260 * n_arrays + 300, (method, rank, per_client[rank], payload)
    # the framing does not depend on the rank: the difference is exactly the formula's
    assert per_client[4] - per_client[2] == _formula(method, strategy, 4) - _formula(method, strategy, 2)


def test_fedsb_init_costs_dense_gradients_once(tmp_path: Path) -> None:
    grid, strategy = make("fed-sb", tmp_path)
    r1 = strategy.train_round(grid, 1)
    dense = sum(4 * a.m * a.n for a in strategy.adapted)
    assert dense <= r1.metrics["init_up_bytes"] / NODES <= dense + 200 * len(strategy.adapted) + 300
    r2 = strategy.train_round(grid, 2)
    assert "init_up_bytes" not in r2.metrics
    assert r2.down_bytes < r1.down_bytes  # the frame (B, A) went down once
    # B has orthonormal columns and A orthonormal rows (truncated SVD)
    for a in strategy.adapted:
        b, at = strategy.fixed[f"{a.module}.lora_B"], strategy.fixed[f"{a.module}.lora_A"]
        assert np.allclose(b.T @ b, np.eye(b.shape[1]), atol=1e-5)
        assert np.allclose(at @ at.T, np.eye(at.shape[0]), atol=1e-5)


def test_fedsb_random_init_is_data_free(tmp_path: Path) -> None:
    grid, strategy = make("fed-sb", tmp_path, **{"fed-sb.init": "random"})
    r1 = strategy.train_round(grid, 1)
    assert "init_up_bytes" not in r1.metrics and r1.clients == NODES


@pytest.mark.parametrize("method", ["fedit", "ffa-lora", "fed-sb"])
def test_client_lora_forward_equals_merged_model(method: str, tmp_path: Path) -> None:
    grid, strategy = make(method, tmp_path, **{"lora.alpha": 4.0})
    strategy.train_round(grid, 1)
    task = load_server_task(resolve(grid.run_config))
    rng = np.random.default_rng(0)
    arrays = {k: (a + rng.normal(0, 0.1, a.shape)).astype(np.float32)
              for k, a in strategy.trainable.items()}
    cfg = resolve(grid.run_config).sections["lora"]
    am = build_adapted(task, VARIANT[method], cfg, arrays, strategy.fixed)
    merged = L.merge(strategy.variant, strategy.base, strategy.adapted, arrays, strategy.fixed,
                     strategy.scale)
    x = torch.from_numpy(task.data.x_test[:16])
    with torch.no_grad():
        a = task.logits(am.model.eval(), x)
        b = task.logits(task.model_from(merged).eval(), x)
    assert torch.allclose(a, b, atol=1e-4)
    # only the travelling tensors are trainable
    trainable = {id(p) for p in am.model.parameters() if p.requires_grad}
    assert trainable == {id(p) for p in am.params.values()}


def test_ffa_a_never_travels_and_is_shared(tmp_path: Path) -> None:
    grid, strategy = make("ffa-lora", tmp_path)
    strategy.train_round(grid, 1)
    for msg in grid.sent:
        if "arrays" in msg.content:
            assert not any(k.endswith("lora_A") for k in msg.content["arrays"].keys())
    again = L.lora_a_init(5, 0, 2, strategy.adapted[0].n)
    assert np.array_equal(again, strategy.fixed[f"{strategy.adapted[0].module}.lora_A"])


def test_unknown_target_modules_fail_clearly(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="matches no 2-D weight"):
        make("fedit", tmp_path, **{"lora.target-modules": "nothing_here"})


def _gap_by_brute_force(adapted: list[Any], clients: list[dict[str, np.ndarray]],
                        weights: np.ndarray, previous: dict[str, np.ndarray]
                        ) -> tuple[float, float, float]:
    """Gap, along and across with every m x n product formed in float64 and flattened."""
    missed, exact_update = [], []
    for a in adapted:
        b = [c[f"{a.module}.lora_B"].astype(np.float64) for c in clients]
        aa = [c[f"{a.module}.lora_A"].astype(np.float64) for c in clients]
        exact = sum(w * bk @ ak for w, bk, ak in zip(weights, b, aa, strict=True))
        apart = sum(w * bk for w, bk in zip(weights, b, strict=True)) @ sum(
            w * ak for w, ak in zip(weights, aa, strict=True))
        before = previous[f"{a.module}.lora_B"].astype(np.float64) @ previous[
            f"{a.module}.lora_A"].astype(np.float64)
        missed.append((exact - apart).ravel())
        exact_update.append((exact - before).ravel())
    d, e = np.concatenate(missed), np.concatenate(exact_update)
    along = float(d @ e / (e @ e))
    return (float(np.linalg.norm(d) / np.linalg.norm(e)), along,
            float(np.linalg.norm(d - along * e) / np.linalg.norm(e)))


def test_averaging_gap_matches_the_full_products_and_vanishes_when_clients_agree() -> None:
    rng = np.random.default_rng(0)
    adapted = [L.Adapted("q", 7, 5), L.Adapted("v", 3, 5)]
    clients = [{f"{a.module}.{f}": rng.standard_normal(s).astype(np.float32)
                for a in adapted for f, s in (("lora_B", (a.m, 2)), ("lora_A", (2, a.n)))}
               for _ in range(3)]
    previous = {k: rng.standard_normal(x.shape).astype(np.float32) for k, x in clients[0].items()}
    w = np.array([0.5, 0.3, 0.2])
    got = L.averaging_gap(adapted, clients, w, previous)
    want = _gap_by_brute_force(adapted, clients, w, previous)
    assert (got.gap, got.along, got.across) == pytest.approx(want, rel=1e-9)
    assert got.gap > 0.05 and got.across > 0.01 and abs(got.along) > 0.01
    assert abs(got.along) <= got.gap  # Cauchy-Schwarz: the part along E is at most the whole
    # clients a small step apart from the previous global: the gap is second order in the step
    # and must not be lost to cancellation (an uncentred Gram form returned 0.0 from 1e-4 down)
    for step in (1e-3, 1e-4, 1e-5):
        near = [{k: (x + step * rng.standard_normal(x.shape)).astype(np.float64)
                 for k, x in previous.items()} for _ in range(3)]
        want = _gap_by_brute_force(adapted, near, w, previous)
        got = L.averaging_gap(adapted, near, w, previous)
        assert want[0] > 0 and got.gap == pytest.approx(want[0], rel=1e-5), step
        assert got.along == pytest.approx(want[1], rel=1e-4, abs=1e-6 * want[0]), step
        assert got.across == pytest.approx(want[2], rel=1e-4, abs=1e-6 * want[0]), step
    # every client sends the same factors: the product of the means is the mean of the products
    same = L.averaging_gap(adapted, [clients[0]] * 3, w, previous)
    assert (same.gap, same.along, same.across) == pytest.approx((0, 0, 0), abs=1e-7)
    # no client moved: no update, reported as 0 rather than 0 / 0
    assert L.averaging_gap(adapted, [previous] * 3, w, previous) == L.AveragingGap(0.0, 0.0, 0.0)


def test_averaging_gap_along_is_the_shrinkage_of_a_step_in_the_exact_direction() -> None:
    # From B = 0 and A = 0, client k sends B_k = c_k u and A_k = c_k v (weights summing to 1):
    # the exact update is mean(c^2) u v, the product of the means mean(c)^2 u v, so the error
    # var(c) u v lies along the exact update: along = var(c) / mean(c^2), nothing across.
    u = np.array([[1.0], [2.0], [0.5]])
    v = np.array([[0.3, -1.0, 2.0, 0.1]])
    adapted = [L.Adapted("q", 3, 4)]
    c = np.array([0.2, 1.0, 3.0])
    w = np.array([0.2, 0.5, 0.3])
    clients = [{"q.lora_B": ck * u, "q.lora_A": ck * v} for ck in c]
    previous = {"q.lora_B": np.zeros((3, 1)), "q.lora_A": np.zeros((1, 4))}
    got = L.averaging_gap(adapted, clients, w, previous)
    mean_c, mean_c2 = float(w @ c), float(w @ c ** 2)
    assert got.along == pytest.approx((mean_c2 - mean_c ** 2) / mean_c2, rel=1e-12)
    assert got.across == pytest.approx(0.0, abs=1e-7) and got.gap == pytest.approx(got.along)


@pytest.mark.parametrize("method", ["fedit", "ffa-lora", "fed-sb"])
def test_fedit_rounds_report_their_averaging_gap_and_the_exact_methods_none(
        method: str, tmp_path: Path) -> None:
    grid, strategy = make(method, tmp_path)
    strategy.train_round(grid, 1)
    previous = dict(strategy.trainable)
    replies = capture(grid)
    rlog = strategy.train_round(grid, 2)
    if method != "fedit":
        assert "averaging_gap" not in rlog.metrics
        return
    weights = np.array([float(r["metrics"]["num-examples"]) for r in replies.values()])
    clients = [to_numpy(r["arrays"]) for r in replies.values()]
    gap, along, across = _gap_by_brute_force(strategy.adapted, clients,
                                             weights / weights.sum(), previous)
    assert rlog.metrics["averaging_gap"] == pytest.approx(gap, rel=1e-6)
    assert rlog.metrics["averaging_gap_along"] == pytest.approx(along, rel=1e-5, abs=1e-7)
    assert rlog.metrics["averaging_gap_across"] == pytest.approx(across, rel=1e-5, abs=1e-7)
    assert 0 < gap < 1
