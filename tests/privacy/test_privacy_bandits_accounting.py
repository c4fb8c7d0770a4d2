"""Independent privacy audit of the private bandit methods (dp-accounting's PLD accountant).

For every private LinUCB variant this file recomputes the privacy of the mechanism *as
implemented*, without the code under test's accountant (:mod:`bouquet.privacy.gaussian`,
:mod:`bouquet.privacy.ledger`):

* the sensitivity is measured on the silo's own step function fed adversarial users (features
  longer than ``L``, rewards beyond ``Y``), and one user is checked to change nothing but its own
  contribution;
* the noise is read from what was added: the silos' released nodes minus their exact p-sums
  (taken from the silos' state), and the server's released sums minus the exact totals;
* the releases that cover each batch are counted from the messages themselves, and the
  composition is done by dp-accounting's PLD accountant (pessimistic discretisation).

It then asserts that every epsilon the run reports (per silo, for the run, in metrics.jsonl and
summary.json) is at least that recomputed value, and that at the full horizon the target holds.
"""

from __future__ import annotations

import functools
import json
import math
from pathlib import Path
from typing import Any

import dp_accounting
import numpy as np
import pytest
from dp_accounting import pld
from flwr.app import RecordDict

from bouquet.apps.config import resolve
from bouquet.apps.local_grid import LocalGrid
from bouquet.apps.results import read_metrics
from bouquet.apps.runner import build_strategy, execute
from bouquet.clients.linucb import linucb_steps
from bouquet.strategies.linucb import DPLinUCBConfig, LinUCBConfig, make_protocol
from bouquet.tasks.bandits import Block

SMALL = {"linucb.batch-steps": 5, "linucb.horizon-rounds": 8, "synth-bandit.arms": 8,
         "synth-bandit.dim": 4}
#: relative slack for the PLD accountant's pessimistic discretisation
TOL = 1e-6


def pld_epsilon(noise_multipliers: list[float], delta: float) -> float:
    """Epsilon at ``delta`` of Gaussian releases with these noise multipliers (dp-accounting)."""
    return _pld_epsilon(tuple(sorted(noise_multipliers)), delta)


@functools.cache
def _pld_epsilon(noise_multipliers: tuple[float, ...], delta: float) -> float:
    if not noise_multipliers:
        return 0.0
    acc = pld.PLDAccountant(value_discretization_interval=1e-4)
    for z in noise_multipliers:
        acc.compose(dp_accounting.GaussianDpEvent(z))
    return float(acc.get_epsilon(delta))


def windows(k: int) -> range:
    """Batches covered by the tree node released at sync ``k`` (recomputed here, from the bits)."""
    low = k & -k
    return range(k - low + 1, k + 1)


# --------------------------------------------------------------------------- sensitivity
def _adversarial_block(rng: np.random.Generator, steps: int, arms: int, dim: int,
                       scale: float, reward: float) -> Block:
    x = rng.standard_normal((steps, arms, dim))
    x *= scale / np.linalg.norm(x, axis=2, keepdims=True)
    y = rng.choice([-reward, reward], size=(steps, arms))
    return Block(x, np.zeros((steps, arms)), y)


def measured_sensitivity(variant: str, feature_bound: float, reward_bound: float) -> float:
    """Largest whitened norm of one user's contribution the silo's step function produces.

    The released upper triangle with noise ``sigma`` on the diagonal and ``sigma/sqrt(2)`` off it
    whitens ``x x^T`` to Frobenius norm ``||x||^2``; the vector part is ``x y``.
    """
    lin = LinUCBConfig(feature_bound=feature_bound, num_silos=2)
    proto = make_protocol(variant, lin, DPLinUCBConfig(reward_bound=reward_bound), 4, 2, 8)
    block = _adversarial_block(np.random.default_rng(0), 50, 6, 4, 3.0 * feature_bound,
                               5.0 * reward_bound)
    xs, ys, _ = linucb_steps(block, np.zeros((4, 4)), np.zeros(4), proto, lin, 1)
    gram = np.einsum("sa,sb->sab", xs, xs)
    iu = np.triu_indices(4)
    weights = np.where(iu[0] == iu[1], 1.0, 2.0)  # off-diagonal noise has half the variance
    whitened = (gram[:, iu[0], iu[1]] ** 2 * weights).sum(axis=1) + (xs * ys[:, None]).__pow__(
        2).sum(axis=1)
    return float(np.sqrt(whitened.max()))


@pytest.mark.parametrize("variant", ["ldp", "sdp-amp"])
@pytest.mark.parametrize("bounds", [(1.0, 1.0), (1.0, 2.0), (0.5, 1.0)])
def test_contribution_is_clipped_to_the_configured_bounds(variant: str,
                                                          bounds: tuple[float, float]) -> None:
    feature_bound, reward_bound = bounds
    sens = measured_sensitivity(variant, feature_bound, reward_bound)
    # clipping makes the worst user exactly as large as the bounds allow, never larger
    assert sens == pytest.approx(feature_bound * math.hypot(feature_bound, reward_bound),
                                 rel=1e-9)


