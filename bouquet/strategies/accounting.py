"""Byte accounting: the size of what Flower actually puts on the wire.

Every figure is measured by serialising the message content with Flower's own serializer
(``recorddict_to_proto``) and taking the protobuf size, so record names, array headers and
framing are included. Method docs give the payload formula; tests compare the two.
"""

from __future__ import annotations

from flwr.app import RecordDict
from flwr.common.serde import recorddict_to_proto


def content_bytes(content: RecordDict) -> int:
    """Serialized size in bytes of a message's records, as Flower encodes them."""
    return int(recorddict_to_proto(content).ByteSize())
