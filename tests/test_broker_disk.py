"""
The broker core on the ``disk`` backend: what a clean shutdown keeps (queued,
in-flight and deferred messages, deferral included), what a failing disk
does to publishing, and the batched handover of a large topic backlog.

Brokers run on a ``Clock``; a "restart" closes one broker and opens a new
one on the same data directory.
"""

from __future__ import annotations

import errno
import os
from typing import Any, Dict, List

from twisted.internet.task import Clock
from twisted.trial.unittest import SynchronousTestCase

from tests.core_fakes import START, FakeConsumer, make_broker
from txnsq.nsqd.broker import Broker
from txnsq.nsqd.topic import HANDOVER_BATCH, PublishError
from txnsq.storage.disk import DiskStorage


class DiskBrokerTests(SynchronousTestCase):
    """A broker on disk storage, closed and reopened."""

    def setUp(self) -> None:
        self.directory = self.mktemp()
        os.makedirs(self.directory)
        self.clock = Clock()
        self.clock.advance(START)
        self.brokers: List[Broker] = []
        self.broker = self.open()

    def open(self, **overrides: Any) -> Broker:
        values: Dict[str, Any] = dict(data_path=self.directory, mem_queue_size=10)
        values.update(overrides)
        broker = make_broker(
            self.clock,
            DiskStorage(),
            max_bytes_per_file=4096,
            sync_every=2500,
            sync_timeout=2.0,
            **values,
        )
        self.brokers.append(broker)
        self.addCleanup(broker.close)
        return broker

    def restart(self, downtime: float = 0.0, **overrides: Any) -> Broker:
        """Close the broker, let ``downtime`` pass, open a new one."""
        self.broker.close()
        self.clock.advance(downtime)
        self.broker = self.open(**overrides)
        return self.broker

    def subscribe(self, broker: Broker, ready: int = 1000) -> FakeConsumer:
        # Messages stay in flight for the whole test: no timeouts.
        consumer = FakeConsumer(ready_count=ready, msg_timeout=1e6)
        broker.get_topic("t").get_channel("c").add_consumer(consumer)
        return consumer

    def test_queued_messages_kept(self) -> None:
        """Messages queued in memory and on disk all come back after a restart."""
        channel = self.broker.get_topic("t").get_channel("c")
        bodies = [b"message %03d" % (i,) for i in range(100)]
        for body in bodies:
            self.broker.get_topic("t").publish(body)
        self.assertEqual(channel.depth(), 100)
        broker = self.restart()
        broker.get_topic("t").get_channel("c")
        self.assertEqual(broker.get_topic("t").get_channel("c").depth(), 100)
        self.assertEqual(sorted(self.subscribe(broker).bodies()), bodies)

    def test_topic_backlog_kept(self) -> None:
        """A topic with no channel keeps what it holds across a restart."""
        for i in range(30):
            self.broker.get_topic("t").publish(b"held %d" % (i,))
        broker = self.restart()
        self.assertEqual(broker.get_topic("t").depth(), 30)
        self.assertEqual(len(self.subscribe(broker).bodies()), 30)

    def test_in_flight_redelivered_with_attempts(self) -> None:
        """An in-flight message is delivered again after a restart, attempts counted on."""
        consumer = self.subscribe(self.broker, ready=1)
        self.broker.get_topic("t").publish(b"one")
        (first,) = consumer.take()
        self.assertEqual(first.attempts, 1)
        broker = self.restart()
        (again,) = self.subscribe(broker).take()
        self.assertEqual((again.id, again.attempts, again.body), (first.id, 2, b"one"))

    def test_deferred_keeps_remaining_delay(self) -> None:
        """A deferred message is due at the same time after a restart."""
        topic = self.broker.get_topic("t")
        topic.get_channel("c")
        topic.publish_deferred(b"later", 100.0)
        self.clock.advance(30)
        broker = self.restart(downtime=10)
        channel = broker.get_topic("t").get_channel("c")
        self.assertEqual((channel.depth(), channel.deferred_count), (0, 1))
        consumer = self.subscribe(broker)
        self.clock.advance(59)
        self.assertEqual(consumer.bodies(), [])
        self.clock.advance(1)
        self.assertEqual(consumer.bodies(), [b"later"])

    def test_deferred_due_during_downtime(self) -> None:
        """A deferred message that fell due while nsqd was down is delivered at once."""
        topic = self.broker.get_topic("t")
        topic.get_channel("c")
        topic.publish_deferred(b"due", 5.0)
        broker = self.restart(downtime=60)
        consumer = self.subscribe(broker)
        self.clock.advance(0)
        self.assertEqual(consumer.bodies(), [b"due"])

    def test_requeued_with_delay_kept(self) -> None:
        """A message requeued with a delay keeps it, and its attempts, across a restart."""
        consumer = self.subscribe(self.broker, ready=1)
        self.broker.get_topic("t").publish(b"retry")
        (message,) = consumer.take()
        self.broker.get_topic("t").get_channel("c").requeue(consumer, message.id, 20.0)
        broker = self.restart(downtime=5)
        again = self.subscribe(broker)
        self.clock.advance(14)
        self.assertEqual(again.take(), [])
        self.clock.advance(1)
        (redelivered,) = again.take()
        self.assertEqual((redelivered.id, redelivered.attempts), (message.id, 2))

    def test_topic_deferred_backlog_kept(self) -> None:
        """A DPUB held by a topic with no channel keeps its delay, started by the channel."""
        self.broker.get_topic("t").publish_deferred(b"wait", 10.0)
        broker = self.restart(downtime=100)
        consumer = self.subscribe(broker)
        self.clock.advance(9)
        self.assertEqual(consumer.bodies(), [])
        self.clock.advance(1)
        self.assertEqual(consumer.bodies(), [b"wait"])

    def test_deferred_kept_twice(self) -> None:
        """Deferred messages survive two restarts in a row without duplicates."""
        topic = self.broker.get_topic("t")
        topic.get_channel("c")
        topic.publish(b"plain")
        topic.publish_deferred(b"later", 100.0)
        middle = self.restart(downtime=10)
        # Opened and closed again without a read: no second copy.
        self.assertEqual(middle.get_topic("t").get_channel("c").deferred_count, 1)
        broker = self.restart(downtime=10)
        consumer = self.subscribe(broker)
        self.assertEqual(consumer.bodies(), [b"plain"])
        self.clock.advance(80)
        self.assertEqual(consumer.bodies(), [b"later"])
        self.clock.advance(1000)
        self.assertEqual(consumer.bodies(), [])

    def test_failed_write_refuses_publishes(self) -> None:
        """While a channel's queue cannot write, publishes fail and the broker is unhealthy."""
        broker = self.restart(mem_queue_size=0)
        channel = broker.get_topic("t").get_channel("c")
        queue = channel._queue

        def full(fd: int, data: Any) -> int:
            raise OSError(errno.ENOSPC, "No space left on device")

        queue.os_write = full
        broker.get_topic("t").publish(b"kept in memory")
        self.clock.advance(0)
        self.assertIn("No space left on device", broker.storage_error() or "")
        error = self.assertRaises(PublishError, broker.get_topic("t").publish, b"refused")
        self.assertIn("No space left on device", str(error))
        self.assertRaises(PublishError, broker.get_topic("t").publish_many, [b"a", b"b"])
        self.assertRaises(PublishError, broker.get_topic("t").publish_deferred, b"d", 5.0)
        queue.os_write = os.write
        self.clock.advance(1.0)
        self.assertIsNone(broker.storage_error())
        broker.get_topic("t").publish(b"accepted")
        self.assertEqual(self.subscribe(broker).bodies(), [b"kept in memory", b"accepted"])

    def test_handover_in_batches(self) -> None:
        """A large topic backlog moves to a new channel a batch per reactor turn."""
        broker = self.restart(mem_queue_size=100)
        topic = broker.get_topic("t")
        total = HANDOVER_BATCH * 2 + 5
        topic.publish_many([b"m%d" % (i,) for i in range(total)])
        channel = topic.get_channel("c")
        self.assertEqual((channel.depth(), topic.depth()), (HANDOVER_BATCH, total - HANDOVER_BATCH))
        self.clock.advance(0)
        self.clock.advance(0)
        self.assertEqual((channel.depth(), topic.depth()), (total, 0))
        consumer = self.subscribe(broker, ready=total)
        self.assertEqual(consumer.bodies(), [b"m%d" % (i,) for i in range(total)])


