"""The zeroth-order engine on plain torch modules: regeneration, the two-point step, replay."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch import nn

from bouquet.clients import zeroth_order as zo


def mlp(seed: int = 0) -> nn.Module:
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(12, 16), nn.Tanh(), nn.Linear(16, 3))


def flat(model: nn.Module) -> torch.Tensor:
    return torch.cat([p.detach().reshape(-1) for p in model.parameters()]).clone()


def test_direction_depends_only_on_seed_and_layout() -> None:
    a, b = zo.Directions(list(mlp(0).parameters())), zo.Directions(list(mlp(1).parameters()))
    z1 = a.vector(123)
    assert z1.dtype == torch.float32 and z1.numel() == a.numel
    assert torch.equal(z1, a.vector(123))  # regenerated, never stored
    assert torch.equal(z1, b.vector(123))  # another model of the same layout
    assert not torch.equal(z1, a.vector(124))
    assert abs(float(z1.mean())) < 0.2 and 0.8 < float(z1.std()) < 1.2  # standard normal


def test_scratch_is_one_tensor_not_the_model() -> None:
    model = mlp()
    d = zo.Directions(zo.canonical_parameters(model))
    assert d.scratch.numel() == max(p.numel() for p in model.parameters()) < d.numel


def test_low_precision_weights_are_refused() -> None:
    with pytest.raises(TypeError, match="fp32"):
        zo.canonical_parameters(mlp().half())


def test_two_point_step_is_exact_on_a_quadratic_and_restores() -> None:
    w = nn.Parameter(torch.linspace(-1, 1, 50))
    d = zo.Directions([w])
    z = d.vector(7)
    before = w.detach().clone()

    def loss() -> float:
        return float(0.5 * (w.detach() ** 2).sum())

    step = zo.zo_step(d, 7, loss, eps=1e-2, lr=0.0)
    # central differences are exact for a quadratic: g = <w, z>
    assert step.grad == pytest.approx(float(before @ z), rel=1e-4)
    assert torch.allclose(w.detach(), before, atol=1e-6)  # lr=0: only restored
    step = zo.zo_step(d, 7, loss, eps=1e-2, lr=0.1)
    assert torch.allclose(w.detach(), before - 0.1 * step.grad * z, atol=1e-6)


def test_non_finite_loss_is_not_applied() -> None:
    w = nn.Parameter(torch.ones(5))
    d = zo.Directions([w])
    step = zo.zo_step(d, 1, lambda: float("nan"), eps=1e-3, lr=1.0)
    assert not step.applied
    assert torch.allclose(w.detach(), torch.ones(5), atol=1e-6)


def run_steps(model: nn.Module, seeds: np.ndarray, picks: np.ndarray, lr: float
              ) -> np.ndarray:
    """Sequential ZO steps on a regression loss; returns the per-seed sums of g."""
    torch.manual_seed(5)
    x, y = torch.randn(64, 12), torch.randn(64, 3)
    d = zo.Directions(zo.canonical_parameters(model))
    acc = np.zeros(len(seeds))

    def loss() -> float:
        with torch.inference_mode():
            return float(nn.functional.mse_loss(model(x), y))

    for k in picks:
        step = zo.zo_step(d, int(seeds[k]), loss, eps=1e-3, lr=lr)
        acc[k] += step.grad
    return acc


def test_replay_of_accumulated_seeds_equals_sequential_steps() -> None:
    seeds = np.random.default_rng(0).integers(1, 2**62, size=16)
    picks = np.random.default_rng(1).integers(0, 16, size=60)
    sequential, replayed = mlp(), mlp()
    w0 = flat(sequential)
    acc = run_steps(sequential, seeds, picks, lr=1e-2)
    zo.replay(zo.Directions(zo.canonical_parameters(replayed)), seeds, acc, lr=1e-2)
    moved = float((flat(sequential) - w0).abs().max())
    err = float((flat(sequential) - flat(replayed)).abs().max())
    assert moved > 1e-2  # the steps really moved the model
    assert err < 1e-5 and err < 1e-3 * moved, (err, moved)


@pytest.mark.parametrize("change", ["generator", "dtype"])
def test_replay_breaks_when_directions_are_drawn_differently(
    change: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    seeds = np.random.default_rng(0).integers(1, 2**62, size=16)
    picks = np.random.default_rng(1).integers(0, 16, size=60)
    sequential, replayed = mlp(), mlp()
    w0 = flat(sequential)
    acc = run_steps(sequential, seeds, picks, lr=1e-2)

    if change == "generator":  # another stream for the same seed (as a CUDA generator would be)
        monkeypatch.setattr(zo, "tensor_generator",
                            lambda seed, index: torch.Generator().manual_seed(int(seed) % 2**31
                                                                              + index))
    else:  # drawn in float64, then cast
        def draw64(self: zo.Directions, seed: int, index: int) -> torch.Tensor:
            p = self.params[index]
            z = torch.empty(p.shape, dtype=torch.float64)
            z.normal_(generator=zo.tensor_generator(seed, index))
            out = self.scratch[: p.numel()].view(p.shape)
            out.copy_(z)
            return out

        monkeypatch.setattr(zo.Directions, "draw", draw64)
    zo.replay(zo.Directions(zo.canonical_parameters(replayed)), seeds, acc, lr=1e-2)
    moved = float((flat(sequential) - w0).abs().max())
    err = float((flat(sequential) - flat(replayed)).abs().max())
    assert err > 0.3 * moved, (err, moved)
