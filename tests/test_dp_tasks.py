"""DP-SGD's clipping bound needs per-sample gradients that depend on their own example alone.

For every task a private method can run (every task with ``lora_targets``), the per-sample
gradient that Opacus computes on the private path (``mean_of_examples(task.example_losses)``)
of one example is the same next to short and next to long batch companions. A control shows
that the check can fail: ``gsm-smollm``'s batch token mean (its non-private loss) couples them.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import cached_property
from typing import Any

import numpy as np
import pytest
import torch
from test_prompted_task import TinyPrompted
from torch import nn

from bouquet.apps.registry import tasks
from bouquet.clients.lora import build_adapted
from bouquet.privacy.dp import example_losses_of, mean_of_examples
from bouquet.strategies import lora as L
from bouquet.tasks.gsm import GsmSmolLM
from bouquet.tasks.text import RtMiniLM, TinyBertCls

Batch = tuple[torch.Tensor, torch.Tensor]


class TinyGsm(GsmSmolLM):
    """``gsm-smollm``'s loss code on a tiny random causal LM (no SmolLM, no tokenizer)."""

    pad_id = 0  # type: ignore[assignment]

    @cached_property
    def pretrained(self) -> nn.Module:  # type: ignore[override]
        """A 2-layer Llama, hidden 32, vocabulary 64, fixed seed."""
        from transformers import LlamaConfig, LlamaForCausalLM

        cfg = LlamaConfig(vocab_size=64, hidden_size=32, intermediate_size=64,
                          num_hidden_layers=2, num_attention_heads=2, num_key_value_heads=2,
                          max_position_embeddings=256)
        torch.manual_seed(0)
        return LlamaForCausalLM(cfg).eval()


def lm_row(prompt: int, answer: int, width: int, rng: np.random.Generator) -> Batch:
    """A right-padded sequence whose label covers only the ``answer`` tokens."""
    ids = np.zeros(width, np.int64)
    ids[: prompt + answer] = rng.integers(1, 64, prompt + answer)
    labels = np.full(width, -100, np.int64)
    labels[prompt : prompt + answer] = ids[prompt : prompt + answer]
    return torch.from_numpy(ids), torch.from_numpy(labels)


def text_row(length: int, label: int, width: int, pad: int, rng: np.random.Generator) -> Batch:
    """A right-padded token-id row of ``length`` tokens (CLS first) with a class label."""
    ids = np.full(width, pad, np.int64)
    ids[0] = 101
    ids[1:length] = rng.integers(1000, 20000, length - 1)
    return torch.from_numpy(ids), torch.tensor(label)


def prompt_rows(width: int = 16) -> tuple[Batch, list[Batch], list[Batch]]:
    """rt-smollm's right-padded prompts (tiny vocabulary, pad 0) with class labels."""
    rng = np.random.default_rng(0)

    def row(length: int, label: int) -> Batch:
        ids = np.zeros(width, np.int64)
        ids[:length] = rng.integers(1, 64, length)
        return torch.from_numpy(ids), torch.tensor(label)

    return row(9, 1), [row(3, 0), row(4, 1)], [row(width, 0), row(width - 1, 1)]


def lm_rows() -> tuple[Batch, list[Batch], list[Batch]]:
    rng = np.random.default_rng(0)
    target = lm_row(10, 30, 200, rng)
    short = [lm_row(4, 4, 200, rng), lm_row(6, 2, 200, rng)]
    long = [lm_row(10, 190, 200, rng), lm_row(20, 170, 200, rng)]
    return target, short, long


def text_rows(width: int, pad: int) -> tuple[Batch, list[Batch], list[Batch]]:
    rng = np.random.default_rng(0)
    target = text_row(12, 1, width, pad, rng)
    short = [text_row(3, 0, width, pad, rng), text_row(4, 1, width, pad, rng)]
    long = [text_row(width, 0, width, pad, rng), text_row(width - 1, 0, width, pad, rng)]
    return target, short, long


#: Every task a private method can run, with a maker of (task, target row, short and long
#: companions). A task with ``lora_targets`` missing here fails the coverage test below.
CASES: dict[str, Callable[[], tuple[Any, Batch, list[Batch], list[Batch]]]] = {
    "tiny-bert-cls": lambda: (lambda t: (t, *text_rows(t.max_length, t.pad_id)))(TinyBertCls()),
    "rt-minilm": lambda: (lambda t: (t, *text_rows(t.max_length, t.pad_id)))(RtMiniLM()),
    "gsm-smollm": lambda: (TinyGsm(), *lm_rows()),
    "rt-smollm": lambda: (TinyPrompted(), *prompt_rows()),
}


