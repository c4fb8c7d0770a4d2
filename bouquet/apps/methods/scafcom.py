"""Registration of the SCAFFOLD family and the compressed-FedAvg baselines."""

from bouquet.registration import Method, Variant
from bouquet.strategies.sections.compressed_fedavg import FedAvgCompressedConfig, FedEFConfig
from bouquet.strategies.sections.scaffold import ScafcomConfig, ScaffoldConfig, ScallionConfig

_SCAFFOLD = "bouquet.strategies.scaffold"
_SCAFFOLD_CLIENTS = "bouquet.clients.scaffold"
_COMPRESSED = "bouquet.strategies.compressed_fedavg"
_COMPRESSED_CLIENTS = "bouquet.clients.compressed_fedavg"
_SCAFCOM_PAPER = ("Huang, Li, Li, Stochastic Controlled Averaging for Federated Learning with "
                  "Communication Compression, ICLR 2024 (arXiv 2308.08165)")

METHODS = [
    Method(
        name="scaffold",
        description="SCAFFOLD: two dense uplink vectors dy and dc (option II controls, or "
        "option I with scaffold.controls=I)",
        strategy=f"{_SCAFFOLD}:build_scaffold",
        client=f"{_SCAFFOLD_CLIENTS}:ScaffoldClient",
        default_task="digits-mlp",
        sections={"scaffold": ScaffoldConfig},
        family="scaffold", extra="scafcom",
        paper="Karimireddy et al., SCAFFOLD: Stochastic Controlled Averaging for Federated "
        "Learning, ICML 2020",
        test_config={"local-steps": 2}, bad_replies=f"{_SCAFFOLD}:bad_replies",
        variants=(
            Variant("scaffold-1up",
                    "single-uplink SCAFFOLD: one dense vector per client, same trajectory "
                    "(up to float32 rounding)",
                    strategy=f"{_SCAFFOLD}:build_single_uplink",
                    client=f"{_SCAFFOLD_CLIENTS}:SingleUplinkClient", paper=_SCAFCOM_PAPER),
            Variant("scallion",
                    "SCALLION: single-uplink SCAFFOLD with unbiased compression (rand-k default)",
                    strategy=f"{_SCAFFOLD}:build_scallion",
                    client=f"{_SCAFFOLD_CLIENTS}:ScallionClient",
                    sections={"scallion": ScallionConfig}, paper=_SCAFCOM_PAPER),
            Variant("scafcom",
                    "SCAFCOM: single-uplink SCAFFOLD with biased compression and local momentum",
                    strategy=f"{_SCAFFOLD}:build_scafcom",
                    client=f"{_SCAFFOLD_CLIENTS}:ScafcomClient",
                    sections={"scafcom": ScafcomConfig}, paper=_SCAFCOM_PAPER),
        ),
    ),
    Method(
        name="fedavg-compressed",
        description="FedAvg sending a compressed model change (top-k default, no error feedback)",
        strategy=f"{_COMPRESSED}:build_fedavg_compressed",
        client=f"{_COMPRESSED_CLIENTS}:FedAvgCompressedClient",
        default_task="digits-mlp",
        sections={"fedavg-compressed": FedAvgCompressedConfig},
        family="baseline", extra="scafcom",
        paper="McMahan et al., AISTATS 2017, with a compressed uplink",
        test_config={"local-steps": 2}, bad_replies=f"{_SCAFFOLD}:bad_replies",
        variants=(
            Variant("fed-ef", "Fed-EF: FedAvg with compressed uplink and client error feedback",
                    strategy=f"{_COMPRESSED}:build_fed_ef", client=f"{_COMPRESSED_CLIENTS}:FedEFClient",
                    sections={"fed-ef": FedEFConfig},
                    paper="Li & Li, Analysis of Error Feedback in Federated Non-Convex "
                    "Optimization with Biased Compression, ICML 2023"),
        ),
    ),
]
