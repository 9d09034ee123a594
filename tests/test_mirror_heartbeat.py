"""
Tests for :mod:`txnsq.mirror.heartbeat`: the pings, and the peers found
silent; the part alone, on a Clock, with fake routes.
"""

from __future__ import annotations

from typing import List

from twisted.internet.task import Clock
from twisted.trial.unittest import SynchronousTestCase

from tests.mirror_fakes import add_peer
from txnsq.mirror.heartbeat import Heartbeat, heartbeat_of
from txnsq.mirror.state import MirrorState
from txnsq.protocol.mirror import SUBJECT_PING


class HeartbeatTests(SynchronousTestCase):
    """A heartbeat of one ping a second, three seconds of silence allowed, and two peers."""

    def setUp(self) -> None:
        self.clock = Clock()
        self.state = MirrorState("me", "e", heartbeat=(1.0, 3.0))
        self.down: List[str] = []
        self.heartbeat = Heartbeat(self.state, self.clock, self.route_down)
        self.b = add_peer(self.state, "sb", "node-b")
        self.c = add_peer(self.state, "sc", "node-c")
        self.heartbeat.start()

    def route_down(self, server_id: str) -> None:
        """What the mirror does: the peer is no longer routed."""
        self.down.append(server_id)
        del self.state.peers[server_id]

    def test_pings(self) -> None:
        """Every interval, each peer is sent an empty ping; none at start."""
        self.assertEqual(self.b.sent, [])
        self.clock.advance(1.0)
        self.clock.advance(1.0)
        self.assertEqual(self.b.subjects(), [SUBJECT_PING, SUBJECT_PING])
        self.assertEqual(self.c.payloads(SUBJECT_PING), [b"", b""])

    def test_silent_peer_down(self) -> None:
        """A peer not heard for longer than the limit is taken down and its route kept as silent; the others are not."""
        self.clock.advance(2.0)
        self.state.peers["sc"].heard = self.clock.seconds()
        self.clock.advance(2.0)
        self.assertEqual(self.down, ["sb"])
        self.assertEqual(self.state.silences, 1)
        self.assertIs(self.state.silenced["sb"], self.b)
        self.assertEqual(list(self.state.peers), ["sc"])

    def test_silenced_still_pinged(self) -> None:
        """A silenced route is pinged still, so that the peer hears us when it wakes."""
        self.clock.advance(4.0)
        pings = len(self.b.sent)
        self.clock.advance(1.0)
        self.assertEqual(len(self.b.sent), pings + 1)
        self.assertEqual(self.down, ["sb", "sc"])

    def test_stop(self) -> None:
        """Once stopped, nothing more is sent."""
        self.heartbeat.stop()
        self.clock.advance(10.0)
        self.assertEqual((self.b.sent, self.c.sent), ([], []))

    def test_no_heartbeat(self) -> None:
        """With (0, 0), nothing is scheduled."""
        clock = Clock()
        Heartbeat(MirrorState("me", "e", heartbeat=(0.0, 0.0)), clock, self.route_down).start()
        self.assertEqual(clock.getDelayedCalls(), [])

    def test_defaults(self) -> None:
        """The default: a quarter of the failover timeout (0.25 to 5 s) between pings; the timeout, at least 2 s, of silence."""
        self.assertEqual(heartbeat_of(10.0), (2.5, 10.0))
        self.assertEqual(heartbeat_of(0.5), (0.25, 2.0))
        self.assertEqual(heartbeat_of(60.0), (5.0, 60.0))
