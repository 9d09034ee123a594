"""Tests for txnsq.nsqd.listener's helpers shared by the daemons' services."""

from __future__ import annotations

from typing import Any, List

from twisted.internet.address import IPv4Address, IPv6Address, UNIXAddress
from twisted.internet.defer import Deferred, succeed
from twisted.internet.protocol import Factory, Protocol
from twisted.internet.testing import MemoryReactor, StringTransport
from twisted.trial.unittest import SynchronousTestCase

from tests.endpoint_fakes import RecordingEndpoint
from txnsq.nsqd.listener import (
    DEFAULT_BACKLOG,
    ListeningService,
    describe_address,
    listen_target,
    set_no_delay,
    system_backlog,
    when_all_listening,
    with_backlog,
)


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


class SystemBacklogTests(SynchronousTestCase):
    """system_backlog reads the kernel's largest accept queue."""

    def write(self, content: bytes) -> str:
        path = self.mktemp()
        with open(path, "wb") as handle:
            handle.write(content)
        return path

    def test_reads_somaxconn(self) -> None:
        """The number in the somaxconn file is the backlog."""
        self.assertEqual(system_backlog(self.write(b"8192\n")), 8192)

    def test_missing_file(self) -> None:
        """Where the file cannot be read (not Linux), the backlog is 4096."""
        self.assertEqual(system_backlog(self.mktemp()), DEFAULT_BACKLOG)
        self.assertEqual(DEFAULT_BACKLOG, 4096)

    def test_unreadable_content(self) -> None:
        """Content that is not a positive number falls back to 4096."""
        self.assertEqual(system_backlog(self.write(b"many\n")), DEFAULT_BACKLOG)
        self.assertEqual(system_backlog(self.write(b"0\n")), DEFAULT_BACKLOG)

    def test_this_system(self) -> None:
        """On this machine it is at least Linux's historical minimum of 128."""
        self.assertGreaterEqual(system_backlog(), 128)


class WithBacklogTests(SynchronousTestCase):
    """with_backlog adds a backlog to descriptions that take one."""

    def test_tcp(self) -> None:
        """A TCP description gets the backlog as its last argument."""
        self.assertEqual(
            with_backlog("tcp:4150:interface=127.0.0.1", 4096),
            "tcp:4150:interface=127.0.0.1:backlog=4096",
        )

    def test_other_types(self) -> None:
        """tcp6, ssl and unix descriptions take it too, whatever their case."""
        self.assertEqual(with_backlog("tcp6:0:interface=\\:\\:1", 9), "tcp6:0:interface=\\:\\:1:backlog=9")
        self.assertEqual(with_backlog("SSL:4152:privateKey=k.pem", 9), "SSL:4152:privateKey=k.pem:backlog=9")
        self.assertEqual(with_backlog("unix:/run/nsqd.sock", 9), "unix:/run/nsqd.sock:backlog=9")

    def test_own_backlog_kept(self) -> None:
        """A description naming its own backlog is left as it is."""
        self.assertEqual(with_backlog("tcp:4150:backlog=10", 4096), "tcp:4150:backlog=10")

    def test_escaped_text_is_no_backlog(self) -> None:
        """``backlog=`` inside an escaped value is not taken for the argument."""
        self.assertEqual(
            with_backlog("unix:/tmp/a\\:backlog=1.sock", 7),
            "unix:/tmp/a\\:backlog=1.sock:backlog=7",
        )

    def test_types_without_backlog(self) -> None:
        """Plugin and systemd descriptions are not changed."""
        self.assertEqual(with_backlog("systemd:domain=INET:index=0", 9), "systemd:domain=INET:index=0")
        self.assertEqual(with_backlog("le:/certs:tcp:443", 9), "le:/certs:tcp:443")


class ListeningServiceBacklogTests(SynchronousTestCase):
    """Every daemon's listeners ask for the system's largest accept queue."""

    def test_tcp_listener_backlog(self) -> None:
        """A TCP listener listens with system_backlog(), not Twisted's 50."""
        reactor = MemoryReactor()
        service = ListeningService(
            "TCP", reactor, "tcp:0:interface=127.0.0.1", Factory.forProtocol(Protocol)
        )
        service.startService()
        [(port, _factory, backlog, interface)] = reactor.tcpServers
        self.assertEqual((port, backlog, interface), (0, system_backlog(), "127.0.0.1"))
        self.assertEqual(service.description, "tcp:0:interface=127.0.0.1")


