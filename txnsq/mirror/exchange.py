# -*- test-case-name: tests.test_cluster_mirror -*-
"""
The mirror's fail-back exchange (:mod:`txnsq.mirror.mirror`): the ids a
node took over from a peer, sent to that peer when both are routed, which
drops them and answers with those it finished while apart; and the
delivery held at start until a peer's exchange is applied.
"""

from __future__ import annotations

from typing import Any, Dict, List, Set, Tuple

from twisted.logger import Logger

from txnsq.mirror.peer import ACCOUNT, MirrorPeer
from txnsq.cluster.route import RouteProtocol
from txnsq.mirror.recorder import MirrorRecorder
from txnsq.mirror.snapshot import drop_from_channel, drop_from_topic
from txnsq.mirror.state import MirrorState, Taken
from txnsq.protocol.mirror import (
    OP_ANSWER_END,
    OP_FINISHED_APART,
    OP_GROUP,
    OP_LIST_END,
    OP_TAKEN,
    SUBJECT_EXCHANGE,
    RecordBuilder,
)
from txnsq.protocol.nats_route import encode_rmsg_head

__all__ = ["EXCHANGE_CHUNK", "FailBack", "Taken"]

#: Ids per exchange payload (16 bytes each, plus 4 of length: ~200 KiB).
EXCHANGE_CHUNK = 10000


class FailBack:
    """
    :class:`Mirror <txnsq.mirror.mirror.Mirror>`'s fail-back exchange, and the
    delivery it holds at start.
    """

    state: MirrorState

    _log: Logger
    broker: Any
    recorder: MirrorRecorder
    _apart: Dict[str, Taken]
    _holding: List[Any]
    _hold_timer: Any

    # -- fail-back exchange -----------------------------------------------------

    def _hold(self, channel: Any) -> None:
        if not channel.ephemeral:
            channel.hold()
            self._holding.append(channel)

    def _release_hold(self, why: str) -> None:
        """Deliver what was held at start (a peer's exchange applied, or none came)."""
        timer, self._hold_timer = self._hold_timer, None
        if timer is not None and timer.active():
            timer.cancel()
        if not self.state.holding_topics:
            return
        holding, self._holding = self._holding, []
        self.state.holding_topics = set()
        for channel in holding:
            channel.release()
        if why != "stopping":
            self._log.info("mirror: delivering held topics ({why})", why=why)

    def _send_exchange(
        self, route: RouteProtocol, records: List[Tuple[bytes, str, str, List[bytes]]]
    ) -> None:
        """Send ``records`` on the exchange subject, in payloads of at most EXCHANGE_CHUNK ids."""
        builder = RecordBuilder()
        group: List[bytes] = []
        for op, topic, channel, items in records:
            if op == OP_GROUP:
                group = items
            start = 0
            while True:
                room = EXCHANGE_CHUNK - builder.count
                if room <= 0:
                    self._send_exchange_payload(route, builder)
                    if group and op != OP_GROUP:
                        # Each payload says whose ids its T records are.
                        builder.add(OP_GROUP, "", "", group)
                    continue
                chunk = items[start : start + room]
                builder.add(op, topic, channel, chunk)
                start += len(chunk)
                if start >= len(items):
                    break
        self._send_exchange_payload(route, builder)

    @staticmethod
    def _send_exchange_payload(route: RouteProtocol, builder: RecordBuilder) -> None:
        payload = builder.encode(0)
        route.send_message(encode_rmsg_head(ACCOUNT, SUBJECT_EXCHANGE, len(payload)), payload)

    def _exchange_list(self, peer: MirrorPeer) -> None:
        """Send ``peer`` the ids taken over from it (none, often), then the end of the list."""
        records: List[Tuple[bytes, str, str, List[bytes]]] = []
        for epoch, taken in self.state.taken_ids.get(peer.node_id, []):
            records.append((OP_GROUP, "", "", [epoch.encode("ascii", "replace")]))
            for (topic, channel), ids in taken.items():
                records.append((OP_TAKEN, topic, channel, ids))
        records.append((OP_LIST_END, "", "", []))
        self._send_exchange(peer.route, records)

    def _exchange_received(self, peer: MirrorPeer, records: List[Any]) -> None:
        """Apply one exchange payload of ``peer``."""
        mine = False
        apart = self._apart.setdefault(peer.server_id, {})
        for op, topic, channel, items in records:
            if op == OP_GROUP:
                # Finished apart can be told only by the process they
                # were taken from: a restarted one lost track of them.
                mine = bool(items) and items[0].decode("ascii", "replace") == self.state.epoch
            elif op == OP_TAKEN:
                gone = self._drop(topic, channel, items)
                self.state.dropped_taken += len(gone)
                if mine:
                    finished = [msg_id for msg_id in items if msg_id not in gone]
                    if finished:
                        apart.setdefault((topic, channel), []).extend(finished)
            elif op == OP_LIST_END:
                self.state.exchanges_applied += 1
                answer: List[Tuple[bytes, str, str, List[bytes]]] = [
                    (OP_FINISHED_APART, topic_name, channel_name, ids)
                    for (topic_name, channel_name), ids in self._apart.pop(peer.server_id, {}).items()
                ]
                answer.append((OP_ANSWER_END, "", "", []))
                self._send_exchange(peer.route, answer)
                self._release_hold("exchange with %s" % (peer.node_id,))
            elif op == OP_FINISHED_APART:
                gone = self._drop(topic, channel, items)
                self.state.dropped_finished_apart += len(gone)
            elif op == OP_ANSWER_END:
                # Our list was applied there: no need to send it again.
                self.state.taken_ids.pop(peer.node_id, None)
                self.state.exchanges_answered += 1

    def _drop(self, topic_name: str, channel_name: str, ids: List[bytes]) -> List[bytes]:
        """
        Drop the messages ``ids`` from this node's ``topic_name:channel_name``
        (``""``: the topic and all its channels); tell the standbys.  The
        ids found.
        """
        topic = self.broker.topics.get(topic_name)
        if topic is None or not ids:
            return []
        wanted = set(ids)
        found: Set[bytes] = set()
        if channel_name:
            targets = [topic.channels.get(channel_name)]
        else:
            removed = drop_from_topic(topic, wanted)
            if removed:
                found |= removed
                self.recorder.dropped(topic_name, "", list(removed))
            targets = list(topic.channels.values())
        for channel in targets:
            if channel is None or channel.ephemeral:
                continue
            removed = drop_from_channel(channel, wanted)
            if removed:
                found |= removed
                self.recorder.dropped(topic_name, channel.name, list(removed))
        return [msg_id for msg_id in ids if msg_id in found]
