# -*- test-case-name: tests.test_mirror_hold,tests.test_tcp -*-
"""
A V2 connection's output held for a mirrored topic (``--mirror-topics``):
the OK of a publish leaves only once the mirror has what it answers
(``--mirror-ack=sync``, or a peer lagging past the bound in ``async``).

:class:`MirrorHold` is the bookkeeping, with no IO: the connection
(:class:`txnsq.nsqd.tcp.NSQDProtocol`) tells it of each publish to a
mirrored topic it answers (:meth:`MirrorHold.published`), asks it before
its output leaves (:meth:`MirrorHold.ask`, which asks the broker's
mirror gate), and keeps the bytes read meanwhile in it
(:meth:`MirrorHold.keep`), pausing its transport; the gate
(:mod:`txnsq.mirror.gate`) calls the connection's ``mirror_release``
once the standbys acknowledged, and the connection, no longer
:attr:`held <MirrorHold.held>`, writes its output (asking again) and
reads again (:meth:`MirrorHold.take_input`).  Producers slow down
instead of piling up.

With ``--mirror-min-standbys`` the gate may instead call the
connection's ``mirror_fail``: the answers not confirmed are replaced by
Go's fatal E_PUB_FAILED (E_MPUB_FAILED, E_DPUB_FAILED) and the
connection closes.  To know which answers those are, each publish to a
mirrored topic marks where its answer starts in the output, and
:meth:`MirrorHold.fail` says where to cut it and with what error.
"""

from __future__ import annotations

from typing import Any, Callable, List, Optional, Tuple

from txnsq.protocol.errors import ProtocolError, protocol_error

__all__ = ["MirrorHold"]


class MirrorHold:
    """
    One connection's output held for the mirror.

    :ivar wait: a publish to a mirrored topic was answered since the gate
        was last asked: the output asks before it leaves.
    :ivar held: the output waits for the gate's ``mirror_release`` or
        ``mirror_fail`` (reads are kept meanwhile); the connection clears
        it when the gate releases it, and asks again (:meth:`ask`) as its
        output leaves.
    :ivar kept: the reads that came while held, in order; :meth:`take_input`
        gives them back.
    :ivar paused: reading was paused while held (at the first read kept);
        the connection resumes it, and clears this, once released.
    """

    __slots__ = ("wait", "held", "kept", "paused", "_mark", "_verb", "_next")

    def __init__(self) -> None:
        self.wait = False
        self.held = False
        self.kept: List[bytes] = []
        self.paused = False
        # Where in the output the first answer the mirror has not
        # confirmed starts, and its command (PUB, MPUB, DPUB); while held,
        # the same for the first publish answered since, which becomes
        # the first unconfirmed one once the hold is released (None: no
        # publish answered while held).
        self._mark = 0
        self._verb = b"PUB"
        self._next: Optional[Tuple[int, bytes]] = None

    def published(self, verb: bytes, position: int) -> None:
        """
        A ``verb`` (PUB, MPUB, DPUB) to a mirrored topic is about to be
        answered at ``position`` in the output (its length now): the
        output asks the gate before it leaves, and the answer's place is
        marked (the first one since the gate was last asked) for
        :meth:`fail`.
        """
        if not self.wait:
            if self.held:
                self._next = (position, verb)
            else:
                self._mark = position
                self._verb = verb
        self.wait = True

    def ask(self, gate: Optional[Callable[[Any], bool]], connection: Any) -> bool:
        """
        Whether the output must wait: it does while held, or when ``gate``
        (the broker's mirror gate, ``None`` without mirroring) holds
        ``connection``.  The connection is held from before the gate is
        asked: a gate that fails it at once (``mirror_fail``) finds it
        held, and leaves it closing, not held.
        """
        if self.held:
            return True
        following = self._next
        if following is not None:
            # Released since: the first publish answered while held is the
            # first not confirmed now (the output before it has left).
            self._mark, self._verb = following
            self._next = None
        self.wait = False
        if gate is None:
            return False
        self.held = True
        if gate(connection):
            return True
        self.held = False
        return False

    def keep(self, data: bytes) -> None:
        """
        Bytes read while held: kept for :meth:`take_input` (the connection
        pauses reading; one waiting for its OK costs no pause and resume,
        two epoll_ctl calls a publish).
        """
        self.kept.append(data)
        self.paused = True

    def take_input(self) -> Optional[bytes]:
        """The bytes kept while held, to be read now (``None``: none, or held again)."""
        if not self.kept or self.held:
            return None
        kept, self.kept = self.kept, []
        return kept[0] if len(kept) == 1 else b"".join(kept)

    def fail(self, reason: str) -> Tuple[int, ProtocolError]:
        """
        The mirror cannot confirm the publishes whose answers are held
        (fewer live standbys than ``--mirror-min-standbys``): where the
        output is cut (the first answer not confirmed), and Go's fatal
        error for its command in its place (``E_PUB_FAILED PUB failed
        <reason>``, ``E_MPUB_FAILED``, ``E_DPUB_FAILED``).  Every publish
        on the connection that got no answer has an unknown outcome: the
        bytes read while held are dropped, not run.
        """
        following = self._next
        if following is not None and not self.held:
            # Released, then failed before the output was asked again.
            self._mark, self._verb = following
        self._next = None
        self.held = False
        self.wait = False
        self.kept = []
        verb = self._verb.decode("ascii")
        return self._mark, protocol_error("E_%s_FAILED" % (verb,), "%s failed %s" % (verb, reason))
