"""Errors that nodes answer to the server's queries, kept until a round records them.

A node that cannot serve the run (its task's packages are missing, its node config is wrong)
answers every message with an error reply. Discovery (the ``hello`` query) and the initial-model
query are not part of a round, so their errors are held here: each one is logged when it first
appears (or changes), reported in the next round's ``failures``, and quoted by
:class:`~bouquet.strategies.base.NotEnoughNodes` when too few nodes are usable
("2 of 2 nodes: ImportError: rt-minilm needs ...").
"""

from __future__ import annotations

import collections
import dataclasses
import logging
import re
from typing import Any

log = logging.getLogger("bouquet")

#: Flower's text for an exception raised in a ClientApp: ``<class 'ImportError'>:<'message'>``.
_FLOWER_REASON = re.compile(r"^<class '([^']+)'>:<'(.*)'>$", re.DOTALL)
#: How Flower's Ray backend wraps the ClientApp's message (``ClientAppException``).
_RAY_MESSAGE = "occurred. Message: "


def error_text(reason: str, limit: int = 400) -> str:
    """The readable part of an error reply's reason (``"ImportError: message"``).

    Flower wraps a ClientApp's exception as ``<class 'X'>:<'message'>``; in simulation ``X`` is
    Ray's ``RayTaskError(ClientAppException)`` and the message a traceback whose end holds the
    original text. Both come out as the exception's name (when known) and its message, cut to
    ``limit`` characters.
    """
    from bouquet.strategies.transport import short_reason  # the one ANSI/traceback trimmer

    text = reason.strip()
    m = _FLOWER_REASON.match(text)
    if not m:
        return short_reason(text, limit)
    cls, body = m.group(1).rsplit(".", 1)[-1], m.group(2)
    if _RAY_MESSAGE in body:  # Ray: the original message follows the last wrapper line
        return short_reason(body.rsplit(_RAY_MESSAGE, 1)[1], limit)
    return short_reason(f"{cls}: {body}", limit)


@dataclasses.dataclass
class NodeErrors:
    """The latest error each node answered to a query, by node id.

    Attributes
    ----------
    latest : dict[int, tuple[str, str]]
        Node id -> ``(query, readable error)`` of its last failed query (cleared when it answers).
    unreported : dict[int, tuple[str, str]]
        The subset not yet written into a round's ``failures``.

    """

    latest: dict[int, tuple[str, str]] = dataclasses.field(default_factory=dict)
    unreported: dict[int, tuple[str, str]] = dataclasses.field(default_factory=dict)

    def note(self, node_id: int, query: str, reason: str | None) -> None:
        """Record that ``node_id`` failed ``query`` with ``reason`` (logged when it is new)."""
        entry = (query, error_text(reason or "error reply without a reason"))
        if self.latest.get(node_id) != entry:
            log.warning("node %d failed the %s: %s", node_id, *entry)
        self.latest[node_id] = entry
        self.unreported[node_id] = entry

    def clear(self, node_id: int) -> None:
        """The node answered: forget its error."""
        self.latest.pop(node_id, None)
        self.unreported.pop(node_id, None)

    def take_unreported(self) -> dict[int, str]:
        """``{node_id: "query: error"}`` not yet recorded in a round, removed from :attr:`unreported`."""
        out, self.unreported = self.unreported, {}
        return {n: f"{q}: {e}" for n, (q, e) in out.items()}

    def headline(self, among: list[int]) -> str:
        """``"2 of 3 node(s) failed the hello query: <the most common error>"`` ("" if none failed)."""
        errors = [self.latest[n] for n in among if n in self.latest]
        if not errors:
            return ""
        (query, text), count = collections.Counter(errors).most_common(1)[0]
        return f"{count} of {len(among)} node(s) failed the {query}: {text}"

    def failures(self, among: list[int]) -> list[dict[str, Any]]:
        """``[{"node_id", "reason"}]`` of the nodes ``among`` that failed (for ``summary.json``)."""
        return [{"node_id": n, "reason": "{}: {}".format(*self.latest[n])}
                for n in among if n in self.latest]