class CrashTests(SynchronousTestCase):
    """
    A broker on disk storage with --mem-queue-size=0 --sync-every=1,
    killed: nothing it wrote before answering (its barrier) is lost.

    A "crash" drops the broker without closing anything: its timers are
    cancelled and its files closed as they are, so what the next broker
    finds is exactly what had been written.
    """

    def setUp(self) -> None:
        self.directory = self.mktemp()
        os.makedirs(self.directory)
        self.clock = Clock()
        self.clock.advance(START)
        self.broker = self.open()

    def open(self) -> Broker:
        broker = make_broker(
            self.clock,
            DiskStorage(),
            data_path=self.directory,
            mem_queue_size=0,
            max_bytes_per_file=4096,
            sync_every=1,
            sync_timeout=2.0,
        )
        self.addCleanup(broker.close)
        return broker

    def answer(self) -> None:
        """What nsqd does before an OK or a message leaves it."""
        barrier = self.broker.barrier
        assert barrier is not None
        barrier()

    def crash(self, downtime: float = 0.0) -> Broker:
        """Kill the broker where it stands; start a new one on its files."""
        for call in self.clock.getDelayedCalls():
            call.cancel()
        for topic in self.broker.topics.values():
            queues = [topic._queue] + [channel._queue for channel in topic.channels.values()]
            for queue in queues:
                queue._closed = True
                queue._close_files()
                queue._flight.close()
        self.clock.advance(downtime)
        self.broker = self.open()
        return self.broker

    def subscribe(self, broker: Broker, ready: int = 1000) -> FakeConsumer:
        consumer = FakeConsumer(ready_count=ready, msg_timeout=1e6)
        broker.get_topic("t").get_channel("c").add_consumer(consumer)
        return consumer

    def test_barrier_only_with_durable_flags(self) -> None:
        """The barrier exists with --mem-queue-size=0 only; other brokers keep no flight log."""
        self.assertIsNotNone(self.broker.barrier)
        other = make_broker(
            self.clock, DiskStorage(), data_path=self.directory, mem_queue_size=10,
            max_bytes_per_file=4096, sync_every=1, sync_timeout=2.0,
        )
        self.addCleanup(other.close)
        self.assertIsNone(other.barrier)
        self.assertFalse(other.get_topic("u").get_channel("c")._queue.journaled)

    def test_in_flight_from_the_queue_kept(self) -> None:
        """Messages read from the channel's queue and in flight at the crash are delivered again, attempts counted on."""
        topic = self.broker.get_topic("t")
        topic.get_channel("c")
        for number in range(5):
            topic.publish(b"queued %d" % (number,))
        self.answer()
        consumer = self.subscribe(self.broker)
        first = consumer.take()
        self.assertEqual(len(first), 5)
        self.answer()
        broker = self.crash()
        again = self.subscribe(broker).take()
        self.assertEqual(
            sorted((m.id, m.attempts, m.body) for m in again),
            sorted((m.id, 2, m.body) for m in first),
        )

    def test_in_flight_delivered_directly_kept(self) -> None:
        """A message published to a ready consumer (never in a segment) survives a crash once its OK may leave."""
        consumer = self.subscribe(self.broker)
        self.broker.get_topic("t").publish(b"direct")
        self.answer()
        (sent,) = consumer.take()
        broker = self.crash()
        (again,) = self.subscribe(broker).take()
        self.assertEqual((again.id, again.body, again.attempts), (sent.id, b"direct", 2))

    def test_finished_not_delivered_again(self) -> None:
        """A message finished before the crash is not delivered again."""
        consumer = self.subscribe(self.broker)
        channel = self.broker.get_topic("t").get_channel("c")
        self.broker.get_topic("t").publish(b"done")
        self.broker.get_topic("t").publish(b"pending")
        self.answer()
        done, pending = consumer.take()
        channel.finish(consumer, done.id)
        self.answer()
        broker = self.crash()
        self.assertEqual(self.subscribe(broker).bodies(), [b"pending"])

    def test_deferred_kept_with_due_time(self) -> None:
        """A DPUB answered OK is still deferred after a crash, due when it was."""
        topic = self.broker.get_topic("t")
        topic.get_channel("c")
        topic.publish_deferred(b"later", 60.0)
        self.answer()
        broker = self.crash(downtime=10)
        channel = broker.get_topic("t").get_channel("c")
        self.assertEqual((channel.deferred_count, channel.depth()), (1, 0))
        consumer = self.subscribe(broker)
        self.clock.advance(49)
        self.assertEqual(consumer.bodies(), [])
        self.clock.advance(1)
        self.assertEqual(consumer.bodies(), [b"later"])

    def test_topic_deferred_backlog_kept(self) -> None:
        """A DPUB held by a topic with no channel survives a crash, its delay still to start."""
        self.broker.get_topic("t").publish_deferred(b"wait", 10.0)
        self.answer()
        broker = self.crash(downtime=100)
        self.assertEqual(broker.get_topic("t").depth(), 1)
        consumer = self.subscribe(broker)
        self.clock.advance(9)
        self.assertEqual(consumer.bodies(), [])
        self.clock.advance(1)
        self.assertEqual(consumer.bodies(), [b"wait"])

    def test_deferred_kept_through_clean_restart_then_crash(self) -> None:
        """Deferred messages brought back by a clean restart are held again: a crash after it keeps them, channel and topic alike."""
        topic = self.broker.get_topic("t")
        topic.get_channel("c")
        topic.publish_deferred(b"channel's", 60.0)
        self.broker.get_topic("u").publish_deferred(b"topic's", 60.0)
        self.answer()
        self.broker.close()
        self.broker = self.open()
        self.broker.get_topic("t").get_channel("c")
        self.broker.get_topic("u")
        self.answer()
        broker = self.crash()
        self.assertEqual(broker.get_topic("t").get_channel("c").deferred_count, 1)
        consumer = self.subscribe(broker)
        other = FakeConsumer(ready_count=10, msg_timeout=1e6)
        broker.get_topic("u").get_channel("c").add_consumer(other)
        self.clock.advance(0)
        # Their plain copies from the clean shutdown are not delivered early.
        self.assertEqual((consumer.bodies(), other.bodies()), ([], []))
        self.clock.advance(60)
        self.assertEqual((consumer.bodies(), other.bodies()), ([b"channel's"], [b"topic's"]))
        self.clock.advance(1000)
        self.assertEqual((consumer.bodies(), other.bodies()), ([], []))

    def test_topic_backlog_moved_to_channel_kept(self) -> None:
        """A topic's deferred backlog handed to a new channel is kept by one of them through a crash."""
        self.broker.get_topic("t").publish_deferred(b"wait", 10.0)
        self.answer()
        self.broker.get_topic("t").get_channel("c")
        self.answer()
        broker = self.crash()
        channel = broker.get_topic("t").get_channel("c")
        self.assertEqual(channel.deferred_count + broker.get_topic("t").depth(), 1)
        consumer = self.subscribe(broker)
        self.clock.advance(10)
        self.assertEqual(consumer.bodies(), [b"wait"])

    def test_requeued_kept(self) -> None:
        """Messages requeued at once or with a delay survive a crash, the delayed one still deferred."""
        consumer = self.subscribe(self.broker, ready=2)
        channel = self.broker.get_topic("t").get_channel("c")
        self.broker.get_topic("t").publish(b"again")
        self.broker.get_topic("t").publish(b"later")
        self.answer()
        again, later = consumer.take()
        consumer.ready_count = 0
        channel.consumer_ready(consumer)
        channel.requeue(consumer, again.id, 0)
        channel.requeue(consumer, later.id, 30.0)
        self.answer()
        broker = self.crash()
        channel = broker.get_topic("t").get_channel("c")
        self.assertEqual((channel.depth(), channel.deferred_count), (1, 1))
        consumer = self.subscribe(broker)
        self.assertEqual(consumer.bodies(), [b"again"])
        self.clock.advance(30)
        self.assertEqual(consumer.bodies(), [b"later"])

    def test_timed_out_kept(self) -> None:
        """A message that timed out back into the queue survives a crash."""
        consumer = FakeConsumer(ready_count=1, msg_timeout=5.0)
        channel = self.broker.get_topic("t").get_channel("c")
        channel.add_consumer(consumer)
        self.broker.get_topic("t").publish(b"slow")
        self.answer()
        consumer.take()
        consumer.ready_count = 0
        channel.consumer_ready(consumer)
        self.clock.advance(5)
        self.answer()
        self.assertEqual((channel.depth(), channel.in_flight_count), (1, 0))
        broker = self.crash()
        self.assertEqual(self.subscribe(broker).bodies(), [b"slow"])

    def test_topic_to_channel_transit_kept(self) -> None:
        """Messages a topic held move to a new channel without a moment where a crash loses them."""
        topic = self.broker.get_topic("t")
        topic.publish_many([b"m%d" % (i,) for i in range(20)])
        self.answer()
        topic.get_channel("c")
        self.answer()
        broker = self.crash()
        bodies = self.subscribe(broker).bodies()
        self.assertEqual(sorted(set(bodies)), sorted(b"m%d" % (i,) for i in range(20)))

    def test_read_segment_kept_until_logged(self) -> None:
        """A segment read to its end is removed only once the messages read from it are in the flight log."""
        topic = self.broker.get_topic("t")
        topic.get_channel("c")
        topic.publish_many([b"x" * 500 for _ in range(12)])
        self.answer()
        segment = os.path.join(self.directory, "t:c.diskqueue.000000.dat")
        self.assertTrue(os.path.exists(segment))
        consumer = self.subscribe(self.broker, ready=100)
        self.assertEqual(len(consumer.take()), 12)
        self.assertTrue(os.path.exists(segment))
        self.answer()
        self.assertFalse(os.path.exists(segment))
        broker = self.crash()
        self.assertEqual(len(self.subscribe(broker).bodies()), 12)

    def test_clean_close_leaves_no_flight_log(self) -> None:
        """A clean shutdown keeps everything in the segments and removes the flight logs."""
        consumer = self.subscribe(self.broker)
        self.broker.get_topic("t").publish(b"in flight")
        self.broker.get_topic("t").publish_deferred(b"deferred", 30.0)
        self.answer()
        consumer.take()
        self.broker.close()
        self.assertEqual(
            [name for name in os.listdir(self.directory) if "flight" in name], []
        )
        broker = self.open()
        self.broker = broker
        channel = broker.get_topic("t").get_channel("c")
        self.assertEqual((channel.depth(), channel.deferred_count), (1, 1))
