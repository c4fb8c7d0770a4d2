"""Node side of FedAvg with a compressed uplink and of Fed-EF (error feedback).

See :mod:`bouquet.strategies.compressed_fedavg`. The client sends ``C(x - y)``; Fed-EF adds its
residual first and keeps the new one (staged until the server confirms the reply, see
:mod:`bouquet.clients.staged_state`).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from bouquet.clients.scaffold import LocalRound, VectorClient
from bouquet.compression import Compressor, ErrorFeedback


class FedAvgCompressedClient(VectorClient):
    """Send the compressed pseudo-gradient ``C(x - y)``; no client state."""

    prefix = "fedavg-compressed"

    def uplink(self, run: LocalRound, state: dict[str, np.ndarray], c: np.ndarray | None,
               section: Any, comp: Compressor, rng: np.random.Generator
               ) -> tuple[dict[str, dict[str, np.ndarray]], dict[str, np.ndarray]]:
        """Compress the model change."""
        return {"payload": comp.compress((run.x - run.y).astype(np.float32), rng)}, {}


class FedEFClient(VectorClient):
    """Fed-EF: ``p = x - y + decay e``, send ``C(p)``, keep ``e <- p - C(p)``."""

    prefix = "fed-ef"

    def uplink(self, run: LocalRound, state: dict[str, np.ndarray], c: np.ndarray | None,
               section: Any, comp: Compressor, rng: np.random.Generator
               ) -> tuple[dict[str, dict[str, np.ndarray]], dict[str, np.ndarray]]:
        """Error-feedback step with the residual from the node's state."""
        ef = ErrorFeedback(comp, decay=section.ef_decay)
        update = (run.x - run.y).astype(np.float32)
        residual = state.get("e", ef.init(update.shape))
        payload, _, residual = ef.step(update, residual, rng)
        return {"payload": payload}, {"e": residual}