def adapted_model(task: Any) -> tuple[nn.Module, list[torch.Tensor]]:
    """The task's model with FedIT adapters (B non-zero, so A gets gradients too), eval mode."""
    model = task.build_model()
    shapes = {k: tuple(v.shape) for k, v in model.state_dict().items()}
    targets, heads = list(task.lora_targets), list(task.head_modules)
    adapted = L.adapted_modules(shapes, targets)
    arrays = L.initial_adapters("fedit", adapted, 2, 0)
    rng = np.random.default_rng(1)
    arrays = {k: (rng.standard_normal(a.shape).astype(np.float32) * 0.1 if "lora_B" in k else a)
              for k, a in arrays.items()}
    arrays.update({k: model.state_dict()[k].numpy() for k in L.head_names(shapes, heads)})
    cfg = L.LoraConfig(rank=2, target_modules=",".join(targets), head_modules=",".join(heads))
    am = build_adapted(task, "fedit", cfg, arrays, {}, model=model)
    # Dropout off, so the comparison is exact up to float rounding; Opacus records activations
    # only in training mode, which changes nothing in the layers that hold trainable tensors.
    am.model.eval()
    for mod in am.model.modules():
        if any(p.requires_grad for p in mod.parameters(recurse=False)):
            mod.train()
    return am.model, list(am.params.values())


def per_sample_gradient(model: nn.Module, params: list[torch.Tensor],
                        loss: Callable[..., torch.Tensor], rows: list[Batch]) -> torch.Tensor:
    """Opacus' per-sample gradient of ``rows[0]`` within the batch ``rows`` (flattened)."""
    from opacus import GradSampleModule

    x = torch.stack([r[0] for r in rows])
    y = torch.stack([r[1] for r in rows])
    net = GradSampleModule(model, batch_first=True, loss_reduction="mean")
    try:
        for p in params:
            p.grad_sample = None  # type: ignore[attr-defined]
        loss(net, x, y).backward()
        return torch.cat([p.grad_sample[0].reshape(-1).detach().clone()  # type: ignore[attr-defined]
                          for p in params])
    finally:
        net._close()  # type: ignore[operator]
        for p in params:
            p.grad = None


def companion_gap(task: Any, target: Batch, short: list[Batch], long: list[Batch],
                  loss: Callable[..., torch.Tensor]) -> tuple[float, float]:
    """Relative gap between the target's per-sample gradients next to short and long rows."""
    model, params = adapted_model(task)
    g_short = per_sample_gradient(model, params, loss, [target, *short])
    g_long = per_sample_gradient(model, params, loss, [target, *long])
    norm = float(g_short.norm())
    return float((g_short - g_long).norm()) / max(norm, 1e-30), norm


def test_every_task_a_private_method_runs_is_covered() -> None:
    lora_tasks = set()
    for name, spec in tasks().items():
        if spec.kind == "bandit":
            continue
        cls = spec.factory
        module, _, attr = cls.partition(":")
        obj = getattr(__import__(module, fromlist=[attr]), attr)
        if getattr(obj, "lora_targets", ()):
            lora_tasks.add(name)
            assert callable(getattr(obj, "example_losses", None)), name
    assert lora_tasks <= set(CASES), f"add a case for {sorted(lora_tasks - set(CASES))}"


@pytest.mark.parametrize("name", sorted(CASES))
def test_per_sample_gradient_independent_of_batch_companions(name: str) -> None:
    task, target, short, long = CASES[name]()
    gap, norm = companion_gap(task, target, short, long, mean_of_examples(example_losses_of(task)))
    assert norm > 1e-6, "the target got no gradient"
    assert gap < 1e-4, f"{name}: per-sample gradient changed by {gap:.3g} with its companions"


def test_control_a_batch_token_mean_couples_examples() -> None:
    """The check above can fail: gsm's non-private token mean gives a companion-dependent gradient."""
    task, target, short, long = CASES["gsm-smollm"]()
    gap, _ = companion_gap(task, target, short, long, task.loss)
    assert gap > 0.5


def test_example_losses_must_be_per_example() -> None:
    task = TinyBertCls()
    with pytest.raises(ValueError, match="one loss per example"):
        mean_of_examples(task.loss)(task.build_model(), *[torch.zeros((2, 4), dtype=torch.long),
                                                          torch.zeros(2, dtype=torch.long)])


def test_gsm_non_private_loss_is_still_the_batch_token_mean() -> None:
    task, target, short, _ = CASES["gsm-smollm"]()
    model = task.build_model()
    x = torch.stack([r[0] for r in [target, *short]])
    y = torch.stack([r[1] for r in [target, *short]])
    logits = model(input_ids=x, attention_mask=(x != 0).long()).logits[:, :-1]
    want = nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), y[:, 1:].reshape(-1),
                                       ignore_index=-100)
    assert float(task.loss(model, x, y)) == pytest.approx(float(want), rel=1e-5)
    per = task.example_losses(model, x, y)
    assert per.shape == (3,) and not torch.isclose(per.mean(), want)
