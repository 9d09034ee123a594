"""
txnsq's client against pynsq 0.9.1 (the official Tornado client), through a
txnsq nsqd running in the test's reactor on 127.0.0.1: pynsq's Writer
publishes and txnsq's Consumer consumes; txnsq's Producer publishes and
pynsq's Reader consumes.

pynsq runs as a script in a subprocess (its own Tornado loop) and reports
JSON events (``tests/interop/scripts/pynsq_writer.py`` and
``pynsq_reader.py``); the txnsq side runs in the test's reactor.  Besides
what each side saw, nsqd's channel counters say whether anything was
delivered twice, requeued or timed out.  Nothing sleeps for a fixed time:
waits poll in short steps up to a deadline.
"""

from __future__ import annotations

from collections import Counter
from typing import Any, Callable, Generator, List

from twisted.internet.defer import gatherResults, inlineCallbacks
from twisted.internet.task import deferLater
from twisted.trial.unittest import TestCase

from tests.interop.harness import REQUIREMENTS, ScriptResult, run_script
from txnsq.client import Consumer, Message, Producer
from txnsq.testing import start_nsqd

#: Messages each test sends.
COUNT = 400

#: Seconds any one wait may take.
DEADLINE = 30.0

#: Seconds between two checks of a condition.
STEP = 0.02


class PynsqClientInteropTestCase(TestCase):
    """Starts a txnsq nsqd in the test's reactor and runs pynsq scripts against it."""

    timeout = 90

    @inlineCallbacks
    def setUp(self) -> Generator[Any, Any, None]:  # type: ignore[override]
        from twisted.internet import reactor

        self.reactor = reactor
        self.nsqd = yield start_nsqd()
        self.addCleanup(self.nsqd.stop)

    @inlineCallbacks
    def wait_for(self, condition: Callable[[], bool], what: str) -> Generator[Any, Any, None]:
        """Fire once ``condition()`` holds; fail after :data:`DEADLINE` seconds."""
        deadline = self.reactor.seconds() + DEADLINE
        while not condition():
            if self.reactor.seconds() > deadline:
                self.fail("timed out after %gs waiting for %s" % (DEADLINE, what))
            yield deferLater(self.reactor, STEP, lambda: None)

    @inlineCallbacks
    def run_pynsq(self, script: str, args: List[str]) -> Generator[Any, Any, ScriptResult]:
        """Run a pynsq script; fail with the install line when pynsq is missing."""
        result: ScriptResult = yield run_script(script, args, timeout=DEADLINE + 15)
        if result.of("import_error"):
            self.fail(
                "pynsq cannot be imported by this interpreter (%s): install it with pip install %s "
                "(tox: add it to the deps)" % (result.of("import_error")[0]["error"], REQUIREMENTS["pynsq"]))
        return result

    def channel(self, topic: str, channel: str) -> Any:
        """The nsqd's channel object, or ``None``."""
        found = self.nsqd.broker.find_topic(topic)
        return found.find_channel(channel) if found is not None else None

    @inlineCallbacks
    def assert_channel_done(self, topic: str, name: str) -> Generator[Any, Any, None]:
        """
        Once nothing is in flight on the channel any more: every message went
        through it exactly once, finished, with no requeue and no timeout.
        """
        yield self.wait_for(
            lambda: self.channel(topic, name) is not None and self.channel(topic, name).in_flight_count == 0,
            "the channel's in-flight messages to be finished")
        channel = self.channel(topic, name)
        self.assertEqual(
            (channel.message_count, channel.depth(), channel.deferred_count,
             channel.requeue_count, channel.timeout_count),
            (COUNT, 0, 0, 0, 0))


def expected_bodies() -> "Counter[str]":
    """Every body, once."""
    return Counter("msg-%d" % (index,) for index in range(COUNT))


class PynsqWriterToConsumerTests(PynsqClientInteropTestCase):
    """pynsq's Writer publishes; txnsq's Consumer consumes."""

    @inlineCallbacks
    def test_pub_and_mpub_consumed_once(self) -> Generator[Any, Any, None]:
        """Messages pynsq's Writer sends with PUB and with MPUB all reach the Consumer, each exactly once, on its first attempt."""
        topic, name = "interop_pynsq_writer", "txnsq"
        received: "Counter[str]" = Counter()
        attempts: "Counter[int]" = Counter()

        def handler(message: Message) -> bool:
            received[message.body.decode("utf-8")] += 1
            attempts[message.attempts] += 1
            return True

        consumer = Consumer(topic, name, handler, nsqd_tcp_addresses=[self.nsqd.tcp_address],
                            max_in_flight=50, reactor=self.reactor)
        self.addCleanup(consumer.close)
        consumer.start()
        # Subscribed before publishing: no message is held in the topic.
        yield self.wait_for(lambda: consumer.connections == 1, "the Consumer to subscribe")

        result = yield self.run_pynsq(
            "pynsq_writer.py", [self.nsqd.tcp_address, topic, "--count=%d" % (COUNT,), "--batch=25"])
        details = result.describe()
        self.assertEqual((result.code, len(result.of("done")), result.of("error")), (0, 1, []), details)
        published = result.of("published")
        self.assertEqual(Counter(p["command"] for p in published),
                         Counter({"pub": COUNT // 2, "mpub": COUNT // 2 // 25}), details)
        self.assertEqual({p["response"] for p in published}, {"OK"}, details)
        self.assertEqual(sorted(i for p in published for i in p["indexes"]), list(range(COUNT)), details)

        yield self.wait_for(lambda: sum(received.values()) >= COUNT, "every message to arrive")
        yield consumer.close()
        yield self.assert_channel_done(topic, name)
        self.assertEqual(received, expected_bodies())
        self.assertEqual(attempts, Counter({1: COUNT}))
        self.assertEqual((consumer.messages_received, consumer.messages_finished, consumer.messages_requeued),
                         (COUNT, COUNT, 0))


class ProducerToPynsqReaderTests(PynsqClientInteropTestCase):
    """txnsq's Producer publishes; pynsq's Reader consumes."""

    @inlineCallbacks
    def test_publish_and_multi_publish_consumed_once(self) -> Generator[Any, Any, None]:
        """Messages the Producer sends with publish and multi_publish all reach pynsq's Reader, each exactly once, on its first attempt."""
        topic, name = "interop_pynsq_reader", "pynsq"
        producer = Producer(self.nsqd.tcp_address, reactor=self.reactor)
        self.addCleanup(producer.close)
        half = COUNT // 2
        sent = [producer.publish(topic, b"msg-%d" % (index,)) for index in range(half)]
        for start in range(half, COUNT, 40):
            sent.append(producer.multi_publish(
                topic, [b"msg-%d" % (index,) for index in range(start, min(start + 40, COUNT))]))
        # Every publish answered OK (a failure fails the test here).
        yield gatherResults(sent, consumeErrors=True)
        yield producer.close()
        # No channel yet: nsqd holds the messages in the topic until one exists.
        found = self.nsqd.broker.find_topic(topic)
        self.assertEqual(found.depth() if found is not None else None, COUNT)

        result = yield self.run_pynsq(
            "pynsq_reader.py", [self.nsqd.tcp_address, topic, name, "--count=%d" % (COUNT,)])
        details = result.describe()
        self.assertEqual((result.code, len(result.of("done")), result.of("error")), (0, 1, []), details)
        messages = result.of("message")
        self.assertEqual(Counter(m["body"] for m in messages), expected_bodies(), details)
        self.assertEqual(Counter(m["attempts"] for m in messages), Counter({1: COUNT}), details)
        yield self.assert_channel_done(topic, name)
