"""
Tests for :mod:`txnsq.mirror.exchange`: the fail-back exchange sent and
applied, and the delivery held at start; the part alone, on a broker and
a Clock, with a fake route.
"""

from __future__ import annotations

from typing import Any, List

from twisted.internet.task import Clock
from twisted.trial.unittest import SynchronousTestCase

from tests.core_fakes import START, FakeConsumer, decode, make_broker
from tests.mirror_fakes import add_peer
from txnsq.mirror import exchange
from txnsq.mirror.exchange import FailBack
from txnsq.mirror.recorder import MirrorRecorder
from txnsq.mirror.state import MirrorState
from txnsq.protocol.mirror import (
    OP_ANSWER_END,
    OP_FIN,
    OP_FINISHED_APART,
    OP_GROUP,
    OP_LIST_END,
    OP_TAKEN,
    SUBJECT_EXCHANGE,
    decode_records,
)


class ExchangeTestCase(SynchronousTestCase):
    """
    Node ``node-b`` (process ``epoch-b``), its topic ``mt`` mirrored with
    channel ``c`` holding three messages; peer ``node-a`` routed.
    """

    def setUp(self) -> None:
        self.clock = Clock()
        self.clock.advance(START)
        self.broker = make_broker(self.clock)
        self.state = MirrorState("node-b", "epoch-b", failover_timeout=5.0)
        self.recorder = MirrorRecorder(lambda: None, lambda: None)
        self.recorder.live = True
        self.topic = self.broker.get_topic("mt")
        self.topic.mirror = self.recorder
        self.channel = self.topic.get_channel("c")
        self.topic.publish_many([b"one", b"two", b"three"])
        self.ids = [decode(data).id for data in self.channel.unfinished_messages(10)[0]]
        self.route = add_peer(self.state, "sa", "node-a", "epoch-a")
        self.peer = self.state.peers["sa"]
        self.fail_back = FailBack(self.state, self.clock, self.broker, self.recorder)

    def sent(self) -> List[List[Any]]:
        """The records of each exchange payload sent to node-a."""
        return self.route.records(SUBJECT_EXCHANGE)

    def bodies(self) -> List[bytes]:
        """What ``mt:c`` holds."""
        return [decode(data).body for data in self.channel.unfinished_messages(10)[0]]


class SendListTests(ExchangeTestCase):
    """This node's list of what it took over from a peer."""

    def test_nothing_taken(self) -> None:
        """With nothing taken over from the peer, only the end of the list is sent."""
        self.fail_back.send_list(self.peer)
        self.assertEqual(self.sent(), [[(OP_LIST_END, "", "", [])]])

    def test_taken(self) -> None:
        """Each takeover's ids go under the peer's epoch of the time, then the end of the list."""
        self.state.taken_ids["node-a"] = [("epoch-a", {("mt", "c"): [b"1" * 16], ("mt", ""): [b"2" * 16]})]
        self.fail_back.send_list(self.peer)
        self.assertEqual(
            self.sent(),
            [
                [
                    (OP_GROUP, "", "", [b"epoch-a"]),
                    (OP_TAKEN, "mt", "c", [b"1" * 16]),
                    (OP_TAKEN, "mt", "", [b"2" * 16]),
                    (OP_LIST_END, "", "", []),
                ]
            ],
        )

    def test_chunks(self) -> None:
        """Past EXCHANGE_CHUNK items (ids, and the epoch's) a new payload starts, saying again whose ids follow."""
        self.patch(exchange, "EXCHANGE_CHUNK", 3)
        ids = [b"%016d" % (n,) for n in range(4)]
        self.state.taken_ids["node-a"] = [("epoch-a", {("mt", "c"): ids})]
        self.fail_back.send_list(self.peer)
        self.assertEqual(
            self.sent(),
            [
                [(OP_GROUP, "", "", [b"epoch-a"]), (OP_TAKEN, "mt", "c", ids[:2])],
                [(OP_GROUP, "", "", [b"epoch-a"]), (OP_TAKEN, "mt", "c", ids[2:])],
                [(OP_GROUP, "", "", [b"epoch-a"]), (OP_LIST_END, "", "", [])],
            ],
        )


