"""
txnsq.client against an nsqd running in the test's reactor
(``txnsq.testing.start_nsqd``) over real sockets on 127.0.0.1: publish and
consume round trips with every upgrade, AUTH with a real auth HTTP server,
nsqd's refusals, publishing over HTTP, and an nsqd that goes away.

Nothing sleeps: every wait is a Deferred with a timeout.
"""

from __future__ import annotations

import json
from typing import Any, Generator, List, Optional

from twisted.internet import reactor
from twisted.internet.defer import Deferred, inlineCallbacks
from twisted.internet.protocol import Factory, Protocol
from twisted.python.failure import Failure
from twisted.trial.unittest import TestCase
from twisted.web import server

from tests.integration.test_auth import AuthServer
from tests.integration.tls_certs import ServerFiles, client_tls_options, shared_pki, write_server_files
from txnsq.client import (
    ConnectionConfig,
    HTTPPublisher,
    Message,
    NSQConnection,
    NSQConnectionError,
    NSQError,
    NSQHTTPError,
    Producer,
    connect,
)
from txnsq.protocol.frames import FRAME_TYPE_MESSAGE, FRAME_TYPE_RESPONSE, encode_frame
from txnsq.protocol.message import encode_message
from txnsq.testing import RunningNSQD, start_nsqd

#: Seconds any one wait may take.
WAIT = 10.0


class Watcher:
    """A ConnectionDelegate whose events can be waited for."""

    def __init__(self) -> None:
        self.messages: List[Message] = []
        self.errors: List[NSQError] = []
        self.closed: List[Failure] = []
        self._waiters: List[Any] = []

    def _changed(self) -> None:
        waiters, self._waiters = self._waiters, []
        for predicate, waiter in waiters:
            if predicate():
                waiter.callback(None)
            else:
                self._waiters.append((predicate, waiter))

    def wait(self, predicate: Any) -> "Deferred[None]":
        waiter: "Deferred[None]" = Deferred()
        self._waiters.append((predicate, waiter))
        self._changed()
        return waiter.addTimeout(WAIT, reactor)

    def on_message(self, conn: NSQConnection, message: Message) -> None:
        self.messages.append(message)
        self._changed()

    def on_message_finished(self, conn: NSQConnection, message: Message) -> None:
        pass

    def on_message_requeued(self, conn: NSQConnection, message: Message, backoff: bool) -> None:
        pass

    def on_error(self, conn: NSQConnection, error: NSQError) -> None:
        self.errors.append(error)
        self._changed()

    def on_close(self, conn: NSQConnection, reason: Failure) -> None:
        self.closed.append(reason)
        self._changed()


def client_config(**settings: Any) -> ConnectionConfig:
    settings.setdefault("client_id", "txnsq-test")
    return ConnectionConfig(**settings)


class ClientTestCase(TestCase):
    """An nsqd per test; clients closed at the end."""

    timeout = 30

    @inlineCallbacks
    def start(self, *args: str) -> Generator[Any, Any, RunningNSQD]:
        nsqd = yield start_nsqd(args=list(args))
        self.addCleanup(nsqd.stop)
        self.nsqd = nsqd
        return nsqd  # type: ignore[no-any-return]

    @inlineCallbacks
    def connect(self, delegate: Any = None, **settings: Any) -> Generator[Any, Any, NSQConnection]:
        conn = yield connect(reactor, self.nsqd.tcp_address, client_config(**settings), delegate)
        self.addCleanup(conn.close)
        return conn  # type: ignore[no-any-return]

    @inlineCallbacks
    def round_trip(self, **settings: Any) -> Generator[Any, Any, None]:
        """Subscribe, publish (PUB, MPUB, DPUB), receive, finish; nothing left in flight."""
        watcher = Watcher()
        consumer = yield self.connect(watcher, **settings)
        producer = yield self.connect(None, **settings)
        yield consumer.subscribe("events", "archive")
        consumer.send_rdy(10)
        big = bytes(range(256)) * 400
        yield producer.publish("events", b"one")
        yield producer.multi_publish("events", [b"two", big])
        yield producer.deferred_publish("events", 0, b"four")
        yield watcher.wait(lambda: len(watcher.messages) == 4)
        self.assertEqual([m.body for m in watcher.messages], [b"one", b"two", big, b"four"])
        self.assertEqual(consumer.in_flight, 4)
        for message in watcher.messages:
            self.assertEqual(message.attempts, 1)
            message.finish()
        self.assertEqual(consumer.in_flight, 0)
        # nsqd handles a connection's commands in order: once this PUB is
        # answered, the FINs before it were handled.
        yield consumer.publish("barrier", b"x")
        channel = self.nsqd.broker.get_topic("events").get_channel("archive")
        self.assertEqual((channel.in_flight_count, channel.depth()), (0, 0))
        yield consumer.close()
        self.assertEqual(len(watcher.closed), 1)
        self.assertFalse(consumer.is_ready())


