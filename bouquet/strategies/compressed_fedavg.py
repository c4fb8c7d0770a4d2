"""FedAvg with a compressed uplink, with and without error feedback (server side).

* **fedavg-compressed**: every client sends ``C(x - y_i)`` (its model change, sign flipped: a
  pseudo-gradient); the server applies ``x <- x - eta_g mean_i C(x - y_i)``. With a biased
  compressor such as top-k and no error feedback this is the baseline the SCAFCOM paper expects
  to fall behind.
* **fed-ef** (Li & Li, "Analysis of Error Feedback in Federated Non-Convex Optimization with
  Biased Compression", ICML 2023): the same server; each client adds its residual before
  compressing, ``p_i = x - y_i + decay e_i``, sends ``C(p_i)`` and keeps ``e_i <- p_i - C(p_i)``
  in ``context.state`` (``decay < 1`` gives SparseLoCo's decayed buffer).

The mean is unweighted, as in the algorithms (FedAvg in this package weights by sample counts).
"""

from __future__ import annotations

import numpy as np

from bouquet.strategies.arguments import StrategySetup
from bouquet.strategies.round_log import NodeReply
from bouquet.strategies.sections.compressed_fedavg import FedAvgCompressedConfig, FedEFConfig
from bouquet.strategies.uplink import VectorUplinkStrategy


class FedAvgCompressed(VectorUplinkStrategy):
    """FedAvg with a compressed uplink: ``x <- x - eta_g mean_i decode(payload_i)``.

    Its clients send ``C(x - y_i)`` in a ``payload`` record (bouquet's client half), so it does
    not talk to a plain Flower ClientApp.
    """

    prefix = "fedavg-compressed"
    method_name = "fedavg-compressed"
    config_sections = {"fedavg-compressed": FedAvgCompressedConfig}

    def apply(self, rnd: int, vectors: list[list[np.ndarray]], replies: list[NodeReply]
              ) -> dict[str, float]:
        """Average the decoded pseudo-gradients and step."""
        mean = np.mean([vec[0] for vec in vectors], axis=0, dtype=np.float64)
        self.move_model(-self.cfg.server_lr * mean)
        return {"update_norm": float(np.linalg.norm(mean))}


class FedEF(FedAvgCompressed):
    """Fed-EF (Li & Li, ICML 2023): FedAvg-compressed's server; the residual lives on the clients."""

    prefix = "fed-ef"
    method_name = "fed-ef"
    config_sections = {"fed-ef": FedEFConfig}


def build_fedavg_compressed(setup: StrategySetup) -> FedAvgCompressed:
    """Strategy factory of ``fedavg-compressed``."""
    return FedAvgCompressed.from_setup(setup)


def build_fed_ef(setup: StrategySetup) -> FedEF:
    """Strategy factory of ``fed-ef``."""
    return FedEF.from_setup(setup)