class ReceivedTests(ExchangeTestCase):
    """A peer's exchange applied here."""

    def test_taken_dropped(self) -> None:
        """Ids the peer took over from this process are dropped here, and the standbys told (as FINs)."""
        self.fail_back.received(
            self.peer, [(OP_GROUP, "", "", [b"epoch-b"]), (OP_TAKEN, "mt", "c", self.ids[:2])]
        )
        self.assertEqual(self.bodies(), [b"three"])
        self.assertEqual(self.state.dropped_taken, 2)
        _, records = decode_records(self.recorder.builder.encode(1))
        op, topic, channel, ids = records[-1]
        self.assertEqual((op, topic, channel, sorted(ids)), (OP_FIN, "mt", "c", sorted(self.ids[:2])))

    def test_finished_apart_answered(self) -> None:
        """
        At the end of the list the answer names the ids taken from this
        very process that were not here any more (finished apart), then
        its end; the exchange is counted.
        """
        gone = self.ids[0]
        self.channel.drop_messages({gone})
        self.fail_back.received(
            self.peer,
            [(OP_GROUP, "", "", [b"epoch-b"]), (OP_TAKEN, "mt", "c", self.ids[:2]), (OP_LIST_END, "", "", [])],
        )
        self.assertEqual(
            self.sent(), [[(OP_FINISHED_APART, "mt", "c", [gone]), (OP_ANSWER_END, "", "", [])]]
        )
        self.assertEqual(self.state.exchanges_applied, 1)

    def test_other_process_not_answered(self) -> None:
        """Ids taken from an earlier process of this node are dropped, but none is told finished apart."""
        self.channel.drop_messages({self.ids[0]})
        self.fail_back.received(
            self.peer,
            [(OP_GROUP, "", "", [b"epoch-old"]), (OP_TAKEN, "mt", "c", self.ids[:2]), (OP_LIST_END, "", "", [])],
        )
        self.assertEqual(self.sent(), [[(OP_ANSWER_END, "", "", [])]])
        self.assertEqual(self.bodies(), [b"three"])

    def test_finished_apart_dropped(self) -> None:
        """What the peer finished while apart is dropped here."""
        self.fail_back.received(self.peer, [(OP_FINISHED_APART, "mt", "c", [self.ids[1]])])
        self.assertEqual(self.bodies(), [b"one", b"three"])
        self.assertEqual(self.state.dropped_finished_apart, 1)

    def test_answer_end(self) -> None:
        """The peer's answer ends: the list sent to it is not kept any more."""
        self.state.taken_ids["node-a"] = [("epoch-a", {("mt", "c"): [b"1" * 16]})]
        self.fail_back.received(self.peer, [(OP_ANSWER_END, "", "", [])])
        self.assertEqual(self.state.taken_ids, {})
        self.assertEqual(self.state.exchanges_answered, 1)


class HoldTests(ExchangeTestCase):
    """Delivery held at start, until an exchange or the timeout."""

    def consumer(self, channel: Any) -> FakeConsumer:
        consumer = FakeConsumer(ready_count=10)
        channel.add_consumer(consumer)
        channel.consumer_ready(consumer)
        return consumer

    def test_held_until_timeout(self) -> None:
        """A mirrored topic holding messages delivers nothing until the failover timeout."""
        self.fail_back.hold_at_start()
        self.assertEqual(self.state.holding_topics, {"mt"})
        consumer = self.consumer(self.channel)
        self.clock.advance(4.9)
        self.assertEqual(consumer.take(), [])
        self.clock.advance(0.1)
        self.assertEqual(len(consumer.take()), 3)
        self.assertIsNone(self.fail_back.hold_timer)
        self.assertEqual(self.state.holding_topics, set())

    def test_released_by_exchange(self) -> None:
        """The end of a peer's list applied releases the hold at once."""
        self.fail_back.hold_at_start()
        consumer = self.consumer(self.channel)
        self.fail_back.received(self.peer, [(OP_LIST_END, "", "", [])])
        self.assertEqual(len(consumer.take()), 3)
        self.assertIsNone(self.fail_back.hold_timer)

    def test_channel_made_while_held(self) -> None:
        """A channel made while its topic is held is held too."""
        self.fail_back.hold_at_start()
        other = self.topic.get_channel("d")
        self.fail_back.channel_created(self.topic, other)
        self.topic.publish(b"four")
        consumer = self.consumer(other)
        self.assertEqual(consumer.take(), [])
        self.fail_back.release_hold("test")
        self.assertEqual([message.body for message in consumer.take()], [b"four"])

    def test_nothing_held(self) -> None:
        """Without messages in mirrored topics nothing is held and no timer is set."""
        self.channel.empty()
        self.fail_back.hold_at_start()
        self.assertIsNone(self.fail_back.hold_timer)
        self.assertEqual(self.state.holding_topics, set())
