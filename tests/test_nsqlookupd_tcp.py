"""
Tests for txnsq.nsqlookupd.tcp: the V1 protocol adapter, driven byte for
byte through StringTransport, with time from task.Clock, checked against
the registration database.
"""

from __future__ import annotations

import json
import struct
from typing import Any, Dict, List, cast

from twisted.internet.address import IPv4Address, IPv6Address
from twisted.internet.error import ConnectionDone
from twisted.internet.task import Clock
from twisted.internet.testing import StringTransport
from twisted.logger import ILogObserver, LogLevel, formatEvent, globalLogPublisher
from twisted.python.failure import Failure
from twisted.trial.unittest import SynchronousTestCase

from txnsq.version import NSQ_VERSION
from txnsq.nsqlookupd.core import NSQLookupd
from txnsq.nsqlookupd.options import NSQLookupdOptions
from txnsq.nsqlookupd.registration_db import CHANNEL, CLIENT, TOPIC, Registration
from txnsq.nsqlookupd.tcp import LookupFactory


def reply(data: bytes) -> bytes:
    """One V1 reply, built independently of the code under test."""
    return struct.pack(">L", len(data)) + data


OK = reply(b"OK")


def identify_command(port: int = 14150, **fields: Any) -> bytes:
    """An IDENTIFY command with a producer's JSON body."""
    document: Dict[str, Any] = {
        "broadcast_address": "127.0.0.1",
        "hostname": "producer-host",
        "tcp_port": port,
        "http_port": port + 1,
        "version": "1.3.0",
    }
    document.update(fields)
    body = json.dumps(document).encode()
    return b"IDENTIFY\n" + struct.pack(">l", len(body)) + body


class Producer:
    """One producer connection to the protocol under test."""

    def __init__(self, factory: LookupFactory, port: int, magic: bool = True) -> None:
        self.transport = StringTransport(peerAddress=IPv4Address("TCP", "127.0.0.1", port))
        self.protocol = factory.buildProtocol(self.transport.getPeer())
        self.protocol.makeConnection(self.transport)
        if magic:
            self.send(b"  V1")

    @property
    def id(self) -> str:
        """The producer's id in the database (its host:port)."""
        return self.protocol.remote_address

    def send(self, data: bytes) -> None:
        """Deliver bytes from the producer to nsqlookupd."""
        self.protocol.dataReceived(data)

    def received(self) -> bytes:
        """The bytes written to the producer since the last call."""
        data = self.transport.value()
        self.transport.clear()
        return data

    def identify(self, **fields: Any) -> Dict[str, Any]:
        """IDENTIFY and return the decoded reply."""
        self.send(identify_command(**fields))
        data = self.received()
        (size,) = struct.unpack(">L", data[:4])
        if len(data) != 4 + size:
            raise AssertionError("not one reply: %r" % (data,))
        return json.loads(data[4:])  # type: ignore[no-any-return]

    @property
    def closed(self) -> bool:
        """Whether nsqlookupd closed (or is closing) the connection."""
        return bool(self.transport.disconnecting)

    def lose(self) -> None:
        """The connection ends."""
        self.protocol.connectionLost(Failure(ConnectionDone()))


class ProtocolTestCase(SynchronousTestCase):
    """A lookupd on a Clock, a factory, and helpers."""

    def setUp(self) -> None:
        self.clock = Clock()
        self.clock.advance(1000)
        self.lookupd = NSQLookupd(NSQLookupdOptions(broadcast_address="lookup-host"), self.clock)
        self.lookupd.tcp_port = 4160
        self.lookupd.http_port = 4161
        self.lookupd.hostname = "lookup-os-host"
        self.factory = LookupFactory(self.lookupd)
        self.events: List[Dict[str, Any]] = []
        observer = cast(ILogObserver, self.events.append)
        globalLogPublisher.addObserver(observer)
        self.addCleanup(globalLogPublisher.removeObserver, observer)

    def producer(self, port: int = 50000, identified: bool = False) -> Producer:
        producer = Producer(self.factory, port)
        if identified:
            producer.identify()
        return producer

    def producers(self, category: str, key: str, subkey: str) -> List[str]:
        return [p.peer.id for p in self.lookupd.db.find_producers(category, key, subkey)]

    def registrations(self) -> List[Registration]:
        return sorted(self.lookupd.db.registrations())

    def assertFatal(self, producer: Producer, text: bytes) -> None:
        self.assertEqual(producer.received(), reply(text))
        self.assertTrue(producer.closed)

    def log_texts(self) -> List[str]:
        return [formatEvent(event) for event in self.events]


