# -*- test-case-name: tests.test_storage_log -*-
"""
The retained log's on-disk format, as pure functions (no IO).

A partition is a directory of segments, each named by its base offset:

- ``00000000000000000000.log``: records in MetaQ's wire layout, back to
  back, so that a MetaQ ``get`` answer is a slice of the file.  A record is
  ``int32 data length | int32 checksum | int64 message id | int32 flag |
  data``, big-endian, the checksum being ``CRC32(data) & 0x7fffffff``;
  ``data`` is ``int32 attribute length | attribute | payload`` when
  ``flag & 1``, else the payload.  A record's offset is its byte position
  in the partition: the segment's base offset plus its position in the
  file, so the next segment's base is this one's base plus its size.
- ``00000000000000000000.index``: the sparse offset and time index, 12-byte
  entries ``uint32 position in the segment | int64 timestamp (ns)``, one for
  the segment's first record and one for each record starting at least
  ``index_interval`` bytes after the previous entry.  The timestamp is the
  newest publish time of the records up to and including that one, so
  entries are in time order and every record before an entry is no newer
  than it.  A segment that is no longer written to is *sealed*: its index
  ends with three entries whose position is ``0xffffffff``, holding the
  newest timestamp of the segment, then its size (high 32 bits) and the
  CRC32 of its bytes (low 32 bits), then the CRC32 of the index entries
  before the seal.
"""

from __future__ import annotations

import array
import binascii
import importlib
import re
import struct
import zlib
from typing import Any, Callable, Iterator, List, NamedTuple, Optional, Sequence, Tuple

from txnsq import speedups
from txnsq.storage.diskqueue_format import DiskFormatError



def _fastest_crc32() -> Callable[..., int]:
    """
    zlib's CRC32, from ISA-L when it is installed (``txnsq[speedups]``):
    the same function computed with SIMD, about 3x cheaper per 100-byte
    record, which is most of an append's cost.
    """
    try:
        isal_zlib: Any = importlib.import_module("isal.isal_zlib")
    except ImportError:  # pragma: no cover - depends on the environment
        return zlib.crc32
    return isal_zlib.crc32  # type: ignore[no-any-return]


crc32: Callable[..., int] = _fastest_crc32()

__all__ = [
    "ATTRIBUTE_FLAG",
    "HEADER",
    "HEADER_SIZE",
    "INDEX_ENTRY",
    "Record",
    "RecordScan",
    "Seal",
    "SEAL_MARK",
    "SEAL_SIZE",
    "check_records",
    "checksum",
    "crc32",
    "decode_index",
    "encode_batch",
    "encode_id_batch",
    "encode_record",
    "encode_seal",
    "frame_records",
    "index_file_name",
    "iter_records",
    "last_whole_end",
    "nsq_message_id",
    "parse_segment_file_name",
    "raw_message_id",
    "record_start_at_or_before",
    "scan_records",
    "segment_file_name",
    "with_attribute",
]

#: ``data length, checksum, message id, flag``: MetaQ's record header.
HEADER = struct.Struct(">ii8si")
HEADER_SIZE = HEADER.size

#: ``flag & ATTRIBUTE_FLAG``: the data starts with a length-prefixed attribute.
ATTRIBUTE_FLAG = 1

#: One index entry: position in the segment, newest timestamp so far (ns).
INDEX_ENTRY = struct.Struct(">Iq")

#: The position of a seal entry (never a record's position).
SEAL_MARK = 0xFFFFFFFF

_LENGTH = struct.Struct(">i")
_MASK = 0x7FFFFFFF
_SEGMENT = re.compile(r"^([0-9]{20})\.log$")
_HEX_ID = re.compile(rb"^[0-9a-fA-F]{16}$")


class Seal(NamedTuple):
    """What a sealed segment's index ends with."""

    newest: int
    size: int
    crc: int


class Record(NamedTuple):
    """One decoded record (for consumers and tests; the broker never decodes)."""

    offset: int
    msg_id: bytes
    flag: int
    data: bytes


class RecordScan(NamedTuple):
    """
    The result of validating records one by one.

    :ivar end: where the whole, valid records end.
    :ivar confirmed: how many of the expected index positions (the old
        index) are record starts, in order, before the first that is not.
    :ivar starts: positions to index after the last confirmed one (or
        from the start), by the interval rule.
    :ivar error: why scanning stopped before the end, or ``None``.
    """

    end: int
    confirmed: int
    starts: List[int]
    error: Optional[str]


