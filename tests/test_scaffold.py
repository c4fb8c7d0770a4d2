"""SCAFFOLD family and compressed FedAvg: exactness, invariants, client state under failures."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
from flwr.app import RecordDict

from bouquet.apps.config import resolve
from bouquet.apps.local_grid import LocalGrid
from bouquet.apps.runner import build_strategy, initial_arrays, load_server_task
from bouquet.clients.staged_state import StagedState
from bouquet.compression import encoded_bytes, make_compressor, to_array_record
from bouquet.strategies.accounting import content_bytes
from bouquet.strategies.base import BouquetStrategy

NODES = 6


def setup(method: str, tmp_path: Path, **over: Any) -> tuple[LocalGrid, Any]:
    cfg = {"method": method, "task": "digits-mlp", "results-dir": str(tmp_path), "run-name": "t",
           "seed": 4, "local-steps": 4, "lr": 0.05, "partition": "pathological",
           "classes-per-client": 2, "sample-deadline": 5.0, **over}
    grid = LocalGrid(NODES, cfg)
    rc = resolve(grid.run_config)
    strategy = build_strategy(rc, initial_arrays(rc, load_server_task(rc), grid))
    return grid, strategy


def flat(strategy: BouquetStrategy) -> np.ndarray:
    return strategy.layout.flatten(strategy.weights)  # type: ignore[attr-defined]


def trajectory(method: str, tmp_path: Path, rounds: int = 4, **over: Any
               ) -> tuple[list[np.ndarray], list[np.ndarray], list[int]]:
    grid, strategy = setup(method, tmp_path / method, **over)
    xs, cs, up = [], [], []
    for rnd in range(1, rounds + 1):
        log = strategy.train_round(grid, rnd)
        assert log.clients == len(log.sampled) > 0
        xs.append(flat(strategy))
        cs.append(strategy.c.copy())
        up.append(log.up_bytes)
    return xs, cs, up


def test_single_uplink_reproduces_scaffold_at_half_the_bytes(tmp_path: Path) -> None:
    x2, c2, up2 = trajectory("scaffold", tmp_path, **{"fraction-train": 0.5})
    x1, c1, up1 = trajectory("scaffold-1up", tmp_path, **{"fraction-train": 0.5})
    for a, b in zip(x2, x1, strict=True):
        np.testing.assert_allclose(a, b, atol=2e-5)
    for a, b in zip(c2, c1, strict=True):
        np.testing.assert_allclose(a, b, atol=2e-5)
    assert np.linalg.norm(x2[-1] - x2[0]) > 0.1  # the model did move
    for two, one in zip(up2, up1, strict=True):
        assert 0.49 <= one / two <= 0.51, (one, two)


@pytest.mark.parametrize(("method", "over"), [
    ("scallion", {"scallion.compressor": "identity", "scallion.alpha": 1.0}),
    ("scafcom", {"scafcom.compressor": "identity", "scafcom.alpha": 1.0, "scafcom.beta": 1.0}),
    ("scafcom", {"scafcom.compressor": "identity", "scafcom.beta": 1.0,
                 "scafcom.momentum-placement": "local-steps"}),
])
def test_identity_compression_reduces_to_scaffold(method: str, over: dict[str, Any],
                                                  tmp_path: Path) -> None:
    ref, _, _ = trajectory("scaffold-1up", tmp_path, **{"fraction-train": 0.5})
    got, _, _ = trajectory(method, tmp_path, **{"fraction-train": 0.5, **over})
    for a, b in zip(ref, got, strict=True):
        np.testing.assert_allclose(a, b, atol=1e-6)


def test_scafcom_momentum_changes_the_trajectory(tmp_path: Path) -> None:
    # guards the previous test: beta < 1 must not reproduce SCAFFOLD
    ref, _, _ = trajectory("scaffold-1up", tmp_path, rounds=2)
    got, _, _ = trajectory("scafcom", tmp_path, rounds=2,
                           **{"scafcom.compressor": "identity", "scafcom.beta": 0.2})
    assert np.abs(ref[-1] - got[-1]).max() > 1e-3


@pytest.mark.parametrize(("init", "scale"), [(None, 1.0), ("first", 1.0), ("zero", 0.2)])
def test_scafcom_momentum_starts_at_the_first_gradient_by_default(
        init: str | None, scale: float, tmp_path: Path) -> None:
    # round 1 (every c_i = c = 0): q_i = C(v_i), so the model step is v_i's; with identity and
    # alpha = 1 SCAFFOLD's step is gbar_i. The default start v_i = gbar_i takes that full step,
    # the zero start (1 - beta) 0 + beta gbar_i takes beta times it.
    over = {"scafcom.compressor": "identity", "scafcom.alpha": 1.0, "scafcom.beta": 0.2,
            **({} if init is None else {"scafcom.momentum-init": init})}
    grid, ref = setup("scaffold-1up", tmp_path / "ref")
    x0 = flat(ref)
    ref.train_round(grid, 1)
    grid, got = setup("scafcom", tmp_path / f"got-{init}", **over)
    got.train_round(grid, 1)
    np.testing.assert_allclose(flat(got) - x0, scale * (flat(ref) - x0), atol=1e-6)


@pytest.mark.parametrize("placement", ["round", "local-steps"])
def test_scafcom_momentum_placements_differ_but_both_move(placement: str, tmp_path: Path) -> None:
    over = {"scafcom.compressor": "identity", "scafcom.beta": 0.3,
            "scafcom.momentum-placement": placement, "fraction-train": 1.0}
    xs, _, _ = trajectory("scafcom", tmp_path / placement, rounds=3, **over)
    other = "round" if placement == "local-steps" else "local-steps"
    ys, _, _ = trajectory("scafcom", tmp_path / other, rounds=3,
                          **{**over, "scafcom.momentum-placement": other})
    # identical until the momentum exists (round 1), different after
    np.testing.assert_allclose(xs[0], ys[0], atol=1e-6)
    assert np.abs(xs[-1] - ys[-1]).max() > 1e-4


def client_controls(grid: LocalGrid, strategy: Any, method: str) -> np.ndarray:
    d = strategy.layout.size
    out = []
    for node, ctx in grid.contexts.items():
        state = StagedState(ctx, method).peek(strategy.accepted.get(grid.pid(node), 0))
        out.append(state.get("c", np.zeros(d, dtype=np.float32)))
    return np.stack(out)


@pytest.mark.parametrize(("method", "over"), [
    ("scaffold", {}),
    ("scaffold", {"scaffold.controls": "I"}),
    ("scaffold-1up", {}),
    ("scallion", {"scallion.compressor-ratio": 0.1}),
    ("scafcom", {"scafcom.compressor-ratio": 0.05}),
    ("scafcom", {"scafcom.compressor": "sign"}),
    ("scafcom", {"scafcom.momentum-placement": "local-steps"}),
])
def test_control_is_mean_of_client_controls(method: str, over: dict[str, Any],
                                            tmp_path: Path) -> None:
    grid, strategy = setup(method, tmp_path, **over)
    for rnd in range(1, 4):
        strategy.train_round(grid, rnd)
        cs = client_controls(grid, strategy, method)
        assert np.abs(cs).max() > 0
        np.testing.assert_allclose(strategy.c, cs.mean(axis=0), atol=1e-5)


def test_catalogue_clients_follow_the_controls_option(tmp_path: Path) -> None:
    """bouquet's own ClientApp reads ``scaffold.controls``: option I's c_i are other vectors
    (their algebra: tests/test_client_plugins.py)."""
    controls = {}
    for option in ("I", "II"):
        grid, strategy = setup("scaffold", tmp_path / option, **{"scaffold.controls": option})
        strategy.train_round(grid, 1)
        controls[option] = client_controls(grid, strategy, "scaffold")
    assert np.abs(controls["I"] - controls["II"]).max() > 1e-3


@pytest.mark.parametrize("method", ["scafcom", "scaffold"])
def test_failed_replies_do_not_corrupt_client_state(method: str, tmp_path: Path) -> None:
    grid, strategy = setup(method, tmp_path)
    strategy.train_round(grid, 1)
    # round 2: node 1's reply is rejected (shape lies), node 2 raises, node 3's reply is lost
    grid.corrupt[1] = lambda content: RecordDict(
        {n: (r if n != "metrics" else r) for n, r in content.items() if n != "payload"})
    grid.fail.add(2)
    grid.drop.add(3)
    strategy.common = type(strategy.common)(**{**strategy.common.__dict__, "round_timeout": 1.0})
    log = strategy.train_round(grid, 2)
    assert (log.rejected, log.errors, log.missing, log.clients) == (1, 1, 1, NODES - 3)
    cs = client_controls(grid, strategy, method)
    np.testing.assert_allclose(strategy.c, cs.mean(axis=0), atol=1e-5)
    # the failed clients' committed controls are those of round 1
    for pid in (1, 2, 3):
        assert strategy.accepted[pid] == 1
    grid.corrupt.clear()
    grid.fail.clear()
    grid.drop.clear()
    for rnd in (3, 4):
        log = strategy.train_round(grid, rnd)
        assert log.clients == NODES
        np.testing.assert_allclose(strategy.c, client_controls(grid, strategy, method).mean(0),
                                   atol=1e-5)


def test_never_selected_client_starts_from_zero(tmp_path: Path) -> None:
    grid, strategy = setup("scafcom", tmp_path, **{"fraction-train": 0.34})
    strategy.train_round(grid, 1)
    cs = client_controls(grid, strategy, "scafcom")
    seen = set(strategy.accepted)
    for i, node in enumerate(grid.contexts):
        if grid.pid(node) not in seen:
            assert not cs[i].any()
    assert 0 < len(seen) == strategy.sample_size(1, NODES) < NODES


def test_fed_ef_residual_lives_in_client_state(tmp_path: Path) -> None:
    grid, strategy = setup("fed-ef", tmp_path, **{"fed-ef.compressor-ratio": 0.05})
    strategy.train_round(grid, 1)
    strategy.train_round(grid, 2)
    for node, ctx in grid.contexts.items():
        e = StagedState(ctx, "fed-ef").peek(strategy.accepted[grid.pid(node)])["e"]
        assert e.shape == (strategy.layout.size,) and np.abs(e).max() > 0


def test_fedavg_topk_without_ef_keeps_no_state(tmp_path: Path) -> None:
    grid, strategy = setup("fedavg-compressed", tmp_path)
    strategy.train_round(grid, 1)
    ctx = next(iter(grid.contexts.values()))
    assert StagedState(ctx, "fedavg-compressed").peek(1) == {}


@pytest.mark.parametrize("name", ["identity", "topk", "randk", "sign", "qsgd", "sparseloco"])
def test_measured_bytes_match_the_formula(name: str) -> None:
    comp = make_compressor(name, **({"ratio": 0.02} if name in ("topk", "randk") else {}))
    d = 4810  # digits-mlp
    payload = comp.compress(np.random.default_rng(0).normal(size=d), np.random.default_rng(1))
    measured = content_bytes(RecordDict({"payload": to_array_record(payload)}))
    assert encoded_bytes(payload) == comp.size_bytes((d,))
    framing = measured - encoded_bytes(payload)
    assert 0 < framing < 200 * len(payload) + 40, framing  # ~190 B per array (npy header)


def test_scaffold_uplink_payloads_use_the_compressor(tmp_path: Path) -> None:
    grid, strategy = setup("scafcom", tmp_path, **{"scafcom.compressor-ratio": 0.02})
    log = strategy.train_round(grid, 1)
    per_client = log.up_bytes / log.clients
    d = strategy.layout.size
    dense = 4 * d
    assert per_client < dense / 10
    assert per_client >= make_compressor("topk", ratio=0.02).size_bytes((d,))