class MagicTests(ProtocolTestCase):
    """The four-byte protocol magic."""

    def test_wrong_magic(self) -> None:
        """A wrong magic gets a bare size-prefixed E_BAD_PROTOCOL, then close."""
        producer = Producer(self.factory, 1, magic=False)
        producer.send(b"  V2")
        self.assertFatal(producer, b"E_BAD_PROTOCOL")

    def test_magic_in_pieces(self) -> None:
        """The magic may arrive a byte at a time, with commands after it."""
        producer = Producer(self.factory, 1, magic=False)
        for byte in b"  V":
            producer.send(bytes([byte]))
        self.assertEqual(producer.received(), b"")
        producer.send(b"1PING\n")
        self.assertEqual(producer.received(), OK)

    def test_nothing_after_bad_magic(self) -> None:
        """Bytes after a wrong magic are not read."""
        producer = Producer(self.factory, 1, magic=False)
        producer.send(b"  V2PING\n")
        self.assertFatal(producer, b"E_BAD_PROTOCOL")
        producer.send(b"PING\n")
        self.assertEqual(producer.received(), b"")


class PingTests(ProtocolTestCase):
    """PING."""

    def test_ping_before_identify(self) -> None:
        """PING before IDENTIFY is OK and registers nothing."""
        producer = self.producer()
        producer.send(b"PING\n")
        self.assertEqual(producer.received(), OK)
        self.assertFalse(producer.closed)
        self.assertEqual(self.registrations(), [])

    def test_ping_updates_last_update(self) -> None:
        """An identified producer's PING moves its last_update to now."""
        producer = self.producer(identified=True)
        peer = producer.protocol.peer
        assert peer is not None
        self.assertEqual(peer.last_update, 1000)
        self.clock.advance(15)
        producer.send(b"PING\n")
        self.assertEqual(producer.received(), OK)
        self.assertEqual(peer.last_update, 1015)
        self.assertIn("CLIENT(127.0.0.1:50000): pinged (last ping 15s)", self.log_texts())

    def test_whitespace(self) -> None:
        """Whitespace around a command is trimmed."""
        producer = self.producer()
        producer.send(b"  PING \r\nPING\t\n")
        self.assertEqual(producer.received(), OK + OK)

    def test_pipelined(self) -> None:
        """Commands sent together are answered in order."""
        producer = self.producer()
        producer.send(identify_command() + b"REGISTER t\nPING\n")
        data = producer.received()
        self.assertTrue(data.endswith(OK + OK))
        self.assertEqual(self.producers(TOPIC, "t", ""), [producer.id])