def checksum(data: Any) -> int:
    """MetaQ's checksum of a record's data: ``CRC32(data) & 0x7fffffff``."""
    return crc32(data) & _MASK


def encode_record(msg_id: bytes, flag: int, data: bytes) -> bytes:
    """
    One record's bytes.

    :param msg_id: the 8-byte message id.
    :raises struct.error: ``msg_id`` is not 8 bytes long.
    """
    if len(msg_id) != 8:
        raise struct.error("a message id is 8 bytes, not %d" % (len(msg_id),))
    return HEADER.pack(len(data), crc32(data) & _MASK, msg_id, flag) + data


def encode_batch(records: Sequence[Tuple[bytes, int, bytes]]) -> bytes:
    """
    The bytes of records ``(msg_id, flag, data)`` back to back: what
    :func:`encode_record` gives for each, joined (written as one run).

    :raises struct.error: a message id is not 8 bytes long.
    """
    pack = HEADER.pack
    batch = b"".join([pack(len(d), crc32(d) & _MASK, i, f) + d for i, f, d in records])
    # "8s" pads or cuts a wrong id silently; one length check for all.
    if len(b"".join([record[0] for record in records])) != 8 * len(records):
        bad = [record[0] for record in records if len(record[0]) != 8][0]
        raise struct.error("a message id is 8 bytes, not %d" % (len(bad),))
    return batch


def encode_id_batch(ids: Sequence[int], flag: int, bodies: Sequence[bytes]) -> bytes:
    """
    :func:`encode_batch` of the records ``(ids[i] as 8 big-endian bytes,
    flag, bodies[i])``: an NSQ publish's records, whose ids are integers.

    :raises ValueError: not as many ids as bodies.
    :raises struct.error: an id is negative or not below ``2 ** 64``.
    """
    if len(ids) != len(bodies):
        raise ValueError("as many ids as bodies are needed")
    pack = _ID_HEADER.pack
    try:
        return b"".join(
            [pack(len(d), crc32(d) & _MASK, i, flag) + d for i, d in zip(ids, bodies)]
        )
    except struct.error:
        raise struct.error("a message id is below 2**64") from None


_ID_HEADER = struct.Struct(">iiQi")

#: The pure-Python encoders: the reference the compiled ones
#: (``txnsq/storage/_log_format.c``) are tested against byte for byte.
pure_encode_batch = encode_batch
pure_encode_id_batch = encode_id_batch

#: The compiled module in use, or ``None`` (pure Python).
compiled: Any = speedups.load("txnsq.storage._log_format")
if compiled is not None:
    encode_batch = compiled.encode_batch  # noqa: F811
    encode_id_batch = compiled.encode_id_batch  # noqa: F811


def with_attribute(attribute: bytes, payload: bytes) -> bytes:
    """The data of a record with an attribute (its flag needs ``ATTRIBUTE_FLAG``)."""
    return _LENGTH.pack(len(attribute)) + attribute + payload


def nsq_message_id(msg_id: bytes) -> bytes:
    """The NSQ message id (16 hex digits) of a record's 8-byte id."""
    return binascii.hexlify(msg_id)


def raw_message_id(nsq_id: bytes) -> bytes:
    """
    The 8-byte record id of an NSQ message id.

    :raises ValueError: ``nsq_id`` is not 16 hex digits.
    """
    if not _HEX_ID.match(nsq_id):
        raise ValueError("not an NSQ message id: %r" % (nsq_id,))
    return binascii.unhexlify(nsq_id)


def segment_file_name(base: int) -> str:
    """``00000000000000001024.log``: a segment named by its base offset."""
    return "%020d.log" % (base,)


def index_file_name(base: int) -> str:
    """``00000000000000001024.index``: the index beside a segment."""
    return "%020d.index" % (base,)


def parse_segment_file_name(filename: str) -> Optional[int]:
    """A segment file's base offset, or ``None`` for any other name."""
    match = _SEGMENT.match(filename)
    return int(match.group(1)) if match else None


#: Bytes of a seal: three index entries.
SEAL_SIZE = 3 * INDEX_ENTRY.size


