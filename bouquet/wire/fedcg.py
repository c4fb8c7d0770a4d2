"""FedCG's wire: the per-client ratio the server plans, the compressed payload, the reports.

The server sends each client its compression ratio (:data:`RATIO_KEY`); the client compresses its
update with :func:`wire_compressor` at that ratio and reports its measured step time and uplink.
"""

from __future__ import annotations

from bouquet.compression import Compressor, Identity, TopK
from bouquet.compression.base import count_for

#: Record holding the compressed update in a reply.
PAYLOAD_RECORD = "payload"
#: Config key of the keep-ratio sent to each client.
RATIO_KEY = "fedcg.ratio"
#: Reply metrics a node adds for the measured system model.
STEP_TIME_METRIC = "step-time-s"
UPLINK_METRIC = "uplink-mbps"
#: Node-config key a deployed node may set to report its uplink (megabits per second).
UPLINK_NODE_KEY = "uplink-mbps"


def wire_compressor(ratio: float, dim: int) -> Compressor:
    """Return the wire compressor at ``ratio``: identity if every coordinate is kept, else top-k."""
    k = count_for(ratio, 0, dim)
    return Identity() if k >= dim else TopK(k=k)
