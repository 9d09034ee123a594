"""
Tests for txnsq.nsqd.broker: the topics of one nsqd, storage selection and
shutdown.
"""

from __future__ import annotations

from twisted.internet.task import Clock
from twisted.trial.unittest import SynchronousTestCase

from tests.core_fakes import START, FakeConsumer, RecordingStorage, make_broker, make_options
from txnsq.nsqd.broker import Broker
from txnsq.nsqd.guid import guid_node_id
from txnsq.nsqd.topic import PublishError
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
