"""
Tests for txnsq.nsqd.stats: the ``/stats`` snapshot of a broker and its TCP
clients, as JSON and as text, checked against the Go nsqd v1.3 recordings
(``http_nsqd.json``: ``stats_*`` cases) with the conformance engine's
template and JSON matchers.

Clients are real :class:`NSQDProtocol` instances over StringTransport; the
broker runs on a Clock set to the wall clock's second, so that the
recordings' ``<unix_s>`` plausibility checks hold.
"""

from __future__ import annotations

import json
import os
import re
import struct
import time
from typing import Any, Dict, List, Optional, Tuple

from twisted.internet.address import IPv4Address, IPv6Address, UNIXAddress
from twisted.internet.task import Clock
from twisted.internet.testing import StringTransport
from twisted.trial.unittest import SynchronousTestCase

from tests.core_fakes import FakeConsumer, RecordingStorage, make_broker
from tests.integration.conformance import (
    Bindings,
    load_fixture,
    match_json,
    match_shape,
    match_template,
    unescape,
)
from txnsq.version import NSQ_VERSION
from txnsq.nsqd.broker import Broker
from txnsq.nsqd.options import NSQDOptions
from txnsq.nsqd.stats import (
    ClientStats,
    NSQDStats,
    client_stats,
    collect,
    parse_bool_param,
    to_json,
)
from txnsq.nsqd.stats_text import to_text
from txnsq.nsqd.tcp import NSQDFactory, NSQDProtocol
from txnsq.storage.disk import DiskStorage
from txnsq.storage.memory import MemoryStorage

_FIXTURE: Optional[Dict[str, Any]] = None


def recorded(case: str, path: str) -> Dict[str, Any]:
    """The recorded reply of the case's ``GET path`` step."""
    global _FIXTURE
    if _FIXTURE is None:
        _FIXTURE = load_fixture("http_nsqd.json")
    for each in _FIXTURE["cases"]:
        if each["name"] != case:
            continue
        for step in each["steps"]:
            http = step.get("http")
            if http is not None and http["path"] == path:
                expect: Dict[str, Any] = step["expect"]
                return expect
    raise AssertionError("no GET %s in case %s" % (path, case))


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


def dpub(topic: bytes, delay_ms: int, body: bytes) -> bytes:
    """A DPUB command."""
    return b"DPUB %s %d\n" % (topic, delay_ms) + struct.pack(">i", len(body)) + body


class StatsTestCase(SynchronousTestCase):
    """A broker, a TCP factory and helpers to connect clients."""

    def setUp(self) -> None:
        self.clock = Clock()
        self.clock.advance(int(time.time()))
        self.options = NSQDOptions()
        self.broker = Broker(self.options, self.clock, MemoryStorage())
        self.factory = NSQDFactory(self.broker, self.clock)
        self.start_time = self.clock.seconds()
        self.bindings = Bindings({"version": NSQ_VERSION})
        self._port = 40000

    def connect(self, name: str, *commands: bytes) -> NSQDProtocol:
        """A client (bound as ``<port:name>``) that sent the magic and commands."""
        self._port += 1
        transport = StringTransport(peerAddress=IPv4Address("TCP", "127.0.0.1", self._port))
        protocol = self.factory.buildProtocol(transport.getPeer())
        protocol.makeConnection(transport)
        protocol.dataReceived(b"  V2" + b"".join(commands))
        self.bindings.set("port:" + name, self._port)
        return protocol

    def snapshot(self, **filters: Any) -> NSQDStats:
        """collect() over the broker and the factory's clients."""
        return collect(self.broker, self.factory.clients, self.start_time, **filters)

    def assertText(self, case: str, path: str, stats: NSQDStats) -> None:
        """The text page matches the recording of ``GET path`` in ``case``."""
        template = recorded(case, path)["body_template"]
        text = to_text(stats, self.clock.seconds())
        if not match_template(unescape(template), text.encode("utf-8"), self.bindings):
            self.fail("text differs:\n%s\nexpected:\n%s" % (text, template))

    def assertJSON(self, case: str, path: str, stats: NSQDStats) -> None:
        """The JSON document matches the recording: keys, order, values, types."""
        expect = recorded(case, path)
        actual = json.loads(json.dumps(to_json(stats)))
        problem = match_json(expect["json"], actual, self.bindings, expect.get("unordered", ()))
        if problem is None:
            problem = match_shape(expect["shape"], actual)
        if problem is not None:
            self.fail(problem)

    def consumer_and_producer(self) -> Tuple[NSQDProtocol, NSQDProtocol]:
        """The recordings' scene: an IDENTIFYed consumer with one message in
        flight on topic1/chan1 and a TCP producer."""
        consumer = self.connect(
            "c1",
            identify(
                client_id="conformance",
                hostname="conformance-host",
                user_agent="conformance/1.0",
            ),
            b"SUB topic1 chan1\nRDY 1\n",
        )
        producer = self.connect(
            "p",
            identify(client_id="conformance", hostname="producer-host", user_agent="pub/1.0"),
            pub(b"topic1", b"hello"),
        )
        self.clock.advance(1.5)
        return consumer, producer


