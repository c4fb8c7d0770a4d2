"""Registration of the federated LoRA family: FedIT with its FFA-LoRA and Fed-SB variants."""

from bouquet.privacy.dp_config import DPConfig
from bouquet.registration import Method, Variant
from bouquet.strategies.sections.lora import FedSBConfig, LoraConfig

_STRATEGIES = "bouquet.strategies.lora"
_CLIENTS = "bouquet.clients.lora"

METHODS = [
    Method(
        name="fedit",
        description="FedIT: LoRA A and B trained and averaged (inexact aggregation)",
        strategy=f"{_STRATEGIES}:build_fedit",
        client=f"{_CLIENTS}:FedITClient",
        default_task="rt-minilm",
        sections={"lora": LoraConfig, "dp": DPConfig},
        test_task="tiny-bert-cls",
        family="lora",
        extra="lora",
        paper="Zhang et al., Towards Building the Federated GPT: Federated Instruction Tuning, "
        "ICASSP 2024",
        test_config={"local-steps": 2, "batch-size": 8, "lora.rank": 2, "lr": 0.01},
        bad_replies=f"{_STRATEGIES}:bad_replies",
        # dp.target-epsilon calibrates the noise for num-server-rounds: a resume may not change it
        planned_rounds="bouquet.privacy.dp_config:planned_rounds",
        variants=(
            Variant("ffa-lora",
                    "FFA-LoRA: A frozen at a seed-derived init, only B trained and sent (exact)",
                    strategy=f"{_STRATEGIES}:build_ffa", client=f"{_CLIENTS}:FFALoraClient",
                    paper="Sun et al., Improving LoRA in Privacy-preserving Federated Learning, "
                    "ICLR 2024"),
            Variant("fed-sb",
                    "Fed-SB: LoRA-SB W0 + B R A, only the r x r R trained and sent (exact)",
                    strategy=f"{_STRATEGIES}:build_fedsb", client=f"{_CLIENTS}:FedSBClient",
                    sections={"lora": LoraConfig, "dp": DPConfig, "fed-sb": FedSBConfig},
                    paper="Singhal et al., Fed-SB: A Silver Bullet for Extreme Communication "
                    "Efficiency and Performance in (Private) Federated LoRA Fine-Tuning, "
                    "arXiv 2502.15436, 2025"),
        ),
    ),
]
