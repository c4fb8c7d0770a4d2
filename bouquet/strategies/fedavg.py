"""FedAvg (McMahan et al., AISTATS 2017) under the bouquet contracts.

The averaging is Flower's own (``aggregate_arrayrecords``); what this class adds is what the
project requires around it: seeded sampling with a deadline, per-reply validation (a bad reply is
dropped and counted instead of aborting the run), measured bytes and checkpointable state.

Two robust aggregation rules can replace the weighted mean (``fedavg.aggregator``): the
coordinate-wise median (Yin et al., ICML 2018) and the coordinate-wise trimmed mean (same paper;
Flower's ``trim_mean`` helper). Both ignore ``num-examples`` weights.
"""

from __future__ import annotations

import numpy as np
from flwr.app import RecordDict
from flwr.serverapp.strategy.fedtrimmedavg import trim_mean
from flwr.serverapp.strategy.strategy_utils import aggregate_arrayrecords

from bouquet.strategies.arguments import StrategySetup
from bouquet.strategies.model import ModelStrategy
from bouquet.strategies.round_log import NodeReply, train_metrics
from bouquet.strategies.sections.fedavg import FedAvgConfig
from bouquet.wire.arrays import to_numpy


class FedAvg(ModelStrategy):
    """Federated averaging (McMahan et al., AISTATS 2017) under bouquet's reply contracts.

    A drop-in for Flower's ``FedAvg``: it talks to any ClientApp that follows Flower's
    conventions (replies with ``arrays`` and ``metrics`` holding ``num-examples``) and runs
    through ``strategy.start(...)``. Bad replies are dropped and counted instead of aborting the
    round; weights are capped; a reply far off the median update norm is refused.

    Examples
    --------
    >>> from bouquet.strategies import FedAvg
    >>> strategy = FedAvg(fraction_train=0.5, min_available_nodes=2)  # doctest: +SKIP
    >>> result = strategy.start(grid=grid, initial_arrays=arrays, num_rounds=3)  # doctest: +SKIP

    """

    method_name = "fedavg"
    config_sections = {"fedavg": FedAvgConfig}

    @property
    def cfg(self) -> FedAvgConfig:
        """The ``fedavg`` section (aggregation rule)."""
        return self.setup.sections["fedavg"]  # type: ignore[no-any-return]

    def configure_round(self, rnd: int, partitions: list[int]) -> dict[int, RecordDict]:
        """Send the global model to every sampled partition."""
        return {pid: self.model_message(rnd) for pid in partitions}

    def validate_reply(self, rnd: int, partition_id: int, content: RecordDict) -> float:
        """A full model of the right shapes and dtypes, finite, with a positive weight."""
        arrays, _ = self.validate_model_reply(content)
        return self.model_update_norm(arrays)

    def aggregate_round(self, rnd: int, replies: list[NodeReply]) -> dict[str, float]:
        """Weighted average of the replies' models (Flower's aggregation), or a robust rule."""
        if self.cfg.aggregator == "mean":
            records = [RecordDict({"arrays": r.content["arrays"], "metrics": r.content["metrics"]})
                       for r in replies]
            avg = to_numpy(aggregate_arrayrecords(records, "num-examples"))
        else:
            models = [to_numpy(r.content["arrays"]) for r in replies]
            avg = {}
            for k in self.weights:
                stack = np.stack([m[k].astype(np.float64) for m in models])
                avg[k] = (np.median(stack, axis=0) if self.cfg.aggregator == "median"
                          else trim_mean(stack, self.cfg.trim_fraction))
        self.weights = {k: avg[k].astype(self.weights[k].dtype) for k in self.weights}
        return train_metrics(replies)


def build(setup: StrategySetup) -> FedAvg:
    """Strategy factory registered for ``fedavg``."""
    return FedAvg.from_setup(setup)