class RoundTripTests(ClientTestCase):
    """Publish and consume over each upgrade."""

    def setUp(self) -> None:
        self.files: ServerFiles = write_server_files(self.mktemp(), shared_pki())

    @inlineCallbacks
    def tls_nsqd(self) -> Generator[Any, Any, RunningNSQD]:
        nsqd = yield self.start(*self.files.args("--https-address="))
        return nsqd  # type: ignore[no-any-return]

    def server_flags(self) -> List[Any]:
        return sorted(
            (c.client_id, c.tls, c.snappy, c.deflate) for c in self.nsqd.service.tcp_factory.clients
        )

    @inlineCallbacks
    def test_plain(self) -> Generator[Any, Any, None]:
        """No upgrade."""
        yield self.start()
        yield self.round_trip()

    @inlineCallbacks
    def test_deflate(self) -> Generator[Any, Any, None]:
        """Deflate alone."""
        yield self.start()
        conn = yield self.connect(deflate=True, deflate_level=3)
        self.assertEqual((conn.deflate, conn.identify_response["deflate_level"]), (True, 3))
        yield self.round_trip(deflate=True, deflate_level=3)

    @inlineCallbacks
    def test_tls_snappy(self) -> Generator[Any, Any, None]:
        """TLS then snappy, as nsqd sees it too."""
        yield self.tls_nsqd()
        conn = yield self.connect(tls_v1=True, tls_options=client_tls_options(), snappy=True)
        self.assertEqual((conn.tls, conn.snappy), (True, True))
        self.assertEqual(self.server_flags(), [("txnsq-test", True, True, False)])
        yield self.round_trip(tls_v1=True, tls_options=client_tls_options(), snappy=True)

    @inlineCallbacks
    def test_tls_deflate(self) -> Generator[Any, Any, None]:
        """TLS then deflate."""
        yield self.tls_nsqd()
        conn = yield self.connect(tls_v1=True, tls_options=client_tls_options(), deflate=True)
        self.assertEqual((conn.tls, conn.deflate), (True, True))
        self.assertEqual(self.server_flags(), [("txnsq-test", True, False, True)])
        yield self.round_trip(tls_v1=True, tls_options=client_tls_options(), deflate=True)

    @inlineCallbacks
    def test_tls_close_prompt(self) -> Generator[Any, Any, None]:
        """Closing a TLS connection completes (it never waits on close_notify for long)."""
        yield self.tls_nsqd()
        conn = yield self.connect(tls_v1=True, tls_options=client_tls_options())
        start = reactor.seconds()  # type: ignore[attr-defined]
        yield conn.close()
        self.assertLess(reactor.seconds() - start, 2.0)  # type: ignore[attr-defined]

    @inlineCallbacks
    def test_requeue(self) -> Generator[Any, Any, None]:
        """A requeued message comes back with attempts 2."""
        yield self.start()
        watcher = Watcher()
        consumer = yield self.connect(watcher)
        yield consumer.subscribe("events", "archive")
        consumer.send_rdy(1)
        yield consumer.publish("events", b"again")
        yield watcher.wait(lambda: len(watcher.messages) == 1)
        watcher.messages[0].requeue(0)
        yield watcher.wait(lambda: len(watcher.messages) == 2)
        self.assertEqual((watcher.messages[1].body, watcher.messages[1].attempts), (b"again", 2))
        watcher.messages[1].finish()


