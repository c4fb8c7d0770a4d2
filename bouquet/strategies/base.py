"""The strategy base every bouquet method builds on.

:class:`BouquetStrategy` is a Flower :class:`~flwr.serverapp.strategy.Strategy` that adds what the
project's contracts (DESIGN §4) need and Flower leaves to each strategy:

* node discovery by ``partition-id`` (a one-off ``query`` per new node), and seeded sampling with
  a deadline instead of an endless wait;
* one message per node (per-node content is normal), a finite timeout per phase;
* every reply accounted for: error replies are mapped back to their node through
  ``reply_to_message_id`` (the SuperLink signs "node unavailable" errors with its own id), replies
  missing at the timeout are counted, and each reply is validated by the method before it can touch
  the global state;
* measured uplink/downlink bytes per round;
* ``state_dict``/``load_state_dict`` for checkpoints.

A method implements :meth:`configure_round`, :meth:`validate_reply`, :meth:`aggregate_round` and,
when it has server state beyond what the base keeps, :meth:`state_dict`/:meth:`load_state_dict`.
"""

from __future__ import annotations

import copy
import dataclasses
import logging
import re
import time
from collections.abc import Iterable, Mapping
from typing import Any

import numpy as np
from flwr.app import ArrayRecord, ConfigRecord, Message, MessageType, MetricRecord, RecordDict
from flwr.serverapp import Grid
from flwr.serverapp.strategy import Strategy

from bouquet.schema import CommonConfig
from bouquet.strategies import validation as v
from bouquet.strategies.accounting import content_bytes
from bouquet.strategies.node_errors import NodeErrors
from bouquet.strategies.validation import InvalidReply

log = logging.getLogger("bouquet")

#: ``query`` action every ClientApp answers with its partition id and data size.
HELLO_ACTION = "bouquet.hello"
#: ``query`` action asking a node for the task's initial model (servers without torch).
INIT_ACTION = "bouquet.initial-arrays"


class NotEnoughNodes(RuntimeError):
    """Fewer nodes than ``min-train-nodes`` came online before ``sample-deadline``.

    ``failures`` lists ``{"node_id", "reason"}`` of the online nodes whose queries failed (the
    message quotes the most common reason).
    """

    def __init__(self, message: str, failures: list[dict[str, Any]] | None = None) -> None:
        super().__init__(message)
        self.failures = list(failures or [])


@dataclasses.dataclass
class StrategySetup:
    """What a strategy factory receives.

    Attributes
    ----------
    common : CommonConfig
        Keys every run has.
    sections : dict[str, Any]
        The method's (and task's) configuration sections by prefix.
    method : str
        Method name (sent to nodes so the ClientApp can dispatch).
    task : str
        Task name.
    initial_arrays : ArrayRecord or None
        The task's initial model, when the method has one.

    """

    common: CommonConfig
    sections: dict[str, Any]
    method: str
    task: str
    initial_arrays: ArrayRecord | None = None


@dataclasses.dataclass
class NodeReply:
    """A validated reply: who sent it, what it holds, and what the exchange cost."""

    node_id: int
    partition_id: int
    content: RecordDict
    up_bytes: int
    down_bytes: int


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


