"""
An in-process nsqd registering with a fake nsqlookupd over real sockets on
127.0.0.1: the V1 TCP side (IDENTIFY, REGISTER) and the HTTP ``/channels``
query that makes a new topic create the channels it has elsewhere before
its first message is handed over.
"""

from __future__ import annotations

import json
from typing import Any, Dict, List, Optional, Tuple

from twisted.internet import reactor
from twisted.internet.defer import Deferred, inlineCallbacks
from twisted.internet.endpoints import TCP4ClientEndpoint, TCP4ServerEndpoint, connectProtocol
from twisted.internet.protocol import Factory, Protocol
from twisted.python.failure import Failure
from twisted.trial.unittest import TestCase
from twisted.web.resource import Resource
from twisted.web.server import Request, Site

from txnsq.protocol.lookup_v1 import V1CommandParser, encode_response
from txnsq.testing import start_nsqd


class _FakeLookupdConnection(Protocol):
    """nsqd's connection to the fake lookupd: answers IDENTIFY when told, OK to the rest."""

    def __init__(self, owner: FakeLookupd) -> None:
        self.owner = owner
        self.parser = V1CommandParser()
        self.magic = b""
        self.lost: Deferred[None] = Deferred()

    def connectionMade(self) -> None:
        self.owner.connections.append(self)

    def dataReceived(self, data: bytes) -> None:
        if len(self.magic) < 4:
            take = 4 - len(self.magic)
            self.magic += data[:take]
            data = data[take:]
        self.parser.feed(data)
        while True:
            command = self.parser.next_command()
            if command is None:
                return
            if command.name == b"IDENTIFY":
                self.owner.identified(self, json.loads(command.body or b"{}"))
            else:
                self.transport.write(encode_response(b"OK"))  # type: ignore[union-attr]
                self.owner.received(b" ".join([command.name] + command.params))

    def answer_identify(self, http_port: int) -> None:
        body = json.dumps(
            {
                "broadcast_address": "127.0.0.1",
                "hostname": "fake",
                "http_port": http_port,
                "tcp_port": 4160,
                "version": "1.3.0",
            }
        ).encode()
        self.transport.write(encode_response(body))  # type: ignore[union-attr]

    def connectionLost(self, reason: Failure = None) -> None:  # type: ignore[assignment]
        self.lost.callback(None)


class FakeLookupd:
    """A V1 listener recording nsqd's commands; each can be waited for."""

    def __init__(self) -> None:
        self.connections: List[_FakeLookupdConnection] = []
        self.lines: List[bytes] = []
        self.identities: List[Tuple[_FakeLookupdConnection, Dict[str, Any]]] = []
        self._waiting: List[Tuple[Any, Deferred[Any]]] = []
        self.port: Any = None

    @inlineCallbacks
    def listen(self) -> Any:
        factory = Factory.forProtocol(lambda: _FakeLookupdConnection(self))  # type: ignore[arg-type]
        factory.noisy = False
        self.port = yield TCP4ServerEndpoint(reactor, 0, interface="127.0.0.1").listen(factory)
        return self.port.getHost().port

    def identified(self, connection: _FakeLookupdConnection, body: Dict[str, Any]) -> None:
        self.identities.append((connection, body))
        self._check()

    def received(self, line: bytes) -> None:
        self.lines.append(line)
        self._check()

    def wait_for_line(self, line: bytes) -> Deferred[None]:
        """Fires once nsqd sent ``line`` (without its newline)."""
        return self._wait(lambda: line in self.lines)

    def wait_for_identify(self, count: int = 1) -> Deferred[Any]:
        """Fires with the ``count``-th IDENTIFY: ``(connection, body)``."""
        return self._wait(lambda: self.identities[count - 1] if len(self.identities) >= count else None)

    def _wait(self, check: Any) -> Deferred[Any]:
        waiter: Deferred[Any] = Deferred()
        self._waiting.append((check, waiter))
        self._check()
        return waiter

    def _check(self) -> None:
        for entry in list(self._waiting):
            check, waiter = entry
            value = check()
            if value:
                self._waiting.remove(entry)
                waiter.callback(value)

    @inlineCallbacks
    def close(self) -> Any:
        yield self.port.stopListening()
        for connection in self.connections:
            if connection.transport is not None:
                connection.transport.abortConnection()  # type: ignore[attr-defined]
            yield connection.lost


class _Channels(Resource):
    """``GET /channels?topic=``: answers what the test set, records the query."""

    isLeaf = True

    def __init__(self, channels: List[str]) -> None:
        Resource.__init__(self)
        self.channels = channels
        self.queries: List[bytes] = []

    def render_GET(self, request: Request) -> bytes:
        self.queries.append(request.uri)
        request.setHeader(b"Content-Type", b"application/json; charset=utf-8")
        return json.dumps({"channels": self.channels}).encode()