class AuthTests(ClientTestCase):
    """AUTH against a real auth HTTP server."""

    @inlineCallbacks
    def start_with_auth(self) -> Generator[Any, Any, None]:
        self.authd = AuthServer()
        port = reactor.listenTCP(0, server.Site(self.authd), interface="127.0.0.1")  # type: ignore[attr-defined]
        self.addCleanup(port.stopListening)
        yield self.start("--auth-http-address=127.0.0.1:%d" % (port.getHost().port,))

    @inlineCallbacks
    def test_allowed(self) -> Generator[Any, Any, None]:
        """With the secret: AUTH's reply is kept, publish and subscribe work."""
        yield self.start_with_auth()
        conn = yield self.connect(auth_secret="s3cret")
        self.assertEqual(
            conn.auth_response,
            {"identity": "worker-1", "identity_url": "https://auth.example/worker-1", "permission_count": 1},
        )
        self.assertEqual(self.authd.queries[0]["secret"], "s3cret")
        yield conn.publish("events", b"hello")

    @inlineCallbacks
    def test_denied_topic(self) -> Generator[Any, Any, None]:
        """A topic the authorizations do not cover fails with E_UNAUTHORIZED."""
        yield self.start_with_auth()
        conn = yield self.connect(auth_secret="s3cret")
        failure = yield self.assertFailure(conn.publish("payroll", b"x"), NSQError)
        self.assertEqual(failure.code, "E_UNAUTHORIZED")

    @inlineCallbacks
    def test_denied_secret(self) -> Generator[Any, Any, None]:
        """An auth server granting nothing fails connect with E_UNAUTHORIZED."""
        yield self.start_with_auth()
        self.authd.answer = dict(self.authd.answer, authorizations=[])
        failure = yield self.assertFailure(
            connect(reactor, self.nsqd.tcp_address, client_config(auth_secret="wrong")), NSQError
        )
        self.assertEqual(failure.code, "E_UNAUTHORIZED")

    @inlineCallbacks
    def test_missing_secret(self) -> Generator[Any, Any, None]:
        """No secret for an nsqd that requires AUTH fails connect clearly."""
        yield self.start_with_auth()
        failure = yield self.assertFailure(
            connect(reactor, self.nsqd.tcp_address, client_config()), NSQConnectionError
        )
        self.assertIn("requires AUTH but no auth_secret", str(failure))


class ProducerTests(ClientTestCase):
    """Producer and HTTPPublisher against nsqd."""

    @inlineCallbacks
    def test_bad_topic(self) -> Generator[Any, Any, None]:
        """A publish to a bad topic fails with NSQError('E_BAD_TOPIC')."""
        yield self.start()
        producer = Producer(self.nsqd.tcp_address, client_config(), reactor=reactor)
        self.addCleanup(producer.close)
        failure = yield self.assertFailure(producer.publish("bad topic!", b"x"), NSQError)
        self.assertEqual(failure.code, "E_BAD_TOPIC")
        yield producer.publish("good", b"x")

    @inlineCallbacks
    def test_fatal_error_then_reconnect(self) -> Generator[Any, Any, None]:
        """nsqd's fatal E_BAD_MESSAGE fails that publish; the next one reconnects."""
        yield self.start("--max-msg-size=100")
        producer = Producer(self.nsqd.tcp_address, client_config(), reactor=reactor)
        self.addCleanup(producer.close)
        failure = yield self.assertFailure(producer.publish("t", b"x" * 101), NSQError)
        self.assertEqual(failure.code, "E_BAD_MESSAGE")
        yield producer.publish("t", b"fits")
        yield producer.multi_publish("t", [b"a", b"b"])
        self.assertEqual(self.nsqd.broker.get_topic("t").depth(), 3)

    @inlineCallbacks
    def test_pool(self) -> Generator[Any, Any, None]:
        """Two nsqd: publishes alternate between them."""
        first = yield self.start()
        second = yield start_nsqd()
        self.addCleanup(second.stop)
        producer = Producer([first.tcp_address, second.tcp_address], client_config(), reactor=reactor)
        self.addCleanup(producer.close)
        for index in range(4):
            yield producer.publish("t", b"%d" % (index,))
        self.assertEqual((first.broker.get_topic("t").depth(), second.broker.get_topic("t").depth()), (2, 2))

    @inlineCallbacks
    def test_http(self) -> Generator[Any, Any, None]:
        """HTTPPublisher: /pub, /pub?defer=, /mpub binary and lines; errors carry nsqd's message."""
        yield self.start()
        publisher = HTTPPublisher(self.nsqd.http_address, reactor=reactor)
        yield publisher.publish("t#ephemeral", b"one")
        yield publisher.publish("t", b"one")
        yield publisher.deferred_publish("later", 60, b"later")
        yield publisher.multi_publish("t", [b"two\n", b"three"])
        yield HTTPPublisher(self.nsqd.http_address, reactor=reactor, binary=False).multi_publish("t", [b"4", b"5"])
        topic = self.nsqd.broker.get_topic("t")
        self.assertEqual(topic.depth(), 5)
        failure = yield self.assertFailure(publisher.publish("t", b""), NSQHTTPError)
        self.assertEqual((failure.code, failure.status), ("MSG_EMPTY", 400))


