"""
Tests for :mod:`txnsq.cluster.node`: the full mesh (dials, redials,
gossip, duplicate connections), local interest, dispatch, and the
exactly-once send plan.
"""

from __future__ import annotations

from typing import Any, Dict, List, Tuple

from twisted.internet.testing import StringTransport
from twisted.trial.unittest import SynchronousTestCase

from tests.cluster_fakes import dialed_route, make_node, server_info, written
from txnsq.cluster.node import new_server_id
from txnsq.protocol.nats_route import (
    Ping,
    RouteMessage,
    RouteParser,
    RouteSub,
    RouteUnsub,
    encode_connect,
)


def messages(transport: StringTransport) -> List[RouteMessage]:
    return [op for op in written(transport) if isinstance(op, RouteMessage)]


class SendPlanTests(SynchronousTestCase):
    """publish sends each message once per interested server, each group once."""

    def mesh(self, interest: Dict[str, bytes]) -> Tuple[Any, Dict[str, StringTransport]]:
        node, clock, dials = make_node()
        urls = ["nats-route://127.0.0.1:%d" % (6000 + index,) for index in range(len(interest))]
        node.start(urls)
        transports = {}
        for index, (server_id, lines) in enumerate(sorted(interest.items())):
            protocol, transport = dialed_route(node, dials, server_id, 6000 + index)
            protocol.dataReceived(lines)
            transport.clear()
            transports[server_id] = transport
        return node, transports

    def test_plain_interest(self) -> None:
        """Each server with plain interest gets the message once; others nothing."""
        node, transports = self.mesh(
            {"SA": b"RS+ $G nsq.orders\r\n", "SB": b"RS+ $G nsq.>\r\nRS+ $G nsq.orders\r\n", "SC": b"RS+ $G other\r\n"}
        )
        self.assertEqual(node.publish("$G", "nsq.orders", b"m"), 2)
        self.assertEqual(messages(transports["SA"]), [RouteMessage("$G", "nsq.orders", None, (), None, b"m")])
        self.assertEqual(messages(transports["SB"]), [RouteMessage("$G", "nsq.orders", None, (), None, b"m")])
        self.assertEqual(messages(transports["SC"]), [])

    def test_no_interest(self) -> None:
        """A subject nobody wants is sent nowhere."""
        node, transports = self.mesh({"SA": b"RS+ $G a\r\n"})
        self.assertEqual(node.publish("$G", "b", b"m"), 0)
        self.assertFalse(node.wants("$G", "b"))
        self.assertTrue(node.wants("$G", "a"))

    def test_queue_group_named_once(self) -> None:
        """A group on two servers is named on exactly one of them per message, by weight."""
        node, transports = self.mesh(
            {
                "SA": b"RS+ $G nsq.orders\r\nRS+ $G nsq.orders workers 2\r\n",
                "SB": b"RS+ $G nsq.orders workers 1\r\n",
            }
        )
        for _ in range(300):
            node.publish("$G", "nsq.orders", b"m")
        a = messages(transports["SA"])
        b = messages(transports["SB"])
        self.assertEqual(len(a), 300)  # plain interest: every message
        named_a = sum(1 for m in a if m.queues == ("workers",))
        named_b = sum(1 for m in b if m.queues == ("workers",))
        self.assertEqual(named_a + named_b, 300)
        self.assertEqual((named_a, named_b), (200, 100))
        self.assertEqual(len(b), named_b)

    def test_queue_weight_update(self) -> None:
        """A new weight (RS+ again) changes the share of a group's messages."""
        node, transports = self.mesh(
            {"SA": b"RS+ $G s q 1\r\n", "SB": b"RS+ $G s q 1\r\n"}
        )
        node._plans.clear()
        protocol = node.routes["SB"]
        protocol.dataReceived(b"RS+ $G s q 3\r\n")
        node._plans.clear()
        for _ in range(400):
            node.publish("$G", "s", b"m")
        self.assertEqual((len(messages(transports["SA"])), len(messages(transports["SB"]))), (100, 300))

    def test_groups_by_pattern(self) -> None:
        """Groups of one queue name on two patterns are two groups, each served once."""
        node, transports = self.mesh(
            {"SA": b"RS+ $G nsq.* q 1\r\n", "SB": b"RS+ $G nsq.orders q 1\r\n"}
        )
        for _ in range(10):
            node.publish("$G", "nsq.orders", b"m")
        self.assertEqual(len(messages(transports["SA"])), 10)
        self.assertEqual(len(messages(transports["SB"])), 10)

    def test_reply_and_headers(self) -> None:
        """A reply subject and headers go out as RMSG/HMSG forms."""
        node, transports = self.mesh({"SA": b"RS+ $G s\r\nRS+ $G s q 1\r\n"})
        node.publish("$G", "s", b"body", headers=b"NATS/1.0\r\n\r\n", reply="r")
        self.assertEqual(
            messages(transports["SA"]),
            [RouteMessage("$G", "s", "r", ("q",), b"NATS/1.0\r\n\r\n", b"body")],
        )

    def test_interest_change_replans(self) -> None:
        """RS- takes a server out of later sends."""
        node, transports = self.mesh({"SA": b"RS+ $G s\r\n"})
        node.publish("$G", "s", b"1")
        node.routes["SA"].dataReceived(b"RS- $G s\r\n")
        node.publish("$G", "s", b"2")
        self.assertEqual([m.payload for m in messages(transports["SA"])], [b"1"])


