"""FedAvg's node side: local SGD from the global model, reply with the new model."""

from __future__ import annotations

from flwr.app import Context, Message, MetricRecord, RecordDict

from bouquet.clients.base import ClientEnv, ClientProcedure, message_config
from bouquet.strategies.model import to_numpy, to_record
from bouquet.tasks.classification import generator, get_arrays


class FedAvgClient(ClientProcedure):
    """Train ``local-epochs`` (or ``local-steps``) of SGD and send the whole model back."""

    def train(self, msg: Message, context: Context, env: ClientEnv) -> RecordDict:
        """One local round."""
        rnd = int(message_config(msg)["server-round"])  # type: ignore[arg-type]
        model = env.task.model_from(to_numpy(msg.content["arrays"]))
        local = env.local_data()
        stats = env.task.train(model, local, env.common, generator(env.common.seed, rnd, env.partition_id))
        metrics = {**stats, "num-examples": local.num_train}
        return RecordDict({"arrays": to_record(get_arrays(model)), "metrics": MetricRecord(metrics)})
