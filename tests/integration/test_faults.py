"""
The fault suite at CI scale: nsqd under load stopped with SIGTERM and
SIGKILL and started again, a connection storm, a corrupt segment in the
middle of a disk queue, and a fuzz run with a control client.  The same
machinery (:mod:`tests.integration.faults`) runs at full scale in
``bench/system/soak.py``; docs/reliability.md has its figures.
"""

from __future__ import annotations

import os
import struct
from typing import Any, Generator, List

from twisted.internet.defer import Deferred, inlineCallbacks, succeed
from twisted.trial.unittest import SynchronousTestCase, TestCase

from tests.integration.faults import (
    CLEAN_EXIT,
    Consumer,
    ControlClient,
    NSQDRunner,
    Publisher,
    account,
    connection_storm,
    durable_flags,
    message_body,
    message_number,
    raise_open_files_limit,
    run_fuzz,
    run_restart_loop,
)
from tests.integration.nsq_client import Message, connect
from tests.integration.test_durability import (
    bodies_of,
    message_body as record_body,
    read_meta,
    segment_path,
    segment_records,
)
from tests.integration.v2_strategies import FUZZ_TOPICS, FrameBatches, command_pool

#: Messages a second published during the restart loops.
RATE = 5000

#: Seconds of load before each signal.
CYCLE_SECONDS = 1.5

#: Connections of the storm.
STORM = 2000

#: Frames of the fuzz run, and the size of the Hypothesis-drawn command pool.
FUZZ_FRAMES = 40000
#: Frames sent before the fuzz run's starting RSS is read. Under PyPy the
#: first ~25,000 frames make the JIT compile nsqd's paths and the GC size
#: its heap: RSS went from 142 MB (3,600 frames) to 169 MB (25,000), then
#: stayed within 0.7 MB up to 80,000 frames. That is warm-up, not growth
#: that goes on; CPython's RSS is flat from the start.
FUZZ_WARMUP_FRAMES = 10000
FUZZ_POOL = 3000

WAIT = 30.0


def _make_dir(test: Any) -> str:
    path = os.path.abspath(test.mktemp())
    os.makedirs(path)
    return path


class AccountingTests(SynchronousTestCase):
    """The restart loops' accounting counts exactly what was lost and duplicated."""

    def account_of(self, acknowledged: List[int], deliveries: List[int], sent: int) -> Any:
        publisher = Publisher(None, 0, "t", 1.0)
        publisher.sent = sent
        publisher.acknowledged = set(acknowledged)
        consumer = Consumer(None, 0, "t", "c")
        for number in deliveries:
            consumer._delivered(message_body(number, 64), 1)
        return account("TERM", 1, 1.0, publisher, consumer)

    def test_body_numbers(self) -> None:
        """A message body carries its number and pads to the size asked; other bodies have none."""
        body = message_body(1234, 64)
        self.assertEqual((len(body), message_number(body)), (64, 1234))
        self.assertIsNone(message_number(b"fault xyz"))
        self.assertIsNone(message_number(b"control 1"))

    def test_lost_and_duplicates(self) -> None:
        """Acknowledged numbers never delivered are lost; each extra delivery is a duplicate; unacknowledged ones delivered are neither."""
        report = self.account_of([0, 1, 2, 3], [0, 0, 0, 2, 4], sent=5)
        self.assertEqual(report.lost, [1, 3])
        self.assertEqual(report.duplicated, {0: 2})
        self.assertEqual(report.duplicates, 2)
        self.assertEqual((report.delivered, report.deliveries, report.foreign), (3, 5, 0))

    def test_foreign_numbers(self) -> None:
        """A delivered number the publisher never sent is counted as foreign."""
        report = self.account_of([0], [0, 7], sent=1)
        self.assertEqual((report.lost, report.foreign), ([], 1))


class _FakeControlConnection:
    """An NSQClient stand-in for ControlClient: PUB runs ``on_pub``, FINs are recorded."""

    def __init__(self) -> None:
        self.lost = None
        self.messages: List[Message] = []
        self.fins: List[bytes] = []
        self.on_pub: Any = lambda body: None

    def pub(self, topic: str, body: bytes) -> "Deferred[bytes]":
        self.on_pub(body)
        return succeed(b"OK")

    def wait_messages(self, count: int, timeout: float) -> "Deferred[bool]":
        return succeed(len(self.messages) >= count)

    def fin(self, msg_id: bytes) -> None:
        self.fins.append(msg_id)

    def round_trip(self, timeout: float) -> "Deferred[bytes]":
        return succeed(b"E_FIN_FAILED")


