"""FedCG's node side: local SGD, then top-k of the model delta at the ratio the server sent.

Jiang et al., IEEE INFOCOM 2023. The node trains from the global model, compresses its update
``y - x`` with top-k at the keep-ratio in ``config['fedcg.ratio']`` (dense when every coordinate
is kept) and, with ``fedcg.error-feedback``, keeps what top-k dropped as a residual that is added
to the next update (Stich et al. 2018; Karimireddy et al. 2019). Top-k and error feedback come from
:mod:`bouquet.compression`. The node also reports its measured seconds per local step and, when
its node config has ``uplink-mbps``, its uplink; the server uses them with ``fedcg.system =
"measured"``.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from typing import Any

import numpy as np
from flwr.app import Context, Message, MetricRecord, RecordDict
from torch import nn

from bouquet.clients.base import ClientEnv, ClientProcedure, NodeState, message_config
from bouquet.clients.local_training import LocalSchedule, examples_in, node_index, reply
from bouquet.clients.task_inputs import task_inputs
from bouquet.compression import ErrorFeedback, to_array_record
from bouquet.schema import node_config_float
from bouquet.strategies.sections.fedcg import FedcgConfig
from bouquet.tasks.torch_utils import BatchLoss, get_arrays, set_arrays, sgd_steps
from bouquet.wire.arrays import to_numpy
from bouquet.wire.fedcg import (
    PAYLOAD_RECORD,
    RATIO_KEY,
    STEP_TIME_METRIC,
    UPLINK_METRIC,
    UPLINK_NODE_KEY,
    wire_compressor,
)
from bouquet.wire.flat import Layout

#: Random stream of the compressor (top-k draws nothing; kept for other compressors).
_COMPRESS_STREAM = 17


def local_round(msg: Message, context: Context, model: nn.Module, batches: Iterable[Any],
                loss_fn: BatchLoss, schedule: LocalSchedule, *, num_examples: int | None,
                error_feedback: bool, seed: int, namespace: str) -> RecordDict:
    """Train, compress at the server's ratio (with error feedback), return the reply content."""
    cfg = message_config(msg)
    rnd = int(cfg["server-round"])  # type: ignore[arg-type]
    ratio = float(cfg[RATIO_KEY])  # type: ignore[arg-type]
    if not 0.0 < ratio <= 1.0:
        raise ValueError(f"{RATIO_KEY} must be in (0, 1], got {ratio}")
    n = examples_in(batches, num_examples)
    start = to_numpy(msg.content["arrays"])  # type: ignore[arg-type]
    set_arrays(model, start)
    t0 = time.perf_counter()
    stats = sgd_steps(model, schedule.stream(batches), loss_fn,
                      steps=schedule.num_steps(batches), lr=schedule.lr)
    elapsed = time.perf_counter() - t0
    layout = Layout.of(start)
    delta = layout.flatten(get_arrays(model)) - layout.flatten(start)
    comp = wire_compressor(ratio, delta.size)
    rng = np.random.default_rng([seed, rnd, node_index(context), _COMPRESS_STREAM])
    if error_feedback:
        ef = ErrorFeedback(comp)
        memory = NodeState(context, namespace)
        stored = memory.arrays("ef")
        residual = stored["e"] if stored and stored["e"].shape == delta.shape \
            else ef.init(delta.shape)
        payload, _, residual = ef.step(delta, residual, rng)
        memory.set_arrays("ef", {"e": residual})
    else:
        payload = comp.compress(delta, rng)
    steps = max(float(stats.get("steps", 1.0)), 1.0)
    metrics: dict[str, int | float | list[int] | list[float]] = {
        "num-examples": n,
        "train_loss": float(stats["train_loss"]),
        STEP_TIME_METRIC: elapsed / steps,
    }
    uplink = node_config_float(context.node_config, UPLINK_NODE_KEY)
    if uplink is not None:
        metrics[UPLINK_METRIC] = uplink
    return RecordDict({PAYLOAD_RECORD: to_array_record(payload),
                       "metrics": MetricRecord(metrics)})


def train(msg: Message, context: Context, model: nn.Module, batches: Iterable[Any],
          loss_fn: BatchLoss, *, lr: float = 0.05, local_steps: int = 0, local_epochs: int = 1,
          num_examples: int | None = None, seed: int = 0, error_feedback: bool = False
          ) -> Message:
    """One FedCG round on the user's model and batches.

    Parameters
    ----------
    msg, context : Message, Context
        What Flower passes to ``@app.train()``; the keep-ratio comes in the message
        (``fedcg.ratio``); node config ``uplink-mbps``, when set, is reported.
    model, batches, loss_fn, lr, local_steps, local_epochs, num_examples, seed
        As :func:`bouquet.clients.scaffold.train`.
    error_feedback : bool
        The ``fedcg`` section's ``error_feedback``: keep what top-k dropped in
        ``context.state`` and add it to the next update.

    Returns
    -------
    Message
        ``payload`` (top-k of ``y - x``) and ``metrics`` (``num-examples``, ``train_loss``,
        seconds per step).

    """
    schedule = LocalSchedule(lr=lr, local_steps=local_steps, local_epochs=local_epochs)
    namespace = str(message_config(msg).get("method", "fedcg"))
    return reply(msg, local_round(msg, context, model, batches, loss_fn, schedule,
                                  num_examples=num_examples, error_feedback=error_feedback,
                                  seed=seed, namespace=namespace))


class FedcgClient(ClientProcedure):
    """Train, compress at the server's ratio (with error feedback), reply with the payload."""

    def train(self, msg: Message, context: Context, env: ClientEnv) -> RecordDict:
        """One local round on the catalogue task."""
        rnd = int(message_config(msg)["server-round"])  # type: ignore[arg-type]
        section: FedcgConfig = env.section("fedcg")
        batches, loss_fn, schedule = task_inputs(env, rnd)
        return local_round(msg, context, env.supervised().build_model(), batches, loss_fn, schedule,
                           num_examples=batches.local.num_train,
                           error_feedback=section.error_feedback, seed=env.common.seed,
                           namespace=env.common.method)
