"""
Tests for txnsq.nsqd.broker: the topics of one nsqd, storage selection and
shutdown.
"""

from __future__ import annotations

from typing import List, Tuple

from twisted.internet.task import Clock
from twisted.trial.unittest import SynchronousTestCase

from tests.core_fakes import START, FakeConsumer, RecordingStorage, make_broker, make_options
from txnsq.nsqd.broker import Broker, TopologyListener
from txnsq.nsqd.channel import Channel
from txnsq.nsqd.guid import guid_node_id
from txnsq.nsqd.topic import PublishError, Topic
from txnsq.storage.ephemeral import EphemeralQueue
from txnsq.storage.memory import MemoryStorage


class BrokerTests(SynchronousTestCase):
    """Broker."""

    def setUp(self) -> None:
        self.storage = RecordingStorage()
        self.broker = make_broker(storage=self.storage, node_id=77)
        self.clock = self.broker.clock

    def test_attributes(self) -> None:
        """A broker exposes its options, clock and an empty topic map."""
        clock = Clock()
        options = make_options()
        broker = Broker(options, clock, MemoryStorage())
        self.assertIs(broker.options, options)
        self.assertIs(broker.clock, clock)
        self.assertEqual(broker.topics, {})
        self.assertFalse(broker.exiting)

    def test_topic_created_on_first_use(self) -> None:
        """get_topic creates the topic once and returns it after."""
        self.assertIsNone(self.broker.find_topic("t"))
        topic = self.broker.get_topic("t")
        self.assertIs(self.broker.get_topic("t"), topic)
        self.assertIs(self.broker.find_topic("t"), topic)
        self.assertEqual(list(self.broker.topics), ["t"])

    def test_invalid_topic_name(self) -> None:
        """An invalid topic name is a ValueError and creates nothing."""
        self.assertRaises(ValueError, self.broker.get_topic, "no spaces")
        self.assertRaises(ValueError, self.broker.get_topic, "x" * 65)
        self.assertEqual(self.broker.topics, {})

    def test_queue_names(self) -> None:
        """Topic queues are named after the topic, channel queues 'topic:channel'."""
        self.broker.get_topic("t").get_channel("c")
        self.assertEqual(self.storage.log, [("open", "t"), ("open", "t:c")])

    def test_ephemeral_storage(self) -> None:
        """#ephemeral topics and channels use ephemeral storage whatever the backend."""
        topic = self.broker.get_topic("e#ephemeral")
        channel = topic.get_channel("c#ephemeral")
        self.assertIsInstance(topic._queue, EphemeralQueue)
        self.assertIsInstance(channel._queue, EphemeralQueue)
        self.assertEqual(self.storage.queues, {})

    def test_node_id(self) -> None:
        """Message IDs carry --node-id."""
        self.assertEqual(guid_node_id(self.broker.guid.new_id()), 77)

    def test_delete_topic(self) -> None:
        """delete_topic removes the topic and deletes its queues."""
        topic = self.broker.get_topic("t")
        topic.get_channel("c")
        self.broker.delete_topic("t")
        self.assertIsNone(self.broker.find_topic("t"))
        self.assertTrue(topic.exiting)
        self.assertTrue(self.storage.queues["t"].deleted)
        self.assertTrue(self.storage.queues["t:c"].deleted)

    def test_delete_unknown(self) -> None:
        """Deleting a topic that does not exist is a KeyError."""
        self.assertRaises(KeyError, self.broker.delete_topic, "nonesuch")

    def test_recreate_after_delete(self) -> None:
        """A deleted topic's name makes a fresh topic on next use."""
        old = self.broker.get_topic("t")
        old.publish(b"x")
        self.broker.delete_topic("t")
        new = self.broker.get_topic("t")
        self.assertIsNot(new, old)
        self.assertEqual(new.depth(), 0)

    def test_close(self) -> None:
        """close() cancels every timer, closes every queue and refuses publishes."""
        for name in ("a", "b"):
            topic = self.broker.get_topic(name)
            consumer = FakeConsumer(ready_count=5)
            topic.get_channel("c").add_consumer(consumer)
            topic.publish(b"in flight")
            topic.publish_deferred(b"deferred", 30)
        self.broker.get_topic("held").publish(b"x")
        self.assertEqual(len(self.clock.getDelayedCalls()), 2)
        self.broker.close()
        self.assertTrue(self.broker.exiting)
        self.assertEqual(list(self.clock.getDelayedCalls()), [])
        closed = sorted(name for op, name in self.storage.log if op == "close")
        self.assertEqual(closed, ["a", "a:c", "b", "b:c", "held"])
        self.assertRaises(PublishError, self.broker.get_topic("a").publish, b"x")
        self.clock.advance(3600)

    def test_close_twice(self) -> None:
        """Closing twice is harmless."""
        self.broker.get_topic("t").get_channel("c")
        self.broker.close()
        self.broker.close()
        self.assertEqual(
            [name for op, name in self.storage.log if op == "close"], ["t:c", "t"]
        )

    def test_clock_start(self) -> None:
        """The test broker's clock starts at a realistic time."""
        self.assertEqual(self.clock.seconds(), START)


