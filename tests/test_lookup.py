"""
Tests for txnsq.nsqd.lookup (the set of lookupd peers following the
broker, and the channel lookup of new topics) and
txnsq.nsqd.lookup_channels (the HTTP ``/channels`` query), on a
MemoryReactorClock with StringTransports for the connections.
"""

from __future__ import annotations

from typing import Any, Dict, List, Tuple

from twisted.internet.defer import Deferred
from twisted.internet.error import ConnectionDone
from twisted.internet.testing import MemoryReactorClock, StringTransport
from twisted.logger import Logger, formatEvent
from twisted.python.failure import Failure
from twisted.trial.unittest import SynchronousTestCase

from tests.core_fakes import FakeConsumer, make_broker, make_options
from txnsq.version import NSQ_VERSION
from txnsq.nsqd.lookup import LookupService
from txnsq.nsqd.lookup_channels import ChannelLookupError, TopicChannelsClient
from txnsq.protocol.lookup_v1 import encode_response

LOOKUPD_IDENTIFY = (
    b'{"broadcast_address":"lookupd.example","hostname":"lookupd","http_port":4161,'
    b'"tcp_port":4160,"version":"1.3.0"}'
)


class FakeChannelsClient:
    """Records channel lookups; each answers when the test fires its Deferred."""

    def __init__(self) -> None:
        self.asked: List[Tuple[str, List[str], Deferred[Any]]] = []

    def topic_channels(self, topic: str, addresses: List[str]) -> Deferred[Any]:
        answer: Deferred[Any] = Deferred()
        self.asked.append((topic, list(addresses), answer))
        return answer


class LookupServiceTestCase(SynchronousTestCase):
    """A LookupService for a broker on a Clock, its peers on a MemoryReactorClock."""

    def setUp(self) -> None:
        self.reactor = MemoryReactorClock()
        self.broker = make_broker()
        self.options = make_options(
            lookupd_tcp_address=["127.0.0.1:4160"],
            broadcast_address="nsqd.example",
            broadcast_tcp_port=0,
            broadcast_http_port=0,
            max_body_size=5242880,
            http_client_connect_timeout=2.0,
            http_client_request_timeout=5.0,
        )
        self.channels = FakeChannelsClient()
        self.events: List[Dict[str, Any]] = []
        self.service = LookupService(
            self.broker,
            self.options,
            lambda: {"TCP": 4150, "HTTP": 4151},
            self.reactor,
            hostname="nsqd-host",
            channels_client=self.channels,
        )
        self.service._log = Logger(observer=self.events.append)  # type: ignore[misc,arg-type]
        self.connections: Dict[str, Tuple[StringTransport, Any]] = {}

    def tearDown(self) -> None:
        if self.service.running:
            self.service.stopService()
            for transport, protocol in self.connections.values():
                protocol.connectionLost(Failure(ConnectionDone()))

    def logged(self) -> List[str]:
        return [formatEvent(event) for event in self.events]

    def connect(self, address: str = "127.0.0.1:4160") -> Tuple[StringTransport, Any]:
        """Complete the latest connection attempt to ``address``."""
        host, _, port = address.rpartition(":")
        attempts = [c for c in self.reactor.tcpClients if c[:2] == (host, int(port))]
        factory = attempts[-1][2]
        protocol: Any = factory.buildProtocol(None)
        transport = StringTransport()
        protocol.makeConnection(transport)
        self.connections[address] = (transport, protocol)
        return transport, protocol

    def identified(self, address: str = "127.0.0.1:4160") -> Tuple[StringTransport, Any]:
        transport, protocol = self.connect(address)
        protocol.dataReceived(encode_response(LOOKUPD_IDENTIFY))
        return transport, protocol

    def take(self, transport: StringTransport) -> bytes:
        data = transport.value()
        transport.clear()
        return data


