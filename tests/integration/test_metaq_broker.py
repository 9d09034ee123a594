"""
The MetaQ listener over nsqd's real broker and retained topics
(BrokerMetaqBackend), through NSQDService on 127.0.0.1 port 0.
"""

from __future__ import annotations

import os
from typing import Any, List

from twisted.internet import reactor
from twisted.internet.defer import inlineCallbacks
from twisted.internet.endpoints import TCP4ClientEndpoint, connectProtocol
from twisted.trial.unittest import TestCase

from tests.test_nsqd_service import FrameCollector
from txnsq.client.metaq import MetaqEndOfPartition, MetaqResultError, connect_metaq
from txnsq.nsqd.flags import parse_nsqd_args
from txnsq.nsqd.service import NSQDService
from txnsq.protocol.message import decode_message


class BrokerMetaqTests(TestCase):
    """put and get over MetaQ against the broker's retained topics."""

    @inlineCallbacks
    def setUp(self) -> Any:
        options = parse_nsqd_args(
            [
                "--tcp-address=127.0.0.1:0",
                "--http-address=127.0.0.1:0",
                "--https-address=",
                "--metaq-address=127.0.0.1:0",
                "--data-path=" + self.mktemp(),
                "--retain-topics=^kept",
                "--log-partitions=2",
            ]
        )
        os.makedirs(options.data_path)
        options.validate()
        self.nsqd = NSQDService.fromOptions(options, reactor)
        self.nsqd.startService()
        self.addCleanup(self.nsqd.stopService)
        yield self.nsqd.whenListening()
        self.client = yield connect_metaq(reactor, "127.0.0.1:%d" % (self.nsqd.bound_ports()["MetaQ"],))
        self.addCleanup(self.client.close)

    @inlineCallbacks
    def test_put_creates_retained_and_reaches_channel(self) -> Any:
        """A put creates the topic retained; get reads it back with its attribute; an NSQ consumer gets the payload only."""
        msg_id, partition, offset = yield self.client.put("orders", 0, b"first")
        self.assertEqual((partition, offset), (0, 0))
        self.assertIsNotNone(self.nsqd.broker.retained_log("orders"))
        consumer = FrameCollector()
        yield connectProtocol(TCP4ClientEndpoint(reactor, "127.0.0.1", self.nsqd.bound_ports()["TCP"]), consumer)
        consumer.transport.write(b"  V2SUB orders c\nRDY 5\n")
        yield consumer.wait_for(1)
        yield self.client.put("orders", 1, b"second", attribute=b"k=v")
        frames = yield consumer.wait_for(3)
        self.assertEqual([decode_message(f[1])[3] for f in frames[1:]], [b"first", b"second"])
        got = yield self.client.get("orders", 1, 0, 4096)
        [record] = got.records
        self.assertEqual((record.attribute, record.payload), (b"k=v", b"second"))
        got = yield self.client.get("orders", 0, 0, 4096)
        self.assertEqual(got.records[0].id, msg_id)
        consumer.transport.loseConnection()
        yield consumer.closed

    @inlineCallbacks
    def test_nsq_publish_readable(self) -> Any:
        """A message published over NSQ to a retained topic is read with get."""
        self.nsqd.broker.get_topic("kept").publish(b"via nsq")
        self.assertIsNotNone(self.nsqd.broker.retained_log("kept"))
        got = yield self.client.get("kept", 0, 0, 4096)
        self.assertEqual([r.payload for r in got.records], [b"via nsq"])
        with self.assertRaises(MetaqEndOfPartition):
            yield self.client.get("kept", 0, got.next_offset, 4096)

    @inlineCallbacks
    def test_refusals(self) -> Any:
        """A put to an unretained topic is 403, to a missing partition 404; partition -1 takes the partitions in turn."""
        self.nsqd.broker.get_topic("plain")
        with self.assertRaises(MetaqResultError) as caught:
            yield self.client.put("plain", 0, b"x")
        self.assertEqual(caught.exception.code, 403)
        yield self.client.put("orders", 0, b"x")
        with self.assertRaises(MetaqResultError) as caught:
            yield self.client.put("orders", 5, b"x")
        self.assertEqual(caught.exception.code, 404)
        parts: List[int] = []
        for _ in range(4):
            result = yield self.client.put("orders", -1, b"y")
            parts.append(result[1])
        self.assertEqual(sorted(set(parts)), [0, 1])
        stats = yield self.client.stats("orders")
        self.assertIn("orders-0 0 ", stats)
        self.assertIn("orders-1 0 ", stats)
