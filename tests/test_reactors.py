"""Tests for txnsq.reactors: the reactor type of the daemons' services."""

from __future__ import annotations

from twisted.internet.task import Clock
from twisted.internet.testing import MemoryReactor, MemoryReactorClock
from twisted.trial.unittest import SynchronousTestCase

from txnsq.reactors import ServiceReactor, default_reactor


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
