# -*- test-case-name: tests.test_storage_log -*-
"""
The retained log: a segmented, append-only log per topic partition,
addressed by offset (byte position, as in MetaQ), for replay and rewind.

Records are kept in MetaQ's wire layout (see
:mod:`txnsq.storage.log_format`), so a MetaQ ``get`` is answered with a
slice of a segment file: :meth:`PartitionLog.read` finds where the last
whole record that fits ends with the sparse index and a short walk of
record headers, never by looking at every record.

Appends are written as they come, one ``write`` per call (a whole MPUB, or
a run of PUBs read together, is one call), so a record is in the file when
:meth:`PartitionLog.append` returns.  ``fsync`` of the segment follows the
disk backend's policy: every ``sync_every`` records (inline with
``sync_every=1``, so that an acknowledged publish is on disk: a failed
``fsync`` then fails the append as a failed ``write`` does; on the
:class:`SyncWorker` thread otherwise) and at most ``sync_timeout`` seconds
after the first unsynced one.  The index is written at the same times
and synced only when its segment is sealed, at close and by
:meth:`PartitionLog.sync`, as Kafka does: it can be rebuilt from the
segment, and an ``fsync`` of a second file at every sync costs a
publisher a second journal commit.  (After a power loss, records whose
index entries were lost get a conservative time, see recovery.)

Recovery at open: the last segment is validated record by record (header
and checksum) and truncated at the first bad record (the bytes cut are
kept as ``BASE.log.POS.bad``); every other segment is checked against the
CRC32 in its seal (one pass at C speed) or, without a matching seal,
record by record, and a damaged one is set aside as ``.bad``, like the
disk backend's files; reads of its offsets are answered with the next
segment's base offset.  A sealed segment whose records all pass their
checksums but not the seal's CRC32 (which covers whole records: an
altered message id or flag) is logged as an error at each start, and
served.

Retention (:class:`TopicLog`, or a single :class:`PartitionLog`) deletes
whole segments, oldest first: by total bytes, keeping at least
``retention_bytes`` (so a topic never holds more than that plus one
segment), and by age, when a segment's newest record is older than
``retention_age`` seconds by the injected clock.
"""

from __future__ import annotations

import bisect
import os
import struct
from array import array
from itertools import accumulate, repeat
from operator import add, itemgetter
from typing import Any, Callable, Dict, Iterable, List, NamedTuple, Optional, Sequence, Tuple

from twisted.logger import Logger

from txnsq.storage.diskqueue_format import DiskFormatError
from txnsq.files import write_file_atomically
from txnsq.storage.log_format import (
    HEADER,
    HEADER_SIZE,
    INDEX_ENTRY,
    RecordScan,
    Seal,
    check_records,
    crc32,
    decode_index,
    encode_batch,
    encode_id_batch,
    encode_seal,
    index_file_name,
    parse_segment_file_name,
    scan_records,
    segment_file_name,
)
from txnsq.storage.log_format import last_whole_end, record_start_at_or_before
from txnsq.storage.log_retention import LogRetention
from txnsq.storage.sync_worker import SyncWorker

__all__ = [
    "DamagedRecord",
    "OffsetOutOfRange",
    "PartitionLog",
    "PartitionStats",
    "RecordTooLarge",
    "SegmentInfo",
]

#: Default segment size (MetaQ's default is 1 GiB; smaller segments make
#: retention finer and recovery of the last one quicker).
SEGMENT_BYTES = 64 * 1024 * 1024

#: Default spacing of index entries, in bytes of records.
INDEX_INTERVAL = 4096

#: Default seconds between age retention checks.
RETENTION_CHECK_INTERVAL = 60.0

#: Segment sizes must fit the seal's 32 bits (and index positions).
SEAL_LIMIT = 1 << 32

#: Batches longer than this many index intervals get an index entry every
#: interval, shorter ones one for their first record.
_WALK_INTERVALS = 4

#: Read file descriptors kept open per partition.
_READ_FDS = 8

_CHUNK = 1024 * 1024
_MASK = 0x7FFFFFFF

_log = Logger(namespace="txnsq.storage.log")

_Record = Tuple[bytes, int, bytes]
_DATA = itemgetter(2)


class OffsetOutOfRange(LookupError):
    """
    No record starts at the offset asked for: it is before the first
    retained record, past the end, inside a record, or in a segment that
    was set aside.  ``nearest`` is the valid offset to read from instead
    (what MetaQ's 301 answer carries).
    """

    def __init__(self, offset: int, nearest: int, reason: str) -> None:
        LookupError.__init__(self, "offset %d %s; nearest valid offset %d" % (offset, reason, nearest))
        self.offset = offset
        self.nearest = nearest


