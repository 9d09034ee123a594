"""
Tests for txnsq.nsqd.tcp: the V2 protocol adapter, driven byte for byte
through StringTransport with time from task.Clock.
"""

from __future__ import annotations

import errno
import json
import os
import struct
from typing import Any, List, Optional, Tuple

from twisted.internet.address import IPv4Address
from twisted.internet.defer import Deferred
from twisted.internet.task import Clock
from twisted.internet.testing import StringTransport
from twisted.trial.unittest import SynchronousTestCase

from txnsq.version import NSQ_VERSION
from txnsq.nsqd.broker import Broker
from txnsq.nsqd.options import NSQDOptions
from txnsq.nsqd.tcp import NSQDFactory, NSQDProtocol, ServerFeatures
from txnsq.protocol.auth import Authorization, AuthState
from txnsq.protocol.frames import FrameParser
from txnsq.protocol.message import decode_message
from txnsq.protocol.v2 import V2CommandParser
from txnsq.storage.disk import DiskStorage
from txnsq.storage.memory import MemoryStorage

RESPONSE, ERROR, MESSAGE = 0, 1, 2


def frame(frame_type: int, data: bytes) -> bytes:
    """Encode one V2 frame independently of the code under test."""
    return struct.pack(">ii", len(data) + 4, frame_type) + data


OK = frame(RESPONSE, b"OK")


def identify(**fields: object) -> bytes:
    """An IDENTIFY command with a JSON body."""
    body = json.dumps(fields).encode()
    return b"IDENTIFY\n" + struct.pack(">i", len(body)) + body


def pub(topic: bytes, body: bytes) -> bytes:
    """A PUB command."""
    return b"PUB " + topic + b"\n" + struct.pack(">i", len(body)) + body


def mpub(topic: bytes, bodies: List[bytes]) -> bytes:
    """An MPUB command."""
    payload = struct.pack(">i", len(bodies)) + b"".join(
        struct.pack(">i", len(b)) + b for b in bodies
    )
    return b"MPUB " + topic + b"\n" + struct.pack(">i", len(payload)) + payload


class Client:
    """One client connection to the protocol under test."""

    def __init__(self, factory: NSQDFactory, port: int) -> None:
        self.transport = StringTransport(
            peerAddress=IPv4Address("TCP", "127.0.0.1", port)
        )
        self.protocol = factory.buildProtocol(self.transport.getPeer())
        self.protocol.makeConnection(self.transport)
        self.parser = FrameParser()
        self._unread = b""

    def send(self, data: bytes) -> None:
        """Deliver bytes from the client to the server."""
        self.protocol.dataReceived(data)

    def raw(self) -> bytes:
        """The bytes written to the client since the last call."""
        data = self._unread + self.transport.value()
        self._unread = b""
        self.transport.clear()
        return data

    def take_frame(self) -> Tuple[int, bytes]:
        """
        The first frame written since the last call, alone: the bytes after
        it (compressed, say, after an upgrade) are left for :meth:`raw`.
        """
        data = self.raw()
        end = 4 + struct.unpack(">i", data[:4])[0]
        self._unread = data[end:]
        [taken] = FrameParser().feed(data[:end])
        return taken

    def frames(self) -> List[Tuple[int, bytes]]:
        """The frames written to the client since the last call."""
        return list(self.parser.feed(self.raw()))

    @property
    def closed(self) -> bool:
        """Whether the server asked to close the connection."""
        return bool(self.transport.disconnecting)

    def lose(self) -> None:
        """The client goes away."""
        self.protocol.connectionLost(None)


class ProtocolTestCase(SynchronousTestCase):
    """Common set-up: a broker on a Clock with memory storage."""

    def setUp(self) -> None:
        self.clock = Clock()
        self.clock.advance(1700000000)
        self.options = NSQDOptions()
        self.make_broker()
        self._ports = 40000

    def make_broker(self, **overrides: object) -> None:
        """(Re)build the broker and factory with some options changed."""
        for name, value in overrides.items():
            setattr(self.options, name, value)
        self.broker = Broker(self.options, self.clock, MemoryStorage())
        self.factory = NSQDFactory(self.broker, self.clock)

    def connect(self, magic: bytes = b"  V2") -> Client:
        """A new client that has sent the magic."""
        self._ports += 1
        client = Client(self.factory, self._ports)
        if magic:
            client.send(magic)
        return client

    def subscribe(self, topic: bytes = b"t", channel: bytes = b"c", rdy: int = 1) -> Client:
        """A client subscribed to topic/channel with a ready count."""
        client = self.connect()
        client.send(b"SUB " + topic + b" " + channel + b"\n")
        self.assertEqual(client.raw(), OK)
        if rdy:
            client.send(b"RDY %d\n" % (rdy,))
        return client

    def publish(self, topic: bytes, body: bytes) -> None:
        """Publish from a fresh producer connection."""
        producer = self.connect()
        producer.send(pub(topic, body))
        self.assertEqual(producer.raw(), OK)

    def messages(self, client: Client) -> List[Tuple[int, int, bytes, bytes]]:
        """Decode every message frame the client received."""
        out = []
        for frame_type, data in client.frames():
            self.assertEqual(frame_type, MESSAGE, data)
            out.append(decode_message(data))
        return out


class MagicTests(ProtocolTestCase):
    """The four-byte protocol magic."""

    def test_wrong_magic(self) -> None:
        """A magic other than '  V2' gets a bare E_BAD_PROTOCOL frame and a close."""
        client = self.connect(b"  V1")
        self.assertEqual(client.raw(), frame(ERROR, b"E_BAD_PROTOCOL"))
        self.assertTrue(client.closed)

    def test_magic_in_pieces(self) -> None:
        """The magic and the first command may arrive split across reads."""
        client = self.connect(b"")
        for byte in b"  V2NO":
            client.send(bytes([byte]))
        client.send(b"P\nSUB t c\n")
        self.assertEqual(client.raw(), OK)
        self.assertFalse(client.closed)

    def test_silence_after_magic(self) -> None:
        """After a valid magic the server sends nothing until a command arrives."""
        client = self.connect()
        self.assertEqual(client.raw(), b"")


class IdentifyTests(ProtocolTestCase):
    """IDENTIFY and feature negotiation."""

    def test_without_negotiation(self) -> None:
        """IDENTIFY without feature_negotiation answers a plain OK."""
        client = self.connect()
        client.send(identify(client_id="x", hostname="h"))
        self.assertEqual(client.raw(), OK)

    def test_negotiation_reply(self) -> None:
        """With feature_negotiation the reply is Go's JSON with every key, in order."""
        client = self.connect()
        client.send(identify(feature_negotiation=True, msg_timeout=5000))
        [(frame_type, data)] = client.frames()
        self.assertEqual(frame_type, RESPONSE)
        reply = json.loads(data)
        self.assertEqual(
            list(reply),
            [
                "max_rdy_count", "version", "max_msg_timeout", "msg_timeout",
                "tls_v1", "deflate", "deflate_level", "max_deflate_level",
                "snappy", "sample_rate", "auth_required", "output_buffer_size",
                "output_buffer_timeout",
            ],
        )
        self.assertEqual(reply["version"], NSQ_VERSION)
        self.assertEqual(reply["msg_timeout"], 5000)
        self.assertEqual(reply["max_rdy_count"], 2500)
        # Nothing is promised that the server cannot yet do.
        self.assertFalse(reply["tls_v1"] or reply["snappy"] or reply["deflate"])

    def test_after_sub(self) -> None:
        """IDENTIFY after SUB is fatal."""
        client = self.subscribe(rdy=0)
        client.send(identify(client_id="x"))
        self.assertEqual(
            client.raw(), frame(ERROR, b"E_INVALID cannot IDENTIFY in current state")
        )
        self.assertTrue(client.closed)

    def test_bad_heartbeat(self) -> None:
        """An out-of-range heartbeat interval is refused with Go's text, fatal."""
        client = self.connect()
        client.send(identify(heartbeat_interval=100))
        self.assertEqual(
            client.raw(),
            frame(ERROR, b"E_BAD_BODY IDENTIFY heartbeat interval (100) is invalid"),
        )
        self.assertTrue(client.closed)

    def test_heartbeats_disabled_then_sub(self) -> None:
        """With heartbeats disabled, SUB is refused."""
        client = self.connect()
        client.send(identify(heartbeat_interval=-1))
        self.assertEqual(client.raw(), OK)
        client.send(b"SUB t c\n")
        self.assertEqual(
            client.raw(), frame(ERROR, b"E_INVALID cannot SUB with heartbeats disabled")
        )


