"""Tests for txnsq.tools.nsq_tail."""

from __future__ import annotations

import io
from typing import Any, List

from twisted.trial.unittest import SynchronousTestCase

from txnsq import cli
from txnsq.tools.nsq_tail import TailPrinter, effective_max_in_flight, nsq_tail_flags, validate


class Body:
    """A message with a body."""

    def __init__(self, body: bytes) -> None:
        self.body = body


class TailPrinterTests(SynchronousTestCase):
    """Printing messages."""

    def test_bodies_newline_terminated(self) -> None:
        """Each body is written with a newline and the message finished (True)."""
        out = io.BytesIO()
        handler = TailPrinter(out).handler("t")
        self.assertTrue(handler(Body(b"one")))
        self.assertTrue(handler(Body(b"two")))
        self.assertEqual(out.getvalue(), b"one\ntwo\n")

    def test_print_topic(self) -> None:
        """--print-topic prefixes each line with the topic of its consumer."""
        out = io.BytesIO()
        printer = TailPrinter(out, print_topic=True)
        printer.handler("a")(Body(b"1"))
        printer.handler("b")(Body(b"2"))
        self.assertEqual(out.getvalue(), b"a | 1\nb | 2\n")

    def test_total_over_topics(self) -> None:
        """-n counts messages over all topics, calls done once, and requeues extra deliveries."""
        out = io.BytesIO()
        done: List[bool] = []
        printer = TailPrinter(out, total=2, done=lambda: done.append(True))
        self.assertTrue(printer.handler("a")(Body(b"1")))
        self.assertEqual(done, [])
        self.assertTrue(printer.handler("b")(Body(b"2")))
        self.assertEqual(done, [True])
        self.assertFalse(printer.handler("a")(Body(b"3")))
        self.assertEqual(out.getvalue(), b"1\n2\n")
        self.assertEqual(done, [True])

    def test_max_in_flight_capped_by_n(self) -> None:
        """-n below --max-in-flight lowers it; 0 leaves it."""
        self.assertEqual(effective_max_in_flight(5, 200), 5)
        self.assertEqual(effective_max_in_flight(0, 200), 200)
        self.assertEqual(effective_max_in_flight(500, 200), 200)


class NSQTailFlagsTests(SynchronousTestCase):
    """nsq_tail's flags."""

    def parse(self, *argv: str) -> Any:
        return cli.parse_flags(nsq_tail_flags(), argv)

    def test_usage_is_gos(self) -> None:
        """The usage shows Go's flags, defaults and help."""
        usage = cli.format_defaults(nsq_tail_flags())
        for text in (
            "  -max-in-flight int\n    \tmax number of messages to allow in flight (default 200)\n",
            "  -n int\n    \ttotal messages to show (will wait if starved)\n",
            "  -print-topic\n    \tprint topic name where message was received\n",
            "  -topic value\n    \tNSQ topic (may be given multiple times)\n",
            "  -consumer-opt value\n    \toption to passthrough to nsq.Consumer (may be given multiple times, http://godoc.org/github.com/nsqio/go-nsq#Config)\n",
        ):
            self.assertIn(text, usage)

    def test_topics_repeatable(self) -> None:
        """--topic may be given several times."""
        self.assertEqual(self.parse("--topic=a", "-topic", "b")["topic"], ["a", "b"])

    def test_checks(self) -> None:
        """Go's checks and texts, in Go's order."""
        self.assertEqual(validate(self.parse()), "--nsqd-tcp-address or --lookupd-http-address required")
        self.assertEqual(
            validate(self.parse("--nsqd-tcp-address=a:1", "--lookupd-http-address=b:1")),
            "use --nsqd-tcp-address or --lookupd-http-address not both",
        )
        self.assertEqual(validate(self.parse("--nsqd-tcp-address=a:1")), "--topic required")
        self.assertIsNone(validate(self.parse("--nsqd-tcp-address=a:1", "--topic=t")))
