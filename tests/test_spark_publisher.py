"""
Tests for :mod:`txnsq.spark.publisher` with a fake MetaQ connection (the
publishing to a real nsqd process is in
``tests/integration/test_spark_publisher.py``).
"""

from __future__ import annotations

from twisted.trial.unittest import SynchronousTestCase

from txnsq.spark.options import SinkOptions


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
