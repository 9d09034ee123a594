"""
Tests for txnsq.nsqd.channel: delivery to consumers, in-flight tracking,
timeouts, requeues, deferral, pause, empty and the channel's one timer,
driven with task.Clock.
"""

from __future__ import annotations

import random
from typing import Any, List


from tests.core_fakes import TopicTestCase
from tests.core_fakes import START, FakeConsumer, RecordingStorage, decode, make_broker
from txnsq.nsqd.channel import (
    Channel,
    ChannelFullError,
    InFlightError,
    SubscribeError,
)
from txnsq.protocol.message import encode_message


class ChannelTestCase(TopicTestCase):
    """A broker on a Clock with topic 't' and channel 'c'."""

    def build(self, **overrides: Any) -> None:
        """(Re)make the broker with some options changed."""
        TopicTestCase.build(self, **overrides)
        self.channel = self.topic.get_channel("c")

    def subscribe(
        self, ready: int = 1, msg_timeout: float = 60.0, channel: Any = None
    ) -> FakeConsumer:
        """A consumer added to the channel with a ready count."""
        consumer = FakeConsumer(ready, msg_timeout)
        (channel or self.channel).add_consumer(consumer)
        return consumer

    def publish(self, *bodies: bytes) -> None:
        for body in bodies:
            self.topic.publish(body)

    def timers(self) -> List[Any]:
        return list(self.clock.getDelayedCalls())


class DeliveryTests(ChannelTestCase):
    """Handing messages to ready consumers."""

    def test_deliver(self) -> None:
        """A ready consumer is sent the message with attempts 1."""
        consumer = self.subscribe()
        self.publish(b"hello")
        [message] = consumer.take()
        self.assertEqual((message.attempts, message.body), (1, b"hello"))
        self.assertEqual(message.timestamp, int(START * 1e9))
        self.assertEqual(consumer.in_flight_count, 1)
        self.assertEqual(self.channel.in_flight_count, 1)
        self.assertEqual(self.channel.depth(), 0)

    def test_not_ready_queues(self) -> None:
        """With RDY 0, messages wait in the channel's queue."""
        consumer = self.subscribe(ready=0)
        self.publish(b"a", b"b")
        self.assertEqual(consumer.received, [])
        self.assertEqual(self.channel.depth(), 2)

    def test_ready_delivers_queued(self) -> None:
        """Raising RDY delivers queued messages, oldest first, up to the count."""
        consumer = self.subscribe(ready=0)
        self.publish(b"a", b"b", b"c")
        consumer.ready_count = 2
        self.channel.consumer_ready(consumer)
        self.assertEqual(consumer.bodies(), [b"a", b"b"])
        self.assertEqual(self.channel.depth(), 1)

    def test_ready_limits_in_flight(self) -> None:
        """A consumer never has more messages in flight than its RDY count."""
        consumer = self.subscribe(ready=2)
        self.publish(b"1", b"2", b"3")
        messages = consumer.take()
        self.assertEqual([m.body for m in messages], [b"1", b"2"])
        self.channel.finish(consumer, messages[0].id)
        self.assertEqual(consumer.bodies(), [b"3"])

    def test_lowered_ready(self) -> None:
        """A consumer whose RDY drops (CLS) without telling the channel gets no more."""
        consumer = self.subscribe(ready=5)
        self.publish(b"1")
        consumer.ready_count = 0
        self.publish(b"2")
        self.assertEqual(consumer.bodies(), [b"1"])
        self.assertEqual(self.channel.depth(), 1)

    def test_round_robin(self) -> None:
        """Messages are spread evenly over ready consumers, in turn."""
        consumers = [self.subscribe(ready=100) for _ in range(3)]
        self.publish(*[b"%d" % (i,) for i in range(30)])
        self.assertEqual([len(c.received) for c in consumers], [10, 10, 10])
        self.assertEqual(consumers[0].bodies()[:3], [b"0", b"3", b"6"])
        self.assertEqual(consumers[1].bodies()[:3], [b"1", b"4", b"7"])

    def test_spread_respects_capacity(self) -> None:
        """A consumer with little room gets its share; the rest go to others."""
        small = self.subscribe(ready=1)
        large = self.subscribe(ready=5)
        self.publish(*[b"%d" % (i,) for i in range(8)])
        self.assertEqual(len(small.received), 1)
        self.assertEqual(len(large.received), 5)
        self.assertEqual(self.channel.depth(), 2)

    def test_backlog_to_first_ready(self) -> None:
        """A backlog goes to the consumer that becomes ready first, up to its RDY."""
        first = self.subscribe(ready=0)
        second = self.subscribe(ready=0)
        self.publish(*[b"%d" % (i,) for i in range(6)])
        first.ready_count = second.ready_count = 10
        self.channel.consumer_ready(first)
        self.assertEqual(len(first.received), 6)
        self.channel.consumer_ready(second)
        self.assertEqual(len(second.received), 0)

    def test_fifo_with_backlog(self) -> None:
        """New messages never overtake queued ones."""
        consumer = self.subscribe(ready=1)
        self.publish(b"1", b"2")
        [first] = consumer.take()
        self.channel.finish(consumer, first.id)
        self.publish(b"3")
        self.assertEqual(consumer.bodies(), [b"2"])
        self.assertEqual(self.channel.depth(), 1)

    def test_ready_for_unsubscribed(self) -> None:
        """consumer_ready for a consumer that is not subscribed delivers nothing."""
        stranger = FakeConsumer(5)
        self.publish(b"x")
        self.channel.consumer_ready(stranger)
        self.assertEqual(stranger.received, [])

    def test_synchronous_finisher(self) -> None:
        """A consumer that FINs inside send_message drains a big backlog without recursing."""
        channel = self.channel

        class Finisher(FakeConsumer):
            def send_message(self, data: bytes) -> None:
                FakeConsumer.send_message(self, data)
                channel.finish(self, decode(data).id)

        consumer = Finisher(0)
        channel.add_consumer(consumer)
        self.publish(*[b"%d" % (i,) for i in range(5000)])
        consumer.ready_count = 1
        channel.consumer_ready(consumer)
        self.assertEqual(len(consumer.received), 5000)
        self.assertEqual(channel.depth(), 0)
        self.assertEqual(channel.in_flight_count, 0)
        self.assertEqual(self.timers(), [])

    def test_message_count(self) -> None:
        """message_count counts messages put in the channel."""
        self.subscribe(ready=1)
        self.publish(b"a", b"b")
        self.topic.publish_deferred(b"c", 5)
        self.assertEqual(self.channel.message_count, 3)


