# -*- test-case-name: tests.test_storage_disk -*-
"""
The ``disk`` storage backend (the default): per topic and channel, up to
``--mem-queue-size`` messages in memory, the rest in go-diskqueue segment
files in ``--data-path``, and everything written to disk at a clean
shutdown.

Order is kept: a message goes to memory only while nothing of the queue is
on disk, so the memory front is always older than the disk part (go nsqd
picks between the two at random).  At shutdown the front is appended to
the files, as Go nsqd does.

Writes are batched: records are appended to a buffer that is written with
one ``write`` per reactor turn (or per 256 KiB), and read back from that
buffer if a consumer catches up first.  An MPUB's messages are framed into
that buffer in one call (:meth:`DiskQueue.put_many`), and reads cut every
whole record of a 64 KiB read-ahead in one call; both framings are
compiled on CPython (``txnsq/storage/_diskqueue_format.c``, the functions
of :mod:`txnsq.storage.diskqueue_format` the reference).  ``fsync`` and the meta file follow
``--sync-every`` (reads and writes, as go-diskqueue counts them) and
``--sync-timeout``, at the end of a reactor turn.

A write that fails (disk full, permissions) does not lose the message: the
queue keeps it in memory, sets :attr:`DiskQueue.error` (which makes the
topic refuse publishes and nsqd report itself unhealthy) and tries again
every second until writing works.
"""

from __future__ import annotations

import os
import weakref
from collections import deque
from typing import Any, Callable, Deque, Dict, List, Optional, Tuple

from twisted.logger import Logger
from twisted.plugin import IPlugin
from zope.interface import implementer

from txnsq.storage.disk_recovery import (
    SavedDeferred,
    open_state,
    read_saved_deferred,
    remove_file,
    segment_numbers,
)
from txnsq.storage.diskqueue_format import (
    MIN_MESSAGE_SIZE,
    RECORD_HEADER,
    CopyRun,
    DeferredState,
    QueueState,
    append_record,
    append_records,
    deferred_file_name,
    encode_deferred,
    encode_meta,
    meta_file_name,
    segment_file_name,
    split_records,
)
from txnsq.files import write_file_atomically
from txnsq.storage.committer import Committer
from txnsq.storage.deferred_copies import DeferredCopies
from txnsq.storage.flight_log import FlightLog, flight_file_name
from txnsq.storage.interfaces import IBackendQueue, IBatchQueue, IDeferredStore, IStorageBackend
from txnsq.storage.segment_reader import SegmentReader
from txnsq.storage.sync_worker import SyncWorker

__all__ = ["DiskQueue", "DiskStorage"]

#: Pending records are written once they reach this size, even mid-turn.
FLUSH_BYTES = 256 * 1024

#: Seconds between attempts to write again after a failed write.
RETRY_DELAY = 1.0

_RECORD_HEADER_SIZE = RECORD_HEADER.size

_log = Logger(namespace="txnsq.storage.disk")


