"""
Two txnsq nsqd in this process joined by a route (real sockets on
127.0.0.1): the route layer between txnsq nodes, the bridge on both ends
(a topic published on one reaches the other once, and is not echoed
back), and the cluster's /stats and /metrics.
"""

from __future__ import annotations

import json
from typing import Any, Generator

from twisted.internet.defer import Deferred, inlineCallbacks
from twisted.internet.endpoints import TCP4ClientEndpoint, connectProtocol
from twisted.internet.protocol import Protocol
from twisted.python.failure import Failure
from twisted.trial.unittest import TestCase

from tests.integration.test_http_process import http_client
from tests.interop.nats_cluster import wait_until
from txnsq.testing import start_nsqd


class _Raw(Protocol):
    """Sends bytes once connected; collects what comes until the close."""

    def __init__(self, data: bytes) -> None:
        self.data = data
        self.received = b""
        self.closed: Deferred[bytes] = Deferred()

    def connectionMade(self) -> None:
        self.transport.write(self.data)  # type: ignore[union-attr]

    def dataReceived(self, data: bytes) -> None:
        self.received += data

    def connectionLost(self, reason: Failure = None) -> None:  # type: ignore[assignment]
        self.closed.callback(self.received)


class TwoNodeRouteTests(TestCase):
    """nsqd 2 dials nsqd 1's route listener."""

    timeout = 60

    @inlineCallbacks
    def setUp(self) -> Generator[Any, Any, None]:
        from twisted.internet import reactor

        self.reactor = reactor
        self.http = http_client(reactor)
        self.one = yield start_nsqd(["--cluster-address=127.0.0.1:0", "--cluster-name=c"])
        self.addCleanup(self.one.stop)
        port = self.one.service.bound_ports()["Cluster"]
        self.two = yield start_nsqd(
            ["--cluster-address=127.0.0.1:0", "--cluster-name=c", "--routes=nats-route://127.0.0.1:%d" % (port,)]
        )
        self.addCleanup(self.two.stop)

        def routed() -> bool:
            return all(
                len(node.service.cluster.node.routes) == 1
                and all(r.interest.describe() == ["$G nsq.>"] for r in node.service.cluster.node.routes.values())
                for node in (self.one, self.two)
            )

        yield wait_until(reactor, routed, 10, "the two nodes to route")

    @inlineCallbacks
    def test_topic_crosses_once(self) -> Generator[Any, Any, None]:
        """A publish on one node reaches the other node's topic once and is not echoed back."""
        self.one.broker.get_topic("t").get_channel("c")
        self.two.broker.get_topic("t").get_channel("c")
        for n in range(100):
            self.one.broker.get_topic("t").publish(b"one-%d" % (n,))
            self.two.broker.get_topic("t").publish(b"two-%d" % (n,))
        yield wait_until(
            self.reactor,
            lambda: self.one.broker.topics["t"].message_count == 200
            and self.two.broker.topics["t"].message_count == 200,
            10,
            "each side to have both sides' messages",
        )
        # A round trip on each route: anything echoed would be in by now.
        yield self.one.service.cluster.node.flush()
        yield self.two.service.cluster.node.flush()
        self.assertEqual(self.one.broker.topics["t"].message_count, 200)
        self.assertEqual(self.two.broker.topics["t"].message_count, 200)
        bridge = self.one.service.cluster.bridge
        self.assertEqual((bridge.to_nats, bridge.from_nats), (100, 100))

    @inlineCallbacks
    def test_stats_and_metrics(self) -> Generator[Any, Any, None]:
        """/stats has the cluster section and /metrics its families; the listener is logged as Cluster."""
        response = yield self.http.get("http://127.0.0.1:%d/stats?format=json" % (self.one.http_port,))
        stats = json.loads((yield response.content()))
        cluster = stats["cluster"]
        self.assertEqual(cluster["cluster_name"], "c")
        self.assertEqual(cluster["route_count"], 1)
        self.assertEqual(cluster["routes"][0]["server_id"], self.two.service.cluster.node.server_id)
        response = yield self.http.get("http://127.0.0.1:%d/metrics" % (self.one.http_port,))
        text = (yield response.content()).decode()
        self.assertIn("nsqd_cluster_routes 1\n", text)
        self.assertIn("nsqd_nats_bridge_messages_to_nats_total 0\n", text)

    @inlineCallbacks
    def test_bad_input(self) -> Generator[Any, Any, None]:
        """
        Bad input on the route port gets nats-server's -ERR and a close;
        the established route and the rest of nsqd carry on.
        """
        port = self.one.service.bound_ports()["Cluster"]
        cases = [
            (b'CONNECT {"cluster":"other"}\r\n', b"-ERR 'Rejecting connection, cluster name \"other\" does not match \"c\"'\r\n"),
            (b"HELLO\r\n", b"-ERR 'Unknown Protocol Operation'\r\n"),
            (b'CONNECT {"cluster":"c"}\r\nINFO {"server_id":"X"}\r\nRMSG $G nsq.t 2\r\nabc\r\n', b"-ERR 'Unknown Protocol Operation'\r\n"),
            (b'CONNECT {"cluster":"c"}\r\nINFO {"server_id":"X"}\r\nRMSG $G nsq.t 99999999\r\n', b"-ERR 'Maximum Payload Violation'\r\n"),
        ]
        for data, error in cases:
            client = _Raw(data)
            yield connectProtocol(TCP4ClientEndpoint(self.reactor, "127.0.0.1", port), client)
            received = yield client.closed
            self.assertTrue(received.startswith(b"INFO {"), received)
            self.assertTrue(received.endswith(error), received)
        self.assertNotIn("t", self.one.broker.topics)
        self.assertEqual(len(self.one.service.cluster.node.routes), 1)
        self.one.broker.get_topic("u").publish(b"still")
        yield wait_until(self.reactor, lambda: "u" in self.two.broker.topics, 10, "the route to carry on")


class AdvertiseTests(TestCase):
    """What the route listener tells other servers to dial."""

    @inlineCallbacks
    def test_bound_address(self) -> Generator[Any, Any, None]:
        """Without --cluster-advertise, INFO names the bound listener."""
        nsqd = yield start_nsqd(["--cluster-address=127.0.0.1:0", "--cluster-name=c"])
        self.addCleanup(nsqd.stop)
        info = nsqd.service.cluster.node.info_fields()
        self.assertEqual(
            (info["host"], info["port"]), ("127.0.0.1", nsqd.service.bound_ports()["Cluster"])
        )
        self.assertEqual(info["cluster"], "c")

    @inlineCallbacks
    def test_advertise(self) -> Generator[Any, Any, None]:
        """--cluster-advertise replaces the bound address in INFO."""
        nsqd = yield start_nsqd(
            ["--cluster-address=127.0.0.1:0", "--cluster-name=c", "--cluster-advertise=10.1.2.3:7777"]
        )
        self.addCleanup(nsqd.stop)
        info = nsqd.service.cluster.node.info_fields()
        self.assertEqual((info["host"], info["port"]), ("10.1.2.3", 7777))