class HoldTests(ChannelTestCase):
    """hold() and release(): the deliveries a batch of commands makes room for go out together."""

    def test_held_finishes_deliver_on_release(self) -> None:
        """FINs while held free room but deliver nothing until the release, which fills it all."""
        consumer = self.subscribe(ready=3)
        self.publish(*[b"%d" % (i,) for i in range(10)])
        first = consumer.take()
        self.channel.hold()
        for message in first:
            self.channel.finish(consumer, message.id)
        self.assertEqual(consumer.received, [])
        self.assertEqual(consumer.in_flight_count, 0)
        self.channel.release()
        self.assertEqual(consumer.bodies(), [b"3", b"4", b"5"])
        self.assertEqual(consumer.in_flight_count, 3)

    def test_nested(self) -> None:
        """Only the outermost release delivers."""
        consumer = self.subscribe(ready=0)
        self.publish(b"a")
        self.channel.hold()
        self.channel.hold()
        consumer.ready_count = 1
        self.channel.consumer_ready(consumer)
        self.channel.release()
        self.assertEqual(consumer.received, [])
        self.channel.release()
        self.assertEqual(consumer.bodies(), [b"a"])

    def test_publish_while_held_is_queued(self) -> None:
        """A message published while the channel is held waits in the queue, in order."""
        consumer = self.subscribe(ready=5)
        self.channel.hold()
        self.publish(b"a", b"b")
        self.assertEqual((consumer.received, self.channel.depth()), ([], 2))
        self.channel.release()
        self.assertEqual(consumer.bodies(), [b"a", b"b"])

    def test_paused_while_held(self) -> None:
        """A channel paused during a hold delivers nothing on release."""
        consumer = self.subscribe(ready=5)
        self.channel.hold()
        self.publish(b"a")
        self.channel.pause()
        self.channel.release()
        self.assertEqual(consumer.received, [])
        self.channel.unpause()
        self.assertEqual(consumer.bodies(), [b"a"])


class BurstTests(ChannelTestCase):
    """The pump fills a lone ready consumer in one pass and takes turns among several."""

    def test_lone_consumer_filled(self) -> None:
        """A consumer alone takes as many queued messages as its RDY allows, in order, each with its own id and attempts 1."""
        self.publish(*[b"%d" % (i,) for i in range(10)])
        consumer = self.subscribe(ready=7)
        messages = consumer.take()
        self.assertEqual([m.body for m in messages], [b"%d" % (i,) for i in range(7)])
        self.assertEqual({m.attempts for m in messages}, {1})
        self.assertEqual(len({m.id for m in messages}), 7)
        self.assertEqual((self.channel.depth(), self.channel.in_flight_count), (3, 7))

    def test_several_take_turns(self) -> None:
        """With several ready consumers the backlog is dealt one message each in turn."""
        first = self.subscribe(ready=0)
        second = self.subscribe(ready=0)
        self.publish(*[b"%d" % (i,) for i in range(6)])
        first.ready_count = second.ready_count = 10
        self.channel.hold()
        self.channel.consumer_ready(first)
        self.channel.consumer_ready(second)
        self.channel.release()
        self.assertEqual(first.bodies(), [b"0", b"2", b"4"])
        self.assertEqual(second.bodies(), [b"1", b"3", b"5"])

    def test_one_full_then_the_other(self) -> None:
        """When one consumer is full, the rest of the backlog goes to the other."""
        first = self.subscribe(ready=0)
        second = self.subscribe(ready=0)
        self.publish(*[b"%d" % (i,) for i in range(6)])
        first.ready_count, second.ready_count = 1, 10
        self.channel.hold()
        self.channel.consumer_ready(first)
        self.channel.consumer_ready(second)
        self.channel.release()
        self.assertEqual(first.bodies(), [b"0"])
        self.assertEqual(second.bodies(), [b"1", b"2", b"3", b"4", b"5"])

    def test_consumer_leaving_mid_burst(self) -> None:
        """A consumer that leaves while being sent a burst is sent nothing more; the rest stays queued."""
        channel = self.channel

        class Leaver(FakeConsumer):
            def send_message(self, data: bytes) -> None:
                FakeConsumer.send_message(self, data)
                if len(self.received) == 2:
                    channel.remove_consumer(self)

        self.publish(*[b"%d" % (i,) for i in range(5)])
        consumer = Leaver(10)
        channel.add_consumer(consumer)
        self.assertEqual(consumer.bodies(), [b"0", b"1"])
        # Its two in-flight messages went back to the end of the queue.
        self.assertEqual((channel.depth(), channel.in_flight_count), (5, 0))

    def test_burst_deadlines(self) -> None:
        """Every message of a burst times out msg_timeout after it went out."""
        self.publish(b"a", b"b", b"c")
        consumer = self.subscribe(ready=3, msg_timeout=5.0)
        self.assertEqual(len(consumer.take()), 3)
        self.clock.advance(4.9)
        self.assertEqual(self.channel.timeout_count, 0)
        self.clock.advance(0.2)
        self.assertEqual(self.channel.timeout_count, 3)
        self.assertEqual({m.attempts for m in consumer.take()}, {2})


