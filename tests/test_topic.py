"""
Tests for txnsq.nsqd.topic: publishing, copying to channels, holding
messages without channels or while paused, DPUB, limits, deletion.
"""

from __future__ import annotations

from typing import Any


from tests.core_fakes import START, FakeConsumer, decode, make_broker
from tests.core_fakes import TopicTestCase as BaseTopicTestCase
from txnsq.nsqd.topic import PublishError, Topic
from txnsq.storage.ephemeral import EphemeralQueue
from txnsq.storage.memory import MemoryQueue


class TopicTestCase(BaseTopicTestCase):
    """A broker on a Clock with topic 't'."""

    def consumer(self, channel_name: str = "c", ready: int = 100) -> FakeConsumer:
        consumer = FakeConsumer(ready)
        self.topic.get_channel(channel_name).add_consumer(consumer)
        return consumer


class PublishTests(TopicTestCase):
    """PUB and MPUB."""

    def test_topic_class(self) -> None:
        """The broker makes Topic instances."""
        self.assertIsInstance(self.topic, Topic)
        self.assertEqual(self.topic.name, "t")

    def test_encoding(self) -> None:
        """A published message is encoded with the clock's time, 0 attempts and a fresh ID."""
        self.topic.publish(b"body")
        [data] = list(self.topic._queue._items)
        message = decode(data)
        self.assertEqual(message.timestamp, int(START * 1e9))
        self.assertEqual(message.attempts, 0)
        self.assertEqual(message.body, b"body")
        self.assertEqual(len(message.id), 16)

    def test_every_channel_gets_a_copy(self) -> None:
        """Every channel of a topic gets every message."""
        first = self.consumer("a")
        second = self.consumer("b")
        self.topic.publish(b"x")
        self.topic.publish(b"y")
        self.assertEqual(first.bodies(), [b"x", b"y"])
        self.assertEqual(second.bodies(), [b"x", b"y"])

    def test_shared_bytes(self) -> None:
        """The channels' queues share the one encoded bytes object."""
        first = self.topic.get_channel("a")
        second = self.topic.get_channel("b")
        self.topic.publish(b"x")
        self.assertIs(first._queue.read(), second._queue.read())

    def test_same_id_in_every_channel(self) -> None:
        """A message has the same ID in every channel."""
        first = self.consumer("a")
        second = self.consumer("b")
        self.topic.publish(b"x")
        self.assertEqual(first.take()[0].id, second.take()[0].id)

    def test_ids_unique_increasing(self) -> None:
        """Messages get distinct, increasing IDs."""
        consumer = self.consumer()
        for i in range(20):
            self.topic.publish(b"%d" % (i,))
        self.topic.publish_many([b"a", b"b", b"c"])
        ids = [m.id for m in consumer.take()]
        self.assertEqual(len(ids), 23)
        self.assertEqual(ids, sorted(set(ids)))

    def test_publish_many_order(self) -> None:
        """MPUB delivers its messages in order."""
        consumer = self.consumer()
        self.topic.publish_many([b"one", b"two", b"three"])
        self.assertEqual(consumer.bodies(), [b"one", b"two", b"three"])

    def test_message_count(self) -> None:
        """message_count and message_bytes count PUB, MPUB and DPUB messages and bodies."""
        self.topic.publish(b"a")
        self.topic.publish_many([b"bb", b"ccc"])
        self.topic.publish_deferred(b"dddd", 1)
        self.assertEqual(self.topic.message_count, 4)
        self.assertEqual(self.topic.message_bytes, 10)
        self.topic.get_channel("c")
        self.topic.publish(b"eeeee")
        self.assertEqual((self.topic.message_count, self.topic.message_bytes), (5, 15))

    def test_refused_not_counted(self) -> None:
        """A refused publish counts nothing."""
        self.topic.close()
        self.assertRaises(PublishError, self.topic.publish, b"x")
        self.assertEqual((self.topic.message_count, self.topic.message_bytes), (0, 0))