class IdentifyTests(ProtocolTestCase):
    """IDENTIFY."""

    def test_reply(self) -> None:
        """The reply is nsqlookupd's own address, hostname, ports and version."""
        producer = self.producer()
        self.assertEqual(
            producer.identify(),
            {
                "broadcast_address": "lookup-host",
                "hostname": "lookup-os-host",
                "http_port": 4161,
                "tcp_port": 4160,
                "version": NSQ_VERSION,
            },
        )
        self.assertFalse(producer.closed)

    def test_reply_bytes(self) -> None:
        """The reply's JSON keys are sorted, as Go marshals its map."""
        producer = self.producer()
        producer.send(identify_command())
        self.assertEqual(
            producer.received(),
            reply(
                b'{"broadcast_address":"lookup-host","hostname":"lookup-os-host",'
                b'"http_port":4161,"tcp_port":4160,"version":"' + NSQ_VERSION.encode() + b'"}'
            ),
        )

    def test_registers_client(self) -> None:
        """IDENTIFY registers the producer under client::, keyed by host:port."""
        producer = self.producer(port=50001, identified=True)
        self.assertEqual(producer.id, "127.0.0.1:50001")
        self.assertEqual(self.producers(CLIENT, "", ""), ["127.0.0.1:50001"])
        peer = self.lookupd.db.find_producers(CLIENT, "", "")[0].peer
        self.assertEqual(
            (peer.remote_address, peer.hostname, peer.broadcast_address, peer.tcp_port),
            ("127.0.0.1:50001", "producer-host", "127.0.0.1", 14150),
        )
        self.assertIn(
            "CLIENT(127.0.0.1:50001): IDENTIFY Address:127.0.0.1 TCP:14150 HTTP:14151 Version:1.3.0",
            self.log_texts(),
        )
        self.assertIn(
            "DB: client(127.0.0.1:50001) REGISTER category:client key: subkey:", self.log_texts()
        )

    def test_ipv6_peer_id(self) -> None:
        """An IPv6 producer's id is [host]:port, as Go writes it."""
        transport = StringTransport(peerAddress=IPv6Address("TCP", "::1", 7))
        protocol = self.factory.buildProtocol(transport.getPeer())
        protocol.makeConnection(transport)
        protocol.dataReceived(b"  V1" + identify_command())
        self.assertEqual(self.producers(CLIENT, "", ""), ["[::1]:7"])

    def test_body_in_pieces(self) -> None:
        """An IDENTIFY body split across reads is awaited."""
        producer = self.producer()
        data = identify_command()
        for index in range(len(data)):
            producer.send(data[index : index + 1])
        self.assertEqual(json.loads(producer.received()[4:])["tcp_port"], 4160)

    def test_identify_again(self) -> None:
        """A second IDENTIFY is fatal."""
        producer = self.producer(identified=True)
        producer.send(identify_command(port=1))
        self.assertFatal(producer, b"E_INVALID cannot IDENTIFY again")

    def test_identify_again_before_body(self) -> None:
        """A second IDENTIFY is refused as soon as its line arrives, before any body."""
        producer = self.producer(identified=True)
        producer.send(b"IDENTIFY\n")
        self.assertFatal(producer, b"E_INVALID cannot IDENTIFY again")

    def test_identify_again_bad_size(self) -> None:
        """A second IDENTIFY with a bad size is refused for being a second IDENTIFY."""
        producer = self.producer(identified=True)
        producer.send(b"IDENTIFY\n\xff\xff\xff\xff")
        self.assertFatal(producer, b"E_INVALID cannot IDENTIFY again")

    def test_missing_fields(self) -> None:
        """An IDENTIFY without a required field is fatal and registers nothing."""
        producer = self.producer()
        body = b'{"broadcast_address":"127.0.0.1","tcp_port":1}'
        producer.send(b"IDENTIFY\n" + struct.pack(">l", len(body)) + body)
        self.assertFatal(producer, b"E_BAD_BODY IDENTIFY missing fields")
        self.assertEqual(self.registrations(), [])
        self.assertIsNone(producer.protocol.peer)

    def test_invalid_json(self) -> None:
        """A body that is not JSON is fatal."""
        producer = self.producer()
        producer.send(b"IDENTIFY\n\x00\x00\x00\x05{nope")
        self.assertFatal(producer, b"E_BAD_BODY IDENTIFY failed to decode JSON body")

    def test_negative_size(self) -> None:
        """A negative body size is fatal (Go's process would panic)."""
        producer = self.producer()
        producer.send(b"IDENTIFY\n\x80\x00\x00\x00")
        self.assertFatal(producer, b"E_BAD_BODY IDENTIFY failed to read body size")


