"""The pristine ``w0`` of a module a user passes to the zeroth-order client functions.

:func:`bouquet.clients.fedkseed.train` keeps the rebuilt global model in the module the user
passed: after a message that module holds ``w0 - lr * sum_k applied[k] z(s_k)``, not ``w0``. A user
whose ``@app.train()`` passes the same module object on every message would otherwise have the
next rebuild "from ``w0``" start from weights that already moved (and a cache key, a digest of the
weights, that changes after every move). This module remembers, the first time a module object is
seen in the process, a CPU copy of its state and the digest of that state, for as long as the
module object lives (a weak reference: a module dropped by the user takes its copy with it).

Contract: the first time a module object is passed in a process it must hold ``w0``; from then
on it may hold anything (it is reset from the copy whenever the global model is rebuilt).
"""

from __future__ import annotations

import dataclasses
import hashlib
import weakref

import torch
from torch import nn


@dataclasses.dataclass(frozen=True)
class Origin:
    """What a module held when first seen.

    Attributes
    ----------
    fingerprint : str
        :func:`weights_fingerprint` of that state (the default identity of ``w0``).
    state : dict
        A detached CPU copy of its ``state_dict`` (parameters and buffers).

    """

    fingerprint: str
    state: dict[str, torch.Tensor]


#: Module object -> its state when first seen (dies with the module object).
_ORIGINS: weakref.WeakKeyDictionary[nn.Module, Origin] = weakref.WeakKeyDictionary()


def weights_fingerprint(model: nn.Module) -> str:
    """A digest of every tensor of ``model`` (names, shapes and values): the identity of ``w0``."""
    h = hashlib.sha256()
    for name, t in model.state_dict().items():
        h.update(name.encode())
        h.update(str(tuple(t.shape)).encode())
        h.update(t.detach().cpu().contiguous().numpy().tobytes())
    return h.hexdigest()


def origin_of(model: nn.Module) -> Origin:
    """The state ``model`` held the first time it was seen (recorded now if this is that time)."""
    origin = _ORIGINS.get(model)
    if origin is None:
        state = {name: t.detach().to("cpu", copy=True) for name, t in model.state_dict().items()}
        origin = Origin(weights_fingerprint(model), state)
        _ORIGINS[model] = origin
    return origin


def reset_to_origin(model: nn.Module) -> nn.Module:
    """Load into ``model`` the state it held when first seen (bitwise); return it.

    A module seen for the first time is recorded as it is (it holds ``w0`` by the contract).
    """
    if model not in _ORIGINS:
        origin_of(model)
        return model
    with torch.no_grad():
        model.load_state_dict(_ORIGINS[model].state)
    return model
