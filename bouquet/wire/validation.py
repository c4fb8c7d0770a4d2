"""Reply validation helpers shared by every strategy.

A strategy's ``validate_reply`` calls these; each raises :class:`InvalidReply` with a short reason
that ends up in the round's log and ``metrics.jsonl``. They check record presence, array names,
shapes, dtypes and finiteness, and metric types and ranges (DESIGN §4, "Replies").
"""

from __future__ import annotations

import dataclasses
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


# ---------------------------------------------------------------------- hostile scalars
#: Largest partition id or example count a node may claim (a signed 32-bit int: anything larger
#: is a lie on any federation this project can run, and keeps later arithmetic exact).
MAX_COUNT = 2**31 - 1


def strict_int(value: object, label: str, *, min: int = 0, max: int = MAX_COUNT) -> int:  # noqa: A002
    """Return ``value`` if it is a plain ``int`` in ``[min, max]``, else raise :class:`InvalidReply`.

    Floats (``inf`` included), bools, bytes and strings are refused rather than coerced: a node
    that sends ``b"3"`` or ``3.0`` where the protocol says int is broken or hostile.
    """
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidReply(f"{label}: expected an int, got {type(value).__name__}")
    if value < min or value > max:
        raise InvalidReply(f"{label}: {value} outside [{min}, {max}]")
    return int(value)


@dataclasses.dataclass(frozen=True)
class Hello:
    """A node's parsed answer to the discovery query."""

    partition_id: int
    num_examples: int


def parse_hello(info: object) -> Hello:
    """Parse the ``info`` ConfigRecord of a hello answer (strict ints, bounded)."""
    if not isinstance(info, ConfigRecord):
        raise InvalidReply("hello: missing config record 'info'")
    if "partition-id" not in info:
        raise InvalidReply("hello: no partition-id")
    pid = strict_int(info["partition-id"], "hello/partition-id")
    size = strict_int(info.get("num-examples", 0), "hello/num-examples")
    return Hello(pid, size)


def aux_metrics(content: RecordDict, record: str = "metrics") -> None:
    """Every value of a reply's MetricRecord is a finite int/float scalar (no lists, no bools).

    Auxiliary metrics (``train_loss``, timings) are averaged and logged by the server: a NaN or a
    list there must reject the reply, never reach the averages or the results files.
    """
    if record not in content:
        return
    rec = metric_record(content, record)
    for k, value in rec.items():
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise InvalidReply(f"{record}/{k}: expected a scalar, got {type(value).__name__}")
        if not np.isfinite(float(value)):
            raise InvalidReply(f"{record}/{k}: non-finite value")


#: Evaluation metrics whose range is known: a value outside it is a lie, not a result.
UNIT_INTERVAL_METRICS = ("accuracy", "exact_match", "f1")


def evaluation_reply(content: RecordDict, *, max_examples: int) -> int:
    """Check a federated-evaluation reply; return its (validated) ``num-examples``.

    Every metric must be a finite scalar, accuracy-like metrics (:data:`UNIT_INTERVAL_METRICS`)
    lie in [0, 1], losses are non-negative, and the weight is an int in ``[1, max_examples]``.
    """
    expect_records(content, ("metrics",))
    aux_metrics(content)
    rec = metric_record(content)
    n = strict_int(rec.get("num-examples"), "metrics/num-examples", min=1, max=max_examples)
    for k, value in rec.items():
        x = float(value)  # type: ignore[arg-type]
        if any(k == m or k.endswith(f"_{m}") for m in UNIT_INTERVAL_METRICS) and not 0 <= x <= 1:
            raise InvalidReply(f"metrics/{k}: {x:g} outside [0, 1]")
        if "loss" in k and x < 0:
            raise InvalidReply(f"metrics/{k}: negative loss {x:g}")
    return n


def positive_semidefinite(mat: np.ndarray, label: str, slack: float = 0.0) -> None:
    """Reject a symmetric matrix whose smallest eigenvalue is below ``-slack``."""
    lowest = float(np.linalg.eigvalsh(mat)[0])
    if lowest < -slack:
        raise InvalidReply(f"{label}: smallest eigenvalue {lowest:.4g} below {-slack:.4g} "
                           "(not a possible Gram matrix)")


def l2_norm(arrays: Iterable[np.ndarray]) -> float:
    """Joint L2 norm of several arrays, computed in float64 (float32 extremes do not overflow)."""
    return float(np.sqrt(sum(float(np.sum(np.square(np.asarray(a, dtype=np.float64))))
                             for a in arrays)))


def update_norm(new: Mapping[str, np.ndarray], old: Mapping[str, np.ndarray]) -> float:
    """L2 norm of ``new - old`` over the arrays both share (in float64)."""
    return l2_norm(np.asarray(new[k], np.float64) - np.asarray(old[k], np.float64)
                   for k in new if k in old)
