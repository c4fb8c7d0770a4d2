"""A FedKSeed replica on the node's disk: the rebuilt weights and the coefficients they hold.

In a deployment every message runs in a fresh ``flwr-clientapp`` process, so the in-process cache
of :mod:`bouquet.clients.fedkseed` is always empty and a node would replay every non-zero seed of
the accumulator from ``w0`` on every message. This file keeps what the process knew:

* ``key``: a digest of what ``w0`` and the directions depend on (the replica key plus the
  direction generator's constants); a file with another key is ignored (and later overwritten);
* ``applied``: float64 ``(K,)``, the model is ``w0 - lr * sum_k applied[k] z(s_k)``;
* ``params``: the trainable tensors in canonical order (everything else comes from ``w0``).

The file is written atomically (temporary file, fsync, rename) and read memory-mapped
(``torch.load(mmap=True)``), so a reader sees either the old or the new replica, never a torn one.
Loading restores exactly the bytes that were saved: a process that loads the replica and replays
the new seeds holds bitwise the weights of a process that kept the replica in memory.
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch

from bouquet.clients import zeroth_order as zo

#: Name of the replica file inside the node's folder.
FILE_NAME = "fedkseed-replica.pt"
#: Format of the file (part of the key).
FORMAT = 1


def key_digest(key: tuple[Any, ...]) -> str:
    """Digest of a replica key together with the definition of the directions."""
    parts = (FORMAT, key, zo.POOL_SEED, zo.POOL_BITS, zo.BLOCK, zo.IRWIN_HALL_TERMS)
    return hashlib.sha256(repr(parts).encode()).hexdigest()


def save(path: Path, key: tuple[Any, ...], applied: np.ndarray,
         params: Sequence[torch.Tensor]) -> None:
    """Write the replica to ``path`` atomically (parent folders are created)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    payload = {"key": key_digest(key),
               "applied": torch.from_numpy(np.asarray(applied, dtype=np.float64).copy()),
               "params": [p.detach().cpu() for p in params]}
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=path.name, suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            torch.save(payload, f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


@dataclasses.dataclass(frozen=True)
class Saved:
    """A replica read from disk (tensors memory-mapped)."""

    applied: np.ndarray
    params: list[torch.Tensor]

    def restore(self, params: Sequence[torch.Tensor]) -> bool:
        """Copy the saved tensors into ``params``; False (nothing copied) if shapes differ."""
        if len(self.params) != len(params) or any(
                s.shape != p.shape or s.dtype != p.dtype
                for s, p in zip(self.params, params, strict=True)):
            return False
        with torch.no_grad():
            for p, s in zip(params, self.params, strict=True):
                p.copy_(s)
        return True


def read(path: Path, key: tuple[Any, ...], num_seeds: int) -> Saved | None:
    """The replica saved at ``path`` for ``key``, or None if there is none usable.

    Unusable (a cache miss, never an error): no file, another key, a torn or foreign file, an
    ``applied`` of another length or with non-finite values.
    """
    if not path.is_file():
        return None
    try:
        payload = torch.load(path, mmap=True, weights_only=True, map_location="cpu")
    except Exception:  # a foreign or damaged file is only a cache miss
        return None
    if not isinstance(payload, dict) or payload.get("key") != key_digest(key):
        return None
    saved, applied = payload.get("params"), payload.get("applied")
    if (not isinstance(saved, list) or not all(isinstance(t, torch.Tensor) for t in saved)
            or not isinstance(applied, torch.Tensor) or applied.shape != (num_seeds,)
            or applied.dtype != torch.float64):
        return None
    values = applied.numpy().copy()
    if not np.isfinite(values).all():
        return None
    return Saved(values, saved)
