# -*- test-case-name: tests.test_mirror_exchange,tests.test_cluster_mirror -*-
"""
The mirror's fail-back exchange (a part of :class:`Mirror
<txnsq.mirror.mirror.Mirror>`): the ids a
node took over from a peer, sent to that peer when both are routed, which
drops them and answers with those it finished while apart; and the
delivery held at start until a peer's exchange is applied.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Dict, List, Optional, Set, Tuple

from twisted.internet.interfaces import IDelayedCall, IReactorTime
from twisted.logger import Logger

from txnsq.cluster.route import RouteProtocol
from txnsq.mirror.peer import ACCOUNT, MirrorPeer
from txnsq.mirror.recorder import MirrorRecorder
from txnsq.mirror.snapshot import drop_from_channel, drop_from_topic, holds_messages
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

if TYPE_CHECKING:
    from txnsq.nsqd.broker import Broker
    from txnsq.nsqd.channel import Channel
    from txnsq.nsqd.topic import Topic

__all__ = ["EXCHANGE_CHUNK", "FailBack", "Taken"]

#: Ids per exchange payload (16 bytes each, plus 4 of length: ~200 KiB).
EXCHANGE_CHUNK = 10000


class FailBack:
    """
    The fail-back exchange, and the delivery it holds at start.

    When two nodes route to each other, each sends the other
    (:meth:`send_list`) the ids it took over from it
    (``state.taken_ids``); the receiver (:meth:`received`) drops them
    from its own topic and channels, tells its standbys (as FINs,
    through the recorder), and answers -- when it is the very process
    they were taken from -- with those it finished while apart, which
    the taker drops in turn.  A node started with messages in mirrored
    topics holds their delivery (:meth:`hold_at_start`) until it has
    applied a peer's exchange, or for the failover timeout.

    :param state: the mirror's state.
    :param clock: ``IReactorTime``.
    :param broker: nsqd's broker, whose topics and channels drop what
        was taken over.
    :param recorder: the recorder of this node's mirrored topics.

    :ivar hold_timer: the call that ends the hold at start when no
        exchange came, while one is pending.
    """

    _log = Logger()

    def __init__(
        self, state: MirrorState, clock: IReactorTime, broker: Broker, recorder: MirrorRecorder
    ) -> None:
        self.state = state
        self.clock = clock
        self.broker = broker
        self.recorder = recorder
        self.hold_timer: Optional[IDelayedCall] = None
        # Per route server id: the finished-apart ids gathered while its
        # exchange list comes in.
        self._apart: Dict[str, Taken] = {}
        # Channels whose delivery waits for the first exchange.
        self._holding: List[Channel] = []

    # -- the hold at start ------------------------------------------------------

    def hold_at_start(self) -> None:
        """
        Hold the delivery of the mirrored topics holding messages, kept
        from before a restart (a peer may have taken them over meanwhile),
        until a peer's exchange is applied or the failover timeout passes.
        """
        state = self.state
        for topic in list(self.broker.topics.values()):
            if topic.mirror is not None and holds_messages(topic):
                state.holding_topics.add(topic.name)
                for channel in list(topic.channels.values()):
                    self._hold(channel)
        if state.holding_topics:
            self.hold_timer = self.clock.callLater(
                state.failover_timeout, self.release_hold, "no peer"
            )
            self._log.info(
                "mirror: delivery of {topics} held until a peer's exchange "
                "(at most {timeout}s)",
                topics=sorted(state.holding_topics),
                timeout=state.failover_timeout,
            )

    def channel_created(self, topic: Topic, channel: Channel) -> None:
        """A channel made while its topic is held is held too."""
        if topic.name in self.state.holding_topics:
            self._hold(channel)

    def _hold(self, channel: Channel) -> None:
        if not channel.ephemeral:
            channel.hold()
            self._holding.append(channel)

    def release_hold(self, why: str) -> None:
        """
        Deliver what was held at start: a peer's exchange was applied,
        none came, or ``"stopping"``.
        """
        timer, self.hold_timer = self.hold_timer, None
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

    # -- the exchange -------------------------------------------------------------

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

    def send_list(self, peer: MirrorPeer) -> None:
        """Send ``peer`` the ids taken over from it (none, often), then the end of the list."""
        records: List[Tuple[bytes, str, str, List[bytes]]] = []
        for epoch, taken in self.state.taken_ids.get(peer.node_id, []):
            records.append((OP_GROUP, "", "", [epoch.encode("ascii", "replace")]))
            for (topic, channel), ids in taken.items():
                records.append((OP_TAKEN, topic, channel, ids))
        records.append((OP_LIST_END, "", "", []))
        self._send_exchange(peer.route, records)

    def received(self, peer: MirrorPeer, records: List[Any]) -> None:
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
                self.release_hold("exchange with %s" % (peer.node_id,))
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
