"""
Tests for :mod:`txnsq.storage.queue_scan`: a queue read through, or some
of its messages taken out by id, keeps the order of the rest.
"""

from __future__ import annotations

from typing import List

from twisted.trial.unittest import SynchronousTestCase

from txnsq.protocol.message import encode_message
from txnsq.storage.memory import MemoryQueue
from txnsq.storage.queue_scan import read_through, take_out


def message(n: int) -> bytes:
    """Message ``n``, its id made of the number."""
    return encode_message(1, 0, b"%016d" % (n,), b"body%d" % (n,))


class QueueScanTests(SynchronousTestCase):
    """read_through and take_out on a memory queue of five messages."""

    def setUp(self) -> None:
        self.queue = MemoryQueue("t", None)
        for n in range(5):
            self.queue.put(message(n))

    def contents(self) -> List[bytes]:
        """What the queue holds, in order (read out)."""
        found = []
        while True:
            data = self.queue.read()
            if data is None:
                return found
            found.append(data)

    def test_read_through(self) -> None:
        """All of it, in order, and the queue as it was."""
        found, complete = read_through(self.queue, 10)
        self.assertEqual(found, [message(n) for n in range(5)])
        self.assertTrue(complete)
        self.assertEqual(self.contents(), [message(n) for n in range(5)])

    def test_read_through_limit(self) -> None:
        """The first ``limit``, not all; the queue keeps its order."""
        found, complete = read_through(self.queue, 2)
        self.assertEqual(found, [message(0), message(1)])
        self.assertFalse(complete)
        self.assertEqual(self.contents(), [message(n) for n in range(5)])

    def test_take_out(self) -> None:
        """The messages named go, the ids found are returned, the others stay in order."""
        gone = take_out(self.queue, {b"%016d" % (1,), b"%016d" % (3,), b"%016d" % (9,)})
        self.assertEqual(gone, {b"%016d" % (1,), b"%016d" % (3,)})
        self.assertEqual(self.contents(), [message(0), message(2), message(4)])

    def test_take_out_of_empty(self) -> None:
        """An empty queue gives nothing."""
        self.contents()
        self.assertEqual(take_out(self.queue, {b"%016d" % (1,)}), set())
