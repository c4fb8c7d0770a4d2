"""What a LoRA client shares with its server: adapter names, variants, FFA's A, the merge.

The node half of FedIT, FFA-LoRA and Fed-SB (:mod:`bouquet.clients.lora`) must name, shape and
merge the adapters exactly as the server does (:mod:`bouquet.strategies.lora`), and draw
FFA-LoRA's frozen A from the seed as the server does; both take those from this one module
(numpy only), so a client's message loads neither the server's strategy nor its round loop.
:mod:`bouquet.strategies.lora` re-exports every name (``from bouquet.strategies.lora import
merge`` keeps working).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence

import numpy as np


# --------------------------------------------------------------------------- naming / shapes
@dataclasses.dataclass(frozen=True)
class Adapted:
    """One adapted matrix: its module name and weight shape ``(m, n)`` = (out, in)."""

    module: str
    m: int
    n: int

    @property
    def weight(self) -> str:
        """Name of the pretrained weight in the model's state dict."""
        return f"{self.module}.weight"


def split_names(text: str) -> list[str]:
    """``"a, b,c"`` -> ``["a", "b", "c"]``."""
    return [t.strip() for t in text.split(",") if t.strip()]


def _matches(module: str, names: Sequence[str]) -> bool:
    return any(module == t or module.endswith("." + t) for t in names)


def adapted_modules(shapes: Mapping[str, tuple[int, ...]], targets: Sequence[str]) -> list[Adapted]:
    """The adapted matrices of a model, in state-dict order.

    Parameters
    ----------
    shapes : Mapping[str, tuple[int, ...]]
        Name -> shape of every tensor of the model's state dict.
    targets : sequence of str
        Module names (full, or the last components, PEFT's rule).

    """
    out = []
    for name, shape in shapes.items():
        if name.endswith(".weight") and len(shape) == 2:
            module = name[: -len(".weight")]
            if _matches(module, targets):
                out.append(Adapted(module, int(shape[0]), int(shape[1])))
    return out


def head_names(shapes: Mapping[str, tuple[int, ...]], heads: Sequence[str]) -> list[str]:
    """State-dict names of the head's tensors (trained in full and sent)."""
    return [k for k in shapes if any(k.startswith(h + ".") for h in heads)]


@dataclasses.dataclass(frozen=True)
class LoraVariant:
    """One LoRA-family method's adapter layout, declared once (looked up by :attr:`name`).

    Attributes
    ----------
    name : str
        ``fedit``, ``ffa`` or ``fedsb`` (the strategies' and clients' ``variant``).
    sends : tuple of str
        The factors that travel each round, in order (``lora_A`` ``r x n``, ``lora_B`` ``m x r``,
        ``lora_R`` ``r x r``); the others are frozen.
    framed : bool
        Fed-SB: B and A are a frozen frame the server sends once, the update is ``s B R A``.

    """

    name: str
    sends: tuple[str, ...]
    framed: bool = False

    @property
    def seeded_frozen_a(self) -> bool:
        """FFA-LoRA: A is frozen and drawn from the seed on every node (never sent)."""
        return not self.framed and "lora_A" not in self.sends

    @property
    def averages_factors_apart(self) -> bool:
        """FedIT: A and B both travel and are averaged apart, so the average is inexact."""
        return {"lora_A", "lora_B"} <= set(self.sends)


#: Every LoRA-family variant, by name.
VARIANTS: dict[str, LoraVariant] = {v.name: v for v in (
    LoraVariant("fedit", ("lora_A", "lora_B")),
    LoraVariant("ffa", ("lora_B",)),
    LoraVariant("fedsb", ("lora_R",), framed=True),
)}


def lora_variant(name: str) -> LoraVariant:
    """The declared variant ``name``; ``ValueError`` for an unknown one."""
    if name not in VARIANTS:
        raise ValueError(f"unknown LoRA variant {name!r}")
    return VARIANTS[name]


# --------------------------------------------------------------------------- initialisation
def lora_a_init(seed: int, index: int, rank: int, n: int) -> np.ndarray:
    """A random A (``r x n``), U(-1/sqrt(n), 1/sqrt(n)) as PEFT's Kaiming-uniform default.

    Derived from ``(seed, index)`` with numpy's PCG64, so every node and the server draw the same
    matrix (FFA-LoRA's shared frozen A; FedIT's initial A).
    """
    rng = np.random.default_rng([seed, 0x10A, index])
    bound = 1.0 / np.sqrt(n)
    return rng.uniform(-bound, bound, size=(rank, n)).astype(np.float32)



# --------------------------------------------------------------------------- merge
def merged_delta(variant: str, a: Adapted, arrays: Mapping[str, np.ndarray],
                 fixed: Mapping[str, np.ndarray], s: float) -> np.ndarray:
    """``s B A`` (FedIT, FFA) or ``s B R A`` (Fed-SB) of one matrix, in float64.

    ``arrays`` holds the travelling arrays, ``fixed`` the frozen ones (FFA's A, Fed-SB's B and A).
    """
    def get(name: str) -> np.ndarray:
        src = arrays if name in arrays else fixed
        return np.asarray(src[name], dtype=np.float64)

    mod = a.module
    if lora_variant(variant).framed:
        return s * get(f"{mod}.lora_B") @ get(f"{mod}.lora_R") @ get(f"{mod}.lora_A")
    return s * get(f"{mod}.lora_B") @ get(f"{mod}.lora_A")


def merge(variant: str, base: Mapping[str, np.ndarray], adapted: Sequence[Adapted],
          arrays: Mapping[str, np.ndarray], fixed: Mapping[str, np.ndarray], s: float
          ) -> dict[str, np.ndarray]:
    """Full model weights ``W0 + delta`` with the head from ``arrays`` (float32)."""
    out = dict(base)
    for a in adapted:
        w = np.asarray(base[a.weight], dtype=np.float64)
        out[a.weight] = (w + merged_delta(variant, a, arrays, fixed, s)).astype(base[a.weight].dtype)
    for k, arr in arrays.items():
        if k in base:
            out[k] = np.asarray(arr, dtype=base[k].dtype)
    return out
