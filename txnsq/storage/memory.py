# -*- test-case-name: tests.test_storage -*-
"""
The ``memory`` storage backend: an in-memory FIFO per topic and channel,
bounded by ``--mem-queue-size`` and lost when the process exits.
"""

from __future__ import annotations

from collections import deque
from typing import Any, Deque, List, Optional

from twisted.plugin import IPlugin
from zope.interface import implementer

from txnsq.storage.interfaces import IBackendQueue, IBatchQueue, IStorageBackend

__all__ = ["MemoryQueue", "MemoryStorage"]


@implementer(IBackendQueue, IBatchQueue)
class MemoryQueue:
    """
    A queue of encoded messages held in a ``deque``.

    ``put`` never refuses: ``limit`` (``--mem-queue-size``) is enforced by
    the topic before it publishes, so requeued and timed-out messages are
    never lost for want of room.
    """

    __slots__ = ("name", "limit", "_items")

    #: Memory never fails to store.
    error = None

    def __init__(self, name: str, limit: Optional[int]) -> None:
        self.name = name
        self.limit = limit
        self._items: Deque[bytes] = deque()

    def __repr__(self) -> str:
        return "<MemoryQueue %r depth=%d>" % (self.name, len(self._items))

    def put(self, data: bytes) -> None:
        """Append one message."""
        self._items.append(data)

    def put_many(self, messages: List[bytes]) -> None:
        """Append several messages, in order."""
        self._items.extend(messages)

    def read(self) -> Optional[bytes]:
        """Pop the oldest message, or ``None`` when empty."""
        items = self._items
        if items:
            return items.popleft()
        return None

    def depth(self) -> int:
        """How many messages are queued."""
        return len(self._items)

    def empty(self) -> None:
        """Drop every queued message."""
        self._items.clear()

    def close(self) -> None:
        """Memory does not outlive the process: closing frees the messages."""
        self._items.clear()

    def delete(self) -> None:
        """Drop every queued message."""
        self._items.clear()


@implementer(IPlugin, IStorageBackend)
class MemoryStorage:
    """The ``memory`` backend: bounded in-memory queues, lost on exit."""

    name = "memory"
    description = "in-memory queues of up to --mem-queue-size messages, lost on exit"
    durable = False

    def open_queue(self, name: str, options: Any, clock: Any) -> MemoryQueue:
        """A new empty queue limited to ``options.mem_queue_size`` messages."""
        return MemoryQueue(name, int(options.mem_queue_size))
