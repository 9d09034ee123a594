# -*- test-case-name: tests.test_flight_log -*-
"""
The flight log: which messages a queue's owner holds outside the queue.

A channel takes messages out of its queue to deliver them (in flight) or to
wait until they are due (deferred); a topic holds deferred publishes until
it has a channel.  While held, a message is in no segment file: a killed
nsqd would lose it.  With ``--mem-queue-size=0`` the disk backend keeps,
beside each queue, ``NAME.diskqueue.flight.dat``: an append-only log of

- ``H``: held, ``i64 due | u32 length | message``: ``due`` is 0 for a
  message in flight, else what the owner keeps with a deferred message (a
  channel's due time in ns since the epoch, a topic's delay in ns);
- ``R``: released, ``16-byte id``: finished, or back in the queue.

after an 8-byte magic.  What was held and not released when nsqd died is
given back at the next start (:meth:`FlightLog.recover`).  Go nsqd ignores
the file.

The log is written by the queue's storage at the end of a reactor turn,
after the segment records of that turn and before the meta files, so a
message read out of a queue is held in the log before the queue's read
position says it is gone, and a message put back in a queue is in its
segment before the log releases it.  The log is cut back to its magic when
nothing is held, and rewritten with only what is held when it grows past
:data:`COMPACT_BYTES` and twice that.
"""

from __future__ import annotations

import os
from struct import Struct
from typing import Dict, List, Optional, Tuple

from txnsq.files import write_file_atomically

__all__ = ["COMPACT_BYTES", "FLIGHT_SUFFIX", "FlightLog", "flight_file_name"]

#: ``NAME.diskqueue.flight.dat``.
FLIGHT_SUFFIX = ".diskqueue.flight.dat"

MAGIC = b"TXNSQFL1"

#: A log longer than this (and than twice what it holds) is rewritten.
COMPACT_BYTES = 4 * 1024 * 1024

_HOLD = Struct(">cqI")
_HOLD_KIND = b"H"
_RELEASE_KIND = b"R"
_ID_SIZE = 16
# A message's ID: bytes 10-26 of its encoding (after timestamp and attempts).
_ID_START = 10
_ID_END = 26


def flight_file_name(name: str) -> str:
    """The flight log's file name for the queue ``name``."""
    return name + FLIGHT_SUFFIX


def _hold_record(due: int, data: bytes) -> bytes:
    return _HOLD.pack(_HOLD_KIND, due, len(data)) + data


