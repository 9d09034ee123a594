"""
Tests for txnsq.client.connection, with no sockets.

Two kinds of peer: a scripted nsqd (the test writes frames into the
connection and reads what it wrote from a StringTransport), and nsqd's own
protocol (txnsq.nsqd.tcp on a Clock-driven broker) joined to the client by
a byte pump whose transports can start a real memory-BIO TLS layer, for
every upgrade sequence end to end.
"""

from __future__ import annotations

import json
from typing import Any, List, Optional, Tuple

from twisted.internet.address import IPv4Address
from twisted.internet.defer import CancelledError, Deferred
from twisted.internet.error import ConnectionDone, ConnectionRefusedError
from twisted.internet.task import Clock
from twisted.internet.testing import MemoryReactorClock, StringTransport
from twisted.logger import capturedLogs
from twisted.python.failure import Failure
from twisted.trial.unittest import SynchronousTestCase

from tests.integration.tls_certs import client_tls_options, shared_pki
from tests.test_tcp_upgrades import TLSStringTransport
from txnsq import __version__
from txnsq.client.connection import (
    ConnectionConfig,
    NSQConnection,
    NSQConnectionError,
    connect,
)
from txnsq.client.message import Message
from txnsq.nsqd.broker import Broker
from txnsq.nsqd.options import NSQDOptions
from txnsq.nsqd.tcp import NSQDFactory, NSQDProtocol, ServerFeatures
from txnsq.nsqd.tls import tls_server_options
from txnsq.protocol.compression import DeflateEncoder, SnappyEncoder
from txnsq.protocol.frames import (
    FRAME_TYPE_ERROR,
    FRAME_TYPE_MESSAGE,
    FRAME_TYPE_RESPONSE,
    encode_frame,
)
from txnsq.protocol.message import encode_message
from txnsq.protocol.v2 import Command, V2CommandParser
from txnsq.protocol.v2_client import NSQError
from txnsq.storage.memory import MemoryStorage

OK = encode_frame(FRAME_TYPE_RESPONSE, b"OK")
HEARTBEAT = encode_frame(FRAME_TYPE_RESPONSE, b"_heartbeat_")
CLOSE_WAIT = encode_frame(FRAME_TYPE_RESPONSE, b"CLOSE_WAIT")
MSG_ID = b"0123456789abcdef"
REPLY = {"max_rdy_count": 500, "version": "1.3.0", "tls_v1": False, "snappy": False, "deflate": False, "msg_timeout": 60000}


def response(data: Any) -> bytes:
    """A response frame; a dict is sent as JSON."""
    if isinstance(data, dict):
        data = json.dumps(data).encode()
    return encode_frame(FRAME_TYPE_RESPONSE, data)


def error(data: bytes) -> bytes:
    return encode_frame(FRAME_TYPE_ERROR, data)


def message(body: bytes = b"body", attempts: int = 1, msg_id: bytes = MSG_ID) -> bytes:
    return encode_frame(FRAME_TYPE_MESSAGE, encode_message(1700000000000000000, attempts, msg_id, body))


def commands(data: bytes) -> List[Command]:
    """What nsqd's parser reads from ``data`` (the magic, if any, stripped)."""
    if data.startswith(b"  V2"):
        data = data[4:]
    parser = V2CommandParser(max_msg_size=1 << 20, max_body_size=5 << 20, max_req_timeout_ms=3600000)
    parser.feed(data)
    found = []
    while True:
        command = parser.next_command()
        if command is None:
            return found
        found.append(command)


def lines(data: bytes) -> List[bytes]:
    """Commands as ``NAME param ...`` lines."""
    return [b" ".join([c.name] + c.params) for c in commands(data)]


class Recorder:
    """A ConnectionDelegate that records every call."""

    def __init__(self) -> None:
        self.messages: List[Message] = []
        self.finished: List[Message] = []
        self.requeued: List[Tuple[Message, bool]] = []
        self.errors: List[NSQError] = []
        self.closed: List[Failure] = []

    def on_message(self, conn: NSQConnection, message: Message) -> None:
        self.messages.append(message)

    def on_message_finished(self, conn: NSQConnection, message: Message) -> None:
        self.finished.append(message)

    def on_message_requeued(self, conn: NSQConnection, message: Message, backoff: bool) -> None:
        self.requeued.append((message, backoff))

    def on_error(self, conn: NSQConnection, error: NSQError) -> None:
        self.errors.append(error)

    def on_close(self, conn: NSQConnection, reason: Failure) -> None:
        self.closed.append(reason)


def config(**settings: Any) -> ConnectionConfig:
    settings.setdefault("client_id", "worker")
    settings.setdefault("hostname", "worker.example")
    return ConnectionConfig(**settings)


class ScriptedTestCase(SynchronousTestCase):
    """A connection on a StringTransport; the test plays nsqd."""

    def make(self, **settings: Any) -> NSQConnection:
        self.clock = Clock()
        self.clock.advance(1000)
        self.delegate = Recorder()
        self.conn = NSQConnection("127.0.0.1:4150", config(**settings), self.delegate, self.clock)
        self.transport = StringTransport()
        self.conn.makeConnection(self.transport)
        self.ready: List[Any] = []
        self.conn.when_ready().addBoth(self.ready.append)
        return self.conn

    def written(self) -> bytes:
        data = self.transport.value()
        self.transport.clear()
        return data

    def make_ready(self, reply: Any = None, **settings: Any) -> NSQConnection:
        conn = self.make(**settings)
        self.written()
        conn.dataReceived(response(REPLY if reply is None else reply))
        self.assertEqual(self.ready, [conn])
        return conn

    def lose(self, reason: Any = None) -> None:
        """The reactor reports the end of the connection."""
        self.conn.connectionLost(Failure(reason if reason is not None else ConnectionDone()))

    def subscribed(self) -> NSQConnection:
        conn = self.make_ready()
        results: List[Any] = []
        conn.subscribe("t", "c").addBoth(results.append)
        conn.dataReceived(OK)
        self.assertEqual(results, [None])
        self.written()
        return conn


