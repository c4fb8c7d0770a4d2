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

import numpy as np
from flwr.app import Context, Message, MetricRecord, RecordDict

from bouquet.clients.base import ClientEnv, ClientProcedure, NodeState, message_config
from bouquet.compression import ErrorFeedback, to_array_record
from bouquet.strategies.fedcg import (
    PAYLOAD_RECORD,
    RATIO_KEY,
    STEP_TIME_METRIC,
    UPLINK_METRIC,
    UPLINK_NODE_KEY,
    FedcgConfig,
    wire_compressor,
)
from bouquet.strategies.flat import Layout
from bouquet.strategies.model import to_numpy
from bouquet.tasks.classification import generator, get_arrays

#: Random stream of the compressor (top-k draws nothing; kept for other compressors).
_COMPRESS_STREAM = 17


class FedcgClient(ClientProcedure):
    """Train, compress at the server's ratio (with error feedback), reply with the payload."""

    def train(self, msg: Message, context: Context, env: ClientEnv) -> RecordDict:
        """One local round."""
        cfg = message_config(msg)
        rnd = int(cfg["server-round"])  # type: ignore[arg-type]
        ratio = float(cfg[RATIO_KEY])  # type: ignore[arg-type]
        if not 0.0 < ratio <= 1.0:
            raise ValueError(f"{RATIO_KEY} must be in (0, 1], got {ratio}")
        section: FedcgConfig = env.section("fedcg")
        start = to_numpy(msg.content["arrays"])  # type: ignore[arg-type]
        model = env.task.model_from(start)
        local = env.local_data()
        t0 = time.perf_counter()
        stats = env.task.train(model, local, env.common,
                               generator(env.common.seed, rnd, env.partition_id))
        elapsed = time.perf_counter() - t0
        layout = Layout.of(start)
        delta = layout.flatten(get_arrays(model)) - layout.flatten(start)
        comp = wire_compressor(ratio, delta.size)
        rng = np.random.default_rng([env.common.seed, rnd, env.partition_id, _COMPRESS_STREAM])
        if section.error_feedback:
            ef = ErrorFeedback(comp)
            memory = NodeState(context, env.common.method)
            stored = memory.arrays("ef")
            residual = stored["e"] if stored and stored["e"].shape == delta.shape \
                else ef.init(delta.shape)
            payload, _, residual = ef.step(delta, residual, rng)
            memory.set_arrays("ef", {"e": residual})
        else:
            payload = comp.compress(delta, rng)
        steps = max(float(stats.get("steps", 1.0)), 1.0)
        metrics: dict[str, int | float | list[int] | list[float]] = {
            "num-examples": local.num_train,
            "train_loss": float(stats["train_loss"]),
            STEP_TIME_METRIC: elapsed / steps,
        }
        if UPLINK_NODE_KEY in context.node_config:
            metrics[UPLINK_METRIC] = float(context.node_config[UPLINK_NODE_KEY])  # type: ignore[arg-type]
        return RecordDict({PAYLOAD_RECORD: to_array_record(payload),
                           "metrics": MetricRecord(metrics)})