class FinishTests(ChannelTestCase):
    """FIN."""

    def test_finish(self) -> None:
        """FIN takes the message out of flight for good."""
        consumer = self.subscribe()
        self.publish(b"x")
        [message] = consumer.take()
        self.channel.finish(consumer, message.id)
        self.assertEqual(consumer.in_flight_count, 0)
        self.assertEqual(self.channel.in_flight_count, 0)
        self.clock.advance(120)
        self.assertEqual(consumer.received, [])
        self.assertEqual(self.channel.timeout_count, 0)

    def test_not_in_flight(self) -> None:
        """FIN of an unknown ID fails with 'ID not in flight'."""
        consumer = self.subscribe()
        error = self.assertRaises(
            InFlightError, self.channel.finish, consumer, b"0123456789abcdef"
        )
        self.assertEqual(str(error), "ID not in flight")

    def test_finish_twice(self) -> None:
        """A second FIN of the same message fails with 'ID not in flight'."""
        consumer = self.subscribe()
        self.publish(b"x")
        [message] = consumer.take()
        self.channel.finish(consumer, message.id)
        error = self.assertRaises(InFlightError, self.channel.finish, consumer, message.id)
        self.assertEqual(str(error), "ID not in flight")

    def test_not_owner(self) -> None:
        """FIN of another consumer's message fails with 'client does not own message'."""
        owner = self.subscribe()
        other = self.subscribe(ready=0)
        self.publish(b"x")
        [message] = owner.take()
        error = self.assertRaises(InFlightError, self.channel.finish, other, message.id)
        self.assertEqual(str(error), "client does not own message")
        self.assertEqual(self.channel.in_flight_count, 1)


class TimeoutTests(ChannelTestCase):
    """In-flight messages that are not finished in time."""

    def test_timeout_redelivers(self) -> None:
        """After msg_timeout the message comes back with attempts 2."""
        consumer = self.subscribe(msg_timeout=10)
        self.publish(b"x")
        [first] = consumer.take()
        self.clock.advance(9.9)
        self.assertEqual(consumer.received, [])
        self.clock.advance(0.1)
        [again] = consumer.take()
        self.assertEqual((again.id, again.attempts, again.body), (first.id, 2, b"x"))
        self.assertEqual(self.channel.timeout_count, 1)
        self.assertEqual(consumer.in_flight_count, 1)

    def test_timeout_per_consumer(self) -> None:
        """Each consumer's messages time out after its own msg_timeout."""
        quick = self.subscribe(msg_timeout=1)
        slow = self.subscribe(msg_timeout=5)
        self.publish(b"q", b"s")
        quick.take()
        slow.take()
        self.clock.advance(1)
        self.assertEqual(self.channel.timeout_count, 1)
        [again] = quick.take()
        self.assertEqual(again.body, b"q")
        self.channel.finish(quick, again.id)
        self.clock.advance(3.9)
        self.assertEqual(self.channel.timeout_count, 1)
        self.clock.advance(0.1)
        self.assertEqual(self.channel.timeout_count, 2)

    def test_timeout_goes_to_end(self) -> None:
        """A timed-out message goes behind the messages already queued."""
        consumer = self.subscribe(ready=1, msg_timeout=10)
        self.publish(b"1", b"2", b"3")
        self.assertEqual(consumer.bodies(), [b"1"])
        self.clock.advance(10)
        # The consumer is free again and gets the oldest queued message.
        self.assertEqual(consumer.bodies(), [b"2"])
        self.clock.advance(10)
        self.assertEqual(consumer.bodies(), [b"3"])
        self.clock.advance(10)
        [message] = consumer.take()
        self.assertEqual((message.body, message.attempts), (b"1", 2))

    def test_timeout_while_not_ready(self) -> None:
        """A timed-out message waits in the queue when no consumer is ready."""
        consumer = self.subscribe(ready=1, msg_timeout=10)
        self.publish(b"x")
        consumer.take()
        consumer.ready_count = 0
        self.channel.consumer_ready(consumer)
        self.clock.advance(10)
        self.assertEqual(consumer.received, [])
        self.assertEqual(self.channel.depth(), 1)
        self.assertEqual(consumer.in_flight_count, 0)

    def test_attempts_count_up(self) -> None:
        """Every delivery counts one more attempt."""
        consumer = self.subscribe(msg_timeout=1)
        self.publish(b"x")
        attempts: List[int] = []
        for _ in range(4):
            attempts.extend(m.attempts for m in consumer.take())
            self.clock.advance(1)
        self.assertEqual(attempts, [1, 2, 3, 4])

    def test_many_timeouts_at_once(self) -> None:
        """Messages due at the same moment all time out together, in order."""
        consumer = self.subscribe(ready=3, msg_timeout=5)
        self.publish(b"1", b"2", b"3")
        consumer.take()
        self.clock.advance(5)
        self.assertEqual(self.channel.timeout_count, 3)
        self.assertEqual(consumer.bodies(), [b"1", b"2", b"3"])


