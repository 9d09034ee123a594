"""
Tests for txnsq.nsqd.lookup_peer: one nsqd's connection to one nsqlookupd,
driven on a MemoryReactorClock with StringTransports standing for the
connections and the test playing the lookupd's replies.
"""

from __future__ import annotations

import json
import struct
from typing import Any, Dict, Iterable, List, Mapping, Tuple

from twisted.internet.error import ConnectionDone, ConnectionRefusedError
from twisted.internet.testing import MemoryReactorClock, StringTransport
from twisted.logger import Logger, formatEvent
from twisted.python.failure import Failure
from twisted.trial.unittest import SynchronousTestCase

from txnsq.nsqd.lookup_peer import LookupdInfo, LookupPeer
from txnsq.protocol.lookup_v1 import encode_response

#: The lookupd's IDENTIFY reply, as Go's nsqlookupd sends it.
LOOKUPD_IDENTIFY = (
    b'{"broadcast_address":"lookupd.example","hostname":"lookupd","http_port":4161,'
    b'"tcp_port":4160,"version":"1.3.0"}'
)

IDENTITY = {
    "version": "9.9.9",
    "tcp_port": 4150,
    "http_port": 4151,
    "hostname": "nsqd-host",
    "broadcast_address": "nsqd.example",
}


def identify_bytes(identity: Mapping[str, Any]) -> bytes:
    """IDENTIFY as Go's nsqd writes it: sorted keys, compact JSON, 4-byte size."""
    body = json.dumps(dict(sorted(identity.items())), separators=(",", ":")).encode()
    return b"IDENTIFY\n" + struct.pack(">L", len(body)) + body


class LookupPeerTestCase(SynchronousTestCase):
    """A LookupPeer to 127.0.0.1:4160 on a MemoryReactorClock."""

    def setUp(self) -> None:
        self.reactor = MemoryReactorClock()
        self.identity: Dict[str, Any] = dict(IDENTITY)
        self.registered: List[Tuple[str, str]] = []
        self.events: List[Dict[str, Any]] = []
        self.peer = self.make_peer()

    def make_peer(self, **kwargs: Any) -> LookupPeer:
        def registrations() -> Iterable[Tuple[str, str]]:
            return list(self.registered)

        peer = LookupPeer(
            "127.0.0.1:4160",
            self.reactor,
            lambda: self.identity,
            registrations,
            retry_policy=lambda attempt: 1.0,
            **kwargs,
        )
        peer.log = Logger(observer=self.events.append)  # type: ignore[misc,arg-type]
        return peer

    def logged(self) -> List[str]:
        return [formatEvent(event) for event in self.events]

    def connect(self) -> Tuple[StringTransport, Any]:
        """Complete the connection attempt the peer made last."""
        host, port, factory, timeout, bind = self.reactor.tcpClients[-1]
        self.assertEqual((host, port), ("127.0.0.1", 4160))
        protocol: Any = factory.buildProtocol(None)
        transport = StringTransport()
        protocol.makeConnection(transport)
        return transport, protocol

    def take(self, transport: StringTransport) -> bytes:
        """What the peer wrote since the last take."""
        data = transport.value()
        transport.clear()
        return data

    def reply(self, protocol: Any, *replies: bytes) -> None:
        protocol.dataReceived(b"".join(encode_response(reply) for reply in replies))

    def lose(self, protocol: Any) -> None:
        protocol.connectionLost(Failure(ConnectionDone()))

    def identified(self) -> Tuple[StringTransport, Any]:
        """Start the peer, connect it and answer its IDENTIFY."""
        self.peer.startService()
        transport, protocol = self.connect()
        self.take(transport)
        self.reply(protocol, LOOKUPD_IDENTIFY)
        return transport, protocol


