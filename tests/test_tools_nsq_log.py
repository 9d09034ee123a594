"""Tests for txnsq.tools.nsq_log."""

from __future__ import annotations

import io
import json
from typing import Any

from twisted.internet.task import Clock
from twisted.trial.unittest import SynchronousTestCase

from tests.metaq_fakes import FakeMetaqServer, FakeMetaqStore, Pump
from txnsq import cli
from txnsq.client.metaq import LogRecord, MetaqClient, MetaqNotFound, MetaqReader
from txnsq.nsqd.guid import TWEPOCH
from txnsq.tools.nsq_log import LogPrinter, follow_partition, format_json, nsq_log_flags, timestamp_ns, validate


def parse(*argv: str) -> Any:
    return cli.parse_flags(nsq_log_flags(), list(argv))


class ValidateTests(SynchronousTestCase):
    """The flag checks."""

    def test_required(self) -> None:
        """The address and the topic are required."""
        self.assertEqual(validate(parse("--topic=t")), "--nsqd-metaq-address required")
        self.assertEqual(validate(parse("--nsqd-metaq-address=h:1")), "--topic required")
        self.assertIsNone(validate(parse("--nsqd-metaq-address=h:1", "--topic=t")))

    def test_offset_and_earliest(self) -> None:
        """--offset and --earliest exclude each other."""
        values = parse("--nsqd-metaq-address=h:1", "--topic=t", "--offset=0", "--earliest")
        self.assertEqual(validate(values), "use --offset or --earliest not both")

    def test_bad_values(self) -> None:
        """A bad format, size, partition or TLS pairing is refused with its message."""
        base = ("--nsqd-metaq-address=h:1", "--topic=t")
        self.assertEqual(validate(parse(*base, "--format=xml")), "--format must be text or json")
        self.assertEqual(validate(parse(*base, "--max-size=0")), "--max-size must be positive")
        self.assertEqual(validate(parse(*base, "--partition=-1")), "--partition must be 0 or more")
        self.assertEqual(validate(parse(*base, "--tls-cert=c")), "--tls-cert and --tls-key go together")
        self.assertEqual(validate(parse(*base, "--offset=-5")), "--offset must be 0 or more")


class TimestampFlagTests(SynchronousTestCase):
    """--timestamp's forms and checks."""

    def test_forms(self) -> None:
        """Unix milliseconds and RFC 3339 (any zone, fractions) are read as nsqd's rewind reads them, in nanoseconds."""
        self.assertEqual(timestamp_ns("1795687200000"), 1795687200000 * 1000000)
        self.assertEqual(timestamp_ns("2026-11-26T10:00:00.25Z"), 1795687200250000000)
        self.assertEqual(timestamp_ns("2026-11-26T11:00:00+01:00"), 1795687200000000000)

    def test_validate(self) -> None:
        """A bad --timestamp, or one with --offset or --earliest, is refused with its message."""
        base = ("--nsqd-metaq-address=h:1", "--topic=t")
        self.assertIsNone(validate(parse(*base, "--timestamp=1795687200000")))
        self.assertEqual(
            validate(parse(*base, "--timestamp=yesterday")), "--timestamp must be RFC 3339 or unix milliseconds"
        )
        self.assertEqual(
            validate(parse(*base, "--timestamp=-5")), "--timestamp must be RFC 3339 or unix milliseconds"
        )
        for other in ("--offset=0", "--earliest"):
            self.assertEqual(
                validate(parse(*base, "--timestamp=1", other)), "use --timestamp without --offset or --earliest"
            )


def nsqd_id(time_ms: int, sequence: int = 0) -> int:
    """An id in nsqd's layout published at unix milliseconds ``time_ms``."""
    return ((time_ms * 1000000 >> 20) - TWEPOCH) << 22 | sequence