class ListenTargetTests(SynchronousTestCase):
    """listen_target: endpoint objects as they are, strings as endpoint descriptions."""

    def test_endpoint_object(self) -> None:
        """An IStreamServerEndpoint is returned unchanged."""
        endpoint = RecordingEndpoint(4150)
        self.assertIs(listen_target(endpoint), endpoint)

    def test_strings(self) -> None:
        """Go's host:port and endpoint descriptions become descriptions."""
        self.assertEqual(listen_target("127.0.0.1:4150"), "tcp:4150:interface=127.0.0.1")
        self.assertEqual(listen_target("unix:/run/nsqd.sock"), "unix:/run/nsqd.sock")

    def test_refused(self) -> None:
        """An unreadable string is a ValueError, any other object a TypeError."""
        self.assertRaises(ValueError, listen_target, "nonsense")
        self.assertRaises(TypeError, listen_target, 4150)


class ListeningServiceEndpointTests(SynchronousTestCase):
    """A ListeningService given an endpoint object listens through it."""

    def test_listens_on_the_endpoint(self) -> None:
        """The endpoint is asked to listen only once started; the bound port is read from its port."""
        endpoint = RecordingEndpoint(4150)
        factory = Factory.forProtocol(Protocol)
        service = ListeningService("TCP", MemoryReactor(), endpoint, factory)
        self.assertEqual(endpoint.factories, [])
        self.assertIs(service.endpoint, endpoint)
        service.startService()
        self.assertEqual(endpoint.factories, [factory])
        self.assertEqual(service.bound_port(), 4150)
        self.successResultOf(service.stopService())
        self.assertFalse(endpoint.ports[0].listening)


class TCPTransport(StringTransport):
    """A StringTransport with TCP's no-delay switch, recording its setting."""

    no_delay = False

    def setTcpNoDelay(self, enabled: bool) -> None:
        self.no_delay = enabled


class UnixLikeTransport(StringTransport):
    """A transport whose setTcpNoDelay fails as on a UNIX socket."""

    def setTcpNoDelay(self, enabled: bool) -> None:
        raise OSError(95, "Operation not supported")


class SetNoDelayTests(SynchronousTestCase):
    """set_no_delay turns Nagle's algorithm off where there is one, as Go does."""

    def test_tcp(self) -> None:
        """A TCP transport gets TCP_NODELAY."""
        transport = TCPTransport()
        set_no_delay(transport)
        self.assertTrue(transport.no_delay)

    def test_not_tcp(self) -> None:
        """A transport without the switch, or one that refuses it, is left alone."""
        set_no_delay(StringTransport())
        set_no_delay(UnixLikeTransport())

    def test_daemons_set_it(self) -> None:
        """nsqd's V2 and nsqlookupd's V1 protocols set it when a client connects (MetaQ: test_metaq_server)."""
        from twisted.internet.task import Clock

        from txnsq.nsqd.broker import Broker
        from txnsq.nsqd.options import NSQDOptions
        from txnsq.nsqd.tcp import NSQDFactory
        from txnsq.nsqlookupd.core import NSQLookupd
        from txnsq.nsqlookupd.options import NSQLookupdOptions
        from txnsq.nsqlookupd.tcp import LookupFactory
        from txnsq.storage.memory import MemoryStorage

        clock = Clock()
        factories: List[Any] = [
            NSQDFactory(Broker(NSQDOptions(), clock, MemoryStorage()), clock),
            LookupFactory(NSQLookupd(NSQLookupdOptions(), clock)),
        ]
        for factory in factories:
            transport = TCPTransport(peerAddress=IPv4Address("TCP", "127.0.0.1", 50000))
            protocol = factory.buildProtocol(transport.getPeer())
            protocol.makeConnection(transport)
            self.assertTrue(transport.no_delay, factory)
            protocol.connectionLost(None)