class HeartbeatTests(ProtocolTestCase):
    """Heartbeats and the read deadline."""

    def test_heartbeat_at_interval(self) -> None:
        """A _heartbeat_ response frame is written every negotiated interval."""
        client = self.connect()
        client.send(identify(heartbeat_interval=1000))
        client.raw()
        self.clock.advance(0.999)
        self.assertEqual(client.raw(), b"")
        self.clock.advance(0.001)
        self.assertEqual(client.raw(), frame(RESPONSE, b"_heartbeat_"))
        client.send(b"NOP\n")
        self.clock.advance(1)
        self.assertEqual(client.raw(), frame(RESPONSE, b"_heartbeat_"))
        self.assertFalse(client.closed)

    def test_silent_client_closed(self) -> None:
        """A client that sends nothing for two intervals is disconnected."""
        client = self.connect()
        client.send(identify(heartbeat_interval=1000))
        self.clock.advance(1.5)
        client.send(b"NOP\n")
        self.clock.advance(1.9)
        self.assertFalse(client.closed)
        self.clock.advance(0.2)
        self.assertTrue(client.closed)

    def test_default_interval(self) -> None:
        """Without IDENTIFY, heartbeats come every half --client-timeout (30 s)."""
        client = self.connect()
        self.clock.advance(29.9)
        self.assertEqual(client.raw(), b"")
        self.clock.advance(0.1)
        self.assertEqual(client.raw(), frame(RESPONSE, b"_heartbeat_"))

    def test_timers_stop_on_close(self) -> None:
        """No timer is left behind by a closed connection."""
        client = self.connect()
        client.send(identify(heartbeat_interval=1000))
        client.lose()
        self.assertEqual(self.clock.getDelayedCalls(), [])


class PublishTests(ProtocolTestCase):
    """PUB, MPUB and DPUB."""

    def test_pub_delivered(self) -> None:
        """A PUB is answered OK and delivered as a message frame with attempts 1."""
        consumer = self.subscribe()
        self.publish(b"t", b"hello")
        [(timestamp, attempts, msg_id, body)] = self.messages(consumer)
        self.assertEqual((attempts, body), (1, b"hello"))
        self.assertEqual(timestamp, int(self.clock.seconds() * 1e9))
        self.assertEqual(len(msg_id), 16)
        int(msg_id, 16)

    def test_pub_bad_topic(self) -> None:
        """PUB with an invalid topic name is fatal."""
        client = self.connect()
        client.send(pub(b"bad!topic", b"x"))
        self.assertEqual(
            client.raw(),
            frame(ERROR, b'E_BAD_TOPIC PUB topic name "bad!topic" is not valid'),
        )
        self.assertTrue(client.closed)

    def test_pub_too_big(self) -> None:
        """A body over --max-msg-size is refused before it is read."""
        self.make_broker(max_msg_size=100)
        client = self.connect()
        client.send(b"PUB t\n" + struct.pack(">i", 101))
        self.assertEqual(
            client.raw(), frame(ERROR, b"E_BAD_MESSAGE PUB message too big 101 > 100")
        )

    def test_mpub_order(self) -> None:
        """MPUB is one OK, and its messages arrive in order with distinct ids."""
        consumer = self.subscribe(rdy=10)
        producer = self.connect()
        producer.send(mpub(b"t", [b"one", b"two", b"three"]))
        self.assertEqual(producer.raw(), OK)
        messages = self.messages(consumer)
        self.assertEqual([m[3] for m in messages], [b"one", b"two", b"three"])
        self.assertEqual(len({m[2] for m in messages}), 3)

    def test_dpub_deferred(self) -> None:
        """DPUB holds the message for its defer time."""
        consumer = self.subscribe()
        producer = self.connect()
        producer.send(b"DPUB t 1000\n" + struct.pack(">i", 5) + b"later")
        self.assertEqual(producer.raw(), OK)
        self.clock.advance(0.999)
        self.assertEqual(consumer.raw(), b"")
        self.clock.advance(0.001)
        [(_, attempts, _, body)] = self.messages(consumer)
        self.assertEqual((attempts, body), (1, b"later"))

    def test_pipelined(self) -> None:
        """Several commands in one write are answered in order."""
        client = self.connect()
        client.send(pub(b"t", b"a") + b"NOP\n" + pub(b"t", b"b") + b"FOO\n")
        self.assertEqual(
            client.raw(), OK + OK + frame(ERROR, b"E_INVALID invalid command FOO")
        )
        self.assertEqual(self.broker.find_topic("t").depth(), 2)

    def test_pub_run_answered_in_order(self) -> None:
        """PUBs to several topics in one read, between other commands, are answered in order."""
        client = self.connect()
        client.send(
            pub(b"t", b"a") + pub(b"t", b"b") + pub(b"u", b"c") + pub(b"t", b"d")
            + b"NOP\n" + pub(b"t", b"e") + b"FOO\n" + pub(b"t", b"f")
        )
        # FOO is fatal (as in Go): the PUB after it is not run.
        self.assertEqual(
            client.raw(), OK * 4 + OK + frame(ERROR, b"E_INVALID invalid command FOO")
        )
        self.assertEqual(self.broker.find_topic("t").depth(), 4)
        self.assertEqual(self.broker.find_topic("u").depth(), 1)

    def test_pub_run_before_sub(self) -> None:
        """PUBs read together with a later SUB are published before the channel exists."""
        client = self.connect()
        client.send(pub(b"t", b"a") + pub(b"t", b"b") + b"SUB t c\nRDY 5\n")
        frames = client.frames()
        self.assertEqual(frames[:3], [(RESPONSE, b"OK")] * 3)
        self.assertEqual([decode_message(data)[3] for _, data in frames[3:]], [b"a", b"b"])

    def test_pub_run_queue_full(self) -> None:
        """
        When the queue fills during a run of PUBs, the PUBs that fit are
        answered OK, the next gets E_PUB_FAILED (fatal) and none after it
        is published, as PUB by PUB.
        """
        self.make_broker(mem_queue_size=2)
        self.subscribe(rdy=0)
        client = self.connect()
        client.send(pub(b"t", b"a") + pub(b"t", b"b") + pub(b"t", b"c") + pub(b"t", b"d"))
        frames = client.frames()
        self.assertEqual(frames[:2], [(RESPONSE, b"OK")] * 2)
        self.assertEqual(frames[2][0], ERROR)
        self.assertTrue(frames[2][1].startswith(b"E_PUB_FAILED PUB failed"), frames[2])
        self.assertEqual(len(frames), 3)
        self.assertTrue(client.closed)
        self.assertEqual(self.broker.find_topic("t").message_count, 2)
        self.assertEqual(client.protocol.pub_counts, {"t": 2})

    def test_pub_split_into_bytes(self) -> None:
        """A PUB that arrives one byte at a time is still one message."""
        client = self.connect()
        for byte in pub(b"t", b"hello"):
            client.send(bytes([byte]))
        self.assertEqual(client.raw(), OK)
        self.assertEqual(self.broker.find_topic("t").depth(), 1)


