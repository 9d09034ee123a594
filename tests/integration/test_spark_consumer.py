"""
Tests for :mod:`txnsq.spark.consumer` against a real nsqd process.
"""

from __future__ import annotations

from twisted.trial.unittest import SynchronousTestCase

from tests_spark.nsqd import shared_nsqd, unique_topic, wait_until
from txnsq.spark.blocking import BlockingConnection
from txnsq.spark.consumer import StreamConsumer, drain, drain_chunks
from txnsq.spark.options import SourceOptions


class _Base(SynchronousTestCase):
    def setUp(self) -> None:
        self.nsqd = shared_nsqd()
        self.topic = unique_topic()

    def options(self, streaming: bool = True, **extra: str) -> SourceOptions:
        raw = {
            "nsqd_tcp_addresses": self.nsqd.tcp_address,
            "topic": self.topic,
            "channel": "spark",
            "spool_path": self.mktemp(),
        }
        raw.update(extra)
        return SourceOptions.parse(raw, streaming)

    def publish(self, bodies: list) -> None:
        conn = BlockingConnection(self.nsqd.tcp_address)
        try:
            conn.mpublish(self.topic, bodies)
        finally:
            conn.close()

    def create_channel(self) -> None:
        self.nsqd.create_channel(self.topic, "spark")

    def stats(self) -> dict:
        return self.nsqd.channel_stats(self.topic, "spark")


class StreamConsumerTests(_Base):
    """StreamConsumer."""

    def consumer(self, **extra: str) -> StreamConsumer:
        consumer = StreamConsumer(self.options(**extra))
        consumer.start()
        self.addCleanup(consumer.stop)
        return consumer

    def test_batches_bounded(self) -> None:
        """take() returns at most max_count messages, in order, and the rest on later calls."""
        self.create_channel()
        bodies = [b"%d" % i for i in range(25)]
        self.publish(bodies)
        consumer = self.consumer()
        got = []
        for _ in range(20):
            batch = consumer.take(10, 1.0)
            self.assertLessEqual(len(batch), 10)
            got.extend(batch)
            consumer.hold(len(got))
            if len(got) >= 25:
                break
        self.assertEqual([m.body for m in got], bodies)
        self.assertEqual(consumer.held(), 25)

    def test_fin_only_on_commit(self) -> None:
        """Messages stay in flight until commit(), which FINs the batches up to its number."""
        self.create_channel()
        self.publish([b"a", b"b", b"c"])
        consumer = self.consumer()
        first = wait_until(lambda: consumer.take(2, 0.2), 10, "a first batch")
        consumer.hold(1)
        second = wait_until(lambda: consumer.take(2, 0.2), 10, "a second batch")
        consumer.hold(2)
        self.assertEqual(len(first) + len(second), 3)
        self.assertEqual(self.stats()["in_flight_count"], 3)
        self.assertEqual(consumer.commit(1), len(first))
        wait_until(lambda: self.stats()["in_flight_count"] == len(second), 10, "FIN of batch 1")
        self.assertEqual(consumer.commit(5), len(second))
        wait_until(lambda: self.stats()["in_flight_count"] == 0, 10, "FIN of batch 2")
        self.assertEqual(self.stats()["requeue_count"], 0)

    def test_touch_keeps_messages(self) -> None:
        """Held messages are TOUCHed every half msg_timeout, so nsqd does not time them out."""
        self.create_channel()
        self.publish([b"slow"])
        consumer = self.consumer(msg_timeout="1")
        self.assertEqual(consumer.touch_interval(), 0.5)
        wait_until(lambda: consumer.take(1, 0.2), 10, "the message")
        consumer.hold(1)
        rounds = consumer.touch_rounds
        # Four rounds take two seconds: twice the message timeout.
        wait_until(lambda: consumer.touch_rounds >= rounds + 4, 10, "four TOUCH rounds")
        stats = self.stats()
        self.assertEqual((stats["in_flight_count"], stats["timeout_count"]), (1, 0))

    def test_stop_requeues(self) -> None:
        """Messages not committed when the consumer stops are delivered again, to the next consumer."""
        self.create_channel()
        self.publish([b"x", b"y"])
        consumer = self.consumer()
        wait_until(lambda: consumer.take(2, 0.2), 10, "the messages")
        consumer.hold(1)
        consumer.stop()
        again = self.consumer()
        got = []
        wait_until(lambda: got.extend(again.take(2, 0.2)) or len(got) == 2, 10, "the redelivery")
        self.assertEqual(sorted((m.body, m.attempts) for m in got), [(b"x", 2), (b"y", 2)])

    def test_unreachable(self) -> None:
        """start() fails naming the nsqd when none can be subscribed to."""
        consumer = StreamConsumer(self.options(nsqd_tcp_addresses="127.0.0.1:1", connect_timeout="1"))
        error = self.assertRaises(Exception, consumer.start)
        self.assertIn("127.0.0.1:1", str(error))
        self.assertIn(self.topic, str(error))