class HoldingTests(TopicTestCase):
    """Messages published while a topic has no channel, or is paused."""

    def test_held_without_channel(self) -> None:
        """With no channel, messages stay in the topic."""
        self.topic.publish(b"1")
        self.topic.publish_many([b"2", b"3"])
        self.assertEqual(self.topic.depth(), 3)

    def test_first_channel_takes_backlog(self) -> None:
        """The first channel created gets the messages the topic held."""
        self.topic.publish(b"1")
        self.topic.publish(b"2")
        first = self.consumer("first")
        self.assertEqual(first.bodies(), [b"1", b"2"])
        self.assertEqual(self.topic.depth(), 0)

    def test_later_channel_gets_only_new(self) -> None:
        """A channel created later gets only messages published after it exists."""
        self.topic.publish(b"old")
        first = self.consumer("first")
        second = self.consumer("second")
        self.topic.publish(b"new")
        self.assertEqual(first.bodies(), [b"old", b"new"])
        self.assertEqual(second.bodies(), [b"new"])

    def test_held_again_after_last_channel(self) -> None:
        """Once its channels are deleted, a topic holds messages again for the next one."""
        self.topic.get_channel("c")
        self.topic.delete_channel("c")
        self.topic.publish(b"x")
        self.assertEqual(self.topic.depth(), 1)
        self.assertEqual(self.consumer("d").bodies(), [b"x"])

    def test_paused_holds(self) -> None:
        """A paused topic keeps new messages until unpaused."""
        consumer = self.consumer()
        self.topic.pause()
        self.assertTrue(self.topic.paused)
        self.topic.publish(b"1")
        self.topic.publish(b"2")
        self.assertEqual(consumer.received, [])
        self.assertEqual(self.topic.depth(), 2)
        self.topic.unpause()
        self.assertEqual(consumer.bodies(), [b"1", b"2"])
        self.assertEqual(self.topic.depth(), 0)

    def test_paused_new_channel(self) -> None:
        """A channel created while the topic is paused waits for the unpause too."""
        self.topic.pause()
        self.topic.publish(b"1")
        consumer = self.consumer()
        self.assertEqual(consumer.received, [])
        self.topic.unpause()
        self.assertEqual(consumer.bodies(), [b"1"])

    def test_started_when_made(self) -> None:
        """A new topic is not held: it hands messages over as soon as it has a channel."""
        self.assertFalse(self.topic.held)

    def test_held_until_started(self) -> None:
        """A held topic keeps messages for every channel created before start()."""
        self.topic.hold()
        self.assertTrue(self.topic.held)
        first = self.consumer("first")
        self.topic.publish(b"1")
        self.topic.publish_deferred(b"later", 5)
        second = self.consumer("second")
        self.assertEqual(first.received, [])
        self.assertEqual(self.topic.depth(), 2)
        self.topic.start()
        self.assertFalse(self.topic.held)
        self.assertEqual(first.bodies(), [b"1"])
        self.assertEqual(second.bodies(), [b"1"])
        self.assertEqual(self.topic.get_channel("first").deferred_count, 1)
        self.assertEqual(self.topic.get_channel("second").deferred_count, 1)

    def test_held_and_paused(self) -> None:
        """Starting a held topic that is paused still holds until unpaused, and the reverse."""
        consumer = self.consumer()
        self.topic.hold()
        self.topic.pause()
        self.topic.publish(b"1")
        self.topic.start()
        self.assertEqual(consumer.received, [])
        self.topic.hold()
        self.topic.unpause()
        self.assertEqual(consumer.received, [])
        self.topic.start()
        self.assertEqual(consumer.bodies(), [b"1"])

    def test_start_twice(self) -> None:
        """start() on a started topic changes nothing."""
        consumer = self.consumer()
        self.topic.start()
        self.topic.publish(b"1")
        self.assertEqual(consumer.bodies(), [b"1"])

    def test_empty(self) -> None:
        """empty() drops the held messages; channels keep theirs."""
        channel = self.topic.get_channel("c")
        self.topic.publish(b"in channel")
        self.topic.pause()
        self.topic.publish(b"held")
        self.topic.publish_deferred(b"held later", 5)
        self.topic.empty()
        self.assertEqual(self.topic.depth(), 0)
        self.assertEqual(channel.depth(), 1)
        self.topic.unpause()
        self.assertEqual(channel.depth(), 1)
        self.assertEqual(channel.deferred_count, 0)


class DeferredTests(TopicTestCase):
    """DPUB."""

    def test_deferred_in_every_channel(self) -> None:
        """A deferred message is held by every channel for its delay."""
        first = self.consumer("a")
        second = self.consumer("b")
        self.topic.publish_deferred(b"later", 1.0)
        self.assertEqual(self.topic.get_channel("a").deferred_count, 1)
        self.clock.advance(0.999)
        self.assertEqual(first.received + second.received, [])
        self.clock.advance(0.001)
        self.assertEqual([(m.body, m.attempts) for m in first.take()], [(b"later", 1)])
        self.assertEqual(second.bodies(), [b"later"])

    def test_deferred_zero(self) -> None:
        """DPUB with delay 0 is an ordinary publish."""
        consumer = self.consumer()
        self.topic.publish_deferred(b"now", 0)
        self.assertEqual(consumer.bodies(), [b"now"])

    def test_deferred_clamped(self) -> None:
        """A DPUB delay above --max-req-timeout is cut to it."""
        self.build(max_req_timeout=10.0)
        consumer = self.consumer()
        self.topic.publish_deferred(b"x", 5000)
        self.clock.advance(10)
        self.assertEqual(consumer.bodies(), [b"x"])

    def test_deferred_without_channel(self) -> None:
        """A DPUB with no channel waits in the topic; its delay starts when a channel takes it (as Go)."""
        self.topic.publish_deferred(b"later", 5)
        self.assertEqual(self.topic.depth(), 1)
        self.clock.advance(100)
        consumer = self.consumer()
        self.assertEqual(consumer.received, [])
        self.assertEqual(self.topic.get_channel("c").deferred_count, 1)
        self.clock.advance(5)
        self.assertEqual(consumer.bodies(), [b"later"])

    def test_deferred_order(self) -> None:
        """Deferred messages come out in the order they are due."""
        consumer = self.consumer()
        self.topic.publish_deferred(b"3", 3)
        self.topic.publish_deferred(b"1", 1)
        self.topic.publish_deferred(b"2", 2)
        self.clock.advance(3)
        self.assertEqual(consumer.bodies(), [b"1", b"2", b"3"])