class ControlClientTests(SynchronousTestCase):
    """The fuzz run's control round trip checks its own message, whenever it arrives."""

    def control(self, count: int = 0) -> Any:
        control = ControlClient(None, 0)
        control.count = count
        control.producer = _FakeControlConnection()
        control.consumer = consumer = _FakeControlConnection()
        return control, consumer

    def deliver(self, consumer: Any, *bodies: bytes) -> None:
        for body in bodies:
            msg_id = b"%016d" % (len(consumer.messages),)
            consumer.messages.append(Message(msg_id, 1, 0, body, 0.0))

    def test_delivery_before_ok(self) -> None:
        """A delivery that arrives before the producer's OK completes the round trip and is finished."""
        control, consumer = self.control()
        control.producer.on_pub = lambda body: self.deliver(consumer, body)
        self.successResultOf(control.round_trip())
        self.assertEqual((consumer.fins, consumer.messages), ([b"0000000000000000"], []))

    def test_earlier_control_message(self) -> None:
        """A requeued control message of an earlier round trip is finished and passed over."""
        control, consumer = self.control(count=2)
        self.deliver(consumer, b"control 2")
        control.producer.on_pub = lambda body: self.deliver(consumer, b"control 1", body)
        self.successResultOf(control.round_trip())
        self.assertEqual(
            consumer.fins, [b"0000000000000000", b"0000000000000001", b"0000000000000002"]
        )

    def test_other_message(self) -> None:
        """Any other message first, a later control number included, fails the round trip."""
        for stray in (b"control 4", b"fuzz 1", b"control x"):
            control, consumer = self.control(count=2)
            control.producer.on_pub = lambda body, stray=stray: self.deliver(consumer, stray, body)
            failure = self.failureResultOf(control.round_trip(), AssertionError)
            self.assertIn("expected %r" % (b"control 3",), str(failure.value))

    def test_other_message_before_pub(self) -> None:
        """A message other than an earlier control message, there before the PUB, fails the round trip."""
        control, consumer = self.control(count=2)
        self.deliver(consumer, b"control 3")
        control.producer.on_pub = lambda body: self.deliver(consumer, body)
        failure = self.failureResultOf(control.round_trip(), AssertionError)
        self.assertIn("before PUB", str(failure.value))

    def test_never_arrived(self) -> None:
        """No delivery fails the round trip."""
        control, consumer = self.control()
        failure = self.failureResultOf(control.round_trip(), AssertionError)
        self.assertEqual(str(failure.value), "control message 1 never arrived")
        self.assertEqual(consumer.fins, [])


class RestartLoopTests(TestCase):
    """Under load, nsqd stopped and started again on its data keeps every acknowledged message."""

    timeout = 240

    def setUp(self) -> None:
        from twisted.internet import reactor

        self.reactor: Any = reactor

    def runner(self, *flags: str) -> NSQDRunner:
        """An nsqd runner on a fresh data directory, reaped at cleanup."""
        runner = NSQDRunner(self.reactor, _make_dir(self), flags)
        self.addCleanup(runner.reap)
        return runner

    @inlineCallbacks
    def test_sigterm_loop(self) -> Generator[Any, Any, None]:
        """Five SIGTERM/restart cycles under 5,000 msg/s: each exit is clean, nothing acknowledged is lost and nothing is delivered twice."""
        runner = self.runner()
        report = yield run_restart_loop(self.reactor, runner, "TERM", 5, RATE, CYCLE_SECONDS)
        summary = report.summary() + "\n" + runner.output()
        self.assertEqual(report.exits, [CLEAN_EXIT] * 5, summary)
        self.assertGreater(report.acknowledged, RATE * CYCLE_SECONDS, summary)
        self.assertEqual(report.lost, [], summary)
        self.assertEqual(report.duplicated, {}, summary)
        self.assertEqual((report.foreign, report.errors), (0, []), summary)

    @inlineCallbacks
    def test_sigkill_loop_durable(self) -> Generator[Any, Any, None]:
        """Three SIGKILL/restart cycles under 5,000 msg/s with --mem-queue-size=0 --sync-every=1: nothing acknowledged is lost."""
        runner = self.runner(*durable_flags())
        report = yield run_restart_loop(self.reactor, runner, "KILL", 3, RATE, CYCLE_SECONDS)
        summary = report.summary() + "\n" + runner.output()
        self.assertEqual([status.signal for status in report.exits], [9] * 3, summary)
        self.assertGreater(report.acknowledged, RATE * CYCLE_SECONDS, summary)
        # Redelivery of what was in flight at the kill is at-least-once
        # delivery working: reported, not asserted.
        self.assertEqual(report.lost, [], summary)
        self.assertEqual((report.foreign, report.errors), (0, []), summary)


