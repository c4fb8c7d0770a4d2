"""The node directory: which online node holds which partition, and how much data it declared.

One job: find the nodes a round can use (discovery ``"grid"``; ``"query"`` with a hello per new
node; ``"sampled"`` with a hello only to the new nodes a round samples), keep their partitions and
declared sizes, their hello errors, and the weight bounds that follow from the declared sizes.
The run's settings (:class:`~bouquet.schema.CommonConfig`,
:class:`~bouquet.strategies.arguments.FederationOptions`) are passed to each call, so a strategy
whose settings are replaced needs no second copy here.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Mapping
from typing import Any

import numpy as np
from flwr.app import ConfigRecord, Message, MessageType, RecordDict
from flwr.serverapp import Grid

from bouquet.schema import CommonConfig
from bouquet.strategies.node_errors import NodeErrors
from bouquet.strategies.observers import announce
from bouquet.strategies.round_log import RoundLog
from bouquet.strategies.transport import send_and_collect
from bouquet.strategies.weight_cap import note_equal_weights, weight_bound
from bouquet.wire import validation as v
from bouquet.wire.actions import ACTION_KEY, HELLO_ACTION
from bouquet.wire.validation import InvalidReply

log = logging.getLogger("bouquet")


class NotEnoughNodes(RuntimeError):
    """Fewer nodes than ``min-train-nodes`` came online before ``sample-deadline``.

    ``failures`` lists ``{"node_id", "reason"}`` of the online nodes whose queries failed (the
    message quotes the most common reason).
    """

    def __init__(self, message: str, failures: list[dict[str, Any]] | None = None) -> None:
        super().__init__(message)
        self.failures = list(failures or [])


@dataclasses.dataclass
class NodeDirectory:
    """The nodes a strategy knows: partitions, declared sizes and hello errors.

    Attributes
    ----------
    partitions : dict[int, int]
        node_id -> partition-id (learnt with a hello query; the node id itself under
        ``discovery="grid"``).
    sizes : dict[int, int]
        partition-id -> number of local training examples reported at hello.
    node_errors : NodeErrors
        Errors nodes answered to hello queries, until a round's log records them.
    online : int
        How many nodes the grid listed at the last discovery (the federation's size under
        ``discovery="sampled"``, where only sampled nodes are known).
    claims : dict[int, int]
        partition-id -> the last admitted raw ``num-examples`` claim of each online node that
        declared no size (``discovery="grid"``).
    equal_weights_noted : bool
        Whether the median rule's fall-back to equal weights was logged.

    """

    partitions: dict[int, int] = dataclasses.field(default_factory=dict)
    sizes: dict[int, int] = dataclasses.field(default_factory=dict)
    node_errors: NodeErrors = dataclasses.field(default_factory=NodeErrors)
    online: int = 0
    #: Train-reply ``num-examples`` claims admitted so far, partition-id -> the last raw one of
    #: each node online now, for the median rule where no node declares a size (``"grid"``).
    claims: dict[int, int] = dataclasses.field(default_factory=dict)
    #: Whether the fall-back to equal weights has been logged (once per server process).
    equal_weights_noted: bool = False

    # ------------------------------------------------------------------ discovery
    def discover(self, grid: Grid, common: CommonConfig, *, discovery: str, method: str,
                 wanted: int) -> dict[int, int]:
        """Return ``{partition_id: node_id}`` of online nodes, waiting up to the deadline.

        ``discovery="grid"``: the node ids Flower's grid lists, each standing for its own
        partition (no message is sent). ``discovery="query"``: new nodes are asked once for
        their ``partition-id`` and data size (a ``query`` message). ``discovery="sampled"``:
        ``{node_id: node_id}`` of every online node and no message: the caller samples node ids
        and :meth:`introduce` asks only the sampled ones. While it waits, each new count is
        logged and told to the run's observers (``on_waiting``,
        :mod:`bouquet.strategies.observers`).
        """
        deadline = time.monotonic() + common.sample_deadline
        shown = -1  # the count last announced while waiting
        while True:
            online = sorted(grid.get_node_ids())
            self.online = len(online)
            if discovery == "sampled":  # nothing is sent: the caller introduces what it samples
                by_pid = {n: n for n in online}
            else:
                new = [n for n in online if n not in self.partitions]
                if discovery == "grid":
                    self.partitions.update({n: n for n in new})
                    self.forget_offline_claims(online)
                elif new:
                    self.hello(grid, new, method=method, round_timeout=common.round_timeout)
                by_pid = {self.partitions[n]: n for n in online if n in self.partitions}
            if len(by_pid) >= wanted:
                return by_pid
            if time.monotonic() >= deadline:
                unusable = [n for n in online if n not in self.partitions]
                why = self.node_errors.headline(online)
                raise NotEnoughNodes(
                    f"only {len(by_pid)} node(s) online after waiting "
                    f"{common.sample_deadline:g}s; min-train-nodes is "
                    f"{common.min_train_nodes}" + (f"; {why}" if why else ""),
                    self.node_errors.failures(unusable),
                )
            if len(by_pid) != shown:
                log.info("waiting for nodes: %d/%d online", len(by_pid), wanted)
                announce("on_waiting", len(by_pid), wanted)
                shown = len(by_pid)
            time.sleep(1.0)

    def forget_offline_claims(self, online: list[int]) -> None:
        """Keep only the grid claims of nodes online now (node id = partition under ``"grid"``).

        An id that went offline (a SuperNode restarted under a new node id) no longer counts in
        the median rule: else one node reconnecting each round with a huge claim would soon
        outnumber the honest claims and ratchet the median up.
        """
        now = set(online)
        self.claims = {pid: n for pid, n in self.claims.items() if pid in now}

    def introduce(self, grid: Grid, node_ids: list[int], *, method: str,
                  round_timeout: float) -> dict[int, int]:
        """``{partition_id: node_id}`` of ``node_ids``, a hello sent only to those not yet known.

        What ``discovery="sampled"`` does with a round's sampled node ids: the cost of a round
        is that of the nodes it uses, whatever the federation's size, and each node still
        declares its partition and size (the same :meth:`hello`, with every check) before its
        first reply is weighed. A node whose hello fails is left out of the round.
        """
        new = [n for n in node_ids if n not in self.partitions]
        if new:
            self.hello(grid, new, method=method, round_timeout=round_timeout)
        return {self.partitions[n]: n for n in node_ids if n in self.partitions}

    def introduce_sample(self, grid: Grid, picked: list[int], spares: list[int],
                         common: CommonConfig, *, method: str, wanted: int) -> dict[int, int]:
        """:meth:`introduce` a round's ``picked`` node ids, replacing those whose hello fails.

        A picked node that does not become usable (error, no answer, refused answer) is
        replaced by the next of ``spares`` (the other online nodes, in the round's seeded
        order), so the round still uses ``len(picked)`` nodes while enough answer. When even
        every spare leaves fewer than ``wanted`` (``min-train-nodes``) usable, this raises
        :class:`NotEnoughNodes` quoting the most common hello error.
        """
        usable = self.introduce(grid, picked, method=method, round_timeout=common.round_timeout)
        tried = list(picked)
        rest = list(spares)
        while len(usable) < len(picked) and rest:
            batch, rest = rest[:len(picked) - len(usable)], rest[len(picked) - len(usable):]
            tried += batch
            usable.update(self.introduce(grid, batch, method=method,
                                         round_timeout=common.round_timeout))
        if len(usable) < min(wanted, len(picked)):
            unusable = [n for n in tried if n not in self.partitions]
            why = self.node_errors.headline(tried)
            raise NotEnoughNodes(
                f"only {len(usable)} of {len(tried)} online node(s) asked are usable; "
                f"min-train-nodes is {common.min_train_nodes}" + (f"; {why}" if why else ""),
                self.node_errors.failures(unusable),
            )
        return usable

    def federation_size(self, discovery: str) -> int:
        """How many clients the federation has: nodes known, or online under ``"sampled"``."""
        known = len(self.sizes) or len(self.partitions)
        return max(self.online, known, 1) if discovery == "sampled" else max(known, 1)

    def hello(self, grid: Grid, node_ids: list[int], *, method: str,
              round_timeout: float) -> None:
        """Ask ``node_ids`` for their partition and size; keep the answers that are valid."""
        msgs = [
            Message(
                RecordDict({"config": ConfigRecord({ACTION_KEY: HELLO_ACTION,
                                                    "method": method})}),
                dst_node_id=n,
                message_type=MessageType.QUERY,
            )
            for n in node_ids
        ]
        replies, missing = send_and_collect(grid, msgs, timeout=round_timeout)
        self._note_hello_failures(replies, missing, round_timeout)
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

    def _note_hello_failures(self, replies: Mapping[int, Message], missing: list[int],
                             round_timeout: float) -> None:
        """Keep each node's hello error (error reply, no ``info``, no answer); forget answered ones."""
        for n in missing:
            self.node_errors.note(n, "hello query", "no answer within round-timeout "
                                  f"({round_timeout:g}s)")
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

    # ------------------------------------------------------------------ declared sizes
    def size_cap(self, common: CommonConfig) -> float:
        """Largest size one node may count for: ``max-num-examples`` and the median rule.

        The rule (:func:`~bouquet.strategies.weight_cap.weight_bound`) reads every size declared
        so far in the run (checkpointed with the partitions): with three or more declared, at
        most ``weight-cap-factor`` times their median. This bounds declared sizes, step budgets
        and evaluation weights; training weights use :meth:`weight_cap`.
        """
        return self._cap(common, federation=0)

    def weight_cap(self, common: CommonConfig, *, discovery: str) -> float:
        """Largest training weight one node may have: :meth:`size_cap` and a fall-back.

        The equal-weights fall-back applies under ``discovery="sampled"`` only.

        With fewer than three sizes declared in a larger sampled federation (early rounds of a
        tiny sample), every training weight is clipped to the smallest declared size: equal
        weights, logged once. Only the weights: step budgets and evaluation weights keep
        :meth:`size_cap`. Under ``"query"`` every online node declared at hello, so the median
        rule alone applies, as it always did.
        """
        return self._cap(common, federation=self.online if discovery == "sampled" else 0)

    def _cap(self, common: CommonConfig, *, federation: int) -> float:
        cap = float(common.max_num_examples) if common.max_num_examples else np.inf
        bound = weight_bound(self.sizes.values(), common.weight_cap_factor,
                             federation=federation)
        if bound.equal_weights:
            self.equal_weights_noted = note_equal_weights(self.equal_weights_noted,
                                                          bound.known)
        return max(min(cap, bound.cap), 1.0)

    def declared_size(self, partition_id: int, common: CommonConfig) -> int:
        """A node's declared data size, clipped to :meth:`size_cap` (0 when it declared none)."""
        n = self.sizes.get(partition_id, 0)
        return int(min(n, self.size_cap(common))) if n > 0 else 0

    def max_local_steps(self, partition_id: int, common: CommonConfig, *, discovery: str,
                        clipped: bool = False) -> int:
        """Most local steps a node may take in a round under the run's configuration.

        With ``local-steps`` 0 this follows the node's declared size: as declared (what an
        honest node can claim; more is a lie) or, with ``clipped``, clipped like its weight
        (what a method whose step scales with K_i should use at most).
        """
        if common.local_steps > 0:
            return common.local_steps
        size = self.declared_size(partition_id, common) if clipped else \
            self.sizes.get(partition_id, 0)
        if size <= 0 and discovery == "grid":
            return v.MAX_COUNT  # no declared size bounds it (FederationOptions.discovery)
        n = max(size, 1)
        return max(1, common.local_epochs * int(np.ceil(n / common.batch_size)))
