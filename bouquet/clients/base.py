"""What a node-side method procedure receives, and the base class it extends.

The ClientApp resolves the run configuration, loads the task once per process and calls the
method's :class:`ClientProcedure` with a :class:`ClientEnv`. A procedure returns the reply
*content* (a ``RecordDict``); the ClientApp wraps it in a reply message. Raising an exception
makes Flower send an error reply, which the strategy counts.

Per-client memory lives in ``context.state`` under ``"<method>.<name>"`` keys (see
:class:`NodeState`): it persists across rounds, and the ClientApp also saves it on the node's
disk and restores it after a SuperNode restart or a server resume
(:mod:`bouquet.clients.persistence`). Keep everything a node must not lose there, not in module
globals or process caches.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

from flwr.app import ConfigRecord, Context, Message, MetricRecord, RecordDict

from bouquet.node_state import NodeState
from bouquet.schema import CommonConfig
from bouquet.tasks.protocols import (
    BanditTask,
    CacheableTask,
    EvaluatedTask,
    SupervisedTask,
    Task,
    require_kind,
)
from bouquet.wire.actions import ACTION_KEY
from bouquet.wire.arrays import to_numpy


@dataclasses.dataclass
class ClientEnv:
    """Everything a client procedure needs besides the message.

    Attributes
    ----------
    common : CommonConfig
        Keys every run has.
    sections : dict[str, Any]
        The method's and task's configuration sections.
    task : Task
        The task object (loaded once per process); the typed views :meth:`supervised`,
        :meth:`evaluated` and :meth:`bandit` check the protocol a procedure needs.
    partition_id, num_partitions : int
        This node's share of the data.
    partition_cache : Path or None
        The node's partition cache on disk (:mod:`bouquet.tasks.partition_cache`; node config
        ``partition-cache``, by default ``<state-dir>/partition-cache``); None (simulation, or
        ``partition-cache=off``): the partition is built from the dataset in every process.

    """

    common: CommonConfig
    sections: dict[str, Any]
    task: Task
    partition_id: int
    num_partitions: int
    partition_cache: Path | None = None

    def section(self, prefix: str) -> Any:
        """The configuration section called ``prefix``."""
        return self.sections[prefix]

    def supervised(self) -> SupervisedTask:
        """The task as a :class:`~bouquet.tasks.protocols.SupervisedTask` (or a TypeError)."""
        return require_kind(self.task, SupervisedTask,  # type: ignore[no-any-return]
                            "a task with a model, batches and a loss")

    def evaluated(self) -> EvaluatedTask:
        """The task as an :class:`~bouquet.tasks.protocols.EvaluatedTask` (or a TypeError)."""
        return require_kind(self.task, EvaluatedTask,  # type: ignore[no-any-return]
                            "a task that evaluates a model on local rows")

    def bandit(self) -> BanditTask:
        """The task as a :class:`~bouquet.tasks.protocols.BanditTask` (or a TypeError)."""
        return require_kind(self.task, BanditTask,  # type: ignore[no-any-return]
                            "a bandit task (kind='bandit'), e.g. task='synth-bandit'")

    def local_data(self) -> Any:
        """Return this node's partition (cached per process, and on disk with a partition cache)."""
        return _local_data(self.task, self.partition_id, self.num_partitions, self.common,
                           self._disk_cache())

    def num_examples(self) -> int:
        """Size of this node's training share (what a hello reports).

        Read from the partition cache's entry when there is one (no dataset load); otherwise
        the task counts it (``task.num_examples``), and a cacheable task's partition is then
        built and kept on disk, so the next message's hello reads the entry.
        """
        cache = self._disk_cache()
        if cache is not None:
            from bouquet.tasks.partition_cache import partition_size

            size = partition_size(self.task, self.partition_id, self.num_partitions,
                                  self.common, cache)
            if size is not None:
                return size
            self.local_data()  # a miss: build the partition once and store it
        return int(self.task.num_examples(self.partition_id, self.num_partitions, self.common))

    def _disk_cache(self) -> Any:
        """The :class:`~bouquet.tasks.partition_cache.PartitionCache`, for a cacheable task only."""
        if self.partition_cache is None or not isinstance(self.task, CacheableTask):
            return None
        from bouquet.tasks.partition_cache import PartitionCache  # torch: only for such tasks

        return PartitionCache(self.partition_cache)


__all__ = ["ClientEnv", "ClientProcedure", "NodeState", "message_config"]

_DATA_CACHE: dict[tuple[Any, ...], Any] = {}


def _local_data(task: Any, pid: int, n: int, common: CommonConfig, disk: Any = None) -> Any:
    key = (task.name, pid, n, common.partition, common.seed, common.dirichlet_alpha,
           common.classes_per_client)
    if key not in _DATA_CACHE:
        if len(_DATA_CACHE) > 256:
            _DATA_CACHE.clear()
        if disk is None:
            _DATA_CACHE[key] = task.partition(pid, n, common)
        else:
            from bouquet.tasks.partition_cache import load_partition

            _DATA_CACHE[key] = load_partition(task, pid, n, common, disk)
    return _DATA_CACHE[key]


class ClientProcedure:
    """Base of node-side method procedures.

    Subclasses implement :meth:`train`; :meth:`evaluate` defaults to evaluating the arrays in the
    message on the node's held-out share (classification tasks), and :meth:`query` to answering
    nothing.
    """

    def train(self, msg: Message, context: Context, env: ClientEnv) -> RecordDict:
        """Run the method's local procedure and return the reply content."""
        raise NotImplementedError

    def evaluate(self, msg: Message, context: Context, env: ClientEnv) -> RecordDict:
        """Evaluate the received global model on this node's test share."""
        task = env.evaluated()
        model = task.model_from(to_numpy(msg.content["arrays"]))  # type: ignore[arg-type]
        local = env.local_data()
        metrics = task.evaluate_model(model, local.x_test, local.y_test)
        metrics["num-examples"] = int(local.y_test.shape[0])
        return RecordDict({"metrics": MetricRecord(metrics)})

    def query(self, msg: Message, context: Context, env: ClientEnv) -> RecordDict:
        """Answer a method-specific query action (``config['action']``)."""
        action = msg.content["config"].get(ACTION_KEY, "")
        raise ValueError(f"{type(self).__name__} does not answer query action {action!r}")


def message_config(msg: Message) -> ConfigRecord:
    """The ``config`` record of an instruction (empty if absent)."""
    if "config" in msg.content and isinstance(msg.content["config"], ConfigRecord):
        return msg.content["config"]
    return ConfigRecord()