class LimitTests(TopicTestCase):
    """--mem-queue-size on the memory backend."""

    def setUp(self) -> None:
        self.build(mem_queue_size=10)

    def test_channel_full(self) -> None:
        """PUB fails when a channel's queue is at its limit."""
        self.topic.get_channel("c")
        for i in range(10):
            self.topic.publish(b"%d" % (i,))
        error = self.assertRaises(PublishError, self.topic.publish, b"too many")
        self.assertEqual(str(error), "queue t:c is full (--mem-queue-size=10)")
        self.assertEqual(self.topic.get_channel("c").depth(), 10)
        self.assertEqual(self.topic.message_count, 10)

    def test_any_channel_full(self) -> None:
        """One full channel refuses the publish for every channel."""
        self.topic.get_channel("a")
        for i in range(10):
            self.topic.publish(b"%d" % (i,))
        self.topic.get_channel("b")
        self.assertRaises(PublishError, self.topic.publish, b"x")
        self.assertEqual(self.topic.get_channel("b").depth(), 0)

    def test_topic_full(self) -> None:
        """With no channel, PUB fails when the topic's own queue is at its limit."""
        for i in range(10):
            self.topic.publish(b"%d" % (i,))
        error = self.assertRaises(PublishError, self.topic.publish, b"x")
        self.assertEqual(str(error), "queue t is full (--mem-queue-size=10)")
        self.assertRaises(PublishError, self.topic.publish_deferred, b"x", 5)

    def test_publish_many_atomic(self) -> None:
        """MPUB that does not fit publishes nothing; one that fits publishes all."""
        channel = self.topic.get_channel("c")
        for i in range(8):
            self.topic.publish(b"%d" % (i,))
        self.assertRaises(PublishError, self.topic.publish_many, [b"a", b"b", b"c"])
        self.assertEqual(channel.depth(), 8)
        self.assertEqual(self.topic.message_count, 8)
        self.topic.publish_many([b"a", b"b"])
        self.assertEqual(channel.depth(), 10)

    def test_publish_many_atomic_topic(self) -> None:
        """The same holds for the topic's own queue."""
        for i in range(8):
            self.topic.publish(b"%d" % (i,))
        self.assertRaises(PublishError, self.topic.publish_many, [b"a", b"b", b"c"])
        self.assertEqual(self.topic.depth(), 8)

    def test_consumed_makes_room(self) -> None:
        """Delivered messages no longer count against the limit."""
        consumer = self.consumer(ready=5)
        for i in range(15):
            self.topic.publish(b"%d" % (i,))
        self.assertEqual(len(consumer.received), 5)

    def test_deferred_not_limited(self) -> None:
        """Deferred messages in a channel do not count against the queue limit."""
        channel = self.topic.get_channel("c")
        for i in range(20):
            self.topic.publish_deferred(b"%d" % (i,), 60)
        self.assertEqual(channel.deferred_count, 20)

    def test_ephemeral_never_refuses(self) -> None:
        """An ephemeral topic and channel drop overflow rather than refuse."""
        topic = self.broker.get_topic("e#ephemeral")
        channel = topic.get_channel("c#ephemeral")
        self.assertIsInstance(topic._queue, EphemeralQueue)
        self.assertIsInstance(channel._queue, EphemeralQueue)
        for i in range(15):
            topic.publish(b"%d" % (i,))
        self.assertEqual(channel.depth(), 10)
        self.assertEqual(channel._queue.dropped, 5)

    def test_ephemeral_channel_on_normal_topic(self) -> None:
        """An #ephemeral channel uses ephemeral storage even on a normal topic."""
        channel = self.topic.get_channel("x#ephemeral")
        self.assertIsInstance(channel._queue, EphemeralQueue)
        self.assertIsInstance(self.topic._queue, MemoryQueue)
        for i in range(15):
            self.topic.publish(b"%d" % (i,))
        self.assertEqual(channel.depth(), 10)


