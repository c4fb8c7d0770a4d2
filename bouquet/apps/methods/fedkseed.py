"""Registration of FedKSeed and FedKSeed-Pro (zeroth-order tuning with K shared seeds)."""

from bouquet.apps.registry import Method
from bouquet.strategies.fedkseed import FedKSeedConfig

_PAPER = ("Qin et al., Federated Full-Parameter Tuning of Billion-Sized Language Models with "
          "Communication Cost under 18 Kilobytes, ICML 2024 (arXiv:2312.06353)")
_TEST_CONFIG = {"fedkseed.num-seeds": 64, "fedkseed.local-steps": 4, "fedkseed.lr": 1e-3,
                "fedkseed.eps": 1e-3, "batch-size": 32}

METHODS = [
    Method(
        name="fedkseed",
        description="Zeroth-order full-parameter tuning: K shared seeds, (seed, scalar) pairs up, "
        "K floats down",
        strategy="bouquet.strategies.fedkseed:FedKSeed",
        client="bouquet.clients.fedkseed:FedKSeedClient",
        default_task="rt-minilm",
        sections={"fedkseed": FedKSeedConfig},
        test_task="digits-mlp",
        family="zeroth-order",
        extra="fedkseed",
        paper=_PAPER,
        test_config=_TEST_CONFIG,
        bad_replies="bouquet.strategies.fedkseed:bad_replies",
    ),
    Method(
        name="fedkseed-pro",
        description="FedKSeed with seed probabilities from the seeds' gradient history "
        "(2K floats down)",
        strategy="bouquet.strategies.fedkseed:FedKSeedPro",
        client="bouquet.clients.fedkseed:FedKSeedClient",
        default_task="rt-minilm",
        sections={"fedkseed": FedKSeedConfig},
        test_task="digits-mlp",
        family="zeroth-order",
        extra="fedkseed",
        paper=_PAPER,
        test_config=_TEST_CONFIG,
        bad_replies="bouquet.strategies.fedkseed:bad_replies",
    ),
]