def encode_seal(seal: Seal, index_crc: int) -> bytes:
    """
    The three index entries that seal a segment; ``index_crc`` is the
    CRC32 of the index entries before them.
    """
    return (
        INDEX_ENTRY.pack(SEAL_MARK, seal.newest)
        + INDEX_ENTRY.pack(SEAL_MARK, (seal.size << 32) | seal.crc)
        + INDEX_ENTRY.pack(SEAL_MARK, index_crc)
    )


def decode_index(data: bytes) -> Tuple[List[Tuple[int, int]], Optional[Seal]]:
    """
    An index file's entries ``(position, timestamp)`` and its seal.

    :raises DiskFormatError: a partial entry, positions not increasing, a
        timestamp older than the one before, a damaged seal, or entries
        that do not match the seal's checksum.
    """
    if len(data) % INDEX_ENTRY.size:
        raise DiskFormatError("index size %d is not a multiple of %d" % (len(data), INDEX_ENTRY.size))
    entries = [INDEX_ENTRY.unpack_from(data, at) for at in range(0, len(data), INDEX_ENTRY.size)]
    seal = None
    if entries and entries[-1][0] == SEAL_MARK:
        if len(entries) < 3 or entries[-2][0] != SEAL_MARK or entries[-3][0] != SEAL_MARK:
            raise DiskFormatError("damaged seal")
        if crc32(data[: len(data) - SEAL_SIZE]) != entries[-1][1]:
            raise DiskFormatError("index checksum mismatch")
        packed = entries[-2][1]
        seal = Seal(entries[-3][1], packed >> 32, packed & 0xFFFFFFFF)
        del entries[-3:]
    previous = (-1, -(1 << 63))
    for entry in entries:
        if entry[0] <= previous[0] or entry[1] < previous[1] or entry[0] == SEAL_MARK:
            raise DiskFormatError("index entry %r out of order" % (entry,))
        previous = entry
    if entries and entries[0][0] != 0:
        raise DiskFormatError("index does not start at the first record")
    return entries, seal


def scan_records(
    data: Any, start: int, end: int, interval: int, expected: Sequence[int] = ()
) -> RecordScan:
    """
    Validate the records of ``data[start:end]`` one by one (header and
    checksum), as recovery does.  Meanwhile confirm the ``expected`` index
    positions (a record must start at each); once they are used up, or one
    is not a record start, list the positions to index from there: a
    record starting at least ``interval`` bytes after the previous entry.
    """
    unpack = HEADER.unpack_from
    view = memoryview(data)
    starts: List[int] = []
    confirmed = 0
    following = expected[0] if expected else -1
    last_entry = -1
    pos = start
    error: Optional[str] = None
    while pos < end:
        if pos + HEADER_SIZE > end:
            error = "truncated record header"
            break
        length, check, _, _ = unpack(data, pos)
        body = pos + HEADER_SIZE
        if length < 0 or body + length > end:
            error = "truncated record (data length %d)" % (length,)
            break
        if crc32(view[body : body + length]) & _MASK != check:
            error = "checksum mismatch"
            break
        if following >= 0:
            if pos == following:
                confirmed += 1
                last_entry = pos
                following = expected[confirmed] if confirmed < len(expected) else -1
            elif pos > following:
                following = -1  # not a record start: index by the rule from here
        if following < 0 and (last_entry < 0 or pos - last_entry >= interval):
            if pos != last_entry:
                starts.append(pos)
            last_entry = pos
        pos = body + length
    return RecordScan(pos, confirmed, starts, error)


def last_whole_end(data: Any, pos: int, limit: int) -> int:
    """
    Where the last whole record of ``data`` that ends by ``limit`` ends,
    walking headers from ``pos`` (a record start); ``pos`` if even the
    first does not fit.
    """
    unpack = _LENGTH.unpack_from
    while pos + HEADER_SIZE <= limit:
        (length,) = unpack(data, pos)
        end = pos + HEADER_SIZE + length
        if length < 0 or end > limit:
            break
        pos = end
    return pos


def record_start_at_or_before(data: Any, pos: int, target: int) -> int:
    """
    Walking headers from ``pos`` (a record start), the start of the record
    that holds ``target`` (``target`` itself when a record starts there);
    ``data`` must hold the header of each record before ``target``.
    """
    unpack = _LENGTH.unpack_from
    size = len(data)
    while pos < target and pos + 4 <= size:
        (length,) = unpack(data, pos)
        if length < 0:
            break
        end = pos + HEADER_SIZE + length
        if end > target:
            break
        pos = end
    return pos