class ConsumeTests(ProtocolTestCase):
    """RDY, FIN, REQ, TOUCH, CLS and message timeouts."""

    def test_rdy_before_sub(self) -> None:
        """RDY before SUB is fatal."""
        client = self.connect()
        client.send(b"RDY 1\n")
        self.assertEqual(
            client.raw(), frame(ERROR, b"E_INVALID cannot RDY in current state")
        )
        self.assertTrue(client.closed)

    def test_rdy_above_max(self) -> None:
        """RDY above --max-rdy-count is fatal with the limit in the text."""
        client = self.subscribe(rdy=0)
        client.send(b"RDY 2501\n")
        self.assertEqual(
            client.raw(), frame(ERROR, b"E_INVALID RDY count 2501 out of range 0-2500")
        )

    def test_rdy_limits_in_flight(self) -> None:
        """A consumer never has more messages in flight than its RDY count."""
        consumer = self.subscribe(rdy=2)
        for body in (b"1", b"2", b"3"):
            self.publish(b"t", body)
        messages = self.messages(consumer)
        self.assertEqual([m[3] for m in messages], [b"1", b"2"])
        consumer.send(b"FIN " + messages[0][2] + b"\n")
        self.assertEqual([m[3] for m in self.messages(consumer)], [b"3"])

    def test_fin_unknown_is_not_fatal(self) -> None:
        """FIN of an unknown id is E_FIN_FAILED and the connection stays usable."""
        client = self.subscribe(rdy=0)
        client.send(b"FIN 0123456789abcdef\n")
        self.assertEqual(
            client.raw(),
            frame(ERROR, b"E_FIN_FAILED FIN 0123456789abcdef failed ID not in flight"),
        )
        self.assertFalse(client.closed)
        client.send(b"NOP\n" + pub(b"t", b"x"))
        self.assertEqual(client.raw(), OK)

    def test_commands_after_a_failed_fin_in_the_same_read(self) -> None:
        """Commands that follow a failed FIN in the same read still run, as in Go."""
        client = self.subscribe(rdy=0)
        client.send(b"FIN 0123456789abcdef\n" + pub(b"t", b"x") + b"FIN 0123456789abcdeg\n" + pub(b"t", b"y"))
        self.assertEqual(
            client.raw(),
            frame(ERROR, b"E_FIN_FAILED FIN 0123456789abcdef failed ID not in flight")
            + OK
            + frame(ERROR, b"E_FIN_FAILED FIN 0123456789abcdeg failed ID not in flight")
            + OK,
        )
        self.assertFalse(client.closed)

    def test_fin_other_consumers_message(self) -> None:
        """FIN of a message in flight to another consumer fails."""
        first = self.subscribe()
        second = self.subscribe(rdy=0)
        self.publish(b"t", b"x")
        [(_, _, msg_id, _)] = self.messages(first)
        second.send(b"FIN " + msg_id + b"\n")
        self.assertEqual(
            second.raw(),
            frame(
                ERROR,
                b"E_FIN_FAILED FIN " + msg_id + b" failed client does not own message",
            ),
        )

    def test_fin_invalid_id(self) -> None:
        """FIN with an id that is not 16 bytes is fatal."""
        client = self.subscribe(rdy=0)
        client.send(b"FIN 123\n")
        self.assertEqual(client.raw(), frame(ERROR, b"E_INVALID invalid message ID"))
        self.assertTrue(client.closed)

    def test_fin_stops_redelivery(self) -> None:
        """A finished message is never delivered again."""
        consumer = self.subscribe()
        self.publish(b"t", b"x")
        [(_, _, msg_id, _)] = self.messages(consumer)
        consumer.send(b"FIN " + msg_id + b"\n")
        # Past the 60 s msg_timeout, but inside the 60 s read deadline.
        self.clock.advance(59)
        consumer.send(b"NOP\n")
        self.clock.advance(30)
        self.assertEqual(
            consumer.frames(), [(RESPONSE, b"_heartbeat_")] * 2
        )

    def test_req_zero_redelivers(self) -> None:
        """REQ with timeout 0 brings the same message back with attempts 2."""
        consumer = self.subscribe()
        self.publish(b"t", b"x")
        [(_, _, msg_id, _)] = self.messages(consumer)
        consumer.send(b"REQ " + msg_id + b" 0\n")
        [(_, attempts, again, body)] = self.messages(consumer)
        self.assertEqual((attempts, again, body), (2, msg_id, b"x"))

    def test_req_delay(self) -> None:
        """REQ with a delay holds the message for that long."""
        consumer = self.subscribe()
        self.publish(b"t", b"x")
        [(_, _, msg_id, _)] = self.messages(consumer)
        consumer.send(b"REQ " + msg_id + b" 2000\n")
        self.clock.advance(1.9)
        self.assertEqual(consumer.raw(), b"")
        self.clock.advance(0.1)
        [(_, attempts, _, _)] = self.messages(consumer)
        self.assertEqual(attempts, 2)

    def test_req_unknown_not_fatal(self) -> None:
        """REQ of an unknown id is E_REQ_FAILED, not fatal."""
        client = self.subscribe(rdy=0)
        client.send(b"REQ 0123456789abcdef 0\n")
        self.assertEqual(
            client.raw(),
            frame(ERROR, b"E_REQ_FAILED REQ 0123456789abcdef failed ID not in flight"),
        )
        self.assertFalse(client.closed)

    def test_msg_timeout_redelivers(self) -> None:
        """A message not finished within msg_timeout comes back with attempts 2."""
        consumer = self.connect()
        consumer.send(identify(msg_timeout=1000))
        consumer.send(b"SUB t c\nRDY 1\n")
        self.assertEqual(consumer.raw(), OK + OK)
        self.publish(b"t", b"x")
        [(_, _, msg_id, _)] = self.messages(consumer)
        self.clock.advance(1.0)
        [(_, attempts, again, _)] = self.messages(consumer)
        self.assertEqual((attempts, again), (2, msg_id))

    def test_touch_extends(self) -> None:
        """TOUCH gives an in-flight message a fresh msg_timeout."""
        consumer = self.connect()
        consumer.send(identify(msg_timeout=1000))
        consumer.send(b"SUB t c\nRDY 1\n")
        consumer.raw()
        self.publish(b"t", b"x")
        [(_, _, msg_id, _)] = self.messages(consumer)
        self.clock.advance(0.8)
        consumer.send(b"TOUCH " + msg_id + b"\n")
        self.clock.advance(0.8)
        self.assertEqual(consumer.raw(), b"")
        self.clock.advance(0.2)
        [(_, attempts, _, _)] = self.messages(consumer)
        self.assertEqual(attempts, 2)

    def test_cls(self) -> None:
        """CLS answers CLOSE_WAIT, keeps the connection, and later RDY is ignored."""
        consumer = self.subscribe(rdy=0)
        consumer.send(b"CLS\n")
        self.assertEqual(consumer.raw(), frame(RESPONSE, b"CLOSE_WAIT"))
        consumer.send(b"RDY 5\n")
        self.publish(b"t", b"x")
        self.assertEqual(consumer.raw(), b"")
        self.assertFalse(consumer.closed)

    def test_cls_twice(self) -> None:
        """A second CLS is fatal."""
        consumer = self.subscribe(rdy=0)
        consumer.send(b"CLS\nCLS\n")
        self.assertEqual(
            consumer.raw(),
            frame(RESPONSE, b"CLOSE_WAIT")
            + frame(ERROR, b"E_INVALID cannot CLS in current state"),
        )
        self.assertTrue(consumer.closed)

    def test_disconnect_requeues_in_flight(self) -> None:
        """Messages in flight to a client that goes away go to another consumer."""
        first = self.subscribe()
        second = self.subscribe(rdy=0)
        self.publish(b"t", b"x")
        [(_, _, msg_id, _)] = self.messages(first)
        first.lose()
        second.send(b"RDY 1\n")
        [(_, attempts, again, _)] = self.messages(second)
        self.assertEqual((again, attempts), (msg_id, 2))

    def test_spread_across_consumers(self) -> None:
        """A channel spreads its messages over its ready consumers."""
        consumers = [self.subscribe(rdy=100) for _ in range(3)]
        for i in range(30):
            self.publish(b"t", b"%d" % (i,))
        counts = [len(self.messages(c)) for c in consumers]
        self.assertEqual(sum(counts), 30)
        self.assertEqual(counts, [10, 10, 10])

    def test_channels_each_get_a_copy(self) -> None:
        """Every channel of a topic gets every message."""
        first = self.subscribe(channel=b"a")
        second = self.subscribe(channel=b"b")
        self.publish(b"t", b"x")
        self.assertEqual(self.messages(first)[0][3], b"x")
        self.assertEqual(self.messages(second)[0][3], b"x")


class BadInputTests(ProtocolTestCase):
    """Bad input affects only the connection that sent it."""

    def test_garbage_closes_only_sender(self) -> None:
        """A garbage command closes its own connection; others carry on."""
        consumer = self.subscribe()
        bad = self.connect()
        bad.send(b"\x00\xff garbage\n")
        self.assertTrue(bad.closed)
        self.assertEqual(bad.frames()[0][0], ERROR)
        self.publish(b"t", b"still working")
        self.assertEqual(self.messages(consumer)[0][3], b"still working")

    def test_long_line_closes_silently(self) -> None:
        """A line longer than Go's 16 KiB buffer closes the connection with no frame."""
        client = self.connect()
        client.send(b"A" * 17000)
        self.assertEqual(client.raw(), b"")
        self.assertTrue(client.closed)

    def test_nothing_after_fatal(self) -> None:
        """After a fatal error, further bytes on that connection are ignored."""
        client = self.connect()
        client.send(b"FOO\n" + pub(b"t", b"x"))
        client.send(pub(b"t", b"y"))
        self.assertEqual(client.raw(), frame(ERROR, b"E_INVALID invalid command FOO"))
        self.assertIsNone(self.broker.find_topic("t"))

    def test_sub_max_channel_consumers(self) -> None:
        """Past --max-channel-consumers, SUB fails fatally with Go's text."""
        self.make_broker(max_channel_consumers=1)
        self.subscribe(rdy=0)
        second = self.connect()
        second.send(b"SUB t c\n")
        self.assertEqual(
            second.raw(),
            frame(ERROR, b"E_SUB_FAILED SUB failed consumers for t:c exceeds limit of 1"),
        )
        self.assertTrue(second.closed)

    def test_auth_disabled(self) -> None:
        """AUTH on a server without auth is E_AUTH_DISABLED, fatal."""
        client = self.connect()
        client.send(b"AUTH\n" + struct.pack(">i", 6) + b"secret")
        self.assertEqual(client.raw(), frame(ERROR, b"E_AUTH_DISABLED AUTH disabled"))
        self.assertTrue(client.closed)


