# -*- test-case-name: tests.test_mirror_gate,tests.test_cluster_mirror -*-
"""
The mirror's sending and its ack gate (a part of :class:`Mirror
<txnsq.mirror.mirror.Mirror>`): the records of a reactor turn go to
every peer as one numbered payload; a ``sync`` producer (an ``async``
one past :data:`MAX_LAG_BYTES <txnsq.mirror.state.MAX_LAG_BYTES>`
unacked) waits until every peer has acked the payload that carried its
publish.

In ``async`` mode no producer waits for a payload, so while one is on its
way (not acked by every peer) the records of later turns are gathered and
sent as one payload when it is acked, or once :data:`FLUSH_SIZE
<txnsq.mirror.recorder.FLUSH_SIZE>` bytes are held: under load the
payloads grow instead of multiplying, and with them fall the sends, the
acks and the reactor turns they cost both nodes.

``--mirror-min-standbys=N`` (N > 0): while fewer than N peers are live
(routed, and not silent past the heartbeat's limit), the recorder refuses
publishes to mirrored topics before they are stored; in ``sync`` mode, a
producer waiting at the gate when the live peers drop below N (or that
comes to the gate then) is failed (``mirror_fail``) instead of released:
its publish is stored here but not on N standbys, so its outcome is
unknown.  ``async`` producers never wait for the standbys, so they are
only refused at publish time (one held past the lag bound is released as
with N = 0).
"""

from __future__ import annotations

from typing import Any, Callable, Dict, Optional

from twisted.internet.interfaces import IDelayedCall, IReactorTime
from twisted.logger import Logger

from txnsq.mirror.peer import ACCOUNT
from txnsq.mirror.recorder import MirrorRecorder
from txnsq.mirror.state import MAX_LAG_BYTES, MirrorState
from txnsq.protocol.mirror import SUBJECT_DATA, RecordBuilder
from txnsq.protocol.nats_route import encode_rmsg_head

__all__ = ["MAX_LAG_BYTES", "AckGate", "too_few_standbys", "unconfirmed"]


def too_few_standbys(live: int, needed: int) -> str:
    """Why a publish is refused before it is stored: ``mirror: 0 of 1 required standbys live``."""
    return "mirror: %d of %d required standbys live" % (live, needed)


def unconfirmed(cause: str) -> str:
    """
    Why a publish stored here, waiting for the standbys' acks, failed:
    ``cause``, and that its outcome is unknown.
    """
    return "%s before the standbys acked; outcome unknown (stored here, may still be delivered)" % (
        cause,
    )


