"""Tests for txnsq.nsqd.listener's helpers shared by the daemons' services."""

from __future__ import annotations

from typing import Any

from twisted.internet.address import IPv4Address, IPv6Address, UNIXAddress
from twisted.internet.defer import Deferred, succeed
from twisted.trial.unittest import SynchronousTestCase

from txnsq.nsqd.listener import describe_address, when_all_listening


class FakeListener:
    """A listener whose whenListening is a Deferred the test fires."""

    def __init__(self, listening: "Deferred[Any]") -> None:
        self.listening = listening

    def whenListening(self) -> "Deferred[Any]":
        return self.listening


class DescribeAddressTests(SynchronousTestCase):
    """describe_address renders a bound address as the log lines show it."""

    def test_ipv4(self) -> None:
        """An IPv4 address is host:port."""
        self.assertEqual(describe_address(IPv4Address("TCP", "127.0.0.1", 4150)), "127.0.0.1:4150")

    def test_ipv6(self) -> None:
        """An IPv6 host is bracketed, as Go does."""
        self.assertEqual(describe_address(IPv6Address("TCP", "::1", 4150)), "[::1]:4150")

    def test_unix(self) -> None:
        """A UNIX socket is named by its path."""
        self.assertIn("/run/nsqd.sock", describe_address(UNIXAddress(b"/run/nsqd.sock")))


class WhenAllListeningTests(SynchronousTestCase):
    """when_all_listening waits for every listener of a service."""

    def test_all_up(self) -> None:
        """It fires with None once the last listener is up."""
        late: "Deferred[Any]" = Deferred()
        done = when_all_listening([FakeListener(succeed("port")), FakeListener(late)])
        self.assertNoResult(done)
        late.callback("port")
        self.assertIsNone(self.successResultOf(done))

    def test_first_failure(self) -> None:
        """It fails with the listener's own failure as soon as one cannot listen."""
        failing: "Deferred[Any]" = Deferred()
        done = when_all_listening([FakeListener(Deferred()), FakeListener(failing)])
        failing.errback(OSError("address in use"))
        self.failureResultOf(done, OSError)
