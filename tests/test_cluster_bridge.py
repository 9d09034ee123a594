"""
Tests for :mod:`txnsq.cluster.bridge`: NSQ topics as NATS subjects, on a
broker and a route node driven by a Clock, with StringTransports.
"""

from __future__ import annotations

from typing import Any, List

from twisted.trial.unittest import SynchronousTestCase

from tests.cluster_fakes import dialed_route, make_node, written
from tests.core_fakes import decode, make_broker
from txnsq.cluster.bridge import NatsBridge
from txnsq.protocol.nats_route import RouteMessage, RouteUnsub


class BridgeTestCase(SynchronousTestCase):
    """A broker, a node routed to server ``SA``, and the bridge between them."""

    def build(self, topics: str = "", **options: Any) -> None:
        self.broker = make_broker(**options)
        self.node, self.clock, dials = make_node()
        self.bridge = NatsBridge(self.broker, self.node, "nsq.", "$G", topics)
        self.bridge.start()
        self.node.start(["nats-route://127.0.0.1:6222"])
        self.route, self.transport = dialed_route(self.node, dials, "SA")

    def sent(self) -> List[RouteMessage]:
        return [op for op in written(self.transport) if isinstance(op, RouteMessage)]

    def channel_bodies(self, topic: str, channel: str) -> List[bytes]:
        found = []
        queue = self.broker.topics[topic].channels[channel]._queue
        while True:
            data = queue.read()
            if data is None:
                return found
            found.append(decode(data).body)


class FromNatsTests(BridgeTestCase):
    """NATS messages for <prefix>X become publishes to NSQ topic X."""

    def setUp(self) -> None:
        self.build()

    def test_interest_advertised(self) -> None:
        """The node wants <prefix>> of the account."""
        self.assertIn(b"RS+ $G nsq.>\r\n", self.node.interest_lines())

    def test_publish_to_topic(self) -> None:
        """A message for nsq.orders is published to topic orders, created if need be."""
        self.route.dataReceived(b"RMSG $G nsq.orders 5\r\nhello\r\n")
        topic = self.broker.topics["orders"]
        self.assertEqual(topic.message_count, 1)
        topic.get_channel("c")
        self.assertEqual(self.channel_bodies("orders", "c"), [b"hello"])
        self.assertEqual(self.bridge.from_nats, 1)

    def test_headers_and_reply_dropped(self) -> None:
        """An HMSG's body is its payload only; the reply subject is ignored."""
        self.broker.get_topic("t").get_channel("c")
        self.route.dataReceived(b"HMSG $G nsq.t _INBOX.x 12 14\r\nNATS/1.0\r\n\r\nhi\r\n")
        self.assertEqual(self.channel_bodies("t", "c"), [b"hi"])

    def test_invalid_topic_name(self) -> None:
        """A subject whose rest is no valid topic name is counted and dropped."""
        self.route.dataReceived(b"RMSG $G nsq.a:b 1\r\nx\r\n")
        self.route.dataReceived(b"RMSG $G nsq.%s 1\r\nx\r\n" % (b"x" * 65,))
        self.assertEqual(self.broker.topics, {})
        self.assertEqual(self.bridge.invalid, 2)
        self.assertFalse(self.transport.disconnecting)

    def test_not_sent_back(self) -> None:
        """A message from NATS is not sent back to NATS, even to servers that want it."""
        self.route.dataReceived(b"RS+ $G nsq.orders\r\n")
        self.transport.clear()
        self.route.dataReceived(b"RMSG $G nsq.orders 1\r\nx\r\n")
        self.assertEqual(self.sent(), [])
        self.broker.get_topic("orders").publish(b"local")
        self.assertEqual([m.payload for m in self.sent()], [b"local"])

    def test_backpressure(self) -> None:
        """A full channel pauses the route; nothing is lost; reading resumes once there is room."""
        self.build(mem_queue_size=2)
        channel = self.broker.get_topic("t").get_channel("c")
        self.route.dataReceived(b"".join(b"RMSG $G nsq.t 1\r\n%d\r\n" % (n,) for n in range(5)))
        self.assertEqual(self.transport.producerState, "paused")
        self.assertEqual(self.channel_bodies("t", "c"), [b"0", b"1"])
        self.clock.advance(1)
        self.assertEqual(self.channel_bodies("t", "c"), [b"2", b"3"])
        self.clock.advance(1)
        self.assertEqual(self.channel_bodies("t", "c"), [b"4"])
        self.assertEqual(self.transport.producerState, "producing")
        self.assertEqual(self.bridge.from_nats, 5)
        del channel


class ToNatsTests(BridgeTestCase):
    """NSQ publishes go to the NATS servers that want <prefix>X."""

    def setUp(self) -> None:
        self.build()
        self.route.dataReceived(b"RS+ $G nsq.orders\r\n")
        self.transport.clear()

    def test_publish_forms(self) -> None:
        """PUB, MPUB, DPUB each send every message once to an interested server."""
        topic = self.broker.get_topic("orders")
        topic.publish(b"1")
        topic.publish_many([b"2", b"3"])
        topic.publish_deferred(b"4", 10.0)
        self.assertEqual(
            self.sent(),
            [RouteMessage("$G", "nsq.orders", None, (), None, body) for body in (b"1", b"2", b"3", b"4")],
        )
        self.assertEqual(self.bridge.to_nats, 4)

    def test_no_interest_nothing_sent(self) -> None:
        """A topic nobody in NATS wants sends nothing."""
        self.broker.get_topic("other").publish(b"x")
        self.assertEqual(self.sent(), [])
        self.assertEqual(self.bridge.to_nats, 0)

    def test_topics_filter(self) -> None:
        """--nats-topics leaves other topics out, both ways."""
        self.build(topics="^ord")
        self.route.dataReceived(b"RS+ $G nsq.>\r\n")
        self.transport.clear()
        self.broker.get_topic("orders").publish(b"x")
        self.broker.get_topic("clicks").publish(b"y")
        self.assertEqual([m.subject for m in self.sent()], ["nsq.orders"])
        self.route.dataReceived(b"RMSG $G nsq.views 1\r\nx\r\n")
        self.assertNotIn("views", self.broker.topics)
        self.assertEqual(self.bridge.invalid, 1)

    def test_stop(self) -> None:
        """A stopped bridge sends nothing and withdraws its interest."""
        self.bridge.stop()
        self.assertEqual(written(self.transport), [RouteUnsub("$G", "nsq.>")])
        self.broker.get_topic("orders").publish(b"x")
        self.assertEqual(self.sent(), [])
        self.assertEqual(self.node.interest_lines(), [])
