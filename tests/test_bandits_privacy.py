"""Tree mechanism, noise calibration and vector-sum protocol of the DP federated LinUCB family."""

from __future__ import annotations

import math

import numpy as np
import pytest

from bouquet.privacy import gaussian, shuffle, tree
from bouquet.strategies.linucb import DPLinUCBConfig, LinUCBConfig, make_protocol


def _random_batches(rng: np.random.Generator, silos: int, syncs: int, dim: int) -> np.ndarray:
    """Batch statistics (x x^T summed, x y summed) of random users, shape (silos, syncs, n)."""
    out = np.zeros((silos, syncs, tree.stats_size(dim)))
    for i in range(silos):
        for k in range(syncs):
            x = rng.standard_normal((5, dim))
            x /= np.linalg.norm(x, axis=1, keepdims=True)
            y = rng.uniform(-1, 1, 5)
            out[i, k] = tree.pack(x.T @ x, x.T @ y)
    return out


@pytest.mark.parametrize("syncs", [1, 2, 7, 16, 37])
def test_zero_noise_tree_gives_exact_prefix_sums(syncs: int) -> None:
    rng = np.random.default_rng(syncs)
    dim, silos = 3, 4
    batches = _random_batches(rng, silos, syncs, dim)
    levels = tree.num_levels(syncs)
    silo_trees = [tree.SiloTree.empty(levels, tree.stats_size(dim)) for _ in range(silos)]
    server = tree.ServerTree.empty(levels, tree.stats_size(dim))
    for k in range(1, syncs + 1):
        total = sum(silo_trees[i].release(k, batches[i, k - 1]) for i in range(silos))
        server.store(k, np.asarray(total))
        exact = batches[:, :k].sum(axis=(0, 1))
        np.testing.assert_allclose(server.prefix(k), exact, rtol=1e-12, atol=1e-10)


@pytest.mark.parametrize("syncs", [1, 3, 8, 25, 120, 400])
def test_each_batch_enters_at_most_kappa_nodes(syncs: int) -> None:
    counts = np.zeros(syncs + 1, dtype=int)
    for k in range(1, syncs + 1):
        start, end = tree.node_window(k)
        assert 0 <= start < end == k
        counts[start + 1 : end + 1] += 1
    bound = math.ceil(math.log2(syncs)) + 1
    assert counts[1:].max() <= tree.num_levels(syncs) <= bound
    # and every prefix is covered exactly once by its nodes
    for k in range(1, syncs + 1):
        cover = np.zeros(k + 1, dtype=int)
        for level, sync in tree.prefix_nodes(k):
            s, e = tree.node_window(sync)
            assert e - s == 1 << level
            cover[s + 1 : e + 1] += 1
        assert (cover[1:] == 1).all()


def test_silo_that_missed_a_sync_still_covers_its_data() -> None:
    dim, syncs = 2, 8
    batches = _random_batches(np.random.default_rng(3), 1, syncs, dim)[0]
    silo = tree.SiloTree.empty(tree.num_levels(syncs), tree.stats_size(dim))
    for k in range(1, syncs + 1):
        silo.release(k, np.zeros_like(batches[0]) if k == 2 else batches[k - 1])
    expected = batches.sum(axis=0) - batches[1]
    np.testing.assert_allclose(silo.psums[3], expected, atol=1e-12)


def test_gaussian_node_noise_has_the_calibrated_variance() -> None:
    rng = np.random.default_rng(0)
    dim, sigma, n = 4, 2.5, 20000
    draws = np.stack([tree.gaussian_node_noise(rng, dim, sigma) for _ in range(n)])
    grams = draws[:, : dim * dim].reshape(n, dim, dim)
    assert np.array_equal(grams, np.transpose(grams, (0, 2, 1)))  # symmetric
    diag_var = grams[:, np.arange(dim), np.arange(dim)].var(axis=0)
    off_var = grams[:, 0, 1:].var(axis=0)
    vec_var = draws[:, dim * dim :].var(axis=0)
    # sample variance of n normals has relative standard error sqrt(2/n) ~ 1%; allow 5 of them
    tol = 5 * math.sqrt(2 / n)
    np.testing.assert_allclose(diag_var / sigma**2, 1.0, atol=tol)
    np.testing.assert_allclose(off_var / (sigma**2 / 2), 1.0, atol=tol)
    np.testing.assert_allclose(vec_var / sigma**2, 1.0, atol=tol)
    np.testing.assert_allclose(draws.mean(axis=0), 0.0, atol=5 * sigma / math.sqrt(n))


