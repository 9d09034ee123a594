"""
Tests for :mod:`txnsq.mirror.gate`: the records of a turn sent as one
numbered payload, and producers held until every peer acked it; the
part alone, on a Clock, with fake routes and connections.
"""

from __future__ import annotations

from typing import List

from twisted.internet.task import Clock
from twisted.trial.unittest import SynchronousTestCase

from tests.mirror_fakes import FakeConnection, add_peer, message
from txnsq.mirror.gate import AckGate, too_few_standbys, unconfirmed
from txnsq.mirror.recorder import FLUSH_SIZE
from txnsq.mirror.state import MirrorState
from txnsq.protocol.mirror import OP_FIN, OP_MESSAGES, SUBJECT_DATA, RecordBuilder, decode_records


class GateTestCase(SynchronousTestCase):
    """A gate of node ``me`` (``sync`` unless a test says), peers ``b`` and ``c`` routed."""

    sync = True

    def setUp(self) -> None:
        self.clock = Clock()
        self.state = MirrorState("me", "e", sync=self.sync, max_lag_bytes=1000)
        self.acks: List[int] = []
        self.gate = AckGate(self.state, self.clock, lambda: self.acks.append(1))
        self.recorder = self.gate.recorder
        self.recorder.live = True
        self.b = add_peer(self.state, "sb", "node-b")
        self.c = add_peer(self.state, "sc", "node-c")

    def publish(self, n: int) -> None:
        """Message ``n`` is recorded as published to ``mt``."""
        self.recorder.published("mt", message(n))

    def ack(self, server_id: str, seq: int) -> None:
        """Peer ``server_id`` acks payload ``seq``."""
        self.state.peers[server_id].acked = seq
        self.gate.release()


