"""
Tests for :mod:`txnsq.spark.batching`.
"""

from __future__ import annotations

from twisted.trial.unittest import SynchronousTestCase

from txnsq.protocol.v2_client import mpub_body
from txnsq.spark.batching import MPubBatcher, RowError, check_sink_schema, row_message


class CheckSinkSchemaTests(SynchronousTestCase):
    """check_sink_schema."""

    def test_body_required(self) -> None:
        """A DataFrame without a body column is refused with its column names."""
        error = self.assertRaises(ValueError, check_sink_schema, [("page", "string")], "t")
        self.assertIn("needs a 'body' column", str(error))
        self.assertIn("page", str(error))

    def test_body_type(self) -> None:
        """A body that is neither binary nor string is refused, naming its type."""
        error = self.assertRaises(ValueError, check_sink_schema, [("body", "integer")], "t")
        self.assertIn("'body' must be binary or string, not integer", str(error))
        check_sink_schema([("body", "binary")], "t")
        check_sink_schema([("BODY", "string")], "t")

    def test_topic(self) -> None:
        """Without a topic option a string topic column is required."""
        error = self.assertRaises(ValueError, check_sink_schema, [("body", "binary")], None)
        self.assertIn("'topic' option", str(error))
        self.assertRaises(ValueError, check_sink_schema, [("body", "binary"), ("topic", "integer")], None)
        check_sink_schema([("body", "binary"), ("topic", "string")], None)


class RowMessageTests(SynchronousTestCase):
    """row_message."""

    def test_body_kinds(self) -> None:
        """Binary bodies are sent as they are, strings as UTF-8."""
        self.assertEqual(row_message({"body": "é"}, 0, "t", 10), ("t", "é".encode("utf-8")))
        self.assertEqual(row_message({"body": bytearray(b"x")}, 0, "t", 10), ("t", b"x"))

    def test_row_topic(self) -> None:
        """Without a topic option each row's topic column is used, and checked."""
        self.assertEqual(row_message({"body": b"x", "topic": "a"}, 0, None, 10), ("a", b"x"))
        error = self.assertRaises(RowError, row_message, {"body": b"x", "topic": "a b"}, 4, None, 10)
        self.assertIn("row 4 has an invalid topic", str(error))

    def test_bad_bodies(self) -> None:
        """Null, empty and oversized bodies are refused, naming the row."""
        self.assertIn("row 2 has a null body", str(self.assertRaises(RowError, row_message, {"body": None}, 2, "t", 10)))
        self.assertIn("row 3 (topic t) has an empty body", str(self.assertRaises(RowError, row_message, {"body": b""}, 3, "t", 10)))
        error = self.assertRaises(RowError, row_message, {"body": b"x" * 11}, 5, "t", 10)
        self.assertIn("row 5 (topic t) has a body of 11 bytes, more than the server's max_msg_size 10", str(error))
        self.assertRaises(RowError, row_message, {"body": 7}, 0, "t", 10)


class MPubBatcherTests(SynchronousTestCase):
    """MPubBatcher."""

    def test_bounded_by_body_size(self) -> None:
        """No batch's MPUB body exceeds max_body_size, and every body is in exactly one batch, in order."""
        batcher = MPubBatcher(100)
        bodies = [b"%02d" % i + b"x" * (i % 17) for i in range(50)]
        batches = []
        for body in bodies:
            batches.extend(batcher.add("t", body))
        batches.extend(batcher.flush())
        self.assertGreater(len(batches), 1)
        for topic, batch in batches:
            self.assertEqual(topic, "t")
            self.assertLessEqual(len(mpub_body(batch)), 100)
        self.assertEqual([b for _, batch in batches for b in batch], bodies)

    def test_exact_fit(self) -> None:
        """A batch fills up to exactly max_body_size."""
        batcher = MPubBatcher(4 + 2 * (4 + 10))
        self.assertEqual(batcher.add("t", b"a" * 10), [])
        self.assertEqual(batcher.add("t", b"b" * 10), [])
        self.assertEqual(batcher.add("t", b"c"), [("t", [b"a" * 10, b"b" * 10])])
        self.assertEqual(batcher.flush(), [("t", [b"c"])])
        self.assertEqual(batcher.flush(), [])

    def test_per_topic(self) -> None:
        """Bodies are grouped by topic."""
        batcher = MPubBatcher(1000)
        for topic, body in [("a", b"1"), ("b", b"2"), ("a", b"3")]:
            self.assertEqual(batcher.add(topic, body), [])
        self.assertEqual(sorted(batcher.flush()), [("a", [b"1", b"3"]), ("b", [b"2"])])

    def test_max_count(self) -> None:
        """A batch also closes at max_count messages."""
        batcher = MPubBatcher(1000, max_count=2)
        batcher.add("t", b"1")
        batcher.add("t", b"2")
        self.assertEqual(batcher.add("t", b"3"), [("t", [b"1", b"2"])])

    def test_too_big_alone(self) -> None:
        """A body that cannot fit in any MPUB is refused."""
        self.assertRaises(RowError, MPubBatcher(20).add, "t", b"x" * 13)