class RecordedTextTests(StatsTestCase):
    """The text page against Go's recordings."""

    def test_full(self) -> None:
        """A topic, a channel, a consumer with a message in flight, a producer."""
        self.consumer_and_producer()
        self.assertText("stats_text", "/stats", self.snapshot())

    def test_client_padding(self) -> None:
        """Without IDENTIFY the client is named by its IP, padded to 21 columns."""
        self.connect("c1", b"SUB t c\n")
        self.assertText(
            "stats_text_client_padding",
            "/stats?include_mem=false",
            self.snapshot(include_mem=False),
        )

    def test_empty(self) -> None:
        """No topic and no producer: 'None', with and without the memory block."""
        self.assertText("stats_text_empty", "/stats", self.snapshot())
        self.assertText(
            "stats_text_empty", "/stats?include_mem=false", self.snapshot(include_mem=False)
        )

    def test_paused(self) -> None:
        """Paused topics and channels are marked '*P'."""
        topic = self.broker.get_topic("t")
        topic.get_channel("c").pause()
        topic.pause()
        self.assertText(
            "stats_text_paused", "/stats?include_mem=false", self.snapshot(include_mem=False)
        )


class RecordedJSONTests(StatsTestCase):
    """The JSON document against Go's recordings."""

    def test_full(self) -> None:
        """The full key tree with a consumer and a producer."""
        self.consumer_and_producer()
        self.assertJSON(
            "stats_json_full",
            "/stats?format=json&include_clients=true",
            self.snapshot(include_clients=True),
        )

    def test_empty(self) -> None:
        """A fresh nsqd: topics [], producers null; clients null without include_clients."""
        self.assertJSON("stats_json_empty", "/stats?format=json", self.snapshot())
        self.broker.get_topic("t").get_channel("c")
        self.assertJSON(
            "stats_json_empty",
            "/stats?format=json&include_clients=false&include_mem=false",
            self.snapshot(include_clients=False, include_mem=False),
        )

    def test_sorting(self) -> None:
        """Topics and channels are sorted by name."""
        for name in ("zz", "aa", "mm"):
            self.broker.get_topic(name)
        for name in ("c3", "c1", "c2"):
            self.broker.get_topic("aa").get_channel(name)
        self.assertJSON(
            "stats_json_sorting",
            "/stats?format=json&include_mem=false",
            self.snapshot(include_mem=False),
        )

    def test_filtered(self) -> None:
        """topic and channel filters; an unknown topic gives null, an unknown channel []."""
        t1 = self.broker.get_topic("t1")
        self.broker.get_topic("t2").get_channel("c1")
        t1.get_channel("c1")
        t1.get_channel("c2")
        t1.publish(b"x")
        case = "stats_json_filtered"
        self.assertJSON(
            case,
            "/stats?format=json&topic=t1&channel=c2&include_mem=false",
            self.snapshot(topic="t1", channel="c2", include_mem=False),
        )
        self.assertJSON(
            case,
            "/stats?format=json&topic=t1&include_mem=false",
            self.snapshot(topic="t1", include_mem=False),
        )
        self.assertJSON(
            case,
            "/stats?format=json&topic=nope&include_mem=false",
            self.snapshot(topic="nope", include_mem=False),
        )
        self.assertJSON(
            case,
            "/stats?format=json&topic=t1&channel=nope&include_mem=false",
            self.snapshot(topic="t1", channel="nope", include_mem=False),
        )