class RequeueTests(ChannelTestCase):
    """REQ."""

    def test_requeue_now(self) -> None:
        """REQ 0 puts the message back at once; it returns with attempts 2."""
        consumer = self.subscribe()
        self.publish(b"x")
        [first] = consumer.take()
        self.channel.requeue(consumer, first.id, 0)
        [again] = consumer.take()
        self.assertEqual((again.id, again.attempts), (first.id, 2))
        self.assertEqual(self.channel.requeue_count, 1)

    def test_requeue_now_goes_to_end(self) -> None:
        """REQ 0 puts the message behind those already queued."""
        consumer = self.subscribe(ready=1)
        self.publish(b"1", b"2")
        [first] = consumer.take()
        self.channel.requeue(consumer, first.id, 0)
        self.assertEqual(consumer.bodies(), [b"2"])
        self.assertEqual(self.channel.depth(), 1)

    def test_requeue_delay(self) -> None:
        """REQ with a delay holds the message (deferred) for that long."""
        consumer = self.subscribe()
        self.publish(b"x")
        [first] = consumer.take()
        self.channel.requeue(consumer, first.id, 2.0)
        self.assertEqual(self.channel.deferred_count, 1)
        self.assertEqual(self.channel.requeue_count, 1)
        self.assertEqual(consumer.in_flight_count, 0)
        self.clock.advance(1.9)
        self.assertEqual(consumer.received, [])
        self.clock.advance(0.1)
        [again] = consumer.take()
        self.assertEqual((again.id, again.attempts), (first.id, 2))
        self.assertEqual(self.channel.deferred_count, 0)

    def test_requeue_delay_frees_consumer(self) -> None:
        """While its message is deferred, the consumer gets the next one."""
        consumer = self.subscribe(ready=1)
        self.publish(b"1", b"2")
        [first] = consumer.take()
        self.channel.requeue(consumer, first.id, 30)
        self.assertEqual(consumer.bodies(), [b"2"])

    def test_requeue_delay_clamped(self) -> None:
        """A REQ delay above --max-req-timeout is cut to it."""
        self.build(max_req_timeout=10.0)
        consumer = self.subscribe(msg_timeout=3600)
        self.publish(b"x")
        [first] = consumer.take()
        self.channel.requeue(consumer, first.id, 1000)
        self.clock.advance(10)
        self.assertEqual(consumer.bodies(), [b"x"])

    def test_requeue_errors(self) -> None:
        """REQ of an unknown or foreign message fails like FIN."""
        owner = self.subscribe()
        other = self.subscribe(ready=0)
        self.publish(b"x")
        [message] = owner.take()
        error = self.assertRaises(
            InFlightError, self.channel.requeue, owner, b"0123456789abcdef", 0
        )
        self.assertEqual(str(error), "ID not in flight")
        error = self.assertRaises(InFlightError, self.channel.requeue, other, message.id, 0)
        self.assertEqual(str(error), "client does not own message")

    def test_finish_after_requeue(self) -> None:
        """A requeued message is no longer in flight."""
        consumer = self.subscribe(ready=0)
        self.publish(b"x")
        consumer.ready_count = 1
        self.channel.consumer_ready(consumer)
        [message] = consumer.take()
        consumer.ready_count = 0
        self.channel.consumer_ready(consumer)
        self.channel.requeue(consumer, message.id, 0)
        self.assertRaises(InFlightError, self.channel.finish, consumer, message.id)


