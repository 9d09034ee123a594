"""
Tests for :mod:`txnsq.mirror.state`: the state the mirror's parts share.
"""

from __future__ import annotations

from twisted.trial.unittest import SynchronousTestCase

from txnsq.mirror.state import MAX_LAG_BYTES, MirrorState


class MirrorStateTests(SynchronousTestCase):
    """A new MirrorState."""

    def test_defaults(self) -> None:
        """A node id and an epoch are all it needs: sync, nothing sent, no peer, no copy."""
        state = MirrorState("node-a", "epoch")
        self.assertEqual((state.node_id, state.epoch, state.sync), ("node-a", "epoch", True))
        self.assertEqual((state.max_lag_bytes, state.min_standbys), (MAX_LAG_BYTES, 0))
        self.assertEqual((state.seq, state.lag_bytes, state.unacked, state.waiting), (0, 0, [], []))
        self.assertEqual((state.peers, state.copies, state.kept, state.taken_over), ({}, {}, {}, []))
        self.assertFalse(state.catching_up)
        self.assertEqual(list(state.catch_up_queue), [])

    def test_collections_not_shared(self) -> None:
        """Two states never share a list, dict or set."""
        first, second = MirrorState("a", "e"), MirrorState("b", "e")
        first.unacked.append((1, 10))
        first.copies["x"] = None  # type: ignore[assignment]
        first.named.add("t")
        first.catch_up_queue.append(("t", "c", []))
        self.assertEqual((second.unacked, second.copies, second.named), ([], {}, set()))
        self.assertEqual(list(second.catch_up_queue), [])