class IdentifyTests(ScriptedTestCase):
    """The magic and IDENTIFY go first, with every option."""

    def test_every_option(self) -> None:
        """IDENTIFY's JSON carries every ConnectionConfig option, durations in ms."""
        self.make(
            user_agent="agent/1",
            heartbeat_interval=10,
            read_timeout=25,
            output_buffer_size=4096,
            output_buffer_timeout=0.05,
            tls_v1=True,
            deflate=True,
            deflate_level=3,
            sample_rate=20,
            msg_timeout=45.5,
        )
        data = self.written()
        self.assertTrue(data.startswith(b"  V2IDENTIFY\n"))
        [command] = commands(data)
        assert isinstance(command.body, bytes)
        self.assertEqual(
            json.loads(command.body),
            {
                "client_id": "worker",
                "hostname": "worker.example",
                "user_agent": "agent/1",
                "feature_negotiation": True,
                "heartbeat_interval": 10000,
                "output_buffer_size": 4096,
                "output_buffer_timeout": 50,
                "tls_v1": True,
                "snappy": False,
                "deflate": True,
                "deflate_level": 3,
                "sample_rate": 20,
                "msg_timeout": 45500,
            },
        )

    def test_defaults(self) -> None:
        """By default: go-nsq's values, this library's user agent, nsqd's msg timeout."""
        body = ConnectionConfig().identify_body()
        self.assertEqual(body["user_agent"], "txnsq/" + __version__)
        self.assertEqual(
            (body["heartbeat_interval"], body["output_buffer_timeout"], body["msg_timeout"], body["feature_negotiation"]),
            (30000, 250, 0, True),
        )
        self.assertTrue(body["client_id"])
        self.assertEqual(body["client_id"], body["hostname"].split(".")[0])

    def test_disabled_values(self) -> None:
        """Negative heartbeat and output buffer timeout are sent as -1 (disabled)."""
        body = ConnectionConfig(heartbeat_interval=-1, output_buffer_timeout=-1, output_buffer_size=-1).identify_body()
        self.assertEqual((body["heartbeat_interval"], body["output_buffer_timeout"], body["output_buffer_size"]), (-1, -1, -1))

    def test_config_validation(self) -> None:
        """Contradictory settings are refused when the config is made."""
        self.assertRaises(ValueError, ConnectionConfig, snappy=True, deflate=True)
        self.assertRaises(ValueError, ConnectionConfig, deflate_level=0)
        self.assertRaises(ValueError, ConnectionConfig, sample_rate=100)
        self.assertRaises(ValueError, ConnectionConfig, heartbeat_interval=60, read_timeout=60)

    def test_json_reply(self) -> None:
        """A JSON reply is kept; max_rdy_count comes from it; the connection is ready."""
        conn = self.make_ready()
        self.assertEqual(conn.identify_response, REPLY)
        self.assertEqual(conn.max_rdy_count, 500)
        self.assertTrue(conn.is_ready())
        self.assertEqual(conn.state, "ready")
        self.assertEqual((conn.tls, conn.snappy, conn.deflate), (False, False, False))

    def test_ok_reply(self) -> None:
        """A bare OK (no feature negotiation) means no features and max_rdy_count 2500."""
        conn = self.make_ready(reply=b"OK")
        self.assertEqual((conn.identify_response, conn.max_rdy_count), ({}, 2500))

    def test_reply_split(self) -> None:
        """The reply may arrive a byte at a time."""
        conn = self.make()
        for byte in response(REPLY):
            self.assertEqual(self.ready, [])
            conn.dataReceived(bytes([byte]))
        self.assertEqual(self.ready, [conn])

    def test_identify_refused(self) -> None:
        """An error reply fails connect with NSQError; the delegate hears nothing."""
        conn = self.make()
        conn.dataReceived(error(b"E_BAD_BODY IDENTIFY failed"))
        self.assertTrue(self.transport.disconnecting)
        self.lose()
        [failure] = self.ready
        self.assertEqual(failure.value.code, "E_BAD_BODY")
        self.assertEqual(self.delegate.closed, [])

    def test_not_json(self) -> None:
        """A reply that is neither OK nor a JSON object drops the connection."""
        conn = self.make()
        conn.dataReceived(response(b"[1, 2]"))
        self.assertTrue(self.transport.disconnecting)
        self.lose()
        self.assertIsInstance(self.ready[0].value, NSQConnectionError)

    def test_garbage_reply(self) -> None:
        """An HTTP server's answer is refused at once, not buffered as a huge frame."""
        conn = self.make()
        conn.dataReceived(b"HTTP/1.1 400 Bad Request\r\n\r\n")
        self.assertTrue(self.transport.disconnecting)
        self.lose()
        self.assertIn("malformed frame", str(self.ready[0].value))

    def test_heartbeat_during_handshake(self) -> None:
        """A heartbeat before the reply is answered with NOP."""
        conn = self.make()
        self.written()
        conn.dataReceived(HEARTBEAT)
        self.assertEqual(self.written(), b"NOP\n")
        self.assertEqual(self.ready, [])

    def test_read_timeout_during_handshake(self) -> None:
        """No reply within read_timeout: the connection is dropped and connect fails."""
        self.make(read_timeout=5, heartbeat_interval=2)
        self.clock.advance(4.9)
        self.assertFalse(self.transport.disconnecting)
        self.clock.advance(0.1)
        self.assertTrue(self.transport.disconnecting)
        self.lose()
        self.assertIn("read timeout", str(self.ready[0].value))