class DamagedRecord(OffsetOutOfRange):
    """
    The record at ``offset`` fails its check (checksum, or a length that
    does not fit where it is): it is not served, and ``nearest`` is the
    next record's offset.  ``problem`` says what is wrong.
    """

    def __init__(self, offset: int, nearest: int, problem: str) -> None:
        OffsetOutOfRange.__init__(self, offset, nearest, "holds a damaged record (%s)" % (problem,))
        self.problem = problem


class RecordTooLarge(ValueError):
    """The record at ``offset`` takes ``size`` bytes, more than the read allowed."""

    def __init__(self, offset: int, size: int) -> None:
        ValueError.__init__(self, "record at offset %d takes %d bytes" % (offset, size))
        self.offset = offset
        self.size = size


class SegmentInfo(NamedTuple):
    """One segment: its offsets, size, newest timestamp and whether sealed."""

    base: int
    next: int
    bytes: int
    newest: int
    sealed: bool


class PartitionStats(NamedTuple):
    """A partition (or, summed, a topic): offsets, bytes and segment count."""

    first_offset: int
    next_offset: int
    bytes: int
    segments: int


class _Segment:
    """In-memory state of one segment: its index and, for the last, its writers."""

    __slots__ = ("base", "size", "positions", "timestamps", "newest", "sealed", "crc")

    def __init__(self, base: int) -> None:
        self.base = base
        self.size = 0
        #: Absolute offsets of the indexed records, and their timestamps.
        self.positions = array("q")
        self.timestamps = array("q")
        self.newest = -(1 << 63)
        self.sealed = False
        #: Running CRC32 of the file (kept while it is written).
        self.crc = 0

    @property
    def end(self) -> int:
        return self.base + self.size

    def info(self) -> SegmentInfo:
        return SegmentInfo(self.base, self.end, self.size, self.newest, self.sealed)


