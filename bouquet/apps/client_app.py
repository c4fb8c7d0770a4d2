"""The one ClientApp: dispatches every message to the method named in its config.

``query`` messages with the action ``bouquet.hello`` are answered here for every method (the
node's partition id and data size); ``bouquet.initial-arrays`` returns the task's initial model for
servers that cannot build it themselves. Everything else goes to the method's
:class:`~bouquet.clients.base.ClientProcedure`.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any

from flwr.app import ConfigRecord, Context, Message, RecordDict
from flwr.clientapp import ClientApp

from bouquet.apps.config import RunConfig, resolve
from bouquet.apps.registry import get_task
from bouquet.clients.base import ClientEnv, ClientProcedure, message_config
from bouquet.strategies.base import HELLO_ACTION, INIT_ACTION
from bouquet.strategies.model import to_record

app = ClientApp()


@lru_cache(maxsize=8)
def _resolve(items: tuple[tuple[str, Any], ...]) -> RunConfig:
    return resolve(dict(items))


@lru_cache(maxsize=8)
def _task(name: str) -> Any:
    return get_task(name).load()


@lru_cache(maxsize=32)
def _procedure(path: str) -> ClientProcedure:
    from bouquet.apps.registry import load_object

    return load_object(path)()  # type: ignore[no-any-return]


def environment(context: Context) -> tuple[RunConfig, ClientEnv]:
    """Resolve the run config and build the node's :class:`ClientEnv` (cached per process)."""
    cfg = _resolve(tuple(sorted(context.run_config.items())))
    try:
        pid = int(context.node_config["partition-id"])  # type: ignore[arg-type]
        n = int(context.node_config["num-partitions"])  # type: ignore[arg-type]
    except KeyError as exc:
        raise ValueError(
            "node config needs partition-id and num-partitions "
            "(flower-supernode --node-config 'partition-id=0 num-partitions=2')"
        ) from exc
    env = ClientEnv(cfg.common, cfg.sections, _task(cfg.task_name), pid, n)
    return cfg, env


def _check_method(msg: Message, cfg: RunConfig) -> None:
    sent = message_config(msg).get("method", cfg.method.name)
    if sent != cfg.method.name:
        raise ValueError(f"message is for method {sent!r} but this run is {cfg.method.name!r}")


@app.train()
def train(msg: Message, context: Context) -> Message:
    """Run the method's local training procedure."""
    cfg, env = environment(context)
    _check_method(msg, cfg)
    content = _procedure(cfg.method.client).train(msg, context, env)
    return Message(content, reply_to=msg)


@app.evaluate()
def evaluate(msg: Message, context: Context) -> Message:
    """Evaluate with the method's procedure (default: the task's metrics on local test rows)."""
    cfg, env = environment(context)
    _check_method(msg, cfg)
    content = _procedure(cfg.method.client).evaluate(msg, context, env)
    return Message(content, reply_to=msg)


@app.query()
def query(msg: Message, context: Context) -> Message:
    """Answer hello / initial-arrays, or pass the action to the method."""
    cfg, env = environment(context)
    action = message_config(msg).get("action", "")
    if action == HELLO_ACTION:
        size = env.task.num_examples(env.partition_id, env.num_partitions, env.common) \
            if hasattr(env.task, "num_examples") else 0
        info = ConfigRecord({"partition-id": env.partition_id,
                             "num-partitions": env.num_partitions, "num-examples": int(size)})
        return Message(RecordDict({"info": info}), reply_to=msg)
    if action == INIT_ACTION:
        arrays = env.task.initial_arrays(cfg.common.seed)
        return Message(RecordDict({"arrays": to_record(arrays)}), reply_to=msg)
    _check_method(msg, cfg)
    content = _procedure(cfg.method.client).query(msg, context, env)
    return Message(content, reply_to=msg)
