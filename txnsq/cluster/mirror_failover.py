# -*- test-case-name: tests.test_cluster_mirror -*-
"""
The mirror's failover (:mod:`txnsq.cluster.mirror`): a peer's copy handed
to this node's channels, which deliver it, when the peer has been unrouted
for the timeout or comes back as a new process.
"""

from __future__ import annotations

from typing import Any, Dict, List, Optional, Tuple

from twisted.logger import Logger

from txnsq.cluster.mirror_exchange import Taken
from txnsq.nsqd.mirror import StandbyCopy

__all__ = ["Failover"]


class Failover:
    """:class:`Mirror <txnsq.cluster.mirror.Mirror>`'s takeover of a peer's copy."""

    _log: Logger
    broker: Any
    clock: Any
    copies: Dict[str, StandbyCopy]
    journal: Optional[Any]
    taken_ids: Dict[str, List[Tuple[str, Taken]]]
    taken_over: List[Dict[str, Any]]
    _timers: Dict[str, Any]

    # -- failover -----------------------------------------------------------------

    def _failover(self, node_id: str) -> None:
        self._timers.pop(node_id, None)
        self._take_over(node_id, "unreachable")

    def _take_over(self, node_id: str, reason: str) -> None:
        copy = self.copies.pop(node_id, None)
        if copy is None:
            return
        taken: Dict[Tuple[str, str], List[bytes]] = {}
        moved = copy.take_over(self.broker, taken, self.clock.seconds())
        if taken:
            self.taken_ids.setdefault(node_id, []).append((copy.epoch, taken))
        if self.journal is not None:
            self.journal.discard(node_id)
        self.taken_over.append(
            {
                "node_id": node_id,
                "epoch": copy.epoch,
                "reason": reason,
                "messages": moved,
                "at": self.clock.seconds(),
                "split_brain": False,
            }
        )
        self._log.warn(
            "mirror: took over {count} messages of {peer} ({reason})",
            count=moved,
            peer=node_id,
            reason=reason,
        )