class PartitionLog:
    """
    One partition's log in ``directory`` (created if need be).

    :param clock: ``IReactorTime``: the sync timer, retention by age, and
        the timestamp given to records recovered without one.
    :param name: how log lines name the partition (default: the directory's).
    :param segment_bytes: a new segment starts when an append would take
        the current one past this size (a larger batch gets one of its own).
    :param index_interval: bytes of records between index entries.
    :param sync_every: records between ``fsync``\\s (``--sync-every``); 1
        syncs before each append returns, 0 on the timer only.
    :param sync_timeout: seconds after which unsynced records are synced
        (``--sync-timeout``).
    :param retention_bytes: bytes to keep (``None``: no limit).
    :param retention_age: seconds to keep records (``None``: no limit).
    :param sync_worker: where periodic syncs run off the reactor thread
        (the disk backend's); ``None`` syncs inline.
    :raises OSError: the directory or its files cannot be opened.
    """

    def __init__(
        self,
        directory: str,
        clock: Any,
        name: Optional[str] = None,
        segment_bytes: int = SEGMENT_BYTES,
        index_interval: int = INDEX_INTERVAL,
        sync_every: int = 2500,
        sync_timeout: float = 2.0,
        retention_bytes: Optional[int] = None,
        retention_age: Optional[float] = None,
        sync_worker: Optional[SyncWorker] = None,
        retention_check_interval: float = RETENTION_CHECK_INTERVAL,
        _retention: Optional[LogRetention] = None,
    ) -> None:
        if not 0 < segment_bytes < SEAL_LIMIT:
            raise ValueError("segment_bytes must be between 1 and %d" % (SEAL_LIMIT - 1,))
        self.directory = directory
        self.name = name or os.path.basename(os.path.normpath(directory))
        self._clock = clock
        self._segment_bytes = segment_bytes
        self._interval = index_interval
        self._sync_every = sync_every if sync_every > 0 else -1
        self._sync_timeout = sync_timeout
        self._worker = sync_worker
        self._segments: List[_Segment] = []
        self._bases: List[int] = []
        self._read_fds: Dict[int, int] = {}
        #: Damaged records found by reads: offset -> where reads move.
        self._damaged_records: Dict[int, int] = {}
        self._write_fd: Optional[int] = None
        self._index_fd: Optional[int] = None
        self._pending_index = bytearray()
        self._last_entry = -1
        #: CRC32 of the last segment's index entries (for its seal).
        self._index_crc = 0
        self._unsynced = 0
        # Index entries written since the index was last synced.
        self._index_unsynced = False
        self._sync_call: Any = None
        self._closed = False
        #: Test seams: the functions writing to and syncing a file descriptor.
        self.os_write: Callable[[int, Any], int] = os.write
        self.os_fsync: Callable[[int], None] = os.fsync
        os.makedirs(directory, exist_ok=True)
        self._open()
        if _retention is None and (retention_bytes is not None or retention_age is not None):
            _retention = LogRetention(clock, retention_bytes, retention_age, retention_check_interval)
            self._retention: Optional[LogRetention] = _retention
            _retention.start([self])
        else:
            self._retention = _retention

    def __repr__(self) -> str:
        return "<PartitionLog %r %d-%d>" % (self.name, self.first_offset, self.next_offset)

    # -- offsets and stats ---------------------------------------------------

    @property
    def first_offset(self) -> int:
        """The offset of the oldest retained record (or ``next_offset``)."""
        return self._segments[0].base

    @property
    def next_offset(self) -> int:
        """The offset the next record will get."""
        return self._segments[-1].end

    @property
    def retained_bytes(self) -> int:
        """Bytes of records retained (segment files; indexes not counted)."""
        return sum(segment.size for segment in self._segments)

    def segments(self) -> List[SegmentInfo]:
        """Every segment, oldest first."""
        return [segment.info() for segment in self._segments]

    def stats(self) -> PartitionStats:
        """First and next offset, bytes and segment count."""
        return PartitionStats(
            self.first_offset, self.next_offset, self.retained_bytes, len(self._segments)
        )

    # -- appending -----------------------------------------------------------

    def append(self, msg_id: bytes, flag: int, data: bytes, timestamp_ns: int) -> int:
        """
        Append one record; returns its offset.

        :param msg_id: the 8-byte id (see :func:`raw_message_id <txnsq.storage.log_format.raw_message_id>`).
        :raises OSError: it could not be written; the log is unchanged.
        :raises struct.error: ``msg_id`` is not 8 bytes.
        """
        # append_many for one record, without the batch's lists (a PUB's path).
        if len(msg_id) != 8:
            raise struct.error("a message id is 8 bytes, not %d" % (len(msg_id),))
        record = HEADER.pack(len(data), crc32(data) & _MASK, msg_id, flag) + data
        size = len(record)
        segment = self._segments[-1]
        start = segment.size
        if start and start + size > self._segment_bytes:
            return self.append_many([(msg_id, flag, data)], timestamp_ns)
        self._write(record, start)
        segment.crc = crc32(record, segment.crc)
        if segment.newest < timestamp_ns:
            segment.newest = timestamp_ns
        segment.size = start + size
        if self._last_entry < 0 or start - self._last_entry >= self._interval:
            self._index(segment, start)
        self._after_write(1)
        if self._retention is not None:
            self._retention.grew(size)
        return segment.base + start

    def append_many(self, records: Sequence[_Record], timestamp_ns: int) -> int:
        """
        Append records ``(msg_id, flag, data)`` published at ``timestamp_ns``
        with one ``write``; returns the offset of the first (each next one
        is the previous offset plus 20 plus its data's length).

        :raises OSError: they could not be written; the log is unchanged.
        :raises struct.error: a message id is not 8 bytes.
        """
        return self._append_encoded(
            encode_batch(records), len(records), lambda: map(_DATA, records), timestamp_ns
        )

    def append_id_batch(self, ids: Sequence[int], bodies: Sequence[bytes], timestamp_ns: int) -> int:
        """
        Append NSQ messages (flag 0, ids as integers) published at
        ``timestamp_ns`` with one ``write``, as :meth:`append_many` does;
        returns the offset of the first.

        :raises OSError: they could not be written; the log is unchanged.
        """
        return self._append_encoded(
            encode_id_batch(ids, 0, bodies), len(bodies), lambda: iter(bodies), timestamp_ns
        )

    def _append_encoded(
        self, batch: bytes, count: int, datas: Callable[[], Iterable[bytes]], timestamp_ns: int
    ) -> int:
        """
        Append ``count`` encoded records; ``datas()`` gives their data, for
        the index of a long batch.
        """
        segment = self._segments[-1]
        if segment.size and segment.size + len(batch) > self._segment_bytes:
            self._roll()
            segment = self._segments[-1]
        start = segment.size
        if not batch:
            return segment.base + start
        self._write(batch, start)
        segment.crc = crc32(batch, segment.crc)
        if segment.newest < timestamp_ns:
            segment.newest = timestamp_ns
        segment.size = start + len(batch)
        # The index gets the batch's first record (one interval after the
        # last entry at least) and, in a batch longer than a few intervals,
        # the records one interval apart: reads walk a few KiB at most.
        interval = self._interval
        if self._last_entry < 0 or start - self._last_entry >= interval:
            self._index(segment, start)
        if len(batch) > _WALK_INTERVALS * interval:
            sizes = map(add, map(len, datas()), repeat(HEADER_SIZE))
            offsets = list(accumulate(sizes, initial=start))
            offsets.pop()
            at = bisect.bisect_left(offsets, self._last_entry + interval)
            while at < len(offsets):
                self._index(segment, offsets[at])
                at = bisect.bisect_left(offsets, offsets[at] + interval, at + 1)
        self._after_write(count)
        if self._retention is not None:
            self._retention.grew(len(batch))
        return segment.base + start

    def _index(self, segment: _Segment, pos: int) -> None:
        """Add the record at ``pos`` (in the segment) to the index."""
        newest = segment.newest
        segment.positions.append(segment.base + pos)
        segment.timestamps.append(newest)
        entry = INDEX_ENTRY.pack(pos, newest)
        self._pending_index += entry
        self._index_crc = crc32(entry, self._index_crc)
        self._last_entry = pos

    def _write(self, batch: bytes, start: int) -> None:
        fd = self._write_fd
        assert fd is not None
        write = self.os_write
        doing = "write"
        try:
            with memoryview(batch) as view:
                written = write(fd, view)
                while written < len(view):
                    written += write(fd, view[written:])
            if self._sync_every == 1:
                # A failed sync is a failed write: the append fails (its
                # publish is answered with the error) and is cut off.
                doing = "sync"
                self.os_fsync(fd)
        except OSError as error:
            _log.error("LOG({name}) failed to {doing} - {error}", name=self.name, doing=doing, error=error)
            try:
                os.ftruncate(fd, start)
                os.lseek(fd, start, os.SEEK_SET)
            except OSError:
                pass
            raise

    # -- syncing -------------------------------------------------------------

    def _after_write(self, count: int) -> None:
        if self._sync_every == 1:
            # _write synced the segment; the index is synced when sealed.
            if self._flush_index():
                self._index_unsynced = True
            return
        self._unsynced += count
        if 0 < self._sync_every <= self._unsynced:
            self._sync(inline=False, index=False)
        elif self._sync_call is None and not self._closed:
            self._sync_call = self._clock.callLater(self._sync_timeout, self._on_sync_timer)

    def _on_sync_timer(self) -> None:
        self._sync_call = None
        if self._unsynced:
            self._sync(inline=False, index=False)

    def sync(self) -> None:
        """Write pending index entries and ``fsync`` the segment and index now."""
        self._sync(inline=True)

    def _sync(self, inline: bool, index: bool = True) -> None:
        """
        Write pending index entries; ``fsync`` the segment, and the index
        too when ``index`` (and it changed), now (``inline``) or on the
        sync thread.
        """
        if self._sync_call is not None:
            if self._sync_call.active():
                self._sync_call.cancel()
            self._sync_call = None
        if self._flush_index():
            self._index_unsynced = True
        self._unsynced = 0
        worker = self._worker
        fds = [self._write_fd]
        # The index is only synced when it changed: it can be rebuilt.
        if index and self._index_unsynced:
            fds.append(self._index_fd)
            self._index_unsynced = False
        if worker is not None:
            for failure in worker.failures(self):
                _log.error("LOG({name}) failed to sync - {error}", name=self.name, error=failure)
            if not inline:
                for fd in fds:
                    if fd is not None:
                        worker.submit(self, fd, None, None)
                return
            worker.wait(self)
        for fd in fds:
            if fd is None:
                continue
            try:
                self.os_fsync(fd)
            except OSError as error:
                _log.error("LOG({name}) failed to sync - {error}", name=self.name, error=error)

    def _flush_index(self) -> bool:
        """Write pending index entries; whether there were any."""
        pending = self._pending_index
        if not pending or self._index_fd is None:
            return False
        self._pending_index = bytearray()
        try:
            _write_all(self._index_fd, bytes(pending))
        except OSError as error:
            # The index is rebuilt from the segment at the next open.
            _log.error("LOG({name}) failed to write index - {error}", name=self.name, error=error)
        return True

    # -- rolling and retention -----------------------------------------------

    def _roll(self, enforce: bool = True) -> None:
        """Seal the last segment and start the next one at ``next_offset``."""
        segment = self._segments[-1]
        self._pending_index += encode_seal(
            Seal(segment.newest, segment.size, segment.crc), self._index_crc
        )
        segment.sealed = True
        self._sync(inline=self._worker is None or self._sync_every == 1)
        self._close_writers()
        self._start_segment(segment.end, segment.newest)
        self._sync_directory()
        if enforce and self._retention is not None:
            self._retention.enforce()

    def _start_segment(self, base: int, newest: int) -> None:
        segment = _Segment(base)
        segment.newest = newest
        flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC
        self._write_fd = os.open(self._path(segment_file_name(base)), flags, 0o644)
        self._index_fd = os.open(self._path(index_file_name(base)), flags, 0o644)
        self._segments.append(segment)
        self._bases.append(base)
        self._last_entry = -1
        self._index_crc = 0

    def _sync_directory(self) -> None:
        try:
            fd = os.open(self.directory, os.O_RDONLY)
        except OSError:
            return
        try:
            if self._worker is not None and self._sync_every != 1:
                self._worker.submit(self, fd, None, None)
            else:
                self.os_fsync(fd)
        except OSError:
            pass
        finally:
            os.close(fd)

    def enforce_retention(self) -> None:
        """Delete what retention (of this log, or of its topic) no longer keeps."""
        if self._retention is not None:
            self._retention.enforce()

    def oldest_sealed(self) -> Optional[_Segment]:
        """The oldest segment if it is sealed (so retention may delete it), else ``None``."""
        segment = self._segments[0]
        return segment if segment.sealed else None

    def expire(self, cutoff: int) -> None:
        """Delete segments whose newest record is older than ``cutoff`` (ns)."""
        while self._segments[0].newest < cutoff:
            first = self._segments[0]
            if not first.sealed:
                if not first.size:
                    return
                # Everything is expired: seal the last segment to delete it.
                self._roll(enforce=False)
            self.drop_first_segment("older than the retention age")

    def drop_first_segment(self, reason: str) -> None:
        """Delete the oldest segment and its index (retention), logging ``reason``."""
        segment = self._segments.pop(0)
        self._bases.pop(0)
        fd = self._read_fds.pop(segment.base, None)
        if fd is not None:
            os.close(fd)
        for filename in (segment_file_name(segment.base), index_file_name(segment.base)):
            try:
                os.unlink(self._path(filename))
            except FileNotFoundError:
                pass
        if self._retention is not None:
            self._retention.total -= segment.size
        _log.info(
            "LOG({name}) deleted segment {file} ({size} bytes, offsets {base}-{end}): {reason}",
            name=self.name,
            file=segment_file_name(segment.base),
            size=segment.size,
            base=segment.base,
            end=segment.end,
            reason=reason,
        )

    # -- reading -------------------------------------------------------------

    def read(self, offset: int, max_size: int) -> Tuple[bytes, int]:
        """
        The whole records from ``offset`` that fit in ``max_size`` bytes,
        from one segment, as one ``bytes`` (a slice of the file: MetaQ's
        wire layout), and the offset to read next.  At ``next_offset`` the
        slice is empty (nothing new yet).

        Every record is checked (whole, checksum right) before it is
        served: the slice ends before the first that fails, and a read that
        starts at one raises :class:`DamagedRecord` (logged once per
        offset), whose ``nearest`` is the record after it.

        :raises OffsetOutOfRange: no record starts at ``offset``, or it is
            damaged (:class:`DamagedRecord`); its ``nearest`` is where to
            read instead.
        :raises RecordTooLarge: the first record does not fit in ``max_size``.
        """
        if max_size < 1:
            raise ValueError("max_size must be positive, not %d" % (max_size,))
        segments = self._segments
        if offset >= segments[-1].end or offset < segments[0].base:
            if offset == segments[-1].end:
                return b"", offset
            self._check_range(offset)
        segment = segments[bisect.bisect_right(self._bases, offset) - 1]
        if offset >= segment.end:
            self._in_gap(offset, segment)
        limit = offset + max_size
        if limit > segment.end:
            limit = segment.end
        positions = segment.positions
        first = positions[bisect.bisect_right(positions, offset) - 1]
        last = positions[bisect.bisect_right(positions, limit) - 1]
        fd = self._read_fd(segment.base)
        data = os.pread(fd, limit - first, first - segment.base)
        at = offset - first
        if at:
            start = record_start_at_or_before(data, 0, at)
            if start != at:
                if start + HEADER_SIZE > len(data):
                    # max_size was too small to hold the headers walked.
                    return self.read(offset, max(max_size, HEADER_SIZE))
                raise OffsetOutOfRange(offset, first + start, "is inside a record")
        walk = last - first if last > offset else at
        end = last_whole_end(data, walk, len(data))
        if end == at:
            size = self._record_size(fd, segment, offset)
            problem = self._damaged(fd, segment, offset, size)
            if problem is None:
                raise RecordTooLarge(offset, size)
            self._skip_damaged(segment, offset, problem)
        # No record that fails its checksum is served: the records are
        # checked (in C) up to the first bad one, which is skipped by a
        # move (MetaQ's 301) when a read starts at it.
        good, problem = check_records(data, at, end)
        if problem is not None:
            if good == at:
                self._skip_damaged(segment, offset, problem)
            end = good
        if at == 0 and end == len(data):
            return data, first + end
        return data[at:end], first + end

    def _check_range(self, offset: int) -> None:
        segments = self._segments
        if offset < segments[0].base:
            raise OffsetOutOfRange(offset, segments[0].base, "is before the first retained record")
        raise OffsetOutOfRange(offset, segments[-1].end, "is past the end of the log")

    def _in_gap(self, offset: int, segment: _Segment) -> None:
        following = self._segments[self._segments.index(segment) + 1]
        _log.warn(
            "LOG({name}) offsets {start}-{end} are missing (a damaged segment was set aside); "
            "read at {offset} skips to {next}",
            name=self.name,
            start=segment.end,
            end=following.base,
            offset=offset,
            next=following.base,
        )
        raise OffsetOutOfRange(offset, following.base, "is in a missing segment")

    def _record_size(self, fd: int, segment: _Segment, offset: int) -> int:
        header = os.pread(fd, HEADER_SIZE, offset - segment.base)
        if len(header) < HEADER_SIZE:
            return HEADER_SIZE
        return HEADER_SIZE + HEADER.unpack(header)[0]

    def _next_known_start(self, segment: _Segment, offset: int) -> int:
        """The first indexed record start after ``offset``, or the segment's end."""
        positions = segment.positions
        at = bisect.bisect_right(positions, offset)
        return positions[at] if at < len(positions) else segment.end

    def _damaged(self, fd: int, segment: _Segment, offset: int, size: int) -> Optional[str]:
        """
        What is wrong with the record at ``offset``, said to take ``size``
        bytes (more than a read allowed), or ``None`` when it is whole and
        its checksum right: it must end by the next indexed record.
        """
        if size < HEADER_SIZE or offset + size > self._next_known_start(segment, offset):
            return "record cut short (data length %d)" % (size - HEADER_SIZE,)
        record = os.pread(fd, size, offset - segment.base)
        return check_records(record, 0, len(record))[1]

    def _skip_damaged(self, segment: _Segment, offset: int, problem: str) -> None:
        """
        The record at ``offset`` fails its check: log it (once) and move
        the read to the next record, found by its length when the records
        from there lead exactly to the next indexed record (or the
        segment's end), else to that indexed record.

        :raises DamagedRecord: always.
        """
        following = self._damaged_records.get(offset)
        if following is None:
            following = known = self._next_known_start(segment, offset)
            fd = self._read_fd(segment.base)
            header = os.pread(fd, HEADER_SIZE, offset - segment.base)
            if len(header) == HEADER_SIZE:
                length = HEADER.unpack(header)[0]
                candidate = offset + HEADER_SIZE + length
                if 0 <= length and candidate < known:
                    span = os.pread(fd, known - candidate, candidate - segment.base)
                    if last_whole_end(span, 0, len(span)) == known - candidate:
                        following = candidate
            self._damaged_records[offset] = following
            _log.error(
                "LOG({name}) {problem} in the record at offset {offset} in {file}; "
                "not served, reads there move to {next}",
                name=self.name,
                problem=problem,
                offset=offset,
                file=self._path(segment_file_name(segment.base)),
                next=following,
            )
        raise DamagedRecord(offset, following, problem)

    def nearest_offset(self, offset: int) -> int:
        """
        The valid offset nearest to ``offset`` (MetaQ's ``offset``
        command): clamped to the retained range, the next segment's base
        in a missing segment, else the start of the record holding it.
        """
        segments = self._segments
        if offset <= segments[0].base:
            return segments[0].base
        if offset >= segments[-1].end:
            return segments[-1].end
        segment = segments[bisect.bisect_right(self._bases, offset) - 1]
        if offset >= segment.end:
            return segments[segments.index(segment) + 1].base
        positions = segment.positions
        first = positions[bisect.bisect_right(positions, offset) - 1]
        span = min(offset + HEADER_SIZE, segment.end) - first
        data = os.pread(self._read_fd(segment.base), span, first - segment.base)
        return first + record_start_at_or_before(data, 0, offset - first)

    def offset_for_timestamp(self, timestamp_ns: int) -> int:
        """
        Where to start reading to get every record published at or after
        ``timestamp_ns``: the last index entry older than it (so at most
        about one index interval of older records comes first), the first
        offset if none is, ``next_offset`` if every record is older.
        Found by bisection of the index; no record is read.
        """
        segments = self._segments
        if segments[-1].newest < timestamp_ns:
            return self.next_offset
        low, high = 0, len(segments)
        while low < high:
            middle = (low + high) // 2
            stamps = segments[middle].timestamps
            if stamps and stamps[0] < timestamp_ns:
                low = middle + 1
            else:
                high = middle
        if low == 0:
            return segments[0].base
        segment = segments[low - 1]
        at = bisect.bisect_left(segment.timestamps, timestamp_ns) - 1
        return segment.positions[at]

    def _read_fd(self, base: int) -> int:
        fd = self._read_fds.get(base)
        if fd is None:
            if len(self._read_fds) >= _READ_FDS:
                os.close(self._read_fds.pop(next(iter(self._read_fds))))
            fd = self._read_fds[base] = os.open(self._path(segment_file_name(base)), os.O_RDONLY)
        return fd

    # -- closing -------------------------------------------------------------

    def close(self) -> None:
        """Sync and close the files (a later ``PartitionLog`` of the directory reopens them)."""
        if self._closed:
            return
        if self._retention is not None and self._retention.logs == [self]:
            self._retention.stop()
        last = self._segments[-1]
        # The seal tells the next open the newest timestamp exactly; it is
        # dropped again when that open writes on.
        self._pending_index += encode_seal(Seal(last.newest, last.size, last.crc), self._index_crc)
        self._sync(inline=True)
        self._closed = True
        self._close_writers()
        for fd in self._read_fds.values():
            os.close(fd)
        self._read_fds.clear()

    def _close_writers(self) -> None:
        for fd in (self._write_fd, self._index_fd):
            if fd is not None:
                os.close(fd)
        self._write_fd = self._index_fd = None

    # -- opening and recovery ------------------------------------------------

    def _path(self, filename: str) -> str:
        return os.path.join(self.directory, filename)

    def _open(self) -> None:
        bases = sorted(
            base
            for base in (parse_segment_file_name(name) for name in os.listdir(self.directory))
            if base is not None
        )
        now = int(self._clock.seconds() * 1e9)
        newest = -(1 << 63)
        for number, base in enumerate(bases):
            if number == len(bases) - 1:
                self._recover_last(base, newest, now)
                break
            segment = self._load_sealed(base, newest, now)
            if segment is not None:
                self._segments.append(segment)
                self._bases.append(base)
                newest = segment.newest
        if not self._segments:
            self._start_segment(0, newest)
            return
        for before, after in zip(self._segments, self._segments[1:]):
            if before.end != after.base:
                _log.warn(
                    "LOG({name}) offsets {start}-{end} are missing; reads skip to {end}",
                    name=self.name,
                    start=before.end,
                    end=after.base,
                )

    def _load_sealed(self, base: int, newest: int, now: int) -> Optional[_Segment]:
        """A segment no longer written to: trusted if its seal matches, else
        checked record by record; set aside as ``.bad`` if damaged."""
        path = self._path(segment_file_name(base))
        entries, seal = self._read_index(base)
        size = os.stat(path).st_size
        segment = _Segment(base)
        segment.size = size
        segment.sealed = True
        if (
            seal is not None
            and seal.size == size
            and entries
            and entries[-1][0] < size
            and _file_crc(path) == seal.crc
        ):
            segment.newest = max(seal.newest, newest)
            self._fill_index(segment, entries)
            return segment
        with open(path, "rb") as segment_file:
            data = segment_file.read()
        scan = scan_records(data, 0, size, self._interval, [pos for pos, _ in entries])
        if scan.error is not None or not size:
            self._quarantine(base, scan.end, scan.error or "empty segment")
            return None
        # Without a seal the newest time is unknown: take one no record can
        # be newer than (keeps rewind and age retention conservative).
        stamp = seal.newest if seal is not None else max([now] + [e[1] for e in entries[-1:]])
        segment.newest = max(newest, stamp)
        entries = _rebuilt_entries(entries, scan, segment.newest)
        segment.crc = crc32(data)
        self._fill_index(segment, entries)
        if seal is not None and seal.size == size:
            # The seal (its index checksum right) covers whole records, the
            # records' checksums their data only: bytes of a header's
            # message id or flag were altered.  Served as they are, and
            # not sealed again, so each start says so until it is dealt with.
            _log.error(
                "LOG({name}) {file} fails its seal's CRC32 though every record passes its "
                "checksum: a message id or flag was altered (not covered by the records' "
                "checksums); its records are served as they are",
                name=self.name,
                file=path,
            )
            return segment
        index = b"".join(INDEX_ENTRY.pack(pos, stamp) for pos, stamp in entries)
        index += encode_seal(Seal(segment.newest, size, segment.crc), crc32(index))
        write_file_atomically(self._path(index_file_name(base)), index)
        _log.warn(
            "LOG({name}) {file} had no matching seal; checked {size} bytes record by record",
            name=self.name,
            file=path,
            size=size,
        )
        return segment

    def _recover_last(self, base: int, newest: int, now: int) -> None:
        """Validate the last segment record by record; cut it at the first bad record."""
        path = self._path(segment_file_name(base))
        entries, seal = self._read_index(base)
        with open(path, "rb") as segment_file:
            data = segment_file.read()
        scan = scan_records(data, 0, len(data), self._interval, [pos for pos, _ in entries])
        segment = _Segment(base)
        segment.size = scan.end
        segment.crc = crc32(memoryview(data)[: scan.end])
        clean = seal is not None and seal.size == scan.end and scan.confirmed == len(entries)
        kept = entries if clean else _rebuilt_entries(entries, scan, max(now, newest))
        if not scan.end:
            segment.newest = newest
        elif seal is not None and seal.size == scan.end and kept == entries:
            # Closed cleanly: the seal has the newest timestamp.
            segment.newest = max(newest, seal.newest)
        else:
            # Records after the last index entry have no known time: take
            # one no record can be newer than (keeps rewind conservative).
            segment.newest = max(newest, now, kept[-1][1])
        if scan.error is not None:
            cut = data[scan.end :]
            bad = "%s.%d.bad" % (path, scan.end)
            _log.warn(
                "LOG({name}) {reason} at offset {offset} in {file}; truncating the "
                "segment there and saving the {count} bytes cut as {bad}",
                name=self.name,
                reason=scan.error,
                offset=base + scan.end,
                file=path,
                count=len(cut),
                bad=bad,
            )
            with open(bad, "wb") as saved:
                saved.write(cut)
        self._fill_index(segment, kept)
        index = b"".join(INDEX_ENTRY.pack(pos, stamp) for pos, stamp in kept)
        if entries != kept:
            write_file_atomically(self._path(index_file_name(base)), index)
        flags = os.O_WRONLY | os.O_CREAT
        self._write_fd = os.open(path, flags, 0o644)
        os.ftruncate(self._write_fd, scan.end)
        os.lseek(self._write_fd, scan.end, os.SEEK_SET)
        self._index_fd = os.open(self._path(index_file_name(base)), flags, 0o644)
        os.ftruncate(self._index_fd, len(index))
        os.lseek(self._index_fd, len(index), os.SEEK_SET)
        self._last_entry = kept[-1][0] if kept else -1
        self._index_crc = crc32(index)
        self._segments.append(segment)
        self._bases.append(base)

    def _read_index(self, base: int) -> Tuple[List[Tuple[int, int]], Optional[Seal]]:
        path = self._path(index_file_name(base))
        try:
            with open(path, "rb") as index:
                return decode_index(index.read())
        except FileNotFoundError:
            return [], None
        except DiskFormatError as error:
            _log.warn(
                "LOG({name}) {file} is damaged ({error}); rebuilding it",
                name=self.name,
                file=path,
                error=error,
            )
            return [], None

    def _fill_index(self, segment: _Segment, entries: List[Tuple[int, int]]) -> None:
        base = segment.base
        segment.positions = array("q", [base + pos for pos, _ in entries])
        segment.timestamps = array("q", [stamp for _, stamp in entries])

    def _quarantine(self, base: int, at: int, reason: str) -> None:
        """Set a damaged segment and its index aside as ``.bad``."""
        path = self._path(segment_file_name(base))
        _log.error(
            "LOG({name}) {reason} at offset {offset} in {file}; saving the segment "
            "as {file}.bad, reads skip to the next segment",
            name=self.name,
            reason=reason,
            offset=base + at,
            file=path,
        )
        for filename in (segment_file_name(base), index_file_name(base)):
            try:
                os.rename(self._path(filename), self._path(filename) + ".bad")
            except FileNotFoundError:
                pass


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def _file_crc(path: str) -> int:
    crc = 0
    with open(path, "rb") as segment_file:
        while True:
            chunk = segment_file.read(_CHUNK)
            if not chunk:
                return crc
            crc = crc32(chunk, crc)


def _rebuilt_entries(
    entries: List[Tuple[int, int]], scan: RecordScan, stamp: int
) -> List[Tuple[int, int]]:
    """
    Index entries for the records a scan found: the old entries it
    confirmed, then the positions it listed with ``stamp`` (a time no
    record can be newer than, keeping rewind conservative) for records
    whose time was not indexed.
    """
    kept = entries[: scan.confirmed]
    if scan.starts:
        stamp = max([stamp] + [entry[1] for entry in kept[-1:]])
        kept = kept + [(pos, stamp) for pos in scan.starts]
    return kept
