"""
Tests for the IDENTIFY upgrades of txnsq.nsqd.tcp, with no sockets: TLS
through a byte pump between two in-memory transports that start a real
(memory BIO) TLS layer mid-stream, and snappy and deflate through
StringTransport.  What the server sends is decoded with python-snappy's
stream classes and zlib, not with the codecs under test.
"""

from __future__ import annotations

import json
import zlib
from typing import Any, Iterable, List, Optional, Tuple

import snappy
from twisted.internet.address import IPv4Address
from twisted.internet.error import ConnectionDone
from twisted.internet.interfaces import ITLSTransport
from twisted.internet.protocol import Protocol
from twisted.internet.ssl import TLSVersion
from twisted.internet.task import Clock
from twisted.internet.testing import StringTransport
from twisted.protocols.tls import TLSMemoryBIOFactory, TLSMemoryBIOProtocol
from twisted.python.failure import Failure
from twisted.trial.unittest import SynchronousTestCase
from zope.interface import implementer

from tests.integration.tls_certs import client_tls_options, shared_pki
from tests.test_tcp import ERROR, MESSAGE, OK, RESPONSE, Client, frame, identify, mpub, pub
from txnsq.nsqd.broker import Broker
from txnsq.nsqd.options import NSQDOptions
from txnsq.nsqd.tcp import NSQDFactory, NSQDProtocol, ServerFeatures
from txnsq.nsqd.tls import tls_server_options
from txnsq.nsqd.topic import Topic
from txnsq.protocol.frames import FrameParser
from txnsq.protocol.message import decode_message
from txnsq.storage.memory import MemoryStorage

HEARTBEAT = frame(RESPONSE, b"_heartbeat_")


# -- an in-memory connection that can start TLS --------------------------------


class _Wire:
    """What a TLS layer writes its records to: the raw transport below it."""

    def __init__(self, transport: "TLSStringTransport") -> None:
        self._transport = transport

    def write(self, data: bytes) -> None:
        StringTransport.write(self._transport, data)

    def writeSequence(self, data: Iterable[bytes]) -> None:
        self.write(b"".join(data))

    def loseConnection(self) -> None:
        StringTransport.loseConnection(self._transport)

    def abortConnection(self) -> None:
        StringTransport.loseConnection(self._transport)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._transport, name)


@implementer(ITLSTransport)
class TLSStringTransport(StringTransport):  # type: ignore[misc]
    """
    A StringTransport whose ``startTLS`` puts a real TLS layer
    (``TLSMemoryBIOProtocol``) between the connection's protocol and the
    bytes, as Twisted's TCP transports do.

    :ivar tls: the TLS layer once started.
    """

    def __init__(self, protocol: Any, is_client: bool, peer: IPv4Address, clock: Clock) -> None:
        StringTransport.__init__(self, peerAddress=peer)
        self.protocol = protocol
        self.is_client = is_client
        # The TLS layer gathers small writes until the clock's next turn.
        self.clock = clock
        self.tls: Optional[TLSMemoryBIOProtocol] = None
        self.lost = False

    def startTLS(self, contextFactory: Any, normal: bool = True) -> None:
        """Put a TLS layer (client or server, as this end) under the protocol."""
        client = self.is_client if normal else not self.is_client
        factory = TLSMemoryBIOFactory(contextFactory, client, None, clock=self.clock)  # type: ignore[arg-type]
        self.tls = factory.protocol(factory, self.protocol, False)
        self.tls.makeConnection(_Wire(self))

    def getHandle(self) -> Any:
        """The OpenSSL connection once TLS is started."""
        return self.tls.getHandle() if self.tls is not None else None

    def write(self, data: bytes) -> None:
        """Write through TLS once it is started."""
        if self.tls is not None:
            self.tls.write(data)
        else:
            StringTransport.write(self, data)

    def writeSequence(self, data: Iterable[bytes]) -> None:
        self.write(b"".join(data))

    def loseConnection(self) -> None:
        """Close, with a TLS shutdown once TLS is started."""
        if self.tls is not None:
            self.tls.loseConnection()
        else:
            StringTransport.loseConnection(self)

    def abortConnection(self) -> None:
        """Close at once, without a TLS shutdown."""
        if self.tls is not None:
            self.tls.abortConnection()
        else:
            StringTransport.loseConnection(self)

    def receive(self, data: bytes) -> None:
        """Bytes from the peer, through TLS once it is started."""
        (self.tls or self.protocol).dataReceived(data)

    def lose(self) -> None:
        """The connection is gone: tell the protocol (through TLS), once."""
        if not self.lost:
            self.lost = True
            (self.tls or self.protocol).connectionLost(Failure(ConnectionDone()))


