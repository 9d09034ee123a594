# -*- test-case-name: tests.test_cluster_mirror -*-
"""
Mirrored topics over NATS routes, between txnsq nodes.

Every txnsq node of the cluster that mirrors (``--mirror-topics`` or
``POST /topic/mirror``) says so in its route INFO (``"txnsq_mirror":
{"id": ..., "epoch": ...}``: a stable node id kept in the data path, and
a random id of this process).  A peer whose INFO has no such field (a
nats-server) is never sent the internal subjects.

- The node where a message is published sends it, with FINs, REQs and
  channel changes (:mod:`txnsq.nsqd.mirror`), to every mirroring peer:
  all records of one reactor turn in one payload on ``$NSQ.mirror.data``,
  numbered; the peer applies them to its :class:`StandbyCopy` of this node
  and acks the number on ``$NSQ.mirror.ack``.
- ``--mirror-ack=sync``: a V2 connection's OK for a publish to a mirrored
  topic leaves only when every mirroring peer routed now has acked the
  payload that carried it (the connection stops reading meanwhile: a slow
  standby slows producers).  ``async``: OKs leave at once; the peers' lag
  is counted, and past ``MAX_LAG_BYTES`` unacked, producers wait as in
  sync mode (bounded memory).
- Copies are not delivered while their node is routed.  When it has been
  unrouted for ``--mirror-failover-timeout``, or comes back as a new
  process (another epoch: it was restarted and lost what it held in
  memory), its copy is handed to this node's channels, which deliver it.
- A peer going down releases the producers waiting for its acks: until it
  is back, publishes are kept by this node alone.
- Heartbeats: every mirroring peer is sent an empty ``$NSQ.mirror.ping``
  every ``heartbeat`` seconds; a peer heard from (any mirror message) for
  none of the last ``silence`` seconds is treated as unrouted (its copy
  fails over after the timeout, producers waiting for its acks are
  released) until it is heard again -- a hung node (SIGSTOP, a cut
  cable) is seen long before the route's two missed PINGs.
- Fail-back: when two nodes route to each other, each sends the other an
  exchange (``$NSQ.mirror.exchange``): the ids of the messages it took
  over from the other (by the other's process epoch).  The receiver drops
  them from its own channels (the taker delivers them), tells its
  standbys (as FINs), and answers -- when it is the very process they
  were taken from (a partition, both alive) -- with those it finished
  while apart, which the taker drops in turn.  A node started with
  messages in mirrored topics holds their delivery until it has applied
  a peer's exchange, or for ``--mirror-failover-timeout`` when no peer
  comes: a restarted primary does not deliver again what was taken over.
"""

from __future__ import annotations

import os
import re
from base64 import b32encode
from collections import deque
from typing import Any, Deque, Dict, List, Optional, Set, Tuple

from twisted.internet.task import LoopingCall
from twisted.logger import Logger

from txnsq.cluster.route import RouteProtocol
from txnsq.nsqd.broker import TopologyListener
from txnsq.nsqd.mirror import (
    CHANNEL_OPS,
    FLUSH_SIZE,
    MirrorRecorder,
    StandbyCopy,
    channel_snapshot,
    drop_from_channel,
    drop_from_topic,
    holds_messages,
    topic_snapshot,
)
from txnsq.protocol.mirror import (
    OP_ANSWER_END,
    OP_MESSAGES,
    OP_FINISHED_APART,
    OP_GROUP,
    OP_LIST_END,
    OP_TAKEN,
    SUBJECT_ACK,
    SUBJECT_DATA,
    SUBJECT_EXCHANGE,
    SUBJECT_PING,
    MirrorDecodeError,
    RecordBuilder,
    decode_ack,
    decode_records,
    encode_ack,
)
from txnsq.protocol.nats_route import RouteMessages, encode_rmsg_head

__all__ = ["Mirror", "MirrorPeer", "load_node_id"]

#: The INFO field txnsq peers mirror through.
INFO_FIELD = "txnsq_mirror"

#: The account internal subjects travel in.
ACCOUNT = "$G"