class FactoryTests(ProtocolTestCase):
    """The factory's view of its clients."""

    def test_clients_tracked(self) -> None:
        """Connected clients are tracked and forgotten when they go."""
        client = self.connect()
        self.assertIn(client.protocol, self.factory.clients)
        client.lose()
        self.assertNotIn(client.protocol, self.factory.clients)

    def test_close_all(self) -> None:
        """close_all asks every client connection to close."""
        clients = [self.connect() for _ in range(3)]
        self.factory.close_all()
        self.assertTrue(all(c.closed for c in clients))

    def test_protocol_type(self) -> None:
        """The factory builds NSQDProtocol instances bound to it."""
        client = self.connect()
        self.assertIsInstance(client.protocol, NSQDProtocol)
        self.assertIs(client.protocol.factory, self.factory)


class CheckOrderTests(ProtocolTestCase):
    """Each command makes Go's checks in Go's order: state before parameters."""

    def test_fin_without_id_before_sub(self) -> None:
        """FIN without an id before SUB is the state error, not the missing id."""
        client = self.connect()
        client.send(b"FIN\n")
        self.assertEqual(client.raw(), frame(ERROR, b"E_INVALID cannot FIN in current state"))
        self.assertTrue(client.closed)

    def test_fin_bad_id_before_sub(self) -> None:
        """FIN with a short id before SUB is the state error."""
        client = self.connect()
        client.send(b"FIN 123\n")
        self.assertEqual(client.raw(), frame(ERROR, b"E_INVALID cannot FIN in current state"))

    def test_fin_without_id_after_cls(self) -> None:
        """After CLS (state closing) FIN is allowed: without an id it is the parameter error."""
        client = self.subscribe(rdy=0)
        client.send(b"CLS\n")
        client.raw()
        client.send(b"FIN\n")
        self.assertEqual(client.raw(), frame(ERROR, b"E_INVALID FIN insufficient number of params"))
        self.assertTrue(client.closed)

    def test_req_touch_rdy_before_sub(self) -> None:
        """REQ, TOUCH and RDY with bad parameters before SUB are each the state error."""
        for line, verb in ((b"REQ\n", b"REQ"), (b"REQ 123 x\n", b"REQ"), (b"TOUCH\n", b"TOUCH"), (b"RDY x\n", b"RDY")):
            client = self.connect()
            client.send(line)
            self.assertEqual(client.raw(), frame(ERROR, b"E_INVALID cannot " + verb + b" in current state"), line)
            self.assertTrue(client.closed)

    def test_sub_bad_params_after_sub(self) -> None:
        """A second SUB with bad parameters is the state error."""
        client = self.subscribe(rdy=0)
        client.send(b"SUB bad! c\n")
        self.assertEqual(client.raw(), frame(ERROR, b"E_INVALID cannot SUB in current state"))

    def test_rdy_bad_count_after_cls(self) -> None:
        """After CLS, RDY is ignored before its count is parsed."""
        client = self.subscribe(rdy=0)
        client.send(b"CLS\nRDY x\nRDY 99999\n")
        self.assertEqual(client.raw(), frame(RESPONSE, b"CLOSE_WAIT"))
        self.assertFalse(client.closed)

    def test_identify_line_after_sub(self) -> None:
        """IDENTIFY after SUB is refused when its line arrives, before the size."""
        client = self.subscribe(rdy=0)
        client.send(b"IDENTIFY\n")
        self.assertEqual(client.raw(), frame(ERROR, b"E_INVALID cannot IDENTIFY in current state"))

    def test_auth_params_after_sub(self) -> None:
        """AUTH with a parameter after SUB (AUTH disabled) is the state error, not the parameter error."""
        client = self.subscribe(rdy=0)
        client.send(b"AUTH x\n")
        self.assertEqual(client.raw(), frame(ERROR, b"E_INVALID cannot AUTH in current state"))
        self.assertTrue(client.closed)

    def test_auth_params_before_sub(self) -> None:
        """AUTH with a parameter before SUB is the parameter error at once, without a body."""
        client = self.connect()
        client.send(b"AUTH x\n")
        self.assertEqual(client.raw(), frame(ERROR, b"E_INVALID AUTH invalid number of parameters"))

    def test_mpub_topic_made_before_body(self) -> None:
        """MPUB gets its topic before reading the body, as Go: a bad body leaves the topic."""
        client = self.connect()
        client.send(b"MPUB t\n")
        self.assertIsNotNone(self.broker.find_topic("t"))
        client.send(struct.pack(">i", 0))
        self.assertEqual(client.raw(), frame(ERROR, b"E_BAD_BODY MPUB invalid body size 0"))

    def test_mpub_topic_deleted_while_body_arrives(self) -> None:
        """An MPUB keeps the topic it got before its body: deleted meanwhile, the MPUB fails and the topic stays gone."""
        client = self.connect()
        whole = mpub(b"t", [b"a"])
        line = len(b"MPUB t\n")
        client.send(whole[:line])
        self.broker.delete_topic("t")
        client.send(whole[line:])
        self.assertEqual(client.raw(), frame(ERROR, b"E_MPUB_FAILED MPUB failed exiting"))
        self.assertTrue(client.closed)
        self.assertIsNone(self.broker.find_topic("t"))

    def test_pub_topic_made_after_body(self) -> None:
        """PUB gets its topic only after the body: a bad size leaves none."""
        client = self.connect()
        client.send(b"PUB t\n" + struct.pack(">i", 0))
        self.assertEqual(client.raw(), frame(ERROR, b"E_BAD_MESSAGE PUB invalid message body size 0"))
        self.assertIsNone(self.broker.find_topic("t"))


class CountingParser:
    """A V2CommandParser that counts the ids its FIN fast path took."""

    def __init__(self, parser: V2CommandParser) -> None:
        self.parser = parser
        self.fast: List[bytes] = []

    def next_fin_ids(self) -> List[bytes]:
        """The wrapped parser's, counted."""
        ids = self.parser.next_fin_ids()
        self.fast.extend(ids)
        return ids

    def __getattr__(self, name: str) -> Any:
        return getattr(self.parser, name)


