"""Tests for txnsq.tools.nsq_to_file and txnsq.tools.topic_discoverer."""

from __future__ import annotations

import os
from typing import Any, List

from twisted.internet.defer import Deferred, fail, succeed
from twisted.internet.task import Clock
from twisted.trial.unittest import SynchronousTestCase

from txnsq import cli
from txnsq.tools.file_logger import FileLogger, FileLoggerSettings
from txnsq.tools.nsq_to_file import TopicArchiver, nsq_to_file_flags, settings_from, validate
from txnsq.tools.topic_discoverer import TopicDiscoverer


class FakeArchiver:
    """Records what a discoverer asks of an archiver."""

    def __init__(self, topic: str) -> None:
        self.topic = topic
        self.reopened = 0
        self.stopped = 0

    def reopen(self) -> None:
        self.reopened += 1

    def stop(self) -> "Deferred[None]":
        self.stopped += 1
        return succeed(None)


class TopicDiscovererTests(SynchronousTestCase):
    """Choosing the topics to archive."""

    def setUp(self) -> None:
        self.clock = Clock()
        self.made: List[str] = []
        self.lookupd_topics: Any = succeed(["a1", "b1", "a2"])

    def make(self, topic: str) -> FakeArchiver:
        if topic == "bad":
            raise ValueError("missing <REV>")
        self.made.append(topic)
        return FakeArchiver(topic)

    def discoverer(self, topics: List[str], pattern: str = "") -> TopicDiscoverer:
        return TopicDiscoverer(
            topics, pattern, 60.0, lambda: self.lookupd_topics, self.make, self.clock
        )

    def test_given_topics_no_polling(self) -> None:
        """--topic topics are archived at once and the lookupds are never asked."""
        discoverer = self.discoverer(["x", "y"])
        discoverer.start()
        self.assertEqual(self.made, ["x", "y"])
        self.assertEqual(self.clock.getDelayedCalls(), [])

    def test_pattern_filters_discovered_topics(self) -> None:
        """Without --topic the lookupds are polled every refresh and --topic-pattern filters."""
        discoverer = self.discoverer([], "^a")
        discoverer.start()
        self.assertEqual(self.made, [])
        self.clock.advance(60)
        self.assertEqual(self.made, ["a1", "a2"])
        self.lookupd_topics = succeed(["a1", "a3"])
        self.clock.advance(60)
        self.assertEqual(self.made, ["a1", "a2", "a3"])

    def test_invalid_pattern_matches_nothing(self) -> None:
        """An invalid Go regexp allows no topic, as Go's isTopicAllowed."""
        discoverer = self.discoverer(["a"], "(")
        discoverer.start()
        self.assertEqual(self.made, [])
        self.flushLoggedErrors()

    def test_poll_failure_logged_and_retried(self) -> None:
        """A failed lookupd poll is logged and the next poll tries again."""
        self.lookupd_topics = fail(RuntimeError("down"))
        discoverer = self.discoverer([])
        discoverer.start()
        self.clock.advance(60)
        self.assertEqual(self.made, [])
        self.lookupd_topics = succeed(["z"])
        self.clock.advance(60)
        self.assertEqual(self.made, ["z"])

    def test_archiver_error_skipped(self) -> None:
        """A topic whose archiver cannot be made is skipped."""
        discoverer = self.discoverer(["bad", "good"])
        discoverer.start()
        self.assertEqual(list(discoverer.archivers), ["good"])

    def test_reopen_and_stop(self) -> None:
        """SIGHUP reopens every archiver; stop stops polling and every archiver."""
        discoverer = self.discoverer([])
        discoverer.start()
        self.clock.advance(60)
        discoverer.reopen()
        self.successResultOf(discoverer.stop())
        archivers = list(discoverer.archivers.values())
        self.assertEqual([a.reopened for a in archivers], [1, 1, 1])
        self.assertEqual([a.stopped for a in archivers], [1, 1, 1])
        self.assertEqual(self.clock.getDelayedCalls(), [])


class FakeConsumer:
    """A consumer whose close the test fires."""

    def __init__(self, handler: Any) -> None:
        self.handler = handler
        self.started = False
        self.closing: "Deferred[None]" = Deferred()

    def start(self) -> None:
        self.started = True

    def close(self) -> "Deferred[None]":
        return self.closing

    def is_starved(self) -> bool:
        return False


class Message:
    """A message answered later."""

    def __init__(self, body: bytes) -> None:
        self.body = body
        self.finished = 0

    def enable_async(self) -> None:
        pass

    def finish(self) -> None:
        self.finished += 1


