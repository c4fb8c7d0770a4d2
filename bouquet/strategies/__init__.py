"""Server side of every method: numpy/scipy/flwr only, never torch.

``from bouquet.strategies import FedAvg`` works on a server installed with plain
``pip install flwr-bouquet``.
"""

from bouquet.strategies.base import BouquetStrategy, NodeReply, RoundLog, StrategySetup
from bouquet.strategies.fedavg import FedAvg
from bouquet.strategies.model import ModelStrategy

__all__ = ["BouquetStrategy", "FedAvg", "ModelStrategy", "NodeReply", "RoundLog", "StrategySetup"]
