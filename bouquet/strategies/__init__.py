"""Server side of every method as Flower strategies: numpy/scipy/flwr only, never torch.

Every class is built with keyword arguments and run by Flower's own ``strategy.start()``; a
server installed with plain ``pip install flwr-bouquet`` imports any of them::

    from bouquet.strategies import Scafcom

    strategy = Scafcom(beta=0.2, compressor="topk", fraction_train=0.5)
    result = strategy.start(grid=grid, initial_arrays=arrays, num_rounds=10)

The names below are imported on first use (PEP 562 ``__getattr__``), not with the package:
a node that imports one submodule (``bouquet.strategies.checkpoint``, a method's config
dataclass) does not pay for every strategy module and scipy with it (issue 17, target 3).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # what mypy and IDEs see; at run time the names load on first use
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

#: Public name -> the submodule that defines it.
_HOMES: dict[str, str] = {
    "StrategySetup": "arguments",
    "BouquetStrategy": "base",
    "FedAvgCompressed": "compressed_fedavg",
    "FedEF": "compressed_fedavg",
    "FedAvg": "fedavg",
    "FedCG": "fedcg",
    "FedKSeed": "fedkseed",
    "FedKSeedPro": "fedkseed",
    "FedLinUCB": "linucb",
    "FedIT": "lora",
    "FedSB": "lora",
    "FFALoRA": "lora",
    "LoraStrategy": "lora",
    "ModelStrategy": "model",
    "NodeReply": "round_log",
    "RoundLog": "round_log",
    "Scafcom": "scaffold",
    "Scaffold": "scaffold",
    "Scallion": "scaffold",
    "SingleUplink": "scaffold",
}

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


def __getattr__(name: str) -> Any:
    """Import the submodule that defines ``name`` and return it (cached in the package)."""
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{home}"), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
