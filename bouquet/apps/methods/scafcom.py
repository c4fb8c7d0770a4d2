"""Registration of the SCAFFOLD family and the compressed-FedAvg baselines."""

from bouquet.apps.registry import Method
from bouquet.strategies.compressed_fedavg import FedAvgCompressedConfig, FedEFConfig
from bouquet.strategies.scaffold import ScafcomConfig, ScaffoldConfig, ScallionConfig

_SCAFFOLD_PAPER = ("Karimireddy et al., SCAFFOLD: Stochastic Controlled Averaging for Federated "
                   "Learning, ICML 2020")
_SCAFCOM_PAPER = ("Huang, Li, Li, Stochastic Controlled Averaging for Federated Learning with "
                  "Communication Compression, ICLR 2024 (arXiv 2308.08165)")
_BAD = "bouquet.strategies.scaffold:bad_replies"
_TEST = {"local-steps": 2}

METHODS = [
    Method(
        name="scaffold",
        description="SCAFFOLD (option II controls): two dense uplink vectors dy and dc",
        strategy="bouquet.strategies.scaffold:build_scaffold",
        client="bouquet.clients.scaffold:ScaffoldClient",
        default_task="digits-mlp",
        sections={"scaffold": ScaffoldConfig},
        family="scaffold", extra="scafcom", paper=_SCAFFOLD_PAPER,
        test_config=_TEST, bad_replies=_BAD,
    ),
    Method(
        name="scaffold-1up",
        description="single-uplink SCAFFOLD: one dense vector per client, same trajectory",
        strategy="bouquet.strategies.scaffold:build_single_uplink",
        client="bouquet.clients.scaffold:SingleUplinkClient",
        default_task="digits-mlp",
        sections={"scaffold": ScaffoldConfig},
        family="scaffold", extra="scafcom", paper=_SCAFCOM_PAPER,
        test_config=_TEST, bad_replies=_BAD,
    ),
    Method(
        name="scallion",
        description="SCALLION: single-uplink SCAFFOLD with unbiased compression (rand-k default)",
        strategy="bouquet.strategies.scaffold:build_scallion",
        client="bouquet.clients.scaffold:ScallionClient",
        default_task="digits-mlp",
        sections={"scallion": ScallionConfig},
        family="scaffold", extra="scafcom", paper=_SCAFCOM_PAPER,
        test_config=_TEST, bad_replies=_BAD,
    ),
    Method(
        name="scafcom",
        description="SCAFCOM: single-uplink SCAFFOLD with biased compression and local momentum",
        strategy="bouquet.strategies.scaffold:build_scafcom",
        client="bouquet.clients.scaffold:ScafcomClient",
        default_task="digits-mlp",
        sections={"scafcom": ScafcomConfig},
        family="scaffold", extra="scafcom", paper=_SCAFCOM_PAPER,
        test_config=_TEST, bad_replies=_BAD,
    ),
    Method(
        name="fedavg-compressed",
        description="FedAvg sending a compressed model change (top-k default, no error feedback)",
        strategy="bouquet.strategies.compressed_fedavg:build_fedavg_compressed",
        client="bouquet.clients.compressed_fedavg:FedAvgCompressedClient",
        default_task="digits-mlp",
        sections={"fedavg-compressed": FedAvgCompressedConfig},
        family="baseline", extra="scafcom",
        paper="McMahan et al., AISTATS 2017, with a compressed uplink",
        test_config=_TEST, bad_replies=_BAD,
    ),
    Method(
        name="fed-ef",
        description="Fed-EF: FedAvg with compressed uplink and client error feedback",
        strategy="bouquet.strategies.compressed_fedavg:build_fed_ef",
        client="bouquet.clients.compressed_fedavg:FedEFClient",
        default_task="digits-mlp",
        sections={"fed-ef": FedEFConfig},
        family="baseline", extra="scafcom",
        paper="Li & Li, Analysis of Error Feedback in Federated Non-Convex Optimization with "
        "Biased Compression, ICML 2023",
        test_config=_TEST, bad_replies=_BAD,
    ),
]
