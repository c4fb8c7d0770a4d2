"""The node directory: which online node holds which partition, and how much data it declared.

One job: find the nodes a round can use (discovery ``"grid"`` or ``"query"`` with a hello per new
node), keep their partitions and declared sizes, their hello errors, and the weight bounds that
follow from the declared sizes.
"""

from __future__ import annotations

from typing import Any


class NotEnoughNodes(RuntimeError):
    """Fewer nodes than ``min-train-nodes`` came online before ``sample-deadline``.

    ``failures`` lists ``{"node_id", "reason"}`` of the online nodes whose queries failed (the
    message quotes the most common reason).
    """

    def __init__(self, message: str, failures: list[dict[str, Any]] | None = None) -> None:
        super().__init__(message)
        self.failures = list(failures or [])