class FlightLog:
    """
    One queue's flight log.  Not thread safe; the reactor thread owns it.

    :param path: the log file.
    :param sync: ``fsync`` after writing records that hold messages
        (``--sync-every=1``).
    :ivar held: what is held now, by message ID: ``(due, message)``.
    """

    def __init__(self, path: str, sync: bool) -> None:
        self.path = path
        self.sync = sync
        self.held: Dict[bytes, Tuple[int, bytes]] = {}
        self._pending = bytearray()
        # Whether the pending records hold a message (need a sync).
        self._holding = False
        self._fd: Optional[int] = None
        self._size = 0
        # The size of the records of what is held (a rewrite's size).
        self._held_bytes = 0

    def __repr__(self) -> str:
        return "<FlightLog %s held=%d>" % (self.path, len(self.held))

    # -- reading -----------------------------------------------------------

    def recover(self) -> List[Tuple[int, bytes]]:
        """
        What the file says is held, in the order it was held, and make
        that the log's state (a torn last record, from a crash mid-write,
        is ignored).  An unreadable file is set aside as ``.bad``.
        """
        try:
            with open(self.path, "rb") as log:
                data = log.read()
        except FileNotFoundError:
            return []
        held: Dict[bytes, Tuple[int, bytes]] = {}
        if data[: len(MAGIC)] != MAGIC:
            try:
                os.rename(self.path, self.path + ".bad")
            except OSError:
                pass
            return []
        pos = len(MAGIC)
        end = len(data)
        while pos < end:
            kind = data[pos : pos + 1]
            if kind == _HOLD_KIND:
                if pos + _HOLD.size > end:
                    break
                _, due, length = _HOLD.unpack_from(data, pos)
                start = pos + _HOLD.size
                if start + length > end or length < _ID_END:
                    break
                message = data[start : start + length]
                msg_id = message[_ID_START:_ID_END]
                held.pop(msg_id, None)  # held again: moves to the end
                held[msg_id] = (due, message)
                pos = start + length
            elif kind == _RELEASE_KIND:
                if pos + 1 + _ID_SIZE > end:
                    break
                held.pop(data[pos + 1 : pos + 1 + _ID_SIZE], None)
                pos += 1 + _ID_SIZE
            else:
                break
        self.held = held
        self._held_bytes = sum(_HOLD.size + len(message) for _, message in held.values())
        return list(held.values())

    # -- changes -------------------------------------------------------------

    def hold(self, due: int, data: bytes) -> None:
        """Hold the message ``data`` (``due`` 0: in flight)."""
        msg_id = data[_ID_START:_ID_END]
        old = self.held.get(msg_id)
        if old is not None:
            self._held_bytes -= _HOLD.size + len(old[1])
        self.held[msg_id] = (due, data)
        self._held_bytes += _HOLD.size + len(data)
        self._pending += _HOLD.pack(_HOLD_KIND, due, len(data))
        self._pending += data
        self._holding = True

    def release(self, msg_id: bytes) -> None:
        """The message ``msg_id`` is no longer held (unknown IDs are ignored)."""
        old = self.held.pop(msg_id, None)
        if old is not None:
            self._held_bytes -= _HOLD.size + len(old[1])
            self._pending += _RELEASE_KIND
            self._pending += msg_id

    def release_all(self) -> None:
        """Nothing is held any more."""
        if self.held:
            self.held = {}
            self._held_bytes = 0
            self._pending = bytearray()
            self._holding = False
            self._size = -1  # cut back at the next write

    @property
    def dirty(self) -> bool:
        """Whether there is something to write."""
        return bool(self._pending) or self._size < 0

    # -- files ---------------------------------------------------------------

    def write(self) -> None:
        """
        Write what changed: cut the file back when nothing is held, rewrite
        it when it grew too long, else append; ``fsync`` when records
        holding messages were written and :attr:`sync` is set.

        :raises OSError: the file could not be written (what changed is
            kept and written next time).
        """
        if not self._pending and self._size >= 0:
            return
        if not self.held:
            if self._size != len(MAGIC):
                self._reset_file()
            self._pending = bytearray()
            self._holding = False
            return
        grown = self._size + len(self._pending)
        if self._size < 0 or (grown > COMPACT_BYTES and grown > 2 * self._held_bytes):
            self.rewrite()
            return
        fd = self._open()
        pending = self._pending
        with memoryview(pending) as view:
            written = 0
            while written < len(view):
                written += os.write(fd, view[written:])
        self._size += len(pending)
        self._pending = bytearray()
        if self._holding and self.sync:
            os.fsync(fd)
        self._holding = False

    def rewrite(self) -> None:
        """
        Replace the file with one holding only what is held now (a
        temporary file, ``fsync``, rename).

        :raises OSError: it could not be written.
        """
        records = bytearray(MAGIC)
        for due, data in self.held.values():
            records += _hold_record(due, data)
        self._close_fd()
        write_file_atomically(self.path, records)
        self._size = len(records)
        self._pending = bytearray()
        self._holding = False

    def close(self) -> None:
        """Close the file (what is pending is not written)."""
        self._close_fd()

    def remove(self) -> None:
        """Forget everything and remove the file."""
        self.held = {}
        self._held_bytes = 0
        self._pending = bytearray()
        self._holding = False
        self._close_fd()
        self._size = 0
        try:
            os.unlink(self.path)
        except FileNotFoundError:
            pass

    # -- internals -----------------------------------------------------------

    def _open(self) -> int:
        fd = self._fd
        if fd is None:
            fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
            size = os.fstat(fd).st_size
            if size < len(MAGIC):
                os.ftruncate(fd, 0)
                os.write(fd, MAGIC)
                size = len(MAGIC)
            self._fd = fd
            self._size = size
        return fd

    def _reset_file(self) -> None:
        """Cut the file back to its magic (nothing is held)."""
        if self._fd is None and not os.path.exists(self.path):
            self._size = len(MAGIC)
            return
        fd = self._open()
        os.ftruncate(fd, len(MAGIC))
        self._size = len(MAGIC)

    def _close_fd(self) -> None:
        fd, self._fd = self._fd, None
        if fd is not None:
            os.close(fd)
