"""
Tests for txnsq.nsqd.guid: message IDs in Go nsqd's snowflake layout.
"""

from __future__ import annotations

import re

from twisted.internet.task import Clock
from twisted.trial.unittest import SynchronousTestCase

from txnsq.nsqd.guid import GUIDFactory, TWEPOCH, guid_node_id, guid_timestamp

START = 1700000000.0


def layout(seconds: float, node_id: int, sequence: int) -> int:
    """Go's layout, computed independently of the code under test."""
    pseudo_ms = int(seconds * 1e9) >> 20
    return ((pseudo_ms - 1288834974288) << 22) | (node_id << 12) | sequence


class GUIDFactoryTests(SynchronousTestCase):
    """GUIDFactory.new_id and new_guid."""

    def setUp(self) -> None:
        self.clock = Clock()
        self.clock.advance(START)

    def test_format(self) -> None:
        """An ID is 16 lowercase ASCII hex digits."""
        msg_id = GUIDFactory(5, self.clock).new_id()
        self.assertIsInstance(msg_id, bytes)
        self.assertEqual(len(msg_id), 16)
        self.assertTrue(re.match(rb"^[0-9a-f]{16}$", msg_id), msg_id)

    def test_go_layout(self) -> None:
        """The first ID is (pseudo-ms - twepoch) << 22 | node_id << 12 | 0."""
        factory = GUIDFactory(5, self.clock)
        self.assertEqual(TWEPOCH, 1288834974288)
        self.assertEqual(factory.new_guid(), layout(START, 5, 0))
        self.assertEqual(factory.new_id(), b"%016x" % (layout(START, 5, 1),))

    def test_node_id_bits(self) -> None:
        """The node ID sits in bits 12-21 of every ID."""
        for node_id in (0, 1, 513, 1023):
            factory = GUIDFactory(node_id, self.clock)
            for _ in range(3):
                self.assertEqual(guid_node_id(factory.new_id()), node_id)

    def test_node_id_range(self) -> None:
        """A node ID outside 0-1023 is a ValueError."""
        self.assertRaises(ValueError, GUIDFactory, 1024, self.clock)
        self.assertRaises(ValueError, GUIDFactory, -1, self.clock)

    def test_timestamp(self) -> None:
        """The timestamp field is the clock in nanoseconds >> 20."""
        factory = GUIDFactory(1, self.clock)
        self.clock.advance(12.5)
        self.assertEqual(
            guid_timestamp(factory.new_id()), int((START + 12.5) * 1e9) >> 20
        )

    def test_sequence_within_tick(self) -> None:
        """IDs within one pseudo-millisecond differ by their sequence."""
        factory = GUIDFactory(3, self.clock)
        ids = [factory.new_guid() for _ in range(5)]
        self.assertEqual(ids, [layout(START, 3, seq) for seq in range(5)])

    def test_sequence_resets(self) -> None:
        """The sequence starts at 0 again in a later pseudo-millisecond."""
        factory = GUIDFactory(3, self.clock)
        factory.new_guid()
        factory.new_guid()
        self.clock.advance(0.01)
        self.assertEqual(factory.new_guid(), layout(START + 0.01, 3, 0))

    def test_unique_and_increasing(self) -> None:
        """Many IDs at one instant (past the 4096 sequence) are unique and increasing."""
        factory = GUIDFactory(7, self.clock)
        ids = [factory.new_guid() for _ in range(10000)]
        self.assertEqual(ids, sorted(set(ids)))
        self.assertEqual({guid_node_id(b"%016x" % (i,)) for i in ids}, {7})

    def test_increasing_over_time(self) -> None:
        """IDs increase as the clock moves on."""
        factory = GUIDFactory(7, self.clock)
        ids = []
        for _ in range(100):
            ids.append(factory.new_id())
            self.clock.advance(0.0003)
        self.assertEqual(ids, sorted(set(ids)))

    def test_clock_goes_back(self) -> None:
        """IDs keep increasing when the clock goes backwards."""
        factory = GUIDFactory(7, self.clock)
        first = factory.new_guid()
        self.clock.rightNow -= 5
        later = [factory.new_guid() for _ in range(5000)]
        self.assertEqual([first] + later, sorted(set([first] + later)))

    def test_catches_up(self) -> None:
        """After borrowing future ticks, IDs follow the clock again once it passes them."""
        factory = GUIDFactory(7, self.clock)
        for _ in range(3 * 4096):
            factory.new_guid()
        self.clock.advance(1)
        self.assertEqual(factory.new_guid(), layout(START + 1, 7, 0))

    def test_explicit_time(self) -> None:
        """new_id(now) uses the given time instead of reading the clock."""
        factory = GUIDFactory(2, self.clock)
        self.assertEqual(
            factory.new_id(START + 60), b"%016x" % (layout(START + 60, 2, 0),)
        )

    def test_before_epoch(self) -> None:
        """A clock before Go's epoch (a bare test Clock) still gives valid IDs."""
        factory = GUIDFactory(2, Clock())
        ids = [factory.new_id() for _ in range(3)]
        self.assertEqual(ids, sorted(set(ids)))
        self.assertTrue(all(re.match(rb"^[0-9a-f]{16}$", i) for i in ids))
