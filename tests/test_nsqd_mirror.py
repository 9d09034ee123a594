"""
Tests for :mod:`txnsq.mirror.recorder`, :mod:`txnsq.mirror.standby` and
:mod:`txnsq.mirror.snapshot`: the recorder a mirrored topic feeds, the
standby's copy and its take-over, and the snapshots a new peer gets; on
a broker driven by a Clock.
"""

from __future__ import annotations

from typing import List

from twisted.trial.unittest import SynchronousTestCase

from tests.core_fakes import FakeConsumer, decode, make_broker
from txnsq.mirror import standby
from txnsq.mirror.recorder import MirrorRecorder, StandbysUnavailable
from txnsq.mirror.snapshot import (
    channel_snapshot,
    drop_from_channel,
    drop_from_topic,
    holds_messages,
    topic_snapshot,
)
from txnsq.mirror.standby import StandbyCopy, TopicCopy
from txnsq.nsqd.topic import PublishError
from txnsq.protocol.message import encode_message
from txnsq.protocol.mirror import (
    OP_CHANNEL_CREATE,
    OP_CHANNEL_DELETE,
    OP_CHANNEL_EMPTY,
    OP_CHANNEL_PAUSE,
    OP_CHANNEL_UNPAUSE,
    OP_DEFERRED,
    OP_FIN,
    OP_MESSAGES,
    OP_REQ,
    RecordBuilder,
    decode_records,
    encode_delay_item,
)


def message(n: int) -> bytes:
    return encode_message(1, 0, b"%016d" % (n,), b"body%d" % (n,))


class RecorderTests(SynchronousTestCase):
    """What a mirrored topic's publishes and FINs become."""

    def setUp(self) -> None:
        self.scheduled: List[int] = []
        self.full: List[int] = []
        self.recorder = MirrorRecorder(lambda: self.scheduled.append(1), lambda: self.full.append(1))
        self.recorder.live = True
        self.broker = make_broker()
        self.topic = self.broker.get_topic("t")
        self.topic.mirror = self.recorder

    def test_not_live_records_nothing(self) -> None:
        """With no peer, publishes are not gathered."""
        self.recorder.live = False
        self.topic.publish(b"x")
        self.assertFalse(self.recorder.builder)

    def test_publish_forms(self) -> None:
        """PUB, MPUB and DPUB are recorded with the encoded messages the channels hold; one schedule per send."""
        channel = self.topic.get_channel("c")
        self.topic.publish(b"one")
        self.topic.publish_many([b"two", b"three"])
        self.topic.publish_deferred(b"four", 2.0)
        self.assertEqual(self.scheduled, [1])
        _, records = decode_records(self.recorder.builder.encode(1))
        self.assertEqual([decode(d).body for d in records[0][3]], [b"one", b"two", b"three"])
        self.assertEqual(records[1][0], OP_DEFERRED)
        self.assertEqual(channel.depth(), 3)

    def test_fin_and_req(self) -> None:
        """FIN and REQ on a channel of the topic are recorded with the channel's name."""
        channel = self.topic.get_channel("c")
        consumer = FakeConsumer(ready_count=2)
        self.topic.publish_many([b"a", b"b"])
        channel.add_consumer(consumer)
        channel.consumer_ready(consumer)
        first, second = consumer.take()
        channel.finish(consumer, first.id)
        channel.requeue(consumer, second.id, 1.5)
        _, records = decode_records(self.recorder.builder.encode(1))
        self.assertEqual([(op, c) for op, _, c, _ in records[1:]], [(b"F", "c"), (b"R", "c")])
        self.assertEqual(records[2][3], [encode_delay_item(1500, second.id)])

    def test_full_sends_early(self) -> None:
        """Past FLUSH_SIZE held bytes the recorder asks for a send at once."""
        self.topic.publish(b"x" * 300000)
        self.topic.publish(b"y")
        self.assertEqual(self.full, [1])


