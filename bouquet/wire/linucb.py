"""FedLinUCB's wire names: the shared statistics down, a silo's statistics (or codes) up.

Downlink: ArrayRecord :data:`GLOBAL_RECORD` with the aggregated Gram matrix :data:`GRAM` (d x d
float64) and vector :data:`VEC` (d float64), and the round config announcing :data:`ANNOUNCED`.
Uplink: ArrayRecord :data:`NODE_RECORD` holding either :data:`GRAM` and :data:`VEC` or, for the
vector-sum variant, the int32 :data:`CODES`; the metrics carry :data:`REGRET_METRIC`.
"""

from __future__ import annotations

#: Downlink ArrayRecord with the shared statistics.
GLOBAL_RECORD = "global"
#: Uplink ArrayRecord with one silo's statistics.
NODE_RECORD = "node"
#: Array names: Gram matrix, reward-weighted feature vector, vector-sum codes.
GRAM = "gram"
VEC = "vec"
CODES = "codes"
#: Reply metric: the silo's cumulative regret.
REGRET_METRIC = "cum-regret"
#: Round-config keys the server announces and every silo checks against its own config.
ANNOUNCED = ("num-silos", "horizon-rounds", "batch-steps")