class TouchTests(ChannelTestCase):
    """TOUCH."""

    def test_touch_extends(self) -> None:
        """TOUCH restarts the timeout from now."""
        consumer = self.subscribe(msg_timeout=1)
        self.publish(b"x")
        [message] = consumer.take()
        self.clock.advance(0.8)
        self.channel.touch(consumer, message.id)
        self.clock.advance(0.8)
        self.assertEqual(consumer.received, [])
        self.assertEqual(self.channel.timeout_count, 0)
        self.clock.advance(0.2)
        [again] = consumer.take()
        self.assertEqual(again.attempts, 2)

    def test_touch_repeatedly(self) -> None:
        """A message touched in time never times out."""
        consumer = self.subscribe(msg_timeout=10)
        self.publish(b"x")
        [message] = consumer.take()
        for _ in range(20):
            self.clock.advance(9)
            self.channel.touch(consumer, message.id)
        self.assertEqual(self.channel.timeout_count, 0)
        self.assertEqual(len(self.timers()), 1)

    def test_touch_capped(self) -> None:
        """TOUCH never extends past delivery time + --max-msg-timeout."""
        self.build(max_msg_timeout=15.0)
        consumer = self.subscribe(msg_timeout=10)
        self.publish(b"x")
        [message] = consumer.take()
        self.clock.advance(8)
        self.channel.touch(consumer, message.id)
        self.clock.advance(6.9)
        self.assertEqual(consumer.received, [])
        self.clock.advance(0.1)
        self.assertEqual(consumer.bodies(), [b"x"])

    def test_touch_errors(self) -> None:
        """TOUCH of an unknown or foreign message fails like FIN."""
        owner = self.subscribe()
        other = self.subscribe(ready=0)
        self.publish(b"x")
        [message] = owner.take()
        error = self.assertRaises(
            InFlightError, self.channel.touch, owner, b"0123456789abcdef"
        )
        self.assertEqual(str(error), "ID not in flight")
        error = self.assertRaises(InFlightError, self.channel.touch, other, message.id)
        self.assertEqual(str(error), "client does not own message")


class ConsumerTests(ChannelTestCase):
    """Subscribing and leaving."""

    def test_remove_requeues_at_once(self) -> None:
        """A leaving consumer's in-flight messages go to another consumer at once."""
        first = self.subscribe(ready=2)
        second = self.subscribe(ready=0)
        self.publish(b"1", b"2")
        sent = first.take()
        self.channel.remove_consumer(first)
        self.assertEqual(first.in_flight_count, 0)
        self.assertEqual(self.channel.requeue_count, 2)
        second.ready_count = 5
        self.channel.consumer_ready(second)
        got = second.take()
        self.assertEqual([m.id for m in got], [m.id for m in sent])
        self.assertEqual([m.attempts for m in got], [2, 2])

    def test_remove_unknown(self) -> None:
        """Removing a consumer that is not subscribed does nothing."""
        self.channel.remove_consumer(FakeConsumer())
        self.assertEqual(self.channel.consumers, {})

    def test_removed_gets_nothing(self) -> None:
        """A removed consumer is sent nothing more."""
        consumer = self.subscribe(ready=5)
        self.channel.remove_consumer(consumer)
        self.publish(b"x")
        self.assertEqual(consumer.received, [])
        self.assertEqual(self.channel.depth(), 1)

    def test_add_twice(self) -> None:
        """Adding a consumer twice keeps one subscription."""
        consumer = self.subscribe()
        self.channel.add_consumer(consumer)
        self.assertEqual(list(self.channel.consumers), [consumer])

    def test_max_channel_consumers(self) -> None:
        """Past --max-channel-consumers, add_consumer fails with Go's text."""
        self.build(max_channel_consumers=2)
        self.subscribe()
        self.subscribe()
        error = self.assertRaises(ChannelFullError, self.subscribe)
        self.assertEqual(str(error), "consumers for t:c exceeds limit of 2")
        self.assertIsInstance(error, SubscribeError)
        self.assertEqual(len(self.channel.consumers), 2)

    def test_unlimited_consumers(self) -> None:
        """--max-channel-consumers 0 means no limit."""
        for _ in range(50):
            self.subscribe()
        self.assertEqual(len(self.channel.consumers), 50)

    def test_ready_at_subscription(self) -> None:
        """A consumer that is already ready when added gets queued messages."""
        self.publish(b"x")
        consumer = self.subscribe(ready=1)
        self.assertEqual(consumer.bodies(), [b"x"])


class EphemeralChannelTests(ChannelTestCase):
    """#ephemeral channels and topics."""

    def test_deleted_with_last_consumer(self) -> None:
        """An ephemeral channel is deleted when its last consumer leaves."""
        channel = self.topic.get_channel("e#ephemeral")
        first = self.subscribe(channel=channel)
        second = self.subscribe(channel=channel)
        channel.remove_consumer(first)
        self.assertIs(self.topic.find_channel("e#ephemeral"), channel)
        channel.remove_consumer(second)
        self.assertIsNone(self.topic.find_channel("e#ephemeral"))
        self.assertTrue(channel.exiting)

    def test_normal_channel_stays(self) -> None:
        """A normal channel stays when its last consumer leaves."""
        consumer = self.subscribe()
        self.channel.remove_consumer(consumer)
        self.assertIs(self.topic.find_channel("c"), self.channel)

    def test_ephemeral_topic_deleted(self) -> None:
        """An ephemeral topic goes with its last channel."""
        topic = self.broker.get_topic("e#ephemeral")
        channel = topic.get_channel("c#ephemeral")
        consumer = self.subscribe(channel=channel)
        channel.remove_consumer(consumer)
        self.assertIsNone(self.broker.find_topic("e#ephemeral"))
        self.assertTrue(topic.exiting)

    def test_ephemeral_topic_kept_while_channels(self) -> None:
        """An ephemeral topic stays while it has another channel."""
        topic = self.broker.get_topic("e#ephemeral")
        topic.get_channel("keep")
        channel = topic.get_channel("c#ephemeral")
        channel.remove_consumer(self.subscribe(channel=channel))
        self.assertIs(self.broker.find_topic("e#ephemeral"), topic)
        topic.delete_channel("keep")
        self.assertIsNone(self.broker.find_topic("e#ephemeral"))

    def test_in_flight_dropped(self) -> None:
        """Messages in flight to the last consumer of an ephemeral channel go with it."""
        channel = self.topic.get_channel("e#ephemeral")
        consumer = self.subscribe(channel=channel, msg_timeout=5)
        self.publish(b"x")
        self.assertEqual(len(consumer.received), 1)
        channel.remove_consumer(consumer)
        self.assertEqual(self.timers(), [])


