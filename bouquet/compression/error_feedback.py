"""Error feedback as a wrapper around any compressor (plain and decayed).

Plain error feedback (Seide et al. 2014; Stich et al., NeurIPS 2018; Karimireddy et al.,
ICML 2019): the node keeps a residual ``e`` (zero at first), compresses ``p = x + e``, sends
``C(p)`` and keeps ``e <- p - C(p)``. Invariant: the sum of what was sent plus the current residual
equals the sum of the inputs.

Decayed error feedback (SparseLoCo, Sarfi et al. 2025): ``p = decay * e + x``; with ``decay < 1``
old residual mass fades instead of being sent eventually.

The wrapper is functional (Optax style): the residual is an explicit state that the caller keeps,
typically in the node's ``context.state`` through :class:`bouquet.clients.base.NodeState`::

    ef = ErrorFeedback(make_compressor("topk", ratio=0.01))
    residual = (state.arrays("ef") or {}).get("e", ef.init(x.shape))
    payload, sent, residual = ef.step(x, residual, rng)
    state.set_arrays("ef", {"e": residual})   # only after the reply is built

The server decodes with ``ef.inner.decompress(payload)`` (the wire format is the inner one).
"""

from __future__ import annotations

import numpy as np

from bouquet.compression.base import Compressor, Payload


class ErrorFeedback:
    """Stateful use of a stateless compressor, with the state held by the caller.

    Parameters
    ----------
    inner : Compressor
        The compressor applied to ``decay * residual + x``.
    decay : float
        ``1.0`` for plain error feedback; below 1 for SparseLoCo's decayed buffer.

    """

    def __init__(self, inner: Compressor, decay: float = 1.0) -> None:
        if not 0.0 <= decay <= 1.0:
            raise ValueError(f"error feedback decay must be in [0, 1], got {decay}")
        self.inner = inner
        self.decay = float(decay)

    def init(self, shape: tuple[int, ...]) -> np.ndarray:
        """Return a zero residual."""
        return np.zeros(shape, dtype=np.float32)

    def step(
        self, x: np.ndarray, residual: np.ndarray, rng: np.random.Generator
    ) -> tuple[Payload, np.ndarray, np.ndarray]:
        """Compress ``decay * residual + x``.

        Returns
        -------
        payload : Payload
            What to send (the inner compressor's format).
        sent : ndarray
            ``decompress(payload)``, what the receiver will see (float32, shape of ``x``).
        residual : ndarray
            The new residual ``p - sent`` (a new array; the input is not modified).

        """
        x = np.asarray(x, dtype=np.float32)
        residual = np.asarray(residual, dtype=np.float32)
        if residual.shape != x.shape:
            raise ValueError(f"residual shape {residual.shape} != input shape {x.shape}")
        p = (np.float32(self.decay) * residual + x).astype(np.float32)
        payload = self.inner.compress(p, rng)
        sent = self.inner.decompress(payload)
        return payload, sent, (p - sent).astype(np.float32)

    def __repr__(self) -> str:
        return f"ErrorFeedback({self.inner!r}, decay={self.decay})"
