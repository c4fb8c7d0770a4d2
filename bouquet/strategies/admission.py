"""Admission of replies: the checks a reply passes before it may touch the global state.

One job: decide which replies of a phase count. :func:`admit` is the one admission path (record
names, auxiliary metrics, weight, the method's validation, norm screen, rollback of a
non-finite aggregate); the pieces are :func:`check_weight`, :func:`clip_weight`,
:func:`screen_norms` with its memory (:func:`remembered`), :func:`arrays_are_finite` and
:func:`aggregate_safely`. Each takes the bounds it applies as arguments.
"""

from __future__ import annotations

import copy
import logging
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING

import numpy as np
from flwr.app import ArrayRecord, Message, MessageType, RecordDict

from bouquet.strategies.accounting import content_bytes
from bouquet.strategies.round_log import (
    NodeReply,
    Parsed,
    PendingPhase,
    RoundLog,
    merge_phase,
    weighted_metrics,
)
from bouquet.strategies.transport import match_replies
from bouquet.strategies.weight_cap import note_equal_weights, weight_bound
from bouquet.wire import validation as v
from bouquet.wire.validation import InvalidReply

if TYPE_CHECKING:
    from bouquet.strategies.base import BouquetStrategy
    from bouquet.strategies.directory import NodeDirectory

log = logging.getLogger("bouquet")


def check_weight(content: RecordDict, declared: int, cap: float) -> None:
    """``num-examples`` at most what the node ``declared``; clipped to ``cap``.

    A weight above the declared size is a lie and rejects the reply; a declared size above
    the cap is clipped in place (the server's parsed copy), so every aggregation rule reads
    the bounded value.
    """
    if "metrics" not in content or "num-examples" not in content["metrics"]:
        return  # the method's own validation says whether the weight is required
    rec = content.metric_records["metrics"]
    n = v.strict_int(rec["num-examples"], "metrics/num-examples", min=1)
    if declared > 0 and n > declared:
        raise InvalidReply(f"metrics/num-examples: {n} above the {declared} examples the "
                           "node declared")
    if n > cap:
        rec["num-examples"] = int(cap)


def clip_weight(content: RecordDict, cap: float) -> None:
    """Clip an (already validated) evaluation reply's ``num-examples`` to ``cap`` (in place)."""
    rec = content.metric_records["metrics"]
    n = rec["num-examples"]
    if isinstance(n, int) and n > cap:
        rec["num-examples"] = int(cap)


def screen_norms(norms: Mapping[int, float], history: list[float], *, max_update_norm: float,
                 factor: float) -> dict[int, str]:
    """Partitions whose update norm is out of bounds, with the reason.

    The bound is ``factor`` (``norm-bound-factor``) times the median of this round's norms
    together with the recently accepted ones (``history``, so that two replies, one of them
    absurd, cannot set their own median), and ``max_update_norm`` when set.
    """
    out: dict[int, str] = {}
    if max_update_norm > 0:
        for pid, x in norms.items():
            if x > max_update_norm:
                out[pid] = f"update norm {x:.4g} above max-update-norm {max_update_norm:g}"
    pool = [*norms.values(), *history]
    if factor > 0 and len(pool) >= 3:
        median = float(np.median(pool))
        for pid, x in norms.items():
            if pid not in out and x > factor * max(median, 1e-12):
                out[pid] = (f"update norm {x:.4g} is {x / max(median, 1e-12):.3g}x the "
                            f"median {median:.4g} (norm-bound-factor {factor:g})")
    return out


def remembered(history: list[float], norms: list[float], keep: int = 64) -> list[float]:
    """The norm memory after accepting ``norms``: the last ``keep`` accepted norms."""
    return [*history, *norms][-keep:]


def arrays_are_finite(arrays: ArrayRecord | None) -> bool:
    """Whether every floating array of ``arrays`` is finite (None: nothing to check)."""
    if arrays is None:
        return True
    for key in arrays.keys():
        a = arrays[key].numpy()
        if np.issubdtype(a.dtype, np.floating) and not np.all(np.isfinite(a)):
            return False
    return True


def aggregate_safely(strategy: BouquetStrategy, rnd: int, replies: list[NodeReply],
                     rlog: RoundLog) -> dict[str, float]:
    """The strategy's ``aggregate_round``, undone if it raises or leaves NaN/inf.

    A method that only finds a problem while aggregating (or arithmetic that overflows) must
    not end the run or poison the model: the state before the round is restored and the
    round's replies are counted as rejected.
    """
    before = copy.deepcopy(strategy.state_dict())
    try:
        metrics = dict(strategy.aggregate_round(rnd, replies))
        if strategy.state_is_finite():
            return metrics
        reason = "the aggregate was not finite; the round's update is undone"
    except InvalidReply as exc:
        reason = f"aggregation refused the round: {exc}"
    strategy.load_state_dict(before)
    for r in replies:
        rlog.fail("rejected", r.node_id, r.partition_id, reason)
    rlog.clients = 0
    return {}