class ConnectTests(LookupPeerTestCase):
    """Connecting, IDENTIFY and the initial registrations."""

    def test_magic_and_identify(self) -> None:
        """On connecting the peer sends the V1 magic and IDENTIFY with sorted JSON keys."""
        self.peer.startService()
        transport, protocol = self.connect()
        self.assertEqual(
            transport.value(),
            b"  V1IDENTIFY\n\x00\x00\x00\x6e"
            b'{"broadcast_address":"nsqd.example","hostname":"nsqd-host",'
            b'"http_port":4151,"tcp_port":4150,"version":"9.9.9"}',
        )
        self.assertIn("LOOKUP connecting to 127.0.0.1:4160", self.logged())

    def test_nothing_registered_before_identify_reply(self) -> None:
        """Registrations wait for the lookupd's IDENTIFY reply, as Go's do."""
        self.registered = [("t", "")]
        self.peer.startService()
        transport, protocol = self.connect()
        self.take(transport)
        self.assertFalse(self.peer.identified)
        self.assertFalse(self.peer.send(b"REGISTER u\n"))
        self.peer.ping()
        self.assertEqual(transport.value(), b"")

    def test_initial_registration_order(self) -> None:
        """Once identified, every topic and channel is registered in the order given."""
        self.registered = [("a", ""), ("b", "c1"), ("b", "c2")]
        transport, protocol = self.identified()
        self.assertTrue(self.peer.identified)
        self.assertEqual(
            transport.value(), b"REGISTER a\nREGISTER b c1\nREGISTER b c2\n"
        )
        self.reply(protocol, b"OK", b"OK", b"OK")
        self.assertFalse(transport.disconnecting)

    def test_lookupd_info(self) -> None:
        """The IDENTIFY reply gives the lookupd's HTTP address."""
        self.identified()
        info = self.peer.info
        assert info is not None
        self.assertEqual(info.http_address(), "lookupd.example:4161")
        self.assertEqual((info.tcp_port, info.version), (4160, "1.3.0"))
        self.assertIn(
            "LOOKUPD(127.0.0.1:4160): peer info {TCPPort:4160 HTTPPort:4161 "
            "Version:1.3.0 BroadcastAddress:lookupd.example}",
            self.logged(),
        )

    def test_identify_error_reply(self) -> None:
        """An error reply to IDENTIFY is logged and the connection dropped."""
        self.registered = [("t", "")]
        self.peer.startService()
        transport, protocol = self.connect()
        self.take(transport)
        self.reply(protocol, b"E_INVALID")
        self.assertTrue(transport.disconnecting)
        self.assertEqual(transport.value(), b"")
        self.assertFalse(self.peer.identified)
        self.assertIn("LOOKUPD(127.0.0.1:4160): lookupd returned E_INVALID", self.logged())

    def test_identify_garbage_reply(self) -> None:
        """An IDENTIFY reply that is not Go's JSON drops the connection."""
        for garbage in (b"not json", b"[1]", b'{"http_port":"4161"}'):
            self.peer.startService()
            transport, protocol = self.connect()
            self.reply(protocol, garbage)
            self.assertTrue(transport.disconnecting, garbage)
            self.assertFalse(self.peer.identified)
            self.lose(protocol)
            self.peer.stopService()
        self.assertIn(
            "LOOKUPD(127.0.0.1:4160): parsing response - not json", self.logged()
        )

    def test_no_broadcast_address(self) -> None:
        """An IDENTIFY reply without broadcast address is logged; no HTTP address is known."""
        self.peer.startService()
        transport, protocol = self.connect()
        self.reply(protocol, b'{"http_port":4161}')
        self.assertTrue(self.peer.identified)
        assert self.peer.info is not None
        self.assertIsNone(self.peer.info.http_address())
        self.assertIn("LOOKUPD(127.0.0.1:4160): no broadcast address", self.logged())

    def test_identity_asked_per_connection(self) -> None:
        """IDENTIFY carries the identity as it is when each connection is made."""
        transport, protocol = self.identified()
        self.identity["tcp_port"] = 5150
        self.lose(protocol)
        self.reactor.advance(1)
        transport, protocol = self.connect()
        self.assertIn(b'"tcp_port":5150', transport.value())


