"""The initial model taken from nodes, agreed by a strict majority of bit-identical answers.

One job: :func:`initial_arrays_from_nodes` (a server without the task's packages asks nodes for
the starting point; one hostile node must not choose it).
"""

from __future__ import annotations

import logging
import time

from flwr.app import ArrayRecord, ConfigRecord, Message, MessageType, RecordDict
from flwr.serverapp import Grid

from bouquet.strategies.directory import NotEnoughNodes
from bouquet.strategies.node_errors import NodeErrors
from bouquet.strategies.transport import send_and_collect
from bouquet.wire import validation as v
from bouquet.wire.actions import ACTION_KEY, INIT_ACTION

log = logging.getLogger("bouquet")


def initial_arrays_from_nodes(grid: Grid, *, timeout: float, deadline: float,
                              ask: int = 3) -> ArrayRecord | None:
    """Ask up to ``ask`` online nodes for the task's initial model; return the agreed one.

    A server without the task's packages takes its starting point from nodes, so one hostile
    node must not choose it. The initial model is a function of the run seed: honest nodes send
    identical arrays. With two or more usable answers, an answer is used only when a strict
    majority of them is bit-identical to it; one usable answer is trusted with a warning.
    Nodes that fail the query are logged; while no node has answered, further nodes are asked
    until ``deadline`` passes, and then :class:`NotEnoughNodes` quotes the most common error.

    Returns None when the nodes have no initial model (the method needs none).
    """
    query = "initial-arrays query"
    errors = NodeErrors()
    asked: list[int] = []
    answers: list[tuple[int, ArrayRecord, bytes]] = []
    no_model = False
    end = time.monotonic() + deadline
    while not answers and not no_model:
        fresh = [n for n in sorted(grid.get_node_ids()) if n not in asked][:ask]
        if fresh:
            asked += fresh
            msgs = [Message(RecordDict({"config": ConfigRecord({ACTION_KEY: INIT_ACTION})}),
                            dst_node_id=n, message_type=MessageType.QUERY) for n in fresh]
            replies, missing = send_and_collect(grid, msgs, timeout=timeout)
            for n in missing:
                errors.note(n, query, "no answer within round-timeout")
            for n, reply in sorted(replies.items()):
                if reply.has_error():
                    errors.note(n, query, reply.error.reason)
                elif "arrays" not in reply.content:
                    no_model = True
                else:
                    digest = _usable_arrays(reply.content["arrays"])
                    if digest is None:
                        errors.note(n, query, "an unusable initial model (not finite arrays)")
                    else:
                        answers.append((n, reply.content["arrays"], digest))  # type: ignore[arg-type]
            continue
        if time.monotonic() >= end:
            why = errors.headline(asked)
            raise NotEnoughNodes(
                f"no node provided the initial model within sample-deadline ({deadline:g}s)"
                + (f"; {why}" if why else "; no node came online"), errors.failures(asked))
        time.sleep(1.0)
    if not answers:
        return None
    if len(answers) == 1:
        if len(asked) > 1:
            log.warning("only node %d provided the initial model; it is trusted alone",
                        answers[0][0])
        return answers[0][1]
    counts: dict[bytes, int] = {}
    for _, _, digest in answers:
        counts[digest] = counts.get(digest, 0) + 1
    best, votes = max(counts.items(), key=lambda kv: kv[1])
    if 2 * votes <= len(answers):
        raise RuntimeError(f"nodes disagree on the initial model ({len(answers)} answers, no "
                           "majority): a node is broken or hostile")
    for n, _, digest in answers:
        if digest != best:
            log.warning("node %d sent an initial model that differs from the majority's; ignored",
                        n)
    return next(rec for _, rec, digest in answers if digest == best)


def _usable_arrays(rec: object) -> bytes | None:
    """A digest of an initial model that decodes to finite arrays (None if it does not)."""
    if not isinstance(rec, ArrayRecord):
        return None
    try:
        arrays = {k: rec[k].numpy() for k in rec.keys()}
        for k, a in arrays.items():
            v.check_array(a, f"arrays/{k}", None, None)
    except Exception:  # a payload that does not decode, or holds NaN
        return None
    return b"".join(k.encode() + a.dtype.str.encode() + str(a.shape).encode() + a.tobytes()
                    for k, a in arrays.items())