class LifecycleTests(TopicTestCase):
    """Channels, deletion and closing."""

    def test_get_channel_same(self) -> None:
        """get_channel returns the same channel for the same name."""
        self.assertIs(self.topic.get_channel("c"), self.topic.get_channel("c"))
        self.assertEqual(list(self.topic.channels), ["c"])

    def test_find_channel(self) -> None:
        """find_channel does not create."""
        self.assertIsNone(self.topic.find_channel("c"))
        self.assertEqual(self.topic.channels, {})

    def test_invalid_channel_name(self) -> None:
        """An invalid channel name is a ValueError."""
        self.assertRaises(ValueError, self.topic.get_channel, "bad name")
        self.assertRaises(ValueError, self.topic.get_channel, "")

    def test_delete_channel(self) -> None:
        """Deleting a channel closes its consumers; the topic carries on."""
        consumer = self.consumer("a")
        other = self.consumer("b")
        self.topic.delete_channel("a")
        self.assertTrue(consumer.closed)
        self.topic.publish(b"x")
        self.assertEqual(consumer.received, [])
        self.assertEqual(other.bodies(), [b"x"])

    def test_normal_topic_kept(self) -> None:
        """A normal topic stays when its last channel is deleted."""
        self.topic.get_channel("c")
        self.topic.delete_channel("c")
        self.assertIs(self.broker.find_topic("t"), self.topic)

    def test_closed_refuses(self) -> None:
        """A closed topic refuses publishes with 'exiting'."""
        self.topic.get_channel("c")
        self.topic.close()
        error = self.assertRaises(PublishError, self.topic.publish, b"x")
        self.assertEqual(str(error), "exiting")
        self.assertRaises(PublishError, self.topic.publish_many, [b"x"])
        self.assertRaises(PublishError, self.topic.publish_deferred, b"x", 1)

    def test_delete(self) -> None:
        """Deleting a topic deletes its channels and stops their timers."""
        consumer = self.consumer()
        self.topic.publish(b"x")
        self.topic.publish_deferred(b"y", 5)
        channel = self.topic.get_channel("c")
        self.broker.delete_topic("t")
        self.assertTrue(channel.exiting)
        self.assertTrue(consumer.closed)
        self.assertEqual(self.topic.channels, {})
        self.assertEqual(list(self.clock.getDelayedCalls()), [])


class MessagesByIdTests(TopicTestCase):
    """Reading what the topic holds itself, and dropping some by id (what mirrored topics ask)."""

    def test_held_messages(self) -> None:
        """Deferred publishes waiting for a channel first, then the queue, which keeps its order."""
        self.topic.publish(b"a")
        self.topic.publish_deferred(b"later", 5.0)
        self.topic.publish(b"b")
        found, complete = self.topic.held_messages(100)
        self.assertEqual([decode(data).body for data in found], [b"later", b"a", b"b"])
        self.assertTrue(complete)
        self.assertEqual(self.topic.depth(), 3)
        self.assertEqual(self.consumer().bodies(), [b"a", b"b"])

    def test_held_messages_limit(self) -> None:
        """Past the limit the queue's rest is not read and keeps its place; the answer says it is not all."""
        for body in (b"a", b"b", b"c"):
            self.topic.publish(body)
        found, complete = self.topic.held_messages(1)
        self.assertEqual([decode(data).body for data in found], [b"a"])
        self.assertFalse(complete)
        self.assertEqual(self.consumer().bodies(), [b"a", b"b", b"c"])

    def test_drop_messages(self) -> None:
        """Queued and deferred messages of the topic go by id; the ids found are returned, others stay."""
        self.topic.publish(b"a")
        self.topic.publish_deferred(b"later", 5.0)
        self.topic.publish(b"b")
        ids = {decode(data).body: decode(data).id for data in self.topic.held_messages(100)[0]}
        gone = self.topic.drop_messages({ids[b"a"], ids[b"later"], b"x" * 16})
        self.assertEqual(gone, {ids[b"a"], ids[b"later"]})
        self.assertEqual([decode(data).body for data in self.topic.held_messages(100)[0]], [b"b"])

    def test_drop_messages_leaves_channels(self) -> None:
        """The channels keep their copies of a message dropped from the topic."""
        channel = self.topic.get_channel("c")
        self.topic.publish(b"a")
        [data] = channel.unfinished_messages(10)[0]
        self.assertEqual(self.topic.drop_messages({decode(data).id}), set())
        self.assertEqual(channel.depth(), 1)
