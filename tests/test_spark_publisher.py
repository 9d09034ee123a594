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


class _FakeMetaq:
    """What publish_rows_idempotent asks of a MetaQ connection."""

    def __init__(self, partitions: int, refuse: bool = False) -> None:
        self.partitions = partitions
        self.refuse = refuse
        self.calls: list = []
        self.closed = False

    def stats(self, topic: str) -> str:
        if not self.partitions:
            from txnsq.client.metaq import MetaqNotFound

            raise MetaqNotFound(404, "no such item")
        return "".join("%s-%d 0 0 0 1\r\n" % (topic, n) for n in range(self.partitions))

    def put_many(self, topic: str, partition: int, messages: list) -> list:
        if self.refuse:
            from txnsq.client.metaq import MetaqResultError

            raise MetaqResultError(500, "put: could not store the message")
        self.calls.append((topic, partition, list(messages)))
        return [(1, partition, 0)] * len(messages)

    def close(self) -> None:
        self.closed = True


class PublishRowsIdempotentTests(SynchronousTestCase):
    """publish_rows_idempotent, with a fake MetaQ connection."""

    def options(self) -> SinkOptions:
        return SinkOptions.parse(
            {"idempotent": "true", "topic": "out", "producer_id": "job", "metaq_addresses": "a:1,b:2"}
        )

    def test_sequences(self) -> None:
        """Task i puts to partition i modulo the topic's, on address i modulo theirs, as producer job/i with sequences batch << 32 | row."""
        from txnsq.metaq.backend import sequence_attribute
        from txnsq.spark import publisher

        fake = _FakeMetaq(partitions=2)
        addresses: list = []

        def connect(address: str, options: SinkOptions) -> _FakeMetaq:
            addresses.append(address)
            return fake

        self.patch(publisher, "PUT_PIPELINE", 2)
        rows = [{"body": b"r%d" % i} for i in range(5)]
        self.assertEqual(publisher.publish_rows_idempotent(rows, self.options(), 3, 7, connect), 5)
        self.assertEqual(addresses, ["b:2"])
        self.assertEqual([(topic, partition, len(m)) for topic, partition, m in fake.calls], [("out", 1, 2), ("out", 1, 2), ("out", 1, 1)])
        sent = [message for call in fake.calls for message in call[2]]
        self.assertEqual(sent, [(b"r%d" % i, sequence_attribute("job/3", (7 << 32) | i)) for i in range(5)])
        self.assertTrue(fake.closed)

    def test_refusals(self) -> None:
        """A target topic that is not retained, or a refused put, fails the task naming the topic."""
        from txnsq.spark.publisher import PublishError, publish_rows_idempotent

        rows = [{"body": b"x"}]
        error = self.assertRaises(
            PublishError, publish_rows_idempotent, rows, self.options(), 0, 0, lambda a, o: _FakeMetaq(0)
        )
        self.assertIn("topic out is not retained on the nsqd with MetaQ at a:1", str(error))
        error = self.assertRaises(
            PublishError, publish_rows_idempotent, rows, self.options(), 0, 0, lambda a, o: _FakeMetaq(1, refuse=True)
        )
        self.assertIn("refused idempotent puts of rows 0 to 0 (topic out partition 0)", str(error))
        self.assertEqual(publish_rows_idempotent([], self.options(), 0, 0, lambda a, o: _FakeMetaq(1)), 0)