class CompressionHandshakeTests(ScriptedTestCase):
    """The compressed OK may share a read with the IDENTIFY reply."""

    def test_snappy_same_read(self) -> None:
        """Snappy: reply and compressed OK in one read; later frames decoded."""
        conn = self.make(snappy=True)
        self.written()
        server = SnappyEncoder()
        conn.dataReceived(response(dict(REPLY, snappy=True)) + server.encode(OK))
        self.assertEqual(self.ready, [conn])
        self.assertTrue(conn.snappy)
        conn.dataReceived(server.encode(HEARTBEAT))
        # The NOP goes out compressed.
        self.assertNotEqual(self.written(), b"NOP\n")

    def test_deflate_split(self) -> None:
        """Deflate: the compressed OK split over reads."""
        conn = self.make(deflate=True, deflate_level=2)
        self.written()
        server = DeflateEncoder(2)
        conn.dataReceived(response(dict(REPLY, deflate=True, deflate_level=2)))
        self.assertEqual(self.ready, [])
        compressed = server.encode(OK)
        for byte in compressed:
            conn.dataReceived(bytes([byte]))
        self.assertEqual(self.ready, [conn])
        self.assertEqual((conn.deflate, conn._encoder.level), (True, 2))

    def test_corrupt(self) -> None:
        """Corrupt compressed data drops the connection."""
        conn = self.make(snappy=True)
        conn.dataReceived(response(dict(REPLY, snappy=True)) + b"\x00garbage!")
        self.assertTrue(self.transport.disconnecting)
        self.lose()
        self.assertIn("corrupt compressed data", str(self.ready[0].value))

    def test_not_ok(self) -> None:
        """Anything but OK after an upgrade drops the connection."""
        conn = self.make(snappy=True)
        conn.dataReceived(response(dict(REPLY, snappy=True)) + SnappyEncoder().encode(response(b"NO")))
        self.assertTrue(self.transport.disconnecting)


class AuthTests(ScriptedTestCase):
    """AUTH after the upgrades when nsqd requires it."""

    def test_auth(self) -> None:
        """The secret is sent; the JSON reply is kept and the connection is ready."""
        conn = self.make(auth_secret="s3cret")
        self.written()
        conn.dataReceived(response(dict(REPLY, auth_required=True)))
        [command] = commands(self.written())
        self.assertEqual((command.name, command.body), (b"AUTH", b"s3cret"))
        self.assertEqual(self.ready, [])
        reply = {"identity": "worker-1", "identity_url": "", "permission_count": 2}
        conn.dataReceived(response(reply))
        self.assertEqual(self.ready, [conn])
        self.assertEqual(conn.auth_response, reply)

    def test_not_required(self) -> None:
        """Without auth_required no AUTH is sent, even with a secret."""
        conn = self.make(auth_secret=b"s3cret")
        self.written()
        conn.dataReceived(response(REPLY))
        self.assertEqual(self.written(), b"")
        self.assertIsNone(conn.auth_response)

    def test_missing_secret(self) -> None:
        """auth_required without a secret fails connect with a clear error."""
        conn = self.make()
        conn.dataReceived(response(dict(REPLY, auth_required=True)))
        self.assertTrue(self.transport.disconnecting)
        self.lose()
        failure = self.ready[0]
        self.assertIsInstance(failure.value, NSQConnectionError)
        self.assertIn("requires AUTH but no auth_secret", str(failure.value))

    def test_denied(self) -> None:
        """E_UNAUTHORIZED fails connect with that NSQError."""
        conn = self.make(auth_secret="s3cret")
        conn.dataReceived(response(dict(REPLY, auth_required=True)))
        conn.dataReceived(error(b"E_UNAUTHORIZED AUTH no authorizations found"))
        self.lose()
        self.assertEqual(self.ready[0].value.code, "E_UNAUTHORIZED")