class Peer(Protocol):
    """The client end: keeps what it receives (plain, or decrypted after TLS)."""

    def __init__(self) -> None:
        self.received = b""
        self.lost: Optional[Failure] = None

    def dataReceived(self, data: bytes) -> None:
        self.received += data

    def connectionLost(self, reason: Failure = None) -> None:  # type: ignore[assignment]
        self.lost = reason

    def take(self) -> bytes:
        """What arrived since the last call."""
        data, self.received = self.received, b""
        return data


class Pump:
    """
    One connection between a client :class:`Peer` and a server protocol,
    both on :class:`TLSStringTransport`.  :meth:`pump` moves bytes both
    ways (running the clock's due calls) until nothing moves.

    :ivar to_client: every chunk of wire bytes the client received.
    """

    def __init__(self, clock: Clock, server: NSQDProtocol, port: int) -> None:
        self.clock = clock
        self.peer = Peer()
        self.server = server
        self.server_end = TLSStringTransport(server, False, IPv4Address("TCP", "127.0.0.1", port), clock)
        self.client_end = TLSStringTransport(self.peer, True, IPv4Address("TCP", "127.0.0.1", 4150), clock)
        self.to_client: List[bytes] = []
        self.peer.makeConnection(self.client_end)
        server.makeConnection(self.server_end)

    def send(self, data: bytes) -> None:
        """The client writes (through TLS once started) and the pump runs."""
        self.client_end.write(data)
        self.pump()

    def start_tls(self, options: Any) -> None:
        """The client starts TLS and the handshake runs."""
        self.client_end.startTLS(options)
        self.pump()

    def pump(self) -> None:
        """Move bytes both ways until quiet; then deliver a close to both ends."""
        ends = ((self.server_end, self.client_end), (self.client_end, self.server_end))
        while True:
            self.clock.advance(0)
            moved = False
            for source, destination in ends:
                data = source.value()
                if data and not destination.lost:
                    source.clear()
                    if destination is self.client_end:
                        self.to_client.append(data)
                    destination.receive(data)
                    moved = True
            if not moved:
                break
        if self.server_end.disconnecting or self.client_end.disconnecting:
            self.server_end.lose()
            self.client_end.lose()

    @property
    def closed(self) -> bool:
        """Whether the connection was closed."""
        return self.server_end.lost


# -- helpers ---------------------------------------------------------------------


def frames(data: bytes) -> List[Tuple[int, bytes]]:
    """All the V2 frames of ``data``, which must end at a frame boundary."""
    parser = FrameParser()
    found = list(parser.feed(data))
    assert not parser.buffered(), "incomplete frame in %r" % (data,)
    return found


def negotiate(**fields: object) -> bytes:
    """IDENTIFY with feature negotiation."""
    return identify(feature_negotiation=True, **fields)


class SnappyClientCodec:
    """The client side of snappy: python-snappy's framing-format streams."""

    def __init__(self) -> None:
        self._out = snappy.StreamCompressor()
        self._in = snappy.StreamDecompressor()

    def encode(self, data: bytes) -> bytes:
        return self._out.add_chunk(data)

    def decode(self, data: bytes) -> bytes:
        return bytes(self._in.decompress(data))


class DeflateClientCodec:
    """The client side of deflate: raw DEFLATE, sync-flushed writes (zlib)."""

    def __init__(self, level: int = 6) -> None:
        self._out = zlib.compressobj(level, zlib.DEFLATED, -15)
        self._in = zlib.decompressobj(-15)

    def encode(self, data: bytes) -> bytes:
        return self._out.compress(data) + self._out.flush(zlib.Z_SYNC_FLUSH)

    def decode(self, data: bytes) -> bytes:
        return self._in.decompress(data)


CODECS = {"snappy": SnappyClientCodec, "deflate": DeflateClientCodec}