class TopicArchiverTests(SynchronousTestCase):
    """A topic's consumer and file together."""

    def test_shutdown_order(self) -> None:
        """Stop FINs what is written, closes the consumer, then closes and moves the file."""
        base = self.mktemp()
        work, out = os.path.join(base, "w"), os.path.join(base, "o")
        os.makedirs(work)
        clock = Clock()
        settings = FileLoggerSettings(output_dir=out, work_dir=work)
        logger = FileLogger("t", settings, "t<REV>.log", clock)
        consumers: List[FakeConsumer] = []
        fatal: List[str] = []

        def make_consumer(handler: Any) -> FakeConsumer:
            consumers.append(FakeConsumer(handler))
            return consumers[0]

        archiver = TopicArchiver(logger, make_consumer, fatal.append)
        archiver.start()
        self.assertTrue(consumers[0].started)
        first, second = Message(b"1"), Message(b"2")
        consumers[0].handler(first)
        consumers[0].handler(second)
        self.assertEqual(second.finished, 0)
        stopped = archiver.stop()
        self.assertEqual(second.finished, 1)
        self.assertNoResult(stopped)
        self.assertEqual(os.listdir(work), ["t-000000.log"])
        consumers[0].closing.callback(None)
        self.successResultOf(stopped)
        self.assertEqual(os.listdir(work), [])
        self.assertEqual(os.listdir(out), ["t-000000.log"])
        self.assertEqual(fatal, [])

    def test_write_failure_fatal(self) -> None:
        """A file that cannot be opened is reported to on_fatal with Go's words."""
        settings = FileLoggerSettings(output_dir="/nonexistent/x", work_dir="/proc/nope")
        logger = FileLogger("t", settings, "t<REV>.log", Clock())
        fatal: List[str] = []
        consumers: List[FakeConsumer] = []

        def make_consumer(handler: Any) -> FakeConsumer:
            consumers.append(FakeConsumer(handler))
            return consumers[0]

        TopicArchiver(logger, make_consumer, fatal.append)
        consumers[0].handler(Message(b"x"))
        self.assertEqual(len(fatal), 1)
        self.assertTrue(fatal[0].startswith("[t/nsq_to_file] "), fatal)


class NSQToFileFlagsTests(SynchronousTestCase):
    """nsq_to_file's flags and checks."""

    def parse(self, *argv: str) -> Any:
        return cli.parse_flags(nsq_to_file_flags(), argv)

    def test_usage_is_gos(self) -> None:
        """The usage shows Go's flags, defaults and help."""
        usage = cli.format_defaults(nsq_to_file_flags())
        for text in (
            '  -channel string\n    \tnsq channel (default "nsq_to_file")\n',
            '  -datetime-format string\n    \tstrftime compatible format for <DATETIME> in filename format (default "%Y-%m-%d_%H")\n',
            '  -filename-format string\n    \toutput filename format (<TOPIC>, <HOST>, <PID>, <DATETIME>, <REV> are replaced. <REV> is increased when file already exists) (default "<TOPIC>.<HOST><REV>.<DATETIME>.log")\n',
            "  -gzip-level int\n    \tgzip compression level (1-9, 1=BestSpeed, 9=BestCompression) (default 6)\n",
            "  -rotate-size rotate-size\n    \trotate the file when it grows bigger than rotate-size bytes\n",
            "  -sync-interval duration\n    \tsync file to disk every duration (default 30s)\n",
            "  -topic-refresh duration\n    \thow frequently the topic list should be refreshed (default 1m0s)\n",
            '  -log-prefix string\n    \tlog message prefix (default "[nsq_to_file] ")\n',
            '  -output-dir string\n    \tdirectory to write output files to (default "/tmp")\n',
        ):
            self.assertIn(text, usage)

    def test_checks(self) -> None:
        """Go's checks, in Go's order, with Go's texts."""
        nsqd = "--nsqd-tcp-address=a:1"
        cases = [
            (("--channel=",), "--channel is required"),
            (("--http-client-request-timeout=0s",), "--http-client-request-timeout should be positive"),
            ((), "--nsqd-tcp-address or --lookupd-http-address required."),
            ((nsqd, "--lookupd-http-address=b:1"), "use --nsqd-tcp-address or --lookupd-http-address not both"),
            ((nsqd, "--gzip-level=0"), "invalid --gzip-level value (0), should be 1-9"),
            ((nsqd,), "--topic or --topic-pattern required"),
            ((nsqd, "--topic-pattern=x"), "--lookupd-http-address must be specified when no --topic specified"),
            ((nsqd, "--topic=t"), None),
        ]
        for argv, message in cases:
            self.assertEqual(validate(self.parse(*argv)), message, argv)

    def test_work_dir_defaults_to_output_dir(self) -> None:
        """Without --work-dir files are written in --output-dir."""
        settings = settings_from(self.parse("--output-dir=/o", "--rotate-size=10", "--gzip"))
        self.assertEqual((settings.work_dir, settings.output_dir), ("/o", "/o"))
        self.assertEqual((settings.rotate_size, settings.gzip), (10, True))
