"""Compressors, error feedback and wire packing (numpy and flwr records only).

Servers and clients share this package. Stable API, used by SCAFFOLD/SCALLION/SCAFCOM, FedCG and
the compressed baselines.

Build a compressor by name::

    from bouquet.compression import make_compressor, ErrorFeedback
    comp = make_compressor("topk", ratio=0.01)   # identity | topk | randk | qsgd | sign |
                                                 # fedzip | sparseloco

Every :class:`Compressor` has

* ``compress(x, rng) -> payload``: ``payload`` is a ``dict[str, np.ndarray]`` with fixed keys
  (``comp.fields``: name -> dtype, always including ``shape``); random compressors draw only from
  the ``numpy.random.Generator`` given, so a seeded generator makes them deterministic;
* ``decompress(payload) -> x_hat`` (float32, the input's shape); raises :class:`PayloadError`
  for anything that does not decode (missing field, wrong dtype or length, index out of range,
  non-finite value);
* ``size_bytes(shape)``: the exact payload size for that input shape (None when it depends on
  the data, as for FedZip), and :func:`encoded_bytes(payload) <encoded_bytes>` for any payload
  (sum of the arrays' bytes; bit-packed fields make this the documented bit count rounded up to
  bytes per field);
* ``guarantee(d) -> Guarantee(unbiased, omega, delta)``: unbiased with variance factor ``omega``,
  or contractive with ``delta`` (``None`` when no positive factor is guaranteed).

Error feedback wraps any compressor; its residual is state the caller keeps (``context.state``
through ``NodeState``)::

    ef = ErrorFeedback(comp, decay=1.0)          # decay < 1: SparseLoCo's decayed buffer
    residual = ef.init(x.shape)                  # or the stored one
    payload, sent, residual = ef.step(x, residual, rng)

On the wire a payload is one ``ArrayRecord`` (array names = payload keys)::

    content["payload"] = to_array_record(payload)                # client
    x_hat = decode_record(content, comp, expected_shape)         # server; PayloadError if bad
    payload = from_array_record(record, comp)                    # checked keys and dtypes

``bouquet.compression.bitpack`` holds the bit-packing and varint helpers. See docs/compressors.md
for the table of properties and bits.
"""

from bouquet.compression.base import Compressor, Guarantee, Payload, encoded_bytes
from bouquet.compression.error_feedback import ErrorFeedback
from bouquet.compression.errors import PayloadError
from bouquet.compression.factory import COMPRESSORS, make_compressor
from bouquet.compression.fedzip import FedZip
from bouquet.compression.qsgd import QSGD
from bouquet.compression.records import (
    PAYLOAD_RECORD,
    decode_record,
    from_array_record,
    to_array_record,
)
from bouquet.compression.sparseloco import SparseLoCo
from bouquet.compression.sparsifiers import Identity, RandK, ScaledSign, TopK

__all__ = [
    "COMPRESSORS",
    "PAYLOAD_RECORD",
    "QSGD",
    "Compressor",
    "ErrorFeedback",
    "FedZip",
    "Guarantee",
    "Identity",
    "Payload",
    "PayloadError",
    "RandK",
    "ScaledSign",
    "SparseLoCo",
    "TopK",
    "decode_record",
    "encoded_bytes",
    "from_array_record",
    "make_compressor",
    "to_array_record",
]
