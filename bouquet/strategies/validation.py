"""Reply validation helpers shared by every strategy.

A strategy's ``validate_reply`` calls these; each raises :class:`InvalidReply` with a short reason
that ends up in the round's log and ``metrics.jsonl``. They check record presence, array names,
shapes, dtypes and finiteness, and metric types and ranges (DESIGN §4, "Replies").
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

import numpy as np
from flwr.app import ArrayRecord, ConfigRecord, MetricRecord, RecordDict

ShapeSpec = tuple[int, ...]


class InvalidReply(ValueError):
    """A reply that breaks the method's protocol; the reason is logged and counted."""


def array_record(content: RecordDict, name: str) -> ArrayRecord:
    """Return the ArrayRecord ``name`` or raise :class:`InvalidReply`."""
    rec = content.get(name) if name in content else None
    if not isinstance(rec, ArrayRecord):
        raise InvalidReply(f"missing array record {name!r}")
    return rec


def metric_record(content: RecordDict, name: str = "metrics") -> MetricRecord:
    """Return the MetricRecord ``name`` or raise :class:`InvalidReply`."""
    rec = content.get(name) if name in content else None
    if not isinstance(rec, MetricRecord):
        raise InvalidReply(f"missing metric record {name!r}")
    return rec


def config_record(content: RecordDict, name: str) -> ConfigRecord:
    """Return the ConfigRecord ``name`` or raise :class:`InvalidReply`."""
    rec = content.get(name) if name in content else None
    if not isinstance(rec, ConfigRecord):
        raise InvalidReply(f"missing config record {name!r}")
    return rec


def expect_records(content: RecordDict, allowed: Iterable[str]) -> None:
    """Reject records that the protocol does not know (they would be silently ignored)."""
    extra = sorted(set(content.keys()) - set(allowed))
    if extra:
        raise InvalidReply(f"unexpected records {extra}")


def arrays(
    content: RecordDict,
    name: str,
    spec: Mapping[str, tuple[ShapeSpec, np.dtype | type]],
    *,
    finite: bool = True,
) -> dict[str, np.ndarray]:
    """Decode an ArrayRecord and check it against ``spec`` (names, shapes, dtypes, finiteness).

    Parameters
    ----------
    content : RecordDict
        The reply content.
    name : str
        Record name.
    spec : Mapping[str, tuple[tuple[int, ...], dtype]]
        Exactly the expected array names, each with its shape and dtype.
    finite : bool
        Also reject NaN and infinities (for floating dtypes).

    """
    rec = array_record(content, name)
    if set(rec.keys()) != set(spec):
        missing = sorted(set(spec) - set(rec.keys()))
        extra = sorted(set(rec.keys()) - set(spec))
        raise InvalidReply(f"{name}: array names differ (missing {missing[:3]}, extra {extra[:3]})")
    out: dict[str, np.ndarray] = {}
    for key, (shape, dtype) in spec.items():
        arr = _decode(rec, name, key)
        out[key] = check_array(arr, f"{name}/{key}", shape, dtype, finite=finite)
    return out


def _decode(rec: ArrayRecord, name: str, key: str) -> np.ndarray:
    try:
        return rec[key].numpy()
    except Exception as exc:  # a payload that does not decode
        raise InvalidReply(f"{name}/{key}: cannot decode ({type(exc).__name__})") from exc


def check_array(
    arr: np.ndarray,
    label: str,
    shape: ShapeSpec | None,
    dtype: np.dtype | type | None,
    *,
    finite: bool = True,
) -> np.ndarray:
    """Check one array's shape, dtype and finiteness; return it."""
    if shape is not None and tuple(arr.shape) != tuple(shape):
        raise InvalidReply(f"{label}: shape {tuple(arr.shape)} != expected {tuple(shape)}")
    if dtype is not None and arr.dtype != np.dtype(dtype):
        raise InvalidReply(f"{label}: dtype {arr.dtype} != expected {np.dtype(dtype)}")
    if finite and np.issubdtype(arr.dtype, np.floating) and not np.all(np.isfinite(arr)):
        raise InvalidReply(f"{label}: non-finite values")
    return arr


def metric(
    content: RecordDict,
    key: str,
    *,
    record: str = "metrics",
    kind: type = float,
    min: float | None = None,  # noqa: A002
    max: float | None = None,  # noqa: A002
) -> float:
    """Read one scalar metric and check its type and range."""
    rec = metric_record(content, record)
    if key not in rec:
        raise InvalidReply(f"{record}: missing metric {key!r}")
    value = rec[key]
    if isinstance(value, list) or isinstance(value, bool):
        raise InvalidReply(f"{record}/{key}: expected a scalar, got {type(value).__name__}")
    if kind is int and not isinstance(value, int):
        raise InvalidReply(f"{record}/{key}: expected an int, got {value!r}")
    v = float(value)
    if not np.isfinite(v):
        raise InvalidReply(f"{record}/{key}: non-finite value")
    if min is not None and v < min:
        raise InvalidReply(f"{record}/{key}: {v:g} below {min:g}")
    if max is not None and v > max:
        raise InvalidReply(f"{record}/{key}: {v:g} above {max:g}")
    return v


def num_examples(content: RecordDict, record: str = "metrics") -> int:
    """The positive ``num-examples`` weight of a reply."""
    return int(metric(content, "num-examples", record=record, kind=int, min=1))
