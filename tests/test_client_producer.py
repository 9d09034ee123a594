"""
Tests for txnsq.client.producer (on a MemoryReactorClock: connections are
accepted or refused by the test, nsqd is scripted) and
txnsq.client.http_publish (with a recording HTTP client).
"""

from __future__ import annotations

import json
import struct
from typing import Any, List, Optional, Tuple

from twisted.internet.address import IPv4Address
from twisted.internet.defer import Deferred, fail, succeed
from twisted.internet.error import ConnectionDone, ConnectionRefusedError
from twisted.internet.testing import MemoryReactorClock, StringTransport
from twisted.python.failure import Failure
from twisted.trial.unittest import SynchronousTestCase

from tests.test_client_connection import OK, REPLY, commands, error, response
from txnsq.client.connection import ConnectionConfig, NSQConnection, NSQConnectionError
from txnsq.client.http_publish import HTTPPublisher, NSQHTTPError
from txnsq.client.producer import Producer
from txnsq.protocol.v2_client import NSQError


class ProducerTestCase(SynchronousTestCase):
    """A producer on a MemoryReactorClock."""

    def make(self, *addresses: str, **kwargs: Any) -> Producer:
        self.reactor = MemoryReactorClock()
        self.reactor.advance(1000)
        self.transports: List[StringTransport] = []
        self.producer = Producer(
            list(addresses) or ["127.0.0.1:4150"],
            ConnectionConfig(client_id="p", hostname="p"),
            reactor=self.reactor,
            **kwargs,
        )
        return self.producer

    def dialled(self) -> List[Tuple[str, int]]:
        return [(host, port) for host, port, _, _, _ in self.reactor.tcpClients]

    def accept(self, index: int = -1) -> Tuple[NSQConnection, StringTransport]:
        """Connection attempt ``index`` succeeds and nsqd answers IDENTIFY."""
        host, port, factory, _, _ = self.reactor.tcpClients[index]
        wrapper = factory.buildProtocol(IPv4Address("TCP", host, port))
        transport = StringTransport()
        wrapper.makeConnection(transport)
        transport.clear()
        wrapper.dataReceived(response(REPLY))
        self.transports.append(transport)
        # The endpoint wraps the connection; the producer knows the inner one.
        return wrapper._wrappedProtocol, transport

    def refuse(self, index: int = -1) -> None:
        """Connection attempt ``index`` is refused."""
        factory = self.reactor.tcpClients[index][2]
        factory.clientConnectionFailed(self.reactor.connectors[index], Failure(ConnectionRefusedError()))

    def publish(self, topic: str = "t", body: bytes = b"x") -> List[Any]:
        results: List[Any] = []
        self.producer.publish(topic, body).addBoth(results.append)
        return results


class ProducerTests(ProducerTestCase):
    """Lazy connections, answers, errors."""

    def test_lazy(self) -> None:
        """Nothing connects until the first publish."""
        self.make()
        self.assertEqual(self.dialled(), [])
        self.publish()
        self.assertEqual(self.dialled(), [("127.0.0.1", 4150)])

    def test_publishes_share_connection(self) -> None:
        """Publishes made while connecting wait for the one attempt, then go in order."""
        self.make()
        first = self.publish(body=b"1")
        second = self.publish(body=b"2")
        self.assertEqual(len(self.dialled()), 1)
        conn, transport = self.accept()
        self.assertEqual([c.body for c in commands(transport.value())], [b"1", b"2"])
        conn.dataReceived(OK + OK)
        self.assertEqual((first, second), ([None], [None]))
        third = self.publish(body=b"3")
        self.assertEqual(len(self.dialled()), 1)
        conn.dataReceived(OK)
        self.assertEqual(third, [None])
        self.assertEqual(self.producer.connections, [conn])

    def test_multi_and_deferred(self) -> None:
        """multi_publish and deferred_publish send MPUB and DPUB."""
        self.make()
        results: List[Any] = []
        self.producer.multi_publish("t", [b"a", b"b"]).addBoth(results.append)
        self.producer.deferred_publish("t", 2, b"c").addBoth(results.append)
        conn, transport = self.accept()
        self.assertEqual([(c.name, c.body) for c in commands(transport.value())], [(b"MPUB", [b"a", b"b"]), (b"DPUB", b"c")])
        conn.dataReceived(OK + OK)
        self.assertEqual(results, [None, None])

    def test_nsq_error(self) -> None:
        """An E_* answer fails the publish with NSQError."""
        self.make()
        results = self.publish()
        conn, _ = self.accept()
        conn.dataReceived(error(b"E_PUB_FAILED PUB failed exiting"))
        self.assertEqual(results[0].value.code, "E_PUB_FAILED")

    def test_bad_topic(self) -> None:
        """An invalid topic fails with E_BAD_TOPIC without connecting."""
        self.make()
        results = self.publish(topic="no good")
        self.assertEqual(results[0].value.code, "E_BAD_TOPIC")
        self.assertEqual(self.dialled(), [])

    def test_drop_fails_pending_then_reconnects(self) -> None:
        """A lost connection fails its waiting publishes; the next publish reconnects."""
        self.make()
        results = self.publish()
        conn, _ = self.accept()
        conn.connectionLost(Failure(ConnectionDone()))
        self.assertIsInstance(results[0].value, NSQConnectionError)
        self.assertEqual(self.producer.connections, [])
        again = self.publish()
        self.assertEqual(len(self.dialled()), 2)
        conn, _ = self.accept()
        conn.dataReceived(OK)
        self.assertEqual(again, [None])

    def test_identify_failure(self) -> None:
        """A refused IDENTIFY fails the publish with nsqd's error."""
        self.make()
        results = self.publish()
        host, port, factory, _, _ = self.reactor.tcpClients[0]
        protocol = factory.buildProtocol(None)
        protocol.makeConnection(StringTransport())
        protocol.dataReceived(error(b"E_BAD_BODY IDENTIFY failed"))
        protocol.connectionLost(Failure(ConnectionDone()))
        self.assertEqual(results[0].value.code, "E_BAD_BODY")

    def test_no_address(self) -> None:
        """A producer needs a well-formed address."""
        self.assertRaises(ValueError, Producer, [], reactor=MemoryReactorClock())
        self.assertRaises(ValueError, Producer, "nope", reactor=MemoryReactorClock())


