# -*- test-case-name: tests.test_storage -*-
"""
The ``ephemeral`` storage backend, used for every ``#ephemeral`` topic and
channel whatever ``--storage`` says: up to ``--mem-queue-size`` messages in
memory, and overflow silently dropped (Go nsqd's in-memory channel in front
of its dummy backend queue).
"""

from __future__ import annotations

from typing import Any, List

from twisted.plugin import IPlugin
from zope.interface import implementer

from txnsq.storage.interfaces import IStorageBackend
from txnsq.storage.memory import MemoryQueue

__all__ = ["EphemeralQueue", "EphemeralStorage"]


class EphemeralQueue(MemoryQueue):
    """
    A bounded in-memory queue that drops what does not fit.

    ``limit`` is ``None``: publishing never fails on this queue's account,
    which is what makes ephemeral topics and channels safe for producers
    that outrun their consumers.  ``dropped`` counts the overflow.
    """

    __slots__ = ("capacity", "dropped")

    def __init__(self, name: str, capacity: int) -> None:
        MemoryQueue.__init__(self, name, None)
        self.capacity = capacity
        self.dropped = 0

    def __repr__(self) -> str:
        return "<EphemeralQueue %r depth=%d dropped=%d>" % (
            self.name,
            self.depth(),
            self.dropped,
        )

    def put(self, data: bytes) -> None:
        """Append one message, or drop it when the queue is full."""
        if self.depth() < self.capacity:
            self._items.append(data)
        else:
            self.dropped += 1

    def put_many(self, messages: List[bytes]) -> None:
        """Append several messages, in order, dropping those that do not fit."""
        room = self.capacity - self.depth()
        if room >= len(messages):
            MemoryQueue.put_many(self, messages)
            return
        if room > 0:
            MemoryQueue.put_many(self, messages[:room])
        else:
            room = 0
        self.dropped += len(messages) - room


@implementer(IPlugin, IStorageBackend)
class EphemeralStorage:
    """The ``ephemeral`` backend: in-memory queues that drop their overflow."""

    name = "ephemeral"
    description = (
        "in-memory queues that drop messages beyond --mem-queue-size "
        "(always used for #ephemeral topics and channels)"
    )
    durable = False

    def open_queue(self, name: str, options: Any, clock: Any) -> EphemeralQueue:
        """A new empty queue keeping up to ``options.mem_queue_size`` messages."""
        return EphemeralQueue(name, int(options.mem_queue_size))