class ServerGoneTests(ClientTestCase):
    """An nsqd that goes away."""

    @inlineCallbacks
    def test_nsqd_stops(self) -> Generator[Any, Any, None]:
        """nsqd stopping while messages flow: on_close once, later commands fail."""
        yield self.start()
        watcher = Watcher()
        consumer = yield self.connect(watcher)
        yield consumer.subscribe("events", "archive")
        consumer.send_rdy(5)
        yield consumer.publish("events", b"in flight")
        yield watcher.wait(lambda: len(watcher.messages) == 1)
        yield self.nsqd.stop()
        yield watcher.wait(lambda: len(watcher.closed) == 1)
        self.assertEqual(consumer.in_flight, 0)
        yield self.assertFailure(consumer.publish("events", b"x"), NSQConnectionError)
        # Too late to answer: ignored, never written.
        watcher.messages[0].finish()
        self.assertEqual(len(watcher.closed), 1)

    @inlineCallbacks
    def test_mid_frame(self) -> Generator[Any, Any, None]:
        """A server that dies mid-message: pending publishes fail, no half message, on_close once."""
        listening = reactor.listenTCP(0, Factory.forProtocol(HalfMessageServer), interface="127.0.0.1")  # type: ignore[attr-defined]
        self.addCleanup(listening.stopListening)
        watcher = Watcher()
        conn = yield connect(reactor, "127.0.0.1:%d" % (listening.getHost().port,), client_config(), watcher)
        first = conn.publish("t", b"x")
        second = conn.publish("t", b"y")
        error = yield self.assertFailure(first, NSQConnectionError)
        self.assertIn("lost", str(error))
        yield self.assertFailure(second, NSQConnectionError)
        yield watcher.wait(lambda: len(watcher.closed) == 1)
        self.assertEqual(watcher.messages, [])
        self.assertEqual(len(watcher.closed), 1)


class HalfMessageServer(Protocol):
    """Answers IDENTIFY, then on the first PUB sends half a message and closes."""

    def __init__(self) -> None:
        self.received = b""
        self.identified = False

    def dataReceived(self, data: bytes) -> None:
        self.received += data
        if not self.identified and b"IDENTIFY\n" in self.received:
            start = self.received.index(b"IDENTIFY\n") + 9
            if len(self.received) >= start + 4:
                size = int.from_bytes(self.received[start : start + 4], "big")
                if len(self.received) >= start + 4 + size:
                    self.identified = True
                    self.received = self.received[start + 4 + size :]
                    reply = json.dumps({"max_rdy_count": 2500, "version": "1.3.0"}).encode()
                    self.transport.write(encode_frame(FRAME_TYPE_RESPONSE, reply))  # type: ignore[union-attr]
        if self.identified and b"PUB " in self.received:
            frame = encode_frame(FRAME_TYPE_MESSAGE, encode_message(0, 1, b"0" * 16, b"body" * 10))
            self.transport.write(frame[: len(frame) // 2])  # type: ignore[union-attr]
            self.transport.loseConnection()  # type: ignore[union-attr]