class CommandTests(LookupPeerTestCase):
    """REGISTER/UNREGISTER, PING and replies."""

    def test_forwarded_in_order(self) -> None:
        """Commands are written as given, pipelined, and their OKs matched in order."""
        transport, protocol = self.identified()
        self.assertTrue(self.peer.send(b"REGISTER t\n", "topic"))
        self.assertTrue(self.peer.send(b"REGISTER t c\n", "channel"))
        self.assertTrue(self.peer.send(b"UNREGISTER t c\n", "channel"))
        self.assertEqual(
            self.take(transport), b"REGISTER t\nREGISTER t c\nUNREGISTER t c\n"
        )
        self.reply(protocol, b"OK", b"OK")
        self.reply(protocol, b"OK")
        self.assertFalse(transport.disconnecting)
        self.assertIn("LOOKUPD(127.0.0.1:4160): channel REGISTER t c", self.logged())

    def test_error_reply_logged(self) -> None:
        """An error reply to a command is logged and the connection stays."""
        transport, protocol = self.identified()
        self.peer.send(b"REGISTER t\n", "topic")
        self.peer.send(b"REGISTER u\n", "topic")
        self.reply(protocol, b"E_BAD_TOPIC REGISTER topic name 't' is not valid", b"OK")
        self.assertFalse(transport.disconnecting)
        self.assertIn(
            "LOOKUPD(127.0.0.1:4160): REGISTER t - E_BAD_TOPIC REGISTER topic name 't' is not valid",
            self.logged(),
        )

    def test_unexpected_reply(self) -> None:
        """A reply to no command drops the connection (replies would be out of step)."""
        transport, protocol = self.identified()
        self.reply(protocol, b"OK")
        self.assertTrue(transport.disconnecting)
        self.assertFalse(self.peer.send(b"REGISTER t\n"))

    def test_oversized_reply(self) -> None:
        """A reply claiming more than the maximum size drops the connection."""
        self.peer = self.make_peer(max_reply_size=100)
        transport, protocol = self.identified()
        self.peer.send(b"REGISTER t\n")
        protocol.dataReceived(struct.pack(">L", 101))
        self.assertTrue(transport.disconnecting)

    def test_split_reply(self) -> None:
        """A reply arriving a byte at a time is read whole."""
        transport, protocol = self.identified()
        self.peer.send(b"REGISTER t\n")
        for byte in encode_response(b"E_FAIL"):
            protocol.dataReceived(bytes([byte]))
        self.assertIn("LOOKUPD(127.0.0.1:4160): REGISTER t - E_FAIL", self.logged())

    def test_reply_timeout(self) -> None:
        """A command not answered in time drops the connection; answered ones never do."""
        transport, protocol = self.identified()
        self.peer.send(b"REGISTER t\n")
        self.reactor.advance(self.peer.reply_timeout - 0.5)
        self.reply(protocol, b"OK")
        self.reactor.advance(10 * self.peer.reply_timeout)
        self.assertFalse(transport.disconnecting)
        self.peer.send(b"REGISTER u\n")
        self.reactor.advance(self.peer.reply_timeout)
        self.assertTrue(transport.disconnecting)

    def test_ping_every_15_seconds(self) -> None:
        """An identified peer PINGs every 15 seconds."""
        transport, protocol = self.identified()
        self.reactor.advance(14.9)
        self.assertEqual(self.take(transport), b"")
        self.reactor.advance(0.1)
        self.assertEqual(self.take(transport), b"PING\n")
        self.reply(protocol, b"OK")
        self.reactor.advance(15)
        self.assertEqual(self.take(transport), b"PING\n")

    def test_no_ping_while_disconnected(self) -> None:
        """Nothing is sent while the connection is down."""
        transport, protocol = self.identified()
        self.lose(protocol)
        self.assertFalse(self.peer.identified)
        self.assertFalse(self.peer.send(b"REGISTER t\n"))
        self.reactor.advance(0.5)
        self.peer.ping()
        self.assertEqual(transport.value(), b"")