class _Closer(Protocol):
    """An HTTP client connection: sends one request, collects the answer."""

    def __init__(self, request: bytes) -> None:
        self.request = request
        self.data = b""
        self.done: Deferred[bytes] = Deferred()

    def connectionMade(self) -> None:
        self.transport.write(self.request)  # type: ignore[union-attr]

    def dataReceived(self, data: bytes) -> None:
        self.data += data

    def connectionLost(self, reason: Failure = None) -> None:  # type: ignore[assignment]
        self.done.callback(self.data)


@inlineCallbacks
def http(port: int, method: str, path: str, body: bytes = b"") -> Any:
    """One HTTP/1.0 request to 127.0.0.1:port; fires with the raw response."""
    request = (
        "%s %s HTTP/1.0\r\nHost: 127.0.0.1\r\nContent-Length: %d\r\n\r\n"
        % (method, path, len(body))
    ).encode() + body
    client = _Closer(request)
    yield connectProtocol(TCP4ClientEndpoint(reactor, "127.0.0.1", port), client)
    response = yield client.done
    return response


class LookupRegistrationTests(TestCase):
    """nsqd and a fake nsqlookupd on loopback sockets."""

    timeout = 30

    @inlineCallbacks
    def setUp(self) -> Any:  # type: ignore[override]
        self.lookupd = FakeLookupd()
        self.lookupd_port = yield self.lookupd.listen()
        self.addCleanup(self.lookupd.close)
        self.channels = _Channels(["a", "b#ephemeral"])
        site = Site(self.channels)
        site.noisy = False
        self.http_port = yield TCP4ServerEndpoint(reactor, 0, interface="127.0.0.1").listen(site)
        self.addCleanup(self.http_port.stopListening)
        self.nsqd: Optional[Any] = None

    @inlineCallbacks
    def start(self, *args: str) -> Any:
        self.nsqd = yield start_nsqd(args=list(args))
        self.addCleanup(self.nsqd.stop)
        return self.nsqd

    @inlineCallbacks
    def test_new_topic_creates_lookupd_channels(self) -> Any:
        """A published-to new topic creates the lookupds' channels before handing its message over."""
        nsqd = yield self.start("--lookupd-tcp-address=127.0.0.1:%d" % (self.lookupd_port,))
        connection, identity = yield self.lookupd.wait_for_identify()
        self.assertEqual(identity["tcp_port"], nsqd.tcp_port)
        self.assertEqual(identity["http_port"], nsqd.http_port)
        # A topic made before the IDENTIFY reply: its REGISTER, sent once
        # identified, tells the test that nsqd knows the lookupd's HTTP port.
        nsqd.service.broker.get_topic("warm")
        connection.answer_identify(self.http_port.getHost().port)
        yield self.lookupd.wait_for_line(b"REGISTER warm")
        response = yield http(nsqd.http_port, "POST", "/pub?topic=t", b"hello")
        self.assertTrue(response.startswith(b"HTTP/1.0 200"), response)
        yield self.lookupd.wait_for_line(b"REGISTER t a")
        self.assertEqual(self.channels.queries, [b"/channels?topic=t"])
        topic = nsqd.service.broker.topics["t"]
        self.assertEqual(list(topic.channels), ["a"])
        self.assertEqual(topic.channels["a"].depth(), 1)
        self.assertEqual(topic.depth(), 0)
        self.assertEqual(self.lookupd.lines, [b"REGISTER warm", b"REGISTER t", b"REGISTER t a"])

    @inlineCallbacks
    def test_addresses_changed_at_run_time(self) -> Any:
        """PUT /config/nsqlookupd_tcp_addresses connects to new lookupds and leaves removed ones."""
        nsqd = yield self.start()
        nsqd.service.broker.get_topic("t")
        body = json.dumps(["127.0.0.1:%d" % (self.lookupd_port,)]).encode()
        response = yield http(nsqd.http_port, "PUT", "/config/nsqlookupd_tcp_addresses", body)
        self.assertTrue(response.startswith(b"HTTP/1.0 200"), response)
        connection, identity = yield self.lookupd.wait_for_identify()
        self.assertEqual(connection.magic, b"  V1")
        connection.answer_identify(self.http_port.getHost().port)
        yield self.lookupd.wait_for_line(b"REGISTER t")
        response = yield http(nsqd.http_port, "PUT", "/config/nsqlookupd_tcp_addresses", b"[]")
        self.assertTrue(response.startswith(b"HTTP/1.0 200"), response)
        yield connection.lost
        self.assertEqual(nsqd.service.lookup.peers, {})
