"""
``nsq_to_nsq`` as a real process between nsqd running in the test's
reactor on 127.0.0.1: every message arrives on the destination exactly
once, the JSON filters drop and trim messages, two destinations share the
load, and SIGTERM stops it with status 0.

Nothing sleeps for a fixed time: waits poll a condition under a deadline.
"""

from __future__ import annotations

import json
from typing import Any, Dict, Generator, List, Sequence

from twisted.internet import reactor
from twisted.internet.defer import inlineCallbacks
from twisted.trial.unittest import TestCase

from tests.integration.test_tools_process import ended_within, spawn, wait_for
from txnsq.client.consumer import Consumer
from txnsq.client.message import Message
from txnsq.http_client import GoHTTPClient
from txnsq.testing import RunningNSQD, start_nsqd


class NSQToNSQProcessTests(TestCase):
    """nsq_to_nsq between live nsqd."""

    timeout = 120

    @inlineCallbacks
    def setUp(self) -> Generator[Any, Any, None]:  # type: ignore[override]
        self.source = yield self.nsqd()
        self.destination = yield self.nsqd()
        self.http = GoHTTPClient(reactor, 2.0, 5.0)

    @inlineCallbacks
    def nsqd(self) -> Generator[Any, Any, RunningNSQD]:
        nsqd = yield start_nsqd()
        self.addCleanup(nsqd.stop)
        return nsqd

    @inlineCallbacks
    def post(self, nsqd: RunningNSQD, path: str, body: bytes = b"") -> Generator[Any, Any, bytes]:
        code, _, content = yield self.http.request(
            "POST", "http://%s%s" % (nsqd.http_address, path), body
        )
        self.assertEqual(code, 200, content)
        return content

    @inlineCallbacks
    def topic_stats(self, nsqd: RunningNSQD, topic: str) -> Generator[Any, Any, Dict[str, Any]]:
        _, _, content = yield self.http.request(
            "GET", "http://%s/stats?format=json&topic=%s" % (nsqd.http_address, topic)
        )
        for topic_stats in json.loads(content)["topics"]:
            if topic_stats["topic_name"] == topic:
                return topic_stats
        return {}

    @inlineCallbacks
    def source_done(self, topic: str, count: int) -> Generator[Any, Any, bool]:
        """Whether nsq_to_nsq's channel on the source finished ``count`` messages."""
        stats = yield self.topic_stats(self.source, topic)
        for channel in stats.get("channels", []):
            if channel["channel_name"] == "nsq_to_nsq":
                return bool(
                    channel["message_count"] == count
                    and channel["depth"] == 0
                    and channel["in_flight_count"] == 0
                    and channel["deferred_count"] == 0
                )
        return False

    @inlineCallbacks
    def published(self, nsqd: RunningNSQD, topic: str) -> Generator[Any, Any, int]:
        stats = yield self.topic_stats(nsqd, topic)
        return int(stats.get("message_count", 0))

    @inlineCallbacks
    def drain(self, nsqd: RunningNSQD, topic: str, count: int) -> Generator[Any, Any, List[bytes]]:
        """Consume ``count`` bodies from ``topic`` on ``nsqd``."""
        bodies: List[bytes] = []

        def handler(message: Message) -> bool:
            bodies.append(message.body)
            return True

        consumer = Consumer(
            topic, "check", handler, nsqd_tcp_addresses=[nsqd.tcp_address], max_in_flight=100
        )
        self.addCleanup(consumer.close)
        consumer.start()
        yield wait_for(lambda: len(bodies) >= count, "%d messages on %s" % (count, topic))
        return bodies

    def run_tool(self, *args: str, destinations: Sequence[RunningNSQD] = ()) -> Any:
        targets = list(destinations) or [self.destination]
        process = spawn(
            "nsq_to_nsq",
            ["--nsqd-tcp-address=" + self.source.tcp_address]
            + ["--destination-nsqd-tcp-address=" + nsqd.tcp_address for nsqd in targets]
            + list(args),
        )

        def stop() -> Any:
            if not process.ended.called:
                process.signal("KILL")
            return None

        self.addCleanup(stop)
        return process

    @inlineCallbacks
    def test_every_message_once(self) -> Generator[Any, Any, None]:
        """
        Messages on the source topic all arrive on the destination topic
        exactly once; the status line is written; SIGTERM exits 0.
        """
        expected = [b"message %04d" % (i,) for i in range(300)]
        yield self.post(self.source, "/mpub?topic=events", b"\n".join(expected))
        process = self.run_tool("--topic=events", "--destination-topic=copied", "--status-every=100")
        yield wait_for(lambda: self.source_done("events", len(expected)), "the source to be drained")
        count = yield self.published(self.destination, "copied")
        self.assertEqual(count, len(expected))
        bodies = yield self.drain(self.destination, "copied", len(expected))
        self.assertEqual(sorted(bodies), expected)
        process.signal("TERM")
        code = yield ended_within(process)
        self.assertEqual(code, 0, process.err)
        self.assertIn(b"[aggregate]: finished 100 - 99th: ", process.err)
        count = yield self.published(self.destination, "copied")
        self.assertEqual(count, len(expected))

    @inlineCallbacks
    def test_json_filters(self) -> Generator[Any, Any, None]:
        """
        Only JSON messages with the required value are published, trimmed to
        the whitelisted fields; the others are finished on the source.
        """
        messages = [
            b'{"kind": "keep", "id": 1, "secret": "x"}',
            b'{"kind": "drop", "id": 2}',
            b"not json",
            b'{"kind": "keep", "id": 3.5}',
            b'{"kind": 7, "id": 4}',
        ]
        yield self.post(self.source, "/mpub?topic=mixed", b"\n".join(messages))
        process = self.run_tool(
            "--topic=mixed",
            "--require-json-field=kind",
            "--require-json-value=keep",
            "--whitelist-json-field=id",
            "--whitelist-json-field=kind",
        )
        yield wait_for(lambda: self.source_done("mixed", len(messages)), "the source to be drained")
        count = yield self.published(self.destination, "mixed")
        self.assertEqual(count, 2)
        bodies = yield self.drain(self.destination, "mixed", 2)
        self.assertEqual(sorted(bodies), [b'{"id":1,"kind":"keep"}', b'{"id":3.5,"kind":"keep"}'])
        process.signal("TERM")
        code = yield ended_within(process)
        self.assertEqual(code, 0, process.err)

    @inlineCallbacks
    def test_round_robin_two_destinations(self) -> Generator[Any, Any, None]:
        """With two destinations in round-robin mode each gets half, none twice."""
        second = yield self.nsqd()
        expected = [b"m%03d" % (i,) for i in range(100)]
        yield self.post(self.source, "/mpub?topic=split", b"\n".join(expected))
        process = self.run_tool(
            "--topic=split", "--mode=round-robin", destinations=[self.destination, second]
        )
        yield wait_for(lambda: self.source_done("split", len(expected)), "the source to be drained")
        first_count = yield self.published(self.destination, "split")
        second_count = yield self.published(second, "split")
        self.assertEqual((first_count, second_count), (50, 50))
        first_bodies = yield self.drain(self.destination, "split", 50)
        second_bodies = yield self.drain(second, "split", 50)
        self.assertEqual(sorted(first_bodies + second_bodies), expected)
        process.signal("INT")
        code = yield ended_within(process)
        self.assertEqual(code, 0, process.err)