class UpgradeTestCase(SynchronousTestCase):
    """A broker on a Clock, and an nsqd factory with every upgrade enabled."""

    def setUp(self) -> None:
        self.clock = Clock()
        self.clock.advance(1700000000)
        self.options = NSQDOptions()
        self.pki = shared_pki()
        self._ports = 41000
        self.make_factory()

    def tls_options(self, **settings: object) -> Any:
        """The server TLS settings of the shared PKI's server certificate."""
        options = NSQDOptions()
        directory = self.mktemp()
        options.tls_cert, options.tls_key = self.pki.server.write(directory, "server")
        options.tls_root_ca_file = self.pki.ca.write(directory)
        for name, value in settings.items():
            setattr(options, name, value)
        return tls_server_options(options)

    def make_factory(
        self, tls: Any = None, tls_required: bool = False, snappy: bool = True, deflate: bool = True, **options: object
    ) -> None:
        """(Re)build the broker and factory."""
        for name, value in options.items():
            setattr(self.options, name, value)
        self.broker = Broker(self.options, self.clock, MemoryStorage())
        features = ServerFeatures(tls_options=tls, tls_required=tls_required, snappy=snappy, deflate=deflate)
        self.factory = NSQDFactory(self.broker, self.clock, features)

    def connect(self) -> Client:
        """A plain StringTransport client that has sent the magic."""
        self._ports += 1
        client = Client(self.factory, self._ports)
        client.send(b"  V2")
        return client

    def pump(self) -> Pump:
        """A client connected through the byte pump, magic sent."""
        self._ports += 1
        pump = Pump(self.clock, self.factory.buildProtocol(None), self._ports)
        pump.send(b"  V2")
        return pump

    def topic(self, name: str) -> Topic:
        """An existing topic of the broker."""
        found = self.broker.find_topic(name)
        assert found is not None, name
        return found

    def publish(self, topic: bytes, *bodies: bytes) -> None:
        """Publish from a fresh plain producer."""
        producer = self.connect()
        for body in bodies:
            producer.send(pub(topic, body))
        self.assertEqual(producer.raw(), OK * len(bodies))


# -- TLS -----------------------------------------------------------------------