class RegisterTests(ProtocolTestCase):
    """REGISTER."""

    def test_before_identify(self) -> None:
        """REGISTER before IDENTIFY is fatal."""
        producer = self.producer()
        producer.send(b"REGISTER t c\n")
        self.assertFatal(producer, b"E_INVALID client must IDENTIFY")
        self.assertEqual(self.registrations(), [])

    def test_topic(self) -> None:
        """REGISTER topic registers the producer for the topic."""
        producer = self.producer(identified=True)
        producer.send(b"REGISTER t\n")
        self.assertEqual(producer.received(), OK)
        self.assertEqual(self.producers(TOPIC, "t", ""), [producer.id])
        self.assertEqual(self.lookupd.db.find_registrations(CHANNEL, "t", "*"), [])

    def test_topic_channel(self) -> None:
        """REGISTER topic channel registers both the channel and its topic."""
        producer = self.producer(identified=True)
        producer.send(b"REGISTER t c\n")
        self.assertEqual(producer.received(), OK)
        self.assertEqual(self.producers(CHANNEL, "t", "c"), [producer.id])
        self.assertEqual(self.producers(TOPIC, "t", ""), [producer.id])
        texts = self.log_texts()
        self.assertIn("DB: client(127.0.0.1:50000) REGISTER category:channel key:t subkey:c", texts)
        self.assertIn("DB: client(127.0.0.1:50000) REGISTER category:topic key:t subkey:", texts)

    def test_register_twice(self) -> None:
        """Registering again is OK and keeps one entry (and logs nothing new)."""
        producer = self.producer(identified=True)
        producer.send(b"REGISTER t\n")
        count = len(self.events)
        producer.send(b"REGISTER t\n")
        self.assertEqual(producer.received(), OK + OK)
        self.assertEqual(self.producers(TOPIC, "t", ""), [producer.id])
        self.assertEqual(self.events[count:], [])

    def test_shares_peer_info(self) -> None:
        """Every registration holds the same peer, so one PING refreshes them all."""
        producer = self.producer(identified=True)
        producer.send(b"REGISTER t c\n")
        self.clock.advance(400)
        producer.send(b"PING\n")
        for category, key, subkey in ((CLIENT, "", ""), (TOPIC, "t", ""), (CHANNEL, "t", "c")):
            found = self.lookupd.db.find_producers(category, key, subkey)
            self.assertEqual(len(self.lookupd.active(found)), 1)

    def test_bad_topic(self) -> None:
        """An invalid topic is fatal, quoted with single quotes."""
        producer = self.producer(identified=True)
        producer.send(b"REGISTER bad!topic\n")
        self.assertFatal(producer, b"E_BAD_TOPIC REGISTER topic name 'bad!topic' is not valid")

    def test_bad_channel(self) -> None:
        """An invalid channel is fatal and registers nothing, not even the topic."""
        producer = self.producer(identified=True)
        producer.send(b"REGISTER t bad!chan\n")
        self.assertFatal(producer, b"E_BAD_CHANNEL REGISTER channel name 'bad!chan' is not valid")
        self.assertEqual(self.lookupd.db.find_registrations(TOPIC, "t", ""), [])

    def test_no_params(self) -> None:
        """REGISTER without parameters is fatal."""
        producer = self.producer(identified=True)
        producer.send(b"REGISTER\n")
        self.assertFatal(producer, b"E_INVALID REGISTER insufficient number of params")

    def test_nothing_read_after_error(self) -> None:
        """Commands after a fatal error are not executed."""
        producer = self.producer(identified=True)
        producer.send(b"REGISTER\nREGISTER t\n")
        self.assertFatal(producer, b"E_INVALID REGISTER insufficient number of params")
        producer.send(b"REGISTER u\n")
        self.assertEqual(producer.received(), b"")
        self.assertEqual(self.lookupd.db.find_registrations(TOPIC, "*", ""), [])