class ClientCountersTests(StatsTestCase):
    """Per-client counters kept by the TCP adapter."""

    def stats_of(self, protocol: NSQDProtocol, topic: Optional[str] = None) -> ClientStats:
        return client_stats(protocol, topic)

    def test_defaults_before_identify(self) -> None:
        """Without IDENTIFY the client id and hostname are the remote IP."""
        client = self.stats_of(self.connect("a"))
        self.assertEqual(client.client_id, "127.0.0.1")
        self.assertEqual(client.hostname, "127.0.0.1")
        self.assertEqual(client.remote_address, "127.0.0.1:%d" % (self._port,))
        self.assertEqual(client.user_agent, "")
        self.assertEqual(client.state, 0)
        self.assertEqual(client.connect_ts, int(self.clock.seconds()))

    def test_identify_without_client_id(self) -> None:
        """IDENTIFY without client_id empties it, as Go does."""
        client = self.stats_of(self.connect("a", identify(hostname="h")))
        self.assertEqual((client.client_id, client.hostname), ("", "h"))

    def test_states(self) -> None:
        """Go's numbers: 0 before SUB, 3 subscribed, 4 after CLS."""
        protocol = self.connect("a")
        self.assertEqual(self.stats_of(protocol).state, 0)
        protocol.dataReceived(b"SUB t c\n")
        self.assertEqual(self.stats_of(protocol).state, 3)
        protocol.dataReceived(b"CLS\n")
        self.assertEqual(self.stats_of(protocol).state, 4)

    def test_message_finish_requeue(self) -> None:
        """message_count counts deliveries, finish and requeue counts FIN and REQ."""
        protocol = self.connect("a", b"SUB t c\nRDY 5\n")
        topic = self.broker.get_topic("t")
        for body in (b"1", b"2", b"3"):
            topic.publish(body)
        ids = list(topic.channels["c"]._in_flight)
        protocol.dataReceived(b"FIN " + ids[0] + b"\nREQ " + ids[1] + b" 0\n")
        client = self.stats_of(protocol)
        # The requeued message went straight out again.
        self.assertEqual(
            (client.message_count, client.finish_count, client.requeue_count),
            (4, 1, 1),
        )
        self.assertEqual((client.in_flight_count, client.ready_count), (2, 5))

    def test_pub_counts(self) -> None:
        """PUB and DPUB count one message, MPUB the number of messages."""
        protocol = self.connect(
            "p",
            pub(b"a", b"x"),
            mpub(b"a", [b"1", b"2", b"3"]),
            dpub(b"a", 1000, b"y"),
            pub(b"b", b"z"),
        )
        self.assertEqual(protocol.pub_counts, {"a": 5, "b": 1})

    def test_failed_publish_not_counted(self) -> None:
        """A refused publish is not counted."""
        self.options.mem_queue_size = 1
        self.broker = Broker(self.options, self.clock, MemoryStorage())
        self.factory = NSQDFactory(self.broker, self.clock)
        protocol = self.connect("p", pub(b"a", b"x"), pub(b"a", b"y"))
        self.assertEqual(protocol.pub_counts, {"a": 1})

    def test_one_topic_in_pub_counts(self) -> None:
        """Like Go v1.3, pub_counts shows one topic: the filter's, else the first."""
        protocol = self.connect("p", pub(b"a", b"x"), pub(b"b", b"y"), pub(b"b", b"z"))
        self.assertEqual(
            [(p.topic, p.count) for p in self.stats_of(protocol).pub_counts], [("a", 1)]
        )
        self.assertEqual(
            [(p.topic, p.count) for p in self.stats_of(protocol, "b").pub_counts], [("b", 2)]
        )
        self.assertEqual(self.stats_of(protocol, "c").pub_counts, [])

    def test_ipv6_address(self) -> None:
        """An IPv6 peer is written [host]:port; its host is the default id."""
        transport = StringTransport(peerAddress=IPv6Address("TCP", "::1", 41234))
        protocol = self.factory.buildProtocol(transport.getPeer())
        protocol.makeConnection(transport)
        client = self.stats_of(protocol)
        self.assertEqual((client.remote_address, client.hostname), ("[::1]:41234", "::1"))
        self.assertIn("[V2 ::1:41234 ", client.to_text(self.clock.seconds()))

    def test_unix_address(self) -> None:
        """A UNIX-socket client has no host part."""
        transport = StringTransport(peerAddress=UNIXAddress(None))
        protocol = self.factory.buildProtocol(transport.getPeer())
        protocol.makeConnection(transport)
        client = self.stats_of(protocol)
        self.assertEqual((client.remote_address, client.hostname), ("@", ""))