class RecordingListener(TopologyListener):
    """Records the topology events it is told, as tuples of names."""

    def __init__(self) -> None:
        self.events: List[Tuple[str, ...]] = []

    def topic_created(self, topic: Topic) -> None:
        self.events.append(("topic_created", topic.name))

    def topic_deleted(self, topic: Topic) -> None:
        self.events.append(("topic_deleted", topic.name))

    def channel_created(self, topic: Topic, channel: Channel) -> None:
        self.events.append(("channel_created", topic.name, channel.name))

    def channel_deleted(self, topic: Topic, channel: Channel) -> None:
        self.events.append(("channel_deleted", topic.name, channel.name))


class TopologyListenerTests(SynchronousTestCase):
    """Broker.add_listener: topics and channels coming and going."""

    def setUp(self) -> None:
        self.broker = make_broker()
        self.listener = RecordingListener()
        self.broker.add_listener(self.listener)

    def test_create_and_delete(self) -> None:
        """Creating and deleting a topic and a channel are told once each, in order."""
        topic = self.broker.get_topic("t")
        self.broker.get_topic("t")
        topic.get_channel("c")
        topic.get_channel("c")
        topic.delete_channel("c")
        self.broker.delete_topic("t")
        self.assertEqual(
            self.listener.events,
            [
                ("topic_created", "t"),
                ("channel_created", "t", "c"),
                ("channel_deleted", "t", "c"),
                ("topic_deleted", "t"),
            ],
        )

    def test_topic_delete_tells_channels_after_topic(self) -> None:
        """Deleting a topic tells each of its channels' deletion, then its own (no lookupd warning)."""
        topic = self.broker.get_topic("t")
        topic.get_channel("a")
        topic.get_channel("b")
        del self.listener.events[:]
        self.broker.delete_topic("t")
        self.assertEqual(
            self.listener.events,
            [("channel_deleted", "t", "a"), ("channel_deleted", "t", "b"), ("topic_deleted", "t")],
        )

    def test_ephemeral_deletion(self) -> None:
        """An ephemeral channel and topic deleted with their last consumer are told."""
        topic = self.broker.get_topic("t#ephemeral")
        channel = topic.get_channel("c#ephemeral")
        consumer = FakeConsumer(ready_count=1)
        channel.add_consumer(consumer)
        channel.remove_consumer(consumer)
        self.assertEqual(
            self.listener.events,
            [
                ("topic_created", "t#ephemeral"),
                ("channel_created", "t#ephemeral", "c#ephemeral"),
                ("channel_deleted", "t#ephemeral", "c#ephemeral"),
                ("topic_deleted", "t#ephemeral"),
            ],
        )

    def test_pause_not_told(self) -> None:
        """Pausing is not a topology event for listeners (only for on_topology_change)."""
        changes: List[None] = []
        self.broker.on_topology_change = lambda: changes.append(None)
        topic = self.broker.get_topic("t")
        topic.pause()
        topic.get_channel("c").pause()
        self.assertEqual(len(changes), 4)
        self.assertEqual(
            self.listener.events, [("topic_created", "t"), ("channel_created", "t", "c")]
        )

    def test_remove_listener(self) -> None:
        """A removed listener is told nothing more; removing it twice is harmless."""
        self.broker.remove_listener(self.listener)
        self.broker.remove_listener(self.listener)
        self.broker.get_topic("t")
        self.assertEqual(self.listener.events, [])

    def test_failing_listener(self) -> None:
        """A listener that raises is logged; the change and other listeners go on."""

        class Broken(TopologyListener):
            def topic_created(self, topic: Topic) -> None:
                raise RuntimeError("boom")

        broken = Broken()
        self.broker.remove_listener(self.listener)
        self.broker.add_listener(broken)
        self.broker.add_listener(self.listener)
        self.broker.get_topic("t")
        self.assertEqual(self.listener.events, [("topic_created", "t")])
        self.assertIn("t", self.broker.topics)
        self.assertEqual(len(self.flushLoggedErrors(RuntimeError)), 1)

    def test_prepare_topic(self) -> None:
        """prepare_topic sees each topic get_topic creates, after the listeners."""
        prepared: List[str] = []

        def prepare(topic: Topic) -> None:
            prepared.append(topic.name)
            self.assertEqual(self.listener.events[-1], ("topic_created", topic.name))

        self.broker.prepare_topic = prepare
        self.broker.get_topic("t")
        self.broker.get_topic("t")
        self.assertEqual(prepared, ["t"])


