# -*- test-case-name: tests.test_cluster_mirror -*-
"""
A connection's output held for a mirrored topic (``--mirror-topics``):
the OK of a publish leaves only once the mirror has what it answers
(``--mirror-ack=sync``, or a peer lagging past the bound in ``async``).

:class:`MirrorHold` is mixed into :class:`txnsq.nsqd.tcp.NSQDProtocol`:
its ``flush_output`` asks :meth:`MirrorHold._mirror_gate` when a publish
to a mirrored topic set ``_mirror_wait``; the broker's mirror gate
(:mod:`txnsq.cluster.mirror`) calls :meth:`MirrorHold.mirror_release`
once the standby acknowledged.  While held, bytes the producer sends are
kept and reading pauses, so producers slow down instead of piling up.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, List

from txnsq.nsqd.commands import STATE_CLOSED

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

        def flush_output(self) -> None: ...

        def dataReceived(self, data: bytes) -> None: ...

    def _init_mirror_hold(self) -> None:
        # A publish to a mirrored topic sets _mirror_wait; flush_output
        # then asks the gate, which may hold the output.
        self._mirror_wait = False
        self._mirror_held = False
        # Reads that came while held (reading is paused at the first one).
        self._mirror_input: List[bytes] = []
        self._mirror_paused = False

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
        if gate is None or not gate(self):
            return False
        # Reading is paused only if the producer sends more meanwhile
        # (_hold_input): one waiting for its OK costs no pause and resume
        # (two epoll_ctl calls a publish).
        self._mirror_held = True
        return True

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
        self.flush_output()
        if self._mirror_paused:
            self._mirror_paused = False
            if not self._blocked:
                self.transport.resumeProducing()  # type: ignore[attr-defined]
        if self._mirror_input and not self._mirror_held:
            kept, self._mirror_input = self._mirror_input, []
            self.dataReceived(kept[0] if len(kept) == 1 else b"".join(kept))
