"""The one ClientApp: dispatches every message to the method named in its config.

``query`` messages with the action ``bouquet.hello`` are answered here for every method (the
node's partition id and data size); ``bouquet.initial-arrays`` returns the task's initial model for
servers that cannot build it themselves. Everything else goes to the method's
:class:`~bouquet.clients.base.ClientProcedure`.

Around every message that carries a ``server-round``, the node's ``context.state`` is restored
from and saved to the node's disk (:mod:`bouquet.clients.persistence`): node config
``state-dir`` on a SuperNode (``state-dir=off`` disables it), by default
``<run folder>/client-state`` (what simulation uses). Files are keyed by the run's name
(``run-name``, or the folder of ``resume-from``), so they follow a server resume.

A node whose config names ``worker-socket`` runs its messages on a warm worker process instead
(:mod:`bouquet.apps.node_worker`), with these same handlers (:data:`HANDLERS`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from functools import lru_cache
from pathlib import Path
from typing import Any

from flwr.app import Context, Message, RecordDict
from flwr.clientapp import ClientApp

from bouquet.apps.config import RunConfig, resolve
from bouquet.apps.node_worker import Handler, forwarded
from bouquet.apps.registry import get_task
from bouquet.apps.results import CLIENT_STATE_DIR, default_results_dir, default_run_name
from bouquet.clients.base import ClientEnv, ClientProcedure, message_config
from bouquet.clients.discovery import answer_hello, is_hello
from bouquet.clients.node_folder import STATE_DIR_KEY, STATE_OFF, partition_cache_folder
from bouquet.clients.persistence import NodeStore, marked_folder, persist, restore
from bouquet.tasks.protocols import ModelTask, PackagedTask, Task, require_kind
from bouquet.wire.actions import ACTION_KEY, INIT_ACTION
from bouquet.wire.arrays import to_record

app = ClientApp()


@lru_cache(maxsize=8)
def _resolve(items: tuple[tuple[str, Any], ...]) -> RunConfig:
    return resolve(dict(items))


@lru_cache(maxsize=8)
def _task(name: str) -> Task:
    task = get_task(name).load()
    if isinstance(task, PackagedTask):  # packaged data/model files: one line with the pip command
        task.require()
    return require_kind(task, Task, "a task")  # type: ignore[no-any-return]


@lru_cache(maxsize=32)
def _procedure(path: str) -> ClientProcedure:
    from bouquet.apps.registry import load_object

    return load_object(path)()  # type: ignore[no-any-return]


def run_config_of(context: Context) -> RunConfig:
    """The resolved run config (cached per process)."""
    return _resolve(tuple(sorted(context.run_config.items())))


def node_partition(context: Context) -> tuple[int, int]:
    """Return the node config's ``partition-id`` and ``num-partitions``."""
    try:
        pid = int(context.node_config["partition-id"])  # type: ignore[arg-type]
        n = int(context.node_config["num-partitions"])  # type: ignore[arg-type]
    except KeyError as exc:
        raise ValueError(
            "node config needs partition-id and num-partitions "
            "(flower-supernode --node-config 'partition-id=0 num-partitions=2')"
        ) from exc
    return pid, n


def environment(context: Context) -> tuple[RunConfig, ClientEnv]:
    """Resolve the run config and build the node's :class:`ClientEnv` (cached per process)."""
    cfg = run_config_of(context)
    pid, n = node_partition(context)
    env = ClientEnv(cfg.common, cfg.sections, _task(cfg.task_name), pid, n,
                    partition_cache=partition_cache_folder(context))
    return cfg, env


def cached_hello_size(context: Context, cfg: RunConfig) -> int | None:
    """A hello's count from the node's partition cache, before the task (and torch) is loaded.

    None when the node has no partition cache, no entry for this partition, or one whose
    fingerprint inputs no longer hold (:func:`bouquet.tasks.partition_cache.cached_count`).
    """
    folder = partition_cache_folder(context)
    if folder is None:
        return None
    from bouquet.tasks.partition_cache import cached_count

    pid, n = node_partition(context)
    module, _, attr = get_task(cfg.task_name).factory.partition(":")
    return cached_count(folder, cfg.task_name, f"{module}.{attr}", pid, n, cfg.common)


#: Node-config key: ``fsync`` (every saved version flushed to the disk before the reply leaves)
#: or ``cache`` (written atomically into the page cache; survives a killed node process). Default:
#: ``fsync`` with an explicit ``state-dir`` (a SuperNode's own disk), ``cache`` in the run folder,
#: whose file system the server syncs once per round (docs/reliability.md).
STATE_SYNC_KEY = "state-sync"
STATE_SYNC_MODES = ("fsync", "cache")


def state_fsync(node_config: Mapping[str, Any]) -> bool:
    """Whether this node flushes each saved version to the disk (``state-sync``, see above)."""
    setting = node_config.get(STATE_SYNC_KEY)
    if setting is None:
        return STATE_DIR_KEY in node_config
    mode = str(setting).strip().lower()
    if mode not in STATE_SYNC_MODES:
        raise ValueError(f"node config {STATE_SYNC_KEY}={setting!r}: use one of "
                         f"{', '.join(STATE_SYNC_MODES)}")
    return mode == "fsync"


