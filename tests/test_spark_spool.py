"""
Tests for :mod:`txnsq.spark.spool` and :mod:`txnsq.spark.records`.
"""

from __future__ import annotations

import os
from datetime import datetime, timezone

from twisted.trial.unittest import SynchronousTestCase

from txnsq.spark.records import NSQMessage, to_row
from txnsq.spark.spool import Spool, SpoolError, batch_number

_MESSAGES = [
    NSQMessage(b"0123456789abcdef", 1_700_000_000_123_456_789, 1, b"first", "127.0.0.1:4150"),
    NSQMessage(b"fedcba9876543210", 1_700_000_001_000_000_000, 3, b"\x00" * 1000, "[::1]:4150"),
    NSQMessage(b"0000000000000000", 0, 65535, b"", "h:1"),
]


class SpoolTests(SynchronousTestCase):
    """Spool."""

    def setUp(self) -> None:
        self.spool = Spool(self.mktemp())

    def test_round_trip(self) -> None:
        """A batch reads back as written: ids, timestamps, attempts, bodies and addresses."""
        self.spool.write(3, _MESSAGES)
        self.assertEqual(self.spool.read(3), _MESSAGES)
        self.spool.write(4, [])
        self.assertEqual(self.spool.read(4), [])
        self.assertEqual(self.spool.batches(), [3, 4])

    def test_rewrite(self) -> None:
        """Writing a batch number again replaces its file."""
        self.spool.write(1, _MESSAGES)
        self.spool.write(1, _MESSAGES[:1])
        self.assertEqual(self.spool.read(1), _MESSAGES[:1])

    def test_delete_through(self) -> None:
        """delete_through removes the batches up to and including the number."""
        for n in (1, 2, 3, 10):
            self.spool.write(n, _MESSAGES)
        self.spool.delete_through(3)
        self.assertEqual(self.spool.batches(), [10])

    def test_missing_and_damaged(self) -> None:
        """A missing batch and a truncated file raise SpoolError."""
        self.assertRaises(SpoolError, self.spool.read, 9)
        self.spool.write(2, _MESSAGES)
        path = os.path.join(self.spool.path, "batch-2.spool")
        with open(path, "rb") as f:
            data = f.read()
        with open(path, "wb") as f:
            f.write(data[:-10])
        self.assertIn("truncated", str(self.assertRaises(SpoolError, self.spool.read, 2)))

    def test_last_batch(self) -> None:
        """The last batch number handed out survives a new Spool on the same directory."""
        self.assertEqual(self.spool.last_batch(), 0)
        self.spool.set_last_batch(41)
        self.assertEqual(Spool(self.spool.path).last_batch(), 41)

    def test_batch_number(self) -> None:
        """Offsets are {"batch": n}; anything else is refused."""
        self.assertEqual(batch_number({"batch": 5}), 5)
        self.assertEqual(batch_number(None), 0)
        self.assertRaises(ValueError, batch_number, {"batch": "5"})
        self.assertRaises(ValueError, batch_number, {"offset": 5})


class ToRowTests(SynchronousTestCase):
    """to_row."""

    def test_row(self) -> None:
        """A message becomes (id, UTC timestamp to the microsecond, attempts, topic, nsqd, body)."""
        row = to_row(_MESSAGES[0], "clicks")
        self.assertEqual(
            row,
            (
                "0123456789abcdef",
                datetime(2023, 11, 14, 22, 13, 20, 123456, tzinfo=timezone.utc),
                1,
                "clicks",
                "127.0.0.1:4150",
                b"first",
            ),
        )