class FrameTests(ScriptedTestCase):
    """Frames of a ready connection."""

    def test_heartbeat(self) -> None:
        """A heartbeat is answered with NOP and matches no command."""
        conn = self.make_ready()
        results: List[Any] = []
        conn.publish("t", b"x").addBoth(results.append)
        self.written()
        conn.dataReceived(HEARTBEAT)
        self.assertEqual(self.written(), b"NOP\n")
        self.assertEqual(results, [])
        conn.dataReceived(OK)
        self.assertEqual(results, [None])

    def test_messages_split(self) -> None:
        """Messages split anywhere are delivered whole, once, in order."""
        conn = self.make_ready()
        data = message(b"one") + message(b"two", attempts=3, msg_id=b"fedcba9876543210")
        for byte in data:
            conn.dataReceived(bytes([byte]))
        self.assertEqual([(m.body, m.attempts, m.id) for m in self.delegate.messages], [(b"one", 1, MSG_ID), (b"two", 3, b"fedcba9876543210")])
        first = self.delegate.messages[0]
        self.assertEqual((first.timestamp, first.nsqd_address), (1700000000000000000, "127.0.0.1:4150"))
        self.assertEqual(conn.in_flight, 2)
        self.assertEqual(conn.last_message_time, self.clock.seconds())

    def test_response_order(self) -> None:
        """Answers match commands in the order they were sent."""
        conn = self.make_ready()
        results: List[Any] = []
        conn.publish("a", b"1").addBoth(lambda r: results.append(("a", r)))
        conn.multi_publish("b", [b"1", b"2"]).addBoth(lambda r: results.append(("b", r)))
        conn.deferred_publish("c", 1.5, b"3").addBoth(lambda r: results.append(("c", r)))
        self.assertEqual(lines(self.written()), [b"PUB a", b"MPUB b", b"DPUB c 1500"])
        conn.dataReceived(OK + OK)
        self.assertEqual(results, [("a", None), ("b", None)])
        conn.dataReceived(OK)
        self.assertEqual(results[2], ("c", None))

    def test_fatal_error_fails_oldest(self) -> None:
        """A fatal E_* fails the oldest waiting command, with the code and text."""
        conn = self.make_ready()
        results: List[Any] = []
        conn.publish("a", b"1").addErrback(results.append)
        conn.publish("a", b"2").addErrback(results.append)
        conn.dataReceived(error(b"E_BAD_MESSAGE PUB message too big 2000 > 1000"))
        [failure] = results
        self.assertEqual((failure.value.code, failure.value.description), ("E_BAD_MESSAGE", "PUB message too big 2000 > 1000"))
        self.assertEqual(self.delegate.errors, [])

    def test_fatal_error_ends_connection(self) -> None:
        """After a fatal E_*, nothing more is sent: later commands fail and the connection closes."""
        conn = self.make_ready()
        results: List[Any] = []
        conn.publish("a", b"1").addErrback(results.append)
        conn.publish("a", b"2").addErrback(results.append)
        self.written()
        conn.dataReceived(error(b"E_BAD_MESSAGE PUB message too big"))
        self.assertFalse(conn.is_ready())
        self.assertTrue(self.transport.disconnecting)
        conn.publish("a", b"3").addErrback(results.append)
        self.assertEqual(self.written(), b"")
        self.lose()
        self.assertEqual(
            [type(f.value) for f in results], [NSQError, NSQConnectionError, NSQConnectionError]
        )
        [reason] = self.delegate.closed
        self.assertEqual(reason.value.code, "E_BAD_MESSAGE")

    def test_error_nothing_waiting(self) -> None:
        """An E_* frame with no command waiting goes to on_error."""
        conn = self.make_ready()
        conn.dataReceived(error(b"E_INVALID cannot RDY in current state"))
        self.assertEqual([e.code for e in self.delegate.errors], ["E_INVALID"])

    def test_non_fatal_never_fails_publish(self) -> None:
        """E_FIN_FAILED goes to on_error even while a publish waits, which stays waiting."""
        conn = self.make_ready()
        results: List[Any] = []
        conn.publish("a", b"1").addBoth(results.append)
        for code in (b"E_FIN_FAILED", b"E_REQ_FAILED", b"E_TOUCH_FAILED"):
            conn.dataReceived(error(code + b" failed " + MSG_ID))
        self.assertEqual(results, [])
        self.assertEqual([(e.code, e.fatal) for e in self.delegate.errors], [("E_FIN_FAILED", False), ("E_REQ_FAILED", False), ("E_TOUCH_FAILED", False)])
        conn.dataReceived(OK)
        self.assertEqual(results, [None])

    def test_unexpected_ok_ignored(self) -> None:
        """An OK nothing waits for is logged and ignored."""
        conn = self.make_ready()
        with capturedLogs() as events:
            conn.dataReceived(OK)
        self.assertFalse(self.transport.disconnecting)
        self.assertEqual(len(events), 1)

    def test_wrong_response_drops(self) -> None:
        """CLOSE_WAIT in answer to PUB is a protocol error: the publish fails, the connection drops."""
        conn = self.make_ready()
        results: List[Any] = []
        conn.publish("a", b"1").addErrback(results.append)
        conn.dataReceived(CLOSE_WAIT)
        self.assertIsInstance(results[0].value, NSQConnectionError)
        self.assertTrue(self.transport.disconnecting)

    def test_bad_topic_not_sent(self) -> None:
        """An invalid topic fails with E_BAD_TOPIC at once and nothing is written."""
        conn = self.make_ready()
        results: List[Any] = []
        conn.publish("bad topic!", b"x").addErrback(results.append)
        conn.subscribe("t", "bad channel").addErrback(results.append)
        self.assertEqual([f.value.code for f in results], ["E_BAD_TOPIC", "E_BAD_CHANNEL"])
        self.assertEqual(self.written(), b"")
        self.assertFalse(self.transport.disconnecting)

    def test_empty_mpub_not_sent(self) -> None:
        """MPUB of nothing fails with E_BAD_BODY and is not sent."""
        conn = self.make_ready()
        results: List[Any] = []
        conn.multi_publish("t", []).addErrback(results.append)
        self.assertEqual(results[0].value.code, "E_BAD_BODY")
        self.assertEqual(self.written(), b"")

    def test_subscribe_twice(self) -> None:
        """A second SUB is refused locally (nsqd would drop the connection)."""
        conn = self.subscribed()
        self.assertTrue(conn.subscribed)
        results: List[Any] = []
        conn.subscribe("t", "c").addErrback(results.append)
        self.assertEqual(results[0].value.code, "E_INVALID")
        self.assertEqual(self.written(), b"")

    def test_send_rdy(self) -> None:
        """RDY is written and remembered; beyond max_rdy_count it is refused."""
        conn = self.subscribed()
        conn.send_rdy(25)
        self.assertEqual((self.written(), conn.rdy_count), (b"RDY 25\n", 25))
        self.assertRaises(ValueError, conn.send_rdy, 501)
        self.assertRaises(ValueError, conn.send_rdy, -1)