def run_key(cfg: RunConfig, context: Context) -> str:
    """Name that node state is filed under.

    ``run-name``, the name of the ``resume-from`` folder, or (unnamed runs) the name the server
    gives the run folder (:func:`~bouquet.apps.results.default_run_name`), so that node state
    follows a server resume of an unnamed run too.
    """
    if cfg.common.resume_from:
        return Path(cfg.common.resume_from).name
    return cfg.common.run_name or default_run_name(cfg.method.name, cfg.task_name,
                                                   cfg.common.seed, context.run_id)


def node_store(context: Context, cfg: RunConfig, env: ClientEnv) -> NodeStore | None:
    """The node's state folder for this run (None when ``state-dir=off``).

    Resolved on the node's first message; later ones read it from the persistence marker in
    ``context.state`` (:func:`~bouquet.clients.persistence.marked_folder`).
    """
    setting = context.node_config.get(STATE_DIR_KEY)
    if setting is not None and str(setting).strip().lower() in STATE_OFF:
        return None
    folder = marked_folder(context)
    if folder is None:
        key = run_key(cfg, context)
        if setting is not None:
            root = Path(str(setting)).expanduser().resolve() / key
        elif cfg.common.resume_from:
            root = Path(cfg.common.resume_from).expanduser().resolve() / CLIENT_STATE_DIR
        else:
            base = Path(cfg.common.results_dir).expanduser().resolve() \
                if cfg.common.results_dir else default_results_dir()
            root = base / key / CLIENT_STATE_DIR
        folder = root / f"partition-{env.partition_id}"
    return NodeStore(folder, env.partition_id, context.run_id,
                     resumed=bool(cfg.common.resume_from),
                     fsync=state_fsync(context.node_config))


def with_node_memory(msg: Message, context: Context, cfg: RunConfig, env: ClientEnv,
                     answer: Callable[[], RecordDict]) -> RecordDict:
    """Restore ``context.state`` if the node lost it, answer, then save what changed.

    The state is saved before the reply leaves: a reply whose state could not be written is
    not sent (the exception becomes an error reply).
    """
    rnd = message_config(msg).get("server-round")
    store = node_store(context, cfg, env) if isinstance(rnd, int) else None
    if store is None or not isinstance(rnd, int):
        return answer()
    restore(context, store, rnd)
    try:
        content = answer()
    except BaseException:
        try:  # keep what the failed call recorded (conservative for accountants)
            persist(context, store, rnd)
        except Exception:  # the original error is the one to report
            pass
        raise
    persist(context, store, rnd)
    return content


def _check_method(msg: Message, cfg: RunConfig) -> None:
    sent = message_config(msg).get("method", cfg.method.name)
    if sent != cfg.method.name:
        raise ValueError(f"message is for method {sent!r} but this run is {cfg.method.name!r}")


def train(msg: Message, context: Context) -> Message:
    """Run the method's local training procedure."""
    cfg, env = environment(context)
    _check_method(msg, cfg)
    proc = _procedure(cfg.method.client)
    content = with_node_memory(msg, context, cfg, env, lambda: proc.train(msg, context, env))
    return Message(content, reply_to=msg)


def evaluate(msg: Message, context: Context) -> Message:
    """Evaluate with the method's procedure (default: the task's metrics on local test rows)."""
    cfg, env = environment(context)
    _check_method(msg, cfg)
    proc = _procedure(cfg.method.client)
    content = with_node_memory(msg, context, cfg, env, lambda: proc.evaluate(msg, context, env))
    return Message(content, reply_to=msg)


def query(msg: Message, context: Context) -> Message:
    """Answer hello / initial-arrays, or pass the action to the method."""
    if is_hello(msg):  # from the node's partition cache when it has the entry (no task load)
        size = cached_hello_size(context, run_config_of(context))
        if size is not None:
            pid, n = node_partition(context)
            return answer_hello(msg, context, num_examples=size, partition_id=pid,
                                num_partitions=n)
    cfg, env = environment(context)
    action = message_config(msg).get(ACTION_KEY, "")
    if is_hello(msg):
        return answer_hello(msg, context, num_examples=env.num_examples(),
                            partition_id=env.partition_id, num_partitions=env.num_partitions)
    if action == INIT_ACTION:
        if not isinstance(env.task, ModelTask):  # a task without a model (bandits)
            return Message(RecordDict(), reply_to=msg)
        arrays = env.task.initial_arrays(cfg.common.seed)
        return Message(RecordDict({"arrays": to_record(arrays)}), reply_to=msg)
    _check_method(msg, cfg)
    proc = _procedure(cfg.method.client)
    content = with_node_memory(msg, context, cfg, env, lambda: proc.query(msg, context, env))
    return Message(content, reply_to=msg)


#: The handlers by message kind: what the ClientApp registers (each forwarded to the node's
#: worker when its config names one) and what the worker runs.
HANDLERS: dict[str, Handler] = {"train": train, "evaluate": evaluate, "query": query}
app.train()(forwarded("train", train))
app.evaluate()(forwarded("evaluate", evaluate))
app.query()(forwarded("query", query))