class TLSUpgradeTests(UpgradeTestCase):
    """IDENTIFY tls_v1: the JSON reply in clear, then the handshake, then OK inside TLS."""

    def upgraded(self, **fields: object) -> Pump:
        """A client that negotiated TLS (and ``fields``) and finished the handshake."""
        pump = self.pump()
        pump.send(negotiate(tls_v1=True, **fields))
        reply = frames(pump.peer.take())
        self.assertEqual(len(reply), 1)
        self.assertTrue(json.loads(reply[0][1])["tls_v1"])
        pump.start_tls(client_tls_options())
        return pump

    def test_reply_in_clear_then_ok_inside_tls(self) -> None:
        """The IDENTIFY reply comes in clear and alone; the OK only inside TLS."""
        self.make_factory(tls=self.tls_options())
        pump = self.pump()
        pump.send(negotiate(tls_v1=True, client_id="c1"))
        [(frame_type, data)] = frames(pump.peer.take())
        reply = json.loads(data)
        self.assertEqual(frame_type, RESPONSE)
        self.assertEqual((reply["tls_v1"], reply["snappy"], reply["deflate"]), (True, False, False))
        # Exactly the reply went over the wire: the server waits for the handshake.
        self.assertEqual(pump.to_client, [frame(RESPONSE, data)])
        protocol = pump.server
        self.assertTrue(protocol.tls)
        sent_before = len(pump.to_client)
        pump.start_tls(client_tls_options())
        self.assertEqual(pump.peer.take(), OK)
        after = b"".join(pump.to_client[sent_before:])
        self.assertNotIn(OK, after)
        self.assertEqual(after[:1], b"\x16")  # a TLS handshake record
        self.assertEqual(protocol.tls_version, "TLS1.3")
        self.assertTrue(protocol.tls_cipher_suite.startswith("TLS_"), protocol.tls_cipher_suite)
        self.assertFalse(pump.closed)

    def test_tls12_names_as_go(self) -> None:
        """Over TLS 1.2, stats name the version and the suite as Go's nsqd does."""
        self.make_factory(tls=self.tls_options())
        pump = self.pump()
        pump.send(negotiate(tls_v1=True))
        pump.peer.take()
        pump.start_tls(client_tls_options(lowerMaximumSecurityTo=TLSVersion.TLSv1_2))
        self.assertEqual(pump.peer.take(), OK)
        self.assertEqual(pump.server.tls_version, "TLS1.2")
        self.assertRegex(pump.server.tls_cipher_suite, r"^TLS_ECDHE_(RSA|ECDSA)_WITH_\w+$")

    def test_commands_inside_tls(self) -> None:
        """After the upgrade SUB, RDY and messages go through TLS and nothing in clear."""
        self.make_factory(tls=self.tls_options())
        pump = self.upgraded()
        self.assertEqual(pump.peer.take(), OK)
        sent_before = len(pump.to_client)
        pump.send(b"SUB t c\nRDY 5\n")
        self.assertEqual(pump.peer.take(), OK)
        self.publish(b"t", b"secret-one", b"secret-two")
        pump.pump()
        bodies = [decode_message(data)[3] for frame_type, data in frames(pump.peer.take())]
        self.assertEqual(bodies, [b"secret-one", b"secret-two"])
        wire = b"".join(pump.to_client[sent_before:])
        self.assertNotIn(b"secret", wire)
        pump.send(pub(b"other", b"back"))
        self.assertEqual(pump.peer.take(), OK)
        self.assertEqual(self.topic("other").depth(), 1)

    def test_tls_then_snappy(self) -> None:
        """With tls_v1 and snappy: OK inside TLS, then a snappy OK inside TLS."""
        self.make_factory(tls=self.tls_options())
        pump = self.upgraded(snappy=True)
        codec = SnappyClientCodec()
        received = pump.peer.take()
        self.assertEqual(received[: len(OK)], OK)
        self.assertEqual(codec.decode(received[len(OK) :]), OK)
        pump.send(codec.encode(b"SUB t c\nRDY 1\n"))
        self.assertEqual(codec.decode(pump.peer.take()), OK)
        self.publish(b"t", b"both")
        pump.pump()
        [(frame_type, data)] = frames(codec.decode(pump.peer.take()))
        self.assertEqual((frame_type, decode_message(data)[3]), (MESSAGE, b"both"))
        self.assertTrue(pump.server.tls and pump.server.snappy)

    def test_tls_then_deflate(self) -> None:
        """With tls_v1 and deflate: OK inside TLS, then a deflate OK inside TLS."""
        self.make_factory(tls=self.tls_options())
        pump = self.upgraded(deflate=True, deflate_level=3)
        codec = DeflateClientCodec(3)
        received = pump.peer.take()
        self.assertEqual(received[: len(OK)], OK)
        self.assertEqual(codec.decode(received[len(OK) :]), OK)
        pump.send(codec.encode(pub(b"t", b"x")))
        self.assertEqual(codec.decode(pump.peer.take()), OK)
        self.assertTrue(pump.server.tls and pump.server.deflate)

    def test_not_configured(self) -> None:
        """tls_v1 without a server certificate is declined: no handshake, no extra OK."""
        client = self.connect()  # StringTransport: startTLS would fail
        client.send(negotiate(tls_v1=True))
        frame_type, data = client.take_frame()
        self.assertFalse(json.loads(data)["tls_v1"])
        client.send(b"SUB t c\n")
        self.assertEqual(client.raw(), OK)
        self.assertFalse(client.protocol.tls)

    def test_clear_text_after_reply_closes(self) -> None:
        """A client that asked for TLS and then writes clear text is disconnected."""
        self.make_factory(tls=self.tls_options())
        pump = self.pump()
        pump.send(negotiate(tls_v1=True))
        pump.peer.take()
        pump.send(pub(b"t", b"in clear"))
        self.assertTrue(pump.closed)
        self.assertNotIn(pump.server, self.factory.clients)
        self.assertIsNone(self.broker.find_topic("t"))

    def test_client_certificate_required(self) -> None:
        """With --tls-client-auth-policy=require a client without a certificate is refused."""
        self.make_factory(tls=self.tls_options(tls_client_auth_policy="require"), tls_required=True)
        pump = self.pump()
        pump.send(negotiate(tls_v1=True))
        pump.peer.take()
        pump.start_tls(client_tls_options())
        self.assertEqual(pump.peer.take(), b"")
        self.assertTrue(pump.closed)
        self.assertIsNotNone(pump.peer.lost)
        self.assertEqual(self.factory.clients, set())

    def test_client_certificate_any(self) -> None:
        """With --tls-client-auth-policy=require a certificate from any CA is accepted."""
        self.make_factory(tls=self.tls_options(tls_client_auth_policy="require"), tls_required=True)
        pump = self.pump()
        pump.send(negotiate(tls_v1=True))
        pump.peer.take()
        pump.start_tls(client_tls_options(client=self.pki.stranger))
        self.assertEqual(pump.peer.take(), OK)
        pump.send(b"SUB t c\n")
        self.assertEqual(pump.peer.take(), OK)
        peer = pump.server_end.getHandle().get_peer_certificate()
        self.assertEqual(peer.get_subject().commonName, "mallory")

    def test_client_certificate_verified(self) -> None:
        """With require-verify only a certificate from --tls-root-ca-file's CA is accepted."""
        tls = self.tls_options(tls_client_auth_policy="require-verify")
        self.make_factory(tls=tls, tls_required=True)
        refused = self.pump()
        refused.send(negotiate(tls_v1=True))
        refused.peer.take()
        refused.start_tls(client_tls_options(client=self.pki.stranger))
        self.assertEqual(refused.peer.take(), b"")
        self.assertTrue(refused.closed)
        accepted = self.pump()
        accepted.send(negotiate(tls_v1=True))
        accepted.peer.take()
        accepted.start_tls(client_tls_options(client=self.pki.client))
        self.assertEqual(accepted.peer.take(), OK)
        self.assertFalse(accepted.closed)