class DropTests(ScriptedTestCase):
    """Garbage, malformed frames and lost connections."""

    def assert_dropped(self, results: List[Any], text: str) -> None:
        self.assertTrue(self.transport.disconnecting)
        self.assertEqual(results, [])
        self.lose()
        [failure] = results
        self.assertIsInstance(failure.value, NSQConnectionError)
        self.assertIn(text, str(failure.value))
        [reason] = self.delegate.closed
        self.assertIn(text, reason.getErrorMessage())

    def waiting_publish(self) -> List[Any]:
        results: List[Any] = []
        self.conn.publish("t", b"x").addErrback(results.append)
        return results

    def test_garbage(self) -> None:
        """A frame size below 4 drops the connection; waiting publishes fail; on_close once."""
        self.make_ready()
        results = self.waiting_publish()
        self.conn.dataReceived(b"\x00\x00\x00\x01garbage")
        self.assert_dropped(results, "malformed frame")

    def test_unknown_frame_type(self) -> None:
        """A frame of an unknown type drops the connection."""
        self.make_ready()
        results = self.waiting_publish()
        self.conn.dataReceived(encode_frame(9, b"what"))
        self.assert_dropped(results, "unknown frame type 9")

    def test_short_message(self) -> None:
        """A message frame too short to hold a message drops it; nothing is delivered."""
        self.make_ready()
        results = self.waiting_publish()
        self.conn.dataReceived(encode_frame(FRAME_TYPE_MESSAGE, b"short"))
        self.assert_dropped(results, "message frame of 5 bytes")
        self.assertEqual(self.delegate.messages, [])

    def test_frames_after_drop_ignored(self) -> None:
        """Frames after the bad one are not handled."""
        self.make_ready()
        self.conn.dataReceived(encode_frame(9, b"what") + message())
        self.assertEqual(self.delegate.messages, [])
        self.conn.dataReceived(message())
        self.assertEqual(self.delegate.messages, [])

    def test_mid_frame_close(self) -> None:
        """A connection lost mid-message delivers no half message; on_close is called once."""
        self.make_ready()
        results = self.waiting_publish()
        data = message(b"x" * 100)
        self.conn.dataReceived(data[:50])
        self.lose(ConnectionDone())
        self.lose(ConnectionDone())
        self.assertEqual(self.delegate.messages, [])
        self.assertEqual(len(self.delegate.closed), 1)
        self.assertIsInstance(results[0].value, NSQConnectionError)
        self.assertFalse(self.conn.is_ready())

    def test_read_timeout(self) -> None:
        """Reads keep the connection alive; read_timeout of silence drops it."""
        self.make_ready(read_timeout=10, heartbeat_interval=5)
        self.clock.advance(9)
        self.conn.dataReceived(HEARTBEAT)
        results = self.waiting_publish()
        self.clock.advance(9)
        self.assertFalse(self.transport.disconnecting)
        self.clock.advance(1)
        self.assert_dropped(results, "read timeout")

    def test_no_read_timeout_without_heartbeats(self) -> None:
        """With heartbeats disabled, an idle ready connection is kept."""
        self.make_ready(heartbeat_interval=-1)
        self.clock.advance(3600)
        self.assertFalse(self.transport.disconnecting)

    def test_commands_after_loss(self) -> None:
        """Commands on a lost connection fail at once with NSQConnectionError."""
        self.make_ready()
        self.lose()
        results: List[Any] = []
        self.conn.publish("t", b"x").addErrback(results.append)
        self.assertIsInstance(results[0].value, NSQConnectionError)


