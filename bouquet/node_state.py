"""Typed access to a node's ``context.state`` (a bottom layer: clients and privacy import it).

Per-client memory lives in ``context.state`` under ``"<namespace>.<name>"`` keys; Flower keeps it
for the life of the node process and bouquet's ClientApp also saves it on the node's disk.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
from flwr.app import Array, ArrayRecord, ConfigRecord, Context


class NodeState:
    """Typed access to ``context.state`` entries named ``"<method>.<name>"``.

    Parameters
    ----------
    context : Context
        The node's context (its ``state`` persists across rounds).
    namespace : str
        Usually the method name.

    """

    def __init__(self, context: Context, namespace: str) -> None:
        self.state = context.state
        self.namespace = namespace

    def _key(self, name: str) -> str:
        return f"{self.namespace}.{name}"

    def arrays(self, name: str) -> dict[str, np.ndarray] | None:
        """The stored arrays called ``name``, or None if never stored."""
        key = self._key(name)
        if key not in self.state.array_records:
            return None
        rec = self.state.array_records[key]
        return {k: rec[k].numpy() for k in rec.keys()}

    def set_arrays(self, name: str, arrays: Mapping[str, np.ndarray]) -> None:
        """Store arrays under ``name`` (replacing what was there)."""
        self.state[self._key(name)] = ArrayRecord(
            {k: Array(np.ascontiguousarray(a)) for k, a in arrays.items()}
        )

    def values(self, name: str) -> dict[str, Any]:
        """Stored scalars called ``name`` (empty dict if never stored)."""
        key = self._key(name)
        if key not in self.state.config_records:
            return {}
        return dict(self.state.config_records[key])

    def set_values(self, name: str, values: Mapping[str, Any]) -> None:
        """Store scalars (int, float, str, bool, bytes) under ``name``."""
        self.state[self._key(name)] = ConfigRecord(dict(values))
