# -*- test-case-name: tests.test_storage_disk -*-
"""
The disk queues' shared turn: with ``--mem-queue-size=0`` every queue of
one storage ends its reactor turn together, records before flight logs
before meta files (:class:`Committer`), so that no message is ever only in
memory.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Dict

if TYPE_CHECKING:
    from txnsq.storage.disk import DiskQueue

__all__ = ["Committer"]


class _Queued:
    """A queue's place in its committer's next turn (an ``IDelayedCall`` look-alike)."""

    __slots__ = ("_committer", "_queue")

    def __init__(self, committer: "Committer", queue: "DiskQueue") -> None:
        self._committer = committer
        self._queue = queue

    def active(self) -> bool:
        return self._queue in self._committer._dirty

    def cancel(self) -> None:
        self._committer._discard(self._queue)


class Committer:
    """
    Ends the reactor turn of every queue of one storage together, in an
    order that never leaves a message only in memory (``--mem-queue-size=0``).

    :meth:`commit` writes, for every queue changed since the last one:
    first the segment records (``fsync`` with ``--sync-every=1``), then the
    flight logs, channels' before topics' (a deferred message moves from a
    topic's log to a channel's), then each queue's meta file as its sync
    policy says, and last removes the segments read to their end.  So a
    queue's read position never passes a message before the log holding it
    is written, and a log never releases a message put back in a queue
    before its record is written.  nsqd calls :meth:`commit` before any
    answer or message leaves (so an ``OK`` follows its records); otherwise
    it runs once per reactor turn.

    :param clock: the reactor whose turns are meant.
    :param sync: ``--sync-every=1``: ``fsync`` segment records before the
        logs that depend on them are written.
    """

    def __init__(self, clock: Any, sync: bool) -> None:
        self._clock = clock
        self.sync = sync
        self._dirty: Dict["DiskQueue", None] = {}
        self._call: Any = None

    def dirty(self, queue: "DiskQueue") -> _Queued:
        """``queue`` changed: include it in the next commit."""
        self._dirty[queue] = None
        if self._call is None:
            self._call = self._clock.callLater(0, self._turn)
        return _Queued(self, queue)

    def _discard(self, queue: "DiskQueue") -> None:
        """``queue`` wrote its changes itself (it closed)."""
        dirty = self._dirty
        dirty.pop(queue, None)
        call = self._call
        if not dirty and call is not None:
            self._call = None
            if call.active():
                call.cancel()

    def _turn(self) -> None:
        self._call = None
        self.commit()

    def commit(self) -> None:
        """Write every change made since the last commit, now."""
        call, self._call = self._call, None
        if call is not None and call.active():
            call.cancel()
        dirty = self._dirty
        if not dirty:
            return
        queues = list(dirty)
        dirty.clear()
        for queue in queues:
            queue._flush()
        if self.sync:
            for queue in queues:
                if queue._unsynced or queue._need_sync:
                    queue._fsync_write_file()
        # Channels (``topic:channel``) before topics.
        for queue in queues:
            if ":" in queue.name:
                queue._write_flight()
        for queue in queues:
            if ":" not in queue.name:
                queue._write_flight()
        for queue in queues:
            queue._end_of_turn()
