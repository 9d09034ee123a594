# -*- test-case-name: tests.test_cluster_mirror -*-
"""
A mirroring txnsq peer routed now (:mod:`txnsq.mirror.mirror`), and the
account the mirror's internal subjects travel in.
"""

from __future__ import annotations

from txnsq.cluster.route import RouteProtocol

__all__ = ["ACCOUNT", "MirrorPeer"]

#: The account internal subjects travel in.
ACCOUNT = "$G"


class MirrorPeer:
    """A mirroring txnsq peer routed now."""

    __slots__ = ("server_id", "route", "node_id", "epoch", "acked", "up_at", "heard")

    def __init__(self, route: RouteProtocol, node_id: str, epoch: str, now: float) -> None:
        self.server_id = route.server_id or ""
        self.route = route
        self.node_id = node_id
        self.epoch = epoch
        self.acked = 0
        self.up_at = now
        #: When a mirror message of it last came.
        self.heard = now
