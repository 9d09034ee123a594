# -*- test-case-name: tests.test_cluster_mirror -*-
"""
Mirrored topics over NATS routes, between txnsq nodes.

Every txnsq node of the cluster that mirrors (``--mirror-topics`` or
``POST /topic/mirror``) says so in its route INFO (``"txnsq_mirror":
{"id": ..., "epoch": ...}``: a stable node id kept in the data path, and
a random id of this process).  A peer whose INFO has no such field (a
nats-server) is never sent the internal subjects.

- The node where a message is published sends it, with FINs, REQs and
  channel changes (:mod:`txnsq.mirror.recorder`), to every mirroring peer:
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
  is back, publishes are kept by this node alone.  Unless
  ``--mirror-min-standbys=N`` (N > 0) asks for N live peers: with fewer,
  publishes to mirrored topics are refused before they are stored, and
  (``sync``) the producers waiting for acks are failed, not released
  (:mod:`txnsq.mirror.gate`).
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

:class:`Mirror` is composed of one part per concern, each in its module
and each built from the :class:`MirrorState <txnsq.mirror.state.MirrorState>`
they share plus the clock and the collaborators it needs: the sending
and ack gate (:mod:`txnsq.mirror.gate`, which makes the recorder), the
catch-up (:mod:`txnsq.mirror.catch_up`), the fail-back exchange
(:mod:`txnsq.mirror.exchange`), the heartbeat
(:mod:`txnsq.mirror.heartbeat`), the takeover
(:mod:`txnsq.mirror.failover`), the named topics' file
(:mod:`txnsq.mirror.files`), the /stats figures
(:mod:`txnsq.mirror.stats`) and the journal
(:mod:`txnsq.mirror.journal`); a peer is a
:class:`MirrorPeer <txnsq.mirror.peer.MirrorPeer>`.  This module builds
them and wires them together, and keeps the life of it all, the choice
of topics, the receiving, and the routes coming and going.
"""

from __future__ import annotations

import re
from typing import Any, Dict, Generic, List, Optional, Tuple, TypeVar

from twisted.logger import Logger

from txnsq.cluster.route import RouteProtocol
from txnsq.mirror.catch_up import CatchUp
from txnsq.mirror.exchange import FailBack
from txnsq.mirror.failover import Failover
from txnsq.mirror.files import NamedTopicsFile, random_id
from txnsq.mirror.gate import AckGate, unconfirmed
from txnsq.mirror.heartbeat import Heartbeat, heartbeat_of
from txnsq.mirror.peer import ACCOUNT, MirrorPeer
from txnsq.mirror.recorder import CHANNEL_OPS
from txnsq.mirror.standby import StandbyCopy
from txnsq.mirror.state import MAX_LAG_BYTES, MirrorState, Taken
from txnsq.mirror.stats import MirrorStats
from txnsq.nsqd.broker import TopologyListener
from txnsq.protocol.mirror import (
    SUBJECT_ACK,
    SUBJECT_DATA,
    SUBJECT_EXCHANGE,
    MirrorDecodeError,
    RecordBuilder,
    decode_ack,
    decode_records,
    encode_ack,
)
from txnsq.protocol.nats_route import RouteMessages, encode_rmsg_head

__all__ = ["Mirror", "MirrorPeer"]

#: The INFO field txnsq peers mirror through.
INFO_FIELD = "txnsq_mirror"

_T = TypeVar("_T")


class _Shared(Generic[_T]):
    """A :class:`Mirror` attribute that is its :class:`MirrorState`'s, read and set there."""

    def __set_name__(self, owner: type, name: str) -> None:
        self.name = name

    def __get__(self, mirror: Mirror, owner: Optional[type] = None) -> _T:
        value: _T = getattr(mirror.state, self.name)
        return value

    def __set__(self, mirror: Mirror, value: _T) -> None:
        setattr(mirror.state, self.name, value)