class RegistrationTests(LookupServiceTestCase):
    """What the peers are told."""

    def test_identify_bound_ports(self) -> None:
        """IDENTIFY registers the bound ports, the broadcast address, hostname and version."""
        self.assertEqual(
            self.service.identify(),
            {
                "broadcast_address": "nsqd.example",
                "hostname": "nsqd-host",
                "http_port": 4151,
                "tcp_port": 4150,
                "version": NSQ_VERSION,
            },
        )

    def test_identify_broadcast_ports(self) -> None:
        """--broadcast-tcp-port and --broadcast-http-port replace the bound ports."""
        self.options.broadcast_tcp_port = 14150
        self.options.broadcast_http_port = 14151
        self.service.startService()
        transport, protocol = self.connect()
        self.assertIn(b'"http_port":14151,"tcp_port":14150', transport.value())

    def test_registers_existing_state(self) -> None:
        """Once identified, topics without channels and every channel are registered."""
        self.broker.get_topic("a")
        b = self.broker.get_topic("b")
        b.get_channel("c1")
        b.get_channel("c2")
        self.service.startService()
        transport, protocol = self.identified()
        self.assertEqual(
            transport.value().split(b"}", 1)[1],
            b"REGISTER a\nREGISTER b c1\nREGISTER b c2\n",
        )

    def test_forwards_topology(self) -> None:
        """Topics and channels created and deleted are registered and unregistered."""
        self.service.startService()
        transport, protocol = self.identified()
        self.take(transport)
        topic = self.broker.get_topic("t")
        topic.get_channel("c")
        topic.delete_channel("c")
        topic.get_channel("d")
        self.broker.delete_topic("t")
        self.assertEqual(
            self.take(transport),
            b"REGISTER t\nREGISTER t c\nUNREGISTER t c\nREGISTER t d\n"
            b"UNREGISTER t d\nUNREGISTER t\n",
        )

    def test_ephemeral(self) -> None:
        """Ephemeral channels and topics are unregistered when they go with their last consumer."""
        self.service.startService()
        transport, protocol = self.identified()
        self.take(transport)
        channel = self.broker.get_topic("t#ephemeral").get_channel("c#ephemeral")
        consumer = FakeConsumer(ready_count=1)
        channel.add_consumer(consumer)
        channel.remove_consumer(consumer)
        self.assertEqual(
            self.take(transport),
            b"REGISTER t#ephemeral\nREGISTER t#ephemeral c#ephemeral\n"
            b"UNREGISTER t#ephemeral c#ephemeral\nUNREGISTER t#ephemeral\n",
        )

    def test_every_peer_told(self) -> None:
        """Each lookupd gets every registration."""
        self.options.lookupd_tcp_address = ["127.0.0.1:4160", "127.0.0.2:4160"]
        self.service.startService()
        first, _ = self.identified("127.0.0.1:4160")
        second, _ = self.identified("127.0.0.2:4160")
        self.take(first)
        self.take(second)
        self.broker.get_topic("t")
        self.assertEqual(self.take(first), b"REGISTER t\n")
        self.assertEqual(self.take(second), b"REGISTER t\n")

    def test_duplicate_addresses(self) -> None:
        """An address given twice makes one peer."""
        self.options.lookupd_tcp_address = ["127.0.0.1:4160", "127.0.0.1:4160"]
        self.service.startService()
        self.assertEqual(list(self.service.peers), ["127.0.0.1:4160"])

    def test_invalid_address(self) -> None:
        """An address that is not host:port is logged and skipped."""
        self.options.lookupd_tcp_address = ["nope", "127.0.0.1:4160"]
        self.service.startService()
        self.assertEqual(list(self.service.peers), ["127.0.0.1:4160"])
        self.assertTrue(any(line.startswith("LOOKUP(nope): ") for line in self.logged()))

    def test_lookupd_http_addresses(self) -> None:
        """The lookupds' HTTP addresses come from their IDENTIFY replies."""
        self.options.lookupd_tcp_address = ["127.0.0.1:4160", "127.0.0.2:4160"]
        self.service.startService()
        self.assertEqual(self.service.lookupd_http_addresses(), [])
        self.identified("127.0.0.2:4160")
        self.assertEqual(self.service.lookupd_http_addresses(), ["lookupd.example:4161"])


class AddressChangeTests(LookupServiceTestCase):
    """set_addresses: PUT /config/nsqlookupd_tcp_addresses at run time."""

    def test_add_and_remove(self) -> None:
        """Kept addresses keep their peer; removed ones are closed; new ones connect."""
        self.service.startService()
        kept = self.service.peers["127.0.0.1:4160"]
        old, _ = self.identified()
        self.service.set_addresses(["127.0.0.1:4160", "127.0.0.3:4160"])
        self.assertIs(self.service.peers["127.0.0.1:4160"], kept)
        self.assertFalse(old.disconnecting)
        new, _ = self.identified("127.0.0.3:4160")
        self.service.set_addresses(["127.0.0.3:4160"])
        self.assertTrue(old.disconnecting)
        self.assertEqual(list(self.service.peers), ["127.0.0.3:4160"])
        self.take(new)
        self.broker.get_topic("t")
        self.assertEqual(self.take(new), b"REGISTER t\n")
        self.assertIn("LOOKUP(127.0.0.1:4160): removing peer", self.logged())
        self.assertIn("LOOKUP(127.0.0.3:4160): adding peer", self.logged())

    def test_ignored_while_stopped(self) -> None:
        """Before starting, set_addresses makes no peer (startService reads the options)."""
        self.service.set_addresses(["127.0.0.9:4160"])
        self.assertEqual(self.service.peers, {})
        self.assertEqual(self.reactor.tcpClients, [])


