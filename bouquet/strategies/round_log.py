"""The round log: what one phase of one round did, and the metrics derived from it.

One job: the records a phase produces (:class:`RoundLog` with its counters and ``failures``,
:class:`NodeReply`, :class:`Parsed`, :class:`PendingPhase`) and the pure functions that derive
metrics from them (:func:`round_metrics`, :func:`merge_phase`, :func:`weighted_metrics`,
:func:`train_metrics`, :func:`train_metric_name`).
"""

from __future__ import annotations

import dataclasses
import logging
from typing import Any

from flwr.app import Message, MetricRecord, RecordDict

from bouquet.strategies.transport import short_reason

log = logging.getLogger("bouquet")


@dataclasses.dataclass(frozen=True)
class Parsed:
    """What a method's :meth:`~BouquetStrategy.validate_reply` read from a reply.

    ``norm`` is the update's L2 norm (screened against the round's median; None for replies
    bounded by their own protocol) and ``value`` the typed content aggregation uses (decoded
    vectors...), so a reply is parsed once.
    """

    norm: float | None
    value: Any = None


@dataclasses.dataclass
class NodeReply:
    """A validated reply: who sent it, what it holds, and what the exchange cost.

    ``parsed`` is the typed value the method's validation returned (:class:`Parsed`).
    """

    node_id: int
    partition_id: int
    content: RecordDict
    up_bytes: int
    down_bytes: int
    parsed: Any = None


@dataclasses.dataclass
class RoundLog:
    """What happened in one phase of one round (the fields of ``metrics.jsonl``)."""

    round: int
    clients: int = 0
    rejected: int = 0
    errors: int = 0
    missing: int = 0
    up_bytes: int = 0
    down_bytes: int = 0
    sampled: list[int] = dataclasses.field(default_factory=list)
    failures: list[dict[str, Any]] = dataclasses.field(default_factory=list)
    metrics: dict[str, float] = dataclasses.field(default_factory=dict)

    def counts(self) -> dict[str, int]:
        """The reply counts of this one phase.

        ``sampled`` (messages sent), ``clients`` (replies used), ``rejected``, ``errors``,
        ``missing``.
        """
        return {"sampled": len(self.sampled), "clients": self.clients, "rejected": self.rejected,
                "errors": self.errors, "missing": self.missing}

    def fail(self, kind: str, node_id: int, partition_id: int, reason: str, *,
             logged: bool = False) -> None:
        """Record one failed reply (kind: rejected, error or missing); ``logged``: already logged."""
        setattr(self, kind, getattr(self, kind) + 1)
        short = short_reason(reason)
        self.failures.append(
            {"kind": kind, "node_id": node_id, "partition_id": partition_id, "reason": short}
        )
        if not logged:
            log.warning("round %d: %s reply from node %d (partition %d): %s",
                        self.round, kind, node_id, partition_id, short)


@dataclasses.dataclass
class PendingPhase:
    """What one ``configure_*`` call sent, kept until its ``aggregate_*`` call admits the replies.

    Flower's ``start()`` calls ``configure_train`` and ``aggregate_train`` separately; the
    messages (stamped with their ids when the grid pushes them) map every reply, error replies
    included, back to the node it was sent to through ``reply_to_message_id``.
    """

    round: int
    message_type: str
    norm_key: str
    #: node id -> partition id of every message sent.
    partition_of: dict[int, int]
    #: partition id -> measured downlink bytes.
    down_bytes: dict[int, int]
    messages: list[Message]
    #: A phase the round ran before this one (Fed-SB's init), merged into this one's log.
    before: RoundLog | None = None


def train_metric_name(name: str) -> str:
    """The one naming rule of train metrics: ``loss`` -> ``train_loss``; ``train_loss`` kept."""
    return name if name.startswith("train_") else f"train_{name}"


def train_metrics(replies: list[NodeReply], skip: tuple[str, ...] = ()) -> dict[str, float]:
    """The replies' weighted-average metrics under their train names (``skip``: left out)."""
    return {train_metric_name(k): x for k, x in weighted_metrics(replies).items()
            if k not in skip}


def weighted_metrics(replies: list[NodeReply], record: str = "metrics") -> dict[str, float]:
    """Average every scalar metric of the replies weighted by ``num-examples``.

    The same rule as Flower's ``aggregate_metricrecords`` (a missing metric counts as 0, the
    weight is left out), over values bounded first: only finite scalars pass admission and
    ``num-examples`` is already clipped to the weight cap (a reply without it weighs 1). The
    arithmetic is ``sum(w x) / sum(w)``, not Flower's ``sum(x w / sum(w))``: Flower's differs in
    the last bit, and the project's results files must stay byte-identical across versions.
    """
    totals: dict[str, float] = {}
    weight_sum = 0.0
    for r in replies:
        rec = r.content.get(record) if record in r.content else None
        if not isinstance(rec, MetricRecord):
            continue
        w = float(rec.get("num-examples", 1))  # type: ignore[arg-type]
        weight_sum += w
        for k, x in rec.items():
            if k != "num-examples" and isinstance(x, int | float) and not isinstance(x, bool):
                totals[k] = totals.get(k, 0.0) + w * float(x)
    return {k: x / weight_sum for k, x in totals.items()} if weight_sum else {}


def merge_phase(rlog: RoundLog, before: RoundLog) -> None:
    """Fold a phase run before the round's training (Fed-SB's init) into the round's log."""
    rlog.metrics["init_up_bytes"] = float(before.up_bytes)
    rlog.metrics["init_down_bytes"] = float(before.down_bytes)
    rlog.up_bytes += before.up_bytes
    rlog.down_bytes += before.down_bytes
    for f in before.failures:
        if f["kind"] in ("rejected", "errors", "missing"):
            setattr(rlog, f["kind"], getattr(rlog, f["kind"]) + 1)
    rlog.failures = before.failures + rlog.failures


#: The counters of a round that travel in Flower's ``Result`` beside the method's metrics.
COUNTERS = ("clients", "rejected", "errors", "missing", "up_bytes", "down_bytes")


def round_metrics(rlog: RoundLog) -> MetricRecord:
    """A round's metrics and counters as the MetricRecord Flower's ``Result`` keeps."""
    out: dict[str, int | float] = {k: float(x) for k, x in rlog.metrics.items()}
    out.update({k: int(getattr(rlog, k)) for k in COUNTERS})
    return MetricRecord(out)  # type: ignore[arg-type]