class UnregisterTests(ProtocolTestCase):
    """UNREGISTER."""

    def test_before_identify(self) -> None:
        """UNREGISTER before IDENTIFY is fatal."""
        producer = self.producer()
        producer.send(b"UNREGISTER t\n")
        self.assertFatal(producer, b"E_INVALID client must IDENTIFY")

    def test_channel(self) -> None:
        """UNREGISTER topic channel removes the producer from the channel only."""
        producer = self.producer(identified=True)
        producer.send(b"REGISTER t c\nUNREGISTER t c\n")
        self.assertEqual(producer.received(), OK + OK)
        self.assertEqual(self.producers(CHANNEL, "t", "c"), [])
        self.assertEqual(self.producers(TOPIC, "t", ""), [producer.id])
        # The (now empty) channel registration stays, as in Go.
        self.assertEqual(
            self.lookupd.db.find_registrations(CHANNEL, "t", "*"), [Registration(CHANNEL, "t", "c")]
        )

    def test_ephemeral_channel_removed(self) -> None:
        """An ephemeral channel's registration goes with its last producer."""
        first = self.producer(port=1, identified=True)
        second = self.producer(port=2, identified=True)
        first.send(b"REGISTER t c#ephemeral\n")
        second.send(b"REGISTER t c#ephemeral\n")
        first.send(b"UNREGISTER t c#ephemeral\n")
        self.assertEqual(len(self.lookupd.db.find_registrations(CHANNEL, "t", "*")), 1)
        second.send(b"UNREGISTER t c#ephemeral\n")
        self.assertEqual(self.lookupd.db.find_registrations(CHANNEL, "t", "*"), [])
        self.assertFalse(first.closed or second.closed)

    def test_ephemeral_channel_never_registered(self) -> None:
        """UNREGISTER of an ephemeral channel nobody registered is OK and leaves nothing."""
        producer = self.producer(identified=True)
        producer.send(b"UNREGISTER t c#ephemeral\n")
        self.assertEqual(producer.received(), OK)
        self.assertEqual(self.lookupd.db.find_registrations(CHANNEL, "*", "*"), [])

    def test_topic_removes_channels(self) -> None:
        """UNREGISTER topic also removes this producer's channels of it, with a warning."""
        producer = self.producer(port=1, identified=True)
        other = self.producer(port=2, identified=True)
        producer.send(b"REGISTER t a\nREGISTER t b\nREGISTER u a\n")
        other.send(b"REGISTER t a\n")
        producer.received()
        producer.send(b"UNREGISTER t\n")
        self.assertEqual(producer.received(), OK)
        self.assertEqual(self.producers(TOPIC, "t", ""), [other.id])
        self.assertEqual(self.producers(CHANNEL, "t", "a"), [other.id])
        self.assertEqual(self.producers(CHANNEL, "t", "b"), [])
        self.assertEqual(self.producers(CHANNEL, "u", "a"), [producer.id])
        warnings = [
            e for e in self.events if e.get("log_level") == LogLevel.warn
        ]
        self.assertEqual(len(warnings), 2)
        self.assertIn(
            "client(127.0.0.1:1) unexpected UNREGISTER category:channel key:t subkey:b",
            self.log_texts(),
        )

    def test_never_registered(self) -> None:
        """UNREGISTER of something never registered is OK."""
        producer = self.producer(identified=True)
        producer.send(b"UNREGISTER never seen\n")
        self.assertEqual(producer.received(), OK)
        self.assertFalse(producer.closed)

    def test_bad_names(self) -> None:
        """UNREGISTER checks names as REGISTER does, naming itself."""
        producer = self.producer(identified=True)
        producer.send(b"UNREGISTER t bad!\n")
        self.assertFatal(producer, b"E_BAD_CHANNEL UNREGISTER channel name 'bad!' is not valid")


class InvalidCommandTests(ProtocolTestCase):
    """Commands nsqlookupd does not know."""

    def test_unknown(self) -> None:
        """An unknown command is fatal E_INVALID naming it."""
        producer = self.producer()
        producer.send(b"FOO bar\n")
        self.assertFatal(producer, b"E_INVALID invalid command FOO")

    def test_lowercase(self) -> None:
        """Commands are case-sensitive."""
        producer = self.producer()
        producer.send(b"ping\n")
        self.assertFatal(producer, b"E_INVALID invalid command ping")

    def test_empty_line(self) -> None:
        """An empty line is an invalid command with an empty name."""
        producer = self.producer()
        producer.send(b"\n")
        self.assertFatal(producer, b"E_INVALID invalid command ")

    def test_raw_bytes_echoed(self) -> None:
        """A command name that is not UTF-8 is echoed byte for byte."""
        producer = self.producer()
        producer.send(b"\xff\x00\n")
        self.assertFatal(producer, b"E_INVALID invalid command \xff\x00")

    def test_line_too_long(self) -> None:
        """A line that never ends is cut off with a fatal E_INVALID."""
        producer = self.producer()
        producer.send(b"x" * (1 << 20))
        self.assertFatal(producer, b"E_INVALID command line too long")