class PauseTests(ChannelTestCase):
    """Pausing a channel."""

    def test_paused_holds(self) -> None:
        """A paused channel delivers nothing; unpausing delivers the backlog."""
        consumer = self.subscribe(ready=5)
        self.channel.pause()
        self.publish(b"1", b"2")
        self.assertEqual(consumer.received, [])
        self.assertEqual(self.channel.depth(), 2)
        self.channel.unpause()
        self.assertEqual(consumer.bodies(), [b"1", b"2"])

    def test_paused_in_flight(self) -> None:
        """In-flight messages can still be finished while paused."""
        consumer = self.subscribe(ready=5)
        self.publish(b"1")
        [message] = consumer.take()
        self.channel.pause()
        self.channel.finish(consumer, message.id)
        self.assertEqual(self.channel.in_flight_count, 0)

    def test_paused_timeouts_wait(self) -> None:
        """Messages that time out while paused wait in the queue."""
        consumer = self.subscribe(ready=5, msg_timeout=1)
        self.publish(b"1")
        consumer.take()
        self.channel.pause()
        self.clock.advance(1)
        self.assertEqual(consumer.received, [])
        self.assertEqual(self.channel.depth(), 1)
        self.channel.unpause()
        self.assertEqual([m.attempts for m in consumer.take()], [2])


class EmptyAndDeleteTests(ChannelTestCase):
    """Emptying, deleting and closing a channel."""

    def fill(self) -> FakeConsumer:
        """One message in flight, one deferred, two queued."""
        consumer = self.subscribe(ready=1)
        self.publish(b"flying", b"q1", b"q2")
        self.topic.publish_deferred(b"later", 10)
        self.assertEqual(
            (self.channel.in_flight_count, self.channel.deferred_count, self.channel.depth()),
            (1, 1, 2),
        )
        return consumer

    def test_empty(self) -> None:
        """empty() drops queued, deferred and in-flight messages."""
        consumer = self.fill()
        [message] = consumer.take()
        consumer.ready_count = 0
        self.channel.consumer_ready(consumer)
        self.channel.empty()
        self.assertEqual(
            (self.channel.in_flight_count, self.channel.deferred_count, self.channel.depth()),
            (0, 0, 0),
        )
        self.assertEqual(consumer.in_flight_count, 0)
        self.assertRaises(InFlightError, self.channel.finish, consumer, message.id)
        self.assertEqual(self.timers(), [])
        self.clock.advance(100)
        self.assertEqual(consumer.received, [])

    def test_usable_after_empty(self) -> None:
        """Consumers keep receiving after empty()."""
        consumer = self.fill()
        consumer.take()
        self.channel.empty()
        self.publish(b"new")
        self.assertEqual(consumer.bodies(), [b"new"])

    def test_delete(self) -> None:
        """Deleting a channel closes its consumers, drops its messages, stops its timer."""
        consumer = self.fill()
        self.topic.delete_channel("c")
        self.assertTrue(consumer.closed)
        self.assertEqual(consumer.in_flight_count, 0)
        self.assertTrue(self.channel.exiting)
        self.assertEqual(self.timers(), [])
        self.assertIsNone(self.topic.find_channel("c"))
        self.assertRaises(SubscribeError, self.channel.add_consumer, FakeConsumer())
        # The consumer's connection may still say goodbye.
        self.channel.remove_consumer(consumer)

    def test_delete_unknown(self) -> None:
        """Deleting a channel that does not exist is a KeyError."""
        self.assertRaises(KeyError, self.topic.delete_channel, "nonesuch")

    def test_close_keeps_messages(self) -> None:
        """Closing puts in-flight and deferred messages back in the queue before closing it."""
        storage = RecordingStorage()
        self.broker = make_broker(storage=storage)
        self.clock = self.broker.clock
        self.topic = self.broker.get_topic("t")
        self.channel = self.topic.get_channel("c")
        consumer = self.fill()
        self.channel.close()
        queue = storage.queues["t:c"]
        self.assertTrue(queue.closed)
        self.assertFalse(queue.deleted)
        bodies = [decode(data).body for data in queue.items]
        self.assertEqual(sorted(bodies), [b"flying", b"later", b"q1", b"q2"])
        self.assertTrue(consumer.closed)
        self.assertEqual(self.timers(), [])


