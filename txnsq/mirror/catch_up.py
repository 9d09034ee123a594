# -*- test-case-name: tests.test_cluster_mirror -*-
"""
The mirror's catch-up (:mod:`txnsq.mirror.mirror`): when a peer comes,
every mirrored channel's state and messages are sent again, the messages
in slices of :data:`CATCH_UP_SLICE` bytes a reactor turn, none while
:data:`CATCH_UP_WINDOW` bytes are unacked; what happens meanwhile follows
it.
"""

from __future__ import annotations

from typing import Any, Callable

from txnsq.mirror.recorder import CHANNEL_OPS, FLUSH_SIZE
from txnsq.mirror.snapshot import channel_snapshot, topic_snapshot
from txnsq.mirror.state import MirrorState
from txnsq.protocol.mirror import OP_MESSAGES, RecordBuilder

__all__ = ["CATCH_UP_SLICE", "CATCH_UP_WINDOW", "CatchUp"]

#: Catch-up bytes sent per reactor turn (in payloads of FLUSH_SIZE).
CATCH_UP_SLICE = 1024 * 1024

#: Unacked bytes past which the catch-up waits for acks before sending more.
CATCH_UP_WINDOW = 8 * 1024 * 1024

#: No limit on the messages of one channel a catch-up reads.
_ALL = 1 << 62


class CatchUp:
    """:class:`Mirror <txnsq.mirror.mirror.Mirror>`'s catch-up of the peers, in slices."""

    state: MirrorState

    broker: Any
    clock: Any
    _catch_up_call: Any
    _catch_up_again: bool
    # The sending's (txnsq.mirror.gate).
    flush: Callable[[], None]
    _send: Callable[[RecordBuilder], None]
    _release: Callable[[], None]

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
        if self.state.catching_up:
            # Under way: the new peer gets the rest of it, then another.
            self._catch_up_again = True
            return
        self.flush()
        states = RecordBuilder()
        queue = self.state.catch_up_queue
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
        self.state.catch_ups += 1
        if states:
            self._send(states)
        self.state.catching_up = True
        self.state.catch_up_pos = 0
        self._continue_catch_up()

    def _continue_catch_up(self) -> None:
        """Send the catch-up's next slice; once all is sent, what was kept behind it."""
        self._catch_up_call = None
        if not self.state.catching_up:
            return
        queue = self.state.catch_up_queue
        sent = 0
        while queue and sent < CATCH_UP_SLICE and self.state.lag_bytes < CATCH_UP_WINDOW:
            topic, channel, messages = queue[0]
            start = end = self.state.catch_up_pos
            size = 0
            count = len(messages)
            while end < count and size < FLUSH_SIZE:
                size += len(messages[end])
                end += 1
            builder = RecordBuilder()
            builder.add(OP_MESSAGES, topic, channel, messages[start:end])
            self._send(builder)
            sent += size
            self.state.catch_up_messages += end - start
            if end >= count:
                queue.popleft()
                self.state.catch_up_pos = 0
            else:
                self.state.catch_up_pos = end
        if queue:
            if self.state.lag_bytes < CATCH_UP_WINDOW:
                self._catch_up_call = self.clock.callLater(0, self._continue_catch_up)
            # Else the acks that bring the lag down send the next slice.
            return
        # All sent: the records kept meanwhile follow, in order, and the
        # producers waiting for them wait for their acks.
        self.state.catching_up = False
        behind, self.state.behind = self.state.behind, []
        self.state.behind_bytes = 0
        for builder in behind:
            self._send(builder)
        if not (self._catch_up_again and self.state.min_standbys):
            waiting, self.state.waiting_behind = self.state.waiting_behind, []
            target = self.state.seq
            self.state.waiting.extend((target, conn) for conn in waiting)
        # Else a peer came while this catch-up ran, and missed its start:
        # with --mirror-min-standbys those waiting wait for its own.
        self._release()
        if self._catch_up_again:
            self._catch_up_again = False
            self._catch_up()

    def _end_catch_up(self) -> None:
        """No peer left (or stopping): the catch-up under way is dropped."""
        call, self._catch_up_call = self._catch_up_call, None
        if call is not None and call.active():
            call.cancel()
        self.state.catch_up_queue.clear()
        self.state.catch_up_pos = 0
        self.state.catching_up = False
        self._catch_up_again = False
        self.state.behind = []
        self.state.behind_bytes = 0
