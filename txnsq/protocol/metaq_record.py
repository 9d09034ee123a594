# -*- test-case-name: tests.test_protocol_metaq -*-
"""
MetaQ's message record, sans-IO: the layout ``get`` serves and the
retained log stores.

A record (:func:`encode_record`) is a 20-byte header -- int32 data length,
int32 checksum (CRC32 of the data, masked to 31 bits), int64 message id,
int32 flag -- and the data; when ``flag & 1`` the data starts with an
int32 attribute length and the attribute (:func:`join_attribute`,
:func:`split_attribute`).  :func:`split_whole_records` and
:func:`iter_records` walk a buffer of records; :func:`validate_records`
checks one (for recovery after a crash).
"""

from __future__ import annotations

import struct
import zlib
from typing import Iterator, Optional, Tuple, Union

__all__ = [
    "FLAG_ATTRIBUTE",
    "HEADER_LENGTH",
    "Record",
    "checksum",
    "encode_record",
    "iter_records",
    "join_attribute",
    "split_attribute",
    "split_whole_records",
    "validate_records",
]

#: ``flag & FLAG_ATTRIBUTE``: the data starts with an attribute.
FLAG_ATTRIBUTE = 1

#: Bytes of a record's header.
HEADER_LENGTH = 20

_INT32_MIN = -(2**31)
_INT32_MAX = 2**31 - 1
_INT64_MIN = -(2**63)
_INT64_MAX = 2**63 - 1
_UINT64_MASK = 2**64 - 1

_HEADER = struct.Struct(">iiqi")
_pack_header = _HEADER.pack
_unpack_header = _HEADER.unpack_from
_INT32 = struct.Struct(">i")
_pack_int32 = _INT32.pack
_unpack_int32 = _INT32.unpack_from
_unpack_uint32 = struct.Struct(">I").unpack_from


# ---------------------------------------------------------------------------
# Records


def checksum(data: bytes) -> int:
    """MetaQ's checksum of ``data``: CRC32 masked to 31 bits (never negative)."""
    return zlib.crc32(data) & 0x7FFFFFFF


def encode_record(msg_id: int, flag: int, data: bytes) -> bytes:
    """
    One record: int32 ``len(data)``, int32 :func:`checksum`, int64
    ``msg_id``, int32 ``flag``, then ``data`` (which, when ``flag & 1``,
    must itself start with an attribute: see :func:`join_attribute`).

    ``msg_id`` may be given signed (Java's ``long``) or as its unsigned
    64-bit pattern; it is read back signed.

    :raises ValueError: ``msg_id`` outside 64 bits, ``flag`` outside 32 bits.
    """
    if not _INT64_MIN <= msg_id <= _UINT64_MASK:
        raise ValueError("message id %d does not fit in 64 bits" % (msg_id,))
    if msg_id > _INT64_MAX:
        msg_id -= 1 << 64
    if not _INT32_MIN <= flag <= _INT32_MAX:
        raise ValueError("flag %d does not fit in 32 bits" % (flag,))
    return _pack_header(len(data), zlib.crc32(data) & 0x7FFFFFFF, msg_id, flag) + data


def join_attribute(attribute: Optional[bytes], payload: bytes) -> bytes:
    """
    A record's data for ``payload`` with ``attribute``: int32 attribute
    length, attribute, payload; just ``payload`` when ``attribute`` is None
    (an empty attribute is still written, with its length 0).  The record's
    flag must have :data:`FLAG_ATTRIBUTE` set exactly when ``attribute`` is
    not None.
    """
    if attribute is None:
        return payload
    return _pack_int32(len(attribute)) + attribute + payload


def split_attribute(flag: int, data: bytes) -> Tuple[Optional[bytes], bytes]:
    """
    ``(attribute, payload)`` of a record's data: attribute None when
    ``flag & 1`` is clear.

    :raises ValueError: the flag announces an attribute that the data
        cannot hold (fewer than 4 bytes, or a length that is negative or
        runs past the end).
    """
    if not flag & FLAG_ATTRIBUTE:
        return None, data
    if len(data) < 4:
        raise ValueError("data of %d bytes has no room for an attribute length" % (len(data),))
    length = _unpack_int32(data, 0)[0]
    if length < 0 or 4 + length > len(data):
        raise ValueError("attribute length %d does not fit in data of %d bytes" % (length, len(data)))
    return bytes(data[4:4 + length]), bytes(data[4 + length:])


def _attribute_problem(flag: int, data: Union[bytes, bytearray, memoryview], start: int, size: int) -> Optional[str]:
    """What is wrong with the attribute framing of ``data[start:start+size]``."""
    if not flag & FLAG_ATTRIBUTE:
        return None
    if size < 4:
        return "flag announces an attribute but the data has %d bytes" % (size,)
    length = _unpack_int32(data, start)[0]
    if length < 0 or 4 + length > size:
        return "attribute length %d does not fit in data of %d bytes" % (length, size)
    return None


