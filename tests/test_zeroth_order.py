"""The zeroth-order engine on plain torch modules: regeneration, the two-point step, replay."""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys

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


def test_no_buffer_the_size_of_the_model() -> None:
    model = nn.Sequential(nn.Linear(400, 300), nn.Linear(300, 10))
    d = zo.Directions(zo.canonical_parameters(model))
    assert d.numel > zo.BLOCK  # several blocks
    # the engine holds no tensor of its own; the one shared pool does not grow with the model
    assert not [k for k, v in vars(d).items() if isinstance(v, torch.Tensor)]
    d.add_(3, 1e-3)
    assert zo.gaussian_pool().numel() == zo.POOL_SIZE + zo.BLOCK


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


@pytest.mark.parametrize("change", ["hash", "pool"])
def test_replay_breaks_when_directions_are_drawn_differently(
    change: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    seeds = np.random.default_rng(0).integers(1, 2**62, size=16)
    picks = np.random.default_rng(1).integers(0, 16, size=60)
    sequential, replayed = mlp(), mlp()
    w0 = flat(sequential)
    acc = run_steps(sequential, seeds, picks, lr=1e-2)

    if change == "hash":  # other pool windows for the same seed (another counter hash)
        keys = zo.block_keys
        monkeypatch.setattr(zo, "block_keys", lambda seed, n: keys(seed + 1, n))
    else:  # another pool (e.g. drawn with torch's own normal generator)
        other = torch.randn(zo.POOL_SIZE + zo.BLOCK, generator=torch.Generator().manual_seed(0))
        monkeypatch.setattr(zo, "pool_on", lambda device: other)
    zo.replay(zo.Directions(zo.canonical_parameters(replayed)), seeds, acc, lr=1e-2)
    moved = float((flat(sequential) - w0).abs().max())
    err = float((flat(sequential) - flat(replayed)).abs().max())
    assert err > 0.3 * moved, (err, moved)


# ------------------------------------------------------------------ the pool and its windows
#: sha256 of the pool's bytes: the pool is part of every direction's definition (wire format).
POOL_SHA256 = "0c535a9ab63d322131c49e86f4ba6ce0481ffe3308e7f626437a9c2c82f92bc5"


def test_pool_is_pinned_and_standardised() -> None:
    pool = zo.gaussian_pool()
    assert pool.dtype == torch.float32 and pool.numel() == zo.POOL_SIZE + zo.BLOCK
    body = pool[: zo.POOL_SIZE].double()
    assert torch.equal(pool[zo.POOL_SIZE:], pool[: zo.BLOCK])  # cyclic windows
    assert abs(float(body.mean())) < 2e-3 and abs(float(body.var()) - 1.0) < 3e-3
    assert abs(float((body**4).mean()) - 2.9) < 0.02  # Irwin-Hall(12): kurtosis 3 - 6/60
    assert float(body.abs().max()) <= 6.0
    assert hashlib.sha256(pool.numpy().tobytes()).hexdigest() == POOL_SHA256


def test_direction_is_a_function_of_the_flat_index() -> None:
    """Any split of the same flat vector into tensors gets the same direction."""
    n = 2 * zo.BLOCK + 123
    whole = zo.Directions([torch.zeros(n)]).vector(9)
    parts = [torch.zeros(zo.BLOCK - 7), torch.zeros(50), torch.zeros(n - zo.BLOCK - 43)]
    zo.Directions(parts).add_(9, 1.0)
    assert torch.equal(torch.cat(parts), whole)
    # blocks are distinct windows with their own signs
    a, b = whole[: zo.BLOCK], whole[zo.BLOCK: 2 * zo.BLOCK]
    assert not torch.equal(a, b) and not torch.equal(a, -b)


def test_directions_are_isotropic_over_seeds() -> None:
    """``E[(z . v)^2] = |v|^2`` and ``E[z . z'] = 0``: the SPSA estimator stays unbiased."""
    n = 3 * zo.BLOCK
    d = zo.Directions([torch.zeros(n)])
    zs = torch.stack([d.vector(s) for s in range(300)]).double()
    gen = torch.Generator().manual_seed(1)
    for v in (torch.randn(n, generator=gen, dtype=torch.float64),
              torch.ones(n, dtype=torch.float64),  # a smooth direction (low frequency)
              torch.cos(torch.arange(n, dtype=torch.float64) * 0.5)):
        ratio = float(((zs @ v) ** 2).mean() / (v @ v))
        assert 0.8 < ratio < 1.2, ratio
    cross = (zs[:150] * zs[150:]).sum(1) / n  # ~ N(0, 1/n) each
    assert float(cross.abs().max()) < 5 / n**0.5


def test_direction_is_identical_in_another_process() -> None:
    code = ("import hashlib; from bouquet.clients import zeroth_order as zo; import torch; "
            "d = zo.Directions([torch.zeros(70_000)]); "
            "print(hashlib.sha256(d.vector(2**61 + 5).numpy().tobytes()).hexdigest())")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, env={**os.environ, "PYTHONHASHSEED": "123"})
    mine = zo.Directions([torch.zeros(70_000)]).vector(2**61 + 5)
    assert out.stdout.strip() == hashlib.sha256(mine.numpy().tobytes()).hexdigest()


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_direction_is_identical_on_the_gpu() -> None:
    cpu = torch.zeros(70_000)
    gpu = torch.zeros(70_000, device="cuda")
    zo.Directions([cpu]).add_(11, 1.0)
    zo.Directions([gpu]).add_(11, 1.0)
    assert torch.equal(cpu, gpu.cpu())