class TLSDisconnectTests(UpgradeTestCase):
    """
    When nsqd drops a TLS client the TCP connection closes, as Go's
    ``client.Close()`` does, even if the client never answers the TLS
    close_notify.  Here the client's bytes are delivered by hand, and the
    client never replies.
    """

    def setUp(self) -> None:
        super().setUp()
        self.make_factory(tls=self.tls_options())

    def wait(self, seconds: float) -> None:
        """Let ``seconds`` pass in small steps (timers set on the way fire in time)."""
        for _ in range(int(seconds * 10)):
            self.clock.advance(0.1)

    def upgraded(self) -> Pump:
        pump = self.pump()
        pump.send(negotiate(tls_v1=True, heartbeat_interval=1000))
        pump.peer.take()
        pump.start_tls(client_tls_options())
        self.assertEqual(pump.peer.take(), OK)
        return pump

    def test_fatal_error(self) -> None:
        """After a fatal error inside TLS the TCP connection closes."""
        pump = self.upgraded()
        pump.client_end.write(b"SUB bad!topic c\n")
        self.clock.advance(0)
        pump.server_end.receive(pump.client_end.value())
        self.wait(10)
        self.assertTrue(pump.server.dead)
        self.assertTrue(pump.server_end.disconnecting)

    def test_silent_client(self) -> None:
        """A TLS client silent for two heartbeats is disconnected."""
        pump = self.upgraded()
        self.wait(10)
        self.assertTrue(pump.server.dead)
        self.assertTrue(pump.server_end.disconnecting)

    def test_no_handshake(self) -> None:
        """A client that asks for TLS and never starts the handshake is disconnected."""
        pump = self.pump()
        pump.send(negotiate(tls_v1=True, heartbeat_interval=1000))
        self.wait(10)
        self.assertTrue(pump.server.dead)
        self.assertTrue(pump.server_end.disconnecting)

    def test_handshake_deadline(self) -> None:
        """
        With a long heartbeat, a client that never starts the handshake is
        still dropped after the five-second handshake deadline, not before.
        """
        pump = self.pump()
        pump.send(negotiate(tls_v1=True, heartbeat_interval=60000))
        self.wait(4.5)
        self.assertFalse(pump.server_end.disconnecting)
        self.wait(1)
        self.assertTrue(pump.server.dead)
        self.assertTrue(pump.server_end.disconnecting)

    def test_handshake_done_no_deadline(self) -> None:
        """A finished handshake cancels the deadline: the client stays."""
        pump = self.pump()
        pump.send(negotiate(tls_v1=True, heartbeat_interval=60000))
        pump.peer.take()
        pump.start_tls(client_tls_options())
        self.assertEqual(pump.peer.take(), OK)
        self.wait(30)
        self.assertFalse(pump.server_end.disconnecting)
        pump.send(b"NOP\n")
        self.assertFalse(pump.closed)

    def test_close_notify_answered(self) -> None:
        """Once the connection is gone no TLS close timer is left behind."""
        pump = self.upgraded()
        pump.client_end.write(b"SUB bad!topic c\n")
        pump.pump()
        self.assertTrue(pump.closed)
        self.assertEqual(self.clock.getDelayedCalls(), [])

    def test_plain_silent_client(self) -> None:
        """Without TLS a silent client is disconnected (the same check, for contrast)."""
        pump = self.pump()
        pump.send(identify(heartbeat_interval=1000))
        self.wait(10)
        self.assertTrue(pump.server_end.disconnecting)