class ConnectionStormTests(TestCase):
    """nsqd takes thousands of connections opened one after another and serves every one."""

    timeout = 180

    @inlineCallbacks
    def test_storm(self) -> Generator[Any, Any, None]:
        """2,000 connections opened one after another all connect, each answers IDENTIFY, and nsqd then still delivers."""
        from twisted.internet import reactor

        limit = raise_open_files_limit(2 * STORM + 200)
        self.assertGreaterEqual(limit, 2 * STORM + 200, "the open files limit is too low for the storm")
        runner = NSQDRunner(reactor, _make_dir(self))
        self.addCleanup(runner.reap)
        yield runner.start()
        report = yield connection_storm("127.0.0.1", runner.tcp_port, STORM)
        self.assertEqual(
            (report.connected, report.answered, report.failures),
            (STORM, STORM, []),
            "%r\n%s" % (report, runner.output(1)),
        )
        consumer = yield connect(reactor, runner.tcp_port)
        self.addCleanup(consumer.close)
        yield consumer.sub("after_storm", "c")
        consumer.rdy(1)
        producer = yield connect(reactor, runner.tcp_port)
        self.addCleanup(producer.close)
        self.assertEqual((yield producer.pub("after_storm", b"still serving")), b"OK")
        self.assertTrue((yield consumer.wait_messages(1, WAIT)), runner.output(1))
        self.assertEqual(bodies_of(consumer.messages), [b"still serving"])
        self.assertEqual((yield runner.stop()), CLEAN_EXIT, runner.output(1))


# 84-byte records (4-byte length, 26-byte message header, 54-byte body):
# 12 to a 1024-byte segment; 60 messages make segments 0 to 4.
_RECORD = 84
_PER_SEGMENT = 12
_SEGMENT_FLAGS = ["--mem-queue-size=0", "--max-bytes-per-file=1024"]


