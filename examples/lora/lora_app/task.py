"""The app's own model and data: a tiny random Llama classifier on random tokens (offline)."""

from __future__ import annotations

import torch
from torch import nn
from transformers import LlamaConfig, LlamaForSequenceClassification


def pretrained_model() -> nn.Module:
    """Stands in for from_pretrained(...): the same weights on every node and the server."""
    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=4, num_labels=2,
                      pad_token_id=0, max_position_embeddings=64)
    return LlamaForSequenceClassification(cfg)


def load_partition(partition_id: int, n: int = 64) -> tuple[torch.Tensor, torch.Tensor]:
    """Random token rows whose label is whether token 1 occurs (a learnable rule)."""
    g = torch.Generator().manual_seed(100 + partition_id)
    x = torch.randint(1, 64, (n, 12), generator=g)
    return x, (x == 1).any(dim=1).long()


def loss_fn(model: nn.Module, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """Mean cross-entropy of a batch."""
    return nn.functional.cross_entropy(model(input_ids=x).logits, y)
