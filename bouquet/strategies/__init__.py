"""Server side of every method as Flower strategies: numpy/scipy/flwr only, never torch.

Every class is built with keyword arguments and run by Flower's own ``strategy.start()``; a
server installed with plain ``pip install flwr-bouquet`` imports any of them::

    from bouquet.strategies import Scafcom

    strategy = Scafcom(beta=0.2, compressor="topk", fraction_train=0.5)
    result = strategy.start(grid=grid, initial_arrays=arrays, num_rounds=10)
"""

from bouquet.strategies.arguments import StrategySetup
from bouquet.strategies.base import BouquetStrategy
from bouquet.strategies.compressed_fedavg import FedAvgCompressed, FedEF
from bouquet.strategies.fedavg import FedAvg
from bouquet.strategies.fedcg import FedCG
from bouquet.strategies.fedkseed import FedKSeed, FedKSeedPro
from bouquet.strategies.linucb import FedLinUCB
from bouquet.strategies.lora import FedIT, FedSB, FFALoRA, LoraStrategy
from bouquet.strategies.model import ModelStrategy
from bouquet.strategies.round_log import NodeReply, RoundLog
from bouquet.strategies.scaffold import Scafcom, Scaffold, Scallion, SingleUplink

__all__ = [
    "BouquetStrategy",
    "FFALoRA",
    "FedAvg",
    "FedAvgCompressed",
    "FedCG",
    "FedEF",
    "FedIT",
    "FedKSeed",
    "FedKSeedPro",
    "FedLinUCB",
    "FedSB",
    "LoraStrategy",
    "ModelStrategy",
    "NodeReply",
    "RoundLog",
    "Scafcom",
    "Scaffold",
    "Scallion",
    "SingleUplink",
    "StrategySetup",
]
