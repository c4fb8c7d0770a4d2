"""FedAvg (McMahan et al., AISTATS 2017) under the bouquet contracts.

The averaging is Flower's own (``aggregate_arrayrecords``); what this class adds is what the
project requires around it: seeded sampling with a deadline, per-reply validation (a bad reply is
dropped and counted instead of aborting the run), measured bytes and checkpointable state.
"""

from __future__ import annotations

from flwr.app import RecordDict
from flwr.serverapp.strategy.strategy_utils import aggregate_arrayrecords

from bouquet.strategies.base import NodeReply, StrategySetup, weighted_metrics
from bouquet.strategies.model import ModelStrategy, to_numpy


class FedAvg(ModelStrategy):
    """Federated averaging weighted by the number of local examples."""

    def configure_round(self, rnd: int, partitions: list[int]) -> dict[int, RecordDict]:
        """Send the global model to every sampled partition."""
        return {pid: self.model_message(rnd) for pid in partitions}

    def validate_reply(self, rnd: int, partition_id: int, content: RecordDict) -> float:
        """A full model of the right shapes and dtypes, finite, with a positive weight."""
        arrays, _ = self.validate_model_reply(content)
        return self.model_update_norm(arrays)

    def aggregate_round(self, rnd: int, replies: list[NodeReply]) -> dict[str, float]:
        """Weighted average of the replies' models (Flower's aggregation)."""
        records = [RecordDict({"arrays": r.content["arrays"], "metrics": r.content["metrics"]})
                   for r in replies]
        avg = to_numpy(aggregate_arrayrecords(records, "num-examples"))
        self.weights = {k: avg[k].astype(self.weights[k].dtype) for k in self.weights}
        return {f"train_{k}": v for k, v in weighted_metrics(replies).items()}


def build(setup: StrategySetup) -> FedAvg:
    """Strategy factory registered for ``fedavg``."""
    return FedAvg(setup)