class Mirror(TopologyListener):
    """
    One node's mirroring: what it sends its peers, the copies it keeps of
    theirs, and failover.

    :param broker: nsqd's broker.
    :param node: the route node.
    :param clock: ``IReactorTime``.
    :param node_id: this node's stable mirror id
        (:func:`load_node_id <txnsq.mirror.files.load_node_id>`).
    :param topics: regular expression of mirrored topic names (empty: only
        those named by :meth:`mirror_topic`).
    :param ack: ``"sync"`` or ``"async"``.
    :param failover_timeout: seconds a peer may be unrouted before its copy
        is delivered here.
    :param max_lag_bytes: unacked bytes past which ``async`` producers wait.
    :param journal: where the copies are kept across restarts (a
        :class:`CopyJournal <txnsq.mirror.journal.CopyJournal>`), or ``None``.
    :param named_file: where the topics of ``POST /topic/mirror`` are kept,
        or ``None``.
    :param heartbeat: ``(ping interval, silence limit)`` in seconds
        (default: :func:`heartbeat_of <txnsq.mirror.heartbeat.heartbeat_of>`
        the failover timeout; ``(0, 0)``: none).
    :param min_standbys: live peers a publish to a mirrored topic needs
        (``--mirror-min-standbys``; 0: none).

    :ivar state: what the parts share.
    :ivar recorder: what the mirrored topics record (made by the gate).
    :ivar ack_gate: the sending, and producers waiting for acks.
    :ivar catch_up: the catch-up of a peer that comes.
    :ivar fail_back: the fail-back exchange, and the hold at start.
    :ivar failover: the takeover of lost peers' copies.
    :ivar heartbeats: the pings, and silent peers.
    :ivar topics_file: the file of the topics named by ``POST /topic/mirror``.
    :ivar figures: the mirror's part of /stats.

    The settings and counts of the state that the service and the tests
    read (``seq``, ``copies``, ``sync``, ...) are also attributes of the
    mirror, read and set in the state.
    """

    _log = Logger()

    node_id: _Shared[str] = _Shared()
    epoch: _Shared[str] = _Shared()
    sync: _Shared[bool] = _Shared()
    max_lag_bytes: _Shared[int] = _Shared()
    min_standbys: _Shared[int] = _Shared()
    peers: _Shared[Dict[str, MirrorPeer]] = _Shared()
    seq: _Shared[int] = _Shared()
    lag_bytes: _Shared[int] = _Shared()
    batches_sent: _Shared[int] = _Shared()
    catch_ups: _Shared[int] = _Shared()
    catch_up_messages: _Shared[int] = _Shared()
    silences: _Shared[int] = _Shared()
    copies: _Shared[Dict[str, StandbyCopy]] = _Shared()
    kept: _Shared[Dict[str, StandbyCopy]] = _Shared()
    taken_over: _Shared[List[Dict[str, Any]]] = _Shared()
    taken_ids: _Shared[Dict[str, List[Tuple[str, Taken]]]] = _Shared()
    exchanges_answered: _Shared[int] = _Shared()
    dropped_taken: _Shared[int] = _Shared()
    dropped_finished_apart: _Shared[int] = _Shared()

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
        min_standbys: int = 0,
    ) -> None:
        self.broker = broker
        self.node = node
        self.clock = clock
        self.journal = journal
        self.state = state = MirrorState(
            node_id,
            random_id(),
            sync=ack == "sync",
            failover_timeout=failover_timeout,
            max_lag_bytes=max_lag_bytes,
            min_standbys=min_standbys,
            heartbeat=heartbeat if heartbeat is not None else heartbeat_of(failover_timeout),
        )
        self.ack_gate = AckGate(state, clock, self._acked)
        self.recorder = self.ack_gate.recorder
        self.catch_up = CatchUp(state, clock, broker, self.ack_gate)
        self.fail_back = FailBack(state, clock, broker, self.recorder)
        self.failover = Failover(state, clock, broker, journal)
        self.heartbeats = Heartbeat(state, clock, self.route_down)
        self.topics_file = NamedTopicsFile(named_file)
        self.figures = MirrorStats(state, broker, clock, self.recorder)
        self._pattern = re.compile(topics) if topics else None
        # Whether each topic name is mirrored (asked per bridged publish).
        self._mirrored: Dict[str, bool] = {}
        # Per peer node id: the topics its copy held when last counted.
        self._known_topics: Dict[str, int] = {}

    # -- life --------------------------------------------------------------------

    def start(self) -> None:
        """Hook into the broker and the route node; mark the existing topics."""
        state = self.state
        state.named |= self.topics_file.load()
        self.heartbeats.start()
        self.node.info_extra[INFO_FIELD] = {"id": state.node_id, "epoch": state.epoch}
        self.node.observers.append(self)
        self.node.internal_handler = self._internal
        self.broker.add_listener(self)
        self.broker.mirror_gate = self.ack_gate.gate
        # With --mirror-min-standbys, refusing until enough peers come.
        self.ack_gate.standbys_changed()
        for topic in list(self.broker.topics.values()):
            self.topic_created(topic)
        # Kept from before a restart: a peer may have taken these over
        # meanwhile; not delivered before its exchange says.
        self.fail_back.hold_at_start()
        if self.journal is not None:
            for copy in self.journal.load():
                # Kept from before a restart: delivered if its node does
                # not come back within the timeout.
                state.copies[copy.node_id] = copy
                self.failover.schedule(copy.node_id)
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
        self.failover.stop()
        if self.journal is not None:
            self.journal.close()
        self.fail_back.release_hold("stopping")
        self.heartbeats.stop()
        self.ack_gate.stop()
        self.catch_up.end()
        if self.state.min_standbys and self.state.sync:
            self.ack_gate.fail_all(unconfirmed("mirror: stopping"))
        self.ack_gate.release_all()

    # -- the gate -------------------------------------------------------------------

    def gate(self, connection: Any) -> bool:
        """
        True when ``connection``'s output must wait for the peers' acks
        (:meth:`AckGate.gate <txnsq.mirror.gate.AckGate.gate>`, which the
        broker asks directly).
        """
        return self.ack_gate.gate(connection)

    def flush(self) -> None:
        """Send the records gathered now, rather than at the turn's end."""
        self.ack_gate.flush()

    def _acked(self) -> None:
        # Acks freed payloads during a catch-up: its next slice may go.
        self.catch_up.acked()

    # -- /stats ------------------------------------------------------------------

    def topic_role(self, topic: Any) -> Optional[Dict[str, Any]]:
        """A mirrored topic's marking in /stats, or ``None`` when not mirrored."""
        return self.figures.topic_role(topic)

    def stats(self) -> Dict[str, Any]:
        """The ``mirror`` part of the cluster section of /stats."""
        return self.figures.stats()

    def taker_of(self, node_id: str) -> str:
        """The node that takes over ``node_id``'s copy (see :mod:`txnsq.mirror.failover`)."""
        return self.failover.taker_of(node_id)

    # -- which topics ------------------------------------------------------------

    def mirrored(self, name: str) -> bool:
        """``name`` is a mirrored topic (asked by the NATS bridge per publish: cached)."""
        found = self._mirrored.get(name)
        if found is None:
            pattern = self._pattern
            found = name in self.state.named or (
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
        state = self.state
        if name.endswith("#ephemeral"):
            raise ValueError("an ephemeral topic cannot be mirrored")
        topic = self.broker.get_topic(name)
        if name not in state.named:
            state.named.add(name)
            self.topics_file.keep(state.named)
        self._mirrored.pop(name, None)
        self.topic_created(topic)

    def topic_created(self, topic: Any) -> None:
        """A topic was made: mirrored if it should be."""
        if topic.mirror is None and not topic.ephemeral and self.mirrored(topic.name):
            topic.mirror = self.recorder
            for channel in list(topic.channels.values()):
                self.channel_created(topic, channel)

    def channel_created(self, topic: Any, channel: Any) -> None:
        """Peers create the channel in their copy."""
        self.fail_back.channel_created(topic, channel)
        if topic.mirror is not None and not channel.ephemeral:
            self.recorder.channel_changed(CHANNEL_OPS["create"], topic.name, channel.name)

    def channel_deleted(self, topic: Any, channel: Any) -> None:
        """Peers drop the channel from their copy."""
        if topic.mirror is not None and not channel.ephemeral:
            self.recorder.channel_changed(CHANNEL_OPS["delete"], topic.name, channel.name)

    # -- receiving ----------------------------------------------------------------

    def _internal(self, route: RouteProtocol, batch: RouteMessages) -> int:
        state = self.state
        count = len(batch.payloads)
        peer = state.peers.get(route.server_id or "")
        if peer is None:
            if state.silenced.get(route.server_id or "") is route:
                # Silent for a while, and heard again: routed anew.
                self._log.info("mirror: silent peer heard again")
                self.route_up(route)
                peer = state.peers.get(route.server_id or "")
            if peer is None:
                # Not a mirroring peer (or not yet): nothing to do with it.
                return count
        peer.heard = self.clock.seconds()
        if batch.subject == SUBJECT_DATA:
            copy = state.copies.get(peer.node_id)
            journal = self.journal
            if copy is None or copy.epoch != peer.epoch:
                copy = state.copies[peer.node_id] = StandbyCopy(peer.node_id, peer.epoch)
                if journal is not None:
                    journal.started(copy)
            last = 0
            for payload in batch.payloads:
                try:
                    seq, records = decode_records(payload, packed=True)
                except MirrorDecodeError as error:
                    state.decode_errors += 1
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
                state.batches_applied += 1
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
                    state.decode_errors += 1
                    continue
                if seq > peer.acked:
                    peer.acked = seq
            self.ack_gate.release()
        elif batch.subject == SUBJECT_EXCHANGE:
            for payload in batch.payloads:
                try:
                    _, records = decode_records(payload)
                except MirrorDecodeError as error:
                    state.decode_errors += 1
                    self._log.warn(
                        "mirror: bad exchange from {peer}: {error}", peer=peer.node_id, error=error
                    )
                    continue
                self.fail_back.received(peer, records)
        return count

    # -- routes -------------------------------------------------------------------

    def route_up(self, route: RouteProtocol) -> None:
        """A server's route is up (or another connection to it took over)."""
        state = self.state
        fields = route.peer_info.get(INFO_FIELD)
        if not isinstance(fields, dict):
            return
        node_id = str(fields.get("id", ""))
        epoch = str(fields.get("epoch", ""))
        if not node_id or node_id == state.node_id:
            return
        server_id = route.server_id or ""
        state.silenced.pop(server_id, None)
        existing = state.peers.get(server_id)
        if existing is not None:
            existing.route = route
            return
        peer = MirrorPeer(route, node_id, epoch, self.clock.seconds())
        # Payloads sent before it was routed are none of its business.
        peer.acked = state.seq
        state.peers[server_id] = peer
        self.recorder.live = True
        self.failover.cancel(node_id)
        state.down_since.pop(node_id, None)
        state.lost.discard(node_id)
        if state.min_standbys and state.sync and state.waiting:
            # Those waiting count this peer only once it holds their
            # messages: once it has applied the catch-up that brings them.
            state.waiting_behind.extend(conn for _, conn in state.waiting)
            state.waiting = []
        self.ack_gate.standbys_changed()
        self.catch_up.start()
        copy = state.copies.get(node_id)
        if copy is not None and copy.epoch != epoch:
            # The peer was restarted: what it held in memory is gone, and
            # what it kept is its taker's to deliver from now on.
            self.failover.fail_over(node_id, "restarted")
        kept = state.kept.get(node_id)
        if kept is not None and kept.epoch == epoch and node_id not in state.copies:
            # Back in the same process: the copy kept aside is live again.
            state.copies[node_id] = state.kept.pop(node_id)
        self.failover.reassess("restarted")
        for done in state.taken_over:
            if done["node_id"] == node_id and done["epoch"] == epoch and not done["split_brain"]:
                done["split_brain"] = True
                self._log.warn(
                    "mirror: {peer} is back in the same process after its messages "
                    "were taken over: both nodes delivered them while apart (route "
                    "down, both alive); exchanging what each finished",
                    peer=node_id,
                )
        self.fail_back.send_list(peer)
        self._log.info("mirror: peer {peer} up", peer=node_id)

    def route_down(self, server_id: str) -> None:
        """A server has no route left: it is lost, and its copy fails over, after the timeout."""
        state = self.state
        state.silenced.pop(server_id, None)
        peer = state.peers.pop(server_id, None)
        if peer is None:
            return
        if not state.peers:
            self.recorder.live = False
            state.unacked = []
            state.lag_bytes = 0
            # Records gathered for no one (async mode keeps a turn's
            # while a payload is unacked): a peer routed later is caught
            # up from the queues instead.
            self.recorder.builder = RecordBuilder()
            self.catch_up.end()
        # Too few left for --mirror-min-standbys: those waiting fail.
        self.ack_gate.standbys_changed()
        self.ack_gate.release()
        if not state.peers:
            self.ack_gate.release_all()
        node_id = peer.node_id
        state.down_since[node_id] = self.clock.seconds()
        # Also without a copy: once lost, it is no longer a taker.
        self.failover.schedule(node_id)
        self._log.info(
            "mirror: peer {peer} down; failover in {timeout}s",
            peer=node_id,
            timeout=state.failover_timeout,
        )
