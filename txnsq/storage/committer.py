# -*- test-case-name: tests.test_storage_disk -*-
"""
The disk queues' shared turn: with ``--mem-queue-size=0`` every queue of
one storage ends its reactor turn together, records before flight logs
before meta files (:class:`Committer`), so that no message is ever only in
memory.
"""

from __future__ import annotations

from typing import Any, Dict, Protocol

__all__ = ["CommittedQueue", "Committer"]


class CommittedQueue(Protocol):
    """What a committer needs of a queue (``txnsq.storage.disk.DiskQueue``)."""

    #: ``topic`` or ``topic:channel``.
    name: str

    def write_records(self) -> bool:
        """Write the records put since the last commit; ``False`` if that failed."""

    def fsync_records(self) -> None:
        """``fsync`` the records written since the last sync, if any."""

    def write_flight_log(self) -> None:
        """Write the flight log's changes."""

    def end_turn(self) -> None:
        """The rest of the reactor turn's work: the meta file, done segments."""


class _Queued:
    """A queue's place in its committer's next turn (an ``IDelayedCall`` look-alike)."""

    __slots__ = ("_committer", "_queue")

    def __init__(self, committer: "Committer", queue: CommittedQueue) -> None:
        self._committer = committer
        self._queue = queue

    def active(self) -> bool:
        return self._committer.pending(self._queue)

    def cancel(self) -> None:
        self._committer.discard(self._queue)


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
        self._dirty: Dict[CommittedQueue, None] = {}
        self._call: Any = None

    def dirty(self, queue: CommittedQueue) -> _Queued:
        """``queue`` changed: include it in the next commit."""
        self._dirty[queue] = None
        if self._call is None:
            self._call = self._clock.callLater(0, self._turn)
        return _Queued(self, queue)

    def pending(self, queue: CommittedQueue) -> bool:
        """Whether ``queue`` is in the next commit."""
        return queue in self._dirty

    def discard(self, queue: CommittedQueue) -> None:
        """``queue`` wrote its changes itself (it closed): leave it out of the next commit."""
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
            queue.write_records()
        if self.sync:
            for queue in queues:
                queue.fsync_records()
        # Channels (``topic:channel``) before topics.
        for queue in queues:
            if ":" in queue.name:
                queue.write_flight_log()
        for queue in queues:
            if ":" not in queue.name:
                queue.write_flight_log()
        for queue in queues:
            queue.end_turn()
