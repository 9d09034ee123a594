"""Tests for txnsq.tools.to_nsq, txnsq.tools.splitter and txnsq.tools.throttle."""

from __future__ import annotations

from typing import Any, List

from twisted.internet.defer import Deferred, fail, succeed
from twisted.internet.task import Clock
from twisted.trial.unittest import SynchronousTestCase

from txnsq import cli
from txnsq.tools.splitter import DelimitedSplitter
from txnsq.tools.throttle import Throttle
from txnsq.tools.to_nsq import PublishPump, to_nsq_flags, validate


class DelimitedSplitterTests(SynchronousTestCase):
    """Cutting input into records."""

    def test_split_across_chunks(self) -> None:
        """A record cut across reads comes out whole, without its delimiter."""
        splitter = DelimitedSplitter(b"\n")
        self.assertEqual(splitter.feed(b"one\ntw"), [b"one"])
        self.assertEqual(splitter.feed(b"o\nthree"), [b"two"])
        self.assertEqual(splitter.finish(), [b"three"])

    def test_empty_records_skipped(self) -> None:
        """Empty records (two delimiters in a row) are not published, as in Go."""
        splitter = DelimitedSplitter(b",")
        self.assertEqual(splitter.feed(b"a,,b,"), [b"a", b"b"])
        self.assertEqual(splitter.finish(), [])

    def test_single_byte_only(self) -> None:
        """A delimiter of more than one byte is refused with Go's text."""
        error = self.assertRaises(ValueError, DelimitedSplitter, b"ab")
        self.assertEqual(str(error), "--delimiter must be a single byte")


class ThrottleTests(SynchronousTestCase):
    """Go to_nsq's token bucket."""

    def test_first_token_immediate_then_paced(self) -> None:
        """One message goes at once; the next waits 1/rate seconds."""
        clock = Clock()
        throttle = Throttle(4, clock)
        self.assertIsNone(self.successResultOf(throttle.take()))
        waiting = throttle.take()
        self.assertNoResult(waiting)
        clock.advance(0.25)
        self.successResultOf(waiting)

    def test_burst_capped_at_rate(self) -> None:
        """No more than one second of tokens is saved up."""
        clock = Clock()
        throttle = Throttle(2, clock)
        clock.advance(100)
        taken = [throttle.take() for _ in range(3)]
        self.successResultOf(taken[0])
        self.successResultOf(taken[1])
        self.assertNoResult(taken[2])


class ToNSQFlagsTests(SynchronousTestCase):
    """to_nsq's flags and checks."""

    def parse(self, *argv: str) -> Any:
        return cli.parse_flags(to_nsq_flags(), argv)

    def test_usage_is_gos(self) -> None:
        """The usage lists Go's flags with Go's defaults."""
        usage = cli.format_defaults(to_nsq_flags())
        self.assertIn('  -delimiter string\n    \tcharacter to split input from stdin (default "\\n")\n', usage)
        self.assertIn("  -rate int\n    \tThrottle messages to n/second. 0 to disable\n", usage)
        self.assertIn("  -nsqd-tcp-address value\n    \tdestination nsqd TCP address", usage)

    def test_checks_in_gos_order(self) -> None:
        """--topic, then the delimiter, then an address are required."""
        self.assertEqual(validate(self.parse()), "--topic required")
        self.assertEqual(
            validate(self.parse("--topic=t", "--delimiter=ab")),
            "--delimiter must be a single byte",
        )
        self.assertEqual(validate(self.parse("--topic=t")), "--nsqd-tcp-address required")
        self.assertIsNone(validate(self.parse("--topic=t", "--nsqd-tcp-address=a:1")))


class PublishPumpTests(SynchronousTestCase):
    """Publishing every record to every destination."""

    def test_every_record_to_every_destination(self) -> None:
        """Each record is published to each nsqd, in order; done fires after the last OK."""
        sent: List[List[bytes]] = [[], []]
        answers: List[Deferred[None]] = []

        def destination(index: int) -> Any:
            def publish(body: bytes) -> Deferred[None]:
                sent[index].append(body)
                answer: Deferred[None] = Deferred()
                answers.append(answer)
                return answer

            return publish

        pump = PublishPump([destination(0), destination(1)])
        pump.records([b"a", b"b"])
        pump.end()
        self.assertEqual(sent, [[b"a", b"b"], [b"a", b"b"]])
        self.assertNoResult(pump.done)
        for answer in answers:
            answer.callback(None)
        self.assertEqual(self.successResultOf(pump.done), 2)

    def test_failure_is_reported(self) -> None:
        """A failed publish fails done."""
        pump = PublishPump([lambda body: fail(RuntimeError("E_BAD_TOPIC"))])
        pump.records([b"x", b"y"])
        failure = self.failureResultOf(pump.done, RuntimeError)
        self.assertEqual(str(failure.value), "E_BAD_TOPIC")

    def test_window_pauses_input(self) -> None:
        """Input is paused while a window of messages waits, and resumed after."""
        events: List[str] = []
        answers: List[Deferred[None]] = []

        def publish(body: bytes) -> Deferred[None]:
            answer: Deferred[None] = Deferred()
            answers.append(answer)
            return answer

        pump = PublishPump(
            [publish],
            pause=lambda: events.append("pause"),
            resume=lambda: events.append("resume"),
            window=2,
        )
        pump.records([b"1", b"2", b"3", b"4", b"5"])
        self.assertEqual(len(answers), 2)
        self.assertEqual(events, ["pause"])
        while len(answers) < 5:
            answers[len([a for a in answers if a.called])].callback(None)
        pump.end()
        for answer in answers:
            if not answer.called:
                answer.callback(None)
        self.assertEqual(self.successResultOf(pump.done), 5)
        self.assertEqual(events, ["pause", "resume"])

    def test_throttled(self) -> None:
        """With a throttle the messages go out at its pace."""
        clock = Clock()
        sent: List[bytes] = []

        def publish(body: bytes) -> Deferred[None]:
            sent.append(body)
            return succeed(None)

        pump = PublishPump([publish], Throttle(10, clock))
        pump.records([b"1", b"2", b"3"])
        pump.end()
        self.assertEqual(sent, [b"1"])
        clock.advance(0.1)
        self.assertEqual(sent, [b"1", b"2"])
        clock.advance(0.1)
        self.assertEqual(self.successResultOf(pump.done), 3)
