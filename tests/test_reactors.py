"""Tests for txnsq.reactors: the reactor type of the daemons' services."""

from __future__ import annotations

from typing import List

from twisted.internet.base import ReactorBase
from twisted.internet.task import Clock
from twisted.internet.testing import MemoryReactor, MemoryReactorClock
from twisted.trial.unittest import SynchronousTestCase

from txnsq.nsqd.guid import GUIDFactory
from txnsq.reactors import ServiceReactor, SteadyClock, default_reactor, install_steady_clock


class ServiceReactorTests(SynchronousTestCase):
    """ServiceReactor is IReactorTime and IReactorTCP together."""

    def test_reactors_fit(self) -> None:
        """Twisted's reactor and MemoryReactorClock have every method."""
        self.assertIsInstance(MemoryReactorClock(), ServiceReactor)
        from twisted.internet import reactor

        self.assertIsInstance(reactor, ServiceReactor)

    def test_halves_do_not(self) -> None:
        """A clock alone (no listenTCP) or a TCP reactor alone (no seconds) is not one."""
        self.assertNotIsInstance(Clock(), ServiceReactor)
        self.assertNotIsInstance(MemoryReactor(), ServiceReactor)

    def test_default_reactor(self) -> None:
        """default_reactor is the global reactor."""
        from twisted.internet import reactor

        self.assertIs(default_reactor(), reactor)


class FakeClocks:
    """A wall clock and a monotonic clock, each moved by hand."""

    def __init__(self, wall: float = 1700000000.0, monotonic: float = 5000.0) -> None:
        self.wall_now = wall
        self.monotonic_now = monotonic

    def wall(self) -> float:
        return self.wall_now

    def monotonic(self) -> float:
        return self.monotonic_now

    def elapse(self, seconds: float) -> None:
        """Real time passes: both clocks move."""
        self.wall_now += seconds
        self.monotonic_now += seconds

    def step(self, seconds: float) -> None:
        """The wall clock alone is stepped (NTP, ``date -s``)."""
        self.wall_now += seconds


class BareReactor(ReactorBase):
    """Twisted's own timer bookkeeping, without a loop: run it with runUntilCurrent."""

    def installWaker(self) -> None:
        pass


class SteadyClockTests(SynchronousTestCase):
    """A SteadyClock is the wall clock at its start plus the monotonic time since."""

    def setUp(self) -> None:
        self.clocks = FakeClocks()

    def test_starts_at_wall_time(self) -> None:
        """At its start the clock reads the wall clock."""
        clock = SteadyClock(self.clocks.wall, self.clocks.monotonic)
        self.assertEqual(clock.seconds(), 1700000000.0)

    def test_follows_elapsed_time(self) -> None:
        """As time passes the clock moves with the monotonic clock."""
        clock = SteadyClock(self.clocks.wall, self.clocks.monotonic)
        self.clocks.elapse(2.5)
        self.assertEqual(clock.seconds(), 1700000002.5)

    def test_ignores_wall_steps(self) -> None:
        """A step of the wall clock, back or forward, does not move the clock."""
        clock = SteadyClock(self.clocks.wall, self.clocks.monotonic)
        self.clocks.step(-30.0)
        self.assertEqual(clock.seconds(), 1700000000.0)
        self.clocks.step(60.0)
        self.clocks.elapse(1.0)
        self.assertEqual(clock.seconds(), 1700000001.0)

    def test_default_clocks(self) -> None:
        """By default the clock starts at time.time and counts with time.monotonic."""
        import time

        before = time.time()
        seconds = SteadyClock().seconds()
        self.assertTrue(before - 1.0 <= seconds <= time.time() + 1.0)


class InstallSteadyClockTests(SynchronousTestCase):
    """install_steady_clock makes a reactor's timers immune to wall-clock steps."""

    def setUp(self) -> None:
        self.clocks = FakeClocks()
        self.reactor = BareReactor()
        self.patch(ReactorBase, "seconds", staticmethod(self.clocks.wall))
        self.clock = install_steady_clock(self.reactor, self.clocks.wall, self.clocks.monotonic)
        self.fired: List[float] = []

    def schedule(self, delay: float) -> None:
        self.reactor.callLater(delay, lambda: self.fired.append(self.reactor.seconds()))

    def test_reactor_reads_the_clock(self) -> None:
        """The reactor's seconds() is the installed clock's."""
        self.assertEqual(self.reactor.seconds(), self.clock.seconds())
        self.clocks.step(100.0)
        self.assertEqual(self.reactor.seconds(), 1700000000.0)

    def test_backward_step_does_not_delay(self) -> None:
        """A call 2 s away still runs 2 s later when the wall clock steps back 30 s."""
        self.schedule(2.0)
        self.clocks.step(-30.0)
        self.clocks.elapse(1.9)
        self.reactor.runUntilCurrent()
        self.assertEqual(self.fired, [])
        self.assertAlmostEqual(self.reactor.timeout(), 0.1, places=5)
        self.clocks.elapse(0.1)
        self.reactor.runUntilCurrent()
        self.assertEqual(self.fired, [1700000002.0])

    def test_forward_step_does_not_advance(self) -> None:
        """A call 2 s away does not run early when the wall clock steps forward 30 s."""
        self.schedule(2.0)
        self.clocks.step(30.0)
        self.reactor.runUntilCurrent()
        self.assertEqual(self.fired, [])
        self.assertAlmostEqual(self.reactor.timeout(), 2.0)
        self.clocks.elapse(2.0)
        self.reactor.runUntilCurrent()
        self.assertEqual(self.fired, [1700000002.0])

    def test_without_it_steps_move_timers(self) -> None:
        """The reactor as Twisted makes it fires its calls at a forward step."""
        reactor = BareReactor()
        reactor.callLater(2.0, self.fired.append, 1.0)
        self.clocks.step(30.0)
        reactor.runUntilCurrent()
        self.assertEqual(self.fired, [1.0])

    def test_timestamps_follow_elapsed_time(self) -> None:
        """Message IDs and timestamps taken from the reactor are wall time at start plus elapsed."""
        guid = GUIDFactory(0, self.reactor)
        first = guid.new_guid()
        self.clocks.step(-3600.0)
        self.clocks.elapse(1.0)
        self.assertEqual(self.reactor.seconds(), 1700000001.0)
        self.assertGreater(guid.new_guid(), first)

    def test_installed_once(self) -> None:
        """A reactor that has a steady clock keeps it."""
        self.clocks.step(50.0)
        again = install_steady_clock(self.reactor, self.clocks.wall, self.clocks.monotonic)
        self.assertIs(again, self.clock)
        self.assertEqual(self.reactor.seconds(), 1700000000.0)