class Record:
    """
    One record read from a buffer.

    :ivar position: where the record starts in the buffer.
    :ivar length: bytes of the whole record (header included).
    :ivar checksum: the checksum stored in its header.
    :ivar msg_id: the message id (signed, as Java's ``long``).
    :ivar flag: the flag.
    :ivar data: the data (attribute included when ``flag & 1``).
    """

    __slots__ = ("position", "length", "checksum", "msg_id", "flag", "data")

    def __init__(self, position: int, checksum: int, msg_id: int, flag: int, data: bytes) -> None:
        self.position = position
        self.length = HEADER_LENGTH + len(data)
        self.checksum = checksum
        self.msg_id = msg_id
        self.flag = flag
        self.data = data

    @property
    def valid(self) -> bool:
        """Whether the stored checksum is the data's."""
        return self.checksum == zlib.crc32(self.data) & 0x7FFFFFFF

    @property
    def attribute(self) -> Optional[bytes]:
        """The attribute (None without one). :raises ValueError: bad framing."""
        return split_attribute(self.flag, self.data)[0]

    @property
    def payload(self) -> bytes:
        """The data after the attribute. :raises ValueError: bad framing."""
        return split_attribute(self.flag, self.data)[1]

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Record):
            return NotImplemented
        return (
            self.position == other.position
            and self.checksum == other.checksum
            and self.msg_id == other.msg_id
            and self.flag == other.flag
            and self.data == other.data
        )

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return "Record(position=%d, msg_id=%d, flag=%d, checksum=%d, data=%r)" % (
            self.position,
            self.msg_id,
            self.flag,
            self.checksum,
            self.data,
        )


Buffer = Union[bytes, bytearray, memoryview]


def split_whole_records(buffer: Buffer, max_size: int, start: int = 0) -> int:
    """
    How many bytes from ``start`` hold whole records and at most
    ``max_size`` bytes: what a ``get`` of ``max_size`` sends from there.

    Walks record lengths only (no checksum, no copy).  Stops before a
    record that is cut short, does not fit, or has a negative length.  0
    when the first record alone is larger than ``max_size``.
    """
    end = len(buffer)
    limit = start + max_size
    if limit > end:
        limit = end
    # Read unsigned: a negative length reads as 2**31 or more and stops the
    # walk with the same test as a record that does not fit.
    unpack = _unpack_uint32
    pos = start
    last = limit - 20
    while pos <= last:
        following = pos + 20 + unpack(buffer, pos)[0]
        if following > limit:
            break
        pos = following
    return pos - start


def iter_records(buffer: Buffer, start: int = 0, end: Optional[int] = None) -> Iterator[Record]:
    """
    The whole records in ``buffer[start:end]``, in order; stops silently
    at a record cut short or with a negative length.  Checksums are not
    checked (see :attr:`Record.valid`, :func:`validate_records`).
    """
    stop = len(buffer) if end is None else min(end, len(buffer))
    pos = start
    last = stop - HEADER_LENGTH
    unpack = _unpack_header
    while pos <= last:
        size, stored, msg_id, flag = unpack(buffer, pos)
        data_start = pos + HEADER_LENGTH
        following = data_start + size
        if size < 0 or following > stop:
            return
        yield Record(pos, stored, msg_id, flag, bytes(buffer[data_start:following]))
        pos = following


def validate_records(buffer: Buffer, start: int = 0) -> Tuple[int, Optional[str]]:
    """
    ``(good_length, problem)``: the bytes from ``start`` that are whole,
    well-formed records with correct checksums, and what is wrong with the
    bytes after them (None when every byte is good).  A log recovering
    after a crash keeps ``good_length`` bytes and truncates the rest.

    Problems: a header cut short, a negative data length, data cut short,
    a checksum mismatch, an attribute that does not fit its data.
    """
    end = len(buffer)
    pos = start
    view = memoryview(buffer)
    try:
        while pos < end:
            if end - pos < HEADER_LENGTH:
                return pos - start, "header cut short at %d (%d of %d bytes)" % (pos, end - pos, HEADER_LENGTH)
            size, stored, _msg_id, flag = _unpack_header(buffer, pos)
            if size < 0:
                return pos - start, "negative data length %d at %d" % (size, pos)
            data_start = pos + HEADER_LENGTH
            following = data_start + size
            if following > end:
                return pos - start, "data cut short at %d (%d of %d bytes)" % (pos, end - data_start, size)
            actual = zlib.crc32(view[data_start:following]) & 0x7FFFFFFF
            if actual != stored:
                return pos - start, "checksum mismatch at %d (stored %d, computed %d)" % (pos, stored, actual)
            problem = _attribute_problem(flag, buffer, data_start, size)
            if problem is not None:
                return pos - start, "%s at %d" % (problem, pos)
            pos = following
    finally:
        view.release()
    return pos - start, None
