"""
Tests for txnsq.nsqlookupd.service: NSQLookupdService embedded in a Twisted
application, and start_nsqlookupd, listening on 127.0.0.1 port 0.
"""

from __future__ import annotations

import json
import socket
from typing import Any, Dict, List, cast

from twisted.internet import reactor
from twisted.internet.defer import Deferred, inlineCallbacks
from twisted.internet.endpoints import TCP4ClientEndpoint, connectProtocol
from twisted.internet.protocol import Protocol
from twisted.logger import ILogObserver, formatEvent, globalLogPublisher
from twisted.internet.task import Clock
from twisted.internet.testing import MemoryReactorClock
from twisted.trial.unittest import SynchronousTestCase, TestCase

from txnsq.nsqlookupd.options import parse_nsqlookupd_args
from txnsq.nsqlookupd.registration_db import TOPIC
from txnsq.nsqlookupd.service import NSQLookupdService
from txnsq.protocol.lookup_v1 import V1ResponseParser, encode_identify, encode_register
from txnsq.testing import start_nsqlookupd


class V1Client(Protocol):
    """A raw V1 producer collecting replies and reporting when it closes."""

    def __init__(self) -> None:
        self.parser = V1ResponseParser()
        self.replies: List[bytes] = []
        self.closed: Deferred[None] = Deferred()
        self._waiting: List[Any] = []

    def dataReceived(self, data: bytes) -> None:
        self.parser.feed(data)
        while True:
            response = self.parser.next_response()
            if response is None:
                break
            self.replies.append(response)
        waiting, self._waiting = self._waiting, []
        for count, waiter in waiting:
            self.wait_for(count).chainDeferred(waiter)

    def wait_for(self, count: int) -> "Deferred[List[bytes]]":
        """Fires once ``count`` replies have arrived."""
        waiter: Deferred[List[bytes]] = Deferred()
        if len(self.replies) >= count:
            waiter.callback(self.replies[:count])
        else:
            self._waiting.append((count, waiter))
        return waiter

    def connectionLost(self, reason: Any = None) -> None:
        self.closed.callback(None)


IDENTITY: Dict[str, Any] = {
    "broadcast_address": "127.0.0.1",
    "hostname": "producer",
    "tcp_port": 4150,
    "http_port": 4151,
    "version": "1.3.0",
}