class ShutdownTests(SynchronousTestCase):
    """The first steps of a clean shutdown: stop delivering, then take the FINs on their way."""

    def setUp(self) -> None:
        self.clock = Clock()
        self.clock.advance(START)
        self.broker = make_broker(self.clock)
        self.topic = self.broker.get_topic("t")
        self.channel = self.topic.get_channel("c")
        self.consumer = FakeConsumer(ready_count=10)
        self.channel.add_consumer(self.consumer)

    def test_nothing_delivered_once_stopped(self) -> None:
        """After stop_delivering a ready consumer gets nothing: publishes, requeues and timeouts stay queued."""
        self.topic.publish(b"before")
        (held,) = self.consumer.take()
        self.broker.stop_delivering()
        self.topic.publish(b"after")
        self.channel.requeue(self.consumer, held.id, 0)
        self.clock.advance(0)
        self.assertEqual(self.consumer.take(), [])
        self.assertEqual(self.channel.depth(), 2)

    def test_fin_still_works(self) -> None:
        """A FIN arriving after delivery stopped finishes its message, which is not kept."""
        self.topic.publish(b"x")
        (held,) = self.consumer.take()
        self.broker.stop_delivering()
        self.channel.finish(self.consumer, held.id)
        self.assertEqual((self.channel.in_flight_count, self.channel.depth()), (0, 0))

    def test_new_channel_does_not_deliver(self) -> None:
        """A channel created after delivery stopped delivers nothing either."""
        self.broker.stop_delivering()
        other = self.topic.get_channel("other")
        consumer = FakeConsumer(ready_count=10)
        other.add_consumer(consumer)
        self.topic.publish(b"x")
        self.assertEqual(consumer.take(), [])
        self.assertEqual(other.depth(), 1)

    def test_drain_at_once_when_nothing_in_flight(self) -> None:
        """With nothing in flight drain() has fired already."""
        self.broker.stop_delivering()
        self.successResultOf(self.broker.drain(2.0))

    def test_drain_waits_for_last_fin(self) -> None:
        """drain() fires when the last in-flight message is finished, not before."""
        self.topic.publish(b"a")
        self.topic.publish(b"b")
        first, second = self.consumer.take()
        self.broker.stop_delivering()
        drained = self.broker.drain(2.0)
        self.channel.finish(self.consumer, first.id)
        self.assertNoResult(drained)
        self.channel.finish(self.consumer, second.id)
        self.successResultOf(drained)
        self.assertEqual(self.clock.getDelayedCalls(), [])

    def test_drain_when_consumer_leaves(self) -> None:
        """drain() fires when the consumer holding the messages goes (they are back in the queue)."""
        self.topic.publish(b"a")
        self.consumer.take()
        self.broker.stop_delivering()
        drained = self.broker.drain(2.0)
        self.channel.remove_consumer(self.consumer)
        self.successResultOf(drained)
        self.assertEqual(self.channel.depth(), 1)

    def test_drain_gives_up_after_grace(self) -> None:
        """drain() fires after the grace period even if a message is still in flight."""
        self.topic.publish(b"a")
        self.consumer.take()
        self.broker.stop_delivering()
        drained = self.broker.drain(2.0)
        self.clock.advance(1.9)
        self.assertNoResult(drained)
        self.clock.advance(0.1)
        self.successResultOf(drained)
        self.assertEqual(self.channel.in_flight_count, 1)

    def test_close_ends_drain(self) -> None:
        """Closing the broker fires a pending drain()."""
        self.topic.publish(b"a")
        self.consumer.take()
        self.broker.stop_delivering()
        drained = self.broker.drain(2.0)
        self.broker.close()
        self.successResultOf(drained)
