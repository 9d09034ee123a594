"""
Tests for :mod:`txnsq.mirror.catch_up`: a peer that comes is sent every
mirrored channel's state and unfinished messages, in slices, and what
was recorded meanwhile after them; the part alone, on a broker and a
Clock, with a fake gate.
"""

from __future__ import annotations

from typing import Any, List

from twisted.internet.task import Clock
from twisted.trial.unittest import SynchronousTestCase

from tests.core_fakes import START, decode, make_broker
from tests.mirror_fakes import FakeConnection
from txnsq.mirror import catch_up
from txnsq.mirror.catch_up import CatchUp
from txnsq.mirror.recorder import MirrorRecorder
from txnsq.mirror.state import MirrorState
from txnsq.protocol.mirror import (
    OP_CHANNEL_CREATE,
    OP_CHANNEL_EMPTY,
    OP_CHANNEL_PAUSE,
    OP_CHANNEL_UNPAUSE,
    OP_MESSAGES,
    RecordBuilder,
    decode_records,
)


class FakeGate:
    """A gate that numbers what it is sent and counts it as unacked, as the real one does."""

    def __init__(self, state: MirrorState) -> None:
        self.state = state
        self.sent: List[List[Any]] = []
        self.flushes = 0
        self.releases = 0

    def send(self, builder: RecordBuilder) -> None:
        self.state.seq += 1
        payload = builder.encode(self.state.seq)
        self.sent.append(decode_records(payload)[1])
        self.state.lag_bytes += len(payload)

    def flush(self) -> None:
        self.flushes += 1

    def release(self) -> None:
        self.releases += 1


class CatchUpTestCase(SynchronousTestCase):
    """Topic ``mt`` mirrored: channel ``c`` with three messages, ``d`` paused; ``plain`` not mirrored."""

    def setUp(self) -> None:
        self.clock = Clock()
        self.clock.advance(START)
        self.broker = make_broker(self.clock)
        self.state = MirrorState("me", "e")
        self.gate = FakeGate(self.state)
        self.catch_up = CatchUp(self.state, self.clock, self.broker, self.gate)  # type: ignore[arg-type]
        topic = self.broker.get_topic("mt")
        topic.mirror = MirrorRecorder(lambda: None, lambda: None)
        topic.get_channel("c")
        topic.get_channel("d").pause()
        topic.get_channel("e#ephemeral")
        topic.publish_many([b"one", b"two", b"three"])
        self.broker.get_topic("plain").publish(b"p")

    def messages_sent(self) -> List[Any]:
        """(channel, bodies) of each message record sent."""
        return [
            (channel, [decode(data).body for data in items])
            for records in self.gate.sent
            for op, _, channel, items in records
            if op == OP_MESSAGES
        ]


class StartTests(CatchUpTestCase):
    """What a catch-up sends."""

    def test_states_then_messages(self) -> None:
        """The records waiting go first; then the channels' and the topic's states; then each channel's messages."""
        self.catch_up.start()
        self.assertEqual(self.gate.flushes, 1)
        states = self.gate.sent[0]
        self.assertEqual(
            states,
            [
                (OP_CHANNEL_CREATE, "mt", "c", []),
                (OP_CHANNEL_EMPTY, "mt", "c", []),
                (OP_CHANNEL_CREATE, "mt", "d", []),
                (OP_CHANNEL_EMPTY, "mt", "d", []),
                (OP_CHANNEL_PAUSE, "mt", "d", []),
                (OP_CHANNEL_UNPAUSE, "mt", "", []),
                (OP_CHANNEL_EMPTY, "mt", "", []),
            ],
        )
        self.assertEqual(
            self.messages_sent(), [("c", [b"one", b"two", b"three"]), ("d", [b"one", b"two", b"three"])]
        )
        self.assertEqual((self.state.catch_ups, self.state.catch_up_messages), (1, 6))
        self.assertFalse(self.state.catching_up)
        self.assertEqual(self.gate.releases, 1)

    def test_slices(self) -> None:
        """Past CATCH_UP_SLICE bytes in a turn, the rest goes in the next turns."""
        self.patch(catch_up, "CATCH_UP_SLICE", 1)
        self.catch_up.start()
        self.assertEqual(self.messages_sent(), [("c", [b"one", b"two", b"three"])])
        self.assertTrue(self.state.catching_up)
        self.assertEqual(self.catch_up_pending(), 3)
        self.clock.advance(0)
        self.assertEqual(len(self.messages_sent()), 2)
        self.assertFalse(self.state.catching_up)

    def test_window(self) -> None:
        """Past CATCH_UP_WINDOW unacked bytes it waits; acks bringing the lag under it send the rest."""
        self.patch(catch_up, "CATCH_UP_WINDOW", 1)
        self.catch_up.start()
        self.assertEqual(self.messages_sent(), [])
        self.clock.advance(0)
        self.assertEqual(self.messages_sent(), [])
        self.state.lag_bytes = 0
        self.catch_up.acked()
        self.clock.advance(0)
        self.assertEqual(self.messages_sent(), [("c", [b"one", b"two", b"three"])])

    def catch_up_pending(self) -> int:
        return sum(len(messages) for _, _, messages in self.state.catch_up_queue) - self.state.catch_up_pos


class BehindTests(CatchUpTestCase):
    """What was recorded, and who published, while the catch-up ran."""

    def setUp(self) -> None:
        CatchUpTestCase.setUp(self)
        self.patch(catch_up, "CATCH_UP_SLICE", 1)
        self.catch_up.start()
        self.behind = RecordBuilder()
        self.behind.add(OP_MESSAGES, "mt", "", [])
        self.state.behind.append(self.behind)
        self.connection = FakeConnection()
        self.state.waiting_behind.append(self.connection)

    def test_sent_after(self) -> None:
        """Once the catch-up is sent, the records kept go, and the producers wait for their acks."""
        self.clock.advance(0)
        self.assertEqual(self.gate.sent[-1], [(OP_MESSAGES, "mt", "", [])])
        self.assertEqual(self.state.behind, [])
        self.assertEqual(self.state.waiting, [(self.state.seq, self.connection)])

    def test_again(self) -> None:
        """A peer coming during the catch-up gets another, after it."""
        self.catch_up.start()
        self.clock.advance(0)
        self.assertEqual(self.state.catch_ups, 2)

    def test_end(self) -> None:
        """Ended (no peer left), nothing more is sent."""
        sent = len(self.gate.sent)
        self.catch_up.end()
        self.clock.advance(0)
        self.assertEqual(len(self.gate.sent), sent)
        self.assertFalse(self.state.catching_up)
        self.assertEqual((list(self.state.catch_up_queue), self.state.behind), ([], []))
