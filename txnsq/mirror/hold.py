# -*- test-case-name: tests.test_tcp -*-
"""
A connection's output held for a mirrored topic (``--mirror-topics``):
the OK of a publish leaves only once the mirror has what it answers
(``--mirror-ack=sync``, or a peer lagging past the bound in ``async``).

:class:`MirrorHold` is mixed into :class:`txnsq.nsqd.tcp.NSQDProtocol`:
its ``flush_output`` asks :meth:`MirrorHold._mirror_gate` when a publish
to a mirrored topic set ``_mirror_wait``; the broker's mirror gate
(:mod:`txnsq.mirror.mirror`) calls :meth:`MirrorHold.mirror_release`
once the standby acknowledged.  While held, bytes the producer sends are
kept and reading pauses, so producers slow down instead of piling up.

With ``--mirror-min-standbys`` the gate may instead call
:meth:`MirrorHold.mirror_fail`: the answers not confirmed are replaced by
Go's fatal E_PUB_FAILED (E_MPUB_FAILED, E_DPUB_FAILED) and the connection
closes.  To know which answers those are, each publish to a mirrored topic
marks where its answer starts in the output (:meth:`MirrorHold._mirror_published`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, List, Tuple

from txnsq.nsqd.commands import STATE_CLOSED
from txnsq.protocol.errors import ProtocolError, protocol_error

if TYPE_CHECKING:
    from twisted.internet.interfaces import ITransport

    from txnsq.nsqd.broker import Broker

__all__ = ["MirrorHold"]


class MirrorHold:
    """Holding a connection's output (and then its input) for the mirror."""

    if TYPE_CHECKING:
        transport: ITransport
        broker: Broker
        state: int
        _blocked: bool
        _out: List[bytes]
        _out_size: int

        def flush_output(self) -> None: ...

        def _send_error(self, error: ProtocolError) -> None: ...

        def dataReceived(self, data: bytes) -> None: ...

    def _init_mirror_hold(self) -> None:
        # A publish to a mirrored topic sets _mirror_wait; flush_output
        # then asks the gate, which may hold the output.
        self._mirror_wait = False
        self._mirror_held = False
        # Reads that came while held (reading is paused at the first one).
        self._mirror_input: List[bytes] = []
        self._mirror_paused = False
        # Where in _out the first answer the mirror has not confirmed
        # starts, and its command (PUB, MPUB, DPUB); while held, the same
        # for the first publish answered since (confirmed by a later gate).
        self._mirror_mark = 0
        self._mirror_verb = b"PUB"
        self._mirror_next: Tuple[int, bytes] = (0, b"PUB")

    def _mirror_published(self, verb: bytes) -> None:
        """
        A ``verb`` (PUB, MPUB, DPUB) to a mirrored topic is about to be
        answered: the output asks the gate before it leaves, and the
        answer's place is marked (the first one since the gate was last
        asked) for :meth:`mirror_fail`.
        """
        if not self._mirror_wait:
            if self._mirror_held:
                self._mirror_next = (len(self._out), verb)
            else:
                self._mirror_mark = len(self._out)
                self._mirror_verb = verb
        self._mirror_wait = True

    def _mirror_gate(self) -> bool:
        """
        Output waits while the mirror has not confirmed the publishes it
        answers (``--mirror-ack=sync``, or a lagging peer): reading pauses,
        so producers slow down.  True while held.
        """
        if self._mirror_held:
            return True
        self._mirror_wait = False
        gate = self.broker.mirror_gate
        if gate is None:
            return False
        # Held from before the gate is asked: a gate that fails the
        # connection at once (mirror_fail) finds it held, and leaves it
        # closing, not held.  Reading is paused only if the producer sends
        # more meanwhile (_hold_input): one waiting for its OK costs no
        # pause and resume (two epoll_ctl calls a publish).
        self._mirror_held = True
        if gate(self):
            return True
        self._mirror_held = False
        return False

    def _hold_input(self, data: bytes) -> None:
        """Bytes read while held for the mirror: kept, and reading paused."""
        self._mirror_input.append(data)
        self._mirror_paused = True
        if self.transport is not None and not self._blocked:
            self.transport.pauseProducing()  # type: ignore[attr-defined]

    def mirror_release(self) -> None:
        """The mirror confirmed: write the held output, then read again (what was kept first)."""
        if not self._mirror_held:
            return
        self._mirror_held = False
        if self.state == STATE_CLOSED or self.transport is None:
            return
        if self._mirror_wait:
            # Published while held: theirs are the answers not confirmed now.
            self._mirror_mark, self._mirror_verb = self._mirror_next
        self.flush_output()
        if self._mirror_paused:
            self._mirror_paused = False
            if not self._blocked:
                self.transport.resumeProducing()  # type: ignore[attr-defined]
        if self._mirror_input and not self._mirror_held:
            kept, self._mirror_input = self._mirror_input, []
            self.dataReceived(kept[0] if len(kept) == 1 else b"".join(kept))

    def mirror_fail(self, reason: str) -> None:
        """
        The mirror cannot confirm the publishes whose answers are held
        (fewer live standbys than ``--mirror-min-standbys``): the output
        written before the first of them leaves, then, in place of its
        answer, Go's fatal error for its command (``E_PUB_FAILED PUB
        failed <reason>``, ``E_MPUB_FAILED``, ``E_DPUB_FAILED``), and the
        connection closes.  Every publish on this connection that got no
        answer has an unknown outcome: stored here, it may still be
        delivered (``reason`` says so); the bytes read while held are
        dropped, not run.
        """
        self._mirror_held = False
        self._mirror_wait = False
        self._mirror_input = []
        if self.state == STATE_CLOSED or self.transport is None:
            return
        out = self._out
        del out[self._mirror_mark :]
        self._out_size = sum(map(len, out))
        verb = self._mirror_verb.decode("ascii")
        self._send_error(protocol_error("E_%s_FAILED" % (verb,), "%s failed %s" % (verb, reason)))