class TimerTests(ChannelTestCase):
    """The channel's single timer."""

    def test_one_timer(self) -> None:
        """Many in-flight and deferred messages share one pending call."""
        consumer = self.subscribe(ready=100)
        for i in range(50):
            self.publish(b"%d" % (i,))
            self.topic.publish_deferred(b"d", 100 + i)
            self.clock.advance(0.1)
        self.assertEqual(consumer.in_flight_count, 50)
        self.assertEqual(len(self.timers()), 1)

    def test_timer_at_earliest(self) -> None:
        """The timer is set for the earliest deadline and moves earlier when needed."""
        self.subscribe(ready=10, msg_timeout=30)
        self.publish(b"x")
        [call] = self.timers()
        self.assertAlmostEqual(call.getTime(), START + 30, places=4)
        self.topic.publish_deferred(b"d", 5)
        [call] = self.timers()
        self.assertAlmostEqual(call.getTime(), START + 5, places=4)

    def test_no_timer_when_idle(self) -> None:
        """When nothing is in flight or deferred, no call is pending."""
        consumer = self.subscribe(ready=10)
        self.publish(b"1", b"2")
        for message in consumer.take():
            self.channel.finish(consumer, message.id)
        self.assertEqual(self.timers(), [])

    def test_no_timer_after_deferred(self) -> None:
        """Once the deferred messages are delivered and finished, no call is pending."""
        consumer = self.subscribe(ready=10)
        self.topic.publish_deferred(b"d", 3)
        self.clock.advance(3)
        [message] = consumer.take()
        self.channel.finish(consumer, message.id)
        self.assertEqual(self.timers(), [])

    def test_finished_leave_nothing(self) -> None:
        """Finished messages leave nothing behind in the timeout bookkeeping, and the one left still times out."""
        consumer = self.subscribe(ready=2)
        self.publish(b"keep")
        consumer.take()
        for i in range(10000):
            self.publish(b"%d" % (i,))
            [message] = consumer.take()
            self.channel.finish(consumer, message.id)
        self.assertEqual(sum(len(flight) for flight in self.channel._flights.values()), 1)
        self.assertEqual(self.channel.in_flight_count, 1)
        self.clock.advance(60)
        self.assertEqual(self.channel.timeout_count, 1)

    def test_consumers_time_out_in_deadline_order(self) -> None:
        """Messages of consumers with different msg_timeouts come back in deadline order, each when due."""
        slow = self.subscribe(ready=5, msg_timeout=10)
        fast = self.subscribe(ready=5, msg_timeout=3)
        self.channel.hold()
        self.publish(b"s1", b"f1")
        self.channel.release()
        self.clock.advance(1)
        self.publish(b"s2", b"f2")
        self.assertEqual((slow.bodies(), fast.bodies()), ([b"s1", b"s2"], [b"f1", b"f2"]))
        slow.ready_count = fast.ready_count = 0
        self.channel.consumer_ready(slow)
        self.channel.consumer_ready(fast)
        self.clock.advance(2)
        self.assertEqual(self.channel.timeout_count, 1)
        self.clock.advance(1)
        self.assertEqual(self.channel.timeout_count, 2)
        self.clock.advance(6)
        self.assertEqual(self.channel.timeout_count, 3)
        self.clock.advance(1)
        self.assertEqual(self.channel.timeout_count, 4)
        taker = self.subscribe(ready=10)
        self.assertEqual(taker.bodies(), [b"f1", b"f2", b"s1", b"s2"])

    def test_capped_touch_out_of_order(self) -> None:
        """A TOUCH capped by --max-msg-timeout below a later delivery's deadline times out at its capped deadline, first."""
        self.build(max_msg_timeout=100.0)
        consumer = self.subscribe(ready=5, msg_timeout=60)
        self.publish(b"old")
        [old] = consumer.take()
        self.clock.advance(45)
        self.publish(b"new")  # due at 105
        consumer.take()
        self.clock.advance(5)
        self.channel.touch(consumer, old.id)  # 50 + 60 = 110, capped at 0 + 100
        consumer.ready_count = 0
        self.channel.consumer_ready(consumer)
        self.clock.advance(49.9)
        self.assertEqual(self.channel.timeout_count, 0)
        self.clock.advance(0.1)
        self.assertEqual(self.channel.timeout_count, 1)
        self.clock.advance(4.9)
        self.assertEqual(self.channel.timeout_count, 1)
        self.clock.advance(0.1)
        self.assertEqual(self.channel.timeout_count, 2)
        self.assertEqual(self.channel.depth(), 2)

    def test_capped_touch_then_finish(self) -> None:
        """A capped, out-of-order message that is finished never times out."""
        self.build(max_msg_timeout=100.0)
        consumer = self.subscribe(ready=5, msg_timeout=60)
        self.publish(b"old")
        [old] = consumer.take()
        self.clock.advance(45)
        self.publish(b"new")
        [new] = consumer.take()
        self.clock.advance(5)
        self.channel.touch(consumer, old.id)
        self.channel.finish(consumer, old.id)
        self.channel.finish(consumer, new.id)
        self.clock.advance(100)
        self.assertEqual((self.channel.timeout_count, self.channel.in_flight_count), (0, 0))
        self.assertEqual(self.timers(), [])

    def test_channel_class(self) -> None:
        """Topics make Channel instances."""
        self.assertIsInstance(self.channel, Channel)