class MessageResponseTests(ScriptedTestCase):
    """FIN, REQ and TOUCH through the connection."""

    def receive(self, attempts: int = 1) -> Message:
        self.subscribed()
        self.conn.dataReceived(message(attempts=attempts))
        return self.delegate.messages[-1]

    def test_finish(self) -> None:
        """finish writes FIN, lowers in_flight, then tells the delegate."""
        msg = self.receive()
        self.assertEqual(self.conn.in_flight, 1)
        msg.finish()
        self.assertEqual(self.written(), b"FIN " + MSG_ID + b"\n")
        self.assertEqual((self.conn.in_flight, self.delegate.finished), (0, [msg]))

    def test_answers_of_one_read_one_write(self) -> None:
        """Messages answered while their read is handled are answered in one write, after it."""
        self.subscribed()
        writes: List[bytes] = []
        original = self.transport.write

        def record(data: bytes) -> None:
            writes.append(data)
            original(data)

        self.transport.write = record  # type: ignore[method-assign]

        def answer(conn: NSQConnection, msg: Message) -> None:
            self.delegate.messages.append(msg)
            msg.finish() if msg.body == b"a" else msg.requeue(0)

        self.delegate.on_message = answer  # type: ignore[method-assign]
        self.conn.dataReceived(message(b"a", msg_id=b"a" * 16) + message(b"b", msg_id=b"b" * 16))
        self.assertEqual(writes, [b"FIN " + b"a" * 16 + b"\n" + b"REQ " + b"b" * 16 + b" 0\n"])
        # Outside a read, an answer is written at once.
        writes.clear()
        self.conn.dataReceived(message(b"c", msg_id=b"c" * 16))
        self.assertEqual(writes, [b"REQ " + b"c" * 16 + b" 0\n"])

    def test_double_finish(self) -> None:
        """A second finish or a requeue after it is never sent."""
        msg = self.receive()
        msg.finish()
        msg.finish()
        msg.requeue()
        self.assertEqual(self.written(), b"FIN " + MSG_ID + b"\n")
        self.assertEqual((self.conn.in_flight, len(self.delegate.finished), self.delegate.requeued), (0, 1, []))

    def test_requeue_explicit(self) -> None:
        """requeue(delay) writes REQ with the delay in ms and reports backoff."""
        msg = self.receive()
        msg.requeue(1.5, backoff=False)
        self.assertEqual(self.written(), b"REQ " + MSG_ID + b" 1500\n")
        self.assertEqual(self.delegate.requeued, [(msg, False)])
        self.assertEqual(self.conn.in_flight, 0)

    def test_requeue_computed(self) -> None:
        """Without a delay: default_requeue_delay x attempts (go-nsq's)."""
        msg = self.receive(attempts=3)
        msg.requeue()
        self.assertEqual(self.written(), b"REQ " + MSG_ID + b" 270000\n")
        self.assertEqual(self.delegate.requeued, [(msg, True)])

    def test_requeue_computed_capped(self) -> None:
        """The computed delay is capped by max_requeue_delay."""
        self.make_ready(default_requeue_delay=2, max_requeue_delay=5)
        self.conn.dataReceived(message(attempts=4))
        self.written()
        self.delegate.messages[0].requeue()
        self.assertEqual(self.written(), b"REQ " + MSG_ID + b" 5000\n")
        self.assertEqual(ConnectionConfig().requeue_delay(100), 900.0)

    def test_touch(self) -> None:
        """touch writes TOUCH and keeps the message in flight."""
        msg = self.receive()
        msg.touch()
        self.assertEqual((self.written(), self.conn.in_flight), (b"TOUCH " + MSG_ID + b"\n", 1))

    def test_after_close_ignored(self) -> None:
        """Answers after the connection is gone are not written, logged once, not reported."""
        first = self.receive()
        self.conn.dataReceived(message(msg_id=b"fedcba9876543210"))
        second = self.delegate.messages[-1]
        self.lose()
        self.assertEqual(self.conn.in_flight, 0)
        with capturedLogs() as events:
            first.finish()
            second.requeue()
        self.assertEqual(self.written(), b"")
        self.assertEqual((self.delegate.finished, self.delegate.requeued), ([], []))
        self.assertEqual(len(events), 1)

    def test_compressed_writes_batched(self) -> None:
        """With compression, the FINs a read causes go out as one encoded write."""
        conn = self.make(snappy=True)
        server = SnappyEncoder()
        conn.dataReceived(response(dict(REPLY, snappy=True)) + server.encode(OK))
        self.written()
        conn.delegate.on_message = lambda c, m: m.finish()  # type: ignore[method-assign]
        conn.dataReceived(server.encode(message() + message(msg_id=b"fedcba9876543210")))
        self.assertEqual(len(self.transport.io.getvalue()) > 0, True)
        from txnsq.protocol.compression import SnappyDecoder

        decoded = SnappyDecoder().decode(self.written())
        self.assertEqual(lines(decoded), [b"FIN " + MSG_ID, b"FIN fedcba9876543210"])


