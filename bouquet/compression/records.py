"""Packing payloads into Flower records and back.

A payload travels as one ``ArrayRecord`` whose array names are the compressor's field names
(``shape``, ``indices``, ``values``...); the record's own name in the message is chosen by the
method (:data:`PAYLOAD_RECORD` by default). Unpacking checks the names and dtypes, so a payload
that does not decode raises :class:`PayloadError`, never anything else.
"""

from __future__ import annotations

import numpy as np
from flwr.app import Array, ArrayRecord, RecordDict

from bouquet.compression.base import Compressor, Payload, check_fields
from bouquet.compression.errors import PayloadError

#: Default record name of a compressed vector in a message.
PAYLOAD_RECORD = "payload"


def to_array_record(payload: Payload) -> ArrayRecord:
    """One ``Array`` per payload field, in the compressor's field order."""
    return ArrayRecord({k: Array(np.ascontiguousarray(v)) for k, v in payload.items()})


def from_array_record(record: ArrayRecord, compressor: Compressor) -> Payload:
    """Decode the arrays of ``record`` into a payload checked against ``compressor.fields``."""
    if not isinstance(record, ArrayRecord):
        raise PayloadError(f"expected an ArrayRecord, got {type(record).__name__}")
    try:
        payload = {k: record[k].numpy() for k in record.keys()}
    except Exception as exc:
        raise PayloadError(f"payload arrays do not decode ({type(exc).__name__})") from exc
    check_fields(payload, compressor.fields)
    return payload


def decode_record(
    content: RecordDict,
    compressor: Compressor,
    shape: tuple[int, ...],
    name: str = PAYLOAD_RECORD,
) -> np.ndarray:
    """Read, check and decompress the payload ``name`` of a message; it must have ``shape``.

    Raises
    ------
    PayloadError
        The record is missing, its arrays differ from the compressor's fields, the declared
        shape is not ``shape``, or the payload does not decode.

    """
    if name not in content or not isinstance(content[name], ArrayRecord):
        raise PayloadError(f"missing payload record {name!r}")
    payload = from_array_record(content[name], compressor)  # type: ignore[arg-type]
    declared = tuple(int(s) for s in payload["shape"])
    if declared != tuple(shape):
        raise PayloadError(f"payload shape {declared} != expected {tuple(shape)}")
    return compressor.decompress(payload)