class DrainTests(_Base):
    """drain."""

    def test_drains_and_fins(self) -> None:
        """All messages are read, and FINed once the generator is exhausted."""
        self.create_channel()
        bodies = [b"m%d" % i for i in range(300)]
        self.publish(bodies)
        options = self.options(streaming=False, drain_timeout="0.5")
        got = list(drain(self.nsqd.tcp_address, options, 1000))
        self.assertEqual(sorted(m.body for m in got), sorted(bodies))
        stats = self.stats()
        self.assertEqual((stats["depth"], stats["in_flight_count"], stats["requeue_count"]), (0, 0, 0))

    def test_max_count(self) -> None:
        """At most max_count messages are read; the rest stay queued."""
        self.create_channel()
        self.publish([b"m%d" % i for i in range(30)])
        options = self.options(streaming=False, drain_timeout="0.5")
        self.assertEqual(len(list(drain(self.nsqd.tcp_address, options, 10))), 10)
        wait_until(lambda: self.stats()["depth"] == 20, 10, "20 left")

    def test_abandoned(self) -> None:
        """A drain closed before its end FINs nothing: nsqd delivers the messages again."""
        self.create_channel()
        self.publish([b"a", b"b"])
        options = self.options(streaming=False, drain_timeout="0.5")
        generator = drain(self.nsqd.tcp_address, options, 10)
        next(generator)
        generator.close()
        wait_until(lambda: self.stats().get("depth") == 2, 10, "the requeue")


    def test_chunks_fin_after_the_last(self) -> None:
        """drain_chunks FINs only when asked for more after its last chunk: closed after taking every chunk, it FINs nothing."""
        self.create_channel()
        self.publish([b"%d" % i for i in range(5)])
        options = self.options(streaming=False, drain_timeout="0.5")
        generator = drain_chunks(self.nsqd.tcp_address, options, 10, 2)
        chunks = [next(generator) for _ in range(3)]
        self.assertEqual([len(c) for c in chunks], [2, 2, 1])
        self.assertEqual(self.stats()["in_flight_count"], 5)
        generator.close()
        wait_until(lambda: self.stats().get("depth") == 5, 10, "the requeue")
        chunks = list(drain_chunks(self.nsqd.tcp_address, options, 10, 2))
        self.assertEqual(sorted(m.body for c in chunks for m in c), [b"%d" % i for i in range(5)])
        wait_until(lambda: self.stats().get("depth") == 0 and self.stats()["in_flight_count"] == 0, 10, "the FINs")


class StreamConsumerRdyTests(_Base):
    """StreamConsumer with a small --max-rdy-count."""

    def setUp(self) -> None:
        from tests_spark.nsqd import NSQDProcess

        self.nsqd = NSQDProcess("--max-rdy-count=10")
        self.addCleanup(self.nsqd.stop)
        self.topic = unique_topic()

    def test_batch_fills_max_rdy(self) -> None:
        """A batch takes up to max_rdy_count; nothing more comes while it is held, and the rest once it is committed."""
        self.create_channel()
        self.publish([b"%d" % i for i in range(12)])
        consumer = StreamConsumer(self.options())
        consumer.start()
        self.addCleanup(consumer.stop)
        first = wait_until(lambda: consumer.take(100, 0.3), 10, "a first batch")
        consumer.hold(1)
        self.assertEqual(len(first), 10)
        self.assertEqual(consumer.take(100, 0.3), [])
        consumer.commit(1)
        second = wait_until(lambda: consumer.take(100, 0.3), 10, "a second batch")
        self.assertEqual(sorted(m.body for m in first + second), sorted(b"%d" % i for i in range(12)))


class LookupdDiscoveryTests(SynchronousTestCase):
    """StreamConsumer with lookupd_http_addresses."""

    def test_discovers_nsqd(self) -> None:
        """The consumer subscribes to the nsqds the lookupd lists for the topic."""
        from tests_spark.nsqd import NSQDProcess

        lookupd = NSQDProcess(program="nsqlookupd")
        self.addCleanup(lookupd.stop)
        nsqd = NSQDProcess("--lookupd-tcp-address=" + lookupd.tcp_address, "--broadcast-address=127.0.0.1")
        self.addCleanup(nsqd.stop)
        topic = unique_topic()
        nsqd.create_channel(topic, "spark")
        conn = BlockingConnection(nsqd.tcp_address)
        conn.mpublish(topic, [b"1", b"2"])
        conn.close()
        options = SourceOptions.parse(
            {"lookupd_http_addresses": lookupd.http_address, "topic": topic, "channel": "spark", "spool_path": self.mktemp()},
            True,
        )
        from txnsq.spark.consumer import nsqd_addresses

        wait_until(lambda: nsqd_addresses(options), 20, "the registration")
        consumer = StreamConsumer(options)
        consumer.start()
        self.addCleanup(consumer.stop)
        got: list = []
        wait_until(lambda: got.extend(consumer.take(10, 0.2)) or len(got) == 2, 20, "both messages")
        self.assertEqual(sorted(m.body for m in got), [b"1", b"2"])