class CloseTests(ScriptedTestCase):
    """close(): CLS, CLOSE_WAIT, draining, bounded waits."""

    def closing(self) -> List[Any]:
        done: List[Any] = []
        self.conn.close().addBoth(done.append)
        return done

    def test_unsubscribed(self) -> None:
        """Nothing waiting: the transport is closed at once; close fires on connectionLost."""
        self.make_ready()
        done = self.closing()
        self.assertEqual(self.written(), b"")
        self.assertTrue(self.transport.disconnecting)
        self.assertEqual(done, [])
        self.lose()
        self.assertEqual(done, [None])
        self.assertEqual(len(self.delegate.closed), 1)

    def test_waits_for_publishes(self) -> None:
        """Publishes already sent are answered before the connection closes."""
        self.make_ready()
        results: List[Any] = []
        self.conn.publish("t", b"x").addBoth(results.append)
        self.closing()
        self.assertFalse(self.transport.disconnecting)
        later: List[Any] = []
        self.conn.publish("t", b"y").addErrback(later.append)
        self.assertIsInstance(later[0].value, NSQConnectionError)
        self.conn.dataReceived(OK)
        self.assertEqual(results, [None])
        self.assertTrue(self.transport.disconnecting)

    def test_subscribed(self) -> None:
        """A subscribed connection sends CLS and closes on CLOSE_WAIT."""
        self.subscribed()
        done = self.closing()
        self.assertEqual(self.written(), b"CLS\n")
        self.assertFalse(self.transport.disconnecting)
        self.conn.dataReceived(CLOSE_WAIT)
        self.assertTrue(self.transport.disconnecting)
        self.lose()
        self.assertEqual(done, [None])

    def test_drains_in_flight(self) -> None:
        """After CLOSE_WAIT, messages in flight may still be finished; then it closes."""
        self.subscribed()
        self.conn.dataReceived(message())
        msg = self.delegate.messages[0]
        self.closing()
        self.conn.dataReceived(CLOSE_WAIT)
        self.assertFalse(self.transport.disconnecting)
        self.written()
        msg.finish()
        self.assertEqual(self.written(), b"FIN " + MSG_ID + b"\n")
        self.assertTrue(self.transport.disconnecting)

    def test_last_fin_before_close_in_same_read(self) -> None:
        """A FIN held back by the read that also brings CLOSE_WAIT is written before the connection is closed."""
        self.subscribed()
        events: List[Any] = []
        self.transport.write = lambda data: events.append(data)  # type: ignore[method-assign]
        original_lose = self.transport.loseConnection
        self.transport.loseConnection = lambda: (events.append("lose"), original_lose())  # type: ignore[method-assign]

        def answer(conn: NSQConnection, msg: Message) -> None:
            msg.finish()

        self.delegate.on_message = answer  # type: ignore[method-assign]
        self.closing()
        events.clear()
        # The message is answered during the read; CLOSE_WAIT then closes.
        self.conn.dataReceived(message() + CLOSE_WAIT)
        self.assertEqual(events, [b"FIN " + MSG_ID + b"\n", "lose"])

    def test_drain_bounded(self) -> None:
        """An unanswered message holds the close for at most nsqd's msg_timeout."""
        self.subscribed()
        self.conn.dataReceived(message())
        self.closing()
        self.conn.dataReceived(CLOSE_WAIT)
        self.clock.advance(59.9)
        self.assertFalse(self.transport.disconnecting)
        self.clock.advance(0.1)
        self.assertTrue(self.transport.disconnecting)

    def test_close_wait_bounded(self) -> None:
        """No CLOSE_WAIT within close_timeout: closed regardless."""
        self.subscribed()
        self.closing()
        self.clock.advance(0.99)
        self.assertFalse(self.transport.disconnecting)
        self.clock.advance(0.01)
        self.assertTrue(self.transport.disconnecting)

    def test_tls_abort(self) -> None:
        """A TLS connection whose server never answers close_notify is aborted."""
        self.make_ready()
        self.conn.tls = True
        aborted: List[bool] = []
        self.transport.abortConnection = lambda: aborted.append(True)  # type: ignore[method-assign]
        self.closing()
        self.clock.advance(1.0)
        self.assertEqual(aborted, [True])

    def test_twice(self) -> None:
        """close twice: both fire on the one connectionLost; after it, close fires at once."""
        self.make_ready()
        first = self.closing()
        second = self.closing()
        self.lose()
        self.assertEqual((first, second), ([None], [None]))
        self.assertEqual(self.closing(), [None])

    def test_while_connecting(self) -> None:
        """close during negotiation drops the connection; connect fails."""
        self.make()
        done = self.closing()
        self.assertTrue(self.transport.disconnecting)
        self.lose()
        self.assertEqual(done, [None])
        self.assertIsInstance(self.ready[0].value, NSQConnectionError)


# -- against nsqd's own protocol, in memory --------------------------------------


class Pump:
    """An NSQConnection joined to an NSQDProtocol by in-memory transports."""

    def __init__(self, clock: Clock, server: NSQDProtocol, client: NSQConnection) -> None:
        self.clock = clock
        self.server_end = TLSStringTransport(server, False, IPv4Address("TCP", "127.0.0.1", 50000), clock)
        self.client_end = TLSStringTransport(client, True, IPv4Address("TCP", "127.0.0.1", 4150), clock)
        server.makeConnection(self.server_end)
        client.makeConnection(self.client_end)
        self.pump()

    def pump(self) -> None:
        ends = ((self.server_end, self.client_end), (self.client_end, self.server_end))
        for _ in range(1000):
            self.clock.advance(0)
            moved = False
            for source, destination in ends:
                data = source.value()
                if data and not destination.lost:
                    source.clear()
                    destination.receive(data)
                    moved = True
            if not moved:
                break
        if self.server_end.disconnecting or self.client_end.disconnecting:
            self.server_end.lose()
            self.client_end.lose()