class EmbeddedServiceTests(TestCase):
    """NSQLookupdService as part of an application."""

    def setUp(self) -> None:
        self.events: List[Dict[str, Any]] = []
        observer = cast(ILogObserver, self.events.append)
        globalLogPublisher.addObserver(observer)
        self.addCleanup(globalLogPublisher.removeObserver, observer)

    def texts(self) -> List[str]:
        return [formatEvent(event) for event in self.events]

    @inlineCallbacks
    def test_listens_and_reports_ports(self) -> Any:
        """Both listeners bind; the bound ports reach the lookupd state and the log."""
        options = parse_nsqlookupd_args(
            ["--tcp-address=127.0.0.1:0", "--http-address=127.0.0.1:0"]
        )
        service = NSQLookupdService(options, reactor)
        service.startService()
        self.addCleanup(service.stopService)
        yield service.whenListening()
        ports = service.bound_ports()
        self.assertEqual(sorted(ports), ["HTTP", "TCP"])
        self.assertNotIn(0, ports.values())
        self.assertEqual(
            (service.lookupd.tcp_port, service.lookupd.http_port), (ports["TCP"], ports["HTTP"])
        )
        texts = self.texts()
        self.assertIn("TCP: listening on 127.0.0.1:%d" % (ports["TCP"],), texts)
        self.assertIn("HTTP: listening on 127.0.0.1:%d" % (ports["HTTP"],), texts)
        self.assertTrue(any(t.startswith("nsqlookupd v") for t in texts))

    @inlineCallbacks
    def test_listen_failure(self) -> Any:
        """whenListening fails when a port is taken."""
        taken = socket.socket()
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        self.addCleanup(taken.close)
        options = parse_nsqlookupd_args(
            ["--tcp-address=127.0.0.1:%d" % (taken.getsockname()[1],), "--http-address=127.0.0.1:0"]
        )
        service = NSQLookupdService(options, reactor)
        service.startService()
        self.addCleanup(service.stopService)
        with self.assertRaises(Exception):
            yield service.whenListening()
        self.flushLoggedErrors()

    @inlineCallbacks
    def test_v1_round_trip(self) -> Any:
        """A producer IDENTIFYs and REGISTERs over a real socket; stopping drops it."""
        lookupd = yield start_nsqlookupd()
        self.addCleanup(lookupd.stop)
        client = V1Client()
        endpoint = TCP4ClientEndpoint(reactor, "127.0.0.1", lookupd.tcp_port)
        yield connectProtocol(endpoint, client)
        assert client.transport is not None
        client.transport.write(b"  V1" + encode_identify(IDENTITY) + encode_register("t", "c"))
        replies = yield client.wait_for(2)
        identify = json.loads(replies[0])
        self.assertEqual(
            (identify["tcp_port"], identify["http_port"]), (lookupd.tcp_port, lookupd.http_port)
        )
        self.assertEqual(replies[1], b"OK")
        self.assertEqual(len(lookupd.lookupd.db.find_producers(TOPIC, "t", "")), 1)
        yield lookupd.stop()
        yield client.closed
        self.assertEqual(lookupd.lookupd.db.find_producers(TOPIC, "t", ""), [])
        self.assertIn("TCP: closing 127.0.0.1:%d" % (lookupd.tcp_port,), self.texts())

    @inlineCallbacks
    def test_start_nsqlookupd(self) -> Any:
        """start_nsqlookupd listens on loopback, takes flags and overrides, stops idempotently."""
        lookupd = yield start_nsqlookupd(["--tombstone-lifetime=2s"], inactive_producer_timeout=7.0)
        self.assertEqual(lookupd.tcp_address, "127.0.0.1:%d" % (lookupd.tcp_port,))
        self.assertEqual(lookupd.http_address, "127.0.0.1:%d" % (lookupd.http_port,))
        self.assertEqual(lookupd.options.tombstone_lifetime, 2.0)
        self.assertEqual(lookupd.lookupd.options.inactive_producer_timeout, 7.0)
        yield lookupd.stop()
        yield lookupd.stop()

    def test_start_nsqlookupd_unknown_override(self) -> Any:
        """An override that is not an option is a TypeError."""
        return self.assertFailure(start_nsqlookupd(no_such_option=1), TypeError)

    @inlineCallbacks
    def test_v1_error_over_socket(self) -> Any:
        """A bad magic over a real socket gets E_BAD_PROTOCOL and a close."""
        lookupd = yield start_nsqlookupd()
        self.addCleanup(lookupd.stop)
        client = V1Client()
        yield connectProtocol(TCP4ClientEndpoint(reactor, "127.0.0.1", lookupd.tcp_port), client)
        assert client.transport is not None
        client.transport.write(b"  V2")
        yield client.closed
        self.assertEqual(client.replies, [b"E_BAD_PROTOCOL"])



class ConstructionTests(SynchronousTestCase):
    """NSQLookupdService's constructor takes objects and does no I/O."""

    def test_endpoint_objects(self) -> None:
        """Both listeners may be IStreamServerEndpoints; they listen once started, and the ports reach the database."""
        from tests.endpoint_fakes import RecordingEndpoint

        tcp, http = RecordingEndpoint(4160), RecordingEndpoint(4161)
        reactor = MemoryReactorClock()
        service = NSQLookupdService(parse_nsqlookupd_args([]), reactor, tcp_endpoint=tcp, http_endpoint=http)
        self.assertEqual((tcp.factories, http.factories, reactor.tcpServers), ([], [], []))
        service.startService()
        self.addCleanup(service.stopService)
        self.assertEqual(tcp.factories, [service.tcp_factory])
        self.assertEqual(service.bound_ports(), {"TCP": 4160, "HTTP": 4161})
        self.assertEqual((service.lookupd.tcp_port, service.lookupd.http_port), (4160, 4161))

    def test_from_options(self) -> None:
        """fromOptions builds the same service from the options; endpoint strings override them."""
        service = NSQLookupdService.fromOptions(
            parse_nsqlookupd_args(["--tcp-address=127.0.0.1:0"]), Clock(), http_endpoint="unix:/tmp/l.sock"
        )
        self.assertIsInstance(service, NSQLookupdService)
        self.assertEqual(service.tcp_listener.description, "tcp:0:interface=127.0.0.1")
        self.assertEqual(service.http_listener.description, "unix:/tmp/l.sock")