class FinPathTests(ProtocolTestCase):
    """
    Plain ``FIN <id>\\n`` lines of a subscribed client take the parser's fast
    path (next_fin_ids); ``\\r\\n`` lines take the general one.  Both give the
    same replies, errors and counts.
    """

    def run_fins(self, lines: List[bytes], end: bytes, cls: bool = False) -> Tuple[bytes, bool, int, int, int]:
        """
        Subscribe, receive two messages, (CLS,) then send ``lines`` with
        ``end`` after each (``<1>``/``<2>`` stand for the two ids) in one read.

        :return: what came back, closed, finish count, in-flight count, and
            how many ids went through the fast path.
        """
        client = self.subscribe(rdy=2)
        self.publish(b"t", b"a")
        self.publish(b"t", b"b")
        first, second = self.messages(client)
        if cls:
            client.send(b"CLS\n")
            self.assertEqual(client.raw(), frame(RESPONSE, b"CLOSE_WAIT"))
        commands = client.protocol._commands
        parser = commands.parser = CountingParser(commands.parser)  # type: ignore[assignment]
        data = b"".join(
            line.replace(b"<1>", first[2]).replace(b"<2>", second[2]) + end for line in lines
        )
        client.send(data)
        channel = self.broker.get_topic("t").get_channel("c")
        result = (client.raw(), client.closed, client.protocol.finish_count, channel.in_flight_count, len(parser.fast))
        client.lose()
        self.make_broker()
        return result

    def assertSamePaths(self, lines: List[bytes], cls: bool = False) -> Tuple[bytes, bool, int, int]:
        """The fast and general paths give the same result for ``lines``; return it."""
        fast = self.run_fins(lines, b"\n", cls)
        general = self.run_fins(lines, b"\r\n", cls)
        self.assertEqual(general[4], 0)
        self.assertEqual(fast[:4], general[:4])
        return fast[:4]

    def test_unknown_id_in_a_run(self) -> None:
        """An unknown id among good ones: E_FIN_FAILED, not fatal, the others count, on both paths."""
        result = self.assertSamePaths([b"FIN <1>", b"FIN 0123456789abcdef", b"FIN <2>"])
        self.assertEqual(
            result,
            (frame(ERROR, b"E_FIN_FAILED FIN 0123456789abcdef failed ID not in flight"), False, 2, 0),
        )
        self.assertEqual(self.run_fins([b"FIN <1>", b"FIN 0123456789abcdef", b"FIN <2>"], b"\n")[4], 3)

    def test_missing_id_in_a_run(self) -> None:
        """A FIN without an id after a good one: the fatal parameter error; what follows is not run."""
        result = self.assertSamePaths([b"FIN <1>", b"FIN", b"FIN <2>"])
        self.assertEqual(result, (frame(ERROR, b"E_INVALID FIN insufficient number of params"), True, 1, 1))

    def test_short_id_in_a_run(self) -> None:
        """A FIN with a short id after a good one: the fatal id error."""
        result = self.assertSamePaths([b"FIN <1>", b"FIN 1234", b"FIN <2>"])
        self.assertEqual(result, (frame(ERROR, b"E_INVALID invalid message ID"), True, 1, 1))

    def test_after_cls(self) -> None:
        """After CLS both paths still finish, and fail the same way."""
        result = self.assertSamePaths([b"FIN <1>", b"FIN 0123456789abcdef", b"FIN <2>", b"FIN"], cls=True)
        self.assertEqual(
            result,
            (
                frame(ERROR, b"E_FIN_FAILED FIN 0123456789abcdef failed ID not in flight")
                + frame(ERROR, b"E_INVALID FIN insufficient number of params"),
                True,
                2,
                0,
            ),
        )

    def test_before_sub_same_error(self) -> None:
        """Before SUB every FIN form, with either ending, is the same state error."""
        for line in (b"FIN", b"FIN 0123456789abcdef", b"FIN 1234", b"FIN a b"):
            for end in (b"\n", b"\r\n"):
                client = self.connect()
                client.send(line + end + b"FIN 0123456789abcdef\n")
                self.assertEqual(client.raw(), frame(ERROR, b"E_INVALID cannot FIN in current state"), line + end)
                self.assertTrue(client.closed)

    def test_sub_in_the_same_read(self) -> None:
        """A SUB and FINs in one read: the FINs after SUB are checked as a subscribed client's."""
        client = self.connect()
        client.send(b"SUB t c\nFIN 0123456789abcdef\nFIN\n")
        self.assertEqual(
            client.raw(),
            OK
            + frame(ERROR, b"E_FIN_FAILED FIN 0123456789abcdef failed ID not in flight")
            + frame(ERROR, b"E_INVALID FIN insufficient number of params"),
        )


class FakeAuthServer:
    """Stands for ``features.auth``: each query waits for the test to answer it."""

    def __init__(self) -> None:
        self.queries: List[Tuple[str, "Deferred[AuthState]"]] = []

    def query(self, remote_ip: str, tls: bool, secret: str, common_name: str) -> "Deferred[AuthState]":
        """Record a query; answer it with :meth:`answer`."""
        answer: "Deferred[AuthState]" = Deferred()
        self.queries.append((secret, answer))
        return answer

    def answer(self, clock: Clock, topic: str = "^t$", ttl: int = 3600) -> None:
        """Answer the oldest open query with publish/subscribe rights on ``topic``."""
        _, waiting = self.queries.pop(0)
        authorization = Authorization(topic, [".*"], ["publish", "subscribe"])
        waiting.callback(AuthState("worker", "", [authorization], clock.seconds() + ttl, ttl))


class AuthOrderTests(ProtocolTestCase):
    """With AUTH enabled, auth is checked where Go checks it for each command."""

    def setUp(self) -> None:
        super().setUp()
        self.authd = FakeAuthServer()
        self.factory = NSQDFactory(self.broker, self.clock, ServerFeatures(auth=self.authd))

    def authed(self, ttl: int = 3600) -> Client:
        """A client that sent AUTH and got its answer."""
        client = self.connect()
        client.send(b"AUTH\n" + struct.pack(">i", 1) + b"s")
        self.authd.answer(self.clock, ttl=ttl)
        self.clock.advance(0)
        self.assertEqual(client.frames()[0][0], RESPONSE)
        return client

    def test_mpub_line_before_auth(self) -> None:
        """MPUB before AUTH is E_AUTH_FIRST as soon as its line arrives; no topic is made."""
        client = self.connect()
        client.send(b"MPUB t\n")
        self.assertEqual(client.raw(), frame(ERROR, b"E_AUTH_FIRST AUTH required before MPUB"))
        self.assertTrue(client.closed)
        self.assertIsNone(self.broker.find_topic("t"))

    def test_mpub_topic_before_auth(self) -> None:
        """MPUB's topic name is checked before auth."""
        client = self.connect()
        client.send(b"MPUB bad!\n")
        self.assertEqual(
            client.raw(), frame(ERROR, b'E_BAD_TOPIC E_BAD_TOPIC MPUB topic name "bad!" is not valid'))

    def test_mpub_denied_before_body(self) -> None:
        """MPUB to a topic without permission is E_UNAUTHORIZED, even with a bad size following."""
        client = self.authed()
        client.send(b"MPUB other\n" + struct.pack(">i", 0))
        self.assertEqual(client.raw(), frame(ERROR, b'E_UNAUTHORIZED AUTH failed for MPUB on "other" ""'))
        self.assertIsNone(self.broker.find_topic("other"))

    def test_mpub_allowed(self) -> None:
        """MPUB to an allowed topic is published."""
        client = self.authed()
        client.send(mpub(b"t", [b"a", b"b"]))
        self.assertEqual(client.raw(), OK)
        self.assertEqual(self.broker.get_topic("t").depth(), 2)

    def test_mpub_expired_asks_before_body(self) -> None:
        """With expired authorizations MPUB asks again before it reads the body, then reads it."""
        client = self.authed(ttl=1)
        self.clock.advance(2)
        client.send(b"MPUB t\n" + struct.pack(">i", 0))
        self.assertEqual((client.raw(), len(self.authd.queries)), (b"", 1))
        self.assertIsNone(self.broker.find_topic("t"))
        self.authd.answer(self.clock)
        self.clock.advance(0)
        self.assertEqual(client.raw(), frame(ERROR, b"E_BAD_BODY MPUB invalid body size 0"))
        self.assertIsNotNone(self.broker.find_topic("t"))

    def test_mpub_expired_denied(self) -> None:
        """Expired authorizations that come back without the topic: E_UNAUTHORIZED, the body unread."""
        client = self.authed(ttl=1)
        self.clock.advance(2)
        client.send(b"MPUB t\n" + struct.pack(">i", 0))
        self.authd.answer(self.clock, topic="^x$")
        self.clock.advance(0)
        self.assertEqual(client.raw(), frame(ERROR, b'E_UNAUTHORIZED AUTH failed for MPUB on "t" ""'))
        self.assertTrue(client.closed)

    def test_mpub_expired_body_after_answer(self) -> None:
        """An MPUB held for the auth server is published when its body arrives after the answer."""
        client = self.authed(ttl=1)
        self.clock.advance(2)
        whole = mpub(b"t", [b"a"])
        line = len(b"MPUB t\n")
        client.send(whole[:line])
        self.authd.answer(self.clock)
        client.send(whole[line:] + b"NOP\n")
        self.clock.advance(0)
        self.assertEqual(client.raw(), OK)
        self.assertEqual(self.broker.get_topic("t").depth(), 1)

    def test_pub_body_before_auth(self) -> None:
        """PUB before AUTH: the body is read (and its size checked) before auth."""
        client = self.connect()
        client.send(b"PUB t\n" + struct.pack(">i", 0))
        self.assertEqual(client.raw(), frame(ERROR, b"E_BAD_MESSAGE PUB invalid message body size 0"))
        client = self.connect()
        client.send(b"PUB t\n")
        self.assertEqual(client.raw(), b"")
        client.send(struct.pack(">i", 1) + b"x")
        self.assertEqual(client.raw(), frame(ERROR, b"E_AUTH_FIRST AUTH required before PUB"))

    def test_pub_expired_refreshed(self) -> None:
        """A PUB with expired authorizations waits for the auth server, then publishes."""
        client = self.authed(ttl=1)
        self.clock.advance(2)
        client.send(pub(b"t", b"x"))
        self.assertEqual(client.raw(), b"")
        self.authd.answer(self.clock)
        self.clock.advance(0)
        self.assertEqual(client.raw(), OK)

    def test_auth_params_after_sub(self) -> None:
        """With AUTH enabled, AUTH with a parameter after SUB is the state error."""
        client = self.authed()
        client.send(b"SUB t c\nAUTH x\n")
        self.assertEqual(client.raw(), OK + frame(ERROR, b"E_INVALID cannot AUTH in current state"))

    def test_fin_before_sub(self) -> None:
        """FIN has no auth check: before AUTH and SUB it is the state error."""
        client = self.connect()
        client.send(b"FIN\n")
        self.assertEqual(client.raw(), frame(ERROR, b"E_INVALID cannot FIN in current state"))


