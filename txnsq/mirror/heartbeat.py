# -*- test-case-name: tests.test_cluster_mirror -*-
"""
The mirror's heartbeat (:mod:`txnsq.mirror.mirror`): every mirroring peer
is pinged every ``heartbeat`` seconds, and one silent past the limit is
treated as unrouted until it is heard again.
"""

from __future__ import annotations

from typing import Any, Callable, Tuple

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
    """:class:`Mirror <txnsq.mirror.mirror.Mirror>`'s pings, and its watch for silent peers."""

    state: MirrorState

    _log: Logger
    clock: Any
    route_down: Callable[[str], None]

    # -- heartbeats -----------------------------------------------------------------

    def _beat(self) -> None:
        """Ping every peer; a peer silent past the limit is treated as unrouted."""
        now = self.clock.seconds()
        limit = self.state.heartbeat[1]
        for server_id, peer in list(self.state.peers.items()):
            if now - peer.heard > limit:
                self.state.silences += 1
                self._log.warn(
                    "mirror: peer {peer} silent for {seconds:.1f}s: treated as down",
                    peer=peer.node_id,
                    seconds=now - peer.heard,
                )
                route = peer.route
                self.route_down(server_id)
                self.state.silenced[server_id] = route
            else:
                peer.route.send_message(_PING_HEAD, b"")
        for route in self.state.silenced.values():
            # Still routed: our pings let it hear us again when it wakes.
            route.send_message(_PING_HEAD, b"")
