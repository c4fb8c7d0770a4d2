"""Client state that is committed only after the server has used the reply it belongs to.

A client of a stateful method (SCAFFOLD's ``c_i``, SCAFCOM's momentum, error-feedback residuals)
changes its state when it answers. If that answer is lost, rejected or arrives after the
timeout, the server never applied it, and a naive client would drift away from the server (for
SCAFFOLD the invariant ``c = mean_i c_i`` breaks). So the client *stages* its new state, tagged
with the round, and the next message it receives says which of its rounds the server last
aggregated (``commit-round``): a staged state of that round is committed, anything else is
discarded. A client whose training raises stages nothing.

Everything lives in ``context.state`` through :class:`~bouquet.clients.base.NodeState`
(``<namespace>.committed``, ``<namespace>.staged`` and the scalar ``<namespace>.pending``).
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
from flwr.app import Context

from bouquet.clients.base import NodeState

COMMITTED = "committed"
STAGED = "staged"
PENDING = "pending"


class StagedState:
    """Committed and staged arrays of one client.

    Parameters
    ----------
    context : Context
        The node's context.
    namespace : str
        Usually the method name.

    """

    def __init__(self, context: Context, namespace: str) -> None:
        self.node = NodeState(context, namespace)

    def peek(self, commit_round: int) -> dict[str, np.ndarray]:
        """Return the state the server believes this client has, changing nothing."""
        pending = self.node.values(PENDING)
        if pending and int(pending["round"]) == commit_round:
            return self.node.arrays(STAGED) or {}
        return self.node.arrays(COMMITTED) or {}

    def resolve(self, commit_round: int) -> dict[str, np.ndarray]:
        """Commit or discard the staged state; return the committed arrays (empty at first)."""
        current = self.peek(commit_round)
        if self.node.values(PENDING):
            self.node.set_arrays(COMMITTED, current)
            self.node.set_arrays(STAGED, {})
            self.node.set_values(PENDING, {})
        return current

    def stage(self, rnd: int, arrays: Mapping[str, np.ndarray]) -> None:
        """Stage the state that results from this round's reply."""
        self.node.set_arrays(STAGED, arrays)
        self.node.set_values(PENDING, {"round": int(rnd)})
