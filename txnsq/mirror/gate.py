# -*- test-case-name: tests.test_cluster_mirror -*-
"""
The mirror's sending and its ack gate (:mod:`txnsq.mirror.mirror`): the
records of a reactor turn go to every peer as one numbered payload; a
``sync`` producer (an ``async`` one past :data:`MAX_LAG_BYTES` unacked)
waits until every peer has acked the payload that carried its publish.

In ``async`` mode no producer waits for a payload, so while one is on its
way (not acked by every peer) the records of later turns are gathered and
sent as one payload when it is acked, or once :data:`~txnsq.mirror.recorder.FLUSH_SIZE` bytes
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

from typing import Any, Callable, Dict

from twisted.logger import Logger

from txnsq.mirror.catch_up import CATCH_UP_WINDOW
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
    :class:`Mirror <txnsq.mirror.mirror.Mirror>`'s sending of payloads and the
    gate holding producers until the peers have acked them.
    """

    state: MirrorState

    _log: Logger
    clock: Any
    recorder: MirrorRecorder
    _flush_call: Any
    _head_cache: Dict[int, bytes]
    # The catch-up's (txnsq.mirror.catch_up).
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
        :data:`~txnsq.mirror.recorder.FLUSH_SIZE` bytes are held (the recorder's ``full``).
        """
        self._flush_call = None
        if not self.state.sync and self.state.unacked and not self.state.catching_up:
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
        if self.state.catching_up:
            # Applied before the rest of the catch-up, a FIN would find
            # nothing to remove and the catch-up would bring its message
            # back: these records follow it.
            self.state.behind.append(builder)
            self.state.behind_bytes += builder.size
            recorder.builder = RecordBuilder()
            return
        self._send(builder)

    def _send(self, builder: RecordBuilder) -> None:
        """Send ``builder``'s records to every peer as the next numbered payload."""
        self.state.seq = seq = self.state.seq + 1
        payload = builder.encode(seq)
        size = len(payload)
        head = self._head_cache.get(size)
        if head is None:
            if len(self._head_cache) > 1024:
                self._head_cache.clear()
            head = self._head_cache[size] = encode_rmsg_head(ACCOUNT, SUBJECT_DATA, size)
        for peer in self.state.peers.values():
            peer.route.send_message(head, payload)
        self.state.batches_sent += 1
        self.state.bytes_sent += size
        if self.state.peers:
            self.state.unacked.append((seq, size))
            self.state.lag_bytes += size

    def gate(self, connection: Any) -> bool:
        """
        The broker's mirror gate: True when ``connection``'s output must
        wait for the peers' acks (it is then released by
        ``connection.mirror_release()``, or failed by
        ``connection.mirror_fail(reason)`` -- at once, before this returns,
        when the live peers are already fewer than ``--mirror-min-standbys``
        in ``sync`` mode).
        """
        needed = self.state.min_standbys
        if needed and self.state.sync and len(self.state.peers) < needed:
            # Its publish was taken while enough peers were live, and
            # they went before the output was asked about.
            self.state.producers_failed += 1
            connection.mirror_fail(unconfirmed(too_few_standbys(len(self.state.peers), needed)))
            return True
        if not self.state.peers:
            return False
        if self.state.catching_up:
            if self.state.sync or self.state.lag_bytes + self.state.behind_bytes > self.state.max_lag_bytes:
                # Its records go behind the catch-up: it waits for that.
                self.flush()
                self.state.waiting_behind.append(connection)
                self.state.producers_held += 1
                return True
            return False
        if self.state.sync:
            self.flush()
        elif self.state.lag_bytes <= self.state.max_lag_bytes:
            return False
        else:
            self.flush()
        target = self.state.seq
        if self._acked() >= target:
            return False
        self.state.waiting.append((target, connection))
        self.state.producers_held += 1
        return True

    def _acked(self) -> int:
        peers = self.state.peers
        if not peers:
            return self.state.seq
        return min(peer.acked for peer in peers.values())

    def _release(self) -> None:
        acked = self._acked()
        unacked = self.state.unacked
        if unacked and unacked[0][0] <= acked:
            keep = 0
            freed = 0
            for seq, size in unacked:
                if seq > acked:
                    break
                keep += 1
                freed += size
            del unacked[:keep]
            self.state.lag_bytes -= freed
            if (
                self.state.catching_up
                and self._catch_up_call is None
                and self.state.lag_bytes < CATCH_UP_WINDOW
            ):
                self._catch_up_call = self.clock.callLater(0, self._continue_catch_up)
            if not unacked and not self.state.sync and self.recorder.builder and self._flush_call is None:
                # What async mode gathered while the payload was on its way.
                self.flush()
        waiting = self.state.waiting
        if waiting and waiting[0][0] <= acked:
            done = [conn for seq, conn in waiting if seq <= acked]
            self.state.waiting = [(seq, conn) for seq, conn in waiting if seq > acked]
            for conn in done:
                conn.mirror_release()

    def _release_all(self) -> None:
        waiting, self.state.waiting = self.state.waiting, []
        behind, self.state.waiting_behind = self.state.waiting_behind, []
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
        needed = self.state.min_standbys
        if not needed:
            return
        live = len(self.state.peers)
        if live >= needed:
            self.recorder.refusing = None
            return
        cause = too_few_standbys(live, needed)
        self.recorder.refusing = cause
        if self.state.sync:
            self._fail_all(unconfirmed(cause))

    def _fail_all(self, reason: str) -> None:
        """Fail every producer waiting at the gate with ``reason``."""
        waiting, self.state.waiting = self.state.waiting, []
        behind, self.state.waiting_behind = self.state.waiting_behind, []
        failed = [conn for _, conn in waiting] + behind
        if not failed:
            return
        self.state.producers_failed += len(failed)
        self._log.warn(
            "mirror: {count} producers failed: {reason}", count=len(failed), reason=reason
        )
        for conn in failed:
            conn.mirror_fail(reason)