class RefusalTests(SynchronousTestCase):
    """A recorder refusing publishes (``--mirror-min-standbys``): the topic stores nothing."""

    def setUp(self) -> None:
        self.recorder = MirrorRecorder(lambda: None, lambda: None)
        self.recorder.live = True
        self.recorder.refusing = "mirror: 0 of 1 required standbys live"
        self.broker = make_broker()
        self.topic = self.broker.get_topic("t")
        self.topic.mirror = self.recorder

    def test_every_publish_refused(self) -> None:
        """PUB, MPUB and DPUB (deferred or not) raise StandbysUnavailable with the reason, before anything is stored; each is counted."""
        channel = self.topic.get_channel("c")
        for publish in (
            lambda: self.topic.publish(b"x"),
            lambda: self.topic.publish_many([b"x", b"y"]),
            lambda: self.topic.publish_deferred(b"x", 2.0),
            lambda: self.topic.publish_deferred(b"x", 0.0),
        ):
            with self.assertRaises(StandbysUnavailable) as caught:
                publish()
            self.assertEqual(str(caught.exception), "mirror: 0 of 1 required standbys live")
        self.assertIsInstance(caught.exception, PublishError)
        self.assertEqual(self.recorder.refused, 4)
        self.assertEqual((self.topic.message_count, channel.depth(), channel.deferred_count), (0, 0, 0))
        self.assertFalse(self.recorder.builder)

    def test_without_channel(self) -> None:
        """A topic with no channel yet refuses as well: nothing held."""
        self.assertRaises(StandbysUnavailable, self.topic.publish, b"x")
        self.assertEqual(self.topic.depth(), 0)

    def test_retained_record_refused(self) -> None:
        """A MetaQ record to a retained, mirrored topic is refused before the log is written."""
        import os

        from txnsq.nsqd.retention import RetentionSettings
        from txnsq.storage.memory import MemoryStorage

        directory = self.mktemp()
        os.makedirs(directory)
        broker = make_broker(storage=MemoryStorage(), data_path=directory, sync_every=1, sync_timeout=2.0)
        self.addCleanup(broker.close)
        topic = broker.get_topic("t")
        topic.set_retention(RetentionSettings(1 << 20, 0.0, 1))
        topic.mirror = self.recorder
        self.assertRaises(StandbysUnavailable, topic.publish_record, 0, 0, b"x")
        assert topic.retention is not None
        self.assertEqual(topic.retention.log.partitions[0].next_offset, 0)
        self.assertEqual(topic.message_count, 0)

    def test_taken_again(self) -> None:
        """With the refusal lifted, publishes are taken and recorded."""
        self.recorder.refusing = None
        self.topic.publish(b"x")
        self.assertEqual(self.topic.message_count, 1)
        self.assertTrue(self.recorder.builder)
        self.assertEqual(self.recorder.refused, 0)


