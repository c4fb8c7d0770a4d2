"""DP-SGD on ``rt-smollm``'s shape of model: a Llama decoder with PEFT LoRA, read through a verbalizer.

The private step must clip every trainable tensor's whole gradient. On ``rt-smollm`` the class
logits are read from the tied output embedding (``model.lm_head.weight[word_ids]``), outside any
module's forward, so Opacus would see only part of that tensor's gradient if it were trained:
the checks below show that the LoRA arms train only adapters whose per-sample gradients account
for their whole gradient, that the verbalizer stays frozen and unchanged, and that a head that
would be partly dropped (or a stray trainable tensor) is refused with a clear error.
"""

from __future__ import annotations

import re
from typing import Any

import numpy as np
import pytest
import torch
from test_prompted_task import TinyPrompted

from bouquet.clients.lora import AdaptedModel, build_adapted, ffa_fixed
from bouquet.privacy.dp import check_per_sample_coverage, local_train, mean_of_examples
from bouquet.privacy.dp_config import DPConfig
from bouquet.strategies import lora as L
from bouquet.tasks.torch_utils import generator

EMBED = "model.embed_tokens.weight"


def adapted(task: Any, variant: str, heads: tuple[str, ...] = ()) -> AdaptedModel:
    """The tiny prompted LM with ``variant``'s adapters (B non-zero so A has gradients too)."""
    model = task.build_model()
    shapes = {k: tuple(v.shape) for k, v in model.state_dict().items()}
    mods = L.adapted_modules(shapes, list(task.lora_targets))
    rng = np.random.default_rng(1)
    fixed: dict[str, np.ndarray] = {}
    if variant == "fedsb":
        fixed = L.random_frame(mods, 2, 0)
        arrays = {f"{a.module}.lora_R": rng.standard_normal((2, 2)).astype(np.float32) * 0.1
                  for a in mods}
    else:
        arrays = {k: (rng.standard_normal(a.shape).astype(np.float32) * 0.1 if "lora_B" in k
                      else a) for k, a in L.initial_adapters(variant, mods, 2, 0).items()}
        fixed = ffa_fixed(mods, 2, 0) if variant == "ffa" else {}
    arrays.update({k: model.state_dict()[k].numpy() for k in L.head_names(shapes, list(heads))})
    cfg = L.LoraConfig(rank=2, target_modules=",".join(task.lora_targets),
                       head_modules=",".join(heads))
    return build_adapted(task, variant, cfg, arrays, fixed, model=model)


def private_steps(task: Any, am: AdaptedModel, steps: int = 2) -> None:
    """``steps`` DP-SGD steps (sigma 1, C 1, Poisson batch 8) of the client's local loop."""
    d = task.data
    local_train(am.model, list(am.params.values()), task.loss, torch.from_numpy(d.x_train),
                torch.from_numpy(d.y_train), steps=steps, batch_size=8, lr=1e-2,
                optimizer="adamw", generator=generator(0), dp=DPConfig(enabled=True),
                noise_multiplier=1.0, noise_generator=generator(1),
                example_loss_fn=task.example_losses)


@pytest.mark.parametrize("variant", ["fedit", "ffa", "fedsb"])
def test_private_lora_trains_only_adapters_that_opacus_sees_whole(variant: str) -> None:
    task = TinyPrompted()
    am = adapted(task, variant)
    trainable = {n for n, p in am.model.named_parameters() if p.requires_grad}
    assert trainable and all("lora_" in n for n in trainable), trainable
    assert len(trainable) == len(am.params)
    # every trainable tensor: the per-sample gradients add up to the whole gradient
    from opacus import GradSampleModule

    am.model.train()
    net = GradSampleModule(am.model, batch_first=True, loss_reduction="mean")
    try:
        x, y = torch.from_numpy(task.data.x_train[:6]), torch.from_numpy(task.data.y_train[:6])
        mean_of_examples(task.example_losses)(net, x, y).backward()
        check_per_sample_coverage(am.model, list(am.params.values()))
        assert all(float(p.grad.norm()) > 0 for p in am.params.values())  # type: ignore[union-attr]
    finally:
        net._close()  # type: ignore[operator]
        for p in am.params.values():
            p.grad, p.grad_sample = None, None  # type: ignore[attr-defined]
    # the verbalizer (the tied embedding) is frozen and unchanged by private steps
    embed = dict(am.model.named_parameters())[EMBED]
    before = embed.detach().clone()
    start = {k: p.detach().clone() for k, p in am.params.items()}
    private_steps(task, am)
    assert not embed.requires_grad and torch.equal(embed, before)
    assert am.model.lm_head.weight is embed  # tied: the verbalizer rows are these
    assert all(not torch.equal(p, start[k]) for k, p in am.params.items())
    assert set(am.arrays()) == set(am.params) and all("lora_" in k for k in am.arrays())


def test_a_head_opacus_sees_only_in_part_is_refused_under_dp() -> None:
    """The tied embedding as a head: its verbalizer part would be silently dropped."""
    task = TinyPrompted()
    am = adapted(task, "fedit", heads=("model.embed_tokens",))
    assert EMBED in am.params
    start = {k: p.detach().clone() for k, p in am.params.items()}
    with pytest.raises(ValueError, match=r"per-sample gradients miss part .*embed_tokens") as err:
        private_steps(task, am, steps=1)
    # the message (it may reach the server) names the tensor and carries no number from the rows
    assert not re.search(r"\d\.\d", str(err.value)), str(err.value)
    # refused before the step: nothing moved
    assert all(torch.equal(p, start[k]) for k, p in am.params.items())
    # the same head trains without DP (autograd sees the whole gradient)
    d = task.data
    local_train(am.model, list(am.params.values()), task.loss, torch.from_numpy(d.x_train),
                torch.from_numpy(d.y_train), steps=1, batch_size=8, lr=1e-2, optimizer="adamw",
                generator=generator(0))
    assert not torch.equal(am.params[EMBED], start[EMBED])


def test_rows_whose_gradients_cancel_are_not_refused() -> None:
    """The check is structural: per-sample gradients that cancel in the mean pass it."""
    w = torch.nn.Parameter(torch.zeros(3))
    model = torch.nn.Module()
    model.w = w
    w.grad_sample = torch.tensor([[1e3, -2e3, 5e2], [-1e3, 2e3, -5e2]]) + 1e-6  # type: ignore[attr-defined]
    w.grad = w.grad_sample.mean(0) + 1e-4  # type: ignore[attr-defined]  # float rounding at 1e3 scale
    check_per_sample_coverage(model, [w])
    w.grad = w.grad_sample.mean(0) + 10.0  # type: ignore[attr-defined]  # a real missing part
    with pytest.raises(ValueError, match="miss part"):
        check_per_sample_coverage(model, [w])


def test_a_head_named_by_its_tied_alias_is_refused_clearly() -> None:
    task = TinyPrompted()
    with pytest.raises(ValueError, match=r"'lm_head.weight' is not a parameter .*tied to "
                                         r"'model.embed_tokens.weight'"):
        adapted(task, "fedit", heads=("lm_head",))


def test_a_trainable_tensor_outside_the_private_optimiser_is_refused() -> None:
    task = TinyPrompted()
    am = adapted(task, "ffa")
    dict(am.model.named_parameters())["model.norm.weight"].requires_grad_(True)
    with pytest.raises(ValueError, match=r"model.norm.weight.*escape per-sample clipping"):
        private_steps(task, am, steps=1)
