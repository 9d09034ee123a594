# -*- test-case-name: tests.test_mirror_stats,tests.test_cluster_mirror -*-
"""
The mirror's part of /stats (a part of :class:`Mirror
<txnsq.mirror.mirror.Mirror>`): the roles of mirrored topics, and the
cluster section's ``mirror`` object.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Dict, Optional

from twisted.internet.interfaces import IReactorTime

from txnsq.mirror.recorder import MirrorRecorder
from txnsq.mirror.state import MirrorState

if TYPE_CHECKING:
    from txnsq.nsqd.broker import Broker
    from txnsq.nsqd.topic import Topic

__all__ = ["MirrorStats"]


class MirrorStats:
    """
    The mirror's figures for /stats, read from its state.

    :param state: the mirror's state.
    :param broker: nsqd's broker (its topics, mirrored or not).
    :param clock: ``IReactorTime`` (how long ago peers were heard, or went).
    :param recorder: the recorder of this node's mirrored topics (the
        publishes it refused).
    """

    def __init__(
        self, state: MirrorState, broker: Broker, clock: IReactorTime, recorder: MirrorRecorder
    ) -> None:
        self.state = state
        self.broker = broker
        self.clock = clock
        self.recorder = recorder

    def topic_role(self, topic: Topic) -> Optional[Dict[str, Any]]:
        """A mirrored topic's marking in /stats, or ``None`` when not mirrored."""
        if topic.mirror is None:
            return None
        name = topic.name
        held = 0
        from_live = False
        live_ids = {peer.node_id for peer in self.state.peers.values()}
        for node_id, copy in self.state.copies.items():
            found = copy.topics.get(name)
            if found is not None:
                held += found.count()
                from_live = from_live or node_id in live_ids
        taken = [done for done in self.state.taken_over if done["messages"]]
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
            "ack": "sync" if self.state.sync else "async",
            "lag_bytes": self.state.lag_bytes,
        }

    def stats(self) -> Dict[str, Any]:
        """The ``mirror`` part of the cluster section of /stats."""
        now = self.clock.seconds()
        return {
            "node_id": self.state.node_id,
            "epoch": self.state.epoch,
            "ack": "sync" if self.state.sync else "async",
            "failover_timeout": self.state.failover_timeout,
            "topics": sorted(
                name for name, topic in self.broker.topics.items() if topic.mirror is not None
            ),
            "seq": self.state.seq,
            "batches_sent": self.state.batches_sent,
            "bytes_sent": self.state.bytes_sent,
            "batches_applied": self.state.batches_applied,
            "lag_bytes": self.state.lag_bytes,
            "lag_batches": len(self.state.unacked),
            "producers_waiting": len(self.state.waiting),
            "producers_held": self.state.producers_held,
            "min_standbys": self.state.min_standbys,
            "publishes_refused": self.recorder.refused,
            "producers_failed": self.state.producers_failed,
            "decode_errors": self.state.decode_errors,
            "catch_up_messages": self.state.catch_up_messages,
            "catch_ups": self.state.catch_ups,
            "catch_up_pending": sum(len(messages) for _, _, messages in self.state.catch_up_queue)
            - self.state.catch_up_pos,
            "heartbeat": {
                "interval": self.state.heartbeat[0],
                "silence_limit": self.state.heartbeat[1],
                "silences": self.state.silences,
                "silent_peers": len(self.state.silenced),
            },
            "exchange": {
                "applied": self.state.exchanges_applied,
                "answered": self.state.exchanges_answered,
                "dropped_taken_over": self.state.dropped_taken,
                "dropped_finished_apart": self.state.dropped_finished_apart,
                "ids_to_send": {
                    node_id: sum(len(ids) for _, taken in groups for ids in taken.values())
                    for node_id, groups in self.state.taken_ids.items()
                },
                "holding": sorted(self.state.holding_topics),
            },
            "peers": [
                {
                    "node_id": peer.node_id,
                    "server_id": peer.server_id,
                    "epoch": peer.epoch,
                    "acked_seq": peer.acked,
                    "heard_ago": round(now - peer.heard, 3),
                }
                for peer in self.state.peers.values()
            ],
            "peers_down": {
                node_id: round(now - since, 3) for node_id, since in self.state.down_since.items()
            },
            "copies": [copy.stats() for copy in self.state.copies.values()],
            "kept_copies": [copy.stats() for copy in self.state.kept.values()],
            "taken_over": list(self.state.taken_over),
        }
