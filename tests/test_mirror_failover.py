"""
Tests for :mod:`txnsq.mirror.failover`: which node takes a lost peer's
copy over, the takeover into the broker's channels, copies kept aside
and dropped; the part alone, on a broker and a Clock.
"""

from __future__ import annotations

from typing import List

from twisted.internet.task import Clock
from twisted.trial.unittest import SynchronousTestCase

from tests.core_fakes import START, FakeConsumer, make_broker
from tests.mirror_fakes import add_peer, copy_holding
from txnsq.mirror.failover import Failover
from txnsq.mirror.state import MirrorState


class FakeJournal:
    """A journal that only notes the copies discarded."""

    def __init__(self) -> None:
        self.discarded: List[str] = []

    def discard(self, node_id: str) -> None:
        self.discarded.append(node_id)


class FailoverTestCase(SynchronousTestCase):
    """Node ``node-b`` keeping a copy of ``node-a`` (two messages of ``mt:c``); a 5 s timeout."""

    node_id = "node-b"

    def setUp(self) -> None:
        self.clock = Clock()
        self.clock.advance(START)
        self.broker = make_broker(self.clock)
        self.state = MirrorState(self.node_id, "e", failover_timeout=5.0)
        self.journal = FakeJournal()
        self.failover = Failover(self.state, self.clock, self.broker, self.journal)  # type: ignore[arg-type]
        self.state.copies["node-a"] = copy_holding("node-a", "mt", 2, epoch="epoch-a")

    def delivered(self) -> List[bytes]:
        """The ids of the messages this node's ``mt:c`` delivers now."""
        consumer = FakeConsumer(ready_count=10)
        channel = self.broker.get_topic("mt").get_channel("c")
        channel.add_consumer(consumer)
        channel.consumer_ready(consumer)
        return [message.id for message in consumer.take()]

    def lose(self, node_id: str) -> None:
        """``node_id``'s route goes; the timeout passes."""
        self.state.down_since[node_id] = self.clock.seconds()
        self.failover.schedule(node_id)
        self.clock.advance(5.0)


class TakerTests(FailoverTestCase):
    """The one node that takes a copy over."""

    def test_smallest_id(self) -> None:
        """The smallest id among this node, its routed peers and those down for less than the timeout; never the lost node."""
        add_peer(self.state, "sa", "node-a")
        add_peer(self.state, "sc", "node-c")
        self.assertEqual(self.failover.taker_of("node-a"), "node-b")
        self.state.down_since["node-0"] = self.clock.seconds()
        self.assertEqual(self.failover.taker_of("node-a"), "node-0")
        self.state.lost.add("node-0")
        self.assertEqual(self.failover.taker_of("node-a"), "node-b")


class TakeOverTests(FailoverTestCase):
    """This node is the taker."""

    def test_take_over_after_timeout(self) -> None:
        """After the timeout the peer is lost and its copy is delivered here, noted for /stats and the exchange."""
        self.state.down_since["node-a"] = self.clock.seconds()
        self.failover.schedule("node-a")
        self.clock.advance(4.9)
        self.assertIn("node-a", self.state.copies)
        self.clock.advance(0.1)
        self.assertEqual(self.state.lost, {"node-a"})
        self.assertEqual(self.state.copies, {})
        self.assertEqual(self.delivered(), [b"%016d" % (n,) for n in range(2)])
        [done] = self.state.taken_over
        self.assertEqual(
            (done["node_id"], done["epoch"], done["reason"], done["messages"]),
            ("node-a", "epoch-a", "unreachable", 2),
        )
        self.assertEqual(
            self.state.taken_ids, {"node-a": [("epoch-a", {("mt", "c"): [b"%016d" % (n,) for n in range(2)]})]}
        )
        self.assertEqual(self.journal.discarded, ["node-a"])

    def test_cancel(self) -> None:
        """A peer back before the timeout keeps its copy here, not delivered."""
        self.failover.schedule("node-a")
        self.clock.advance(2.0)
        self.failover.cancel("node-a")
        self.clock.advance(10.0)
        self.assertIn("node-a", self.state.copies)
        self.assertEqual(self.state.taken_over, [])

    def test_restarted(self) -> None:
        """A peer back as a new process is taken over at once."""
        self.failover.fail_over("node-a", "restarted")
        self.assertEqual(self.delivered(), [b"%016d" % (n,) for n in range(2)])
        self.assertEqual(self.state.taken_over[0]["reason"], "restarted")

    def test_stop(self) -> None:
        """Stopped, no failover happens."""
        self.failover.schedule("node-a")
        self.failover.stop()
        self.clock.advance(10.0)
        self.assertIn("node-a", self.state.copies)


class KeptTests(FailoverTestCase):
    """This node is not the taker: ``node-0``, routed, is."""

    node_id = "node-c"

    def setUp(self) -> None:
        FailoverTestCase.setUp(self)
        self.taker = add_peer(self.state, "s0", "node-0")

    def test_kept_not_delivered(self) -> None:
        """The copy of a lost peer is kept aside, not delivered."""
        self.lose("node-a")
        self.assertEqual(list(self.state.kept), ["node-a"])
        self.assertEqual(self.state.copies, {})
        self.assertEqual(self.delivered(), [])

    def test_taker_lost_too(self) -> None:
        """When the taker is lost too, this node takes the kept copy over."""
        self.lose("node-a")
        del self.state.peers["s0"]
        self.lose("node-0")
        self.assertEqual(self.state.kept, {})
        self.assertEqual(len(self.delivered()), 2)
        self.assertEqual(self.state.taken_over[0]["reason"], "taker lost")

    def test_dropped_once_back_restarted(self) -> None:
        """The lost peer back as a new process while its taker is routed: the kept copy goes, a timeout later."""
        self.lose("node-a")
        add_peer(self.state, "sa", "node-a", epoch="epoch-a2")
        self.failover.reassess("restarted")
        self.clock.advance(4.9)
        self.assertIn("node-a", self.state.kept)
        self.clock.advance(0.1)
        self.assertEqual(self.state.kept, {})
        self.assertEqual(self.journal.discarded, ["node-a"])
        self.assertEqual(self.delivered(), [])
