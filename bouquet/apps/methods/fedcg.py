"""Registration of FedCG with its ablations as variants, and FedCG's malformed replies."""

from __future__ import annotations

import numpy as np
from flwr.app import Array, ArrayRecord, RecordDict

from bouquet.compression.bitpack import index_width, pack_uint, unpack_uint
from bouquet.registration import Method, Variant
from bouquet.strategies.sections.fedcg import FedcgConfig
from bouquet.wire.fedcg import PAYLOAD_RECORD

_STRATEGIES = "bouquet.strategies.fedcg"

METHODS = [
    Method(
        name="fedcg",
        description="FedCG: facility-location client selection + per-client top-k ratios from "
        "an LP, alternated; error feedback",
        strategy=f"{_STRATEGIES}:build",
        client="bouquet.clients.fedcg:FedcgClient",
        default_task="digits-mlp",
        sections={"fedcg": FedcgConfig},
        family="fedcg",
        extra="fedcg",
        paper="Jiang, Xu, Xu, Wang & Qian, Heterogeneity-Aware Federated Learning with Adaptive "
        "Client Selection and Gradient Compression, IEEE INFOCOM 2023 (arXiv 2212.09483)",
        # Conformance runs: few steps; a large virtual model and no weight on compression error
        # make every ratio sparse, so the sparse-specific bad replies apply.
        test_config={"local-steps": 2, "fedcg.virtual-params": 1_000_000,
                     "fedcg.error-weight": 0.0},
        bad_replies="bouquet.apps.methods.fedcg:bad_replies",
        variants=(
            Variant("fedcg-select-only",
                    "FedCG ablation: FedCG's selection, one uniform top-k ratio",
                    strategy=f"{_STRATEGIES}:build_select_only"),
            Variant("fedcg-lp-only", "FedCG ablation: random selection, FedCG's LP ratios",
                    strategy=f"{_STRATEGIES}:build_lp_only"),
            Variant("random-topk",
                    "Random selection + uniform top-k with error feedback (ratio 1 = FedAvg)",
                    strategy=f"{_STRATEGIES}:build_random_topk"),
        ),
    ),
]


def _with_payload(content: RecordDict, arrays: dict[str, np.ndarray]) -> RecordDict:
    out = RecordDict()
    for name, rec in content.items():
        out[name] = ArrayRecord({k: Array(np.ascontiguousarray(a)) for k, a in arrays.items()}) \
            if name == PAYLOAD_RECORD else rec
    return out


def bad_replies(content: RecordDict) -> list[tuple[str, RecordDict]]:
    """Sparse payloads that decode structurally but break FedCG's protocol.

    More coordinates than the ratio allows, an index out of range, indices out of order, and
    fewer values than indices.
    """
    rec = content[PAYLOAD_RECORD]
    assert isinstance(rec, ArrayRecord)
    arrays = {k: rec[k].numpy() for k in rec.keys()}
    d = int(np.prod(arrays["shape"]))
    values = arrays["values"]
    cases: list[tuple[str, RecordDict]] = []
    if "indices" not in arrays:  # dense reply: one value too many is the only excess possible
        more = np.concatenate([values, values[:1]])
        return [("dense-one-value-too-many", _with_payload(content, {**arrays, "values": more}))]
    width = index_width(d)
    idx = unpack_uint(arrays["indices"], width, values.size)
    free = int(np.setdiff1d(np.arange(d), idx)[0])
    more_idx = np.sort(np.append(idx, free))
    more_val = np.zeros(more_idx.size, dtype=np.float32)
    more_val[np.searchsorted(more_idx, idx)] = values
    cases.append(("more-coordinates-than-ratio", _with_payload(
        content, {**arrays, "indices": pack_uint(more_idx, width), "values": more_val})))
    if d < (1 << width):
        out = idx.copy()
        out[-1] = d
        cases.append(("index-out-of-range", _with_payload(
            content, {**arrays, "indices": pack_uint(out, width)})))
    if idx.size >= 2:
        swapped = idx.copy()
        swapped[[0, 1]] = swapped[[1, 0]]
        cases.append(("indices-not-increasing", _with_payload(
            content, {**arrays, "indices": pack_uint(swapped, width)})))
    cases.append(("fewer-values-than-indices", _with_payload(
        content, {**arrays, "values": values[:-1]})))
    return cases
