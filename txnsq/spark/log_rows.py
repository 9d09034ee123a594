# -*- test-case-name: tests_spark.test_offsets -*-
"""
The rows of the ``nsq`` offset source, built as Arrow columns straight
from the bytes of MetaQ ``get`` answers (records in MetaQ's layout, see
:mod:`txnsq.storage.log_format`), with as little Python per message as
the format allows.

The only per-record Python is the header walk that frames and checks the
records (a record's length tells where the next starts, and its checksum
must be verified): one ``unpack`` and one ``crc32`` call each.  Every
column is then computed by numpy over all the records of the slice at
once: ids as hex, publish times from the ids, bodies gathered past the
headers (and past attributes), offsets.

Rows: ``id string, timestamp timestamp, attempts int, topic string,
nsqd string, body binary, partition int, offset long``.  ``attempts`` is
always 1 (a log is read, nothing is redelivered); ``nsqd`` is the MetaQ
address read from; ``timestamp`` is the publish time carried by the
record's nsqd message id (to its ~1.05 ms resolution).

Needs numpy and pyarrow (``txnsq[spark]``).
"""

from __future__ import annotations

import struct
from typing import Any, List, Tuple

import numpy as np
import pyarrow as pa

from txnsq.protocol.message_id import ID_TIME_SHIFT, TWEPOCH
from txnsq.storage import log_format
from txnsq.storage.log_format import HEADER_SIZE, crc32

__all__ = ["ARROW_SCHEMA", "CorruptRecord", "LOG_SOURCE_SCHEMA", "frame_records", "id_times", "records_to_batch"]

#: The offset source's schema (the channel source's plus partition and offset).
LOG_SOURCE_SCHEMA = (
    "id string, timestamp timestamp, attempts int, topic string, nsqd string, body binary, "
    "partition int, offset long"
)

#: The Arrow schema Spark expects for :data:`LOG_SOURCE_SCHEMA` (timestamps in UTC).
ARROW_SCHEMA = pa.schema(
    [
        ("id", pa.string()),
        ("timestamp", pa.timestamp("us", tz="UTC")),
        ("attempts", pa.int32()),
        ("topic", pa.string()),
        ("nsqd", pa.string()),
        ("body", pa.binary()),
        ("partition", pa.int32()),
        ("offset", pa.int64()),
    ]
)

_LENGTH_CHECKSUM = struct.Struct(">ii")
#: Whether log_format.frame_records is the compiled one (else the numpy
#: and per-record paths below, which beat the pure reference).
_COMPILED_FRAMING = log_format.frame_records is not log_format.pure_frame_records
_MASK = 0x7FFFFFFF
_HEADER_COLUMNS = np.arange(HEADER_SIZE, dtype=np.int64)
_FOUR = np.arange(4, dtype=np.int64)
_EIGHT = np.arange(8, dtype=np.int64)


class CorruptRecord(RuntimeError):
    """
    A record read from the log is cut short or fails its checksum.

    :ivar topic: the topic.
    :ivar partition: the partition.
    :ivar offset: where the bad record starts.
    """

    def __init__(self, topic: str, partition: int, offset: int, problem: str) -> None:
        RuntimeError.__init__(
            self, "nsq source: topic %s partition %d: %s at offset %d" % (topic, partition, problem, offset)
        )
        self.topic = topic
        self.partition = partition
        self.offset = offset