class AckGate:
    """
    The sending of payloads and the gate holding producers until the
    peers have acked them.

    The gate makes the :attr:`recorder` the mirrored topics feed: when
    the first record of a reactor turn is added it asks for the turn's
    end (:meth:`schedule`), and when :data:`FLUSH_SIZE <txnsq.mirror.recorder.FLUSH_SIZE>`
    bytes are held it sends them at once (:meth:`flush`).  Each payload
    goes to every peer of ``state.peers`` over its route, numbered
    ``state.seq``; acks come back through :meth:`release`.  While a
    catch-up is under way (``state.catching_up``), what is recorded, and
    the producers publishing, wait behind it (``state.behind``,
    ``state.waiting_behind``).

    :param state: the mirror's state.
    :param clock: ``IReactorTime``.
    :param acked: called when acks free sent payloads while a catch-up is
        under way (which may then send its next slice).
    """

    _log = Logger()

    def __init__(
        self, state: MirrorState, clock: IReactorTime, acked: Callable[[], None]
    ) -> None:
        self.state = state
        self.clock = clock
        self.acked = acked
        #: What the mirrored topics record, sent by this gate.
        self.recorder = MirrorRecorder(self.schedule, self.flush)
        self._flush_call: Optional[IDelayedCall] = None
        self._head_cache: Dict[int, bytes] = {}

    def stop(self) -> None:
        """Cancel the send of the turn's records."""
        call, self._flush_call = self._flush_call, None
        if call is not None and call.active():
            call.cancel()

    # -- sending ------------------------------------------------------------------

    def schedule(self) -> None:
        """The first record of a reactor turn was added: send at the turn's end."""
        if self._flush_call is None:
            self._flush_call = self.clock.callLater(0, self._turn_ended)

    def _turn_ended(self) -> None:
        """
        The reactor turn that gathered records ended: send them, unless
        (``async``) a payload is still unacked; then they go with what
        follows when it is acked (:meth:`release`), or when
        :data:`FLUSH_SIZE <txnsq.mirror.recorder.FLUSH_SIZE>` bytes are
        held (the recorder's ``full``).
        """
        self._flush_call = None
        state = self.state
        if not state.sync and state.unacked and not state.catching_up:
            return
        self.flush()

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
        state = self.state
        if state.catching_up:
            # Applied before the rest of the catch-up, a FIN would find
            # nothing to remove and the catch-up would bring its message
            # back: these records follow it.
            state.behind.append(builder)
            state.behind_bytes += builder.size
            recorder.builder = RecordBuilder()
            return
        self.send(builder)

    def send(self, builder: RecordBuilder) -> None:
        """Send ``builder``'s records to every peer as the next numbered payload."""
        state = self.state
        state.seq = seq = state.seq + 1
        payload = builder.encode(seq)
        size = len(payload)
        head = self._head_cache.get(size)
        if head is None:
            if len(self._head_cache) > 1024:
                self._head_cache.clear()
            head = self._head_cache[size] = encode_rmsg_head(ACCOUNT, SUBJECT_DATA, size)
        peers = state.peers
        for peer in peers.values():
            peer.route.send_message(head, payload)
        state.batches_sent += 1
        state.bytes_sent += size
        if peers:
            state.unacked.append((seq, size))
            state.lag_bytes += size

    # -- the gate -------------------------------------------------------------------

    def gate(self, connection: Any) -> bool:
        """
        The broker's mirror gate: True when ``connection``'s output must
        wait for the peers' acks (it is then released by
        ``connection.mirror_release()``, or failed by
        ``connection.mirror_fail(reason)`` -- at once, before this returns,
        when the live peers are already fewer than ``--mirror-min-standbys``
        in ``sync`` mode).
        """
        state = self.state
        needed = state.min_standbys
        if needed and state.sync and len(state.peers) < needed:
            # Its publish was taken while enough peers were live, and
            # they went before the output was asked about.
            state.producers_failed += 1
            connection.mirror_fail(unconfirmed(too_few_standbys(len(state.peers), needed)))
            return True
        if not state.peers:
            return False
        if state.catching_up:
            if state.sync or state.lag_bytes + state.behind_bytes > state.max_lag_bytes:
                # Its records go behind the catch-up: it waits for that.
                self.flush()
                state.waiting_behind.append(connection)
                state.producers_held += 1
                return True
            return False
        if state.sync:
            self.flush()
        elif state.lag_bytes <= state.max_lag_bytes:
            return False
        else:
            self.flush()
        target = state.seq
        if self._acked() >= target:
            return False
        state.waiting.append((target, connection))
        state.producers_held += 1
        return True

    def _acked(self) -> int:
        peers = self.state.peers
        if not peers:
            return self.state.seq
        return min(peer.acked for peer in peers.values())

    def release(self) -> None:
        """
        Acks came (or a peer went): forget the payloads every peer has
        acked, and release the producers waiting for them.
        """
        state = self.state
        acked = self._acked()
        unacked = state.unacked
        if unacked and unacked[0][0] <= acked:
            keep = 0
            freed = 0
            for seq, size in unacked:
                if seq > acked:
                    break
                keep += 1
                freed += size
            del unacked[:keep]
            state.lag_bytes -= freed
            if state.catching_up:
                self.acked()
            if not unacked and not state.sync and self.recorder.builder and self._flush_call is None:
                # What async mode gathered while the payload was on its way.
                self.flush()
        waiting = state.waiting
        if waiting and waiting[0][0] <= acked:
            done = [conn for seq, conn in waiting if seq <= acked]
            state.waiting = [(seq, conn) for seq, conn in waiting if seq > acked]
            for conn in done:
                conn.mirror_release()

    def release_all(self) -> None:
        """Release every producer waiting (no peer is left to ack)."""
        state = self.state
        waiting, state.waiting = state.waiting, []
        behind, state.waiting_behind = state.waiting_behind, []
        for _, conn in waiting:
            conn.mirror_release()
        for conn in behind:
            conn.mirror_release()

    def standbys_changed(self) -> None:
        """
        A peer came or went: with ``--mirror-min-standbys``, the recorder
        refuses publishes while fewer peers are live, and (``sync``) the
        producers waiting for the peers' acks are failed when they drop
        below it.
        """
        state = self.state
        needed = state.min_standbys
        if not needed:
            return
        live = len(state.peers)
        if live >= needed:
            self.recorder.refusing = None
            return
        cause = too_few_standbys(live, needed)
        self.recorder.refusing = cause
        if state.sync:
            self.fail_all(unconfirmed(cause))

    def fail_all(self, reason: str) -> None:
        """Fail every producer waiting at the gate with ``reason``."""
        state = self.state
        waiting, state.waiting = state.waiting, []
        behind, state.waiting_behind = state.waiting_behind, []
        failed = [conn for _, conn in waiting] + behind
        if not failed:
            return
        state.producers_failed += len(failed)
        self._log.warn(
            "mirror: {count} producers failed: {reason}", count=len(failed), reason=reason
        )
        for conn in failed:
            conn.mirror_fail(reason)