class ChannelDeletionTests(ProtocolTestCase):
    """What a consumer sees when its channel goes away."""

    def test_deleted_channel_disconnects(self) -> None:
        """Deleting a channel closes the connections of its consumers."""
        consumer = self.subscribe()
        self.broker.find_topic("t").delete_channel("c")
        self.assertTrue(consumer.closed)
        consumer.lose()
        self.assertEqual(self.clock.getDelayedCalls(), [])


class WriteBatchingTests(ProtocolTestCase):
    """What one read of commands makes goes out in one transport write."""

    def record_writes(self, client: Client) -> List[bytes]:
        """Every write to the client's transport, as it happens."""
        writes: List[bytes] = []
        original = client.transport.write

        def record(data: bytes) -> None:
            writes.append(data)
            original(data)

        client.transport.write = record  # type: ignore[method-assign]
        return writes

    def test_fins_in_one_read_one_write(self) -> None:
        """A read of 50 FINs is answered with the next 50 messages in a single write."""
        client = self.subscribe(rdy=50)
        producer = self.connect()
        producer.send(mpub(b"t", [b"%d" % (i,) for i in range(100)]))
        first = self.messages(client)
        self.assertEqual(len(first), 50)
        writes = self.record_writes(client)
        client.send(b"".join(b"FIN " + m[2] + b"\n" for m in first))
        self.assertEqual(len(writes), 1)
        self.assertEqual([m[3] for m in self.messages(client)], [b"%d" % (i,) for i in range(50, 100)])

    def test_fins_split_across_reads(self) -> None:
        """FINs cut anywhere across reads are all taken, each message once."""
        client = self.subscribe(rdy=3)
        producer = self.connect()
        producer.send(mpub(b"t", [b"%d" % (i,) for i in range(6)]))
        first = self.messages(client)
        data = b"".join(b"FIN " + m[2] + b"\n" for m in first)
        for cut in (1, 7, 21, 22, 40):
            client.send(data[:cut])
            data = data[cut:]
        client.send(data)
        self.assertEqual([m[3] for m in self.messages(client)], [b"3", b"4", b"5"])
        channel = self.broker.get_topic("t").get_channel("c")
        self.assertEqual((channel.in_flight_count, channel.depth()), (3, 0))

    def test_failed_fin_within_a_run(self) -> None:
        """In a run of FINs, a failed one is answered with its error and the FINs around it still count."""
        client = self.subscribe(rdy=2)
        producer = self.connect()
        producer.send(mpub(b"t", [b"a", b"b"]))
        first, second = self.messages(client)
        client.send(b"FIN " + first[2] + b"\nFIN 0123456789abcdef\nFIN " + second[2] + b"\n")
        self.assertEqual(
            client.raw(), frame(ERROR, b"E_FIN_FAILED FIN 0123456789abcdef failed ID not in flight"))
        self.assertFalse(client.closed)
        channel = self.broker.get_topic("t").get_channel("c")
        self.assertEqual(channel.in_flight_count, 0)
        self.assertEqual(client.protocol.finish_count, 2)

    def test_publish_reaches_consumer_at_end_of_read(self) -> None:
        """Messages an MPUB delivers to a consumer reach it in one write when the publisher's read ends."""
        client = self.subscribe(rdy=10)
        writes = self.record_writes(client)
        producer = self.connect()
        producer.send(mpub(b"t", [b"a", b"b", b"c"]) + pub(b"t", b"d"))
        self.assertEqual(len(writes), 1)
        self.assertEqual([m[3] for m in self.messages(client)], [b"a", b"b", b"c", b"d"])
        self.assertEqual(producer.raw(), OK + OK)

    def test_timer_output_next_turn(self) -> None:
        """Output made outside any read (a message due after DPUB) goes out at the next reactor turn."""
        client = self.subscribe(rdy=1)
        producer = self.connect()
        producer.send(b"DPUB t 1000\n" + struct.pack(">i", 1) + b"x")
        self.assertEqual(producer.raw(), OK)
        writes = self.record_writes(client)
        self.clock.advance(1)
        self.clock.advance(0)
        self.assertEqual(len(writes), 1)
        self.assertEqual([m[3] for m in self.messages(client)], [b"x"])

    def test_fin_of_timed_out_message(self) -> None:
        """FIN of a message that timed out and went to another consumer fails; the other consumer's FIN works."""
        first = self.connect()
        first.send(identify(msg_timeout=1000) + b"SUB t c\nRDY 1\n")
        self.assertEqual(first.raw(), OK + OK)
        self.publish(b"t", b"x")
        [(_, _, msg_id, _)] = self.messages(first)
        first.send(b"RDY 0\n")
        second = self.subscribe(rdy=1)
        self.clock.advance(1)
        [(_, attempts, again, _)] = self.messages(second)
        self.assertEqual((attempts, again), (2, msg_id))
        first.send(b"FIN " + msg_id + b"\n")
        self.assertEqual(
            first.raw(), frame(ERROR, b"E_FIN_FAILED FIN " + msg_id + b" failed client does not own message"))
        second.send(b"FIN " + msg_id + b"\n")
        self.assertEqual(second.raw(), b"")
        self.assertEqual(self.broker.get_topic("t").get_channel("c").in_flight_count, 0)


class OutputBufferingTests(ProtocolTestCase):
    """With compression, frames of one reactor turn are encoded together."""

    def deflate_client(self, **fields: object) -> Client:
        from txnsq.nsqd.tcp import ServerFeatures

        self.factory = NSQDFactory(
            self.broker, self.clock, ServerFeatures(snappy=True, deflate=True)
        )
        client = self.connect()
        client.send(identify(feature_negotiation=True, deflate=True, deflate_level=1, **fields))
        self.clock.advance(0)
        return client

    def inflate(self, client: Client, decoder: object) -> List[Tuple[int, bytes]]:
        data = decoder.decode(client.raw())  # type: ignore[attr-defined]
        return list(client.parser.feed(data))

    def split_reply(self, client: Client) -> object:
        """Read the clear IDENTIFY reply; return a decoder for what follows."""
        from txnsq.protocol.compression import DeflateDecoder

        raw = client.raw()
        size = struct.unpack(">i", raw[:4])[0]
        reply, rest = raw[: 4 + size], raw[4 + size :]
        self.assertEqual(json.loads(reply[8:])["deflate"], True)
        decoder = DeflateDecoder()
        self.assertEqual(list(client.parser.feed(decoder.decode(rest))), [(RESPONSE, b"OK")])
        return decoder

    def test_one_encode_per_turn(self) -> None:
        """Messages delivered in one turn reach the client in one compressed write, at the turn's end."""
        client = self.deflate_client()
        decoder = self.split_reply(client)
        writes: List[bytes] = []
        original = client.transport.write

        def record(data: bytes) -> None:
            writes.append(data)
            original(data)

        client.transport.write = record  # type: ignore[method-assign]
        # The commands are compressed too.
        from txnsq.protocol.compression import DeflateEncoder

        encoder = DeflateEncoder(1)
        client.send(encoder.encode(b"SUB t c\n"))
        self.clock.advance(0)
        self.assertEqual(self.inflate(client, decoder), [(RESPONSE, b"OK")])
        writes.clear()
        client.send(encoder.encode(b"RDY 10\n"))
        self.broker.get_topic("t").publish_many([b"a", b"b", b"c"])
        self.assertEqual(writes, [])
        self.clock.advance(0)
        self.assertEqual(len(writes), 1)
        bodies = [decode_message(data)[3] for _, data in self.inflate(client, decoder)]
        self.assertEqual(bodies, [b"a", b"b", b"c"])

    def test_buffer_size_flushes_early(self) -> None:
        """Past output_buffer_size the buffered frames are written at once."""
        client = self.deflate_client(output_buffer_size=64)
        decoder = self.split_reply(client)
        from txnsq.protocol.compression import DeflateEncoder

        encoder = DeflateEncoder(1)
        client.send(encoder.encode(b"SUB t c\nRDY 10\n"))
        self.clock.advance(0)
        self.inflate(client, decoder)
        self.broker.get_topic("t").publish_many([b"x" * 100])
        frames = self.inflate(client, decoder)
        self.assertEqual([decode_message(data)[3] for _, data in frames], [b"x" * 100])

    def test_buffering_disabled(self) -> None:
        """output_buffer_timeout -1 writes every frame as it comes."""
        client = self.deflate_client(output_buffer_timeout=-1)
        decoder = self.split_reply(client)
        from txnsq.protocol.compression import DeflateEncoder

        client.send(DeflateEncoder(1).encode(b"SUB t c\n"))
        self.assertEqual(self.inflate(client, decoder), [(RESPONSE, b"OK")])