class TopicCopyTests(SynchronousTestCase):
    """A standby's copy of one topic."""

    def test_req_moves_to_end_with_delay(self) -> None:
        """A REQ keeps the message, at the end of its channel, with the delay."""
        copy = TopicCopy("t")
        copy.apply(OP_CHANNEL_CREATE, "c", [])
        copy.apply(OP_MESSAGES, "", [message(1), message(2)])
        copy.apply(OP_REQ, "c", [encode_delay_item(3000, b"%016d" % (1,))])
        self.assertEqual(
            [decode(d).body for d in copy.channels["c"].values()], [b"body2", b"body1"]
        )
        self.assertEqual(copy.delays, {("c", b"%016d" % (1,)): 3000})

    def test_take_over(self) -> None:
        """Taken over: messages go to the broker's channels (deferred ones deferred), pauses kept."""
        broker = make_broker()
        copy = TopicCopy("t")
        copy.apply(OP_CHANNEL_CREATE, "c", [])
        copy.apply(OP_CHANNEL_CREATE, "p", [])
        copy.apply(OP_CHANNEL_PAUSE, "p", [])
        copy.apply(OP_MESSAGES, "", [message(1)])
        copy.apply(OP_DEFERRED, "", [encode_delay_item(5000, message(2))])
        self.assertEqual(copy.take_over(broker), 4)
        topic = broker.topics["t"]
        self.assertEqual((topic.channels["c"].depth(), topic.channels["c"].deferred_count), (1, 1))
        self.assertTrue(topic.channels["p"].paused)
        self.assertEqual(copy.count(), 0)

    def test_topic_pause(self) -> None:
        """A paused topic's copy holds its publishes; unpaused, they go to the channels."""
        copy = TopicCopy("t")
        copy.apply(OP_CHANNEL_CREATE, "c", [])
        copy.apply(OP_CHANNEL_PAUSE, "", [])
        copy.apply(OP_MESSAGES, "", [message(1)])
        self.assertEqual((len(copy.held), len(copy.channels["c"])), (1, 0))
        copy.apply(OP_CHANNEL_UNPAUSE, "", [])
        self.assertEqual((len(copy.held), len(copy.channels["c"])), (0, 1))

    def test_take_over_paused_topic(self) -> None:
        """Taken over, a paused topic is paused here and keeps what it held."""
        broker = make_broker()
        copy = TopicCopy("t")
        copy.apply(OP_CHANNEL_CREATE, "c", [])
        copy.apply(OP_CHANNEL_PAUSE, "", [])
        copy.apply(OP_MESSAGES, "", [message(1)])
        copy.take_over(broker)
        topic = broker.topics["t"]
        self.assertTrue(topic.paused)
        self.assertEqual((topic.depth(), topic.channels["c"].depth()), (1, 0))

    def test_take_over_remaining_delay(self) -> None:
        """A deferred message taken over later is deferred for what is left of its delay."""
        broker = make_broker()
        now = broker.clock.seconds()
        copy = TopicCopy("t")
        copy.apply(OP_CHANNEL_CREATE, "c", [])
        copy.apply(OP_DEFERRED, "", [encode_delay_item(5000, message(1))], int(now * 1000))
        broker.clock.advance(3)
        copy.take_over(broker, None, int(broker.clock.seconds() * 1000))
        channel = broker.topics["t"].channels["c"]
        broker.clock.advance(1.9)
        self.assertEqual(channel.deferred_count, 1)
        broker.clock.advance(0.2)
        self.assertEqual((channel.deferred_count, channel.depth()), (0, 1))

    def test_delays_follow_channels(self) -> None:
        """A held deferred message's delay goes with it to the first channel; FIN and empty drop delays."""
        copy = TopicCopy("t")
        copy.apply(OP_DEFERRED, "", [encode_delay_item(5000, message(1))])
        copy.apply(OP_CHANNEL_CREATE, "c", [])
        self.assertEqual(copy.delays, {("c", b"%016d" % (1,)): 5000})
        copy.apply(OP_CHANNEL_EMPTY, "c", [])
        self.assertEqual((copy.delays, copy.channels["c"]), ({}, {}))

    def test_take_over_held(self) -> None:
        """Messages held by the topic (no channel) stay held by the broker's topic."""
        broker = make_broker()
        copy = TopicCopy("t")
        copy.apply(OP_MESSAGES, "", [message(1)])
        copy.take_over(broker)
        self.assertEqual(broker.topics["t"].depth(), 1)


class SnapshotTests(SynchronousTestCase):
    """What a new peer is sent of a channel or topic."""

    def test_channel(self) -> None:
        """In flight, then deferred, then queued; the queue is left as it was."""
        broker = make_broker()
        topic = broker.get_topic("t")
        channel = topic.get_channel("c")
        topic.publish_many([b"a", b"b", b"c"])
        topic.publish_deferred(b"d", 10)
        consumer = FakeConsumer(ready_count=1)
        channel.add_consumer(consumer)
        channel.consumer_ready(consumer)
        found, complete = channel_snapshot(channel)
        self.assertEqual([decode(d).body for d in found], [b"a", b"d", b"b", b"c"])
        self.assertTrue(complete)
        self.assertEqual(channel.depth(), 2)
        consumer.take()

    def test_limit_keeps_order(self) -> None:
        """Past the limit the rest stays queued, in its order, and the snapshot says so."""
        broker = make_broker()
        topic = broker.get_topic("t")
        topic.publish_many([b"a", b"b", b"c"])
        found, complete = topic_snapshot(topic, limit=2)
        self.assertEqual([decode(d).body for d in found], [b"a", b"b"])
        self.assertFalse(complete)
        queue = topic._queue
        self.assertEqual([decode(queue.read()).body for _ in range(3)], [b"a", b"b", b"c"])