def test_prefix_noise_variance_is_at_most_m_kappa_sigma_squared() -> None:
    rng = np.random.default_rng(1)
    dim, silos, syncs, sigma, trials = 2, 5, 7, 1.0, 2000
    levels = tree.num_levels(syncs)
    errors = []
    for _ in range(trials):
        server = tree.ServerTree.empty(levels, tree.stats_size(dim))
        for k in range(1, syncs + 1):
            server.store(k, np.sum([tree.gaussian_node_noise(rng, dim, sigma)
                                    for _ in range(silos)], axis=0))
        errors.append(server.prefix(syncs))
    var = np.var(np.stack(errors), axis=0)
    # M kappa sigma^2 up to the sampling error of a variance (relative s.e. sqrt(2/trials))
    assert var.max() <= silos * levels * sigma**2 * (1 + 4 * math.sqrt(2 / trials))
    # 7 = 111b: the prefix is three nodes of M silos each, so the bound is reached here
    vec_var = var[dim * dim :]
    np.testing.assert_allclose(vec_var, 3 * silos * sigma**2, rtol=4 * math.sqrt(2 / trials))


@pytest.mark.parametrize("variant,eps,delta", [("ldp", 1.0, 0.1), ("ldp", 0.2, 0.1),
                                               ("sdp-amp", 1.0, 1e-4)])
def test_shifted_gram_is_positive_definite(variant: str, eps: float, delta: float) -> None:
    dim, silos, syncs = 6, 10, 120
    proto = make_protocol(variant, LinUCBConfig(), DPLinUCBConfig(epsilon=eps, delta=delta),
                          dim, silos, syncs)
    rng = np.random.default_rng(2)
    smallest = np.inf
    for _ in range(200):
        noise = np.zeros((dim, dim))
        for _ in range(silos * proto.levels):  # worst case: every node of every silo
            noise += tree.unpack(tree.gaussian_node_noise(rng, dim, proto.sigma), dim)[0]
        smallest = min(smallest, np.linalg.eigvalsh(proto.lam * np.eye(dim) + noise).min())
    assert smallest > 0


def test_shift_formula() -> None:
    lam = tree.shift(2.0, 7, 6, 0.01, 10)
    assert lam == pytest.approx(math.sqrt(70) * 2.0 * (math.sqrt(7 + math.log(100)) + math.sqrt(6)))


@pytest.mark.parametrize("eps,delta", [(0.2, 0.1), (1.0, 1e-4), (5.0, 0.1), (3.0, 1e-6)])
def test_gaussian_calibration_round_trips(eps: float, delta: float) -> None:
    mu = gaussian.mu_for(eps, delta)
    assert gaussian.delta_at(eps, mu) <= delta
    assert gaussian.epsilon_at(mu, delta) == pytest.approx(eps, rel=1e-6)
    assert gaussian.epsilon_at(mu, delta) <= eps
    # the node noise of kappa releases spends exactly the target, and M copies divide it
    sens = tree.user_sensitivity(1.0, 2.0)
    sigma = tree.node_sigma(eps, delta, 7, sens)
    assert gaussian.epsilon_at(math.sqrt(7) * sens / sigma, delta) == pytest.approx(eps, rel=1e-6)
    assert tree.node_sigma(eps, delta, 7, sens, copies=4) == pytest.approx(sigma / 2)