class LocalInterestTests(SynchronousTestCase):
    """subscribe and unsubscribe reach every route; messages reach handlers."""

    def test_subscribe_reaches_routes(self) -> None:
        """A subscription made while routed is sent as RS+; unsubscribing sends RS-."""
        node, clock, dials = make_node()
        node.start(["nats-route://127.0.0.1:6222"])
        protocol, transport = dialed_route(node, dials, "SA")
        transport.clear()
        subscription = node.subscribe("$G", "x.>", lambda route, batch: len(batch.payloads))
        self.assertEqual(written(transport), [RouteSub("$G", "x.>")])
        node.unsubscribe(subscription)
        self.assertEqual(written(transport), [RouteUnsub("$G", "x.>")])

    def test_queue_subscriptions_count(self) -> None:
        """Local queue members are advertised as the group's weight."""
        node, clock, dials = make_node()
        node.start(["nats-route://127.0.0.1:6222"])
        protocol, transport = dialed_route(node, dials, "SA")
        transport.clear()
        first = node.subscribe("$G", "s", lambda route, batch: len(batch.payloads), queue="q")
        node.subscribe("$G", "s", lambda route, batch: len(batch.payloads), queue="q")
        self.assertEqual(written(transport), [RouteSub("$G", "s", "q", 1), RouteSub("$G", "s", "q", 2)])
        node.unsubscribe(first)
        self.assertEqual(written(transport), [RouteSub("$G", "s", "q", 1)])

    def test_dispatch(self) -> None:
        """Messages go to matching handlers; queue handlers only when their group is named."""
        node, clock, dials = make_node()
        got: List[Tuple[str, bytes]] = []
        def recorder(kind: str) -> Any:
            def handler(route: Any, batch: Any) -> int:
                got.extend((kind, payload) for payload in batch.payloads)
                return len(batch.payloads)

            return handler

        node.subscribe("$G", "a.>", recorder("plain"))
        node.subscribe("$G", "a.b", recorder("queue"), queue="q")
        node.start(["nats-route://127.0.0.1:6222"])
        protocol, transport = dialed_route(node, dials, "SA")
        protocol.dataReceived(b"RMSG $G a.b 1\r\n1\r\nRMSG $G a.b | q 1\r\n2\r\nRMSG $G zzz 1\r\n3\r\n")
        self.assertEqual(got, [("plain", b"1"), ("plain", b"2"), ("queue", b"2")])
        self.assertEqual(node.messages_dropped, 1)

    def test_flush(self) -> None:
        """flush fires once every route answered the PING it sent."""
        node, clock, dials = make_node()
        node.start(["nats-route://127.0.0.1:6222"])
        protocol, transport = dialed_route(node, dials, "SA")
        protocol.dataReceived(b"PONG\r\n")  # the handshake's PING
        transport.clear()
        done = node.flush()
        self.assertEqual(written(transport), [Ping()])
        self.assertNoResult(done)
        protocol.dataReceived(b"PONG\r\n")
        self.successResultOf(done)


