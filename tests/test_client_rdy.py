"""
Tests for L{txnsq.client.rdy}: spreading max_in_flight over connections.
"""

from __future__ import annotations

import random
from typing import List

from twisted.internet.task import Clock
from twisted.trial.unittest import SynchronousTestCase

from txnsq.client.rdy import RDY_RETRY_DELAY, RDYController


class Conn:
    """The RDY-relevant part of a connection."""

    def __init__(self, address: str, clock: Clock, max_rdy_count: int = 2500) -> None:
        self.address = address
        self.clock = clock
        self.max_rdy_count = max_rdy_count
        self.rdy_count = 0
        self.in_flight = 0
        self.last_message_time = 0.0
        self.sent: List[int] = []

    def send_rdy(self, count: int) -> None:
        assert 0 <= count <= self.max_rdy_count, count
        self.rdy_count = count
        self.sent.append(count)

    def message(self, controller: RDYController) -> None:
        """A message arrives (and stays in flight)."""
        self.in_flight += 1
        self.last_message_time = self.clock.seconds()
        controller.on_message(self)

    def answer(self) -> None:
        self.in_flight -= 1


class RDYTestsMixin:
    """Builds a controller and connections on a Clock, and checks the invariants."""

    clock: Clock

    def make(self, max_in_flight: int, n: int, seed: int = 0, max_rdy_count: int = 2500):  # type: ignore[no-untyped-def]
        self.clock = Clock()
        controller = RDYController(max_in_flight, self.clock, 10.0, random.Random(seed))
        conns = [Conn("10.0.0.%d:4150" % (i,), self.clock, max_rdy_count) for i in range(n)]
        return controller, conns

    def check_invariants(self, controller: RDYController, conns: List[Conn]) -> None:
        total = sum(c.rdy_count for c in conns if c.address in controller.connections)
        self.assertEqual(controller.total_rdy, total)  # type: ignore[attr-defined]
        self.assertLessEqual(total, controller.max_in_flight)  # type: ignore[attr-defined]
        for c in conns:
            self.assertLessEqual(c.rdy_count, c.max_rdy_count)  # type: ignore[attr-defined]
            self.assertGreaterEqual(c.rdy_count, 0)  # type: ignore[attr-defined]