class DisconnectTests(ProtocolTestCase):
    """A producer's connection ends."""

    def test_unregisters_everything(self) -> None:
        """Its producer entries go; the registrations themselves stay, as in Go."""
        producer = self.producer(identified=True)
        producer.send(b"REGISTER t c\nREGISTER u\n")
        producer.lose()
        self.assertEqual(self.producers(CLIENT, "", ""), [])
        self.assertEqual(self.producers(TOPIC, "t", ""), [])
        self.assertEqual(self.producers(CHANNEL, "t", "c"), [])
        self.assertEqual(
            self.registrations(),
            sorted(
                [
                    Registration(CLIENT, "", ""),
                    Registration(TOPIC, "t", ""),
                    Registration(CHANNEL, "t", "c"),
                    Registration(TOPIC, "u", ""),
                ]
            ),
        )
        texts = self.log_texts()
        self.assertIn("CLIENT(127.0.0.1:50000): closing", texts)
        for line in (
            "DB: client(127.0.0.1:50000) UNREGISTER category:client key: subkey:",
            "DB: client(127.0.0.1:50000) UNREGISTER category:channel key:t subkey:c",
            "DB: client(127.0.0.1:50000) UNREGISTER category:topic key:t subkey:",
            "DB: client(127.0.0.1:50000) UNREGISTER category:topic key:u subkey:",
        ):
            self.assertIn(line, texts)

    def test_after_fatal_error(self) -> None:
        """A producer dropped for an error is unregistered when the connection ends."""
        producer = self.producer(identified=True)
        producer.send(b"REGISTER t\nFOO\n")
        self.assertTrue(producer.closed)
        self.assertEqual(self.producers(TOPIC, "t", ""), [producer.id])
        producer.lose()
        self.assertEqual(self.producers(TOPIC, "t", ""), [])

    def test_unidentified(self) -> None:
        """A connection that never identified leaves the database alone."""
        producer = self.producer()
        producer.lose()
        self.assertEqual(self.registrations(), [])

    def test_others_stay(self) -> None:
        """Other producers' entries are untouched."""
        first = self.producer(port=1, identified=True)
        second = self.producer(port=2, identified=True)
        first.send(b"REGISTER t c\n")
        second.send(b"REGISTER t c\n")
        first.lose()
        self.assertEqual(self.producers(CHANNEL, "t", "c"), [second.id])
        self.assertEqual(self.producers(CLIENT, "", ""), [second.id])

    def test_factory_tracks_clients(self) -> None:
        """The factory knows its open connections and can close them all."""
        first = self.producer(port=1)
        second = self.producer(port=2)
        self.assertEqual(self.factory.clients, {first.protocol, second.protocol})
        first.lose()
        self.assertEqual(self.factory.clients, {second.protocol})
        self.factory.close_all()
        self.assertTrue(second.closed)


class IsolationTests(ProtocolTestCase):
    """One bad client never affects another."""

    def test_bad_client_alone(self) -> None:
        """A client's fatal error closes only its own connection."""
        good = self.producer(port=1, identified=True)
        bad = self.producer(port=2, identified=True)
        good.send(b"REGISTER t")
        bad.send(b"REGISTER bad!\n")
        self.assertTrue(bad.closed)
        good.send(b" c\n")
        self.assertEqual(good.received(), OK)
        self.assertFalse(good.closed)
        self.assertEqual(self.producers(CHANNEL, "t", "c"), [good.id])

    def test_internal_error_contained(self) -> None:
        """An unexpected exception drops that connection; nothing escapes dataReceived."""
        good = self.producer(port=1, identified=True)
        bad = self.producer(port=2, identified=True)

        def broken(command: object) -> bytes:
            raise RuntimeError("bug")

        bad.protocol._handlers[b"REGISTER"] = broken
        bad.send(b"REGISTER t\n")
        self.assertTrue(bad.closed)
        self.assertEqual(len(self.flushLoggedErrors(RuntimeError)), 1)
        good.send(b"REGISTER t\n")
        self.assertEqual(good.received(), OK)
        self.assertEqual(self.producers(TOPIC, "t", ""), [good.id])