class TLSRequiredTests(UpgradeTestCase):
    """--tls-required: nothing but IDENTIFY before the TLS upgrade."""

    def setUp(self) -> None:
        super().setUp()
        self.make_factory(tls=self.tls_options(), tls_required=True)

    def test_sub_before_tls(self) -> None:
        """SUB before TLS is the fatal E_INVALID ... (TLS required)."""
        client = self.connect()
        client.send(b"SUB t c\n")
        self.assertEqual(client.raw(), frame(ERROR, b"E_INVALID cannot SUB in current state (TLS required)"))
        self.assertTrue(client.closed)

    def test_pub_before_tls(self) -> None:
        """PUB before TLS is refused on its command line, before the body is read."""
        client = self.connect()
        client.send(b"PUB t\n")
        self.assertEqual(client.raw(), frame(ERROR, b"E_INVALID cannot PUB in current state (TLS required)"))
        self.assertTrue(client.closed)
        self.assertIsNone(self.broker.find_topic("t"))

    def test_policy_before_everything_else(self) -> None:
        """Before TLS the policy comes first: unknown commands and bad parameters are refused for TLS."""
        for line, verb in (
            (b"BOGUS\n", b"BOGUS"),
            (b"FIN\n", b"FIN"),
            (b"RDY x\n", b"RDY"),
            (b"AUTH x\n", b"AUTH"),
            (b"MPUB bad!\n", b"MPUB"),
            (b"DPUB t x\n", b"DPUB"),
        ):
            client = self.connect()
            client.send(line)
            self.assertEqual(
                client.raw(), frame(ERROR, b"E_INVALID cannot " + verb + b" in current state (TLS required)"), line
            )
            self.assertTrue(client.closed)

    def test_identify_without_tls_then_sub(self) -> None:
        """IDENTIFY is allowed; not asking for TLS leaves every other command refused."""
        client = self.connect()
        client.send(identify(client_id="x") + b"NOP\n")
        self.assertEqual(
            client.raw(), OK + frame(ERROR, b"E_INVALID cannot NOP in current state (TLS required)")
        )
        self.assertTrue(client.closed)

    def test_allowed_after_tls(self) -> None:
        """After the TLS upgrade SUB and PUB work."""
        pump = self.pump()
        pump.send(negotiate(tls_v1=True))
        pump.peer.take()
        pump.start_tls(client_tls_options())
        self.assertEqual(pump.peer.take(), OK)
        pump.send(pub(b"t", b"ok") + b"SUB t c\n")
        self.assertEqual(pump.peer.take(), OK + OK)


# -- compression -----------------------------------------------------------------