def cap_undeclared_weights(replies: list[NodeReply], directory: NodeDirectory, factor: float,
                           *, train: bool, discovery: str) -> dict[int, int]:
    """Clip ``num-examples`` of nodes that declared no size by the median rule (in place).

    With ``discovery="grid"`` no node declares its size, so :func:`check_weight` has only
    ``max-num-examples`` to cap with (none by default): one node claiming 10^9 examples would
    outweigh the rest. The median rule (:func:`~bouquet.strategies.weight_cap.weight_bound`)
    bounds each claim by the claims known: this phase's and, for a grid training phase, the
    last admitted *raw* claim of every other node online now (``directory.claims``,
    checkpointed, pruned to the online nodes at each discovery: a node id that went offline,
    e.g. a SuperNode restarted under a new id, no longer counts). Raw claims keep the median
    robust to one liar either way (a stored clipped value would let one low claim deflate the
    others). With fewer than three known in a larger grid federation (a round of one or two
    replies before more are known) the replies weigh equally, so a liar's share of the average
    is at most that of an honest reply from round 1 on. Other discovery modes keep the rule
    they had: the median of this phase's undeclared claims, once three or more.

    Returns the raw claims of this grid training phase, for the caller to remember in
    ``directory.claims`` once the round is admitted (a round undone at aggregation leaves no
    claim behind); ``{}`` otherwise.
    """
    undeclared = [r for r in replies if directory.sizes.get(r.partition_id, 0) <= 0
                  and "metrics" in r.content and "num-examples" in r.content["metrics"]]
    if not undeclared:
        return {}
    claims = {r.partition_id: int(r.content.metric_records["metrics"]["num-examples"])  # type: ignore[arg-type]
              for r in undeclared}
    grid = discovery == "grid"
    remember = train and grid
    known = {**directory.claims, **claims} if remember else claims
    bound = weight_bound(known.values(), factor,
                         federation=max(directory.online, len(known)) if grid else 0)
    if bound.equal_weights:
        directory.equal_weights_noted = note_equal_weights(directory.equal_weights_noted,
                                                           bound.known)
    for r in undeclared:
        if claims[r.partition_id] > bound.cap:
            r.content.metric_records["metrics"]["num-examples"] = max(1, int(bound.cap))
    return claims if remember else {}


def admit(strategy: BouquetStrategy, phase: PendingPhase, replies: Iterable[Message]
          ) -> RoundLog:
    """Admit the replies of one phase (``BouquetStrategy.admit_phase``); return its log."""
    message_type = phase.message_type
    rnd = phase.round
    if phase.before is not None and not phase.messages:
        strategy.last_log[message_type] = phase.before
        return phase.before
    rlog = RoundLog(round=rnd, sampled=sorted(phase.down_bytes))
    strategy.report_query_errors(rlog)
    by_node, missing = match_replies(phase.messages, replies)
    pid_of = phase.partition_of
    train = message_type == MessageType.TRAIN
    good: list[NodeReply] = []
    norms: dict[int, float] = {}
    for node in missing:
        rlog.fail("missing", node, pid_of[node], "no reply before the round timeout")
    for node, reply in sorted(by_node.items()):
        pid = pid_of[node]
        if reply.has_error():
            rlog.fail("errors", node, pid, f"code {reply.error.code}: {reply.error.reason}")
            continue
        content = reply.content
        up = content_bytes(content)
        rlog.up_bytes += up
        try:
            parsed = Parsed(None)
            if train:
                parsed = strategy.admit_train_reply(rnd, pid, content)
                if parsed.norm is not None:
                    norms[pid] = parsed.norm
            else:
                v.evaluation_reply(content, max_examples=v.MAX_COUNT)
                strategy.clip_evaluation_weight(content)
        except InvalidReply as exc:
            rlog.fail("rejected", node, pid, str(exc))
            continue
        good.append(NodeReply(node, pid, content, up, phase.down_bytes[pid], parsed.value))
    node_of = {pid: n for n, pid in pid_of.items()}
    for pid, reason in strategy.screen_norms(norms, phase.norm_key).items():
        rlog.fail("rejected", node_of[pid], pid, reason)
        good = [r for r in good if r.partition_id != pid]
        del norms[pid]
    claims: dict[int, int] = {}
    if not train or strategy.weighted_by_examples:
        claims = cap_undeclared_weights(good, strategy.directory,
                                        strategy.common.weight_cap_factor, train=train,
                                        discovery=strategy.federation.discovery)
    rlog.down_bytes = sum(phase.down_bytes.values())
    rlog.clients = len(good)
    if not train:
        rlog.metrics = weighted_metrics(good)
    elif good:
        rlog.metrics = strategy.aggregate_safely(
            rnd, sorted(good, key=lambda r: r.partition_id), rlog)
        if rlog.clients:  # admitted: remember its claims (aggregate_safely undoes the rest)
            strategy.directory.claims.update(claims)
            strategy.remember_norms(
                [norms[r.partition_id] for r in good if r.partition_id in norms],
                phase.norm_key)
    else:
        log.warning("round %d: no usable reply; the global state is kept", rnd)
    if phase.before is not None:
        merge_phase(rlog, phase.before)
    strategy.last_log[message_type] = rlog
    return rlog