def iter_records(data: Any, offset: int = 0) -> Iterator[Record]:
    """
    The records of a slice (a ``get`` answer) read from ``offset``.

    :raises DiskFormatError: a partial record or a checksum mismatch.
    """
    view = memoryview(data)
    pos = 0
    end = len(view)
    while pos < end:
        if pos + HEADER_SIZE > end:
            raise DiskFormatError("truncated record header at %d" % (offset + pos,))
        length, check, msg_id, flag = HEADER.unpack_from(view, pos)
        body = pos + HEADER_SIZE
        if length < 0 or body + length > end:
            raise DiskFormatError("truncated record at %d" % (offset + pos,))
        value = bytes(view[body : body + length])
        if checksum(value) != check:
            raise DiskFormatError("checksum mismatch at %d" % (offset + pos,))
        yield Record(offset + pos, msg_id, flag, value)
        pos = body + length


def pure_frame_records(data: Any) -> Tuple[bytes, bytes, Optional[Tuple[int, str]]]:
    """
    Frame and check the records of ``data`` (a ``get`` answer, records
    back to back from its first byte): ``(starts, lengths, error)``, the
    start and data length of each record as native int64 arrays' bytes
    (``numpy.frombuffer(starts, numpy.int64)``), each record whole and
    its checksum right.

    ``error`` is ``None``, or ``(position, problem)`` for the first bad
    record (``"record header cut short"``, ``"record cut short (data
    length N)"`` or ``"checksum mismatch"``); ``starts`` and ``lengths``
    are then empty.

    The pure-Python reference of the compiled ``frame_records``, which
    is used when built.
    """
    unpack = _LENGTH_CHECKSUM.unpack_from
    view = memoryview(data)
    starts = array.array("q")
    lengths = array.array("q")
    pos = 0
    end = len(view)
    while pos < end:
        if pos + HEADER_SIZE > end:
            return b"", b"", (pos, "record header cut short")
        length, check = unpack(view, pos)
        body = pos + HEADER_SIZE
        if length < 0 or body + length > end:
            return b"", b"", (pos, "record cut short (data length %d)" % (length,))
        if crc32(view[body : body + length]) & _MASK != check:
            return b"", b"", (pos, "checksum mismatch")
        starts.append(pos)
        lengths.append(length)
        pos = body + length
    return starts.tobytes(), lengths.tobytes(), None


_LENGTH_CHECKSUM = struct.Struct(">ii")

#: :func:`pure_frame_records`, compiled when the extension is built.
frame_records: Callable[[Any], Tuple[bytes, bytes, Optional[Tuple[int, str]]]] = (
    compiled.frame_records if compiled is not None and hasattr(compiled, "frame_records") else pure_frame_records
)


def pure_check_records(data: Any, start: int, end: int) -> Tuple[int, Optional[str]]:
    """
    Check the records of ``data[start:end]`` (records back to back from
    ``start``), each whole and its checksum right: ``(pos, problem)``,
    where the good records end (``end`` when all are good) and ``None``,
    or the position of the first bad record and what is wrong with it
    (``"record header cut short"``, ``"record cut short (data length
    N)"`` or ``"checksum mismatch"``).  ``start`` and ``end`` are clamped
    to the data, as a slice's are (no negative indexes).

    What every read of the retained log runs before it serves records;
    the pure-Python reference of the compiled ``check_records``, which
    is used when built.
    """
    unpack = _LENGTH_CHECKSUM.unpack_from
    view = memoryview(data)
    if end > len(view):
        end = len(view)
    pos = start if start > 0 else 0
    while pos < end:
        if pos + HEADER_SIZE > end:
            return pos, "record header cut short"
        length, check = unpack(view, pos)
        body = pos + HEADER_SIZE
        if length < 0 or body + length > end:
            return pos, "record cut short (data length %d)" % (length,)
        if crc32(view[body : body + length]) & _MASK != check:
            return pos, "checksum mismatch"
        pos = body + length
    return pos, None


#: :func:`pure_check_records`, compiled when the extension is built.
check_records: Callable[[Any, int, int], Tuple[int, Optional[str]]] = (
    compiled.check_records if compiled is not None and hasattr(compiled, "check_records") else pure_check_records
)