@pytest.mark.parametrize("variant", ["ldp", "sdp-amp", "sdp-vecsum"])
def test_one_user_changes_only_its_own_contribution(variant: str) -> None:
    lin = LinUCBConfig(num_silos=2)
    proto = make_protocol(variant, lin, DPLinUCBConfig(), 4, 2, 8)
    rng = np.random.default_rng(1)
    block = _adversarial_block(rng, 25, 6, 4, 1.0, 1.0)
    rewards = block.rewards.copy()
    rewards[3] = -rewards[3]  # user 3 answers differently
    other = Block(block.features, block.means, rewards)
    gram, vec = np.eye(4) * 0.1, rng.standard_normal(4) * 0.1
    xs1, ys1, _ = linucb_steps(block, gram, vec, proto, lin, 1)
    xs2, ys2, _ = linucb_steps(other, gram, vec, proto, lin, 1)
    np.testing.assert_array_equal(xs1, xs2)  # no later arm choice depends on user 3
    changed = np.flatnonzero(ys1 != ys2)
    assert set(changed) <= {3}


# --------------------------------------------------------------------------- calibration
@pytest.mark.parametrize("variant", ["ldp", "sdp-amp"])
@pytest.mark.parametrize("eps,delta,reward_bound",
                         [(5.0, 0.1, 1.0), (1.0, 1e-4, 1.0), (1.0, 0.1, 2.0), (0.2, 0.1, 1.0)])
def test_full_horizon_spends_at_most_the_target(variant: str, eps: float, delta: float,
                                                reward_bound: float) -> None:
    silos, horizon, dim = 10, 40, 6
    sens = measured_sensitivity(variant, 1.0, reward_bound)
    lin = LinUCBConfig(num_silos=silos)
    proto = make_protocol(variant, lin, DPLinUCBConfig(epsilon=eps, delta=delta,
                                                       reward_bound=reward_bound),
                          dim, silos, horizon)
    # every batch enters at most floor(log2 K) + 1 nodes; the server gets each node (LDP) or
    # the sum of all M silos' nodes (SDP-Amp; the shuffler releases sums only)
    levels = max(len([k for k in range(1, horizon + 1) if b in windows(k)])
                 for b in range(1, horizon + 1))
    copies = silos if variant == "sdp-amp" else 1
    true = pld_epsilon([math.sqrt(copies) * proto.sigma / sens] * levels, delta)
    assert true <= eps * (1 + TOL)
    assert true >= 0.9 * eps  # and the noise is not wasted


def test_reward_bound_enters_the_noise() -> None:
    lin = LinUCBConfig(num_silos=4)
    small = make_protocol("ldp", lin, DPLinUCBConfig(reward_bound=1.0), 6, 4, 40)
    large = make_protocol("ldp", lin, DPLinUCBConfig(reward_bound=3.0), 6, 4, 40)
    assert large.sigma / small.sigma == pytest.approx(math.hypot(1, 3) / math.hypot(1, 1))


# --------------------------------------------------------------------------- a real run
def _run(tmp_path: Path, method: str, rounds: int, silos: int = 3, **cfg: Any
         ) -> tuple[LocalGrid, Any, dict[int, dict[int, RecordDict]], dict[int, dict[int, Any]]]:
    """Run ``rounds`` rounds; keep every reply and every silo's exact p-sums after each round."""
    grid = LocalGrid(silos, {"results-dir": str(tmp_path), "run-name": method, "method": method,
                             "num-server-rounds": 8, "linucb.num-silos": silos, **SMALL, **cfg})
    strategy = build_strategy(resolve(grid.run_config), None)
    replies: dict[int, dict[int, RecordDict]] = {}
    exact: dict[int, dict[int, Any]] = {}
    for rnd in range(1, rounds + 1):
        got: dict[int, RecordDict] = {}
        for pid in range(silos):
            def keep(content: RecordDict, pid: int = pid,
                     got: dict[int, RecordDict] = got) -> RecordDict:
                got[pid] = content
                return content
            grid.corrupt[pid] = keep
        strategy.train_round(grid, rnd)
        replies[rnd] = got
        exact[rnd] = {}
        for ctx in grid.contexts.values():
            pid = int(ctx.node_config["partition-id"])
            key = f"{method}.tree"
            if key in ctx.state.array_records:
                exact[rnd][pid] = ctx.state.array_records[key]["psums"].numpy().copy()
    return grid, strategy, replies, exact


def _noise(replies: dict[int, dict[int, RecordDict]], exact: dict[int, dict[int, Any]],
           dim: int) -> tuple[np.ndarray, np.ndarray]:
    """(diagonal + vector noise, off-diagonal noise) of every released node."""
    main, off = [], []
    iu = np.triu_indices(dim, 1)
    for rnd, got in replies.items():
        level = (rnd & -rnd).bit_length() - 1
        for pid, content in got.items():
            gram = content["node"]["gram"].numpy()  # type: ignore[index,union-attr]
            vec = content["node"]["vec"].numpy()  # type: ignore[index,union-attr]
            psum = exact[rnd][pid][level]
            g_noise = gram - psum[: dim * dim].reshape(dim, dim)
            main += [*np.diag(g_noise), *(vec - psum[dim * dim:])]
            off += list(g_noise[iu])
    return np.array(main), np.array(off)