def wide(seed: int = 0) -> nn.Module:
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(180, 200), nn.Tanh(), nn.Linear(200, 3))  # > one block


def test_fused_steps_are_bitwise_the_step_by_step_loop() -> None:
    torch.manual_seed(2)
    batches = [(torch.randn(8, 180), torch.randn(8, 3)) for _ in range(7)]
    seeds = [5, 9, 5, 2**40, 17, 3, 9]
    a, b = wide(), wide()

    def loss_of(model: nn.Module, batch: tuple[torch.Tensor, torch.Tensor], t: int) -> float:
        if t == 3:
            return float("nan")  # one skipped step in the middle
        with torch.inference_mode():
            return float(nn.functional.mse_loss(model(batch[0]), batch[1]))

    da = zo.Directions(zo.canonical_parameters(a))
    one_by_one = [zo.zo_step(da, s, lambda m=a, x=x, t=t: loss_of(m, x, t), eps=1e-3, lr=1e-2)
                  for t, (s, x) in enumerate(zip(seeds, batches, strict=True))]
    counter = iter(i // 2 for i in range(2 * len(seeds)))  # two losses per step
    fused = zo.zo_steps(zo.Directions(zo.canonical_parameters(b)), seeds, iter(batches),
                        lambda x: loss_of(b, x, next(counter)), eps=1e-3, lr=1e-2)
    assert [r.applied for r in fused] == [t != 3 for t in range(len(seeds))]
    assert fused[:3] + fused[4:] == one_by_one[:3] + one_by_one[4:]  # nan != nan at step 3
    assert torch.equal(flat(a), flat(b))


def test_grouped_replay_is_bitwise_one_direction_after_another() -> None:
    a, b = wide(), wide()
    moves = [(int(s), float(c)) for s, c in
             zip(range(100, 100 + zo.GROUP + 9), np.linspace(-1e-2, 1e-2, zo.GROUP + 9),
                 strict=True)]
    da = zo.Directions(zo.canonical_parameters(a))
    for seed, scale in moves:
        da.add_(seed, scale)
    zo.Directions(zo.canonical_parameters(b)).add_many_(moves)
    assert torch.equal(flat(a), flat(b))
