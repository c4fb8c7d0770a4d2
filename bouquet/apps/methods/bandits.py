"""Registration of the bandits family: federated LinUCB with its LDP and shuffle-DP variants.

Zhou & Chowdhury, "On Differentially Private Federated Linear Contextual Bandits", ICLR 2024.
Everything here is numpy only on both sides: a node running these methods never imports torch.
"""

from bouquet.registration import Method, Variant
from bouquet.strategies.sections.linucb import DPLinUCBConfig, LinUCBConfig

_STRATEGIES = "bouquet.strategies.linucb"
_CLIENTS = "bouquet.clients.linucb"
_DP_SECTIONS = {"linucb": LinUCBConfig, "dp-linucb": DPLinUCBConfig}

METHODS = [
    Method(
        name="fedlinucb",
        description="Federated LinUCB, fixed sync schedule, exact sums (non-private baseline)",
        strategy=f"{_STRATEGIES}:build_fedlinucb",
        client=f"{_CLIENTS}:FedLinUCBClient",
        default_task="synth-bandit",
        sections={"linucb": LinUCBConfig},
        family="bandits",
        extra="bandits",
        paper="Zhou & Chowdhury, On Differentially Private Federated Linear Contextual Bandits, "
        "ICLR 2024 (arXiv:2302.13945)",
        # Conformance runs: 4 silos' worth of tiny syncs, horizon fixed so resumes plan the
        # same tree.
        test_config={"linucb.batch-steps": 5, "linucb.horizon-rounds": 8, "linucb.num-silos": 4,
                     "synth-bandit.arms": 8, "synth-bandit.dim": 4},
        bad_replies=f"{_STRATEGIES}:bad_replies",
        # the horizon fixes the tree's depth and, in the private variants, the noise: a resume
        # may extend the run only within the same depth (linucb.horizon-rounds pins it)
        planned_rounds="bouquet.strategies.linucb_protocol:planned_rounds",
        variants=(
            Variant("dp-fedlinucb-ldp",
                    "FedLinUCB with silo-level LDP: distributed tree mechanism, Gaussian noise "
                    "per silo",
                    strategy=f"{_STRATEGIES}:build_ldp", client=f"{_CLIENTS}:LDPFedLinUCBClient",
                    sections=_DP_SECTIONS),
            Variant("dp-fedlinucb-sdp-amp",
                    "FedLinUCB with shuffle DP: smaller tree-node noise, a trusted shuffler "
                    "releases only their sum",
                    strategy=f"{_STRATEGIES}:build_sdp_amp",
                    client=f"{_CLIENTS}:SDPAmpFedLinUCBClient", sections=_DP_SECTIONS),
            Variant("dp-fedlinucb-sdp-vecsum",
                    "FedLinUCB with shuffle DP by a vector-sum protocol per tree node",
                    strategy=f"{_STRATEGIES}:build_sdp_vecsum",
                    client=f"{_CLIENTS}:SDPVecSumFedLinUCBClient", sections=_DP_SECTIONS),
        ),
    ),
]