@pytest.mark.parametrize("method", ["dp-fedlinucb-ldp", "dp-fedlinucb-sdp-amp"])
@pytest.mark.parametrize("rounds", [5, 8])
def test_reported_epsilon_covers_the_noise_actually_added(tmp_path: Path, method: str,
                                                          rounds: int) -> None:
    dim, silos, delta = 4, 3, 0.1
    grid, strategy, replies, exact = _run(tmp_path, method, rounds, silos)
    metrics = strategy.round_metrics(rounds)
    sigma = float(metrics["sigma"])
    main, off = _noise(replies, exact, dim)
    # the noise is what the accounting assumes: sigma on the diagonal and vector, sigma/sqrt(2) off
    se = 1 / math.sqrt(2 * len(main))
    assert abs(main.std() / sigma - 1) < 5 * se
    assert abs(off.std() / (sigma / math.sqrt(2)) - 1) < 5 / math.sqrt(2 * len(off))
    sens = measured_sensitivity("ldp" if method.endswith("ldp") else "sdp-amp", 1.0, 1.0)
    # the server's level sums: for SDP-Amp the noise of what it stores is the sum of all nodes'
    copies = silos if method.endswith("amp") else 1
    for pid in range(silos):
        covering: dict[int, list[float]] = {}
        for k, got in replies.items():
            if pid not in got:
                continue
            for b in windows(k):
                covering.setdefault(b, []).append(math.sqrt(copies) * sigma / sens)
        true = max(pld_epsilon(z, delta) for z in covering.values())
        assert metrics[f"epsilon_silo{pid}"] >= true * (1 - TOL), pid
    assert metrics["epsilon"] == max(metrics[f"epsilon_silo{p}"] for p in range(silos))
    if rounds == 8:  # full horizon: at most the target
        assert metrics["epsilon"] <= 1.0 * (1 + TOL)
    if method.endswith("amp"):
        # what the strategy stored is the sum of the nodes, nothing finer, with sqrt(M) sigma noise
        level_noise = []
        for k in replies:
            level = (k & -k).bit_length() - 1
            total = sum(exact[k][p][level] for p in range(silos))
            if int(strategy.tree.syncs[level]) == k:
                level_noise.append(strategy.tree.sums[level] - total)
        assert level_noise
        stored = np.concatenate([np.r_[np.diag(n[: dim * dim].reshape(dim, dim)), n[dim * dim:]]
                                 for n in level_noise])
        assert abs(stored.std() / (math.sqrt(silos) * sigma) - 1) < 5 / math.sqrt(2 * len(stored))
        # without the shuffler, each node on its own would cost far more; the report says so
        node_alone = max(pld_epsilon([sigma / sens] * len(v), delta)
                         for v in [[k for k in replies if b in windows(k)]
                                   for b in range(1, rounds + 1)])
        assert strategy.privacy()["epsilon_without_shuffler"] >= node_alone * (1 - TOL)


@pytest.mark.parametrize("method", ["dp-fedlinucb-ldp", "dp-fedlinucb-sdp-amp"])
def test_results_files_report_the_spent_epsilon(tmp_path: Path, method: str) -> None:
    grid = LocalGrid(3, {"results-dir": str(tmp_path), "run-name": "r", "method": method,
                         "num-server-rounds": 3, "linucb.num-silos": 3, **SMALL})
    summary_path = execute(grid, grid.run_config)
    rows = read_metrics(summary_path.parent)
    summary = json.loads(summary_path.read_text())
    eps = [r["epsilon"] for r in rows]
    assert all(a <= b for a, b in zip(eps, eps[1:], strict=False))  # composes, never shrinks
    assert 0 < eps[-1] < 1.0  # 3 of 8 planned syncs spend less than the target
    assert summary["privacy"]["epsilon"] == eps[-1]
    assert summary["privacy"]["per_silo"] == {str(p): rows[-1][f"epsilon_silo{p}"]
                                              for p in range(3)}
    assert summary["privacy"]["target_epsilon"] == 1.0


def test_vecsum_prints_no_unverified_epsilon(tmp_path: Path) -> None:
    grid = LocalGrid(2, {"results-dir": str(tmp_path), "run-name": "v",
                         "method": "dp-fedlinucb-sdp-vecsum", "num-server-rounds": 2,
                         "linucb.num-silos": 2, **SMALL})
    summary_path = execute(grid, grid.run_config)
    rows = read_metrics(summary_path.parent)
    assert all("epsilon" not in r for r in rows)
    privacy = json.loads(summary_path.read_text())["privacy"]
    assert privacy["epsilon"] is None and privacy["verified"] is False
