"""An in-process Grid for tests, quick benchmarks and ``bouquet run --engine inprocess``.

The real ClientApp runs inside push_messages: no Ray, no SuperLink.

Each simulated node has its own Context (so ``context.state`` behaves as in Flower). Faults can be
injected per node: ``corrupt[partition_id] = fn(content) -> content`` edits a reply,
``fail`` makes the node raise, ``drop`` makes the reply go missing. ``corrupt_query`` and
``corrupt_eval`` edit only the replies to queries (hello) and to evaluation instructions.
"""

from __future__ import annotations

import secrets
import uuid
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import numpy as np
from flwr.app import Context, Error, Message, RecordDict
from flwr.common.constant import ErrorCode
from flwr.serverapp import Grid
from flwr.supercore.run import Run
from flwr.supercore.task_identity import TaskIdentity

from bouquet.apps.client_app import app as client_app
from bouquet.apps.config import full_run_config
from bouquet.privacy.dp_config import DP_SEED_KEY

#: Flower's task type of a simulation run (``flwr.supercore.constant.TaskType.SIMULATION``).
SIMULATION_TASK_TYPE = "flwr-simulation"

#: Each grid is a new "flwr run": its contexts get a run id no other grid in this process has.

__all__ = ["LocalGrid", "full_run_config"]


class LocalGrid(Grid):
    """A Grid whose nodes are in-process ClientApp calls, with fault injection for tests."""

    def __init__(self, num_nodes: int, run_config: Mapping[str, Any], client: Any = None) -> None:
        TaskIdentity.run_id, TaskIdentity.node_id, TaskIdentity.task_id = 1, 1, 1
        self.app = client or client_app
        self.run_config = full_run_config(run_config)
        #: What Flower keeps as ``run.override_config``: the keys this run was given.
        self.override_config = dict(run_config)
        # A fresh random id per grid, like a new ``flwr run`` (never shared across processes).
        self.run_id = secrets.randbits(63)
        self.num_nodes = num_nodes
        self.contexts = {1000 + i: self.fresh_context(i) for i in range(num_nodes)}
        self.replies: dict[str, Message] = {}
        self.corrupt: dict[int, Callable[[RecordDict], RecordDict]] = {}
        self.corrupt_query: dict[int, Callable[[RecordDict], RecordDict]] = {}
        self.corrupt_eval: dict[int, Callable[[RecordDict], RecordDict]] = {}
        self.fail: set[int] = set()
        self.drop: set[int] = set()
        self.offline: set[int] = set()
        self.sent: list[Message] = []

    def fresh_context(self, partition_id: int) -> Context:
        """A node's context as a newly started SuperNode has it (empty ``state``).

        In-process nodes get a ``dp-seed`` derived from the run seed, so that private
        simulations are reproducible (one party plays every role here); a real node leaves it
        unset and draws its DP randomness from OS entropy (docs/privacy.md).
        """
        node_seed = np.random.SeedSequence([int(self.run_config.get("seed", 0)), partition_id,
                                            0xD5]).generate_state(1, dtype=np.uint64)[0] >> 1
        return Context(self.run_id, 1000 + partition_id,
                       {"partition-id": partition_id, "num-partitions": self.num_nodes,
                        DP_SEED_KEY: int(node_seed)},
                       RecordDict(), dict(self.run_config))

    def restart(self, partition_id: int) -> None:
        """Restart a node: same node id and run, empty ``context.state`` (as Flower does)."""
        self.contexts[1000 + partition_id] = self.fresh_context(partition_id)

    def pid(self, node_id: int) -> int:
        """Partition id of a node."""
        return int(self.contexts[node_id].node_config["partition-id"])

    # Grid API
    def set_run(self, run: Any) -> None:  # pragma: no cover
        """Unused: the in-process grid makes its own run object."""

    @property
    def run(self) -> Run:
        """The run, as Flower would describe it (``override_config``: the keys given).

        Its task type is a simulation's (``Run.create_empty`` says ``flwr-serverapp``, a
        deployment's): the nodes run here, and a stopped run resumes with ``bouquet run``.
        """
        run = Run.create_empty(self.run_id)
        run.override_config = dict(self.override_config)
        run.primary_task_type = SIMULATION_TASK_TYPE
        return run

    def create_message(self, *a: Any, **k: Any) -> Message:  # pragma: no cover
        """Deprecated in Flower; not supported here."""
        raise NotImplementedError

    def get_node_ids(self) -> Iterable[int]:
        """Online nodes (those not in ``offline``)."""
        return [n for n in self.contexts if n not in self.offline]

    def get_nodes(self) -> Iterable[Any]:  # pragma: no cover
        """No NodeInfo records in process."""
        return []

    def push_messages(self, messages: Iterable[Message]) -> Iterable[str]:
        """Run the ClientApp on each message now; keep the reply for pull_messages."""
        ids = []
        for m in messages:
            mid = uuid.uuid4().hex
            m.metadata.__dict__["_message_id"] = mid
            self.sent.append(m)
            node = m.metadata.dst_node_id
            pid = self.pid(node)
            is_query = m.metadata.message_type.startswith("query")
            if not is_query and pid in self.drop:
                ids.append(mid)
                continue
            try:
                if not is_query and pid in self.fail:
                    raise RuntimeError("injected client failure")
                reply = self.app(m, self.contexts[node])
            except Exception as exc:  # what Flower turns into an error reply, in its words
                reason = str(type(exc)) + ":<'" + str(exc) + "'>"
                reply = Message(Error(code=ErrorCode.CLIENT_APP_RAISED_EXCEPTION, reason=reason),
                                reply_to=m)
            if not is_query and pid in self.corrupt and not reply.has_error():
                reply = Message(self.corrupt[pid](reply.content), reply_to=m)
            special = (self.corrupt_query if is_query
                       else self.corrupt_eval if m.metadata.message_type == "evaluate" else {})
            if pid in special and not reply.has_error():
                reply = Message(special[pid](reply.content), reply_to=m)
            self.replies[mid] = reply
            ids.append(mid)
        return ids

    def pull_messages(self, message_ids: Iterable[str]) -> Iterable[Message]:
        """Replies that are ready, removed from the store."""
        return [self.replies.pop(i) for i in list(message_ids) if i in self.replies]

    def send_and_receive(self, messages: Iterable[Message], *, timeout: float | None = None
                         ) -> Iterable[Message]:
        """Push then pull (everything is ready at once)."""
        return self.pull_messages(self.push_messages(messages))
