# -*- test-case-name: tests.test_cluster_mirror -*-
"""
The mirror's sending and its ack gate (:mod:`txnsq.mirror.mirror`): the
records of a reactor turn go to every peer as one numbered payload; a
``sync`` producer (an ``async`` one past :data:`MAX_LAG_BYTES` unacked)
waits until every peer has acked the payload that carried its publish.

In ``async`` mode no producer waits for a payload, so while one is on its
way (not acked by every peer) the records of later turns are gathered and
sent as one payload when it is acked, or once :data:`FLUSH_SIZE` bytes
are held: under load the payloads grow instead of multiplying, and with
them fall the sends, the acks and the reactor turns they cost both nodes.

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

from typing import Any, Callable, Dict, List, Tuple

from twisted.logger import Logger

from txnsq.mirror.catch_up import CATCH_UP_WINDOW
from txnsq.mirror.peer import ACCOUNT, MirrorPeer
from txnsq.mirror.recorder import FLUSH_SIZE, MirrorRecorder
from txnsq.protocol.mirror import SUBJECT_DATA, RecordBuilder
from txnsq.protocol.nats_route import encode_rmsg_head

__all__ = ["MAX_LAG_BYTES", "AckGate", "too_few_standbys", "unconfirmed"]

#: Unacked bytes past which ``async`` mode holds producers too.
MAX_LAG_BYTES = 64 * 1024 * 1024


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
    :class:`Mirror <txnsq.mirror.mirror.Mirror>`'s sending of payloads and the
    gate holding producers until the peers have acked them.
    """

    _log: Logger
    clock: Any
    peers: Dict[str, MirrorPeer]
    recorder: MirrorRecorder
    sync: bool
    max_lag_bytes: int
    min_standbys: int
    seq: int
    batches_sent: int
    bytes_sent: int
    producers_held: int
    producers_failed: int
    lag_bytes: int
    _flush_call: Any
    _head_cache: Dict[int, bytes]
    _unacked: List[Tuple[int, int]]
    _waiting: List[Tuple[int, Any]]
    # The catch-up's (txnsq.mirror.catch_up).
    _catching_up: bool
    _behind: List[RecordBuilder]
    _behind_bytes: int
    _waiting_behind: List[Any]
    _catch_up_call: Any
    _continue_catch_up: Callable[[], None]

    # -- sending ------------------------------------------------------------------

    def _schedule(self) -> None:
        if self._flush_call is None:
            self._flush_call = self.clock.callLater(0, self._turn_ended)

    def _turn_ended(self) -> None:
        """
        The reactor turn that gathered records ended: send them, unless
        (``async``) a payload is still unacked; then they go with what
        follows when it is acked (:meth:`_release`), or when
        :data:`FLUSH_SIZE` bytes are held (the recorder's ``full``).
        """
        self._flush_call = None
        if not self.sync and self._unacked and not self._catching_up:
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
        ``connection.mirror_release()``, or failed by
        ``connection.mirror_fail(reason)`` -- at once, before this returns,
        when the live peers are already fewer than ``--mirror-min-standbys``
        in ``sync`` mode).
        """
        needed = self.min_standbys
        if needed and self.sync and len(self.peers) < needed:
            # Its publish was taken while enough peers were live, and
            # they went before the output was asked about.
            self.producers_failed += 1
            connection.mirror_fail(unconfirmed(too_few_standbys(len(self.peers), needed)))
            return True
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
            if not unacked and not self.sync and self.recorder.builder and self._flush_call is None:
                # What async mode gathered while the payload was on its way.
                self.flush()
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

    def _standbys_changed(self) -> None:
        """
        A peer came or went: with ``--mirror-min-standbys``, the recorder
        refuses publishes while fewer peers are live, and (``sync``) the
        producers waiting for the peers' acks are failed when they drop
        below it.
        """
        needed = self.min_standbys
        if not needed:
            return
        live = len(self.peers)
        if live >= needed:
            self.recorder.refusing = None
            return
        cause = too_few_standbys(live, needed)
        self.recorder.refusing = cause
        if self.sync:
            self._fail_all(unconfirmed(cause))

    def _fail_all(self, reason: str) -> None:
        """Fail every producer waiting at the gate with ``reason``."""
        waiting, self._waiting = self._waiting, []
        behind, self._waiting_behind = self._waiting_behind, []
        failed = [conn for _, conn in waiting] + behind
        if not failed:
            return
        self.producers_failed += len(failed)
        self._log.warn(
            "mirror: {count} producers failed: {reason}", count=len(failed), reason=reason
        )
        for conn in failed:
            conn.mirror_fail(reason)