class StopTests(LookupServiceTestCase):
    """stopService."""

    def test_stop(self) -> None:
        """Stopping closes every connection, stops following the broker and leaves no timer."""
        self.service.startService()
        transport, protocol = self.identified()
        self.take(transport)
        stopped = self.service.stopService()
        self.assertTrue(transport.disconnecting)
        self.assertNoResult(stopped)
        protocol.connectionLost(Failure(ConnectionDone()))
        self.successResultOf(stopped)
        self.assertIsNone(self.broker.prepare_topic)
        self.broker.get_topic("t")
        self.assertEqual(transport.value(), b"")
        self.assertEqual(self.reactor.getDelayedCalls(), [])
        self.assertIn("LOOKUP: closing", self.logged())

    def test_stop_unconnected(self) -> None:
        """A service whose lookupds never answered stops at once."""
        self.service.startService()
        self.successResultOf(self.service.stopService())
        self.assertEqual(self.reactor.getDelayedCalls(), [])


class PrepareTopicTests(LookupServiceTestCase):
    """New topics wait for the channels the lookupds know."""

    def setUp(self) -> None:
        LookupServiceTestCase.setUp(self)
        self.service.startService()

    def test_without_lookupd_config(self) -> None:
        """With no lookupd configured a topic starts at once, quietly."""
        self.service.set_addresses([])
        topic = self.broker.get_topic("t")
        self.assertFalse(topic.held)
        self.assertEqual(self.channels.asked, [])
        self.assertFalse(any("no available" in line for line in self.logged()))

    def test_no_identified_lookupd(self) -> None:
        """With no lookupd identified yet the topic starts at once, and Go's error is logged."""
        topic = self.broker.get_topic("t")
        self.assertFalse(topic.held)
        self.assertEqual(self.channels.asked, [])
        self.assertIn(
            "no available nsqlookupd to query for channels to pre-create for topic t",
            self.logged(),
        )

    def test_channels_created_before_start(self) -> None:
        """The lookupds' channels (not ephemeral ones) exist before the first message is handed over."""
        self.identified()
        topic = self.broker.get_topic("t")
        self.assertTrue(topic.held)
        [(name, addresses, answer)] = self.channels.asked
        self.assertEqual((name, addresses), ("t", ["lookupd.example:4161"]))
        local = FakeConsumer(ready_count=10)
        topic.get_channel("local").add_consumer(local)
        topic.publish(b"first")
        self.assertEqual(local.received, [])
        answer.callback((["a", "b#ephemeral", "local"], []))
        self.assertFalse(topic.held)
        self.assertEqual(sorted(topic.channels), ["a", "local"])
        self.assertEqual(local.bodies(), [b"first"])
        self.assertEqual(topic.channels["a"].depth(), 1)

    def test_partial_failure(self) -> None:
        """Channels from the lookupds that answered are used; the others are logged."""
        self.identified()
        topic = self.broker.get_topic("t")
        self.channels.asked[0][2].callback((["a"], ["lookupd.example:4161 - refused"]))
        self.assertEqual(list(topic.channels), ["a"])
        self.assertIn(
            "failed to query nsqlookupd for channels to pre-create for topic t"
            " - lookupd.example:4161 - refused",
            self.logged(),
        )

    def test_lookup_fails(self) -> None:
        """A failed lookup is logged and the topic starts anyway."""
        self.identified()
        topic = self.broker.get_topic("t")
        self.channels.asked[0][2].errback(ChannelLookupError("failed to query any nsqlookupd"))
        self.assertFalse(topic.held)
        self.assertEqual(topic.channels, {})
        self.assertIn(
            "failed to query nsqlookupd for channels to pre-create for topic t"
            " - failed to query any nsqlookupd",
            self.logged(),
        )

    def test_topic_deleted_meanwhile(self) -> None:
        """A topic deleted before the answer gets no channels."""
        self.identified()
        topic = self.broker.get_topic("t")
        self.broker.delete_topic("t")
        self.channels.asked[0][2].callback((["a"], []))
        self.assertEqual(topic.channels, {})
        self.assertNotIn("t", self.broker.topics)

    def test_stop_cancels_lookups(self) -> None:
        """Stopping cancels the lookups under way; their topics start, nothing is logged."""
        self.identified()
        topic = self.broker.get_topic("t")
        answer = self.channels.asked[0][2]
        self.service.stopService()
        # The fake's Deferred has no canceller: cancelling fails it with
        # CancelledError, which the service consumes.
        self.assertTrue(answer.called)
        self.assertFalse(topic.held)
        self.assertFalse(any("failed to query" in line for line in self.logged()))

    def test_restored_topics_not_looked_up(self) -> None:
        """Topics that exist before the service starts are not looked up (Go's metadata load)."""
        self.service.stopService()
        self.broker.get_topic("restored")
        self.assertEqual(self.channels.asked, [])