class CollectTests(StatsTestCase):
    """What collect() includes, and how."""

    def test_producers(self) -> None:
        """Clients that published are producers, in connection order."""
        self.connect("x", b"SUB t c\n")
        second = self.connect("p2", pub(b"b", b"1"))
        first = self.connect("p1", pub(b"a", b"1"))
        producers = self.snapshot().producers or []
        self.assertEqual(
            [p.remote_address for p in producers],
            [second.remote_address, first.remote_address],
        )

    def test_producers_with_topic_filter(self) -> None:
        """With a topic filter a producer of another topic is listed without pub_counts."""
        self.connect("p", pub(b"a", b"1"))
        self.broker.get_topic("b")
        [producer] = self.snapshot(topic="b").producers or []
        self.assertEqual(producer.pub_counts, [])
        self.assertNotIn("pub_counts", producer.to_json())
        # Go prints it as a consumer then.
        self.assertIn("state: 0 inflt: 0", producer.to_text(self.clock.seconds()))

    def test_subscribed_producer(self) -> None:
        """A client that subscribed and published is both a consumer and a producer."""
        self.connect("x", b"SUB t c\n", pub(b"t", b"1"))
        stats = self.snapshot()
        [topic] = stats.topics or []
        [channel] = topic.channels
        self.assertEqual(len(channel.clients or []), 1)
        self.assertEqual(len(stats.producers or []), 1)

    def test_without_clients(self) -> None:
        """include_clients=False: no client lists, no producers, counts kept."""
        self.consumer_and_producer()
        stats = self.snapshot(include_clients=False)
        [topic] = stats.topics or []
        [channel] = topic.channels
        self.assertIsNone(channel.clients)
        self.assertEqual(channel.client_count, 1)
        self.assertIsNone(stats.producers)
        self.assertIsNone(to_json(stats)["producers"])

    def test_without_memory(self) -> None:
        """include_mem=False drops the memory key from the JSON document."""
        self.assertNotIn("memory", to_json(self.snapshot(include_mem=False)))
        self.assertIn("memory", to_json(self.snapshot()))

    def test_unhealthy(self) -> None:
        """A queue that cannot store makes health 'NOK - <why>'."""
        self.broker = Broker(self.options, self.clock, RecordingStorage())
        topic = self.broker.get_topic("t")
        topic._queue.error = "disk full"
        stats = self.snapshot(include_mem=False)
        self.assertEqual(to_json(stats)["health"], "NOK - disk full")
        self.assertIn("\nHealth: NOK - disk full\n", to_text(stats, self.clock.seconds()))

    def test_channel_counters(self) -> None:
        """Depth, in-flight, deferred, requeue and timeout counts come from the channel."""
        consumer = FakeConsumer(ready_count=1, msg_timeout=5.0)
        topic = self.broker.get_topic("t")
        channel = topic.get_channel("c")
        channel.add_consumer(consumer)
        topic.publish(b"one")
        topic.publish(b"two")
        topic.publish_deferred(b"later", 60.0)
        self.clock.advance(6)
        [topic_stats] = self.snapshot(include_clients=False).topics or []
        [stats] = topic_stats.channels
        self.assertEqual(
            (stats.depth, stats.in_flight_count, stats.deferred_count),
            (1, 1, 1),
        )
        self.assertEqual(
            (stats.message_count, stats.requeue_count, stats.timeout_count),
            (3, 0, 1),
        )
        self.assertEqual((topic_stats.message_count, topic_stats.message_bytes), (3, 11))

    def test_connected_duration(self) -> None:
        """A client's age is in whole seconds, as Go's Truncate(time.Second)."""
        self.connect("x", b"SUB t c\n")
        self.clock.advance(75.5)
        text = to_text(self.snapshot(include_mem=False), self.clock.seconds())
        self.assertIn(" connected: 1m15s\n", text)
        self.assertIn("\nuptime 1m15.5s\n", text)

    def test_start_time(self) -> None:
        """start_time is whole Unix seconds in JSON and RFC 3339 in text."""
        self.start_time += 0.75
        stats = self.snapshot(include_mem=False)
        self.assertEqual(to_json(stats)["start_time"], int(self.start_time))
        line = to_text(stats, self.clock.seconds()).splitlines()[1]
        self.assertIsNotNone(
            re.fullmatch(
                r"start_time \d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(Z|[+-]\d\d:\d\d)", line
            ),
            line,
        )

    def test_e2e_latency(self) -> None:
        """With percentiles set, channels and their topic report them."""
        self.options.e2e_processing_latency_percentile = [1.0, 0.5]
        self.broker = Broker(self.options, self.clock, MemoryStorage())
        self.factory = NSQDFactory(self.broker, self.clock)
        topic = self.broker.get_topic("t")
        consumers = {}
        for name in ("a", "b"):
            consumers[name] = FakeConsumer(ready_count=1)
            topic.get_channel(name).add_consumer(consumers[name])
        self.broker.get_topic("idle")
        topic.publish(b"y")
        self.clock.advance(0.002)
        for name, consumer in consumers.items():
            [message] = consumer.take()
            topic.channels[name].finish(consumer, message.id)
        stats = self.snapshot(include_clients=False, include_mem=False)
        document = to_json(stats)
        idle, busy = document["topics"]
        self.assertEqual(idle["e2e_processing_latency"], {"count": 0, "percentiles": None})
        self.assertEqual(busy["e2e_processing_latency"]["count"], 2)
        self.assertEqual(
            [p["quantile"] for p in busy["e2e_processing_latency"]["percentiles"]], [1, 0.5]
        )
        self.assertEqual(
            [c["e2e_processing_latency"]["count"] for c in busy["channels"]], [1, 1]
        )
        text = to_text(stats, self.clock.seconds())
        self.assertIn(
            "   [t              ] depth: 0     be-depth: 0     msgs: 1        "
            "e2e%: 2.0ms, 2.0ms\n",
            text,
        )

    def test_backend_depth(self) -> None:
        """backend_depth is the part of a disk queue past its memory front."""
        directory = self.mktemp()
        os.makedirs(directory)
        broker = make_broker(
            self.clock,
            DiskStorage(),
            data_path=directory,
            mem_queue_size=2,
            max_bytes_per_file=4096,
            sync_every=2500,
            sync_timeout=2.0,
        )
        self.addCleanup(broker.close)
        topic = broker.get_topic("t")
        for body in (b"1", b"2", b"3", b"4", b"5"):
            topic.publish(body)
        self.assertEqual(topic._queue.backend_depth(), 3)
        [stats] = collect(broker, [], self.start_time, include_mem=False).topics or []
        self.assertEqual((stats.depth, stats.backend_depth), (5, 3))


class BoolParamTests(SynchronousTestCase):
    """Go's boolParams for include_clients and include_mem."""

    def test_values(self) -> None:
        """true/1 and false/0; anything else, or nothing, is the default (true)."""
        self.assertTrue(parse_bool_param("true"))
        self.assertTrue(parse_bool_param("1"))
        self.assertFalse(parse_bool_param("false"))
        self.assertFalse(parse_bool_param("0"))
        self.assertTrue(parse_bool_param("no"))
        self.assertTrue(parse_bool_param(""))
        self.assertTrue(parse_bool_param(None))
        self.assertFalse(parse_bool_param("yes", default=False))
