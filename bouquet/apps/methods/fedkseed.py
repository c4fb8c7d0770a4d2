"""Registration of FedKSeed and its FedKSeed-Pro variant (zeroth-order tuning, K shared seeds)."""

from bouquet.registration import Method, Variant
from bouquet.strategies.sections.fedkseed import FedKSeedConfig

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
        paper="Qin et al., Federated Full-Parameter Tuning of Billion-Sized Language Models with "
        "Communication Cost under 18 Kilobytes, ICML 2024 (arXiv:2312.06353)",
        test_config={"fedkseed.num-seeds": 64, "fedkseed.local-steps": 4, "fedkseed.lr": 1e-3,
                     "fedkseed.eps": 1e-3, "batch-size": 32},
        bad_replies="bouquet.strategies.fedkseed:bad_replies",
        variants=(
            Variant("fedkseed-pro",
                    "FedKSeed with seed probabilities from the seeds' gradient history "
                    "(2K floats down)",
                    strategy="bouquet.strategies.fedkseed:FedKSeedPro"),
        ),
    ),
]