class InMemoryServerTests(SynchronousTestCase):
    """Every upgrade sequence against nsqd's protocol, then PUB/SUB/RDY/FIN."""

    def setUp(self) -> None:
        self.clock = Clock()
        self.clock.advance(1700000000)
        pki = shared_pki()
        options = NSQDOptions()
        directory = self.mktemp()
        options.tls_cert, options.tls_key = pki.server.write(directory, "server")
        self.broker = Broker(NSQDOptions(), self.clock, MemoryStorage())
        features = ServerFeatures(tls_options=tls_server_options(options), snappy=True, deflate=True)
        self.factory = NSQDFactory(self.broker, self.clock, features)

    def connect(self, **settings: Any) -> Tuple[NSQConnection, Recorder, Pump]:
        delegate = Recorder()
        if settings.get("tls_v1"):
            settings["tls_options"] = client_tls_options()
        conn = NSQConnection("127.0.0.1:4150", config(**settings), delegate, self.clock)
        ready: List[Any] = []
        conn.when_ready().addBoth(ready.append)
        pump = Pump(self.clock, self.factory.buildProtocol(None), conn)
        self.assertEqual(ready, [conn])
        return conn, delegate, pump

    def round_trip(self, **settings: Any) -> None:
        consumer, delegate, consumer_pump = self.connect(**settings)
        producer, _, producer_pump = self.connect(**settings)
        for conn in (consumer, producer):
            self.assertEqual(
                (conn.tls, conn.snappy, conn.deflate),
                (bool(settings.get("tls_v1")), bool(settings.get("snappy")), bool(settings.get("deflate"))),
            )
        subscribed: List[Any] = []
        consumer.subscribe("t", "c").addBoth(subscribed.append)
        consumer_pump.pump()
        self.assertEqual(subscribed, [None])
        consumer.send_rdy(10)
        consumer_pump.pump()
        published: List[Any] = []
        producer.publish("t", b"one").addBoth(published.append)
        producer.multi_publish("t", [b"two", b"x" * 70000]).addBoth(published.append)
        producer.deferred_publish("t", 0, b"four").addBoth(published.append)
        producer_pump.pump()
        self.assertEqual(published, [None, None, None])
        consumer_pump.pump()
        self.assertEqual([m.body for m in delegate.messages], [b"one", b"two", b"x" * 70000, b"four"])
        self.assertEqual(consumer.in_flight, 4)
        for msg in delegate.messages:
            msg.finish()
        consumer_pump.pump()
        channel = self.broker.get_topic("t").get_channel("c")
        self.assertEqual((channel.in_flight_count, channel.depth()), (0, 0))
        self.assertEqual(consumer.in_flight, 0)
        closed: List[Any] = []
        consumer.close().addBoth(closed.append)
        consumer_pump.pump()
        self.clock.advance(1)
        consumer_pump.pump()
        self.assertEqual(closed, [None])
        self.assertEqual(len(delegate.closed), 1)

    def test_plain(self) -> None:
        """No upgrade."""
        self.round_trip()

    def test_snappy(self) -> None:
        """Snappy."""
        self.round_trip(snappy=True)

    def test_deflate(self) -> None:
        """Deflate at level 1."""
        self.round_trip(deflate=True, deflate_level=1)

    def test_tls(self) -> None:
        """TLS."""
        self.round_trip(tls_v1=True)

    def test_tls_snappy(self) -> None:
        """TLS then snappy."""
        self.round_trip(tls_v1=True, snappy=True)

    def test_tls_deflate(self) -> None:
        """TLS then deflate."""
        self.round_trip(tls_v1=True, deflate=True)

    def test_heartbeats(self) -> None:
        """nsqd's heartbeats are answered: the connection outlives two heartbeat intervals."""
        conn, delegate, pump = self.connect(heartbeat_interval=1, read_timeout=3)
        for _ in range(10):
            self.clock.advance(1)
            pump.pump()
        self.assertTrue(conn.is_ready())
        self.assertEqual(delegate.closed, [])

    def test_bad_message_fatal(self) -> None:
        """nsqd's fatal E_BAD_MESSAGE fails the publish; the connection then closes."""
        self.broker.options.max_msg_size = 10
        conn, delegate, pump = self.connect()
        results: List[Any] = []
        conn.publish("t", b"x" * 11).addErrback(results.append)
        pump.pump()
        self.assertEqual(results[0].value.code, "E_BAD_MESSAGE")
        self.assertEqual(len(delegate.closed), 1)


class ConnectTests(SynchronousTestCase):
    """connect(): the endpoint, the dial timeout, and what it fires with."""

    def setUp(self) -> None:
        self.reactor = MemoryReactorClock()
        self.results: List[Any] = []

    def start(self, address: str = "127.0.0.1:4150", **settings: Any) -> "Deferred[NSQConnection]":
        attempt = connect(self.reactor, address, config(**settings), Recorder())
        attempt.addBoth(self.results.append)
        return attempt

    def accept(self) -> Tuple[NSQConnection, StringTransport]:
        factory = self.reactor.tcpClients[0][2]
        protocol = factory.buildProtocol(IPv4Address("TCP", "127.0.0.1", 4150))
        transport = StringTransport()
        protocol.makeConnection(transport)
        return protocol, transport

    def test_dial(self) -> None:
        """An IP literal is dialled directly with dial_timeout."""
        self.start(dial_timeout=3.5)
        host, port, _, timeout, _ = self.reactor.tcpClients[0]
        self.assertEqual((host, port, timeout), ("127.0.0.1", 4150, 3.5))

    def test_fires_when_ready(self) -> None:
        """connect fires with the connection once IDENTIFY is answered, not before."""
        self.start()
        protocol, transport = self.accept()
        self.assertEqual(self.results, [])
        self.assertTrue(transport.value().startswith(b"  V2IDENTIFY\n"))
        protocol.dataReceived(response(REPLY))
        [conn] = self.results
        self.assertIsInstance(conn, NSQConnection)
        self.assertEqual(conn.address, "127.0.0.1:4150")

    def test_refused(self) -> None:
        """A refused connection fails with NSQConnectionError naming the address."""
        self.start()
        connector = self.reactor.connectors[0]
        self.reactor.tcpClients[0][2].clientConnectionFailed(connector, Failure(ConnectionRefusedError()))
        [failure] = self.results
        self.assertIsInstance(failure.value, NSQConnectionError)
        self.assertIn("127.0.0.1:4150", str(failure.value))

    def test_cancel_while_negotiating(self) -> None:
        """Cancelling during negotiation aborts the connection."""
        attempt = self.start()
        protocol, transport = self.accept()
        attempt.cancel()
        self.assertTrue(transport.disconnecting)
        protocol.connectionLost(Failure(ConnectionDone()))
        self.assertTrue(self.results[0].check(CancelledError))

    def test_bad_address(self) -> None:
        """A malformed address is refused at once."""
        self.assertRaises(ValueError, connect, self.reactor, "no-port", config())