class BarrierTests(ProtocolTestCase):
    """With --mem-queue-size=0 the broker's barrier runs before any output leaves."""

    def setUp(self) -> None:
        ProtocolTestCase.setUp(self)
        # What each client had been sent when the barrier ran.
        self.seen: List[bytes] = []
        self.clients: List[Client] = []
        self.broker.barrier = lambda: self.seen.append(
            b"".join(client.transport.value() for client in self.clients)
        )

    def test_ok_after_barrier(self) -> None:
        """A PUB's OK is written only after the barrier ran (its records are on disk by then)."""
        producer = self.connect()
        self.clients.append(producer)
        producer.send(pub(b"t", b"x"))
        self.assertEqual(self.seen, [b""])
        self.assertEqual(producer.raw(), OK)

    def test_message_after_barrier(self) -> None:
        """A message frame is written only after the barrier ran (its flight-log entry is written by then)."""
        consumer = self.subscribe()
        self.clients.append(consumer)
        del self.seen[:]
        self.broker.get_topic("t").publish(b"x")
        self.clock.advance(0)
        self.assertEqual(self.seen, [b""])
        self.assertEqual(len(self.messages(consumer)), 1)

    def test_no_barrier_by_default(self) -> None:
        """A broker on other storage has no barrier."""
        self.make_broker()
        self.assertIsNone(self.broker.barrier)


def _disk_full(fd: int, data: Any) -> int:
    """A segment write on a full disk."""
    raise OSError(errno.ENOSPC, "No space left on device")


_NO_SPACE = b"failed to write to diskqueue %s - [Errno 28] No space left on device"


class DiskFullTests(ProtocolTestCase):
    """
    With --mem-queue-size=0 on disk storage, a publish whose records could
    not be written (a full disk) is answered with Go's failure, never OK.
    """

    sync_every = 2500

    def setUp(self) -> None:
        ProtocolTestCase.setUp(self)
        directory = self.mktemp()
        os.makedirs(directory)
        self.options.data_path = directory
        self.options.mem_queue_size = 0
        self.options.sync_every = self.sync_every
        self.broker = Broker(self.options, self.clock, DiskStorage())
        self.addCleanup(self.broker.close)
        self.factory = NSQDFactory(self.broker, self.clock)

    def fill(self, name: str) -> Any:
        """The disk is full for the queue of topic ``name`` (no channels)."""
        queue = self.broker.get_topic(name)._queue
        queue.os_write = _disk_full
        return queue

    def test_pub_failed_write(self) -> None:
        """A PUB whose write hits ENOSPC gets E_PUB_FAILED (fatal), not OK; the queue keeps the message and writes it once it can."""
        queue = self.fill("t")
        producer = self.connect()
        producer.send(pub(b"t", b"x"))
        self.assertEqual(
            producer.frames(), [(ERROR, b"E_PUB_FAILED PUB failed " + _NO_SPACE % (b"t",))]
        )
        self.assertTrue(producer.closed)
        # Kept in memory (an unknown outcome for the producer) ...
        self.assertEqual(queue.depth(), 1)
        queue.os_write = os.write
        self.clock.advance(1.0)
        # ... and written when writing works again.
        self.assertIsNone(queue.error)
        self.assertEqual(queue.read()[26:], b"x")

    def test_oks_before_failure_stay(self) -> None:
        """A PUB to a topic whose write worked keeps its OK; the failed MPUB after it is E_MPUB_FAILED and nothing follows."""
        self.fill("t")
        producer = self.connect()
        producer.send(pub(b"fine", b"a") + mpub(b"t", [b"b", b"c"]) + pub(b"fine", b"d"))
        frames = producer.frames()
        self.assertEqual(frames[0], (RESPONSE, b"OK"))
        self.assertEqual(frames[1:], [(ERROR, b"E_MPUB_FAILED MPUB failed " + _NO_SPACE % (b"t",))])
        self.assertTrue(producer.closed)
        self.assertEqual(self.broker.get_topic("fine")._queue.error, None)

    def test_channel_write_failed(self) -> None:
        """A PUB to a topic with a channel checks the channel's queue, where the message went."""
        queue = self.broker.get_topic("t").get_channel("c")._queue
        queue.os_write = _disk_full
        producer = self.connect()
        producer.send(pub(b"t", b"x"))
        self.assertEqual(
            producer.frames(),
            [(ERROR, b"E_PUB_FAILED PUB failed " + _NO_SPACE % (b"t:c",))],
        )

    def test_ok_when_written(self) -> None:
        """PUBs whose writes work are answered OK, and are on disk by then."""
        producer = self.connect()
        producer.send(pub(b"t", b"x") + pub(b"t", b"y"))
        self.assertEqual(producer.raw(), OK * 2)
        queue = self.broker.get_topic("t")._queue
        self.assertEqual(queue._pending, bytearray())
        self.assertEqual(queue.depth(), 2)


class DiskFullSyncTests(DiskFullTests):
    """The same with --sync-every=1."""

    sync_every = 1


def _fsync_eio(fd: int) -> None:
    """An fsync whose writeback failed."""
    raise OSError(errno.EIO, "Input/output error")


class FailedSyncTests(DiskFullTests):
    """
    With --mem-queue-size=0 and --sync-every=1, a publish whose records'
    fsync failed is answered with Go's failure, never OK, as a failed
    write is.
    """

    sync_every = 1

    def fill(self, name: str) -> Any:
        """The fsyncs of topic ``name``'s queue (no channels) fail."""
        queue = self.broker.get_topic(name)._queue
        queue.os_fsync = _fsync_eio
        return queue

    def test_pub_failed_write(self) -> None:
        """A PUB whose fsync fails gets E_PUB_FAILED (fatal), not OK; once a sync works again, so do publishes."""
        queue = self.fill("t")
        producer = self.connect()
        producer.send(pub(b"t", b"x"))
        self.assertEqual(
            producer.frames(),
            [(ERROR, b"E_PUB_FAILED PUB failed failed to sync diskqueue t - [Errno 5] Input/output error")],
        )
        self.assertTrue(producer.closed)
        queue.os_fsync = os.fsync
        self.clock.advance(1.0)
        self.assertIsNone(queue.error)
        again = self.connect()
        again.send(pub(b"t", b"y"))
        self.assertEqual(again.raw(), OK)

    def test_oks_before_failure_stay(self) -> None:
        """A PUB to a topic whose sync worked keeps its OK; the MPUB whose sync failed is E_MPUB_FAILED."""
        self.fill("t")
        producer = self.connect()
        producer.send(pub(b"fine", b"a") + mpub(b"t", [b"b", b"c"]) + pub(b"fine", b"d"))
        frames = producer.frames()
        self.assertEqual(frames[0], (RESPONSE, b"OK"))
        self.assertEqual(
            frames[1:], [(ERROR, b"E_MPUB_FAILED MPUB failed failed to sync diskqueue t - [Errno 5] Input/output error")]
        )
        self.assertTrue(producer.closed)

    def test_channel_write_failed(self) -> None:
        """A PUB to a topic with a channel checks the channel's queue, whose fsync failed."""
        queue = self.broker.get_topic("t").get_channel("c")._queue
        queue.os_fsync = _fsync_eio
        producer = self.connect()
        producer.send(pub(b"t", b"x"))
        self.assertEqual(
            producer.frames(),
            [(ERROR, b"E_PUB_FAILED PUB failed failed to sync diskqueue t:c - [Errno 5] Input/output error")],
        )