class ReconnectTests(LookupPeerTestCase):
    """Losing the lookupd and finding it again."""

    def test_reconnect_registers_everything(self) -> None:
        """After a lost connection the peer reconnects and registers the whole state again."""
        self.registered = [("t", "")]
        transport, protocol = self.identified()
        self.reply(protocol, b"OK")
        self.lose(protocol)
        self.assertIn("LOOKUPD(127.0.0.1:4160): connection lost", self.logged())
        # Changes while disconnected are dropped; the new state is registered.
        self.registered = [("t", "c"), ("u", "")]
        self.assertFalse(self.peer.send(b"REGISTER t c\n"))
        self.reactor.advance(1)
        transport, protocol = self.connect()
        self.assertEqual(self.take(transport), b"  V1" + identify_bytes(self.identity))
        self.reply(protocol, LOOKUPD_IDENTIFY)
        self.assertEqual(self.take(transport), b"REGISTER t c\nREGISTER u\n")

    def test_connection_refused_retried(self) -> None:
        """A failed connection attempt is retried after the backoff."""
        self.peer.startService()
        host, port, factory, timeout, bind = self.reactor.tcpClients[-1]
        self.assertEqual(timeout, 1.0)
        factory.clientConnectionFailed(None, Failure(ConnectionRefusedError()))  # type: ignore[arg-type]
        self.assertEqual(len(self.reactor.tcpClients), 1)
        self.reactor.advance(1)
        self.assertEqual(len(self.reactor.tcpClients), 2)
        self.connect()

    def test_stop(self) -> None:
        """Stopping closes the connection, and leaves no timer behind."""
        transport, protocol = self.identified()
        self.peer.send(b"REGISTER t\n")
        stopped = self.peer.stopService()
        self.assertTrue(transport.disconnecting)
        self.assertNoResult(stopped)
        self.lose(protocol)
        self.successResultOf(stopped)
        self.assertEqual(self.reactor.getDelayedCalls(), [])
        self.assertFalse(self.peer.running)

    def test_stop_while_connecting(self) -> None:
        """Stopping before the connection is made cancels the attempt."""
        self.peer.startService()
        stopped = self.peer.stopService()
        self.successResultOf(stopped)
        self.assertEqual(self.reactor.getDelayedCalls(), [])


class AddressTests(SynchronousTestCase):
    """Peers made from addresses."""

    def test_invalid_address_refused(self) -> None:
        """A peer cannot be made for an address that is not host:port."""
        self.assertRaises(
            ValueError, LookupPeer, "nope", MemoryReactorClock(), dict, list
        )

    def test_ipv6_peer(self) -> None:
        """An IPv6 literal is connected to over IPv6, without name resolution."""
        reactor = MemoryReactorClock()
        peer = LookupPeer("[::1]:4160", reactor, dict, list)
        peer.startService()
        self.assertEqual(reactor.tcpClients[-1][:2], ("::1", 4160))
        peer.stopService()


class LookupdInfoTests(SynchronousTestCase):
    """LookupdInfo.from_reply reads the reply as Go's json.Unmarshal into peerInfo."""

    def test_fields(self) -> None:
        """Known fields are read; unknown ones and nulls ignored; keys match case-insensitively."""
        info = LookupdInfo.from_reply(
            b'{"Broadcast_Address":"h","http_port":1,"tcp_port":null,"extra":[1],"version":"v"}'
        )
        self.assertEqual(
            (info.broadcast_address, info.http_port, info.tcp_port, info.version),
            ("h", 1, 0, "v"),
        )

    def test_null(self) -> None:
        """JSON null is an empty peerInfo."""
        self.assertIsNone(LookupdInfo.from_reply(b"null").http_address())

    def test_wrong_types(self) -> None:
        """Fields of the wrong JSON type are refused."""
        for reply in (b'{"http_port":true}', b'{"http_port":1.5}', b'{"version":1}', b'"x"'):
            self.assertRaises(ValueError, LookupdInfo.from_reply, reply)

    def test_ipv6_http_address(self) -> None:
        """An IPv6 broadcast address is bracketed in the HTTP address."""
        self.assertEqual(LookupdInfo(http_port=4161, broadcast_address="::1").http_address(), "[::1]:4161")