def _scipy_delta_at(epsilon: float, mu: float) -> float:
    """The analytic Gaussian profile with scipy's normal CDF (the reference of the stdlib one)."""
    from scipy.stats import norm

    return max(0.0, float(norm.cdf(-epsilon / mu + mu / 2.0))
               - math.exp(epsilon + float(norm.logcdf(-epsilon / mu - mu / 2.0))))


@pytest.mark.parametrize("eps", [1e-3, 0.1, 1.0, 5.0, 20.0])
@pytest.mark.parametrize("delta", [1e-15, 1e-6, 1e-3, 0.1, 0.9])
def test_the_stdlib_gaussian_profile_matches_scipys(eps: float, delta: float) -> None:
    """``math.erfc`` in place of scipy: the same calibration, never above the target by scipy.

    The noise a silo calibrates (``mu_for``) and the epsilon the server reports
    (``epsilon_at``) agree with scipy-based roots to 1e-9 or better, and the calibrated ``mu``
    keeps scipy's ``delta`` at most the target.
    """
    from scipy.optimize import brentq

    mu = gaussian.mu_for(eps, delta)
    assert _scipy_delta_at(eps, mu) <= delta
    root = brentq(lambda m: _scipy_delta_at(eps, m) - delta, 1e-12, 4 * mu + 10, xtol=1e-15,
                  rtol=1e-15)
    assert mu == pytest.approx(root * (1 - 1e-9), rel=1e-10) and mu < root  # the margin
    for e in (0.0, eps / 2, eps, 2 * eps):
        assert gaussian.delta_at(e, mu) == pytest.approx(_scipy_delta_at(e, mu), rel=1e-9,
                                                         abs=1e-15)
    reported = gaussian.epsilon_at(mu, delta)
    scipy_eps = brentq(lambda e: _scipy_delta_at(e, mu) - delta, 0.0, 2 * eps + 1, xtol=1e-15,
                       rtol=1e-15)
    assert reported == pytest.approx(scipy_eps, rel=1e-9) and reported <= eps


def _exact_delta_at(epsilon: float, mu: float) -> float:
    """The analytic Gaussian profile at 60 digits (mpmath), no cancellation, no underflow."""
    mpmath = pytest.importorskip("mpmath")
    with mpmath.workdps(60):
        e, m = mpmath.mpf(epsilon), mpmath.mpf(mu)
        return float(mpmath.ncdf(-e / m + m / 2) - mpmath.exp(e) * mpmath.ncdf(-e / m - m / 2))


@pytest.mark.parametrize("mu,delta", [(2.0, 1e-300), (0.1, 1e-300), (1e-5, 1e-10),
                                      (1e-3, 1e-15), (1e-12, 1e-15), (1e-8, 1e-10)])
def test_reported_epsilon_is_never_below_the_exact_one(mu: float, delta: float) -> None:
    """``epsilon_at`` holds for the exact profile, also where its terms cancel or reach subnormals.

    (2, 1e-300): the second term's ``Phi`` was a subnormal float, too large by a factor, and the
    reported epsilon gave a true delta 5e8 times the target; small ``mu``: the two terms cancel.
    """
    assert _exact_delta_at(gaussian.epsilon_at(mu, delta), mu) <= delta


@pytest.mark.parametrize("eps,delta", [(705.0, 1e-15), (1e-8, 1e-10), (1e-8, 1e-30),
                                       (700.0, 1e-15), (1.0, 1e-5)])
def test_calibrated_mu_never_exceeds_the_exact_one(eps: float, delta: float) -> None:
    """``mu_for`` keeps the exact profile at most the target (705: a subnormal ``Phi`` had it
    0.25% above; 1e-8: cancellation)."""
    assert _exact_delta_at(eps, gaussian.mu_for(eps, delta)) <= delta


