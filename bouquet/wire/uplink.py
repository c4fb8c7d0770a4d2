"""Names every compressed-uplink method (Scaffold family, FedAvg-compressed) uses on the wire."""

from __future__ import annotations

from typing import Any

from bouquet.compression import Compressor, make_compressor

#: Message config key: the last round whose reply from this client the server aggregated.
COMMIT_ROUND = "commit-round"
#: Integer metric every reply carries: local optimiser steps taken (K_i).
STEPS_METRIC = "local-steps"


def uplink_compressor(section: Any) -> Compressor:
    """Build the compressor a config section names (identity when it has no compressor keys)."""
    name = getattr(section, "compressor", "identity")
    ratio, k = getattr(section, "compressor_ratio", 0.0), getattr(section, "compressor_k", 0)
    params: dict[str, Any] = {
        "topk": {"ratio": ratio, "k": k},
        "randk": {"ratio": ratio, "k": k},
        "fedzip": {"ratio": ratio},
        "qsgd": {"levels": getattr(section, "compressor_levels", 4),
                 "bucket": getattr(section, "compressor_bucket", 512)},
        "sparseloco": {"chunk": getattr(section, "compressor_chunk", 4096), "k": k,
                       "ratio": ratio, "bits": getattr(section, "compressor_bits", 2)},
    }.get(name, {})
    return make_compressor(name, **params)