class BouquetStrategy(Strategy):
    """Base class of every bouquet strategy (see the module docstring).

    Parameters
    ----------
    setup : StrategySetup
        Resolved configuration and initial model.

    """

    #: Record names a reply may hold; anything else is rejected.
    reply_records: tuple[str, ...] = ("arrays", "metrics")

    def __init__(self, setup: StrategySetup) -> None:
        self.setup = setup
        self.common = setup.common
        self.method = setup.method
        #: node_id -> partition-id, learnt with a hello query.
        self.partitions: dict[int, int] = {}
        #: partition-id -> number of local training examples reported at hello.
        self.sizes: dict[int, int] = {}
        #: Update norms of recently accepted replies (the norm screen's memory; checkpointed).
        self.norm_history: dict[str, list[float]] = {}
        self.round_offset = 0
        #: Errors nodes answered to hello queries, until a round's log records them.
        self.node_errors = NodeErrors()

    # ------------------------------------------------------------------ method hooks
    def configure_round(self, rnd: int, partitions: list[int]) -> dict[int, RecordDict]:
        """Return the content to send to each sampled partition this round."""
        raise NotImplementedError

    def validate_reply(self, rnd: int, partition_id: int, content: RecordDict) -> float | None:
        """Raise :class:`InvalidReply` if the reply breaks the protocol.

        Returns the L2 norm of the update the reply carries (what it would move the global state
        by), which the base screens against the round's median (``norm-bound-factor``), or None
        for methods whose replies are bounded by their own protocol (the bandits).
        """
        raise NotImplementedError

    #: Whether replies weigh the average by ``num-examples`` (capped by the declared size).
    weighted_by_examples: bool = True

    def aggregate_round(self, rnd: int, replies: list[NodeReply]) -> dict[str, float]:
        """Fold validated replies into the global state; return metrics for the round."""
        raise NotImplementedError

    def global_arrays(self) -> ArrayRecord | None:
        """The current global model for evaluation (None when the method has none)."""
        return None

    def state_dict(self) -> dict[str, Any]:
        """Server state for checkpoints: numpy arrays and JSON scalars, nested dicts allowed."""
        return {"partitions": {str(k): n for k, n in self.partitions.items()},
                "sizes": {str(k): n for k, n in self.sizes.items()},
                "norm_history": {k: np.asarray(x, dtype=np.float64)
                                 for k, x in self.norm_history.items()}}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore what :meth:`state_dict` returned."""
        self.partitions = {int(k): int(n) for k, n in state.get("partitions", {}).items()}
        self.sizes = {int(k): int(n) for k, n in state.get("sizes", {}).items()}
        self.norm_history = {k: [float(x) for x in np.asarray(h)]
                             for k, h in state.get("norm_history", {}).items()}

    def headline_metrics(self) -> tuple[str, ...]:
        """Train-phase metric names that belong in ``final``/``best`` (``("regret",)``)."""
        return ()

    def observe_evaluation(self, rnd: int, metrics: Mapping[str, float]) -> None:
        """Called by the run loop with round ``rnd``'s evaluation metrics (central or federated).

        Methods that report something *at* a target (FedCG's simulated time to a target
        accuracy) record what they need here; keep it in :meth:`state_dict` for resumes.
        """

    def summary_extras(self) -> dict[str, dict[str, Any]]:
        """Extra entries merged into ``summary.json`` sections (``{"time": {...}}``)."""
        return {}

    def sample_size(self, rnd: int, available: int) -> int:
        """How many partitions to train this round (``fraction-train`` of those online)."""
        n = int(np.ceil(self.common.fraction_train * available))
        return max(min(n, available), min(self.common.min_train_nodes, available))

    def choose_partitions(self, rnd: int, available: list[int]) -> list[int]:
        """Seeded uniform sampling of partitions; methods with smarter selection override."""
        k = self.sample_size(rnd, len(available))
        rng = np.random.default_rng([self.common.seed, rnd, 7])
        picked = rng.choice(len(available), size=k, replace=False)
        return sorted(available[i] for i in picked)

    def base_config(self, rnd: int) -> ConfigRecord:
        """A fresh ConfigRecord with the method name and round (never shared between nodes)."""
        return ConfigRecord({"method": self.method, "server-round": rnd})

    # ------------------------------------------------------------------ node discovery
    def discover(self, grid: Grid) -> dict[int, int]:
        """Return ``{partition_id: node_id}`` of online nodes, waiting up to the deadline.

        New nodes are asked once for their ``partition-id`` (a ``query`` message).
        """
        deadline = time.monotonic() + self.common.sample_deadline
        waited = False
        while True:
            online = sorted(grid.get_node_ids())
            new = [n for n in online if n not in self.partitions]
            if new:
                self._hello(grid, new)
            by_pid: dict[int, int] = {}
            for n in online:
                if n in self.partitions:
                    by_pid[self.partitions[n]] = n
            if len(by_pid) >= self.common.min_train_nodes:
                return by_pid
            if time.monotonic() >= deadline:
                unusable = [n for n in online if n not in self.partitions]
                why = self.node_errors.headline(online)
                raise NotEnoughNodes(
                    f"only {len(by_pid)} node(s) online after waiting "
                    f"{self.common.sample_deadline:g}s; min-train-nodes is "
                    f"{self.common.min_train_nodes}" + (f"; {why}" if why else ""),
                    self.node_errors.failures(unusable),
                )
            if not waited:
                log.info("waiting for %d node(s) (have %d)", self.common.min_train_nodes,
                         len(by_pid))
                waited = True
            time.sleep(1.0)

    def _hello(self, grid: Grid, node_ids: list[int]) -> None:
        msgs = {
            n: Message(
                RecordDict({"config": ConfigRecord({"action": HELLO_ACTION,
                                                    "method": self.method})}),
                dst_node_id=n,
                message_type=MessageType.QUERY,
            )
            for n in node_ids
        }
        replies, missing = exchange(grid, msgs, timeout=self.common.round_timeout)
        self._note_hello_failures(replies, missing)
        online = set(grid.get_node_ids())
        for n, reply in sorted(replies.items()):
            if reply.has_error() or "info" not in reply.content:
                continue
            try:
                hello = v.parse_hello(reply.content["info"])
                holder = next((m for m, p in self.partitions.items()
                               if p == hello.partition_id and m != n), None)
                if holder is not None and holder in online:
                    raise InvalidReply(f"partition-id {hello.partition_id} is already held by "
                                       f"online node {holder}")
            except InvalidReply as exc:
                self.refuse_hello(n, str(exc))
                continue
            if holder is not None:  # the old holder went offline: a restarted node takes over
                del self.partitions[holder]
            self.partitions[n] = hello.partition_id
            self.sizes[hello.partition_id] = hello.num_examples

    def refuse_hello(self, node_id: int, reason: str) -> None:
        """A refused hello answer: logged, in the next phase's ``failures``, quoted on a stop."""
        self.node_errors.note(node_id, "hello query", f"answer refused: {reason}")

    def _note_hello_failures(self, replies: Mapping[int, Message], missing: list[int]) -> None:
        """Keep each node's hello error (error reply, no ``info``, no answer); forget answered ones."""
        for n in missing:
            self.node_errors.note(n, "hello query", "no answer within round-timeout "
                                  f"({self.common.round_timeout:g}s)")
        for n, reply in replies.items():
            if reply.has_error():
                self.node_errors.note(n, "hello query", reply.error.reason)
            elif "info" not in reply.content:
                self.node_errors.note(n, "hello query", "answered without an info record")
            else:
                self.node_errors.clear(n)

    def report_query_errors(self, rlog: RoundLog) -> None:
        """Put the hello errors no round has recorded yet into ``rlog`` (kind ``errors``)."""
        for n, text in self.node_errors.take_unreported().items():
            rlog.fail("errors", n, self.partitions.get(n, -1), text, logged=True)

    # ------------------------------------------------------------------ weights and bounds
    def size_cap(self) -> float:
        """Largest weight one node may have: ``max-num-examples`` and the median rule."""
        cap = float(self.common.max_num_examples) if self.common.max_num_examples else np.inf
        declared = [n for n in self.sizes.values() if n > 0]
        if self.common.weight_cap_factor > 0 and len(declared) >= 3:
            cap = min(cap, self.common.weight_cap_factor * float(np.median(declared)))
        return max(cap, 1.0)

    def declared_size(self, partition_id: int) -> int:
        """A node's declared data size, clipped to :meth:`size_cap` (0 when it declared none)."""
        n = self.sizes.get(partition_id, 0)
        return int(min(n, self.size_cap())) if n > 0 else 0

    def max_local_steps(self, partition_id: int, *, clipped: bool = False) -> int:
        """Most local steps a node may take in a round under the run's configuration.

        With ``local-steps`` 0 this follows the node's declared size: as declared (what an
        honest node can claim; more is a lie) or, with ``clipped``, clipped like its weight
        (what a method whose step scales with K_i should use at most).
        """
        if self.common.local_steps > 0:
            return self.common.local_steps
        size = self.declared_size(partition_id) if clipped else self.sizes.get(partition_id, 0)
        n = max(size, 1)
        return max(1, self.common.local_epochs * int(np.ceil(n / self.common.batch_size)))

    def check_weight(self, partition_id: int, content: RecordDict) -> None:
        """``num-examples`` at most what the node declared; clipped to :meth:`size_cap`.

        A weight above the declared size is a lie and rejects the reply; a declared size above
        the cap is clipped in place (the server's parsed copy), so every aggregation rule reads
        the bounded value.
        """
        if "metrics" not in content or "num-examples" not in content["metrics"]:
            return  # the method's own validation says whether the weight is required
        rec = content.metric_records["metrics"]
        n = v.strict_int(rec["num-examples"], "metrics/num-examples", min=1)
        declared = self.sizes.get(partition_id, 0)
        if declared > 0 and n > declared:
            raise InvalidReply(f"metrics/num-examples: {n} above the {declared} examples the "
                               "node declared")
        cap = self.size_cap()
        if n > cap:
            rec["num-examples"] = int(cap)

    def screen_norms(self, norms: Mapping[int, float], key: str = "train") -> dict[int, str]:
        """Partitions whose update norm is out of bounds, with the reason.

        The bound is ``norm-bound-factor`` times the median of this round's norms together with
        the recently accepted ones (so that two replies, one of them absurd, cannot set their own
        median), and ``max-update-norm`` when set. ``key`` names the kind of update (a method
        whose phases send different quantities keeps one memory per phase).
        """
        out: dict[int, str] = {}
        if self.common.max_update_norm > 0:
            for pid, x in norms.items():
                if x > self.common.max_update_norm:
                    out[pid] = (f"update norm {x:.4g} above max-update-norm "
                                f"{self.common.max_update_norm:g}")
        factor = self.common.norm_bound_factor
        pool = [*norms.values(), *self.norm_history.get(key, [])]
        if factor > 0 and len(pool) >= 3:
            median = float(np.median(pool))
            for pid, x in norms.items():
                if pid not in out and x > factor * max(median, 1e-12):
                    out[pid] = (f"update norm {x:.4g} is {x / max(median, 1e-12):.3g}x the "
                                f"median {median:.4g} (norm-bound-factor {factor:g})")
        return out

    def remember_norms(self, norms: list[float], key: str = "train", keep: int = 64) -> None:
        """Keep the accepted norms of the last rounds for :meth:`screen_norms`."""
        self.norm_history[key] = [*self.norm_history.get(key, []), *norms][-keep:]

    def state_is_finite(self) -> bool:
        """Whether the global state is finite (the base checks :meth:`global_arrays`)."""
        arrays = self.global_arrays()
        if arrays is None:
            return True
        for key in arrays.keys():
            a = arrays[key].numpy()
            if np.issubdtype(a.dtype, np.floating) and not np.all(np.isfinite(a)):
                return False
        return True

    # ------------------------------------------------------------------ one round
    def train_round(self, grid: Grid, rnd: int) -> RoundLog:
        """Sample, send, collect, validate and aggregate one training round."""
        by_pid = self.discover(grid)
        chosen = self.choose_partitions(rnd, sorted(by_pid))
        contents = self.configure_round(rnd, chosen)
        return self.run_phase(grid, rnd, contents, by_pid, MessageType.TRAIN)

    def run_phase(
        self,
        grid: Grid,
        rnd: int,
        contents: Mapping[int, RecordDict],
        by_pid: Mapping[int, int],
        message_type: str,
        *,
        aggregate: bool = True,
        norm_key: str = "train",
    ) -> RoundLog:
        """Send ``contents`` (by partition) and collect, validate and (optionally) aggregate.

        Train replies (``aggregate=True``) pass, in order: the record names, the auxiliary
        metrics (finite scalars), the weight (:meth:`check_weight`), the method's
        :meth:`validate_reply`, and the norm screen (:meth:`screen_norms`). The aggregate is
        rolled back if it leaves a non-finite global state. Evaluation replies pass
        :func:`~bouquet.strategies.validation.evaluation_reply`. Every refused reply is named
        in ``failures``.
        """
        rlog = RoundLog(round=rnd, sampled=sorted(contents))
        self.report_query_errors(rlog)
        node_of = {pid: by_pid[pid] for pid in contents}
        down = {pid: content_bytes(c) for pid, c in contents.items()}
        msgs = {
            node_of[pid]: Message(c, dst_node_id=node_of[pid], message_type=message_type,
                                  group_id=str(rnd))
            for pid, c in contents.items()
        }
        replies, missing = exchange(grid, msgs, timeout=self.common.round_timeout)
        pid_of = {n: pid for pid, n in node_of.items()}
        good: list[NodeReply] = []
        norms: dict[int, float] = {}
        for node in missing:
            rlog.fail("missing", node, pid_of[node], "no reply before the round timeout")
        for node, reply in sorted(replies.items()):
            pid = pid_of[node]
            if reply.has_error():
                rlog.fail("errors", node, pid, f"code {reply.error.code}: {reply.error.reason}")
                continue
            content = reply.content
            up = content_bytes(content)
            rlog.up_bytes += up
            try:
                if aggregate:
                    norm = self.admit_train_reply(rnd, pid, content)
                    if norm is not None:
                        norms[pid] = norm
                else:
                    v.evaluation_reply(content, max_examples=v.MAX_COUNT)
                    self.clip_evaluation_weight(content)
            except InvalidReply as exc:
                rlog.fail("rejected", node, pid, str(exc))
                continue
            good.append(NodeReply(node, pid, content, up, down[pid]))
        for pid, reason in self.screen_norms(norms, norm_key).items():
            rlog.fail("rejected", node_of[pid], pid, reason)
            good = [r for r in good if r.partition_id != pid]
            del norms[pid]
        rlog.down_bytes = sum(down.values())
        rlog.clients = len(good)
        if not aggregate:
            rlog.metrics = weighted_metrics(good)
        elif good:
            rlog.metrics = self.aggregate_safely(rnd, sorted(good, key=lambda r: r.partition_id),
                                                 rlog)
            if rlog.clients:
                self.remember_norms(
                    [norms[r.partition_id] for r in good if r.partition_id in norms], norm_key)
        else:
            log.warning("round %d: no usable reply; the global state is kept", rnd)
        return rlog

    def admit_train_reply(self, rnd: int, partition_id: int, content: RecordDict) -> float | None:
        """The checks every train reply passes before the method's own; returns its norm."""
        v.expect_records(content, self.reply_records)
        v.aux_metrics(content)
        if self.weighted_by_examples:
            self.check_weight(partition_id, content)
        norm = self.validate_reply(rnd, partition_id, content)
        if norm is not None and not np.isfinite(norm):
            raise InvalidReply("update norm is not finite")
        return norm

    def clip_evaluation_weight(self, content: RecordDict) -> None:
        """Clip an evaluation reply's ``num-examples`` to :meth:`size_cap` (in place)."""
        rec = content.metric_records["metrics"]
        cap = self.size_cap()
        n = rec["num-examples"]
        if isinstance(n, int) and n > cap:
            rec["num-examples"] = int(cap)

    def aggregate_safely(self, rnd: int, replies: list[NodeReply], rlog: RoundLog
                         ) -> dict[str, float]:
        """:meth:`aggregate_round`, undone if it raises :class:`InvalidReply` or leaves NaN/inf.

        A method that only finds a problem while aggregating (or arithmetic that overflows) must
        not end the run or poison the model: the state before the round is restored and the
        round's replies are counted as rejected.
        """
        before = copy.deepcopy(self.state_dict())
        try:
            metrics = dict(self.aggregate_round(rnd, replies))
            if self.state_is_finite():
                return metrics
            reason = "the aggregate was not finite; the round's update is undone"
        except InvalidReply as exc:
            reason = f"aggregation refused the round: {exc}"
        self.load_state_dict(before)
        for r in replies:
            rlog.fail("rejected", r.node_id, r.partition_id, reason)
        rlog.clients = 0
        return {}

    # ------------------------------------------------------------------ federated evaluation
    def evaluate_round(self, grid: Grid, rnd: int) -> RoundLog:
        """Ask every online node to evaluate :meth:`global_arrays`; weighted-average metrics."""
        arrays = self.global_arrays()
        by_pid = self.discover(grid)
        contents = {}
        for pid in sorted(by_pid):
            cfg = self.base_config(rnd)
            content = RecordDict({"config": cfg})
            if arrays is not None:
                content["arrays"] = arrays
            contents[pid] = content
        return self.run_phase(grid, rnd, contents, by_pid, MessageType.EVALUATE, aggregate=False)

    # ------------------------------------------------------------------ Flower Strategy API
    def configure_train(
        self, server_round: int, arrays: ArrayRecord, config: ConfigRecord, grid: Grid
    ) -> Iterable[Message]:
        """Flower API: messages for a round (node ids learnt with :meth:`discover`)."""
        by_pid = self.discover(grid)
        chosen = self.choose_partitions(server_round, sorted(by_pid))
        return [
            Message(c, dst_node_id=by_pid[pid], message_type=MessageType.TRAIN)
            for pid, c in self.configure_round(server_round, chosen).items()
        ]

    def aggregate_train(
        self, server_round: int, replies: Iterable[Message]
    ) -> tuple[ArrayRecord | None, MetricRecord | None]:
        """Flower API: validate and aggregate replies (errors and bad replies are dropped)."""
        good = []
        for r in replies:
            pid = self.partitions.get(r.metadata.src_node_id, -1)
            if r.has_error():
                log.warning("round %d: error reply from node %d (partition %d): %s", server_round,
                            r.metadata.src_node_id, pid, short_reason(r.error.reason or ""))
                continue
            try:
                self.validate_reply(server_round, pid, r.content)
            except InvalidReply as exc:
                log.warning("dropping reply from partition %d: %s", pid, exc)
                continue
            good.append(NodeReply(r.metadata.src_node_id, pid, r.content, 0, 0))
        metrics = self.aggregate_round(server_round, good) if good else {}
        return self.global_arrays(), MetricRecord(dict(metrics)) if metrics else None

    def configure_evaluate(
        self, server_round: int, arrays: ArrayRecord, config: ConfigRecord, grid: Grid
    ) -> Iterable[Message]:
        """Flower API: evaluation runs through :meth:`evaluate_round` instead."""
        return []

    def aggregate_evaluate(
        self, server_round: int, replies: Iterable[Message]
    ) -> MetricRecord | None:
        """Flower API: see :meth:`configure_evaluate`."""
        return None

    def summary(self) -> None:
        """Flower API: log the strategy's name and key settings."""
        log.info("%s (method %s, task %s)", type(self).__name__, self.method, self.setup.task)


