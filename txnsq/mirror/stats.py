# -*- test-case-name: tests.test_cluster_mirror -*-
"""
The mirror's part of /stats (:mod:`txnsq.mirror.mirror`): the roles of
mirrored topics, and the cluster section's ``mirror`` object.
"""

from __future__ import annotations

from typing import Any, Deque, Dict, List, Optional, Set, Tuple

from txnsq.mirror.exchange import Taken
from txnsq.mirror.peer import MirrorPeer
from txnsq.mirror.standby import StandbyCopy

__all__ = ["MirrorStats"]


class MirrorStats:
    """:class:`Mirror <txnsq.mirror.mirror.Mirror>`'s figures for /stats."""

    broker: Any
    clock: Any
    node_id: str
    epoch: str
    sync: bool
    failover_timeout: float
    heartbeat: Tuple[float, float]
    peers: Dict[str, MirrorPeer]
    copies: Dict[str, StandbyCopy]
    kept: Dict[str, StandbyCopy]
    taken_over: List[Dict[str, Any]]
    taken_ids: Dict[str, List[Tuple[str, Taken]]]
    seq: int
    batches_sent: int
    bytes_sent: int
    batches_applied: int
    lag_bytes: int
    producers_held: int
    producers_failed: int
    min_standbys: int
    recorder: Any
    decode_errors: int
    catch_up_messages: int
    catch_ups: int
    silences: int
    exchanges_applied: int
    exchanges_answered: int
    dropped_taken: int
    dropped_finished_apart: int
    _unacked: List[Tuple[int, int]]
    _waiting: List[Tuple[int, Any]]
    _catch_up_queue: Deque[Tuple[str, str, List[bytes]]]
    _catch_up_pos: int
    _silenced: Dict[str, Any]
    _holding_topics: Set[str]
    _down_since: Dict[str, float]

    # -- stats --------------------------------------------------------------------

    def topic_role(self, topic: Any) -> Optional[Dict[str, Any]]:
        """A mirrored topic's marking in /stats, or ``None`` when not mirrored."""
        if topic.mirror is None:
            return None
        name = topic.name
        held = 0
        from_live = False
        live_ids = {peer.node_id for peer in self.peers.values()}
        for node_id, copy in self.copies.items():
            found = copy.topics.get(name)
            if found is not None:
                held += found.count()
                from_live = from_live or node_id in live_ids
        taken = [done for done in self.taken_over if done["messages"]]
        if topic.message_count == 0 and from_live:
            role = "standby"
        elif taken:
            role = "active (took over)"
        else:
            role = "primary"
        return {
            "role": role,
            "standby_messages": held,
            "peers": sorted(live_ids),
            "ack": "sync" if self.sync else "async",
            "lag_bytes": self.lag_bytes,
        }

    def stats(self) -> Dict[str, Any]:
        """The ``mirror`` part of the cluster section of /stats."""
        now = self.clock.seconds()
        return {
            "node_id": self.node_id,
            "epoch": self.epoch,
            "ack": "sync" if self.sync else "async",
            "failover_timeout": self.failover_timeout,
            "topics": sorted(
                name for name, topic in self.broker.topics.items() if topic.mirror is not None
            ),
            "seq": self.seq,
            "batches_sent": self.batches_sent,
            "bytes_sent": self.bytes_sent,
            "batches_applied": self.batches_applied,
            "lag_bytes": self.lag_bytes,
            "lag_batches": len(self._unacked),
            "producers_waiting": len(self._waiting),
            "producers_held": self.producers_held,
            "min_standbys": self.min_standbys,
            "publishes_refused": self.recorder.refused,
            "producers_failed": self.producers_failed,
            "decode_errors": self.decode_errors,
            "catch_up_messages": self.catch_up_messages,
            "catch_ups": self.catch_ups,
            "catch_up_pending": sum(len(messages) for _, _, messages in self._catch_up_queue)
            - self._catch_up_pos,
            "heartbeat": {
                "interval": self.heartbeat[0],
                "silence_limit": self.heartbeat[1],
                "silences": self.silences,
                "silent_peers": len(self._silenced),
            },
            "exchange": {
                "applied": self.exchanges_applied,
                "answered": self.exchanges_answered,
                "dropped_taken_over": self.dropped_taken,
                "dropped_finished_apart": self.dropped_finished_apart,
                "ids_to_send": {
                    node_id: sum(len(ids) for _, taken in groups for ids in taken.values())
                    for node_id, groups in self.taken_ids.items()
                },
                "holding": sorted(self._holding_topics),
            },
            "peers": [
                {
                    "node_id": peer.node_id,
                    "server_id": peer.server_id,
                    "epoch": peer.epoch,
                    "acked_seq": peer.acked,
                    "heard_ago": round(now - peer.heard, 3),
                }
                for peer in self.peers.values()
            ],
            "peers_down": {
                node_id: round(now - since, 3) for node_id, since in self._down_since.items()
            },
            "copies": [copy.stats() for copy in self.copies.values()],
            "kept_copies": [copy.stats() for copy in self.kept.values()],
            "taken_over": list(self.taken_over),
        }
