"""Empirical audit of DP-SGD: a canary-based lower bound on epsilon, beside the reported one.

The released update of one private step (:func:`bouquet.privacy.dp.local_train`, the code every
private LoRA client runs: Opacus per-sample clipping, the noise, Poisson sampling) is computed
many times on a dataset with and without a *canary* row whose gradient points along a direction
no other row touches. A threshold test on that coordinate separates the two worlds; any
(epsilon, delta)-DP mechanism obeys ``TPR <= exp(epsilon) FPR + delta`` for every test, so
one-sided Clopper-Pearson bounds (``FPR`` from above, ``TPR`` from below) give an epsilon that
holds with 95 % confidence: ``log((TPR_lo - delta) / FPR_hi)`` (Jagielski et al., NeurIPS 2020;
Nasr et al., 2021). The threshold is chosen on the first half of the trials and evaluated on the
second, so the bound stays valid. It must never exceed the epsilon the accountant reports.
"""

from __future__ import annotations

import math

import numpy as np
import torch
from scipy import stats
from torch import nn

from bouquet.privacy.accountant import ClientAccountant
from bouquet.privacy.dp import local_train
from bouquet.privacy.dp_config import DPConfig

D, N, C, SIGMA, DELTA, TRIALS = 4, 8, 1.0, 1.0, 1e-5, 1500


def linear_losses(model: nn.Module, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """Per-example loss ``w . x``: the per-sample gradient of row i is x_i."""
    return model(x).reshape(-1)  # type: ignore[no-any-return]


def released(canary: bool, gen: torch.Generator) -> float:
    """The canary coordinate of one private step's summed, clipped, noised gradient."""
    x = torch.zeros(N, D)
    x[:, 1:] = torch.randn(N, D - 1, generator=gen) * 0.3  # the other rows never touch e_0
    if canary:
        x[0] = 0.0
        x[0, 0] = 10.0 * C  # clipped to C along e_0: the most a row can move the release
    model = nn.Linear(D, 1, bias=False)
    with torch.no_grad():
        model.weight.zero_()
    params = list(model.parameters())
    local_train(model, params, lambda m, a, b: linear_losses(m, a, b).mean(), x, torch.zeros(N),
                steps=1, batch_size=N, lr=1.0, optimizer="sgd", generator=gen,
                dp=DPConfig(enabled=True, max_grad_norm=C, sampling="poisson"),
                noise_multiplier=SIGMA, noise_generator=gen, example_loss_fn=linear_losses)
    return float(-model.weight[0, 0].detach()) * N  # SGD step = -(noised sum) / batch


def clopper_pearson(k: int, n: int, alpha: float = 0.05) -> tuple[float, float]:
    """One-sided (1 - alpha) bounds ``(lower, upper)`` of a binomial rate."""
    lo = 0.0 if k == 0 else float(stats.beta.ppf(alpha, k, n - k + 1))
    hi = 1.0 if k == n else float(stats.beta.ppf(1 - alpha, k + 1, n - k))
    return lo, hi


def epsilon_lower_bound(with_canary: np.ndarray, without: np.ndarray, delta: float) -> float:
    """Best threshold on the first halves, its 95 % epsilon lower bound on the second halves."""
    h = len(with_canary) // 2

    def bound(t: float, w: np.ndarray, wo: np.ndarray) -> float:
        tpr_lo, _ = clopper_pearson(int((w > t).sum()), len(w))
        _, fpr_hi = clopper_pearson(int((wo > t).sum()), len(wo))
        return math.log((tpr_lo - delta) / fpr_hi) if tpr_lo > delta else 0.0

    grid = np.quantile(without[:h], np.linspace(0.5, 0.999, 60))
    best = max(grid, key=lambda t: bound(float(t), with_canary[:h], without[:h]))
    return max(0.0, bound(float(best), with_canary[h:], without[h:]))


def test_canary_lower_bound_never_exceeds_reported_epsilon() -> None:
    gen = torch.Generator().manual_seed(2026)
    w = np.array([released(True, gen) for _ in range(TRIALS)])
    wo = np.array([released(False, gen) for _ in range(TRIALS)])
    reported = ClientAccountant.epsilon_of([(SIGMA, 1.0, 1)], DELTA)
    lower = epsilon_lower_bound(w, wo, DELTA)
    print(f"\nDP-SGD audit (one step, sigma {SIGMA}, C {C}, q 1, delta {DELTA:g}, "
          f"{TRIALS}+{TRIALS} trials): empirical epsilon lower bound {lower:.3f}, "
          f"reported epsilon {reported:.3f}")
    # the audit has power: the canary shifts the release by C, as the mechanism says
    assert abs((w.mean() - wo.mean()) - C) < 5 * SIGMA * C * math.sqrt(2 / TRIALS)
    assert lower > 0.5
    assert lower <= reported