class MeshTests(SynchronousTestCase):
    """Dialing, redialing and gossip."""

    def test_redial_every_second(self) -> None:
        """A seed that refuses is dialed again every second."""
        node, clock, dials = make_node()
        node.start(["nats-route://127.0.0.1:6222"])
        dials.refuse()
        self.assertEqual(dials.pending, [])
        clock.advance(1)
        self.assertEqual(len(dials.pending), 1)
        dials.refuse()
        clock.advance(1)
        self.assertEqual(len(dials.pending), 1)

    def test_redial_after_loss(self) -> None:
        """A dialed route that closes is dialed again a second later."""
        node, clock, dials = make_node()
        node.start(["nats-route://127.0.0.1:6222"])
        protocol, transport = dialed_route(node, dials, "SA")
        protocol.connectionLost()
        self.assertEqual(node.routes, {})
        clock.advance(1)
        self.assertEqual(len(dials.pending), 1)
        protocol, transport = dialed_route(node, dials, "SA2")
        self.assertEqual(list(node.routes), ["SA2"])

    def test_gossip_dials_new_server(self) -> None:
        """An INFO naming a new server's route URL makes the node dial it, once."""
        node, clock, dials = make_node()
        node.start(["nats-route://127.0.0.1:6222"])
        protocol, transport = dialed_route(node, dials, "SA")
        gossip = server_info("SC", 6333, ip="nats-route://127.0.0.1:6333/")
        protocol.dataReceived(gossip + gossip)
        self.assertEqual([(host, port) for host, port, _, _ in dials.pending], [("127.0.0.1", 6333)])

    def test_gossip_about_known_or_self(self) -> None:
        """Gossip about a routed server or about this node dials nothing."""
        node, clock, dials = make_node()
        node.start(["nats-route://127.0.0.1:6222"])
        protocol, transport = dialed_route(node, dials, "SA")
        protocol.dataReceived(server_info("SA", 6222, ip="nats-route://127.0.0.1:6222/"))
        protocol.dataReceived(server_info(node.server_id, 7000, ip="nats-route://127.0.0.1:7000/"))
        self.assertEqual(dials.pending, [])

    def test_dialed_self(self) -> None:
        """A route that turns out to be this node is closed."""
        node, clock, dials = make_node()
        node.start(["nats-route://127.0.0.1:7000"])
        protocol, transport = dials.accept(node)
        protocol.dataReceived(server_info(node.server_id, 7000))
        self.assertTrue(transport.disconnecting)
        self.assertEqual(node.routes, {})

    def test_duplicate_connection(self) -> None:
        """
        A second connection to a routed server is kept and read, but not
        sent on; when the first closes, the second takes over without a redial.
        """
        node, clock, dials = make_node()
        node.start(["nats-route://127.0.0.1:6222"])
        first, first_transport = dialed_route(node, dials, "SA")
        second = node.build_protocol(None)
        second_transport = StringTransport()
        second.makeConnection(second_transport)
        second.dataReceived(encode_connect({"cluster": "c1"}) + server_info("SA"))
        self.assertIs(node.routes["SA"], first)
        second.dataReceived(b"RS+ $G s\r\n")
        first.connectionLost()
        self.assertIs(node.routes["SA"], second)
        clock.advance(5)
        self.assertEqual(dials.pending, [])
        second_transport.clear()
        node.publish("$G", "s", b"m")
        self.assertEqual(len(messages(second_transport)), 1)
        second.connectionLost()
        clock.advance(0)
        self.assertEqual(len(dials.pending), 1)

    def test_stop(self) -> None:
        """stop closes routes and dials no more."""
        node, clock, dials = make_node()
        node.start(["nats-route://127.0.0.1:6222"])
        protocol, transport = dialed_route(node, dials, "SA")
        node.stop()
        self.assertTrue(transport.disconnecting)
        protocol.connectionLost()
        clock.advance(5)
        self.assertEqual(dials.pending, [])

    def test_stats(self) -> None:
        """stats lists routes with their counts and interest."""
        node, clock, dials = make_node()
        node.start(["nats-route://127.0.0.1:6222"])
        protocol, transport = dialed_route(node, dials, "SA")
        protocol.dataReceived(b"RS+ $G s\r\nRMSG $G s 2\r\nhi\r\n")
        node.publish("$G", "s", b"abc")
        stats = node.stats()
        self.assertEqual(stats["route_count"], 1)
        (route,) = stats["routes"]
        self.assertEqual(
            (route["server_id"], route["interest"], route["messages_out"], route["bytes_out"], route["primary"]),
            ("SA", ["$G s"], 1, 3, True),
        )
        self.assertEqual(route["messages_in"], 1)  # received, though nobody here wants it
        self.assertEqual(stats["messages_dropped"], 1)

    def test_server_id_shape(self) -> None:
        """server_id looks like nats-server's: 56 upper-case characters."""
        server_id = new_server_id()
        self.assertEqual(len(server_id), 56)
        self.assertEqual(server_id, server_id.upper())
