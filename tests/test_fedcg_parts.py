"""FedCG's numpy parts: system model, ratio LP, facility location, the joint plan."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from bouquet.strategies import fedcg_plan, ratio_lp, selection
from bouquet.strategies.system_model import (
    MeasuredProfile,
    SimulatedProfile,
    TimeModel,
    round_time,
)

# ----------------------------------------------------------------------------- system model


def test_profile_is_seeded_and_in_range() -> None:
    p = SimulatedProfile(seed=4)
    steps = [p.step_time(i) for i in range(200)]
    bws = [p.uplink_bps(i, 3) for i in range(200)]
    assert all(0.1 <= s <= 0.5 for s in steps)
    assert all(1e6 <= b <= 5e6 for b in bws)
    assert steps == [SimulatedProfile(seed=4).step_time(i) for i in range(200)]
    assert steps != [SimulatedProfile(seed=5).step_time(i) for i in range(200)]
    # Bandwidth varies across rounds only when asked to.
    assert p.uplink_bps(7, 1) != p.uplink_bps(7, 2)
    fixed = SimulatedProfile(seed=4, uplink_per_round=False)
    assert fixed.uplink_bps(7, 1) == fixed.uplink_bps(7, 2)
    # Means close to the uniform ranges' midpoints.
    assert abs(np.mean(steps) - 0.3) < 0.03
    assert abs(np.mean(bws) / 1e6 - 3.0) < 0.3


def test_loguniform_profile_in_range() -> None:
    p = SimulatedProfile(seed=1, uplink_dist="loguniform", uplink_min_mbps=0.5, uplink_max_mbps=50)
    bws = np.array([p.uplink_bps(i, 1) for i in range(500)]) / 1e6
    assert bws.min() >= 0.5 and bws.max() <= 50
    assert np.median(bws) < 10  # log-uniform median is sqrt(0.5 * 50) = 5


def test_time_model_and_round_time() -> None:
    tm = TimeModel(params=1_000_000)
    assert tm.upload_s(8e6) == pytest.approx(4.0)
    assert tm.finish_s(50, 0.2, 8e6, 0.25) == pytest.approx(10.0 + 1.0)
    # Charged indices: 20 bits each for a million coordinates; a dense update has none.
    ti = TimeModel(params=1_000_000, index_bits=20)
    assert ti.kept(0.25) == 250_000
    assert ti.payload_bits(0.25) == 250_000 * 52
    assert ti.payload_bits(1.0) == 32_000_000
    assert ti.upload_s(1e6) == pytest.approx(52.0)
    assert round_time([1.0, 2.0, 10.0]) == (10.0, 8.0)


def test_measured_profile_averages_and_fills_gaps() -> None:
    m = MeasuredProfile(smoothing=0.5, fallback_step_time=0.3, fallback_uplink_mbps=3.0)
    assert m.step_time(1) == 0.3 and m.uplink_bps(1, 1) == 3e6
    m.report(1, 0.2, 4.0)
    m.report(1, 0.4, None)
    m.report(2, 1.0, 2.0)
    assert m.step_time(1) == pytest.approx(0.3)
    assert m.uplink_bps(1, 9) == pytest.approx(4e6)
    assert m.step_time(3) == pytest.approx(np.median([0.3, 1.0]))
    m2 = MeasuredProfile()
    m2.load_state_dict(m.state_dict())
    assert m2.step_time(1) == m.step_time(1) and m2.uplink_bps(2, 0) == m.uplink_bps(2, 0)


# ----------------------------------------------------------------------------- ratio LP


@pytest.mark.parametrize("seed", range(25))
def test_lp_equals_closed_form_on_random_instances(seed: int) -> None:
    rng = np.random.default_rng(seed)
    m = int(rng.integers(1, 15))
    a = 50 * rng.uniform(0.1, 0.5, m)
    u = rng.uniform(5, 100, m)
    w = rng.dirichlet(np.ones(m))
    lam = float(rng.uniform(0, 300))
    theta_min = float(rng.choice([0.001, 0.01, 0.1]))
    lp = ratio_lp.solve(a, u, w, lam, theta_min)
    cf = ratio_lp.closed_form(a, u, w, lam, theta_min)
    assert lp.objective == pytest.approx(cf.objective, rel=1e-7, abs=1e-7)
    assert lp.round_time == pytest.approx(cf.round_time, rel=1e-6, abs=1e-6)
    np.testing.assert_allclose(lp.theta, cf.theta, atol=1e-6)
    # Feasible, and nobody who could send more is left below the round time.
    assert np.all(lp.theta >= theta_min - 1e-12) and np.all(lp.theta <= 1 + 1e-12)
    assert np.all(a + lp.theta * u <= lp.round_time + 1e-6)
    inner = (lp.theta > theta_min + 1e-9) & (lp.theta < 1 - 1e-9)
    np.testing.assert_allclose((a + lp.theta * u)[inner], lp.round_time, rtol=1e-6)


def test_lp_extremes() -> None:
    a = np.array([1.0, 2.0, 3.0])
    u = np.array([10.0, 20.0, 30.0])
    w = np.ones(3) / 3
    # No weight on the error: everyone compresses as much as allowed.
    cheap = ratio_lp.solve(a, u, w, 0.0, 0.05)
    assert cheap.round_time == pytest.approx(max(a + 0.05 * u))
    # Huge weight: nobody compresses.
    dense = ratio_lp.solve(a, u, w, 1e6, 0.05)
    np.testing.assert_allclose(dense.theta, 1.0)
    assert dense.round_time == pytest.approx(33.0)


def test_lp_brute_force_over_round_time() -> None:
    rng = np.random.default_rng(0)
    a, u, w = rng.uniform(0, 5, 6), rng.uniform(1, 20, 6), rng.uniform(0, 1, 6)
    sol = ratio_lp.solve(a, u, w, 12.0, 0.01)
    grid = np.linspace(max(a + 0.01 * u), max(a + u), 20001)
    vals = [ratio_lp.objective(t, ratio_lp.fill_to(t, a, u, 0.01), w, 12.0) for t in grid]
    assert sol.objective <= min(vals) + 1e-9
    assert sol.objective == pytest.approx(min(vals), abs=1e-2)


@pytest.mark.parametrize("seed", range(10))
def test_convex_ratios_are_the_brute_force_optimum_within_bounds(seed: int) -> None:
    rng = np.random.default_rng(seed)
    m = int(rng.integers(1, 12))
    a, u, w = 50 * rng.uniform(0.1, 0.5, m), rng.uniform(5, 100, m), rng.dirichlet(np.ones(m))
    lam, theta_min = float(rng.uniform(0.1, 50)), 0.01
    sol = ratio_lp.solve_convex(a, u, w, lam, theta_min)
    assert np.all(sol.theta >= theta_min) and np.all(sol.theta <= 1.0)
    assert np.all(a + sol.theta * u <= sol.round_time + 1e-9)
    inner = sol.theta < 1 - 1e-9  # every client not at 1 finishes at the round time
    np.testing.assert_allclose((a + sol.theta * u)[inner], sol.round_time, rtol=1e-9)
    grid = np.linspace(max(a + theta_min * u), max(a + u), 20001)
    vals = [ratio_lp.convex_objective(float(np.max(a + th * u)), th, w, lam)
            for th in (ratio_lp.fill_to(t, a, u, theta_min) for t in grid)]
    assert sol.objective <= min(vals) + 1e-6


def test_convex_ratios_stay_in_a_band_where_the_linear_lp_swings() -> None:
    # Ten clients with the benchmark's profile (20 steps of U[0.1, 0.5] s, a 2.8 M-parameter
    # upload at U[1, 5] Mb/s redrawn each round): across 40 redraws the linear LP's mean ratio
    # swings by more than 30 points at some weight (the swings); the convex term keeps it
    # within a factor 2 at every weight, and its level follows the weight monotonically.
    rng = np.random.default_rng(3)
    a, w = 20 * rng.uniform(0.1, 0.5, 10), np.full(10, 0.1)
    uplinks = [151.2 / rng.uniform(1, 5, 10) for _ in range(40)]

    def means(solver: Any, weight: float) -> list[float]:
        return [float(solver(a, u, w, weight * float(np.median(a + u)), 0.01).theta.mean())
                for u in uplinks]

    assert max(max(m) - min(m) for m in (means(ratio_lp.solve, x) for x in (0.5, 0.7, 1.0))) > 0.3
    levels = []
    for weight in (0.005, 0.01, 0.02, 0.05):
        m = means(ratio_lp.solve_convex, weight)
        assert max(m) / min(m) < 2.0, weight
        levels.append(float(np.mean(m)))
    assert levels == sorted(levels)


def test_budget_variant() -> None:
    a, u = np.array([1.0, 5.0, 9.5]), np.array([10.0, 10.0, 10.0])
    sol = ratio_lp.for_budget(a, u, 10.0, 0.1)
    np.testing.assert_allclose(sol.theta, [0.9, 0.5, 0.1])


# ----------------------------------------------------------------------------- facility location


@pytest.mark.parametrize("seed", range(12))
def test_greedy_reaches_one_minus_one_over_e_of_brute_force(seed: int) -> None:
    rng = np.random.default_rng(seed)
    n = int(rng.integers(5, 11))
    k = int(rng.integers(1, 5))
    g = rng.normal(size=(n, 4)) * rng.uniform(0.1, 3, size=(n, 1))
    dist = selection.pairwise_distances(g)
    w = rng.uniform(0.5, 2, n) if seed % 2 else None
    picked = selection.greedy_facility_location(dist, k, weights=w)
    assert len(picked) == k and len(set(picked)) == k
    _, opt = selection.brute_force_facility_location(dist, k, w)
    assert selection.facility_value(dist, picked, w) >= (1 - 1 / np.e) * opt - 1e-9


def test_planted_clusters_one_pick_each_weights_are_sizes() -> None:
    rng = np.random.default_rng(3)
    sizes = [7, 2, 11, 5]
    centres = rng.normal(size=(len(sizes), 20)) * 10
    rows, labels = [], []
    for c, n in enumerate(sizes):
        rows += [centres[c]] * n  # identical signals within a cluster
        labels += [c] * n
    order = rng.permutation(len(labels))
    g = np.array(rows)[order]
    lab = np.array(labels)[order]
    dist = selection.pairwise_distances(g)
    picked = selection.greedy_facility_location(dist, len(sizes))
    assert sorted(lab[picked]) == list(range(len(sizes)))
    gamma = selection.representation_weights(dist, picked)
    np.testing.assert_allclose(gamma * len(lab), [sizes[lab[j]] for j in picked])


def test_pairwise_distances() -> None:
    g = np.array([[0.0, 0.0], [3.0, 4.0], [0.0, 1.0]])
    d = selection.pairwise_distances(g)
    np.testing.assert_allclose(d, [[0, 5, 1], [5, 0, np.sqrt(18)], [1, np.sqrt(18), 0]])


def test_time_cost_steers_greedy_to_the_fast_twin() -> None:
    # Two identical clusters members; one is slow. With a time cost the fast one is picked.
    g = np.array([[0.0], [0.0], [10.0]])
    dist = selection.pairwise_distances(g)
    cost = np.array([5.0, 1.0, 1.0])
    assert selection.greedy_facility_location(dist, 1, cost=None) == [0]
    assert sorted(selection.greedy_facility_location(dist, 2, cost=cost)) == [1, 2]


def test_time_cannot_make_the_selection_ignore_a_slow_cluster() -> None:
    # Three clusters of 5 identical clients; the third cluster's clients are 20x slower. With
    # k = 3 every cluster must be represented, whatever the weight of time (below 1): a second
    # member of a covered cluster adds nothing to represent.
    g = np.repeat(np.array([[0.0, 0.0], [10.0, 0.0], [0.0, 10.0]]), 5, axis=0)
    dist = selection.pairwise_distances(g)
    cost = np.array([1.0] * 10 + [20.0] * 5)
    for weight in (0.0, 0.5, 0.9, 0.99):
        picked = selection.greedy_facility_location(dist, 3, cost=cost, cost_weight=weight)
        assert sorted(p // 5 for p in picked) == [0, 1, 2], weight
    # between equally representative clients time still decides: the fast twin wins
    g2 = np.array([[0.0], [0.0], [10.0]])
    assert selection.greedy_facility_location(
        selection.pairwise_distances(g2), 1, cost=np.array([5.0, 1.0, 1.0])) == [1]
    with pytest.raises(ValueError, match="cost_weight"):
        selection.greedy_facility_location(dist, 3, cost=cost, cost_weight=1.0)


# ----------------------------------------------------------------------------- joint plan


def _times(n: int, seed: int) -> fedcg_plan.ClientTimes:
    rng = np.random.default_rng(seed)
    return fedcg_plan.ClientTimes(list(range(n)), 50 * rng.uniform(0.1, 0.5, n),
                                  89.6 / rng.uniform(1, 5, n))


def test_joint_plan_picks_clusters_and_equalises_finish_times() -> None:
    n, k = 40, 4
    times = _times(n, 0)
    rng = np.random.default_rng(1)
    centres = rng.normal(size=(k, 30)) * 5
    signals = {i: centres[i % k] + 0.01 * rng.normal(size=30) for i in range(n)}
    plan = fedcg_plan.plan_joint(times, k, signals, {}, fedcg_plan.PlanSettings(),
                                 np.random.default_rng(0))
    assert len(plan.selected) == k
    assert sorted(p % k for p in plan.selected) == list(range(k))  # one per cluster
    assert sum(plan.gamma.values()) == pytest.approx(1.0)
    np.testing.assert_allclose(sorted(plan.gamma.values()), [0.25] * 4, atol=1e-12)
    # The LP leaves no straggler among clients that are not at a bound.
    inner = [p for p in plan.selected if 0.01 + 1e-9 < plan.theta[p] < 1 - 1e-9]
    for p in inner:
        assert plan.finish_s[p] == pytest.approx(plan.round_time, rel=1e-6)
    assert 1 <= plan.iterations <= 5


def test_joint_plan_never_worse_than_its_first_iteration() -> None:
    times = _times(30, 2)
    rng = np.random.default_rng(5)
    signals = {i: rng.normal(size=8) for i in range(30)}
    one = fedcg_plan.plan_joint(times, 5, signals, {}, fedcg_plan.PlanSettings(
        max_iterations=1), np.random.default_rng(0))
    many = fedcg_plan.plan_joint(times, 5, signals, {}, fedcg_plan.PlanSettings(
        max_iterations=5), np.random.default_rng(0))
    assert many.objective <= one.objective + 1e-12


def test_fresh_clients_are_picked_first() -> None:
    times = _times(10, 3)
    signals = {i: np.full(3, float(i)) for i in range(7)}  # 7, 8, 9 have none yet
    plan = fedcg_plan.plan_joint(times, 4, signals, {}, fedcg_plan.PlanSettings(),
                                 np.random.default_rng(0))
    assert {7, 8, 9} <= set(plan.selected) and len(plan.selected) == 4


def test_random_and_uniform_modes() -> None:
    times = _times(20, 4)
    s = fedcg_plan.PlanSettings(selection="random", ratios="uniform", uniform_ratio=0.2)
    sizes = {i: float(i + 1) for i in range(20)}
    a = fedcg_plan.plan_random(times, 5, sizes, s, np.random.default_rng([0, 3]))
    b = fedcg_plan.plan_random(times, 5, sizes, s, np.random.default_rng([0, 3]))
    assert a.selected == b.selected and len(a.selected) == 5
    assert all(t == 0.2 for t in a.theta.values())
    total = sum(sizes[p] for p in a.selected)
    for p in a.selected:
        assert a.gamma[p] == pytest.approx(sizes[p] / total)
    warm = fedcg_plan.plan_everyone(times, {}, fedcg_plan.PlanSettings())
    assert warm.selected == list(range(20))
    assert max(warm.finish_s.values()) == pytest.approx(warm.round_time)