class DistributionTests(RDYTestsMixin, SynchronousTestCase):
    """Even distribution of max_in_flight (go-nsq's perConnMaxInFlight)."""

    def test_matrix(self) -> None:
        """
        For 1, 2, 10 and 100 connections and max_in_flight below, at and
        above their number: the total never exceeds max_in_flight, no count
        exceeds max_rdy_count, and when max_in_flight >= connections each
        gets exactly max(1, max_in_flight // n) once it has had a message.
        """
        for n in (1, 2, 10, 100):
            for mif in sorted({1, 3, n // 2 or 1, n, n + 1, 2 * n + 1, 1000, 5000}):
                controller, conns = self.make(mif, n, max_rdy_count=2500)
                for conn in conns:
                    controller.add(conn)
                    self.check_invariants(controller, conns)
                # A first message raises each to its share.
                for conn in conns:
                    if conn.rdy_count:
                        conn.message(controller)
                    self.check_invariants(controller, conns)
                share = min(max(1, mif // n), 2500)
                self.assertEqual(controller.per_connection, min(max(1, mif // n), mif))
                if mif >= n:
                    self.assertEqual([c.rdy_count for c in conns], [share] * n, (n, mif))
                else:
                    self.assertEqual(sorted(c.rdy_count for c in conns), [0] * (n - mif) + [1] * mif)

    def test_bootstrap_then_share(self) -> None:
        """A new connection starts at RDY 1 and goes to its share with its first message."""
        controller, (a, b) = self.make(10, 2)
        controller.add(a)
        self.assertEqual(a.sent, [1])
        a.message(controller)
        self.assertEqual(a.sent, [1, 10])
        # A second connection: the first is lowered to the new share at once.
        controller.add(b)
        self.assertEqual(a.sent, [1, 10, 5])
        self.assertEqual(b.sent, [1])
        b.message(controller)
        self.assertEqual(b.sent, [1, 5])
        self.assertEqual(controller.total_rdy, 10)
        # Later messages send nothing: nsqd's RDY is a window.
        for _ in range(20):
            a.message(controller)
        self.assertEqual(a.sent, [1, 10, 5])

    def test_max_rdy_count(self) -> None:
        """No connection is asked for more than its max_rdy_count."""
        controller, (a, b) = self.make(10000, 2, max_rdy_count=100)
        controller.add(a)
        a.message(controller)
        controller.add(b)
        b.message(controller)
        self.assertEqual((a.rdy_count, b.rdy_count), (100, 100))
        self.check_invariants(controller, [a, b])

    def test_uneven_division(self) -> None:
        """7 over 3 connections is 2 each: the total rounds down, never up."""
        controller, conns = self.make(7, 3)
        for conn in conns:
            controller.add(conn)
        for conn in conns:
            conn.message(controller)
        self.assertEqual([c.rdy_count for c in conns], [2, 2, 2])

    def test_truncated_to_what_is_left(self) -> None:
        """A raise takes only what max_in_flight leaves."""
        controller, (a, b) = self.make(10, 2)
        controller.add(a)
        controller.update(a, 9)
        controller.add(b)
        # a was lowered to 5, b got 1; a's raise takes only the 4 left.
        self.assertEqual((a.rdy_count, b.rdy_count), (5, 1))
        self.assertTrue(controller.update(a, 12))
        self.assertEqual(a.rdy_count, 9)
        # Nothing left for b: it keeps its 1 (no retry: it is not at 0).
        self.assertFalse(controller.update(b, 5))
        self.assertEqual(b.rdy_count, 1)
        self.assertEqual(self.clock.getDelayedCalls(), [])
        self.check_invariants(controller, [a, b])

    def test_remove(self) -> None:
        """A closed connection's RDY leaves the total; the others rise with their next message."""
        controller, (a, b) = self.make(10, 2)
        for c in (a, b):
            controller.add(c)
        for c in (a, b):
            c.message(controller)
        controller.remove(b)
        self.assertEqual(controller.total_rdy, 5)
        self.assertEqual(controller.per_connection, 10)
        a.message(controller)
        self.assertEqual(a.rdy_count, 10)
        # Removing twice, or an unknown connection, changes nothing.
        controller.remove(b)
        self.assertEqual(controller.total_rdy, 10)

    def test_remove_asks_redistribution(self) -> None:
        """Losing a connection with RDY when the rest equal max_in_flight asks for a redistribution."""
        controller, conns = self.make(2, 3)
        for c in conns:
            controller.add(c)
        holder = next(c for c in conns if c.rdy_count)
        controller.remove(holder)
        self.assertTrue(controller.need_redistribute)

    def test_set_max_in_flight(self) -> None:
        """Lowering, pausing with 0 and raising max_in_flight keep the invariants."""
        controller, conns = self.make(100, 4)
        for c in conns:
            controller.add(c)
        for c in conns:
            c.message(controller)
            c.answer()
        self.assertEqual([c.rdy_count for c in conns], [25] * 4)
        controller.set_max_in_flight(8)
        self.assertEqual([c.rdy_count for c in conns], [2] * 4)
        controller.set_max_in_flight(2)
        self.assertEqual(sorted(c.rdy_count for c in conns), [0, 0, 1, 1])
        self.check_invariants(controller, conns)
        controller.set_max_in_flight(0)
        self.assertEqual([c.rdy_count for c in conns], [0] * 4)
        self.assertEqual(controller.total_rdy, 0)
        controller.set_max_in_flight(100)
        self.assertEqual([c.rdy_count for c in conns], [25] * 4)
        self.check_invariants(controller, conns)

    def test_set_max_in_flight_while_backing_off(self) -> None:
        """While backing off a new max_in_flight changes no RDY."""
        controller, (a,) = self.make(10, 1)
        controller.add(a)
        controller.zero_all()
        controller.set_max_in_flight(50, backing_off=True)
        self.assertEqual(a.rdy_count, 0)
        controller.restore()
        self.assertEqual(a.rdy_count, 50)

    def test_retry(self) -> None:
        """A RDY refused by max_in_flight on a connection at 0 is retried 5 s later."""
        controller, (a, b) = self.make(1, 2)
        controller.add(a)
        controller.add(b)
        self.assertEqual((a.rdy_count, b.rdy_count), (1, 0))
        self.assertFalse(controller.update(b, 1))
        controller.update(a, 0)
        self.clock.advance(RDY_RETRY_DELAY - 0.1)
        self.assertEqual(b.rdy_count, 0)
        self.clock.advance(0.1)
        self.assertEqual(b.sent, [1])
        self.assertEqual(self.clock.getDelayedCalls(), [])

    def test_retry_cancelled(self) -> None:
        """A later update, a removal or stop() cancels a pending retry."""
        controller, (a, b) = self.make(1, 2)
        controller.add(a)
        controller.add(b)
        controller.update(b, 1)
        self.assertEqual(len(self.clock.getDelayedCalls()), 1)
        controller.update(b, 0)
        self.assertEqual(self.clock.getDelayedCalls(), [])
        controller.update(b, 1)
        controller.remove(b)
        self.assertEqual(self.clock.getDelayedCalls(), [])
        controller.add(b)
        controller.update(b, 1)
        controller.stop()
        self.assertEqual(self.clock.getDelayedCalls(), [])

    def test_no_retry_when_paused(self) -> None:
        """With max_in_flight 0 nothing is retried."""
        controller, (a,) = self.make(0, 1)
        controller.add(a)
        self.assertFalse(controller.update(a, 1))
        self.assertEqual(self.clock.getDelayedCalls(), [])
        self.assertEqual(a.sent, [])


class RedistributionTests(RDYTestsMixin, SynchronousTestCase):
    """RDY moves between connections when max_in_flight < connections."""

    def test_idle_rdy_moves(self) -> None:
        """
        RDY held by a connection idle for low_rdy_idle_timeout goes to
        another, chosen at random; the total never exceeds max_in_flight
        and, round after round, every connection gets its turn.
        """
        controller, conns = self.make(1, 5, seed=42)
        for c in conns:
            controller.add(c)
        self.assertEqual([c.rdy_count for c in conns], [1, 0, 0, 0, 0])
        holders = set()
        for _ in range(60):
            self.clock.advance(5)
            controller.redistribute()
            self.check_invariants(controller, conns)
            self.assertEqual(controller.total_rdy, 1)
            holders.update(c.address for c in conns if c.rdy_count)
        self.assertEqual(holders, {c.address for c in conns})

    def test_not_before_idle_timeout(self) -> None:
        """A connection keeps its RDY for low_rdy_idle_timeout after getting it."""
        controller, conns = self.make(1, 3)
        for c in conns:
            controller.add(c)
        self.clock.advance(5)
        controller.redistribute()
        self.assertEqual([c.rdy_count for c in conns], [1, 0, 0])
        self.clock.advance(5.5)
        controller.redistribute()
        self.assertEqual(conns[0].rdy_count, 0)
        self.assertEqual(controller.total_rdy, 1)

    def test_busy_connection_keeps_rdy(self) -> None:
        """A connection that receives messages is not idle."""
        controller, conns = self.make(1, 3)
        for c in conns:
            controller.add(c)
        first = conns[0]
        for _ in range(10):
            self.clock.advance(5)
            first.message(controller)
            first.answer()
            controller.redistribute()
            self.assertEqual(first.rdy_count, 1)

    def test_in_flight_counts(self) -> None:
        """Messages in flight count against max_in_flight: no new RDY while one is held."""
        controller, conns = self.make(1, 3, seed=1)
        for c in conns:
            controller.add(c)
        first = conns[0]
        first.message(controller)  # in flight, not answered
        self.clock.advance(20)
        controller.redistribute()
        self.assertEqual([c.rdy_count for c in conns], [0, 0, 0])
        first.answer()
        self.clock.advance(5)
        controller.redistribute()
        self.assertEqual(sum(c.rdy_count for c in conns), 1)

    def test_backing_off_allows_one(self) -> None:
        """While backing off with several connections at most one holds RDY 1."""
        controller, conns = self.make(10, 3, seed=3)
        for c in conns:
            controller.add(c)
        controller.zero_all()
        for _ in range(10):
            self.clock.advance(5)
            controller.redistribute(backing_off=True)
            self.assertEqual(sum(c.rdy_count for c in conns), 1)

    def test_nothing_during_backoff_interval(self) -> None:
        """During a backoff interval redistribution does nothing."""
        controller, conns = self.make(1, 3)
        for c in conns:
            controller.add(c)
        controller.zero_all()
        self.clock.advance(30)
        controller.redistribute(backing_off=True, in_backoff_timeout=True)
        self.assertEqual(controller.total_rdy, 0)

    def test_not_needed(self) -> None:
        """With max_in_flight >= connections and no flag, nothing moves."""
        controller, conns = self.make(10, 2)
        for c in conns:
            controller.add(c)
        self.clock.advance(60)
        controller.redistribute()
        self.assertEqual([c.sent for c in conns], [[1], [1]])

    def test_restore_redistributes(self) -> None:
        """Leaving backoff with more connections than max_in_flight redistributes RDY 1s."""
        controller, conns = self.make(2, 5, seed=9)
        for c in conns:
            controller.add(c)
        controller.zero_all()
        controller.restore()
        self.assertEqual(sorted(c.rdy_count for c in conns), [0, 0, 0, 1, 1])


class StarvationTests(RDYTestsMixin, SynchronousTestCase):
    """is_starved as go-nsq's IsStarved."""

    def test_is_starved(self) -> None:
        """Starved once in-flight reaches 85 % of a connection's RDY (rounded down), with something in flight."""
        controller, (a, b) = self.make(20, 2)
        controller.add(a)
        controller.add(b)
        controller.update(a, 10)
        self.assertFalse(controller.is_starved())
        for _ in range(7):
            a.in_flight += 1
        self.assertFalse(controller.is_starved())
        a.in_flight += 1  # 8 >= int(8.5)
        self.assertTrue(controller.is_starved())
        a.in_flight = 0
        b.in_flight = 1  # RDY 1
        self.assertTrue(controller.is_starved())
        b.in_flight = 0
        controller.zero_all()
        self.assertFalse(controller.is_starved())
        a.in_flight = 1  # RDY 0 with a message held: nothing more will come
        self.assertTrue(controller.is_starved())