class DropTests(SynchronousTestCase):
    """Messages dropped from a node by the fail-back exchange."""

    def test_drop_ids(self) -> None:
        """drop_from_channel returns the ids found, wherever they were."""
        broker = make_broker()
        topic = broker.get_topic("t")
        channel = topic.get_channel("c")
        topic.publish_many([b"a", b"b", b"c"])
        topic.publish_deferred(b"d", 10)
        found, _ = channel_snapshot(channel)
        ids = {decode(data).body: decode(data).id for data in found}
        consumer = FakeConsumer(ready_count=1)
        channel.add_consumer(consumer)
        channel.consumer_ready(consumer)
        self.assertEqual(consumer.take()[0].body, b"a")
        gone = drop_from_channel(channel, {ids[b"a"], ids[b"c"], ids[b"d"], b"x" * 16})
        self.assertEqual(gone, {ids[b"a"], ids[b"c"], ids[b"d"]})
        self.assertEqual(channel.deferred_count, 0)
        # The consumer was freed: it gets the one left, now its only one in flight.
        got = consumer.take()
        self.assertEqual([m.body for m in got], [b"b"])
        self.assertEqual((consumer.in_flight_count, channel.in_flight_count, channel.depth()), (1, 1, 0))
        self.assertTrue(holds_messages(topic))
        channel.finish(consumer, got[0].id)
        self.assertFalse(holds_messages(topic))

    def test_drop_from_topic(self) -> None:
        """Messages the topic holds itself (no channel yet) are dropped by id, the rest kept in order."""
        broker = make_broker()
        topic = broker.get_topic("t")
        topic.publish_many([b"a", b"b", b"c"])
        found, _ = topic_snapshot(topic)
        ids = [decode(data).id for data in found]
        self.assertEqual(drop_from_topic(topic, {ids[1]}), {ids[1]})
        found, _ = topic_snapshot(topic)
        self.assertEqual([decode(d).body for d in found], [b"a", b"c"])

    def test_take_over_lists_ids(self) -> None:
        """take_over adds the ids it hands over to ``taken``, by topic and channel."""
        broker = make_broker()
        copy = TopicCopy("t")
        copy.apply(OP_CHANNEL_CREATE, "c", [])
        copy.apply(OP_MESSAGES, "", [message(1), message(2)])
        taken: dict = {}
        copy.take_over(broker, taken)
        self.assertEqual(taken, {("t", "c"): [b"%016d" % (1,), b"%016d" % (2,)]})

    def test_fin_of_held(self) -> None:
        """A FIN with no channel drops a message the topic's copy holds itself."""
        copy = TopicCopy("t")
        copy.apply(OP_MESSAGES, "", [message(1), message(2)])
        copy.apply(OP_FIN, "", [b"%016d" % (1,)])
        self.assertEqual(list(copy.held), [b"%016d" % (2,)])


def _id(n: int) -> bytes:
    return b"%016d" % (n,)


#: A topic's life on the primary, as records: publishes before any channel
#: (one deferred), channels made, FINs, REQs with and without a delay, a
#: channel paused, one deleted, one emptied, the topic paused (holding a
#: publish) and unpaused, the topic emptied while paused, and records
#: naming ids and channels the copy does not have.
LIFE = [
    (OP_MESSAGES, "", [message(1), message(2)]),
    (OP_DEFERRED, "", [encode_delay_item(5000, message(3))]),
    (OP_CHANNEL_CREATE, "a", []),
    (OP_CHANNEL_CREATE, "b", []),
    (OP_MESSAGES, "", [message(4), message(5), message(6)]),
    (OP_FIN, "a", [_id(1), _id(4)]),
    (OP_REQ, "a", [encode_delay_item(2000, _id(2))]),
    (OP_REQ, "b", [encode_delay_item(0, _id(5))]),
    (OP_CHANNEL_PAUSE, "b", []),
    (OP_CHANNEL_CREATE, "c", []),
    (OP_MESSAGES, "", [message(7)]),
    (OP_CHANNEL_DELETE, "c", []),
    (OP_CHANNEL_CREATE, "d", []),
    (OP_MESSAGES, "", [message(8)]),
    (OP_CHANNEL_EMPTY, "d", []),
    (OP_CHANNEL_PAUSE, "", []),
    (OP_MESSAGES, "", [message(9)]),
    (OP_CHANNEL_UNPAUSE, "", []),
    (OP_DEFERRED, "", [encode_delay_item(0, message(10)), encode_delay_item(9000, message(11))]),
    (OP_CHANNEL_PAUSE, "", []),
    (OP_MESSAGES, "", [message(12)]),
    (OP_CHANNEL_EMPTY, "", []),
    (OP_CHANNEL_UNPAUSE, "", []),
    (OP_FIN, "b", [_id(6), _id(99)]),
    (OP_REQ, "b", [encode_delay_item(1000, _id(98))]),
    (OP_FIN, "zzz", [_id(7)]),
    (OP_CHANNEL_DELETE, "zzz", []),
]