class CompressionMixin:
    """The same behaviour for snappy and deflate; ``kind`` names the codec."""

    kind = ""

    # Provided by UpgradeTestCase.
    clock: Clock
    assertEqual: Any
    assertTrue: Any
    assertFalse: Any
    assertLess: Any
    assertIsNone: Any
    factory: NSQDFactory
    topic: Any
    assertNotEqual: Any
    connect: Any
    publish: Any
    make_factory: Any
    broker: Broker

    def upgraded(self, **fields: object) -> Tuple[Client, Any]:
        """A client that negotiated this compression; its client-side codec."""
        client = self.connect()
        client.send(negotiate(**{self.kind: True}, **fields))
        frame_type, data = client.take_frame()
        reply = json.loads(data)
        self.assertEqual(frame_type, RESPONSE)
        self.assertTrue(reply[self.kind])
        codec = CODECS[self.kind]() if self.kind == "snappy" else DeflateClientCodec(reply["deflate_level"])
        self.clock.advance(0)
        self.assertEqual(codec.decode(client.raw()), OK)
        return client, codec

    def test_reply_in_clear_then_compressed_ok(self) -> None:
        """The IDENTIFY reply is plain; the OK that follows is compressed."""
        client = self.connect()
        client.send(negotiate(**{self.kind: True}))
        frame_type, data = client.take_frame()
        reply = json.loads(data)
        self.assertTrue(reply[self.kind])
        self.assertFalse(reply["tls_v1"])
        self.clock.advance(0)
        raw = client.raw()
        self.assertNotEqual(raw[: len(OK)], OK)
        self.assertEqual(CODECS[self.kind]().decode(raw), OK)
        self.assertTrue(getattr(client.protocol, self.kind))

    def test_compressed_commands(self) -> None:
        """Compressed SUB, RDY and PUB are understood; messages come back compressed."""
        client, codec = self.upgraded()
        client.send(codec.encode(b"SUB t c\nRDY 10\n"))
        self.clock.advance(0)
        self.assertEqual(codec.decode(client.raw()), OK)
        self.publish(b"t", b"one", b"two")
        self.clock.advance(0)
        messages = [decode_message(data) for _, data in frames(codec.decode(client.raw()))]
        self.assertEqual([m[3] for m in messages], [b"one", b"two"])
        client.send(codec.encode(b"FIN %s\nFIN %s\n" % (messages[0][2], messages[1][2])))
        self.assertEqual(self.topic("t").get_channel("c").in_flight_count, 0)

    def test_compressed_publish(self) -> None:
        """Compressed PUB and MPUB are published and answered with compressed OKs."""
        consumer = self.connect()
        consumer.send(b"SUB t c\nRDY 10\n")
        self.assertEqual(consumer.raw(), OK)
        client, codec = self.upgraded()
        client.send(codec.encode(pub(b"t", b"a" * 1000) + mpub(b"t", [b"b", b"c"])))
        self.clock.advance(0)
        self.assertEqual(codec.decode(client.raw()), OK + OK)
        bodies = [decode_message(data)[3] for _, data in consumer.frames()]
        self.assertEqual(bodies, [b"a" * 1000, b"b", b"c"])

    def test_command_split_across_writes(self) -> None:
        """A compressed PUB whose compressed bytes arrive one at a time still works."""
        client, codec = self.upgraded()
        for byte in codec.encode(pub(b"t", b"piecewise" * 50)):
            client.send(bytes([byte]))
        self.clock.advance(0)
        self.assertEqual(codec.decode(client.raw()), OK)
        self.assertEqual(self.topic("t").depth(), 1)

    def test_large_message(self) -> None:
        """A message larger than one snappy chunk (64 KiB) goes both ways."""
        body = bytes(range(256)) * 1024  # 256 KiB
        client, codec = self.upgraded()
        client.send(codec.encode(b"SUB t c\nRDY 1\n" + pub(b"t", body)))
        self.clock.advance(0)
        received = frames(codec.decode(client.raw()))
        self.assertEqual(sorted(f[0] for f in received), [RESPONSE, RESPONSE, MESSAGE])
        [message] = [data for frame_type, data in received if frame_type == MESSAGE]
        self.assertEqual(decode_message(message)[3], body)

    def test_heartbeat_compressed(self) -> None:
        """Heartbeats are compressed too."""
        client, codec = self.upgraded(heartbeat_interval=1000)
        self.clock.advance(1)
        self.assertEqual(codec.decode(client.raw()), HEARTBEAT)
        client.send(codec.encode(b"NOP\n"))
        self.clock.advance(1)
        self.assertEqual(codec.decode(client.raw()), HEARTBEAT)
        self.assertFalse(client.closed)

    def test_fatal_error_compressed(self) -> None:
        """A fatal error is sent compressed before the connection closes."""
        client, codec = self.upgraded()
        client.send(codec.encode(pub(b"bad!topic", b"x")))
        self.assertTrue(client.closed)
        self.assertEqual(
            codec.decode(client.raw()),
            frame(ERROR, b'E_BAD_TOPIC PUB topic name "bad!topic" is not valid'),
        )

    def test_plain_after_upgrade_closes(self) -> None:
        """Uncompressed commands after the upgrade are corrupt input: the connection closes."""
        client, codec = self.upgraded()
        client.send(b"SUB t c\n" + b"\x00" * 16)
        self.assertTrue(client.closed)
        self.assertIsNone(self.broker.find_topic("t"))

    def test_oversize_body_refused(self) -> None:
        """A compressed PUB over --max-msg-size is refused on its size, without inflating it all."""
        self.make_factory(max_msg_size=1024 * 1024)
        client, codec = self.upgraded()
        body = b"\x00" * (8 * 1024 * 1024)
        compressed = codec.encode(pub(b"t", body))
        self.assertLess(len(compressed), len(body) // 10)
        client.send(compressed)
        self.assertTrue(client.closed)
        self.assertEqual(
            codec.decode(client.raw()),
            frame(ERROR, b"E_BAD_MESSAGE PUB message too big 8388608 > 1048576"),
        )
        self.assertIsNone(self.broker.find_topic("t"))

    def test_disabled_on_server(self) -> None:
        """With the codec off on the server it is declined and nothing is compressed."""
        self.make_factory(**{self.kind: False})
        client = self.connect()
        client.send(negotiate(**{self.kind: True}))
        _, data = client.take_frame()
        self.assertFalse(json.loads(data)[self.kind])
        self.clock.advance(0)
        client.send(b"SUB t c\n")
        self.assertEqual(client.raw(), OK)

    def test_needs_feature_negotiation(self) -> None:
        """Without feature_negotiation the request is ignored: a plain OK, no compression."""
        client = self.connect()
        client.send(identify(**{self.kind: True}))
        self.clock.advance(0)
        self.assertEqual(client.raw(), OK)
        client.send(b"SUB t c\n")
        self.assertEqual(client.raw(), OK)
        self.assertFalse(getattr(client.protocol, self.kind))


class SnappyTests(CompressionMixin, UpgradeTestCase):
    """IDENTIFY snappy: the snappy framing format both ways."""

    kind = "snappy"

    def test_corrupt_input_closes(self) -> None:
        """Snappy input without the stream identifier closes the connection."""
        client, codec = self.upgraded()
        client.send(b"\x00\x10\x00\x00" + b"\x01" * 16)
        self.assertTrue(client.closed)
        self.assertTrue(client.protocol.dead)

    def test_bad_checksum_closes(self) -> None:
        """A snappy chunk whose CRC does not match closes the connection."""
        client, codec = self.upgraded()
        chunk = bytearray(codec.encode(b"SUB t c\n"))
        chunk[14] ^= 0xFF  # the first data chunk's checksum (after the 10-byte identifier)
        client.send(bytes(chunk))
        self.assertTrue(client.closed)
        self.assertIsNone(self.broker.find_topic("t"))


class DeflateTests(CompressionMixin, UpgradeTestCase):
    """IDENTIFY deflate: raw DEFLATE both ways, at the negotiated level."""

    kind = "deflate"

    def test_corrupt_input_closes(self) -> None:
        """Bytes that are not DEFLATE close the connection."""
        client, codec = self.upgraded()
        client.send(b"\xff\xff\xff\xff")
        self.assertTrue(client.closed)
        self.assertTrue(client.protocol.dead)

    def test_levels(self) -> None:
        """deflate_level is granted up to --max-deflate-level; absent or 0 means 6."""
        self.make_factory(max_deflate_level=7)
        granted = []
        for level in (1, 6, 9, 0):
            client = self.connect()
            client.send(negotiate(deflate=True, deflate_level=level))
            _, data = client.take_frame()
            granted.append(json.loads(data)["deflate_level"])
        self.assertEqual(granted, [1, 6, 7, 6])

    def test_level_one_output(self) -> None:
        """At deflate_level 1 the server sends what zlib makes at level 1, sync-flushed per write."""
        client = self.connect()
        client.send(negotiate(deflate=True, deflate_level=1))
        client.take_frame()
        self.clock.advance(0)
        client.send(DeflateClientCodec(1).encode(b"SUB t c\nRDY 1\n"))
        self.clock.advance(0)
        body = b"level one " * 500
        self.publish(b"t", body)
        self.clock.advance(0)
        raw = client.raw()
        expected = zlib.compressobj(1, zlib.DEFLATED, -15)
        writes = [OK, OK]
        wire = b"".join(expected.compress(w) + expected.flush(zlib.Z_SYNC_FLUSH) for w in writes)
        self.assertEqual(raw[: len(wire)], wire)
        decoded = zlib.decompressobj(-15).decompress(raw)
        [(_, data)] = frames(decoded[2 * len(OK) :])
        self.assertEqual(decode_message(data)[3], body)
        message_frame = decoded[2 * len(OK) :]
        self.assertEqual(raw[len(wire) :], expected.compress(message_frame) + expected.flush(zlib.Z_SYNC_FLUSH))


class BothCompressionsTests(UpgradeTestCase):
    """Snappy and deflate cannot both be had."""

    def test_both_refused(self) -> None:
        """Asking for snappy and deflate is the fatal E_IDENTIFY_FAILED, in clear."""
        client = self.connect()
        client.send(negotiate(snappy=True, deflate=True))
        self.clock.advance(0)
        self.assertEqual(
            client.raw(),
            frame(ERROR, b"E_IDENTIFY_FAILED cannot enable both deflate and snappy compression"),
        )
        self.assertTrue(client.closed)

    def test_both_asked_one_offered(self) -> None:
        """Asking for both when the server offers only deflate grants deflate."""
        self.make_factory(snappy=False)
        client = self.connect()
        client.send(negotiate(snappy=True, deflate=True))
        _, data = client.take_frame()
        reply = json.loads(data)
        self.assertEqual((reply["snappy"], reply["deflate"]), (False, True))