#: Unacked bytes past which ``async`` mode holds producers too.
MAX_LAG_BYTES = 64 * 1024 * 1024

#: Catch-up bytes sent per reactor turn (in payloads of FLUSH_SIZE).
CATCH_UP_SLICE = 1024 * 1024

#: Unacked bytes past which the catch-up waits for acks before sending more.
CATCH_UP_WINDOW = 8 * 1024 * 1024

#: No limit on the messages of one channel a catch-up reads.
_ALL = 1 << 62

#: Ids per exchange payload (16 bytes each, plus 4 of length: ~200 KiB).
EXCHANGE_CHUNK = 10000

#: Taken-over ids by ``(topic, channel)``.
Taken = Dict[Tuple[str, str], List[bytes]]

#: File (in ``--data-path``) keeping this node's mirror id across restarts.
NODE_ID_FILE = "txnsq-mirror.id"

#: File (in ``--data-path``) keeping the topics of ``POST /topic/mirror``.
NAMED_TOPICS_FILE = "txnsq-mirror.topics"


_PING_HEAD = encode_rmsg_head(ACCOUNT, SUBJECT_PING, 0)


def _random_id() -> str:
    return b32encode(os.urandom(10)).decode().lower()


def load_node_id(data_path: str) -> str:
    """
    This node's mirror id: read from ``data_path``, made and kept there if
    new (a new one each start when it cannot be written there).
    """
    path = os.path.join(data_path or ".", NODE_ID_FILE)
    try:
        with open(path) as stream:
            found = stream.read().strip()
        if found:
            return found
    except OSError:
        pass
    node_id = _random_id()
    try:
        with open(path + ".tmp", "w") as stream:
            stream.write(node_id + "\n")
        os.replace(path + ".tmp", path)
    except OSError as error:
        # Mirroring still works; a restart will look like a new node
        # (its standbys take over at once rather than at its return).
        Logger().warn(
            "mirror: cannot keep the node id in {path}: {error}", path=path, error=error
        )
    return node_id


class MirrorPeer:
    """A mirroring txnsq peer routed now."""

    __slots__ = ("server_id", "route", "node_id", "epoch", "acked", "up_at", "heard")

    def __init__(self, route: RouteProtocol, node_id: str, epoch: str, now: float) -> None:
        self.server_id = route.server_id or ""
        self.route = route
        self.node_id = node_id
        self.epoch = epoch
        self.acked = 0
        self.up_at = now
        #: When a mirror message of it last came.
        self.heard = now


def heartbeat_of(failover_timeout: float) -> Tuple[float, float]:
    """
    The default ``(heartbeat, silence)`` for a failover timeout: a ping
    every quarter of it (0.25 to 5 s), a peer silent for as long as the
    timeout itself (at least 2 s: a loaded machine's pauses are not a
    hang) treated as unrouted.
    """
    return max(0.25, min(failover_timeout / 4.0, 5.0)), max(failover_timeout, 2.0)


