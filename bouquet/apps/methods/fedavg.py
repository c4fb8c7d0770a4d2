"""FedAvg, the baseline every other method is compared with."""

from bouquet.registration import Method
from bouquet.strategies.sections.fedavg import FedAvgConfig

METHODS = [
    Method(
        name="fedavg",
        description="Federated averaging of full models (Flower's aggregation, bouquet contracts)",
        strategy="bouquet.strategies.fedavg:build",
        client="bouquet.clients.fedavg:FedAvgClient",
        default_task="digits-mlp",
        sections={"fedavg": FedAvgConfig},
        family="baseline",
        extra="torch",
        paper="McMahan et al., Communication-Efficient Learning of Deep Networks from "
        "Decentralized Data, AISTATS 2017",
        test_config={"local-steps": 2},
    )
]
