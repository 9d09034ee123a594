"""
Tests for :mod:`txnsq.spark.publisher` against a real nsqd process.
"""

from __future__ import annotations

from twisted.trial.unittest import SynchronousTestCase

from tests_spark.nsqd import shared_nsqd, unique_topic
from txnsq.spark.batching import RowError
from txnsq.spark.consumer import drain
from txnsq.spark.options import SinkOptions, SourceOptions
from txnsq.spark.publisher import publish_rows


class PublishRowsTests(SynchronousTestCase):
    """publish_rows."""

    def setUp(self) -> None:
        self.nsqd = shared_nsqd()
        self.topic = unique_topic()

    def sink(self, **extra: str) -> SinkOptions:
        raw = {"nsqd_tcp_addresses": self.nsqd.tcp_address}
        raw.update(extra)
        return SinkOptions.parse(raw)

    def received(self, topic: str) -> list:
        options = SourceOptions.parse(
            {"nsqd_tcp_addresses": self.nsqd.tcp_address, "topic": topic, "channel": "check", "drain_timeout": "0.5"},
            False,
        )
        return sorted(m.body for m in drain(self.nsqd.tcp_address, options, 2500))

    def create_channel(self, topic: str) -> None:
        self.nsqd.create_channel(topic, "check")

    def test_batches_by_body_size(self) -> None:
        """Rows are published in several MPUBs when max_body_size is small; all arrive."""
        self.create_channel(self.topic)
        rows = [{"body": "row %04d" % i} for i in range(1000)]
        options = self.sink(topic=self.topic, max_msg_size="100", max_body_size="1000")
        self.assertEqual(publish_rows(iter(rows), options), 1000)
        self.assertEqual(self.received(self.topic), sorted(r["body"].encode() for r in rows))

    def test_topic_column(self) -> None:
        """Without a topic option each row goes to its own topic."""
        other = unique_topic()
        self.create_channel(self.topic)
        self.create_channel(other)
        rows = [{"body": b"a", "topic": self.topic}, {"body": b"b", "topic": other}, {"body": b"c", "topic": self.topic}]
        self.assertEqual(publish_rows(rows, self.sink()), 3)
        self.assertEqual(self.received(self.topic), [b"a", b"c"])
        self.assertEqual(self.received(other), [b"b"])

    def test_oversized_row(self) -> None:
        """A row larger than max_msg_size stops the task, naming the row, before its batch is sent."""
        self.create_channel(self.topic)
        rows = [{"body": b"ok"}, {"body": b"x" * 101}]
        error = self.assertRaises(RowError, publish_rows, rows, self.sink(topic=self.topic, max_msg_size="100"))
        self.assertIn("row 1", str(error))
        self.assertEqual(self.received(self.topic), [])

    def test_no_rows(self) -> None:
        """A task without rows publishes nothing and does not connect."""
        self.assertEqual(publish_rows([], self.sink(topic=self.topic, nsqd_tcp_addresses="127.0.0.1:1")), 0)
