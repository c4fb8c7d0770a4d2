"""Registration of the federated LoRA family: FedIT, FFA-LoRA and Fed-SB."""

from bouquet.apps.registry import Method
from bouquet.privacy.dp_config import DPConfig
from bouquet.strategies.lora import FedSBConfig, LoraConfig

_TEST = {"local-steps": 2, "batch-size": 8, "lora.rank": 2, "lr": 0.01}

METHODS = [
    Method(
        name="fedit",
        description="FedIT: LoRA A and B trained and averaged (inexact aggregation)",
        strategy="bouquet.strategies.lora:build_fedit",
        client="bouquet.clients.lora:FedITClient",
        default_task="rt-minilm",
        sections={"lora": LoraConfig, "dp": DPConfig},
        test_task="tiny-bert-cls",
        family="lora",
        extra="lora",
        paper="Zhang et al., Towards Building the Federated GPT: Federated Instruction Tuning, "
        "ICASSP 2024",
        test_config=_TEST,
        bad_replies="bouquet.strategies.lora:bad_replies",
    ),
    Method(
        name="ffa-lora",
        description="FFA-LoRA: A frozen at a seed-derived init, only B trained and sent (exact)",
        strategy="bouquet.strategies.lora:build_ffa",
        client="bouquet.clients.lora:FFALoraClient",
        default_task="rt-minilm",
        sections={"lora": LoraConfig, "dp": DPConfig},
        test_task="tiny-bert-cls",
        family="lora",
        extra="lora",
        paper="Sun et al., Improving LoRA in Privacy-preserving Federated Learning, ICLR 2024",
        test_config=_TEST,
        bad_replies="bouquet.strategies.lora:bad_replies",
    ),
    Method(
        name="fed-sb",
        description="Fed-SB: LoRA-SB W0 + B R A, only the r x r R trained and sent (exact)",
        strategy="bouquet.strategies.lora:build_fedsb",
        client="bouquet.clients.lora:FedSBClient",
        default_task="rt-minilm",
        sections={"lora": LoraConfig, "dp": DPConfig, "fed-sb": FedSBConfig},
        test_task="tiny-bert-cls",
        family="lora",
        extra="lora",
        paper="Singhal et al., Fed-SB: A Silver Bullet for Extreme Communication Efficiency and "
        "Performance in (Private) Federated LoRA Fine-Tuning, arXiv 2502.15436, 2025",
        test_config=_TEST,
        bad_replies="bouquet.strategies.lora:bad_replies",
    ),
]
