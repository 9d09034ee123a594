# -*- test-case-name: tests.test_storage_disk -*-
"""
go-diskqueue's on-disk format, as pure functions (no IO).

A queue called ``NAME`` (a topic ``t``, or a channel ``t:c``) lives in its
data directory as:

- ``NAME.diskqueue.000000.dat``, ``...000001.dat``: segment files, each a
  run of records ``<4-byte big-endian length><message>``; a writer starts a
  new segment when the next record would take the current one past
  ``--max-bytes-per-file`` (go-diskqueue v1.1, used by nsqd 1.2.1 and
  later).  A reader reads a segment that is no longer written to up to its
  size, so segments rolled the older way (after crossing the limit) read
  the same.
- ``NAME.diskqueue.meta.dat``: the queue's state as text,
  ``"%d\\n%d,%d\\n%d,%d\\n" % (depth, read_file, read_pos, write_file,
  write_pos)``, replaced atomically.

txnsq adds one file Go nsqd never opens: ``NAME.diskqueue.deferred.dat``,
written at a clean shutdown, holding the channel's deferred messages with
their due times (see :func:`encode_deferred`).  The same messages are also
written to the segments as plain records, so Go nsqd reading the directory
delivers them (at once, as Go always does after a restart).
"""

from __future__ import annotations

import re
import struct
from typing import Any, List, NamedTuple, Tuple

from txnsq import speedups

__all__ = [
    "CopyRun",
    "DEFERRED_SUFFIX",
    "DeferredState",
    "DiskFormatError",
    "META_SUFFIX",
    "MIN_MESSAGE_SIZE",
    "QueueState",
    "RECORD_HEADER",
    "append_record",
    "append_records",
    "decode_deferred",
    "decode_meta",
    "deferred_file_name",
    "encode_deferred",
    "encode_meta",
    "meta_file_name",
    "parse_segment_file_name",
    "segment_file_name",
    "split_records",
]

#: The smallest encoded message: timestamp, attempts and ID with no body
#: (Go nsqd's ``minValidMsgLength``, the diskqueue's ``minMsgSize``).
MIN_MESSAGE_SIZE = 8 + 2 + 16

#: The length prefix of every record.
RECORD_HEADER = struct.Struct(">I")

META_SUFFIX = ".diskqueue.meta.dat"
DEFERRED_SUFFIX = ".diskqueue.deferred.dat"

_SEGMENT = re.compile(r"^(.+)\.diskqueue\.([0-9]{6,})\.dat$")
_META = re.compile(rb"^(-?[0-9]+)\n([0-9]+),([0-9]+)\n([0-9]+),([0-9]+)\n?$")

_DEFERRED_MAGIC = b"txnsq-deferred 1\n"
_DEFERRED_HEADER = struct.Struct(">qqqqqq")
_DEFERRED_RUN = struct.Struct(">qqq")
_DEFERRED_ITEM = struct.Struct(">qI")


class DiskFormatError(ValueError):
    """A file does not have the format it should; ``str()`` says why."""


class QueueState(NamedTuple):
    """The contents of a meta file: where reading and writing are."""

    depth: int
    read_file: int
    read_pos: int
    write_file: int
    write_pos: int


class CopyRun(NamedTuple):
    """``records`` consecutive records, from ``file``/``pos``, that are
    plain copies of deferred messages."""

    file: int
    pos: int
    records: int


class DeferredState(NamedTuple):
    """
    What a deferred file records besides its messages.

    :ivar queue: the queue's state right after the deferred messages were
        written; the file only applies while the queue is still exactly
        there (no one read or wrote the queue since).
    :ivar runs: where the plain copies of deferred messages are, in file
        order: the copies written at this shutdown, and any left unread
        from earlier ones (including copies of messages since delivered).
        Every message of the file has a copy in one of them.
    """

    queue: QueueState
    runs: Tuple[CopyRun, ...]

    @property
    def copies(self) -> int:
        """How many records the runs cover."""
        return sum(run.records for run in self.runs)


def segment_file_name(name: str, number: int) -> str:
    """``NAME.diskqueue.000042.dat``: the file name of a segment."""
    return "%s.diskqueue.%06d.dat" % (name, number)


def parse_segment_file_name(filename: str) -> "Tuple[str, int] | None":
    """``(queue name, segment number)`` of a segment file name, else ``None``."""
    match = _SEGMENT.match(filename)
    if match is None:
        return None
    return match.group(1), int(match.group(2))


def meta_file_name(name: str) -> str:
    """``NAME.diskqueue.meta.dat``: the file name of a queue's state."""
    return name + META_SUFFIX


def deferred_file_name(name: str) -> str:
    """``NAME.diskqueue.deferred.dat``: txnsq's deferred messages of a queue."""
    return name + DEFERRED_SUFFIX


def encode_meta(state: QueueState) -> bytes:
    """A meta file's bytes, exactly as go-diskqueue writes them."""
    return b"%d\n%d,%d\n%d,%d\n" % (
        state.depth,
        state.read_file,
        state.read_pos,
        state.write_file,
        state.write_pos,
    )


def decode_meta(data: bytes) -> QueueState:
    """
    Parse a meta file.

    :raises DiskFormatError: it is not five numbers in go-diskqueue's
        layout, or the read position is past the write position.
    """
    match = _META.match(data)
    if match is None:
        raise DiskFormatError("not a diskqueue meta file: %r" % (data[:64],))
    state = QueueState(*(int(group) for group in match.groups()))
    if (state.read_file, state.read_pos) > (state.write_file, state.write_pos):
        raise DiskFormatError(
            "read position %d,%d is past write position %d,%d"
            % (state.read_file, state.read_pos, state.write_file, state.write_pos)
        )
    return state


