"""Sending to nodes and matching their replies: Flower's ``send_and_receive``, nothing more.

One job: turn a list of messages into ``{node_id: reply}`` plus the nodes that did not answer
(:func:`send_and_collect`, :func:`match_replies`), add the user's config to a message
(:func:`with_user_config`), and trim an error text to its informative end (:func:`short_reason`).
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from flwr.app import ConfigRecord, Message, RecordDict
from flwr.serverapp import Grid

_ANSI = re.compile(r"\x1b\[[0-9;]*m")


def short_reason(reason: str, limit: int = 400) -> str:
    """The informative end of an error text (a Ray traceback ends with the exception)."""
    lines = [ln.strip() for ln in _ANSI.sub("", reason).splitlines() if ln.strip()]
    text = " | ".join(lines[-3:]) if lines else ""
    return text[-limit:]


def with_user_config(content: RecordDict, config: ConfigRecord | None) -> RecordDict:
    """Add the user's ``train_config``/``evaluate_config`` entries to a message's config.

    The strategy's own entries (``method``, ``server-round``, the method's keys) win.
    """
    if config and "config" in content:
        own = content.config_records["config"]
        content["config"] = ConfigRecord({**dict(config), **dict(own)})
    return content


def match_replies(messages: list[Message], replies: Iterable[Message]
                  ) -> tuple[dict[int, Message], list[int]]:
    """Map replies to the node each message went to; return them and the nodes without one.

    A reply is matched through ``reply_to_message_id`` (the SuperLink signs "node unavailable"
    errors with its own node id); messages the grid did not stamp with an id are matched by the
    reply's source node.
    """
    by_id = {m.metadata.message_id: m.metadata.dst_node_id for m in messages
             if m.metadata.message_id}
    sent = {m.metadata.dst_node_id for m in messages}
    out: dict[int, Message] = {}
    for reply in replies:
        node = by_id.get(reply.metadata.reply_to_message_id)
        if node is None and not by_id and reply.metadata.src_node_id in sent:
            node = reply.metadata.src_node_id
        if node is not None and node not in out:
            out[node] = reply
    return out, sorted(sent - set(out))


def send_and_collect(grid: Grid, messages: list[Message], *, timeout: float
                     ) -> tuple[dict[int, Message], list[int]]:
    """Flower's ``send_and_receive``, with the replies mapped to their nodes (see above)."""
    if not messages:
        return {}, []
    return match_replies(messages, grid.send_and_receive(messages, timeout=timeout))