class LogPrinterTests(SynchronousTestCase):
    """Output formats."""

    def test_text(self) -> None:
        """Text is each body and a newline, stopping at the total."""
        out = io.BytesIO()
        printer = LogPrinter(out, 0, "text", total=2)
        printer.write([LogRecord(1, 0, None, b"a", 0, 21), LogRecord(2, 0, None, b"b", 21, 21)])
        printer.write([LogRecord(3, 0, None, b"c", 42, 21)])
        self.assertEqual(out.getvalue(), b"a\nb\n")
        self.assertTrue(printer.finished)

    def test_since(self) -> None:
        """With since_ns, records whose id time is before it are skipped and not counted toward the total."""
        out = io.BytesIO()
        printer = LogPrinter(out, 0, "text", total=2, since_ns=1795687200000 * 1000000)
        old, new = nsqd_id(1795687199990), nsqd_id(1795687200000, 1)
        printer.write([LogRecord(old, 0, None, b"old", 0, 23), LogRecord(new, 0, None, b"new", 23, 23)])
        printer.write([LogRecord(old, 0, None, b"late old", 46, 28)])
        self.assertEqual((out.getvalue(), printer.shown, printer.finished), (b"new\n", 1, False))

    def test_json(self) -> None:
        """JSON gives id as 16 hex digits, partition, offset, flag, attribute and body."""
        line = format_json(LogRecord(2**64 - 2, 1, b"k", "h\u00e9".encode("utf-8"), 42, 30), 3)
        self.assertEqual(
            json.loads(line),
            {"id": "fffffffffffffffe", "partition": 3, "offset": 42, "flag": 1, "attribute": "k", "body": "h\u00e9"},
        )
        self.assertTrue(line.endswith(b"}\n"))

    def test_json_binary(self) -> None:
        """A body that is not UTF-8 is given in base64; no attribute is null."""
        line = json.loads(format_json(LogRecord(1, 0, None, b"\xff\x00", 0, 22), 0))
        self.assertEqual(line["body_base64"], "/wA=")
        self.assertNotIn("body", line)
        self.assertIsNone(line["attribute"])


class FollowPartitionTests(SynchronousTestCase):
    """follow_partition through the fake broker."""

    def setUp(self) -> None:
        self.store = FakeMetaqStore(topics=("t",))
        self.clock = Clock()
        self.client = MetaqClient("h:1", self.clock)
        self.pump = Pump(self.client, FakeMetaqServer(self.store))
        self.out = io.BytesIO()

    def test_stops_at_end(self) -> None:
        """Without --follow the walk ends at the end of the partition."""
        for n in range(5):
            self.store.add("t", 0, b"%d" % (n,))
        reader = MetaqReader(self.client, "t", 0, 0, max_size=50)
        done = follow_partition(reader, LogPrinter(self.out, 0), self.clock)
        self.pump.flush()
        self.assertEqual(self.successResultOf(done), 0)
        self.assertEqual(self.out.getvalue(), b"0\n1\n2\n3\n4\n")

    def test_stops_after_n(self) -> None:
        """-n stops the walk after that many records."""
        for n in range(5):
            self.store.add("t", 0, b"%d" % (n,))
        reader = MetaqReader(self.client, "t", 0, 0, max_size=50)
        done = follow_partition(reader, LogPrinter(self.out, 0, total=3), self.clock)
        self.pump.flush()
        self.assertEqual(self.successResultOf(done), 0)
        self.assertEqual(self.out.getvalue(), b"0\n1\n2\n")

    def test_follow_polls(self) -> None:
        """With --follow the end is polled every poll interval and new records are printed."""
        reader = MetaqReader(self.client, "t", 0, 0)
        done = follow_partition(reader, LogPrinter(self.out, 0), self.clock, True, 2.0)
        self.pump.flush()
        self.assertNoResult(done)
        self.store.add("t", 0, b"later")
        self.clock.advance(1.9)
        self.pump.flush()
        self.assertEqual(self.out.getvalue(), b"")
        self.clock.advance(0.1)
        self.pump.flush()
        self.assertEqual(self.out.getvalue(), b"later\n")
        done.cancel()
        self.failureResultOf(done)
        self.assertEqual(self.clock.getDelayedCalls(), [])

    def test_error_fails(self) -> None:
        """An unknown partition fails the walk with the client's error."""
        reader = MetaqReader(self.client, "t", 4, 0)
        done = follow_partition(reader, LogPrinter(self.out, 4), self.clock)
        self.pump.flush()
        self.failureResultOf(done, MetaqNotFound)