class CorruptSegmentTests(TestCase):
    """A damaged segment in the middle of a disk queue costs only the messages after the damage in that segment."""

    timeout = 120

    def setUp(self) -> None:
        from twisted.internet import reactor

        self.reactor: Any = reactor
        self.bodies = [(b"segmented %03d " % (number,)).ljust(54, b".") for number in range(60)]

    @inlineCallbacks
    def queue_on_disk(self) -> Generator[Any, Any, NSQDRunner]:
        """An nsqd whose channel t/c holds 60 messages in segments 0 to 4, stopped."""
        runner = NSQDRunner(self.reactor, _make_dir(self), _SEGMENT_FLAGS)
        self.addCleanup(runner.reap)
        first = yield runner.start()
        client = yield connect(self.reactor, first.tcp_port)
        yield client.sub("t", "c")
        yield client.close()
        producer = yield connect(self.reactor, first.tcp_port)
        for start in range(0, len(self.bodies), 10):
            self.assertEqual((yield producer.mpub("t", self.bodies[start : start + 10])), b"OK")
        yield producer.close()
        self.assertEqual((yield runner.stop()), CLEAN_EXIT, runner.output(1))
        data_path = runner.data_path
        self.assertEqual(read_meta(data_path, "t:c"), (60, 0, 0, 4, _RECORD * _PER_SEGMENT))
        for number in range(5):
            records = segment_records(segment_path(data_path, "t:c", number))
            expected = self.bodies[number * _PER_SEGMENT : (number + 1) * _PER_SEGMENT]
            self.assertEqual([record_body(record) for record in records], expected)
        return runner

    @inlineCallbacks
    def consume_all(self, runner: NSQDRunner, count: int) -> Generator[Any, Any, List[bytes]]:
        """Start nsqd again and take ``count`` messages; then nothing more may come."""
        process = yield runner.start()
        client = yield connect(self.reactor, process.tcp_port)
        self.addCleanup(client.close)
        yield client.sub("t", "c")
        client.rdy(100)
        arrived = yield client.wait_messages(count, WAIT)
        self.assertTrue(arrived, "%d of %d\n%s" % (len(client.messages), count, runner.output(1)))
        self.assertFalse((yield client.wait_messages(count + 1, 1.0)), bodies_of(client.messages))
        # Still serving: a new message comes through.
        producer = yield connect(self.reactor, process.tcp_port)
        self.addCleanup(producer.close)
        self.assertEqual((yield producer.pub("t", b"after")), b"OK")
        self.assertTrue((yield client.wait_messages(count + 1, WAIT)), runner.output(1))
        self.assertEqual(client.messages[-1].body, b"after")
        return bodies_of(client.messages[:count])

    def expected(self, kept_in_middle: int) -> List[bytes]:
        """Segments 0, 1, 3 and 4 whole, and the first ``kept_in_middle`` of segment 2."""
        middle = 2 * _PER_SEGMENT
        return self.bodies[: middle + kept_in_middle] + self.bodies[middle + _PER_SEGMENT :]

    @inlineCallbacks
    def test_bad_length_in_middle_segment(self) -> Generator[Any, Any, None]:
        """An impossible record length halfway through segment 2 of 5: its first 5 messages and segments 0, 1, 3, 4 come back, in order; the segment is kept as .bad."""
        runner = yield self.queue_on_disk()
        path = segment_path(runner.data_path, "t:c", 2)
        with open(path, "r+b") as segment:
            segment.seek(5 * _RECORD)
            segment.write(struct.pack(">I", 0xFFFFFFF0))
        received = yield self.consume_all(runner, 60 - 7)
        self.assertEqual(received, self.expected(5))
        self.assertFalse(os.path.exists(path))
        self.assertTrue(os.path.exists(path + ".bad"))
        self.assertIn("invalid message read size (%d)" % (0xFFFFFFF0,), runner.current.output())
        self.assertEqual((yield runner.stop()), CLEAN_EXIT, runner.output(1))

    @inlineCallbacks
    def test_truncated_middle_segment(self) -> Generator[Any, Any, None]:
        """Segment 2 of 5 cut off inside its 8th record: its first 7 messages and segments 0, 1, 3, 4 come back, in order; the segment is kept as .bad."""
        runner = yield self.queue_on_disk()
        path = segment_path(runner.data_path, "t:c", 2)
        with open(path, "r+b") as segment:
            segment.truncate(7 * _RECORD + 30)
        received = yield self.consume_all(runner, 60 - 5)
        self.assertEqual(received, self.expected(7))
        self.assertFalse(os.path.exists(path))
        self.assertTrue(os.path.exists(path + ".bad"))
        self.assertEqual((yield runner.stop()), CLEAN_EXIT, runner.output(1))


class FuzzTests(TestCase):
    """Fuzzed V2 input neither crashes nor wedges nsqd, nor keeps its memory."""

    timeout = 240

    def test_pool_is_deterministic(self) -> None:
        """The same seed draws the same commands and batches; fuzz frames name only the fuzz topics."""
        pool = command_pool(200, 7)
        self.assertEqual(pool, command_pool(200, 7))
        self.assertEqual(len(pool), 200)
        batches = FrameBatches(pool, 3)
        again = FrameBatches(pool, 3)
        self.assertEqual([batches() for _ in range(20)], [again() for _ in range(20)])
        self.assertNotIn("fuzz_control", FUZZ_TOPICS)
        self.assertFalse(any(b"fuzz_control" in command for command in pool))

    @inlineCallbacks
    def test_fuzz(self) -> Generator[Any, Any, None]:
        """40,000 generated frames on fresh connections: nsqd closes every one, every control round trip between batches succeeds, and its RSS ends within 20% of where it was after the first 10,000."""
        from twisted.internet import reactor

        runner = NSQDRunner(reactor, _make_dir(self), ["--mem-queue-size=100"])
        self.addCleanup(runner.reap)
        yield runner.start()
        batches = FrameBatches(command_pool(FUZZ_POOL, 0), 0, max_sessions=6, max_commands=20)
        report = yield run_fuzz(
            reactor, runner, lambda: [batches()], FUZZ_FRAMES, warmup_frames=FUZZ_WARMUP_FRAMES
        )
        summary = "%r\n%s" % (report, runner.output(1)[-5000:])
        self.assertFalse(report.crashed, summary)
        self.assertGreaterEqual(report.frames, FUZZ_FRAMES, summary)
        self.assertEqual((report.hung, report.round_trip_failures), (0, []), summary)
        self.assertEqual(report.round_trips, report.batches + 1, summary)
        self.assertLessEqual(report.rss_growth, 0.20, summary)
        self.assertEqual((yield runner.stop()), CLEAN_EXIT, runner.output(1)[-5000:])