class SamplingTests(ChannelTestCase):
    """IDENTIFY's sample_rate: a consumer gets about that share of messages."""

    def sampler(self, rate: int) -> FakeConsumer:
        consumer = FakeConsumer(ready_count=1000)
        consumer.sample_rate = rate  # type: ignore[attr-defined]
        return consumer

    def test_share(self) -> None:
        """A lone consumer with sample_rate 30 gets about 30% of messages; the rest are dropped."""
        consumer = self.sampler(30)
        self.channel.add_consumer(consumer)
        self.channel.random_below = random.Random(1234).randrange
        for i in range(2000):
            self.topic.publish(b"m%d" % (i,))
        got = len(consumer.take())
        self.assertTrue(500 <= got <= 750, got)
        self.assertEqual(self.channel.sampled_out_count, 2000 - got)
        self.assertEqual(self.channel.depth(), 0)

    def test_declined_goes_to_other_consumer(self) -> None:
        """A message a sampling consumer declines goes to the next ready consumer."""
        sampler = self.sampler(10)
        other = FakeConsumer(ready_count=1000)
        self.channel.add_consumer(sampler)
        self.channel.add_consumer(other)
        self.channel.random_below = lambda n: 99  # the sampler always declines
        for i in range(10):
            self.topic.publish(b"m%d" % (i,))
        self.assertEqual(len(sampler.take()), 0)
        self.assertEqual(len(other.take()), 10)
        self.assertEqual(self.channel.sampled_out_count, 0)

    def test_go_odds(self) -> None:
        """A consumer takes the message when randrange(100) <= sample_rate, as Go."""
        consumer = self.sampler(50)
        self.channel.add_consumer(consumer)
        draws = iter([50, 51])
        self.channel.random_below = lambda n: next(draws)
        self.topic.publish(b"kept")
        self.topic.publish(b"dropped")
        self.assertEqual(consumer.bodies(), [b"kept"])

    def test_sampling_off_when_sampler_leaves(self) -> None:
        """Once no sampling consumer is subscribed, every message is delivered."""
        sampler = self.sampler(1)
        plain = FakeConsumer(ready_count=1000)
        self.channel.add_consumer(sampler)
        self.channel.add_consumer(plain)
        self.channel.remove_consumer(sampler)
        for i in range(100):
            self.topic.publish(b"m%d" % (i,))
        self.assertEqual(len(plain.take()), 100)


class MessagesByIdTests(ChannelTestCase):
    """Reading the unfinished messages, and dropping some by id (what mirrored topics ask)."""

    def test_unfinished_messages(self) -> None:
        """In flight first, then deferred in the order they are due, then queued; the queue keeps its order."""
        consumer = self.subscribe(ready=1)
        self.publish(b"flight", b"queued-1", b"queued-2")
        self.channel.put_deferred(self.encoded(b"late"), 20.0)
        self.channel.put_deferred(self.encoded(b"soon"), 10.0)
        found, complete = self.channel.unfinished_messages(100)
        self.assertEqual(
            [decode(data).body for data in found],
            [b"flight", b"soon", b"late", b"queued-1", b"queued-2"],
        )
        self.assertTrue(complete)
        self.assertEqual(self.channel.depth(), 2)
        consumer.ready_count = 3
        self.channel.consumer_ready(consumer)
        self.assertEqual(consumer.bodies(), [b"flight", b"queued-1", b"queued-2"])

    def test_unfinished_messages_limit(self) -> None:
        """Past the limit the queue's rest is not read, keeps its place, and the answer says it is not all."""
        self.publish(b"a", b"b", b"c")
        found, complete = self.channel.unfinished_messages(2)
        self.assertEqual([decode(data).body for data in found], [b"a", b"b"])
        self.assertFalse(complete)
        consumer = self.subscribe(ready=3)
        self.assertEqual(consumer.bodies(), [b"a", b"b", b"c"])

    def test_drop_messages(self) -> None:
        """Queued, deferred and in-flight messages go by id; the ids found are returned, others stay."""
        consumer = self.subscribe(ready=1)
        self.publish(b"flight", b"queued", b"kept")
        self.channel.put_deferred(self.encoded(b"deferred"), 10.0)
        ids = {decode(data).body: decode(data).id for data in self.channel.unfinished_messages(100)[0]}
        gone = self.channel.drop_messages({ids[b"flight"], ids[b"queued"], ids[b"deferred"], b"x" * 16})
        self.assertEqual(gone, {ids[b"flight"], ids[b"queued"], ids[b"deferred"]})
        self.assertEqual(
            [decode(data).body for data in self.channel.unfinished_messages(100)[0]], [b"kept"]
        )
        self.assertEqual(self.channel.deferred_count, 0)

    def test_dropped_in_flight_frees_the_consumer(self) -> None:
        """A consumer whose in-flight message was dropped is sent the next one; its FIN of the dropped one fails."""
        consumer = self.subscribe(ready=1)
        self.publish(b"first", b"second")
        [first] = consumer.take()
        self.channel.drop_messages({first.id})
        self.assertEqual(consumer.in_flight_count, 1)
        self.assertEqual(consumer.bodies(), [b"second"])
        self.assertRaises(InFlightError, self.channel.finish, consumer, first.id)

    def encoded(self, body: bytes) -> bytes:
        """``body`` encoded as a message, its id made of the body."""
        return encode_message(int(START * 1e9), 0, body.ljust(16, b"-")[:16], body)
