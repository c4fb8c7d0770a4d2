"""The node's answer to ``discovery="query"`` and ``"sampled"``: its partition id and data size.

A strategy built with ``discovery="query"`` asks every new node once (``"sampled"``: every new
node a round samples, which is what bouquet's runner does), with a ``query`` message
whose ``config["action"]`` is ``bouquet.hello`` (:mod:`bouquet.wire.actions`), which partition it
holds and how many training examples it has (:mod:`bouquet.strategies.base`). Per-node server
state then follows the partition across node restarts, sampling is reproducible in simulation
(where Flower's node ids are random), and the declared size bounds the node's weight and local
steps. bouquet's own ClientApp answers it; a user's ClientApp adds::

    from bouquet.clients.discovery import answer_hello

    @app.query()
    def query(msg: Message, context: Context) -> Message:
        return answer_hello(msg, context, num_examples=len(my_train_rows(context)))

With the default ``discovery="grid"`` no such query is ever sent.
"""

from __future__ import annotations

from flwr.app import ConfigRecord, Context, Message, RecordDict

from bouquet.wire.actions import ACTION_KEY, HELLO_ACTION


def is_hello(msg: Message) -> bool:
    """Whether ``msg`` is a strategy's discovery query."""
    cfg = msg.content.config_records.get("config") if "config" in msg.content else None
    return isinstance(cfg, ConfigRecord) and cfg.get(ACTION_KEY) == HELLO_ACTION


def answer_hello(msg: Message, context: Context, *, num_examples: int,
                 partition_id: int | None = None, num_partitions: int | None = None) -> Message:
    """The reply to a discovery query.

    Parameters
    ----------
    msg : Message
        The query (:func:`is_hello` must hold).
    context : Context
        The node's context; ``partition-id`` and ``num-partitions`` are read from its
        ``node_config`` unless given.
    num_examples : int
        The node's number of local training examples (what its train replies will weigh).
    partition_id, num_partitions : int, optional
        Override the node config's values.

    Raises
    ------
    ValueError
        When ``msg`` is not a discovery query, or the partition id is unknown or negative.

    """
    if not is_hello(msg):
        raise ValueError("answer_hello: the message is not a bouquet.hello query")
    if partition_id is None:
        if "partition-id" not in context.node_config:
            raise ValueError("answer_hello: the node config has no partition-id (flower-supernode "
                             "--node-config 'partition-id=0 num-partitions=2'), and none was given")
        partition_id = int(context.node_config["partition-id"])  # type: ignore[arg-type]
    if num_partitions is None:
        num_partitions = int(context.node_config.get("num-partitions", 0))  # type: ignore[arg-type]
    if partition_id < 0 or num_examples < 0:
        raise ValueError(f"answer_hello: partition_id {partition_id} and num_examples "
                         f"{num_examples} must be >= 0")
    info = ConfigRecord({"partition-id": int(partition_id), "num-partitions": int(num_partitions),
                         "num-examples": int(num_examples)})
    return Message(RecordDict({"info": info}), reply_to=msg)
