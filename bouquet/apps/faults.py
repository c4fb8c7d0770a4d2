"""Hostile-node faults for the in-process grid (fuzz tests and the ``robust`` benchmark).

A fault edits one node's honest reply into what a hostile or broken node could send. Each
returns None when the reply has nothing it applies to (a reply without float arrays).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
from flwr.app import Array, ArrayRecord, RecordDict

Fault = Callable[[RecordDict], RecordDict | None]


def first_float_array(content: RecordDict) -> tuple[str, str] | None:
    """``(record, key)`` of the first non-empty floating-point array of a reply."""
    for rname, rec in content.items():
        if isinstance(rec, ArrayRecord):
            for key in rec.keys():
                arr = rec[key].numpy()
                if np.issubdtype(arr.dtype, np.floating) and arr.size:
                    return rname, key
    return None


def map_arrays(content: RecordDict, fn: Callable[[np.ndarray], np.ndarray], *,
               every: bool = False) -> RecordDict | None:
    """Apply ``fn`` to the first float array (or every float array) of a reply, keeping dtypes."""
    loc = first_float_array(content)
    if loc is None:
        return None
    out = RecordDict()
    for name, rec in content.items():
        if isinstance(rec, ArrayRecord) and (every or name == loc[0]):
            arrays = {}
            for k in rec.keys():
                a = rec[k].numpy()
                hit = np.issubdtype(a.dtype, np.floating) and (every or k == loc[1])
                arrays[k] = Array(fn(a.copy()).astype(a.dtype)) if hit else rec[k]
            rec = ArrayRecord(arrays)
        out[name] = rec
    return out


def scaled(factor: float, *, every: bool = False) -> Fault:
    """Multiply the reply's float array(s) by ``factor`` (finite, absurd)."""
    return lambda content: map_arrays(content, lambda a: a * factor, every=every)


def apply_fault(fault: Fault, content: RecordDict) -> RecordDict:
    """``fault(content)``, or the content unchanged when the fault does not apply to it."""
    return fault(content) or content


#: Faults by name, for ``BenchRun.faults``.
FAULTS: dict[str, Fault] = {
    "scale-1e4": scaled(1e4, every=True),
    "sign-flip-x3": scaled(-3.0, every=True),
}
