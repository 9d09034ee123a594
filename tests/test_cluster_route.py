"""
Tests for :mod:`txnsq.cluster.route`: one route connection's handshake,
keepalive, interest, errors and backpressure (StringTransport and Clock).
"""

from __future__ import annotations

from typing import Any, List

from twisted.internet.testing import StringTransport
from twisted.trial.unittest import SynchronousTestCase

from tests.cluster_fakes import dialed_route, make_node, server_info, written
from txnsq.cluster.route import AWAIT_CONNECT, AWAIT_INFO, CLOSED, ROUTED
from txnsq.protocol.nats_route import (
    Connect,
    Err,
    Info,
    Ping,
    Pong,
    RouteMessage,
    RouteMessages,
    RouteSub,
    encode_connect,
)


class DialedRouteTests(SynchronousTestCase):
    """A route this node dialed."""

    def test_handshake_order(self) -> None:
        """After the server's INFO: CONNECT, then our INFO, our interest, a PING."""
        node, clock, dials = make_node()
        node.start(["nats-route://127.0.0.1:6222"])
        node.subscribe("$G", "nsq.>", lambda route, batch: len(batch.payloads))
        protocol, transport = dials.accept(node)
        self.assertEqual(transport.value(), b"")
        protocol.dataReceived(server_info("SA"))
        ops = written(transport)
        self.assertEqual([type(op) for op in ops], [Connect, Info, RouteSub, Ping])
        connect = ops[0]
        assert isinstance(connect, Connect)
        self.assertEqual(connect.fields["cluster"], "c1")
        self.assertTrue(connect.fields["headers"])
        for absent in ("lang", "route_pool_size", "compression", "lnoc"):
            self.assertNotIn(absent, connect.fields)
        info = ops[1]
        assert isinstance(info, Info)
        self.assertEqual((info.fields["host"], info.fields["port"]), ("127.0.0.1", 7000))
        self.assertEqual(info.fields["server_id"], node.server_id)
        for absent in ("route_pool_size", "compression", "lnoc"):
            self.assertNotIn(absent, info.fields)
        self.assertEqual(ops[2], RouteSub("$G", "nsq.>"))
        self.assertEqual(protocol.state, ROUTED)
        self.assertIs(node.routes["SA"], protocol)

    def test_ping_answered(self) -> None:
        """A PING from the server gets a PONG."""
        node, clock, dials = make_node()
        node.start(["nats-route://127.0.0.1:6222"])
        protocol, transport = dialed_route(node, dials, "SA")
        transport.clear()
        protocol.dataReceived(b"PING\r\n")
        self.assertEqual(transport.value(), b"PONG\r\n")

    def test_stale_connection(self) -> None:
        """Two keepalive PINGs unanswered: -ERR 'Stale Connection' and close."""
        node, clock, dials = make_node(ping_interval=30.0)
        node.start(["nats-route://127.0.0.1:6222"])
        protocol, transport = dialed_route(node, dials, "SA")
        clock.advance(30)
        self.assertFalse(transport.disconnecting)
        clock.advance(30)
        self.assertIn(b"-ERR 'Stale Connection'\r\n", transport.value())
        self.assertTrue(transport.disconnecting)

    def test_pong_keeps_alive(self) -> None:
        """PONGs keep the route up across many intervals."""
        node, clock, dials = make_node(ping_interval=30.0)
        node.start(["nats-route://127.0.0.1:6222"])
        protocol, transport = dialed_route(node, dials, "SA")
        for _ in range(5):
            protocol.dataReceived(b"PONG\r\n")
            clock.advance(30)
        self.assertFalse(transport.disconnecting)

    def test_interest_from_peer(self) -> None:
        """RS+ and RS- from the server update its interest table."""
        node, clock, dials = make_node()
        node.start(["nats-route://127.0.0.1:6222"])
        protocol, transport = dialed_route(node, dials, "SA")
        protocol.dataReceived(b"RS+ $G nsq.orders\r\nRS+ $G nsq.orders q 2\r\n")
        self.assertEqual(protocol.interest.match("$G", "nsq.orders"), (True, frozenset(["q"])))
        protocol.dataReceived(b"RS- $G nsq.orders\r\n")
        self.assertEqual(protocol.interest.match("$G", "nsq.orders"), (False, frozenset(["q"])))

    def test_bad_input_closes(self) -> None:
        """An unknown op gets nats-server's -ERR text and a close; the node counts it."""
        node, clock, dials = make_node()
        node.start(["nats-route://127.0.0.1:6222"])
        protocol, transport = dialed_route(node, dials, "SA")
        transport.clear()
        protocol.dataReceived(b"FOO\r\n")
        self.assertEqual(transport.value(), b"-ERR 'Unknown Protocol Operation'\r\n")
        self.assertTrue(transport.disconnecting)
        self.assertEqual(node.errors, 1)

    def test_err_from_peer_is_counted(self) -> None:
        """A -ERR from the server is recorded, not answered."""
        node, clock, dials = make_node()
        node.start(["nats-route://127.0.0.1:6222"])
        protocol, transport = dialed_route(node, dials, "SA")
        transport.clear()
        protocol.dataReceived(b"-ERR 'Authorization Violation'\r\n")
        self.assertEqual(protocol.error, "Authorization Violation")
        self.assertEqual(transport.value(), b"")
        self.assertEqual(node.errors, 1)

    def test_gossip_does_not_rename_peer(self) -> None:
        """An INFO about another server leaves the peer's own INFO as it was."""
        node, clock, dials = make_node()
        node.start(["nats-route://127.0.0.1:6222"])
        protocol, transport = dialed_route(node, dials, "SA")
        protocol.dataReceived(server_info("SC", 6333, ip="nats-route://127.0.0.1:6333/"))
        self.assertEqual(protocol.peer_info["server_id"], "SA")


