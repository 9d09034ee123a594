# -*- test-case-name: tests.test_mirror_heartbeat,tests.test_cluster_mirror -*-
"""
The mirror's heartbeat (a part of :class:`Mirror
<txnsq.mirror.mirror.Mirror>`): every mirroring peer is pinged every
``heartbeat`` seconds, and one silent past the limit is treated as
unrouted until it is heard again.
"""

from __future__ import annotations

from typing import Callable, Optional, Tuple

from twisted.internet.interfaces import IReactorTime
from twisted.internet.task import LoopingCall
from twisted.logger import Logger

from txnsq.mirror.peer import ACCOUNT
from txnsq.mirror.state import MirrorState
from txnsq.protocol.mirror import SUBJECT_PING
from txnsq.protocol.nats_route import encode_rmsg_head

__all__ = ["Heartbeat", "heartbeat_of"]

_PING_HEAD = encode_rmsg_head(ACCOUNT, SUBJECT_PING, 0)


def heartbeat_of(failover_timeout: float) -> Tuple[float, float]:
    """
    The default ``(heartbeat, silence)`` for a failover timeout: a ping
    every quarter of it (0.25 to 5 s), a peer silent for as long as the
    timeout itself (at least 2 s: a loaded machine's pauses are not a
    hang) treated as unrouted.
    """
    return max(0.25, min(failover_timeout / 4.0, 5.0)), max(failover_timeout, 2.0)


class Heartbeat:
    """
    The mirror's pings, and its watch for silent peers: every
    ``state.heartbeat[0]`` seconds each peer is sent an empty
    ``$NSQ.mirror.ping``; a peer not heard from (``MirrorPeer.heard``)
    for ``state.heartbeat[1]`` seconds is treated as unrouted until it is
    heard again -- the routes of such peers are kept in
    ``state.silenced``, and still pinged, so that a peer waking up hears
    us.  ``(0, 0)``: no heartbeat.

    :param state: the mirror's state: its peers, the silenced routes and
        the count of silences.
    :param clock: ``IReactorTime``.
    :param route_down: called with the route server id of a peer found
        silent (the mirror forgets it as if its route had gone).
    """

    _log = Logger()

    def __init__(
        self, state: MirrorState, clock: IReactorTime, route_down: Callable[[str], None]
    ) -> None:
        self.state = state
        self.clock = clock
        self.route_down = route_down
        self._beats: Optional[LoopingCall] = None

    def start(self) -> None:
        """Ping every interval from now on (none with no heartbeat)."""
        interval = self.state.heartbeat[0]
        if interval > 0 and self._beats is None:
            self._beats = LoopingCall(self.beat)
            self._beats.clock = self.clock
            self._beats.start(interval, now=False)

    def stop(self) -> None:
        """Ping no more."""
        beats, self._beats = self._beats, None
        if beats is not None and beats.running:
            beats.stop()

    def beat(self) -> None:
        """Ping every peer; a peer silent past the limit is treated as unrouted."""
        state = self.state
        now = self.clock.seconds()
        limit = state.heartbeat[1]
        for server_id, peer in list(state.peers.items()):
            if now - peer.heard > limit:
                state.silences += 1
                self._log.warn(
                    "mirror: peer {peer} silent for {seconds:.1f}s: treated as down",
                    peer=peer.node_id,
                    seconds=now - peer.heard,
                )
                route = peer.route
                self.route_down(server_id)
                state.silenced[server_id] = route
            else:
                peer.route.send_message(_PING_HEAD, b"")
        for route in state.silenced.values():
            # Still routed: our pings let it hear us again when it wakes.
            route.send_message(_PING_HEAD, b"")