# ---------------------------------------------------------------------- initial model
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
            msgs = {n: Message(RecordDict({"config": ConfigRecord({"action": INIT_ACTION})}),
                               dst_node_id=n, message_type=MessageType.QUERY) for n in fresh}
            replies, missing = exchange(grid, msgs, timeout=timeout)
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


# ---------------------------------------------------------------------- helpers
_ANSI = re.compile(r"\x1b\[[0-9;]*m")


def short_reason(reason: str, limit: int = 400) -> str:
    """The informative end of an error text (a Ray traceback ends with the exception)."""
    lines = [ln.strip() for ln in _ANSI.sub("", reason).splitlines() if ln.strip()]
    text = " | ".join(lines[-3:]) if lines else ""
    return text[-limit:]
def exchange(
    grid: Grid, msgs: Mapping[int, Message], *, timeout: float, poll: float = 0.1
) -> tuple[dict[int, Message], list[int]]:
    """Push one message per node and pull replies until all arrive or ``timeout`` passes.

    Returns
    -------
    replies : dict[int, Message]
        Reply (or error reply) by destination node id, mapped through ``reply_to_message_id``.
    missing : list[int]
        Nodes whose reply did not arrive in time.

    """
    if not msgs:
        return {}, []
    order = list(msgs.items())
    ids = list(grid.push_messages([m for _, m in order]))
    node_of: dict[str, int] = {}
    for node, m in order:
        mid = m.metadata.message_id
        if mid:
            node_of[mid] = node
    if not node_of and len(ids) == len(order):  # grids that do not stamp the instruction
        node_of = {mid: node for mid, (node, _) in zip(ids, order, strict=True)}
    pending = set(node_of)
    replies: dict[int, Message] = {}
    end = time.monotonic() + timeout
    while pending:
        for reply in grid.pull_messages(list(pending)):
            mid = reply.metadata.reply_to_message_id
            if mid in pending:
                replies[node_of[mid]] = reply
                pending.discard(mid)
        if not pending or time.monotonic() >= end:
            break
        time.sleep(poll)
    missing = [node_of[m] for m in pending] + [n for n, _ in order if n not in node_of.values()]
    return replies, sorted(set(missing))


def weighted_metrics(replies: list[NodeReply], record: str = "metrics") -> dict[str, float]:
    """Average every scalar metric of the replies weighted by ``num-examples``."""
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