class PoolTests(ProducerTestCase):
    """Round robin, failover and backoff."""

    def test_round_robin(self) -> None:
        """Publishes go to each address in turn."""
        self.make("127.0.0.1:4150", "127.0.0.1:4250")
        self.publish()
        self.publish()
        self.assertEqual(self.dialled(), [("127.0.0.1", 4150), ("127.0.0.1", 4250)])
        first, t1 = self.accept(0)
        second, t2 = self.accept(1)
        self.publish(body=b"3")
        self.publish(body=b"4")
        self.assertEqual([c.body for c in commands(t1.value())], [b"x", b"3"])
        self.assertEqual([c.body for c in commands(t2.value())], [b"x", b"4"])

    def test_failover(self) -> None:
        """A refused connection moves the publish on to the next address."""
        self.make("127.0.0.1:4150", "127.0.0.1:4250")
        results = self.publish()
        self.refuse(0)
        self.assertEqual(self.dialled(), [("127.0.0.1", 4150), ("127.0.0.1", 4250)])
        conn, transport = self.accept(1)
        conn.dataReceived(OK)
        self.assertEqual(results, [None])
        # The refused address is backing off: the next publish goes to the other.
        self.publish()
        self.assertEqual(len(self.dialled()), 2)

    def test_backoff_schedule(self) -> None:
        """After failures an address is skipped for 1, 2, 4 ... seconds, up to max_backoff."""
        self.make(max_backoff=4)
        attempts = 0
        for expected in (1, 2, 4, 4):
            results = self.publish()
            attempts += 1
            self.assertEqual(len(self.dialled()), attempts)
            self.refuse()
            self.assertIsInstance(results[0].value, NSQConnectionError)
            self.reactor.advance(expected - 0.01)
            skipped = self.publish()
            self.assertEqual(len(self.dialled()), attempts)
            self.assertIn("next attempt in", str(skipped[0].value))
            self.reactor.advance(0.01)
        self.publish()
        self.accept()
        # A success resets the schedule.
        self.assertEqual(self.producer._nodes[0].failures, 0)

    def test_all_down(self) -> None:
        """With every address refused, the publish fails naming each."""
        self.make("127.0.0.1:4150", "127.0.0.1:4250")
        results = self.publish()
        self.refuse(0)
        self.refuse(1)
        message = str(results[0].value)
        self.assertIn("127.0.0.1:4150", message)
        self.assertIn("127.0.0.1:4250", message)


class CloseTests(ProducerTestCase):
    """close()."""

    def test_close(self) -> None:
        """close closes connections, cancels attempts, and refuses later publishes."""
        self.make("127.0.0.1:4150", "127.0.0.1:4250")
        self.publish()
        connecting = self.publish()
        conn, transport = self.accept(0)
        conn.dataReceived(OK)
        done: List[Any] = []
        self.producer.close().addBoth(done.append)
        self.assertTrue(transport.disconnecting)
        self.assertIsInstance(connecting[0].value, NSQConnectionError)
        self.assertEqual(done, [])
        conn.connectionLost(Failure(ConnectionDone()))
        self.assertEqual(done, [None])
        later = self.publish()
        self.assertIn("closed", str(later[0].value))

    def test_close_waits_for_answers(self) -> None:
        """A publish already sent is answered before the connection closes."""
        self.make()
        results = self.publish()
        conn, transport = self.accept()
        self.producer.close()
        self.assertFalse(transport.disconnecting)
        conn.dataReceived(OK)
        self.assertEqual(results, [None])
        self.assertTrue(transport.disconnecting)

    def test_close_idle(self) -> None:
        """Closing a producer that never connected fires at once."""
        self.make()
        done: List[Any] = []
        self.producer.close().addBoth(done.append)
        self.assertEqual(done, [None])