def received(life: list) -> list:
    """``life``'s records as a standby receives them: encoded, decoded packed."""
    builder = RecordBuilder()
    for op, channel, items in life:
        builder.add(op, "t", channel, list(items))
    return decode_records(builder.encode(1), packed=True)[1]


def state(copy: TopicCopy) -> tuple:
    return (
        list(copy.held.items()),
        {name: list(messages.items()) for name, messages in copy.channels.items()},
        copy.paused,
        copy.delays,
    )


class LazyCopyTests(SynchronousTestCase):
    """A copy keeps its records as received and applies them when read."""

    def test_logged_until_read(self) -> None:
        """Records are logged, not applied, until something reads the copy."""
        copy = TopicCopy("t")
        for op, _, channel, items in received(LIFE[:5]):
            copy.apply(op, channel, items)
        self.assertEqual(copy.pending(), 5)
        # Channel a: 1, 2, 3 (held before it was made), 4, 5, 6; b: 4, 5, 6.
        self.assertEqual(copy.count(), 9)
        self.assertEqual(copy.pending(), 0)

    def test_same_as_one_at_a_time(self) -> None:
        """Applied all at once, the records leave what applying each as it came leaves."""
        lazy = TopicCopy("t")
        eager = TopicCopy("t")
        for step, (op, _, channel, items) in enumerate(received(LIFE)):
            lazy.apply(op, channel, items, 1000 + step)
            eager.apply(op, channel, items, 1000 + step)
            eager.settle()
        self.assertEqual(lazy.pending(), len(LIFE))
        self.assertEqual(state(lazy), state(eager))
        held, channels, paused, delays = state(lazy)
        self.assertEqual(held, [])
        self.assertEqual(
            {name: [decode(data).id for _, data in found] for name, found in channels.items()},
            {
                "a": [_id(n) for n in (3, 5, 6, 2, 7, 8, 9, 10, 11)],
                "b": [_id(n) for n in (4, 5, 7, 8, 9, 10, 11)],
                "d": [_id(n) for n in (9, 10, 11)],
            },
        )
        self.assertEqual(paused, {"b": True})
        self.assertEqual(
            delays,
            {
                ("a", _id(3)): 1001 + 5000,
                ("a", _id(2)): 1006 + 2000,
                ("a", _id(11)): 1018 + 9000,
                ("b", _id(11)): 1018 + 9000,
                ("d", _id(11)): 1018 + 9000,
            },
        )

    def test_catch_up_records(self) -> None:
        """A catch-up's records (a channel emptied, then its messages) apply as one at a time."""
        life = [
            (OP_CHANNEL_CREATE, "c", []),
            (OP_MESSAGES, "", [message(1), message(2)]),
            (OP_CHANNEL_EMPTY, "c", []),
            (OP_MESSAGES, "c", [message(2), message(3)]),
            (OP_REQ, "c", [encode_delay_item(4000, _id(2))]),
            (OP_MESSAGES, "d", [message(4)]),
        ]
        lazy = TopicCopy("t")
        eager = TopicCopy("t")
        for op, _, channel, items in received(life):
            lazy.apply(op, channel, items, 10)
            eager.apply(op, channel, items, 10)
            eager.settle()
        self.assertEqual(state(lazy), state(eager))
        self.assertEqual(
            {name: list(found) for name, found in lazy.channels.items()},
            {"c": [_id(3), _id(2)], "d": [_id(4)]},
        )
        self.assertEqual(lazy.delays, {("c", _id(2)): 4010})

    def test_take_over_unread(self) -> None:
        """
        A takeover of a copy never read hands over every unfinished
        message, in order, delays and pauses kept.
        """
        broker = make_broker()
        now_ms = int(broker.clock.seconds() * 1000)
        copy = TopicCopy("t")
        for op, _, channel, items in received(LIFE):
            copy.apply(op, channel, items, now_ms)
        taken: dict = {}
        self.assertEqual(copy.take_over(broker, taken, now_ms), 9 + 7 + 3)
        self.assertEqual((copy.count(), copy.pending()), (0, 0))
        topic = broker.topics["t"]
        self.assertEqual(sorted(topic.channels), ["a", "b", "d"])
        self.assertTrue(topic.channels["b"].paused)
        self.assertFalse(topic.paused)
        a = topic.channels["a"]
        # 3 and 11 deferred for their delays, 2 for the REQ's.
        self.assertEqual((a.depth(), a.deferred_count), (6, 3))
        self.assertEqual(
            [decode(data).id for data in channel_snapshot(a)[0]],
            [_id(n) for n in (2, 3, 11, 5, 6, 7, 8, 9, 10)],
        )
        self.assertEqual(taken[("t", "a")], [_id(n) for n in (3, 5, 6, 2, 7, 8, 9, 10, 11)])
        b = topic.channels["b"]
        self.assertEqual(
            [decode(data).id for data in channel_snapshot(b)[0]],
            [_id(n) for n in (11, 4, 5, 7, 8, 9, 10)],
        )
        broker.clock.advance(5.1)
        self.assertEqual(a.deferred_count, 1)
        self.assertEqual(topic.channels["d"].depth() + topic.channels["d"].deferred_count, 3)

    def test_settled_past_removals(self) -> None:
        """Past SETTLE_REMOVALS FINs and REQs (and the copy's size), the log is applied unasked."""
        self.patch(standby, "SETTLE_REMOVALS", 4)
        copy = TopicCopy("t")
        life = [(OP_CHANNEL_CREATE, "c", []), (OP_MESSAGES, "", [message(n) for n in range(8)])]
        life += [(OP_FIN, "c", [_id(n)]) for n in range(3)]
        for op, _, channel, items in received(life):
            copy.apply(op, channel, items)
        # The three FINs are one record.
        self.assertEqual(copy.pending(), 3)
        copy.apply(OP_FIN, "c", [_id(3)])
        # 4 removals: applied.
        self.assertEqual(copy.pending(), 0)
        self.assertEqual(copy.count(), 4)
        for n in range(4, 7):
            copy.apply(OP_FIN, "c", [_id(n)])
        # 3 more, fewer than SETTLE_REMOVALS.
        self.assertEqual(copy.pending(), 3)
        copy.apply(OP_MESSAGES, "", [message(n) for n in range(10, 20)])
        copy.apply(OP_FIN, "c", [_id(7)])
        self.assertEqual(copy.pending(), 0)
        self.assertEqual(copy.count(), 10)
        # 10 held when last applied: 4 FINs are not enough now.
        for n in range(10, 18):
            copy.apply(OP_FIN, "c", [_id(n)])
            self.assertEqual(copy.pending(), n - 9)
        copy.apply(OP_FIN, "c", [_id(18), _id(19)])
        self.assertEqual((copy.pending(), copy.count()), (0, 0))

    def test_size_unread(self) -> None:
        """size() counts the bytes of logged messages without applying the log."""
        copy = TopicCopy("t")
        records = received(
            [(OP_CHANNEL_CREATE, "c", []), (OP_MESSAGES, "", [message(1), message(2)])]
        )
        for op, _, channel, items in records:
            copy.apply(op, channel, items)
        self.assertEqual(copy.size(), len(message(1)) + len(message(2)))
        self.assertEqual(copy.pending(), 2)
        copy.apply(OP_FIN, "c", [_id(1)])
        copy.settle()
        self.assertEqual(copy.size(), len(message(2)))

    def test_standby_copy(self) -> None:
        """A StandbyCopy fed packed payloads hands them over at a takeover."""
        broker = make_broker()
        copy = StandbyCopy("a", "e")
        builder = RecordBuilder()
        builder.add(OP_CHANNEL_CREATE, "t", "c", [])
        builder.add(OP_MESSAGES, "t", "", [message(1), message(2)])
        builder.add(OP_MESSAGES, "u", "", [message(3)])
        copy.apply(1, decode_records(builder.encode(1), packed=True)[1])
        builder.add(OP_FIN, "t", "c", [_id(1)])
        copy.apply(2, decode_records(builder.encode(2), packed=True)[1])
        self.assertEqual(copy.stats()["topics"]["t"], {"held": 0, "channels": {"c": 1}})
        self.assertEqual(copy.take_over(broker), 2)
        self.assertEqual(broker.topics["t"].channels["c"].depth(), 1)
        self.assertEqual(broker.topics["u"].depth(), 1)