class MirrorGateCase(ProtocolTestCase):
    """A broker whose mirror gate the test drives, and a mirrored topic ``m``."""

    def setUp(self) -> None:
        ProtocolTestCase.setUp(self)
        self.held: List[Any] = []
        self.broker.mirror_gate = self.gate
        self.hold = True
        self.fail_now: Optional[str] = None
        from txnsq.mirror.recorder import MirrorRecorder

        self.broker.get_topic("m").mirror = MirrorRecorder(lambda: None, lambda: None)

    def gate(self, connection: Any) -> bool:
        if self.fail_now is not None:
            connection.mirror_fail(self.fail_now)
            return True
        if self.hold:
            self.held.append(connection)
        return self.hold


class MirrorGateTests(MirrorGateCase):
    """A publish to a mirrored topic asks the broker's mirror gate before its OK leaves."""

    def test_ok_held_until_release(self) -> None:
        """The OKs of PUB, MPUB and DPUB wait for the release; reading is not paused while nothing more comes."""
        producer = self.connect()
        producer.send(pub(b"m", b"x") + mpub(b"m", [b"a", b"b"]))
        self.assertEqual(producer.raw(), b"")
        self.assertEqual(producer.transport.producerState, "producing")
        self.assertEqual(len(self.held), 1)
        self.held[0].mirror_release()
        self.assertEqual(producer.raw(), OK * 2)
        self.assertEqual(producer.transport.producerState, "producing")

    def test_input_while_held_waits(self) -> None:
        """Commands read while held pause reading and run only after the release, in order, their OKs behind the held ones."""
        producer = self.connect()
        producer.send(pub(b"m", b"x"))
        producer.send(pub(b"plain", b"y") + pub(b"m", b"z"))
        self.assertEqual(producer.transport.producerState, "paused")
        self.assertEqual(self.broker.get_topic("plain").message_count, 0)
        self.assertEqual(self.broker.get_topic("m").message_count, 1)
        self.held[0].mirror_release()
        # The kept commands ran: the plain OK, then held again by "m".
        self.assertEqual(self.broker.get_topic("plain").message_count, 1)
        self.assertEqual(self.broker.get_topic("m").message_count, 2)
        self.assertEqual(producer.transport.producerState, "producing")
        self.assertEqual(len(self.held), 2)
        self.held[1].mirror_release()
        self.assertEqual(producer.raw(), OK * 3)

    def test_other_topics_not_gated(self) -> None:
        """A publish to a topic that is not mirrored is answered at once."""
        producer = self.connect()
        producer.send(pub(b"plain", b"x"))
        self.assertEqual(producer.raw(), OK)
        self.assertEqual(self.held, [])

    def test_gate_lets_go(self) -> None:
        """A gate answering False (nothing pending, async mode) lets the OK go at once."""
        self.hold = False
        producer = self.connect()
        producer.send(pub(b"m", b"x"))
        self.assertEqual(producer.raw(), OK)

    def test_release_after_close(self) -> None:
        """A release after the connection closed writes nothing."""
        producer = self.connect()
        producer.send(pub(b"m", b"x"))
        producer.lose()
        self.held[0].mirror_release()
        self.assertEqual(producer.raw(), b"")


#: A mirrored topic's refusal with no standby live (--mirror-min-standbys=1).
NO_STANDBY = b"mirror: 0 of 1 required standbys live"


class MirrorFailTests(MirrorGateCase):
    """``--mirror-min-standbys``: publishes to a mirrored topic refused, or failed at the gate."""

    def dpub(self, topic: bytes, body: bytes) -> bytes:
        return b"DPUB " + topic + b" 1000\n" + struct.pack(">i", len(body)) + body

    def test_fail_replaces_unconfirmed_ok(self) -> None:
        """A held PUB the mirror fails is answered E_PUB_FAILED with the mirror's reason and the connection closes; the message stays stored."""
        producer = self.connect()
        producer.send(pub(b"m", b"x"))
        self.held[0].mirror_fail("why")
        self.assertEqual(producer.raw(), frame(ERROR, b"E_PUB_FAILED PUB failed why"))
        self.assertTrue(producer.closed)
        self.assertEqual(self.broker.get_topic("m").message_count, 1)

    def test_fail_names_the_command(self) -> None:
        """The error is the first unconfirmed publish's: E_MPUB_FAILED for MPUB, E_DPUB_FAILED for DPUB."""
        for command, code in (
            (mpub(b"m", [b"a", b"b"]), b"E_MPUB_FAILED MPUB"),
            (self.dpub(b"m", b"x"), b"E_DPUB_FAILED DPUB"),
        ):
            producer = self.connect()
            producer.send(command + pub(b"m", b"y"))
            self.held.pop().mirror_fail("why")
            self.assertEqual(producer.raw(), frame(ERROR, code + b" failed why"))
            self.assertTrue(producer.closed)

    def test_output_before_is_written(self) -> None:
        """What was answered before the first unconfirmed publish (a PUB to another topic) is written before the error."""
        producer = self.connect()
        producer.send(pub(b"plain", b"x") + pub(b"m", b"y") + pub(b"plain", b"z"))
        self.held[0].mirror_fail("why")
        self.assertEqual(producer.raw(), OK + frame(ERROR, b"E_PUB_FAILED PUB failed why"))

    def test_confirmed_while_held_written(self) -> None:
        """Answers confirmed by a first release are written, those held again after it are replaced by the error."""
        producer = self.connect()
        producer.send(identify(output_buffer_size=64))
        self.assertEqual(producer.raw(), OK)
        # Seven OKs (70 bytes) pass the buffer: held; three more come meanwhile.
        producer.send(b"".join(mpub(b"m", [b"%d" % (n,)]) for n in range(10)))
        self.assertEqual(len(self.held), 1)
        self.held[0].mirror_release()
        self.assertEqual(producer.raw(), b"")
        self.assertEqual(len(self.held), 2)
        self.held[1].mirror_fail("why")
        self.assertEqual(producer.raw(), OK * 7 + frame(ERROR, b"E_MPUB_FAILED MPUB failed why"))

    def test_input_held_dropped(self) -> None:
        """Commands read while held do not run when the mirror fails the connection."""
        producer = self.connect()
        producer.send(pub(b"m", b"x"))
        producer.send(pub(b"plain", b"y"))
        self.held[0].mirror_fail("why")
        self.assertEqual(self.broker.get_topic("plain").message_count, 0)
        self.assertEqual(producer.raw(), frame(ERROR, b"E_PUB_FAILED PUB failed why"))

    def test_gate_fails_at_once(self) -> None:
        """A gate failing the connection as it is asked (the standbys went before the output left) answers the error at once."""
        self.fail_now = "gone"
        producer = self.connect()
        producer.send(pub(b"m", b"x"))
        self.assertEqual(producer.raw(), frame(ERROR, b"E_PUB_FAILED PUB failed gone"))
        self.assertTrue(producer.closed)
        self.assertFalse(producer.protocol.mirror_hold.held)

    def test_fail_after_close(self) -> None:
        """A failure after the connection closed writes nothing."""
        producer = self.connect()
        producer.send(pub(b"m", b"x"))
        producer.lose()
        self.held[0].mirror_fail("why")
        self.assertEqual(producer.raw(), b"")

    def test_refused_before_storing(self) -> None:
        """With too few standbys live, PUB, MPUB and DPUB are refused with Go's fatal codes naming the cause; nothing is stored, the gate is not asked."""
        recorder = self.broker.get_topic("m").mirror
        recorder.refusing = NO_STANDBY.decode()
        for command, code in (
            (pub(b"m", b"x"), b"E_PUB_FAILED PUB"),
            (mpub(b"m", [b"a", b"b"]), b"E_MPUB_FAILED MPUB"),
            (self.dpub(b"m", b"x"), b"E_DPUB_FAILED DPUB"),
        ):
            producer = self.connect()
            producer.send(command)
            self.assertEqual(producer.raw(), frame(ERROR, code + b" failed " + NO_STANDBY))
            self.assertTrue(producer.closed)
        self.assertEqual(self.broker.get_topic("m").message_count, 0)
        self.assertEqual(self.held, [])
        self.assertEqual(recorder.refused, 3)

    def test_refused_run(self) -> None:
        """Pipelined PUBs to a refusing topic get one error after the OKs of what came before, counted once."""
        recorder = self.broker.get_topic("m").mirror
        recorder.refusing = NO_STANDBY.decode()
        producer = self.connect()
        producer.send(pub(b"plain", b"a") + pub(b"m", b"x") + pub(b"m", b"y"))
        self.assertEqual(producer.raw(), OK + frame(ERROR, b"E_PUB_FAILED PUB failed " + NO_STANDBY))
        self.assertEqual(recorder.refused, 1)
