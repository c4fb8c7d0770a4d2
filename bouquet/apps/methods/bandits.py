"""Registration of the bandits family: federated LinUCB, silo-level LDP and shuffle-DP variants.

Zhou & Chowdhury, "On Differentially Private Federated Linear Contextual Bandits", ICLR 2024.
Everything here is numpy only on both sides: a node running these methods never imports torch.
"""

from bouquet.apps.registry import Method
from bouquet.strategies.linucb import DPLinUCBConfig, LinUCBConfig

PAPER = ("Zhou & Chowdhury, On Differentially Private Federated Linear Contextual Bandits, "
         "ICLR 2024 (arXiv:2302.13945)")
#: Conformance runs: 4 silos' worth of tiny syncs, horizon fixed so resumes plan the same tree.
TEST_CONFIG = {"linucb.batch-steps": 5, "linucb.horizon-rounds": 8, "linucb.num-silos": 4,
               "synth-bandit.arms": 8, "synth-bandit.dim": 4}
BAD_REPLIES = "bouquet.strategies.linucb:bad_replies"
CLIENTS = "bouquet.clients.linucb"

METHODS = [
    Method(
        name="fedlinucb",
        description="Federated LinUCB, fixed sync schedule, exact sums (non-private baseline)",
        strategy="bouquet.strategies.linucb:build_fedlinucb",
        client=f"{CLIENTS}:FedLinUCBClient",
        default_task="synth-bandit",
        sections={"linucb": LinUCBConfig},
        family="bandits",
        extra="bandits",
        paper=PAPER,
        test_config=TEST_CONFIG,
        bad_replies=BAD_REPLIES,
    ),
    Method(
        name="dp-fedlinucb-ldp",
        description="FedLinUCB with silo-level LDP: distributed tree mechanism, Gaussian noise "
        "per silo",
        strategy="bouquet.strategies.linucb:build_ldp",
        client=f"{CLIENTS}:LDPFedLinUCBClient",
        default_task="synth-bandit",
        sections={"linucb": LinUCBConfig, "dp-linucb": DPLinUCBConfig},
        family="bandits",
        extra="bandits",
        paper=PAPER,
        test_config=TEST_CONFIG,
        bad_replies=BAD_REPLIES,
    ),
    Method(
        name="dp-fedlinucb-sdp-amp",
        description="FedLinUCB with shuffle DP: smaller tree-node noise, a trusted shuffler "
        "releases only their sum",
        strategy="bouquet.strategies.linucb:build_sdp_amp",
        client=f"{CLIENTS}:SDPAmpFedLinUCBClient",
        default_task="synth-bandit",
        sections={"linucb": LinUCBConfig, "dp-linucb": DPLinUCBConfig},
        family="bandits",
        extra="bandits",
        paper=PAPER,
        test_config=TEST_CONFIG,
        bad_replies=BAD_REPLIES,
    ),
    Method(
        name="dp-fedlinucb-sdp-vecsum",
        description="FedLinUCB with shuffle DP by a vector-sum protocol per tree node",
        strategy="bouquet.strategies.linucb:build_sdp_vecsum",
        client=f"{CLIENTS}:SDPVecSumFedLinUCBClient",
        default_task="synth-bandit",
        sections={"linucb": LinUCBConfig, "dp-linucb": DPLinUCBConfig},
        family="bandits",
        extra="bandits",
        paper=PAPER,
        test_config=TEST_CONFIG,
        bad_replies=BAD_REPLIES,
    ),
]
