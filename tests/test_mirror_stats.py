"""
Tests for :mod:`txnsq.mirror.stats`: the mirror's figures in /stats,
read from a MirrorState built by hand; the part alone, on a broker and a
Clock.
"""

from __future__ import annotations

from twisted.internet.task import Clock
from twisted.trial.unittest import SynchronousTestCase

from tests.core_fakes import START, make_broker
from tests.mirror_fakes import add_peer, copy_holding
from txnsq.mirror.recorder import MirrorRecorder
from txnsq.mirror.state import MirrorState
from txnsq.mirror.stats import MirrorStats


class MirrorStatsTests(SynchronousTestCase):
    """Node ``me``, peer ``node-b`` routed, ``node-c`` down; topic ``mt`` mirrored."""

    def setUp(self) -> None:
        self.clock = Clock()
        self.clock.advance(START)
        self.broker = make_broker(self.clock)
        self.state = MirrorState("me", "epoch-me", failover_timeout=5.0, heartbeat=(1.0, 5.0))
        self.recorder = MirrorRecorder(lambda: None, lambda: None)
        self.stats = MirrorStats(self.state, self.broker, self.clock, self.recorder)
        add_peer(self.state, "sb", "node-b", "epoch-b", START)
        self.state.down_since["node-c"] = START
        self.topic = self.broker.get_topic("mt")
        self.topic.mirror = self.recorder
        self.broker.get_topic("plain")

    def test_stats(self) -> None:
        """The settings, the mirrored topics, the peers with their acks and silence, the peers down."""
        self.state.seq = 7
        self.state.unacked.extend([(6, 100), (7, 50)])
        self.state.lag_bytes = 150
        self.recorder.refused = 2
        self.clock.advance(1.5)
        found = self.stats.stats()
        self.assertEqual(
            {key: found[key] for key in ("node_id", "epoch", "ack", "failover_timeout", "topics")},
            {"node_id": "me", "epoch": "epoch-me", "ack": "sync", "failover_timeout": 5.0, "topics": ["mt"]},
        )
        self.assertEqual(
            (found["seq"], found["lag_bytes"], found["lag_batches"], found["publishes_refused"]), (7, 150, 2, 2)
        )
        self.assertEqual(
            found["peers"],
            [{"node_id": "node-b", "server_id": "sb", "epoch": "epoch-b", "acked_seq": 0, "heard_ago": 1.5}],
        )
        self.assertEqual(found["peers_down"], {"node-c": 1.5})
        self.assertEqual(found["heartbeat"], {"interval": 1.0, "silence_limit": 5.0, "silences": 0, "silent_peers": 0})

    def test_catch_up_pending(self) -> None:
        """The messages the catch-up under way has still to send."""
        self.state.catch_up_queue.append(("mt", "c", [b"a", b"b", b"c"]))
        self.state.catch_up_queue.append(("mt", "d", [b"a"]))
        self.state.catch_up_pos = 2
        self.assertEqual(self.stats.stats()["catch_up_pending"], 2)

    def test_copies_and_exchange(self) -> None:
        """Copies and kept copies by their own figures; ids still to send in an exchange, per peer."""
        self.state.copies["node-b"] = copy_holding("node-b", "mt", 2)
        self.state.kept["node-c"] = copy_holding("node-c", "mt", 1)
        self.state.taken_ids["node-c"] = [("e", {("mt", "c"): [b"1" * 16, b"2" * 16]})]
        self.state.holding_topics.add("mt")
        found = self.stats.stats()
        self.assertEqual([copy["node_id"] for copy in found["copies"]], ["node-b"])
        self.assertEqual(found["copies"][0]["topics"], {"mt": {"held": 0, "channels": {"c": 2}}})
        self.assertEqual([copy["node_id"] for copy in found["kept_copies"]], ["node-c"])
        self.assertEqual(found["exchange"]["ids_to_send"], {"node-c": 2})
        self.assertEqual(found["exchange"]["holding"], ["mt"])

    def test_role_not_mirrored(self) -> None:
        """A topic not mirrored has no role."""
        self.assertIsNone(self.stats.topic_role(self.broker.topics["plain"]))

    def test_role_standby(self) -> None:
        """A topic with nothing published here and a copy of a routed peer is a standby."""
        self.state.copies["node-b"] = copy_holding("node-b", "mt", 3)
        role = self.stats.topic_role(self.topic)
        assert role is not None
        self.assertEqual(
            role,
            {"role": "standby", "standby_messages": 3, "peers": ["node-b"], "ack": "sync", "lag_bytes": 0},
        )

    def test_role_primary(self) -> None:
        """A topic published to here is a primary."""
        self.topic.publish(b"x")
        role = self.stats.topic_role(self.topic)
        assert role is not None
        self.assertEqual(role["role"], "primary")

    def test_role_took_over(self) -> None:
        """Once this node took messages over, its published-to topics are active."""
        self.topic.publish(b"x")
        self.state.taken_over.append({"node_id": "node-c", "messages": 4})
        role = self.stats.topic_role(self.topic)
        assert role is not None
        self.assertEqual(role["role"], "active (took over)")