class SendTests(GateTestCase):
    """The records of a turn, sent."""

    def test_one_payload_a_turn(self) -> None:
        """What a turn records goes to every peer at its end, as one payload numbered by the gate."""
        self.publish(1)
        self.recorder.finished("mt", "c", b"%016d" % (0,))
        self.assertEqual(self.b.sent, [])
        self.clock.advance(0)
        [payload] = self.b.payloads(SUBJECT_DATA)
        self.assertEqual(self.c.payloads(SUBJECT_DATA), [payload])
        seq, records = decode_records(payload)
        self.assertEqual(seq, 1)
        self.assertEqual([op for op, _, _, _ in records], [OP_MESSAGES, OP_FIN])
        self.assertEqual((self.state.seq, self.state.batches_sent), (1, 1))
        self.assertEqual(self.state.unacked, [(1, len(payload))])
        self.assertEqual(self.state.lag_bytes, len(payload))

    def test_nothing_recorded(self) -> None:
        """A turn that recorded nothing sends nothing."""
        self.gate.flush()
        self.clock.advance(0)
        self.assertEqual((self.b.sent, self.state.seq), ([], 0))

    def test_full(self) -> None:
        """A record added past FLUSH_SIZE recorded bytes sends them at once, not at the turn's end."""
        self.recorder.published_many("mt", [b"x" * 1024] * (FLUSH_SIZE // 1024 + 1))
        self.assertEqual(self.b.sent, [])
        self.publish(1)
        self.assertEqual(len(self.b.payloads(SUBJECT_DATA)), 1)

    def test_acks_free(self) -> None:
        """A payload acked by every peer is no longer counted as lag."""
        self.publish(1)
        self.clock.advance(0)
        self.ack("sb", 1)
        self.assertEqual(len(self.state.unacked), 1)
        self.ack("sc", 1)
        self.assertEqual((self.state.unacked, self.state.lag_bytes), ([], 0))

    def test_stop(self) -> None:
        """Stopped, the turn's records are not sent."""
        self.publish(1)
        self.gate.stop()
        self.clock.advance(0)
        self.assertEqual(self.b.sent, [])


class SyncGateTests(GateTestCase):
    """``sync``: a producer waits for every peer's ack."""

    def test_waits_for_every_peer(self) -> None:
        """The producer's records are sent at once; it is released when the last peer acks them."""
        self.publish(1)
        connection = FakeConnection()
        self.assertTrue(self.gate.gate(connection))
        self.assertEqual(len(self.b.payloads(SUBJECT_DATA)), 1)
        self.ack("sb", 1)
        self.assertEqual(connection.released, 0)
        self.ack("sc", 1)
        self.assertEqual(connection.released, 1)
        self.assertEqual((self.state.waiting, self.state.producers_held), ([], 1))

    def test_no_peer(self) -> None:
        """With no peer routed nothing waits."""
        self.state.peers.clear()
        self.publish(1)
        self.assertFalse(self.gate.gate(FakeConnection()))

    def test_already_acked(self) -> None:
        """Nothing new to send, and all acked: the producer does not wait."""
        self.publish(1)
        self.clock.advance(0)
        self.ack("sb", 1)
        self.ack("sc", 1)
        self.assertFalse(self.gate.gate(FakeConnection()))

    def test_release_all(self) -> None:
        """Every producer waiting is released (no peer left to ack)."""
        connections = [FakeConnection(), FakeConnection()]
        for n, connection in enumerate(connections):
            self.publish(n)
            self.gate.gate(connection)
        self.gate.release_all()
        self.assertEqual([c.released for c in connections], [1, 1])

    def test_catching_up(self) -> None:
        """During a catch-up the records go behind it, and the producer waits for it."""
        self.state.catching_up = True
        self.publish(1)
        connection = FakeConnection()
        self.assertTrue(self.gate.gate(connection))
        self.assertEqual(self.b.sent, [])
        self.assertEqual(len(self.state.behind), 1)
        self.assertEqual(self.state.waiting_behind, [connection])

    def test_acks_during_catch_up(self) -> None:
        """Acks freeing payloads during a catch-up are told to it."""
        self.gate.send(RecordBuilder())
        self.state.catching_up = True
        self.ack("sb", 1)
        self.ack("sc", 1)
        self.assertEqual(self.acks, [1])


class AsyncGateTests(GateTestCase):
    """``async``: producers wait only past the lag bound; turns gather while a payload is unacked."""

    sync = False

    def test_no_wait_under_bound(self) -> None:
        """Under max_lag_bytes unacked the producer does not wait."""
        self.publish(1)
        self.clock.advance(0)
        self.assertFalse(self.gate.gate(FakeConnection()))

    def test_wait_past_bound(self) -> None:
        """Past max_lag_bytes unacked it waits for the acks."""
        self.recorder.published_many("mt", [b"x" * 1100])
        self.clock.advance(0)
        self.publish(2)
        connection = FakeConnection()
        self.assertTrue(self.gate.gate(connection))
        self.ack("sb", 2)
        self.ack("sc", 2)
        self.assertEqual(connection.released, 1)

    def test_gathered_while_unacked(self) -> None:
        """While a payload is unacked the next turns' records are kept, and sent as one when it is acked."""
        self.publish(1)
        self.clock.advance(0)
        self.publish(2)
        self.clock.advance(0)
        self.publish(3)
        self.clock.advance(0)
        self.assertEqual(len(self.b.payloads(SUBJECT_DATA)), 1)
        self.ack("sb", 1)
        self.ack("sc", 1)
        payloads = self.b.payloads(SUBJECT_DATA)
        self.assertEqual(len(payloads), 2)
        [(_, _, _, items)] = decode_records(payloads[1])[1]
        self.assertEqual(items, [message(2), message(3)])


class MinStandbysTests(GateTestCase):
    """``--mirror-min-standbys=2``."""

    def setUp(self) -> None:
        GateTestCase.setUp(self)
        self.state.min_standbys = 2

    def test_refusing_below(self) -> None:
        """Fewer live peers than needed: the recorder refuses publishes, and producers waiting fail."""
        self.publish(1)
        connection = FakeConnection()
        self.gate.gate(connection)
        del self.state.peers["sc"]
        self.gate.standbys_changed()
        cause = too_few_standbys(1, 2)
        self.assertEqual(self.recorder.refusing, cause)
        self.assertEqual(connection.failed, [unconfirmed(cause)])
        self.assertEqual(self.state.producers_failed, 1)

    def test_enough_again(self) -> None:
        """Enough peers again: publishes are taken."""
        del self.state.peers["sc"]
        self.gate.standbys_changed()
        add_peer(self.state, "sc", "node-c")
        self.gate.standbys_changed()
        self.assertIsNone(self.recorder.refusing)

    def test_fails_at_once(self) -> None:
        """A producer coming to the gate with too few peers live fails before the gate answers."""
        del self.state.peers["sc"]
        connection = FakeConnection()
        self.assertTrue(self.gate.gate(connection))
        self.assertEqual(connection.failed, [unconfirmed(too_few_standbys(1, 2))])