@implementer(IBackendQueue, IBatchQueue, IDeferredStore)
class DiskQueue:
    """
    One topic's or channel's queue: a memory front spilling to segment
    files.  Made by :meth:`DiskStorage.open_queue`.

    :param name: the queue name (``topic`` or ``topic:channel``).
    :param directory: the data directory (``--data-path``).
    :param clock: for the end-of-turn write, the sync timer and retries.
    :param mem_limit: messages kept in memory (``--mem-queue-size``).
    :param max_bytes_per_file: segment size (``--max-bytes-per-file``).
    :param max_msg_size: the largest record accepted when reading
        (``--max-msg-size`` plus the message header, as Go nsqd).
    :param sync_every: operations between syncs (``--sync-every``); 0
        syncs on the timer only.
    :param sync_timeout: seconds after which pending operations are synced
        (``--sync-timeout``).
    :param sync_worker: where periodic syncs run, off the reactor thread;
        ``None`` syncs inline.  With ``sync_every=1`` syncs are always
        inline, so that a publish is on disk before its ``OK`` leaves.
    :param committer: ends this queue's reactor turns together with the
        other queues' (:class:`Committer`), and makes the queue keep a
        flight log of the messages its owner holds (:meth:`hold`,
        :meth:`release`); ``None``: the queue ends its own turns and keeps
        no log.

    :ivar error: why writes fail right now, or ``None``.
    :ivar journaled: whether :meth:`hold` and :meth:`release` are kept.
    """

    limit = None

    def __init__(
        self,
        name: str,
        directory: str,
        clock: Any,
        mem_limit: int,
        max_bytes_per_file: int,
        max_msg_size: int,
        sync_every: int,
        sync_timeout: float,
        sync_worker: Optional[SyncWorker] = None,
        committer: Optional[Committer] = None,
    ) -> None:
        self.name = name
        self._worker = sync_worker
        self._committer = committer
        self.journaled = committer is not None
        self._flight = FlightLog(
            os.path.join(directory, flight_file_name(name)),
            sync=sync_every == 1,
        )
        # Segments read to their end, removed once the turn is written.
        self._done_segments: List[int] = []
        self.error: Optional[str] = None
        self._directory = directory
        self._clock = clock
        self._mem_limit = mem_limit
        self._max_bytes_per_file = max_bytes_per_file
        self._max_msg_size = max_msg_size
        self._sync_every = sync_every if sync_every > 0 else -1
        self._sync_timeout = sync_timeout
        self._front: Deque[bytes] = deque()
        # Messages kept in memory while writes fail; newer than the disk part.
        self._overflow: Deque[bytes] = deque()
        # Disk state, as in the meta file; the write position counts the
        # records still pending in ``_pending``.
        self._depth = 0
        self._read_file = 0
        self._read_pos = 0
        self._write_file = 0
        self._write_pos = 0
        self._flushed_pos = 0
        self._pending = bytearray()
        self._write_fd: Optional[int] = None
        # The segment being read.
        self._reader = SegmentReader()
        self._unsynced = 0
        # A file was started or finished: sync at the end of this turn.
        self._need_sync = False
        self._flush_call: Any = None
        self._sync_call: Any = None
        self._retry_call: Any = None
        # Plain copies of deferred messages to skip when read (set by
        # load_deferred, and by recover_held after a crash).
        self._skips = DeferredCopies()
        self._saved: Optional[SavedDeferred] = None
        self._to_save: List[Tuple[int, bytes]] = []
        self._closed = False
        #: The function writing bytes to a file descriptor; a test seam for
        #: failing disks.
        self.os_write: Callable[[int, Any], int] = os.write
        self.os_fsync: Callable[[int], None] = os.fsync
        self._open()

    def __repr__(self) -> str:
        return "<DiskQueue %r depth=%d front=%d>" % (
            self.name,
            self.depth(),
            len(self._front),
        )

    # -- IBackendQueue -----------------------------------------------------

    def put(self, data: bytes) -> None:
        """Append one message: in memory while there is room and nothing on
        disk, else to the segment files."""
        if (
            not self._depth
            and self.error is None
            and len(self._front) < self._mem_limit
        ):
            self._front.append(data)
        elif self.error is None:
            self._append(data)
        else:
            self._overflow.append(data)

    def put_many(self, messages: List[bytes]) -> None:
        """
        Append several messages, in order: what :meth:`put` of each does,
        with the records of those that go to the segment files framed in
        one go.
        """
        count = len(messages)
        index = 0
        if not self._depth and self.error is None:
            front = self._front
            room = self._mem_limit - len(front)
            if room > 0:
                index = room if room < count else count
                front.extend(messages[:index] if index < count else messages)
        if index < count:
            if self.error is None:
                index = self._append_many(messages, index)
            if index < count:
                self._overflow.extend(messages[index:])

    def read(self) -> Optional[bytes]:
        """The oldest message: from memory, else from disk."""
        front = self._front
        if front:
            return front.popleft()
        if self._depth:
            records = self._reader.records
            if records:
                # The next record, already cut from the read-ahead; what
                # _consumed does, inline: this is the drain's per-message path.
                record = records.pop()
                self._read_pos += _RECORD_HEADER_SIZE + len(record)
                self._depth -= 1
                self._unsynced += 1
                if self._flush_call is None and not self._closed:
                    if 0 < self._sync_every <= self._unsynced:
                        self._flush_call = self._turn_call()
                    elif self._sync_call is None:
                        self._sync_call = self._clock.callLater(self._sync_timeout, self._on_sync_timer)
                if not records and self._read_file < self._write_file:
                    if self._read_pos >= self._reader.complete_end():
                        self._next_read_file()
                return record
            data = self._read_disk()
            if data is not None:
                return data
        if self._overflow:
            return self._overflow.popleft()
        return None

    def depth(self) -> int:
        """Messages that :meth:`read` would still return."""
        copies = self._skips.count
        disk = self._depth - copies
        if disk <= 0 and not copies and self._unread_positions():
            # A meta file that undercounts must not hide what is there.
            disk = 1
        return len(self._front) + disk + len(self._overflow)

    def backend_depth(self) -> int:
        """
        The messages of :meth:`depth` past the memory front (Go's
        ``backend.Depth()`` in stats): on disk, or held in memory for the
        disk while writes fail.
        """
        return self.depth() - len(self._front)

    def empty(self) -> None:
        """Drop every message; the queue's files are removed."""
        self._front.clear()
        self._overflow.clear()
        self._to_save = []
        self._drop_disk_part()
        self._remove(deferred_file_name(self.name))
        self._saved = None
        self._flight.release_all()
        self.write_flight_log()
        self._done_segments = []
        if self.error is not None:
            self._recovered()
        self._sync()

    def close(self) -> None:
        """
        Write everything to disk: the memory front, messages held after a
        failed write, and the deferred messages passed to
        :meth:`save_deferred`; then sync and close the files.
        """
        if self._closed:
            return
        self._closed = True
        self._cancel_timers()
        held = list(self._front) + list(self._overflow)
        self._front.clear()
        self._overflow.clear()
        self.error = None
        for data in held:
            self._append(data)
        deferred, self._to_save = self._to_save, []
        skips = self._skips
        runs = skips.unread_runs(self._read_file, self._read_pos)
        new_run: Optional[List[int]] = None
        for _, data in deferred:
            if skips.take_unread(data):
                # Its copy from an earlier shutdown is still unread.
                continue
            self._append(data)
            if new_run is None:
                # Where the first copy went (it may have started a segment).
                start = self._write_pos - RECORD_HEADER.size - len(data)
                new_run = [self._write_file, start, 0]
                runs.append(new_run)
            new_run[2] += 1
        self._sync()
        lost = len(self._overflow)
        if lost:
            _log.critical(
                "DISKQUEUE({name}): {count} messages could not be written and are lost - {error}",
                name=self.name,
                count=lost,
                error=self.error,
            )
        elif deferred:
            self._write_deferred(deferred, runs)
        self._remove_done_segments()
        if not lost:
            # Everything held is in the segments (or the deferred file) now.
            self._flight.remove()
        self._flight.close()
        self._close_files()
        self._cancel_timers()

    def delete(self) -> None:
        """Drop every message and remove the queue's files for good."""
        self._closed = True
        self._cancel_timers()
        if self._worker is not None:
            self._worker.wait(self)
        self._front.clear()
        self._overflow.clear()
        self._to_save = []
        self._close_files()
        self._pending = bytearray()
        for number in self._segment_numbers():
            self._remove(segment_file_name(self.name, number))
        self._remove(meta_file_name(self.name))
        self._remove(deferred_file_name(self.name))
        self._flight.remove()
        self._done_segments = []
        self._depth = 0

    # -- IDeferredStore ----------------------------------------------------

    def save_deferred(self, items: List[Tuple[int, bytes]]) -> None:
        """Keep these deferred messages; :meth:`close` writes them."""
        self._to_save = list(items)

    def load_deferred(self) -> List[Tuple[int, bytes]]:
        """
        The deferred messages saved at the last clean shutdown, if the
        queue was not touched since; their plain copies will be skipped.
        """
        saved, self._saved = self._saved, None
        if saved is None:
            return []
        state, items = saved
        self._skips.load(state, items)
        # Records cut ahead were cut without looking for these copies.
        self._reader.records = []
        self._remove(deferred_file_name(self.name))
        return items

    # -- flight log --------------------------------------------------------

    def hold(self, due: int, data: bytes) -> None:
        """
        The owner holds the message ``data`` outside the queue: in flight
        (``due`` 0) or deferred (``due`` is the owner's, kept with it).
        Logged only while :attr:`journaled`.
        """
        self._flight.hold(due, data)
        if self._flush_call is None and not self._closed:
            self._flush_call = self._turn_call()

    def release(self, msg_id: bytes) -> None:
        """The owner no longer holds the message ``msg_id`` (finished, or put back)."""
        self._flight.release(msg_id)
        if self._flush_call is None and not self._closed:
            self._flush_call = self._turn_call()

    def recover_held(self) -> List[Tuple[int, bytes]]:
        """
        After a crash: the messages the owner held when it died.  Those that
        were in flight are appended to the queue here (and synced); the
        deferred ones are returned as ``(due, data)``, still held.
        Returns nothing after a clean shutdown.
        """
        items = self._flight.recover()
        if not items:
            return []
        deferred = [(due, data) for due, data in items if due]
        in_flight = [data for due, data in items if not due]
        if deferred:
            # A clean shutdown before the crash may have left plain copies
            # of them in the segments, whose skipping was not recorded:
            # skip records equal to them, up to where the segments ended.
            self._skips.hold(deferred, (self._write_file, self._write_pos))
            self._reader.records = []
        _log.warn(
            "DISKQUEUE({name}): recovered {in_flight} in-flight and {deferred} "
            "deferred messages from {file}",
            name=self.name,
            in_flight=len(in_flight),
            deferred=len(deferred),
            file=flight_file_name(self.name),
        )
        for data in in_flight:
            self._flight.release(data[10:26])
            self._append(data)
        self._sync()
        try:
            self._flight.rewrite()
        except OSError as error:
            _log.error(
                "DISKQUEUE({name}) failed to write {file} - {error}",
                name=self.name,
                file=flight_file_name(self.name),
                error=error,
            )
        return deferred

    # -- the committer's steps (txnsq.storage.committer.CommittedQueue) ------

    def write_records(self) -> bool:
        """Write the pending records (a commit's first step); ``False`` if that failed."""
        return self._flush()

    def fsync_records(self) -> None:
        """``fsync`` the records written since the last sync, if any (with ``--sync-every=1``)."""
        if self._unsynced or self._need_sync:
            self._fsync_write_file()

    def write_flight_log(self) -> None:
        """Write the flight log's changes (part of a commit)."""
        flight = self._flight
        if flight.dirty:
            try:
                flight.write()
            except OSError as error:
                _log.error(
                    "DISKQUEUE({name}) failed to write {file} - {error}",
                    name=self.name,
                    file=flight_file_name(self.name),
                    error=error,
                )

    def _turn_call(self) -> Any:
        """Have :meth:`end_turn` run at the end of this reactor turn."""
        committer = self._committer
        if committer is not None:
            return committer.dirty(self)
        return self._clock.callLater(0, self.end_turn)

    def _remove_done_segments(self) -> None:
        done, self._done_segments = self._done_segments, []
        for number in done:
            self._remove(segment_file_name(self.name, number))

    # -- public extras -----------------------------------------------------

    def sync(self) -> None:
        """Write pending records, ``fsync`` and persist the meta file now."""
        self._sync()

    def state(self) -> QueueState:
        """The queue's disk state, as the meta file would record it now."""
        return QueueState(
            self._depth,
            self._read_file,
            self._read_pos,
            self._write_file,
            self._write_pos,
        )

    # -- opening -----------------------------------------------------------

    def _path(self, filename: str) -> str:
        return os.path.join(self._directory, filename)

    def _open(self) -> None:
        """Pick up where the files say the queue was."""
        recorded, state = open_state(self._directory, self.name, self._max_msg_size)
        self._depth = state.depth
        self._read_file = state.read_file
        self._read_pos = state.read_pos
        self._write_file = state.write_file
        self._write_pos = state.write_pos
        self._flushed_pos = self._write_pos
        self._saved = read_saved_deferred(self._directory, self.name, recorded, state)

    # -- writing -----------------------------------------------------------

    def _append(self, data: bytes) -> None:
        """Add one record to the pending writes."""
        total = RECORD_HEADER.size + len(data)
        if self._write_pos and self._write_pos + total > self._max_bytes_per_file:
            self._roll()
            if self.error is not None:
                self._overflow.append(data)
                return
        pending_size = append_record(self._pending, data)
        self._write_pos += total
        self._depth += 1
        self._unsynced += 1
        if pending_size >= FLUSH_BYTES:
            self._flush()
        # The end of the turn writes what is left and syncs when it is time.
        if self._flush_call is None and not self._closed:
            self._flush_call = self._turn_call()

    def _append_many(self, messages: List[bytes], index: int) -> int:
        """
        :meth:`_append` of each of ``messages[index:]``, a run of records
        at a time (``append_records``) between the points where the
        segment is full or the pending records are to be written; stops
        where a write fails.

        :return: the index of the first message not taken (all of them
            unless :attr:`error` is set).
        """
        count = len(messages)
        appended = False
        while index < count:
            taken, write_pos = append_records(
                self._pending, messages, index, self._write_pos, self._max_bytes_per_file, FLUSH_BYTES
            )
            if taken == index:
                # The next record would take the segment past its size.
                self._roll()
                if self.error is not None:
                    self._overflow.append(messages[index])
                    index += 1
                    break
                continue
            added = taken - index
            index = taken
            appended = True
            self._write_pos = write_pos
            self._depth += added
            self._unsynced += added
            if len(self._pending) >= FLUSH_BYTES:
                self._flush()
                if self.error is not None:
                    break
        # The end of the turn writes what is left and syncs when it is time.
        if appended and self._flush_call is None and not self._closed:
            self._flush_call = self._turn_call()
        return index

    def _roll(self) -> None:
        """Start the next segment (after writing and syncing this one)."""
        if not self._flush():
            return
        if self._worker is not None and self._write_fd is not None:
            self._worker.submit(self, self._write_fd, None, None)
        else:
            self._fsync_write_file()
        self._close_write_file()
        self._write_file += 1
        self._write_pos = 0
        self._flushed_pos = 0
        # go-diskqueue syncs whenever it changes files.
        self._schedule_sync()

    def _flush(self) -> bool:
        """Write the pending records; ``False`` if that failed."""
        pending = self._pending
        if not pending:
            return True
        start = self._flushed_pos
        try:
            fd = self._write_fd
            if fd is None:
                fd = os.open(
                    self._path(segment_file_name(self.name, self._write_file)),
                    os.O_WRONLY | os.O_CREAT,
                    0o600,
                )
                self._write_fd = fd
                os.lseek(fd, start, os.SEEK_SET)
            write = self.os_write
            with memoryview(pending) as view:
                written = write(fd, view)
                while written < len(view):
                    written += write(fd, view[written:])
        except OSError as error:
            self._write_failed(error, start)
            return False
        self._pending = bytearray()
        self._flushed_pos = self._write_pos
        return True

    def _write_failed(self, error: OSError, start: int) -> None:
        """
        Writing the pending records failed: keep them in memory, cut the
        segment back to what was whole, continue in a new segment later.
        """
        messages = _records(self._pending)
        self._pending = bytearray()
        self._depth -= len(messages)
        self._overflow.extendleft(reversed(messages))
        fd = self._write_fd
        if fd is not None:
            try:
                os.ftruncate(fd, start)
            except OSError:
                pass
        self._close_write_file()
        if start:
            self._write_file += 1
        self._write_pos = 0
        self._flushed_pos = 0
        if self.error is None:
            _log.error(
                "DISKQUEUE({name}) failed to write - {error}",
                name=self.name,
                error=error,
            )
        self.error = "failed to write to diskqueue %s - %s" % (self.name, error)
        if self._retry_call is None and not self._closed:
            self._retry_call = self._clock.callLater(RETRY_DELAY, self._retry)

    def _retry(self) -> None:
        """Try to write the messages held since a failed write."""
        self._retry_call = None
        held = list(self._overflow)
        self._overflow.clear()
        self.error = None
        for index, data in enumerate(held):
            self._append(data)
            if self.error is not None:
                self._overflow.extend(held[index + 1 :])
                return
        if self._flush():
            self._sync()
            if self.error is None:
                self._recovered()

    def _recovered(self) -> None:
        self.error = None
        if self._retry_call is not None:
            self._retry_call.cancel()
            self._retry_call = None
        _log.info("DISKQUEUE({name}): writing works again", name=self.name)

    def end_turn(self) -> None:
        """Write what this reactor turn put; sync if it is time to (a commit's last step)."""
        self._flush_call = None
        if self._done_segments:
            self._remove_done_segments()
        if not self._flush():
            return
        if self._need_sync:
            self._sync(inline=self._sync_every == 1)
        elif self._unsynced:
            if 0 < self._sync_every <= self._unsynced:
                self._sync(inline=self._sync_every == 1)
            elif self._sync_call is None:
                self._sync_call = self._clock.callLater(self._sync_timeout, self._on_sync_timer)

    def _schedule_sync(self) -> None:
        """Sync at the end of this turn."""
        self._need_sync = True
        if self._flush_call is None and not self._closed:
            self._flush_call = self._turn_call()

    def _on_sync_timer(self) -> None:
        self._sync_call = None
        if self._unsynced:
            self._sync(inline=False)

    def _sync(self, inline: bool = True) -> None:
        """
        Write pending records, fsync the segment, persist the meta file:
        now, or (``inline=False`` with a sync worker) on the worker thread.
        """
        if self._sync_call is not None:
            self._sync_call.cancel()
            self._sync_call = None
        if not self._flush():
            return
        worker = self._worker
        meta_path = self._path(meta_file_name(self.name))
        if worker is not None:
            for failure in worker.failures(self):
                _log.error(
                    "DISKQUEUE({name}) failed to sync - {error}",
                    name=self.name,
                    error=failure,
                )
            if not inline:
                worker.submit(self, self._write_fd, meta_path, encode_meta(self.state()))
                self._unsynced = 0
                self._need_sync = False
                return
            # Earlier syncs must land first: their meta files are older.
            worker.wait(self)
        if not self._fsync_write_file():
            # The meta file must not count records that may not be on disk.
            return
        try:
            write_file_atomically(meta_path, encode_meta(self.state()))
        except OSError as error:
            _log.error(
                "DISKQUEUE({name}) failed to sync - {error}",
                name=self.name,
                error=error,
            )
            return
        self._unsynced = 0
        self._need_sync = False

    def _fsync_write_file(self) -> bool:
        """
        ``fsync`` the segment being written; ``False`` if that failed.  A
        failed sync is a failed write: the records written since the last
        sync may not be on disk, so :attr:`error` is set (the publishes
        this sync covers are answered with it, see
        :meth:`Topic.write_error <txnsq.nsqd.topic.Topic.write_error>`)
        until a later sync succeeds (retried as a failed write is).
        """
        fd = self._write_fd
        if fd is None:
            return True
        try:
            self.os_fsync(fd)
        except OSError as error:
            if self.error is None:
                _log.error(
                    "DISKQUEUE({name}) failed to sync - {error}",
                    name=self.name,
                    error=error,
                )
            # Set even when the next fsync succeeds: Linux reports a
            # failed writeback once, and the records it covered may be gone.
            self.error = "failed to sync diskqueue %s - %s" % (self.name, error)
            if self._retry_call is None and not self._closed:
                self._retry_call = self._clock.callLater(RETRY_DELAY, self._retry)
            return False
        return True

    def _write_deferred(self, items: List[Tuple[int, bytes]], runs: List[List[int]]) -> None:
        state = DeferredState(self.state(), tuple(CopyRun(*run) for run in runs))
        path = self._path(deferred_file_name(self.name))
        try:
            write_file_atomically(path, encode_deferred(state, items))
        except OSError as error:
            _log.error(
                "DISKQUEUE({name}) failed to write {file} - {error}; deferred "
                "messages will be delivered without their delay",
                name=self.name,
                file=path,
                error=error,
            )

    # -- reading -----------------------------------------------------------

    def _unread_positions(self) -> bool:
        return self._read_file != self._write_file or self._read_pos != self._write_pos

    def _read_disk(self) -> Optional[bytes]:
        """The next record from the segments, or ``None`` at the end."""
        header = RECORD_HEADER.size
        while True:
            number = self._read_file
            pos = self._read_pos
            if number >= self._write_file:
                if number > self._write_file or pos >= self._write_pos:
                    self._at_tail()
                    self._reader.drop_buffer()
                    return None
                if pos >= self._flushed_pos:
                    data = self._read_pending(pos - self._flushed_pos)
                    if data is None:
                        continue
                    return data
                end = self._flushed_pos
            else:
                end = -1
            reader = self._reader
            if reader.number != number and not self._open_read_file():
                continue
            if end < 0:
                end = reader.complete_end()
            if pos >= end:
                self._next_read_file()
                continue
            offset = reader.buffered(pos, header)
            if offset < 0:
                self._bad_file("truncated record header at %d" % (pos,))
                continue
            (length,) = RECORD_HEADER.unpack_from(reader.buf, offset)
            if length < MIN_MESSAGE_SIZE or length > self._max_msg_size:
                self._bad_file("invalid message read size (%d)" % (length,))
                continue
            total = header + length
            if pos + total > end:
                self._bad_file("truncated record at %d" % (pos,))
                continue
            offset = reader.buffered(pos, total)
            if offset < 0:
                self._bad_file("truncated record at %d" % (pos,))
                continue
            skips = self._skips
            if skips.count or skips.held:
                data = reader.buf[offset + header : offset + total]
            else:
                # This record and the whole, valid ones after it in the
                # read-ahead, in one go; read() takes the others from
                # reader.records.  Whatever ends the run (a record not
                # read ahead, the end, a bad length) is met here again.
                records, _ = split_records(
                    reader.buf,
                    offset,
                    end - reader.buf_pos,
                    MIN_MESSAGE_SIZE,
                    self._max_msg_size,
                )
                records.reverse()
                data = records.pop()
                reader.records = records
            self._consumed(pos + total)
            if number < self._write_file and self._read_pos >= end:
                self._next_read_file()
            if skips.count and skips.skip_copy(number, pos, data):
                continue
            if skips.held and skips.skip_held_copy(number, pos, data):
                continue
            return data

    def _read_pending(self, offset: int) -> Optional[bytes]:
        """A record still in the write buffer (a consumer caught up)."""
        pending = self._pending
        header = RECORD_HEADER.size
        (length,) = RECORD_HEADER.unpack_from(pending, offset)
        data = bytes(pending[offset + header : offset + header + length])
        number, pos = self._read_file, self._read_pos
        self._consumed(pos + header + length)
        skips = self._skips
        if skips.count and skips.skip_copy(number, pos, data):
            return None
        return data

    def _consumed(self, new_pos: int) -> None:
        self._read_pos = new_pos
        self._depth -= 1
        self._unsynced += 1
        if self._flush_call is None and not self._closed:
            if 0 < self._sync_every <= self._unsynced:
                self._flush_call = self._turn_call()
            elif self._sync_call is None:
                self._sync_call = self._clock.callLater(self._sync_timeout, self._on_sync_timer)

    def _open_read_file(self) -> bool:
        """Open the segment to read; a missing one is skipped (``False``)."""
        number = self._read_file
        path = self._path(segment_file_name(self.name, number))
        try:
            self._reader.open(path, number)
        except OSError as error:
            _log.error(
                "DISKQUEUE({name}) unable to open {file} - {error}; skipping it",
                name=self.name,
                file=path,
                error=error,
            )
            self._skip_read_file()
            return False
        return True

    def _next_read_file(self) -> None:
        """The segment is read: delete it and go on to the next."""
        self._close_read_file()
        if self._committer is not None:
            # Not before the flight log holding its last messages is written.
            self._done_segments.append(self._read_file)
        else:
            self._remove(segment_file_name(self.name, self._read_file))
        self._read_file += 1
        self._read_pos = 0
        self._schedule_sync()

    def _skip_read_file(self) -> None:
        """Go on to the next segment without reading this one to its end."""
        if self._read_file == self._write_file:
            # The bad segment is also the one written to: write on in a
            # new one, moving any pending records there.
            held = _records(self._pending)
            self._pending = bytearray()
            self._depth -= len(held)
            self._close_write_file()
            self._write_file += 1
            self._write_pos = 0
            self._flushed_pos = 0
            for data in held:
                self._append(data)
        self._close_read_file()
        self._read_file += 1
        self._read_pos = 0
        self._schedule_sync()
        if not self._unread_positions():
            self._at_tail()

    def _bad_file(self, reason: str) -> None:
        """A segment cannot be read on: set it aside as ``.bad``."""
        path = self._path(segment_file_name(self.name, self._read_file))
        _log.warn(
            "DISKQUEUE({name}) {reason} in {file}; jump to next file and "
            "saving bad file as {file}.bad",
            name=self.name,
            reason=reason,
            file=path,
        )
        self._close_read_file()
        try:
            os.rename(path, path + ".bad")
        except OSError as error:
            _log.error(
                "DISKQUEUE({name}) failed to rename bad diskqueue file {file} - {error}",
                name=self.name,
                file=path,
                error=error,
            )
        self._skip_read_file()

    def _at_tail(self) -> None:
        """Everything was read: whatever the counts say, the queue is empty."""
        if self._depth:
            _log.error(
                "DISKQUEUE({name}) {kind} depth at tail ({depth}), resetting 0...",
                name=self.name,
                kind="negative" if self._depth < 0 else "positive",
                depth=self._depth,
            )
            self._depth = 0
        self._skips.forget()
        if self._read_file > self._write_file:
            self._write_file = self._read_file
            self._write_pos = 0
            self._flushed_pos = 0

    # -- files -------------------------------------------------------------

    def _drop_disk_part(self) -> None:
        """Remove every segment and start over after the last one."""
        self._close_files()
        self._pending = bytearray()
        for number in self._segment_numbers():
            self._remove(segment_file_name(self.name, number))
        self._write_file += 1
        self._write_pos = 0
        self._flushed_pos = 0
        self._read_file = self._write_file
        self._read_pos = 0
        self._depth = 0
        self._skips.forget()

    def _segment_numbers(self) -> List[int]:
        return segment_numbers(self._directory, self.name)

    def _remove(self, filename: str) -> None:
        remove_file(self._directory, self.name, filename)

    def _close_read_file(self) -> None:
        self._reader.close()

    def _close_write_file(self) -> None:
        fd = self._write_fd
        if fd is not None:
            self._write_fd = None
            try:
                os.close(fd)
            except OSError:
                pass

    def _close_files(self) -> None:
        self._close_read_file()
        self._close_write_file()

    def _cancel_timers(self) -> None:
        for attribute in ("_flush_call", "_sync_call", "_retry_call"):
            call = getattr(self, attribute)
            if call is not None:
                if call.active():
                    call.cancel()
                setattr(self, attribute, None)