class Mirror(TopologyListener):
    """
    One node's mirroring: what it sends its peers, the copies it keeps of
    theirs, and failover.

    :param broker: nsqd's broker.
    :param node: the route node.
    :param clock: ``IReactorTime``.
    :param node_id: this node's stable mirror id (:func:`load_node_id`).
    :param topics: regular expression of mirrored topic names (empty: only
        those named by :meth:`mirror_topic`).
    :param ack: ``"sync"`` or ``"async"``.
    :param failover_timeout: seconds a peer may be unrouted before its copy
        is delivered here.

    :ivar seq: the number of the last payload sent.
    :ivar copies: the copies kept, by the peer's node id.
    :ivar taken_over: failovers done: dicts for /stats.
    """

    _log = Logger()

    def __init__(
        self,
        broker: Any,
        node: Any,
        clock: Any,
        node_id: str,
        topics: str = "",
        ack: str = "sync",
        failover_timeout: float = 10.0,
        max_lag_bytes: int = MAX_LAG_BYTES,
        journal: Optional[Any] = None,
        named_file: Optional[str] = None,
        heartbeat: Optional[Tuple[float, float]] = None,
    ) -> None:
        self.broker = broker
        self.node = node
        self.clock = clock
        self.node_id = node_id
        self.epoch = _random_id()
        self._pattern = re.compile(topics) if topics else None
        self.named: Set[str] = set()
        #: Where ``POST /topic/mirror``'s topics are kept (one a line), or None.
        self.named_file = named_file
        #: (ping interval, silence limit) in seconds; (0, 0): no heartbeat.
        self.heartbeat = heartbeat if heartbeat is not None else heartbeat_of(failover_timeout)
        self._beats: Optional[LoopingCall] = None
        #: Route server ids of peers silent past the limit (routed still).
        self._silenced: Dict[str, RouteProtocol] = {}
        self.silences = 0
        self.sync = ack == "sync"
        self.failover_timeout = failover_timeout
        self.max_lag_bytes = max_lag_bytes
        self.recorder = MirrorRecorder(self._schedule, self.flush)
        self.peers: Dict[str, MirrorPeer] = {}
        self.seq = 0
        self.copies: Dict[str, StandbyCopy] = {}
        self.taken_over: List[Dict[str, Any]] = []
        self.batches_sent = 0
        self.bytes_sent = 0
        self.batches_applied = 0
        self.decode_errors = 0
        self.producers_held = 0
        #: Messages sent to peers as they came (catch-up), and catch-ups
        #: run (each of every mirrored channel, in slices).
        self.catch_up_messages = 0
        self.catch_ups = 0
        self._flush_call: Any = None
        # The catch-up under way: (topic, channel, messages) still to send
        # (from the first one's ``_catch_up_pos``), the records gathered
        # meanwhile (sent behind it, in order), the producers waiting for
        # those, the call sending the next slice, and whether a peer came
        # while it ran (another catch-up follows).
        self._catch_up_queue: Deque[Tuple[str, str, List[bytes]]] = deque()
        self._catch_up_pos = 0
        self._catching_up = False
        self._behind: List[RecordBuilder] = []
        self._behind_bytes = 0
        self._waiting_behind: List[Any] = []
        self._catch_up_call: Any = None
        self._catch_up_again = False
        # (seq, size) of payloads some peer has not acked, oldest first.
        self._unacked: List[Tuple[int, int]] = []
        self.lag_bytes = 0
        self._waiting: List[Tuple[int, Any]] = []
        self._timers: Dict[str, Any] = {}
        # The peer (node id) each route's server is, while routed.
        self._down_since: Dict[str, float] = {}
        self._head_cache: Dict[int, bytes] = {}
        self._known_topics: Dict[str, int] = {}
        self._mirrored: Dict[str, bool] = {}
        #: Where copies are kept across restarts (a CopyJournal), or None.
        self.journal = journal
        #: Per peer node id: (its epoch, the ids taken over) of each
        #: takeover not yet applied by that node in an exchange.
        self.taken_ids: Dict[str, List[Tuple[str, Taken]]] = {}
        #: Per route server id: the finished-apart ids gathered while its
        #: exchange list comes in.
        self._apart: Dict[str, Taken] = {}
        #: Fail-back exchanges applied (received) and answered to us.
        self.exchanges_applied = 0
        self.exchanges_answered = 0
        #: Messages dropped here because a peer took them over, and
        #: messages dropped here because the peer finished them apart.
        self.dropped_taken = 0
        self.dropped_finished_apart = 0
        #: Channels whose delivery waits for the first exchange (at start).
        self._holding: List[Any] = []
        self._holding_topics: Set[str] = set()
        self._hold_timer: Any = None

    # -- life --------------------------------------------------------------------

    def start(self) -> None:
        """Hook into the broker and the route node; mark the existing topics."""
        self.named |= self._load_named()
        if self.heartbeat[0] > 0:
            self._beats = LoopingCall(self._beat)
            self._beats.clock = self.clock
            self._beats.start(self.heartbeat[0], now=False)
        self.node.info_extra[INFO_FIELD] = {"id": self.node_id, "epoch": self.epoch}
        self.node.observers.append(self)
        self.node.internal_handler = self._internal
        self.broker.add_listener(self)
        self.broker.mirror_gate = self.gate
        for topic in list(self.broker.topics.values()):
            self.topic_created(topic)
        for topic in list(self.broker.topics.values()):
            if topic.mirror is not None and holds_messages(topic):
                # Kept from before a restart: a peer may have taken these
                # over meanwhile; not delivered before its exchange says.
                self._holding_topics.add(topic.name)
                for channel in list(topic.channels.values()):
                    self._hold(channel)
        if self._holding_topics:
            self._hold_timer = self.clock.callLater(
                self.failover_timeout, self._release_hold, "no peer"
            )
            self._log.info(
                "mirror: delivery of {topics} held until a peer's exchange "
                "(at most {timeout}s)",
                topics=sorted(self._holding_topics),
                timeout=self.failover_timeout,
            )
        if self.journal is not None:
            for copy in self.journal.load():
                # Kept from before a restart: delivered if its node does
                # not come back within the timeout.
                self.copies[copy.node_id] = copy
                self._timers[copy.node_id] = self.clock.callLater(
                    self.failover_timeout, self._failover, copy.node_id
                )
                self._log.info(
                    "mirror: kept copy of {peer}: {count} messages",
                    peer=copy.node_id,
                    count=copy.count(),
                )

    def stop(self) -> None:
        """Undo :meth:`start`; pending failovers are cancelled."""
        if self in self.node.observers:
            self.node.observers.remove(self)
        self.node.internal_handler = None
        self.broker.remove_listener(self)
        self.broker.mirror_gate = None
        for call in self._timers.values():
            if call.active():
                call.cancel()
        self._timers.clear()
        if self.journal is not None:
            self.journal.close()
        self._release_hold("stopping")
        beats, self._beats = self._beats, None
        if beats is not None and beats.running:
            beats.stop()
        call, self._flush_call = self._flush_call, None
        if call is not None and call.active():
            call.cancel()
        self._end_catch_up()
        self._release_all()

    # -- which topics ------------------------------------------------------------

    def mirrored(self, name: str) -> bool:
        """``name`` is a mirrored topic (asked by the NATS bridge per publish: cached)."""
        found = self._mirrored.get(name)
        if found is None:
            pattern = self._pattern
            found = name in self.named or (
                pattern is not None and pattern.search(name) is not None
            )
            if len(self._mirrored) > 65536:
                self._mirrored.clear()
            self._mirrored[name] = found
        return found

    def mirror_topic(self, name: str) -> None:
        """
        Mirror topic ``name`` (``POST /topic/mirror``), created if need be.

        :raises ValueError: not a valid topic name, or an ephemeral one.
        """
        if name.endswith("#ephemeral"):
            raise ValueError("an ephemeral topic cannot be mirrored")
        topic = self.broker.get_topic(name)
        if name not in self.named:
            self.named.add(name)
            self._keep_named()
        self._mirrored.pop(name, None)
        self.topic_created(topic)

    def _load_named(self) -> Set[str]:
        """The topics ``POST /topic/mirror`` named before a restart."""
        if not self.named_file:
            return set()
        try:
            with open(self.named_file, encoding="ascii") as stream:
                return {line.strip() for line in stream if line.strip()}
        except (OSError, UnicodeDecodeError):
            return set()

    def _keep_named(self) -> None:
        """Write the named topics (atomically); logged, not raised, when it fails."""
        if not self.named_file:
            return
        from txnsq.files import write_file_atomically

        data = "".join(name + "\n" for name in sorted(self.named)).encode("ascii")
        try:
            write_file_atomically(self.named_file, data)
        except OSError as error:
            self._log.warn(
                "mirror: cannot keep the mirrored topics in {path}: {error}",
                path=self.named_file,
                error=error,
            )

    def topic_created(self, topic: Any) -> None:
        """A topic was made: mirrored if it should be."""
        if topic.mirror is None and not topic.ephemeral and self.mirrored(topic.name):
            topic.mirror = self.recorder
            for channel in list(topic.channels.values()):
                self.channel_created(topic, channel)

    def channel_created(self, topic: Any, channel: Any) -> None:
        """Peers create the channel in their copy."""
        if topic.name in self._holding_topics:
            self._hold(channel)
        if topic.mirror is not None and not channel.ephemeral:
            self.recorder.channel_changed(CHANNEL_OPS["create"], topic.name, channel.name)

    def channel_deleted(self, topic: Any, channel: Any) -> None:
        """Peers drop the channel from their copy."""
        if topic.mirror is not None and not channel.ephemeral:
            self.recorder.channel_changed(CHANNEL_OPS["delete"], topic.name, channel.name)

    # -- sending ------------------------------------------------------------------

    def _schedule(self) -> None:
        if self._flush_call is None:
            self._flush_call = self.clock.callLater(0, self.flush)

    def flush(self) -> None:
        """
        Send the records gathered to every peer, as one numbered payload
        (while a catch-up is under way: keep them to send behind it).
        """
        call, self._flush_call = self._flush_call, None
        if call is not None and call.active():
            call.cancel()
        recorder = self.recorder
        builder = recorder.builder
        if not builder:
            return
        if self._catching_up:
            # Applied before the rest of the catch-up, a FIN would find
            # nothing to remove and the catch-up would bring its message
            # back: these records follow it.
            self._behind.append(builder)
            self._behind_bytes += builder.size
            recorder.builder = RecordBuilder()
            return
        self._send(builder)

    def _send(self, builder: RecordBuilder) -> None:
        """Send ``builder``'s records to every peer as the next numbered payload."""
        self.seq = seq = self.seq + 1
        payload = builder.encode(seq)
        size = len(payload)
        head = self._head_cache.get(size)
        if head is None:
            if len(self._head_cache) > 1024:
                self._head_cache.clear()
            head = self._head_cache[size] = encode_rmsg_head(ACCOUNT, SUBJECT_DATA, size)
        for peer in self.peers.values():
            peer.route.send_message(head, payload)
        self.batches_sent += 1
        self.bytes_sent += size
        if self.peers:
            self._unacked.append((seq, size))
            self.lag_bytes += size

    def gate(self, connection: Any) -> bool:
        """
        The broker's mirror gate: True when ``connection``'s output must
        wait for the peers' acks (it is then released by
        ``connection.mirror_release()``).
        """
        if not self.peers:
            return False
        if self._catching_up:
            if self.sync or self.lag_bytes + self._behind_bytes > self.max_lag_bytes:
                # Its records go behind the catch-up: it waits for that.
                self.flush()
                self._waiting_behind.append(connection)
                self.producers_held += 1
                return True
            return False
        if self.sync:
            self.flush()
        elif self.lag_bytes <= self.max_lag_bytes:
            return False
        else:
            self.flush()
        target = self.seq
        if self._acked() >= target:
            return False
        self._waiting.append((target, connection))
        self.producers_held += 1
        return True

    def _acked(self) -> int:
        peers = self.peers
        if not peers:
            return self.seq
        return min(peer.acked for peer in peers.values())

    def _release(self) -> None:
        acked = self._acked()
        unacked = self._unacked
        if unacked and unacked[0][0] <= acked:
            keep = 0
            freed = 0
            for seq, size in unacked:
                if seq > acked:
                    break
                keep += 1
                freed += size
            del unacked[:keep]
            self.lag_bytes -= freed
            if (
                self._catching_up
                and self._catch_up_call is None
                and self.lag_bytes < CATCH_UP_WINDOW
            ):
                self._catch_up_call = self.clock.callLater(0, self._continue_catch_up)
        waiting = self._waiting
        if waiting and waiting[0][0] <= acked:
            done = [conn for seq, conn in waiting if seq <= acked]
            self._waiting = [(seq, conn) for seq, conn in waiting if seq > acked]
            for conn in done:
                conn.mirror_release()

    def _release_all(self) -> None:
        waiting, self._waiting = self._waiting, []
        behind, self._waiting_behind = self._waiting_behind, []
        for _, conn in waiting:
            conn.mirror_release()
        for conn in behind:
            conn.mirror_release()

    # -- receiving ----------------------------------------------------------------

    def _internal(self, route: RouteProtocol, batch: RouteMessages) -> int:
        count = len(batch.payloads)
        peer = self.peers.get(route.server_id or "")
        if peer is None:
            if self._silenced.get(route.server_id or "") is route:
                # Silent for a while, and heard again: routed anew.
                self._log.info("mirror: silent peer heard again")
                self.route_up(route)
                peer = self.peers.get(route.server_id or "")
            if peer is None:
                # Not a mirroring peer (or not yet): nothing to do with it.
                return count
        peer.heard = self.clock.seconds()
        if batch.subject == SUBJECT_DATA:
            copy = self.copies.get(peer.node_id)
            journal = self.journal
            if copy is None or copy.epoch != peer.epoch:
                copy = self.copies[peer.node_id] = StandbyCopy(peer.node_id, peer.epoch)
                if journal is not None:
                    journal.started(copy)
            last = 0
            for payload in batch.payloads:
                try:
                    seq, records = decode_records(payload)
                except MirrorDecodeError as error:
                    self.decode_errors += 1
                    self._log.warn(
                        "mirror: bad payload from {peer}: {error}", peer=peer.node_id, error=error
                    )
                    continue
                now = self.clock.seconds()
                copy.apply(seq, records, now)
                if journal is not None:
                    journal.applied(
                        copy, payload, sum(len(items) for _, _, _, items in records) or 1, now
                    )
                self.batches_applied += 1
                last = seq
            topics = self.broker.topics
            if len(copy.topics) != self._known_topics.get(peer.node_id, 0):
                # A topic new to the copy: made here too, so that it is
                # registered with nsqlookupd and consumers connect to this
                # node before they need it.
                self._known_topics[peer.node_id] = len(copy.topics)
                for name in copy.topics:
                    if name not in topics and not self.broker.exiting:
                        self.broker.get_topic(name)
            if last:
                ack = encode_ack(last)
                route.send_message(encode_rmsg_head(ACCOUNT, SUBJECT_ACK, len(ack)), ack)
        elif batch.subject == SUBJECT_ACK:
            for payload in batch.payloads:
                try:
                    seq = decode_ack(payload)
                except MirrorDecodeError:
                    self.decode_errors += 1
                    continue
                if seq > peer.acked:
                    peer.acked = seq
            self._release()
        elif batch.subject == SUBJECT_EXCHANGE:
            for payload in batch.payloads:
                try:
                    _, records = decode_records(payload)
                except MirrorDecodeError as error:
                    self.decode_errors += 1
                    self._log.warn(
                        "mirror: bad exchange from {peer}: {error}", peer=peer.node_id, error=error
                    )
                    continue
                self._exchange_received(peer, records)
        return count

    # -- heartbeats -----------------------------------------------------------------

    def _beat(self) -> None:
        """Ping every peer; a peer silent past the limit is treated as unrouted."""
        now = self.clock.seconds()
        limit = self.heartbeat[1]
        for server_id, peer in list(self.peers.items()):
            if now - peer.heard > limit:
                self.silences += 1
                self._log.warn(
                    "mirror: peer {peer} silent for {seconds:.1f}s: treated as down",
                    peer=peer.node_id,
                    seconds=now - peer.heard,
                )
                route = peer.route
                self.route_down(server_id)
                self._silenced[server_id] = route
            else:
                peer.route.send_message(_PING_HEAD, b"")
        for route in self._silenced.values():
            # Still routed: our pings let it hear us again when it wakes.
            route.send_message(_PING_HEAD, b"")

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
        if not self._holding_topics:
            return
        holding, self._holding = self._holding, []
        self._holding_topics = set()
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
        for epoch, taken in self.taken_ids.get(peer.node_id, []):
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
                mine = bool(items) and items[0].decode("ascii", "replace") == self.epoch
            elif op == OP_TAKEN:
                gone = self._drop(topic, channel, items)
                self.dropped_taken += len(gone)
                if mine:
                    finished = [msg_id for msg_id in items if msg_id not in gone]
                    if finished:
                        apart.setdefault((topic, channel), []).extend(finished)
            elif op == OP_LIST_END:
                self.exchanges_applied += 1
                answer: List[Tuple[bytes, str, str, List[bytes]]] = [
                    (OP_FINISHED_APART, topic_name, channel_name, ids)
                    for (topic_name, channel_name), ids in self._apart.pop(peer.server_id, {}).items()
                ]
                answer.append((OP_ANSWER_END, "", "", []))
                self._send_exchange(peer.route, answer)
                self._release_hold("exchange with %s" % (peer.node_id,))
            elif op == OP_FINISHED_APART:
                gone = self._drop(topic, channel, items)
                self.dropped_finished_apart += len(gone)
            elif op == OP_ANSWER_END:
                # Our list was applied there: no need to send it again.
                self.taken_ids.pop(peer.node_id, None)
                self.exchanges_answered += 1

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

    # -- routes -------------------------------------------------------------------

    def route_up(self, route: RouteProtocol) -> None:
        """A server's route is up (or another connection to it took over)."""
        fields = route.peer_info.get(INFO_FIELD)
        if not isinstance(fields, dict):
            return
        node_id = str(fields.get("id", ""))
        epoch = str(fields.get("epoch", ""))
        if not node_id or node_id == self.node_id:
            return
        server_id = route.server_id or ""
        self._silenced.pop(server_id, None)
        existing = self.peers.get(server_id)
        if existing is not None:
            existing.route = route
            return
        peer = MirrorPeer(route, node_id, epoch, self.clock.seconds())
        # Payloads sent before it was routed are none of its business.
        peer.acked = self.seq
        self.peers[server_id] = peer
        self.recorder.live = True
        timer = self._timers.pop(node_id, None)
        if timer is not None and timer.active():
            timer.cancel()
        self._down_since.pop(node_id, None)
        self._catch_up()
        copy = self.copies.get(node_id)
        if copy is not None and copy.epoch != epoch:
            # The peer was restarted: what it held in memory is gone, and
            # what it kept is ours to deliver from now on.
            self._take_over(node_id, "restarted")
        for done in self.taken_over:
            if done["node_id"] == node_id and done["epoch"] == epoch and not done["split_brain"]:
                done["split_brain"] = True
                self._log.warn(
                    "mirror: {peer} is back in the same process after its messages "
                    "were taken over: both nodes delivered them while apart (route "
                    "down, both alive); exchanging what each finished",
                    peer=node_id,
                )
        self._exchange_list(peer)
        self._log.info("mirror: peer {peer} up", peer=node_id)

    def _catch_up(self) -> None:
        """
        A peer came: send every mirrored topic's channels (created, paused)
        and unfinished messages, each channel emptied first in the copies,
        so that the new peer -- a restarted standby, or one back after the
        route was down -- holds what this node holds.  The peers already
        in step take the same again (their copies end up the same).

        The channels' states go at once; their messages (read in this turn,
        all of them) in slices of :data:`CATCH_UP_SLICE` bytes, one slice a
        reactor turn, and none while :data:`CATCH_UP_WINDOW` bytes are not
        acked.  What happens meanwhile is sent behind the catch-up, and
        ``sync`` producers publishing meanwhile wait for it.
        """
        if self._catching_up:
            # Under way: the new peer gets the rest of it, then another.
            self._catch_up_again = True
            return
        self.flush()
        states = RecordBuilder()
        queue = self._catch_up_queue
        for topic in list(self.broker.topics.values()):
            if topic.mirror is None:
                continue
            name = topic.name
            for channel in list(topic.channels.values()):
                if channel.ephemeral:
                    continue
                states.add(CHANNEL_OPS["create"], name, channel.name, [])
                states.add(CHANNEL_OPS["empty"], name, channel.name, [])
                if channel.paused:
                    states.add(CHANNEL_OPS["pause"], name, channel.name, [])
                messages, _ = channel_snapshot(channel, _ALL)
                if messages:
                    queue.append((name, channel.name, messages))
            # The topic's own state: paused or not, and what it holds.
            states.add(CHANNEL_OPS["pause" if topic.paused else "unpause"], name, "", [])
            states.add(CHANNEL_OPS["empty"], name, "", [])
            held, _ = topic_snapshot(topic, _ALL)
            if held:
                queue.append((name, "", held))
        self.catch_ups += 1
        if states:
            self._send(states)
        self._catching_up = True
        self._catch_up_pos = 0
        self._continue_catch_up()

    def _continue_catch_up(self) -> None:
        """Send the catch-up's next slice; once all is sent, what was kept behind it."""
        self._catch_up_call = None
        if not self._catching_up:
            return
        queue = self._catch_up_queue
        sent = 0
        while queue and sent < CATCH_UP_SLICE and self.lag_bytes < CATCH_UP_WINDOW:
            topic, channel, messages = queue[0]
            start = end = self._catch_up_pos
            size = 0
            count = len(messages)
            while end < count and size < FLUSH_SIZE:
                size += len(messages[end])
                end += 1
            builder = RecordBuilder()
            builder.add(OP_MESSAGES, topic, channel, messages[start:end])
            self._send(builder)
            sent += size
            self.catch_up_messages += end - start
            if end >= count:
                queue.popleft()
                self._catch_up_pos = 0
            else:
                self._catch_up_pos = end
        if queue:
            if self.lag_bytes < CATCH_UP_WINDOW:
                self._catch_up_call = self.clock.callLater(0, self._continue_catch_up)
            # Else the acks that bring the lag down send the next slice.
            return
        # All sent: the records kept meanwhile follow, in order, and the
        # producers waiting for them wait for their acks.
        self._catching_up = False
        behind, self._behind = self._behind, []
        self._behind_bytes = 0
        for builder in behind:
            self._send(builder)
        waiting, self._waiting_behind = self._waiting_behind, []
        target = self.seq
        self._waiting.extend((target, conn) for conn in waiting)
        self._release()
        if self._catch_up_again:
            self._catch_up_again = False
            self._catch_up()

    def _end_catch_up(self) -> None:
        """No peer left (or stopping): the catch-up under way is dropped."""
        call, self._catch_up_call = self._catch_up_call, None
        if call is not None and call.active():
            call.cancel()
        self._catch_up_queue.clear()
        self._catch_up_pos = 0
        self._catching_up = False
        self._catch_up_again = False
        self._behind = []
        self._behind_bytes = 0

    def route_down(self, server_id: str) -> None:
        """A server has no route left: its copy fails over after the timeout."""
        self._silenced.pop(server_id, None)
        peer = self.peers.pop(server_id, None)
        if peer is None:
            return
        if not self.peers:
            self.recorder.live = False
            self._unacked = []
            self.lag_bytes = 0
            self._end_catch_up()
        self._release()
        if not self.peers:
            self._release_all()
        node_id = peer.node_id
        self._down_since[node_id] = self.clock.seconds()
        if node_id in self.copies and node_id not in self._timers:
            self._timers[node_id] = self.clock.callLater(
                self.failover_timeout, self._failover, node_id
            )
        self._log.info(
            "mirror: peer {peer} down; failover in {timeout}s",
            peer=node_id,
            timeout=self.failover_timeout,
        )

    def _failover(self, node_id: str) -> None:
        self._timers.pop(node_id, None)
        self._take_over(node_id, "unreachable")

    def _take_over(self, node_id: str, reason: str) -> None:
        copy = self.copies.pop(node_id, None)
        if copy is None:
            return
        taken: Dict[Tuple[str, str], List[bytes]] = {}
        moved = copy.take_over(self.broker, taken, self.clock.seconds())
        if taken:
            self.taken_ids.setdefault(node_id, []).append((copy.epoch, taken))
        if self.journal is not None:
            self.journal.discard(node_id)
        self.taken_over.append(
            {
                "node_id": node_id,
                "epoch": copy.epoch,
                "reason": reason,
                "messages": moved,
                "at": self.clock.seconds(),
                "split_brain": False,
            }
        )
        self._log.warn(
            "mirror: took over {count} messages of {peer} ({reason})",
            count=moved,
            peer=node_id,
            reason=reason,
        )

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
            "taken_over": list(self.taken_over),
        }