def test_gaussian_profile_refuses_what_is_not_a_number() -> None:
    """A ``nan`` noise reported epsilon 0 (every comparison false); an infinite target gave
    ``mu = 0``. Both are refused."""
    with pytest.raises(ValueError):
        gaussian.epsilon_at(math.nan, 1e-5)
    with pytest.raises(ValueError):
        gaussian.delta_at(1.0, math.nan)
    with pytest.raises(ValueError):
        gaussian.mu_for(math.nan, 1e-5)
    with pytest.raises(ValueError):
        gaussian.mu_for(math.inf, 1e-5)


def test_calibrating_the_tree_noise_imports_no_scipy() -> None:
    """A silo's message calibrates ``node_sigma``: it must not pay scipy's import (issue 17)."""
    import subprocess
    import sys

    code = ("import sys\nfrom bouquet.privacy import tree\n"
            "tree.node_sigma(1.0, 0.1, 4, 1.5, copies=2)\n"
            "print('scipy' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, timeout=120).stdout.strip()
    assert out == "False"


@pytest.mark.parametrize("eps,delta,levels", [(0.2, 0.1, 7), (1.0, 1e-4, 9), (5.0, 0.1, 3)])
def test_per_node_budget_composes_to_the_target(eps: float, delta: float, levels: int) -> None:
    e0, d0 = shuffle.per_node_budget(eps, delta, levels)
    assert d0 * levels <= delta / 2 + 1e-15
    basic = e0 * levels
    advanced = e0 * math.sqrt(2 * levels * math.log(2 / delta)) + levels * e0 * math.expm1(e0)
    assert min(basic, advanced) <= eps * (1 + 1e-9)
    assert e0 >= eps / levels


def test_vecsum_analyser_is_unbiased() -> None:
    rng = np.random.default_rng(5)
    dim, users = 3, 60
    x = rng.standard_normal((users, dim))
    x /= np.linalg.norm(x, axis=1, keepdims=True)
    y = rng.uniform(-1, 1, users)
    rows = shuffle.user_rows(x, y)
    truth = rows.sum(axis=0)
    params = shuffle.VecSumParams.for_window(0.5, 1e-3, dim, users)
    shuffler = shuffle.SumShuffler(shuffle.num_coordinates(dim), min_senders=2)
    trials = 3000

    def once() -> np.ndarray:
        shuffler.submit(0, params.encode(rows[:30], rng))
        shuffler.submit(1, params.encode(rows[30:], rng))
        released = shuffler.release()
        assert released is not None
        sums, count, senders = released
        assert sums.shape == (shuffle.num_coordinates(dim),) and count == users
        return params.analyse(sums, count)

    est = np.stack([once() for _ in range(trials)])
    se = np.sqrt(params.variance(users) / trials)
    assert np.all(np.abs(est.mean(axis=0) - truth) < 4.5 * se)
    assert np.all(est.var(axis=0) <= params.variance(users) * 1.15)
    gram, vec = shuffle.rows_to_stats(truth, dim)
    np.testing.assert_allclose(gram, x.T @ x, atol=1e-12)
    np.testing.assert_allclose(vec, x.T @ y, atol=1e-12)


def test_shuffler_releases_sums_only_and_nothing_below_its_floor() -> None:
    a = np.arange(12).reshape(4, 3)
    b = np.arange(12, 24).reshape(4, 3)
    shuffler = shuffle.SumShuffler(3, min_senders=2)
    shuffler.submit(5, a)
    shuffler.submit(2, b)
    with pytest.raises(ValueError, match="already"):
        shuffler.submit(2, b)
    released = shuffler.release()
    assert released is not None
    sums, rows, senders = released
    np.testing.assert_array_equal(sums, np.vstack([a, b]).sum(axis=0))
    assert (rows, senders) == (8, [2, 5])
    # nothing of the messages is left inside, and one sender alone is never released
    assert all(not (isinstance(v, np.ndarray) and v.ndim > 1) for v in vars(shuffler).values())
    shuffler.submit(1, a)
    assert shuffler.release() is None
    with pytest.raises(ValueError, match="sums"):
        shuffle.VecSumParams.for_window(1.0, 1e-3, 2, 8).analyse(a, 4)
