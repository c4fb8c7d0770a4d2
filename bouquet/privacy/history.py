"""The format of a DP-SGD accountant's history, as nodes store it (no torch, no Opacus).

A client's accountant (:class:`bouquet.privacy.accountant.ClientAccountant`) keeps
``[(noise_multiplier, sample_rate, steps), ...]`` as JSON in its node state; node persistence
(:mod:`bouquet.clients.persistence`) reads it back without importing Opacus.
"""

from __future__ import annotations

import json


def parse_history(raw: object) -> list[tuple[float, float, int]]:
    """An accountant history as stored (JSON ``[[sigma, q, steps], ...]``, or that list), typed.

    Raises
    ------
    ValueError
        If it is not such a list.

    """
    try:
        entries = raw if isinstance(raw, list) else json.loads(str(raw))
        return [(float(s), float(q), int(n)) for s, q, n in entries]
    except (TypeError, ValueError) as exc:  # json's JSONDecodeError is a ValueError
        raise ValueError(f"not an accountant history: {str(raw)[:80]!r} ({exc})") from exc