def encode_deferred(state: DeferredState, items: List[Tuple[int, bytes]]) -> bytes:
    """
    A deferred file's bytes: a magic line; the queue state and the number
    of runs as big-endian int64s; each run as three int64s (file, pos,
    records); then per message its ``when`` (int64), length (uint32) and
    bytes.
    """
    queue = state.queue
    parts = [
        _DEFERRED_MAGIC,
        _DEFERRED_HEADER.pack(
            queue.depth,
            queue.read_file,
            queue.read_pos,
            queue.write_file,
            queue.write_pos,
            len(state.runs),
        ),
    ]
    for run in state.runs:
        parts.append(_DEFERRED_RUN.pack(run.file, run.pos, run.records))
    for when, data in items:
        parts.append(_DEFERRED_ITEM.pack(when, len(data)))
        parts.append(data)
    return b"".join(parts)


def decode_deferred(data: bytes) -> Tuple[DeferredState, List[Tuple[int, bytes]]]:
    """
    Parse a deferred file.

    :raises DiskFormatError: a wrong magic line, a truncated file, or more
        messages than the runs hold copies of.
    """
    if not data.startswith(_DEFERRED_MAGIC):
        raise DiskFormatError("not a txnsq deferred file")
    offset = len(_DEFERRED_MAGIC)
    if len(data) < offset + _DEFERRED_HEADER.size:
        raise DiskFormatError("truncated deferred file header")
    fields = _DEFERRED_HEADER.unpack_from(data, offset)
    offset += _DEFERRED_HEADER.size
    run_count = fields[5]
    if run_count < 0 or len(data) < offset + run_count * _DEFERRED_RUN.size:
        raise DiskFormatError("truncated deferred file runs")
    runs = []
    for _ in range(run_count):
        run = CopyRun(*_DEFERRED_RUN.unpack_from(data, offset))
        if run.records <= 0 or run.pos < 0 or run.file < 0:
            raise DiskFormatError("invalid run of copies %r" % (run,))
        runs.append(run)
        offset += _DEFERRED_RUN.size
    state = DeferredState(QueueState(*fields[:5]), tuple(runs))
    items: List[Tuple[int, bytes]] = []
    item_size = _DEFERRED_ITEM.size
    end = len(data)
    while offset < end:
        if offset + item_size > end:
            raise DiskFormatError("truncated deferred message header")
        when, length = _DEFERRED_ITEM.unpack_from(data, offset)
        offset += item_size
        if offset + length > end:
            raise DiskFormatError("truncated deferred message")
        items.append((when, data[offset : offset + length]))
        offset += length
    if len(items) > state.copies:
        raise DiskFormatError(
            "%d deferred messages for %d copies" % (len(items), state.copies)
        )
    return state, items


def append_record(pending: bytearray, data: bytes) -> int:
    """
    Frame the message ``data`` as a record (its 4-byte big-endian length,
    then itself) at the end of ``pending``; return ``pending``'s new length.

    :raises struct.error: ``data`` is 4 GiB or longer.
    """
    pending += RECORD_HEADER.pack(len(data))
    pending += data
    return len(pending)


def append_records(
    pending: bytearray,
    messages: List[bytes],
    start: int,
    write_pos: int,
    max_bytes: int,
    flush_bytes: int,
) -> Tuple[int, int]:
    """
    Frame ``messages[start:]`` as records at the end of ``pending``, in
    order, as a disk queue writing at segment position ``write_pos`` does
    (:func:`append_record` of each): while each record fits the segment
    (``write_pos`` is 0, or the record ends by ``max_bytes``), and up to
    the record that takes ``pending`` to ``flush_bytes`` or more.

    :return: the index of the first message not framed, and the segment
        position after the last one framed.
    :raises struct.error: a message is 4 GiB or longer (those before it
        are framed).
    """
    header = RECORD_HEADER.size
    pack = RECORD_HEADER.pack
    index = start
    count = len(messages)
    while index < count:
        data = messages[index]
        total = header + len(data)
        if write_pos and write_pos + total > max_bytes:
            break
        pending += pack(len(data))
        pending += data
        write_pos += total
        index += 1
        if len(pending) >= flush_bytes:
            break
    return index, write_pos


def split_records(
    buf: bytes, start: int, stop: int, min_size: int, max_size: int
) -> Tuple[List[bytes], int]:
    """
    The messages of the whole, valid records in ``buf[start:stop]``, read
    from ``start`` on, and the offset after the last of them.

    Reading stops before the first record whose length prefix or message
    does not end by ``stop`` (or by the end of ``buf``), or whose length is
    outside ``min_size..max_size``.  What stopped it is not an error here:
    the caller reads that record again, with more bytes or to report it.

    :raises ValueError: ``start`` is negative.
    """
    if start < 0:
        raise ValueError("negative start")
    end = len(buf)
    if stop < end:
        end = stop
    records: List[bytes] = []
    header = RECORD_HEADER.size
    unpack_from = RECORD_HEADER.unpack_from
    offset = start
    while offset + header <= end:
        (length,) = unpack_from(buf, offset)
        if length < min_size or length > max_size:
            break
        after = offset + header + length
        if after > end:
            break
        records.append(buf[offset + header : after])
        offset = after
    return records, offset


#: The pure-Python record framing: the reference the compiled one
#: (``txnsq/storage/_diskqueue_format.c``) is tested against byte for byte.
pure_append_record = append_record
pure_append_records = append_records
pure_split_records = split_records

#: The compiled module in use, or ``None`` (pure Python).
compiled: Any = speedups.load("txnsq.storage._diskqueue_format")
if compiled is not None:
    append_record = compiled.append_record  # noqa: F811
    append_records = compiled.append_records  # noqa: F811
    split_records = compiled.split_records  # noqa: F811