class NoDelayTests(SynchronousTestCase):
    """Route connections send at once (Nagle's algorithm off)."""

    def test_no_delay(self) -> None:
        """A route's TCP connection has TCP_NODELAY set when made, dialed or accepted."""
        for dialed in (True, False):
            node, clock, dials = make_node()
            calls: List[bool] = []
            transport = StringTransport()
            transport.setTcpNoDelay = calls.append  # type: ignore[attr-defined]
            if dialed:
                node.start(["nats-route://127.0.0.1:6222"])
                _, _, dialer, _ = dials.pending.pop(0)
                protocol = node.build_protocol(dialer)
            else:
                protocol = node.build_protocol(None)
            protocol.makeConnection(transport)
            self.assertEqual(calls, [True])


class AcceptedRouteTests(SynchronousTestCase):
    """A route a server dialed to this node."""

    def accepted(self, **kwargs: Any) -> Any:
        node, clock, dials = make_node(**kwargs)
        node.start([])
        protocol = node.build_protocol(None)
        transport = StringTransport()
        protocol.makeConnection(transport)
        return node, clock, protocol, transport

    def test_info_sent_at_once(self) -> None:
        """Our INFO goes out on connect, before the server says anything."""
        node, clock, protocol, transport = self.accepted()
        (info,) = written(transport)
        assert isinstance(info, Info)
        self.assertEqual(info.fields["cluster"], "c1")
        self.assertEqual(protocol.state, AWAIT_CONNECT)

    def test_connect_then_info(self) -> None:
        """CONNECT then the server's INFO make the route; interest and a PING follow."""
        node, clock, protocol, transport = self.accepted()
        node.subscribe("$G", "nsq.>", lambda route, batch: len(batch.payloads))
        transport.clear()
        protocol.dataReceived(encode_connect({"cluster": "c1", "headers": True}))
        self.assertEqual(protocol.state, AWAIT_INFO)
        protocol.dataReceived(server_info("SB"))
        self.assertEqual(written(transport), [RouteSub("$G", "nsq.>"), Ping()])
        self.assertIs(node.routes["SB"], protocol)

    def test_wrong_cluster(self) -> None:
        """A CONNECT naming another cluster is refused with nats-server's text."""
        node, clock, protocol, transport = self.accepted()
        transport.clear()
        protocol.dataReceived(encode_connect({"cluster": "other"}))
        self.assertEqual(
            transport.value(),
            b"-ERR 'Rejecting connection, cluster name \"other\" does not match \"c1\"'\r\n",
        )
        self.assertTrue(transport.disconnecting)

    def test_client_connect(self) -> None:
        """A client's CONNECT (with lang) on the route port is refused."""
        node, clock, protocol, transport = self.accepted()
        transport.clear()
        protocol.dataReceived(encode_connect({"lang": "python", "cluster": "c1"}))
        self.assertEqual(transport.value(), b"-ERR 'attempted to connect to route port'\r\n")

    def test_info_before_connect(self) -> None:
        """INFO before CONNECT is an Authorization Violation (as nats-server 2.15)."""
        node, clock, protocol, transport = self.accepted()
        transport.clear()
        protocol.dataReceived(server_info("SB"))
        self.assertEqual(transport.value(), b"-ERR 'Authorization Violation'\r\n")

    def test_message_before_handshake(self) -> None:
        """An RMSG before the route is up is refused."""
        node, clock, protocol, transport = self.accepted()
        transport.clear()
        protocol.dataReceived(b"RMSG $G a 1\r\nx\r\n")
        self.assertEqual(transport.value(), b"-ERR 'Authorization Violation'\r\n")

    def test_lost(self) -> None:
        """A closed route leaves the node's routes and connections."""
        node, clock, protocol, transport = self.accepted()
        protocol.dataReceived(encode_connect({"cluster": "c1"}) + server_info("SB"))
        protocol.connectionLost()
        self.assertEqual(protocol.state, CLOSED)
        self.assertEqual(node.routes, {})
        self.assertEqual(node.connections, set())


class BackpressureTests(SynchronousTestCase):
    """A handler that cannot take a message stops the route being read."""

    def test_pause_and_resume(self) -> None:
        """Refused messages wait, in order; reading resumes once they are taken."""
        node, clock, dials = make_node()
        taken: List[bytes] = []
        room = [1]

        def handler(route: Any, batch: RouteMessages) -> int:
            count = min(room[0], len(batch.payloads))
            room[0] -= count
            taken.extend(batch.payloads[:count])
            return count

        node.subscribe("$G", "nsq.>", handler)
        node.start(["nats-route://127.0.0.1:6222"])
        protocol, transport = dialed_route(node, dials, "SA")
        transport.clear()
        protocol.dataReceived(
            b"RMSG $G nsq.t 1\r\na\r\nRMSG $G nsq.t 1\r\nb\r\nPING\r\nRMSG $G nsq.t 1\r\nc\r\n"
        )
        self.assertEqual(taken, [b"a"])
        self.assertEqual(transport.producerState, "paused")
        self.assertEqual(transport.value(), b"")
        protocol.dataReceived(b"RMSG $G nsq.t 1\r\nd\r\n")
        clock.advance(1)
        self.assertEqual(taken, [b"a"])
        room[0] = 10
        clock.advance(1)
        self.assertEqual(taken, [b"a", b"b", b"c", b"d"])
        self.assertEqual(transport.value(), b"PONG\r\n")
        self.assertEqual(transport.producerState, "producing")
        self.assertEqual(protocol.messages_in, 4)
        self.assertEqual(node.paused, 1)
