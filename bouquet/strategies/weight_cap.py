"""The median weight rule: how far one node's ``num-examples`` claim may weigh in an average.

One job: from the sizes the server knows (declared at hello, or claimed in earlier replies),
the largest weight a node may have. ``weight-cap-factor`` times their median bounds every
weight once three or more are known (one liar cannot move the median of three). With fewer
known in a federation that has more nodes (``discovery="sampled"`` with a tiny per-round sample,
``"grid"`` rounds of one or two replies), a median of one or two would be the liar's own claim:
the weights are then equal instead (each clipped to the smallest known size), so one node's
share of an average of ``k`` replies is at most ``1/k`` from round 1 on. The fall-back clips
training weights only: step budgets, declared sizes and evaluation weights keep the median
rule alone (``NodeDirectory.size_cap``), and it applies only where the federation holds nodes
whose size is not known yet (``"sampled"``; ``"grid"`` replies), never under ``"query"``.
A federation of one or two nodes in all keeps its plain weights (there is nothing to compare
with; ``max-num-examples`` bounds them).
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Collection

import numpy as np

log = logging.getLogger("bouquet")

#: Fewest known sizes whose median bounds a weight.
MEDIAN_MIN = 3


@dataclasses.dataclass(frozen=True)
class WeightBound:
    """The bound the rule gives: ``cap`` (inf: none), whether it is the equal-weights one.

    ``known`` is how many positive sizes it was computed from.
    """

    cap: float
    equal_weights: bool = False
    known: int = 0


def weight_bound(known: Collection[int], factor: float, *, federation: int) -> WeightBound:
    """The largest weight under the median rule (``weight-cap-factor`` = ``factor``).

    Parameters
    ----------
    known : collection of int
        The positive sizes the server knows, one per partition.
    factor : float
        ``weight-cap-factor``; 0 disables the rule.
    federation : int
        How many nodes the federation has; the equal-weights fall-back applies only while
        fewer sizes than this are known (0: never, the median rule alone).

    """
    sizes = [n for n in known if n > 0]
    known_count = len(sizes)
    if factor <= 0 or not sizes:
        return WeightBound(np.inf, known=known_count)
    if known_count >= MEDIAN_MIN:
        return WeightBound(factor * float(np.median(sizes)), known=known_count)
    if federation > known_count:
        return WeightBound(float(min(sizes)), equal_weights=True, known=known_count)
    return WeightBound(np.inf, known=known_count)


def note_equal_weights(already: bool, known: int) -> bool:
    """Log, the first time only (``already``), that weights fell back to equal; return True."""
    if not already:
        log.info("weights: only %d node size(s) known, fewer than the %d the median rule "
                 "(weight-cap-factor) needs: replies weigh equally (each num-examples clipped "
                 "to the smallest known size) until %d are known", known, MEDIAN_MIN, MEDIAN_MIN)
    return True
