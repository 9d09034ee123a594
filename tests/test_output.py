"""
Tests for txnsq.nsqd.output: connection output flushed when the read that
made it ends, or at the next reactor turn.
"""

from __future__ import annotations

from typing import List

from twisted.internet.task import Clock
from twisted.trial.unittest import SynchronousTestCase

from txnsq.nsqd.output import FlushScheduler, scheduler_for


class Connection:
    """Records its flushes; may register more output while flushing."""

    def __init__(self, log: List[str], name: str) -> None:
        self.log = log
        self.name = name
        self.then: List["Connection"] = []
        self.scheduler: "FlushScheduler | None" = None

    def flush_output(self) -> None:
        self.log.append(self.name)
        for other in self.then:
            assert self.scheduler is not None
            self.scheduler.has_output(other)
        self.then = []


class FlushSchedulerTests(SynchronousTestCase):
    """When buffered output is written."""

    def setUp(self) -> None:
        self.clock = Clock()
        self.scheduler = FlushScheduler(self.clock)
        self.log: List[str] = []

    def connection(self, name: str) -> Connection:
        connection = Connection(self.log, name)
        connection.scheduler = self.scheduler
        return connection

    def test_end_of_read(self) -> None:
        """Output made during a read is flushed when the read ends, in registration order, with no timer left."""
        a, b = self.connection("a"), self.connection("b")
        self.scheduler.reading()
        self.scheduler.has_output(b)
        self.scheduler.has_output(a)
        self.assertEqual(self.log, [])
        self.scheduler.done_reading()
        self.assertEqual(self.log, ["b", "a"])
        self.assertEqual(self.clock.getDelayedCalls(), [])

    def test_nested_reads(self) -> None:
        """Only the end of the outermost read flushes."""
        a = self.connection("a")
        self.scheduler.reading()
        self.scheduler.reading()
        self.scheduler.has_output(a)
        self.scheduler.done_reading()
        self.assertEqual(self.log, [])
        self.scheduler.done_reading()
        self.assertEqual(self.log, ["a"])

    def test_outside_reads_next_turn(self) -> None:
        """Output made outside any read is flushed at the next turn, with one timer for all."""
        a, b = self.connection("a"), self.connection("b")
        self.scheduler.has_output(a)
        self.scheduler.has_output(b)
        self.assertEqual(len(self.clock.getDelayedCalls()), 1)
        self.assertEqual(self.log, [])
        self.clock.advance(0)
        self.assertEqual(self.log, ["a", "b"])

    def test_read_before_turn_cancels_timer(self) -> None:
        """A read that ends before the turn flushes everything and cancels the timer."""
        a = self.connection("a")
        self.scheduler.has_output(a)
        self.scheduler.reading()
        self.scheduler.done_reading()
        self.assertEqual(self.log, ["a"])
        self.assertEqual(self.clock.getDelayedCalls(), [])

    def test_output_made_while_flushing(self) -> None:
        """Output registered by a flush is flushed in the same pass."""
        a, b = self.connection("a"), self.connection("b")
        a.then = [b]
        self.scheduler.has_output(a)
        self.scheduler.flush()
        self.assertEqual(self.log, ["a", "b"])

    def test_one_per_clock(self) -> None:
        """scheduler_for gives one scheduler per reactor."""
        other = Clock()
        self.assertIs(scheduler_for(self.clock), scheduler_for(self.clock))
        self.assertIsNot(scheduler_for(self.clock), scheduler_for(other))