# -- HTTPPublisher -------------------------------------------------------------


class RecordingHTTPClient:
    """Answers every request with ``reply``; records requests."""

    def __init__(self, reply: Any = (200, b"OK", b"OK")) -> None:
        self.reply = reply
        self.requests: List[Tuple[str, str, Optional[bytes], bytes]] = []

    def request(self, method: str, url: str, body: Optional[bytes] = None, content_type: bytes = b"") -> "Deferred[Any]":
        self.requests.append((method, url, body, content_type))
        if isinstance(self.reply, Exception):
            return fail(self.reply)
        return succeed(self.reply)


class HTTPPublisherTests(SynchronousTestCase):
    """Requests to nsqd's HTTP API and their answers."""

    def make(self, reply: Any = (200, b"OK", b"OK"), **kwargs: Any) -> HTTPPublisher:
        self.client = RecordingHTTPClient(reply)
        publisher = HTTPPublisher("127.0.0.1:4151", reactor=MemoryReactorClock(), **kwargs)
        publisher._client = self.client  # type: ignore[assignment]
        return publisher

    def result(self, d: "Deferred[Any]") -> Any:
        results: List[Any] = []
        d.addBoth(results.append)
        return results[0]

    def test_publish(self) -> None:
        """publish POSTs the body to /pub?topic=, the topic URL-quoted."""
        publisher = self.make()
        self.assertIsNone(self.result(publisher.publish("t#ephemeral", b"body")))
        self.assertEqual(
            self.client.requests,
            [("POST", "http://127.0.0.1:4151/pub?topic=t%23ephemeral", b"body", b"application/octet-stream")],
        )

    def test_deferred(self) -> None:
        """deferred_publish adds defer= in milliseconds."""
        publisher = self.make()
        self.result(publisher.deferred_publish("t", 1.5, b"b"))
        self.assertEqual(self.client.requests[0][1], "http://127.0.0.1:4151/pub?topic=t&defer=1500")

    def test_mpub_binary(self) -> None:
        """multi_publish sends the binary MPUB body by default."""
        publisher = self.make()
        self.result(publisher.multi_publish("t", [b"a\n", b"b"]))
        _, url, body, _ = self.client.requests[0]
        self.assertEqual(url, "http://127.0.0.1:4151/mpub?topic=t&binary=true")
        self.assertEqual(body, struct.pack(">II", 2, 2) + b"a\n" + struct.pack(">I", 1) + b"b")

    def test_mpub_lines(self) -> None:
        """In line mode, bodies are joined by newlines; a body with a newline is refused."""
        publisher = self.make(binary=False)
        self.result(publisher.multi_publish("t", [b"a", b"b"]))
        self.assertEqual(self.client.requests[0][1:3], ("http://127.0.0.1:4151/mpub?topic=t", b"a\nb"))
        self.assertIsInstance(self.result(publisher.multi_publish("t", [b"a\nb"])).value, ValueError)

    def test_error_message(self) -> None:
        """A non-200 answer fails with nsqd's message as the code."""
        publisher = self.make((400, b"Bad Request", json.dumps({"message": "MSG_EMPTY"}).encode()))
        failure = self.result(publisher.publish("t", b""))
        self.assertIsInstance(failure.value, NSQHTTPError)
        self.assertEqual((failure.value.code, failure.value.status), ("MSG_EMPTY", 400))
        self.assertIn("got response 400 Bad Request", failure.value.description)

    def test_error_not_json(self) -> None:
        """A non-200 answer without nsqd's JSON is HTTP_<status>."""
        publisher = self.make((502, b"Bad Gateway", b"<html>"))
        self.assertEqual(self.result(publisher.publish("t", b"x")).value.code, "HTTP_502")

    def test_transport_failure(self) -> None:
        """No answer at all is NSQConnectionError."""
        publisher = self.make(ConnectionRefusedError())
        failure = self.result(publisher.publish("t", b"x"))
        self.assertIsInstance(failure.value, NSQConnectionError)

    def test_bad_topic(self) -> None:
        """An invalid topic is refused without a request."""
        publisher = self.make()
        self.assertIsInstance(self.result(publisher.publish("a/b", b"x")).value, NSQError)
        self.assertEqual(self.client.requests, [])