def _records(buffer: bytearray) -> List[bytes]:
    """The messages of a run of whole records."""
    messages = []
    offset = 0
    header = RECORD_HEADER.size
    end = len(buffer)
    while offset < end:
        (length,) = RECORD_HEADER.unpack_from(buffer, offset)
        offset += header
        messages.append(bytes(buffer[offset : offset + length]))
        offset += length
    return messages


@implementer(IPlugin, IStorageBackend)
class DiskStorage:
    """The ``disk`` backend: memory fronts spilling to go-diskqueue files."""

    name = "disk"
    description = (
        "up to --mem-queue-size messages in memory, the rest in go-diskqueue "
        "files in --data-path; everything kept across a clean restart"
    )
    durable = True

    def __init__(self) -> None:
        self._worker: Optional[SyncWorker] = None
        # Per clock (reactor), per --sync-every=1 or not.
        self._committers: "weakref.WeakKeyDictionary[Any, Dict[bool, Committer]]" = (
            weakref.WeakKeyDictionary()
        )

    def barrier(self, options: Any, clock: Any) -> Optional[Callable[[], None]]:
        """
        With ``--mem-queue-size=0``: what nsqd must call before an answer
        or a message leaves it, so that every record it depends on is
        written first (:meth:`Committer.commit`); else ``None``.
        """
        committer = self._committer(options, clock)
        return committer.commit if committer is not None else None

    def _committer(self, options: Any, clock: Any) -> Optional[Committer]:
        """The committer of ``clock``'s queues with ``--mem-queue-size=0``."""
        if int(options.mem_queue_size) != 0:
            return None
        sync = int(options.sync_every) == 1
        by_sync = self._committers.get(clock)
        if by_sync is None:
            by_sync = self._committers[clock] = {}
        committer = by_sync.get(sync)
        if committer is None:
            committer = by_sync[sync] = Committer(clock, sync)
        return committer

    def open_queue(self, name: str, options: Any, clock: Any) -> DiskQueue:
        """Open the queue's files in ``options.data_path`` (the current
        directory when empty, as Go nsqd).  With ``--mem-queue-size=0``
        the queues end their turns together and keep flight logs."""
        return DiskQueue(
            name,
            options.data_path or os.getcwd(),
            clock,
            mem_limit=int(options.mem_queue_size),
            max_bytes_per_file=int(options.max_bytes_per_file),
            max_msg_size=int(options.max_msg_size) + MIN_MESSAGE_SIZE,
            sync_every=int(options.sync_every),
            sync_timeout=float(options.sync_timeout),
            sync_worker=self.sync_worker(),
            committer=self._committer(options, clock),
        )

    def sync_worker(self) -> SyncWorker:
        """The one thread syncing every queue of this backend."""
        if self._worker is None:
            self._worker = SyncWorker(write_file_atomically)
        return self._worker