def frame_records(data: Any, base: int, topic: str, partition: int) -> Tuple[Any, Any]:
    """
    The start and data length of each record in ``data`` (a ``get``
    answer read at offset ``base``), as int64 arrays, each record checked:
    whole, and its checksum right.

    Records of one size (the usual case: one producer's messages) are
    framed by numpy at once; otherwise headers are walked one by one.
    Checksums are one ``crc32`` call per record either way.

    With the compiled ``frame_records`` (CPython, see
    :mod:`txnsq.storage.log_format`) the whole walk and every checksum
    are done in C, without the GIL.

    :raises CorruptRecord: naming the first bad record's offset.
    """
    if _COMPILED_FRAMING:
        start_bytes, length_bytes, error = log_format.frame_records(data)
        if error is not None:
            raise CorruptRecord(topic, partition, base + error[0], error[1])
        return np.frombuffer(start_bytes, dtype=np.int64), np.frombuffer(length_bytes, dtype=np.int64)
    end = len(data)
    if end >= HEADER_SIZE:
        length = _LENGTH_CHECKSUM.unpack_from(data, 0)[0]
        stride = HEADER_SIZE + length
        if length >= 0 and end % stride == 0:
            rows = np.frombuffer(data, dtype=np.uint8).reshape(end // stride, stride)
            lengths = _be_int32(rows[:, 0:4])
            if (lengths == length).all():
                view = memoryview(data)
                crc = crc32
                computed = np.array(
                    [crc(view[at : at + length]) for at in range(HEADER_SIZE, end, stride)], dtype=np.int64
                )
                stored = _be_int32(rows[:, 4:8])
                bad = (computed & _MASK) != stored
                if bad.any():
                    first = int(np.argmax(bad))
                    raise CorruptRecord(topic, partition, base + first * stride, "checksum mismatch")
                return np.arange(0, end, stride, dtype=np.int64), lengths
    starts = _walk(data, base, topic, partition)
    at = np.array(starts, dtype=np.int64)
    raw = np.frombuffer(data, dtype=np.uint8)
    return at, _be_int32(raw[at[:, None] + _FOUR])


def _walk(data: Any, base: int, topic: str, partition: int) -> List[int]:
    """Record starts of ``data``, walking and checking headers one by one."""
    unpack = _LENGTH_CHECKSUM.unpack_from
    view = memoryview(data)
    crc = crc32
    starts: List[int] = []
    append = starts.append
    pos = 0
    end = len(data)
    while pos < end:
        if pos + HEADER_SIZE > end:
            raise CorruptRecord(topic, partition, base + pos, "record header cut short")
        length, check = unpack(data, pos)
        body = pos + HEADER_SIZE
        following = body + length
        if length < 0 or following > end:
            raise CorruptRecord(topic, partition, base + pos, "record cut short (data length %d)" % (length,))
        if crc(view[body:following]) & _MASK != check:
            raise CorruptRecord(topic, partition, base + pos, "checksum mismatch")
        append(pos)
        pos = following
    return starts


def _be_int32(matrix: Any) -> Any:
    """Big-endian int32 of each row of an (n, 4) uint8 matrix, as int64."""
    return np.ascontiguousarray(matrix).view(">i4").ravel().astype(np.int64)


def id_times(data: bytes, starts: Any) -> Any:
    """The time field (``id >> 22``) of the nsqd message id of each record at ``starts``."""
    raw = np.frombuffer(data, dtype=np.uint8)
    id_bytes = np.ascontiguousarray(raw[starts[:, None] + 8 + _EIGHT])
    return id_bytes.view(">u8").ravel().astype(np.uint64) >> np.uint64(ID_TIME_SHIFT)


def _hex(id_bytes: Any) -> Any:
    """The lower-case hex digits of an (n, 8) uint8 matrix, as n * 16 bytes."""
    digits = np.empty((id_bytes.shape[0], 8, 2), dtype=np.uint8)
    digits[:, :, 0] = id_bytes >> 4
    digits[:, :, 1] = id_bytes & 15
    # 0-9 -> '0'-'9', 10-15 -> 'a'-'f'
    return (digits + 48 + (digits > 9) * 39).astype(np.uint8).reshape(-1)


def records_to_batch(
    data: bytes,
    starts: Any,
    lengths: Any,
    base: int,
    topic: str,
    partition: int,
    nsqd: str,
    schema: Any = ARROW_SCHEMA,
) -> Any:
    """
    The Arrow ``RecordBatch`` (with ``schema``, the source's Arrow schema)
    of the records at ``starts`` with data ``lengths`` in ``data``, read
    at ``base``, as :func:`frame_records` gives them.

    :raises CorruptRecord: a record's attribute length does not fit in it.
    """
    count = len(starts)
    raw = np.frombuffer(data, dtype=np.uint8)
    at = starts
    lengths = lengths.copy()
    stride = HEADER_SIZE + (int(lengths[0]) if count else 0)
    uniform = count > 0 and len(raw) == count * stride and int(at[-1]) == len(raw) - stride
    if uniform:
        rows = raw.reshape(count, stride)
        headers = rows[:, :HEADER_SIZE]
    else:
        headers = raw[at[:, None] + _HEADER_COLUMNS]
    flags = _be_int32(headers[:, 16:20])
    id_bytes = np.ascontiguousarray(headers[:, 8:16])
    ids = id_bytes.view(">u8").ravel().astype(np.uint64)
    body_starts = at + HEADER_SIZE
    with_attribute = (flags & 1) != 0
    has_attributes = bool(with_attribute.any())
    if has_attributes:
        # data = int32 attribute length | attribute | payload: rows get the payload.
        which = body_starts[with_attribute]
        skip = _be_int32(raw[which[:, None] + _FOUR]) + 4
        bad = (skip < 4) | (skip > lengths[with_attribute])
        if bad.any():
            first = int(np.flatnonzero(with_attribute)[np.argmax(bad)])
            raise CorruptRecord(topic, partition, base + int(at[first]), "attribute longer than its record")
        body_starts[with_attribute] += skip
        lengths[with_attribute] -= skip
    if uniform and not has_attributes:
        bodies = np.ascontiguousarray(rows[:, HEADER_SIZE:]).reshape(-1)
    else:
        keep = np.ones(len(raw), dtype=np.bool_)
        keep[(at[:, None] + _HEADER_COLUMNS).ravel()] = False
        if has_attributes:
            for first, size in zip(at[with_attribute] + HEADER_SIZE, body_starts[with_attribute] - at[with_attribute] - HEADER_SIZE):
                keep[first : first + size] = False
        bodies = raw[keep]
    body_offsets = np.zeros(count + 1, dtype=np.int32)
    np.cumsum(lengths, out=body_offsets[1:])
    id_offsets = np.arange(0, 16 * (count + 1), 16, dtype=np.int32)
    micros = (((ids >> np.uint64(ID_TIME_SHIFT)).astype(np.int64) + TWEPOCH) << 20) // 1000
    columns = [
        pa.Array.from_buffers(pa.string(), count, [None, pa.py_buffer(id_offsets), pa.py_buffer(_hex(id_bytes))]),
        pa.Array.from_buffers(schema.field("timestamp").type, count, [None, pa.py_buffer(micros)]),
        pa.repeat(pa.scalar(1, pa.int32()), count),
        pa.repeat(pa.scalar(topic, pa.string()), count),
        pa.repeat(pa.scalar(nsqd, pa.string()), count),
        pa.Array.from_buffers(pa.binary(), count, [None, pa.py_buffer(body_offsets), pa.py_buffer(bodies)]),
        pa.repeat(pa.scalar(partition, pa.int32()), count),
        pa.array(at + base, type=pa.int64()),
    ]
    return pa.RecordBatch.from_arrays(columns, schema=schema)
