"""Bit-level packing of small unsigned integers and variable-length integers (numpy only).

Compressed payloads are sent as byte arrays so that the bytes Flower measures are the bytes the
compressor's formula promises: ``n`` values of ``width`` bits take ``ceil(n * width / 8)`` bytes.
Both helpers validate their input on the way back and raise :class:`PayloadError` for a stream that
does not decode (wrong length, unterminated varint...).
"""

from __future__ import annotations

import numpy as np

from bouquet.compression.errors import PayloadError


def packed_size(count: int, width: int) -> int:
    """Bytes taken by ``count`` values of ``width`` bits."""
    return (count * width + 7) // 8


def index_width(d: int) -> int:
    """Bits needed for an index in ``[0, d)`` (at least 1): ``ceil(log2 d)``."""
    return max(1, (int(d) - 1).bit_length())


def pack_uint(values: np.ndarray, width: int) -> np.ndarray:
    """Pack unsigned integers, ``width`` bits each (little-endian bit order), into ``uint8``."""
    v = np.asarray(values, dtype=np.uint64).ravel()
    if width < 1 or width > 63:
        raise ValueError(f"width must be in [1, 63], got {width}")
    if v.size and int(v.max()) >> width:
        raise ValueError(f"a value does not fit in {width} bits")
    shifts = np.arange(width, dtype=np.uint64)
    bits = ((v[:, None] >> shifts) & np.uint64(1)).astype(np.uint8)
    return np.packbits(bits.ravel(), bitorder="little")


def unpack_uint(packed: np.ndarray, width: int, count: int) -> np.ndarray:
    """Inverse of :func:`pack_uint`; the byte length must be exactly ``packed_size``."""
    packed = np.asarray(packed)
    if packed.dtype != np.uint8 or packed.ndim != 1:
        raise PayloadError(
            f"packed bits must be a 1-D uint8 array, got {packed.dtype}{packed.shape}"
        )
    if packed.size != packed_size(count, width):
        raise PayloadError(
            f"packed stream has {packed.size} bytes, expected {packed_size(count, width)} "
            f"for {count} values of {width} bits"
        )
    if count == 0:
        return np.zeros(0, dtype=np.int64)
    bits = np.unpackbits(packed, count=count * width, bitorder="little").reshape(count, width)
    weights = np.uint64(1) << np.arange(width, dtype=np.uint64)
    return (bits.astype(np.uint64) * weights).sum(axis=1).astype(np.int64)


_MAX_VARINT_BYTES = 9  # 63 bits


def encode_varint(values: np.ndarray) -> np.ndarray:
    """LEB128: 7 bits per byte, high bit set on every byte but a number's last."""
    v = np.asarray(values, dtype=np.uint64).ravel()
    if v.size == 0:
        return np.zeros(0, dtype=np.uint8)
    nbytes = np.ones(v.size, dtype=np.int64)
    rest = v >> np.uint64(7)
    while np.any(rest):
        nbytes += rest > 0
        rest = rest >> np.uint64(7)
    width = int(nbytes.max())
    cols = np.arange(width)
    groups = (v[:, None] >> (np.uint64(7) * cols.astype(np.uint64))) & np.uint64(0x7F)
    more = cols[None, :] < (nbytes[:, None] - 1)
    out = groups.astype(np.uint8) | (more.astype(np.uint8) << np.uint8(7))
    keep = cols[None, :] < nbytes[:, None]
    return out[keep]


def decode_varint(stream: np.ndarray) -> np.ndarray:
    """Inverse of :func:`encode_varint`; rejects truncated or over-long numbers."""
    b = np.asarray(stream)
    if b.dtype != np.uint8 or b.ndim != 1:
        raise PayloadError(f"varint stream must be a 1-D uint8 array, got {b.dtype}{b.shape}")
    if b.size == 0:
        return np.zeros(0, dtype=np.int64)
    last = (b & 0x80) == 0
    if not last[-1]:
        raise PayloadError("varint stream ends inside a number")
    number = np.concatenate([[0], np.cumsum(last)[:-1]])
    starts = np.flatnonzero(np.concatenate([[True], last[:-1]]))
    pos = np.arange(b.size) - starts[number]
    if pos.max() >= _MAX_VARINT_BYTES:
        raise PayloadError("varint longer than 63 bits")
    parts = (b & 0x7F).astype(np.uint64) << (np.uint64(7) * pos.astype(np.uint64))
    out = np.zeros(int(last.sum()), dtype=np.uint64)
    np.add.at(out, number, parts)
    return out.astype(np.int64)
