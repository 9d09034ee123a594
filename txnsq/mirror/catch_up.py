# -*- test-case-name: tests.test_mirror_catch_up,tests.test_cluster_mirror -*-
"""
The mirror's catch-up (a part of :class:`Mirror
<txnsq.mirror.mirror.Mirror>`): when a peer comes,
every mirrored channel's state and messages are sent again, the messages
in slices of :data:`CATCH_UP_SLICE` bytes a reactor turn, none while
:data:`CATCH_UP_WINDOW` bytes are unacked; what happens meanwhile follows
it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Optional

from twisted.internet.interfaces import IDelayedCall, IReactorTime

from txnsq.mirror.gate import AckGate
from txnsq.mirror.recorder import CHANNEL_OPS, FLUSH_SIZE
from txnsq.mirror.snapshot import channel_snapshot, topic_snapshot
from txnsq.mirror.state import MirrorState
from txnsq.protocol.mirror import OP_MESSAGES, RecordBuilder

if TYPE_CHECKING:
    from txnsq.nsqd.broker import Broker

__all__ = ["CATCH_UP_SLICE", "CATCH_UP_WINDOW", "CatchUp"]

#: Catch-up bytes sent per reactor turn (in payloads of FLUSH_SIZE).
CATCH_UP_SLICE = 1024 * 1024

#: Unacked bytes past which the catch-up waits for acks before sending more.
CATCH_UP_WINDOW = 8 * 1024 * 1024

#: No limit on the messages of one channel a catch-up reads.
_ALL = 1 << 62


class CatchUp:
    """
    The catch-up of the peers, in slices: when a peer comes
    (:meth:`start`), every mirrored topic's channels (created, paused)
    and unfinished messages are sent again through the gate, so that the
    new peer -- a restarted standby, or one back after the route was
    down -- holds what this node holds.  While it runs
    (``state.catching_up``), the gate keeps what is recorded, and the
    producers publishing, behind it.

    :param state: the mirror's state.
    :param clock: ``IReactorTime``.
    :param broker: nsqd's broker, whose mirrored topics are read.
    :param gate: the gate that sends the payloads
        (:class:`AckGate <txnsq.mirror.gate.AckGate>`).
    """

    def __init__(
        self, state: MirrorState, clock: IReactorTime, broker: Broker, gate: AckGate
    ) -> None:
        self.state = state
        self.clock = clock
        self.broker = broker
        self.gate = gate
        # The call sending the next slice, and whether a peer came while
        # the catch-up ran (another one follows).
        self._call: Optional[IDelayedCall] = None
        self._again = False

    def start(self) -> None:
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
        state = self.state
        if state.catching_up:
            # Under way: the new peer gets the rest of it, then another.
            self._again = True
            return
        self.gate.flush()
        states = RecordBuilder()
        queue = state.catch_up_queue
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
        state.catch_ups += 1
        if states:
            self.gate.send(states)
        state.catching_up = True
        state.catch_up_pos = 0
        self._continue()

    def _continue(self) -> None:
        """Send the catch-up's next slice; once all is sent, what was kept behind it."""
        state = self.state
        self._call = None
        if not state.catching_up:
            return
        queue = state.catch_up_queue
        sent = 0
        while queue and sent < CATCH_UP_SLICE and state.lag_bytes < CATCH_UP_WINDOW:
            topic, channel, messages = queue[0]
            start = end = state.catch_up_pos
            size = 0
            count = len(messages)
            while end < count and size < FLUSH_SIZE:
                size += len(messages[end])
                end += 1
            builder = RecordBuilder()
            builder.add(OP_MESSAGES, topic, channel, messages[start:end])
            self.gate.send(builder)
            sent += size
            state.catch_up_messages += end - start
            if end >= count:
                queue.popleft()
                state.catch_up_pos = 0
            else:
                state.catch_up_pos = end
        if queue:
            if state.lag_bytes < CATCH_UP_WINDOW:
                self._call = self.clock.callLater(0, self._continue)
            # Else the acks that bring the lag down send the next slice.
            return
        # All sent: the records kept meanwhile follow, in order, and the
        # producers waiting for them wait for their acks.
        state.catching_up = False
        behind, state.behind = state.behind, []
        state.behind_bytes = 0
        for builder in behind:
            self.gate.send(builder)
        if not (self._again and state.min_standbys):
            waiting, state.waiting_behind = state.waiting_behind, []
            target = state.seq
            state.waiting.extend((target, conn) for conn in waiting)
        # Else a peer came while this catch-up ran, and missed its start:
        # with --mirror-min-standbys those waiting wait for its own.
        self.gate.release()
        if self._again:
            self._again = False
            self.start()

    def acked(self) -> None:
        """Acks came during the catch-up: its next slice goes once the lag is under the window."""
        if self._call is None and self.state.lag_bytes < CATCH_UP_WINDOW:
            self._call = self.clock.callLater(0, self._continue)

    def end(self) -> None:
        """No peer left (or stopping): the catch-up under way is dropped."""
        state = self.state
        call, self._call = self._call, None
        if call is not None and call.active():
            call.cancel()
        state.catch_up_queue.clear()
        state.catch_up_pos = 0
        state.catching_up = False
        self._again = False
        state.behind = []
        state.behind_bytes = 0