class TopicChannelsClientTests(SynchronousTestCase):
    """TopicChannelsClient: GET /channels?topic= on every lookupd."""

    def setUp(self) -> None:
        self.reactor = MemoryReactorClock()
        self.client = TopicChannelsClient(self.reactor, 2.0, 5.0)

    def serve(self, index: int, response: bytes) -> bytes:
        """Answer the index-th connection attempt with ``response``; the request it got."""
        host, port, factory, timeout, bind = self.reactor.tcpClients[index]
        self.assertEqual(timeout, 2.0)
        protocol: Any = factory.buildProtocol(None)
        transport = StringTransport()
        protocol.makeConnection(transport)
        request = transport.value()
        protocol.dataReceived(response)
        protocol.connectionLost(Failure(ConnectionDone()))
        return request

    def ok(self, body: bytes) -> bytes:
        return (
            b"HTTP/1.1 200 OK\r\nContent-Type: application/json; charset=utf-8\r\n"
            b"Content-Length: %d\r\n\r\n%s" % (len(body), body)
        )

    def test_union_sorted(self) -> None:
        """The channels of every lookupd, merged, deduplicated and sorted."""
        result = self.client.topic_channels("t#e", ["127.0.0.1:4161", "127.0.0.2:4161"])
        request = self.serve(0, self.ok(b'{"channels":["b","a"]}'))
        self.assertTrue(request.startswith(b"GET /channels?topic=t%23e HTTP/1.1\r\n"), request)
        self.assertIn(b"Accept: application/vnd.nsq; version=1.0", request)
        self.assertNoResult(result)
        self.serve(1, self.ok(b'{"channels":["c","a"]}'))
        self.assertEqual(self.successResultOf(result), (["a", "b", "c"], []))

    def test_one_fails(self) -> None:
        """A lookupd answering an error status is reported; the others' channels are kept."""
        result = self.client.topic_channels("t", ["127.0.0.1:4161", "127.0.0.2:4161"])
        self.serve(0, b"HTTP/1.1 500 Internal Server Error\r\nContent-Length: 4\r\n\r\noops")
        self.serve(1, self.ok(b'{"channels":["a"]}'))
        channels, errors = self.successResultOf(result)
        self.assertEqual(channels, ["a"])
        self.assertEqual(errors, ['127.0.0.1:4161 - got response 500 Internal Server Error "oops"'])

    def test_all_fail(self) -> None:
        """When no lookupd answers the lookup fails."""
        result = self.client.topic_channels("t", ["127.0.0.1:4161", "127.0.0.2:4161"])
        self.serve(0, self.ok(b"not json"))
        self.reactor.advance(5.0)
        failure = self.failureResultOf(result, ChannelLookupError)
        self.assertIn("failed to query any nsqlookupd: 127.0.0.1:4161 - invalid JSON", str(failure.value))

    def test_bad_documents(self) -> None:
        """Replies that are not {"channels": [strings]} are errors; null and no key are no channels."""
        replies = [
            (b'{"channels":"a"}', None),
            (b'{"channels":[1]}', None),
            (b"[]", None),
            (b"null", []),
            (b"{}", []),
            (b'{"Channels":["x"]}', ["x"]),
        ]
        for index, (body, expected) in enumerate(replies):
            result = self.client.topic_channels("t", ["127.0.0.1:4161"])
            self.serve(index, self.ok(body))
            if expected is None:
                self.failureResultOf(result, ChannelLookupError)
            else:
                self.assertEqual(self.successResultOf(result), (expected, []))

    def test_timeout(self) -> None:
        """A request that takes longer than the request timeout fails, leaving no timer."""
        result = self.client.topic_channels("t", ["127.0.0.1:4161"])
        self.reactor.advance(5.0)
        failure = self.failureResultOf(result, ChannelLookupError)
        self.assertIn("request timed out (Client.Timeout 5s exceeded)", str(failure.value))
        self.assertEqual(self.reactor.getDelayedCalls(), [])

    def test_cancel(self) -> None:
        """Cancelling the lookup cancels the requests and their timers."""
        result = self.client.topic_channels("t", ["127.0.0.1:4161"])
        result.cancel()
        self.failureResultOf(result)
        self.assertEqual(self.reactor.getDelayedCalls(), [])
