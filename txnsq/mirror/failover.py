# -*- test-case-name: tests.test_mirror_failover,tests.test_cluster_mirror -*-
"""
The mirror's failover (a part of :class:`Mirror
<txnsq.mirror.mirror.Mirror>`): a peer's copy handed
to this node's channels, which deliver it, when the peer has been unrouted
for the timeout or comes back as a new process -- by one node only, the
designated taker (:meth:`Failover.taker_of`); the others keep their copy
until it is safe to drop or the taker is lost too.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Dict, List, Optional, Tuple

from twisted.internet.interfaces import IDelayedCall, IReactorTime
from twisted.logger import Logger

from txnsq.mirror.standby import StandbyCopy
from txnsq.mirror.state import MirrorState

if TYPE_CHECKING:
    from txnsq.mirror.journal import CopyJournal
    from txnsq.nsqd.broker import Broker

__all__ = ["Failover"]


class Failover:
    """
    The takeover of lost peers' copies.  A peer unrouted for
    ``state.failover_timeout`` (:meth:`schedule`), or back as a new
    process (:meth:`fail_over`), has its copy in ``state.copies`` handed
    to this node's channels when this node is its taker; else the copy is
    kept aside (``state.kept``) until the taker has it, or is lost too.
    Takeovers are counted in ``state.taken_over``, their ids kept in
    ``state.taken_ids`` for the fail-back exchange.

    :param state: the mirror's state.
    :param clock: ``IReactorTime``.
    :param broker: nsqd's broker, whose topics take the copies over.
    :param journal: where the copies are kept across restarts (a
        :class:`CopyJournal <txnsq.mirror.journal.CopyJournal>`: a copy
        taken over or dropped is discarded there), or ``None``.
    """

    _log = Logger()

    def __init__(
        self,
        state: MirrorState,
        clock: IReactorTime,
        broker: Broker,
        journal: Optional[CopyJournal] = None,
    ) -> None:
        self.state = state
        self.clock = clock
        self.broker = broker
        self.journal = journal
        # Per unrouted peer (node id): the call that fails it over.
        self._timers: Dict[str, IDelayedCall] = {}
        # Per kept copy's node id: the call that drops it, a timeout after
        # its node came back as a new process with its taker routed.
        self._drops: Dict[str, IDelayedCall] = {}

    def schedule(self, node_id: str) -> None:
        """
        ``node_id`` is unrouted: it is lost, and its copy fails over,
        after the timeout (unless :meth:`cancel`).
        """
        if node_id not in self._timers:
            self._timers[node_id] = self.clock.callLater(
                self.state.failover_timeout, self.timed_out, node_id
            )

    def cancel(self, node_id: str) -> None:
        """``node_id`` is routed again before its timeout: no failover."""
        timer = self._timers.pop(node_id, None)
        if timer is not None and timer.active():
            timer.cancel()

    def stop(self) -> None:
        """Cancel every pending failover and drop."""
        for calls in (self._timers, self._drops):
            for call in calls.values():
                if call.active():
                    call.cancel()
            calls.clear()

    # -- the taker ------------------------------------------------------------------

    def taker_of(self, node_id: str) -> str:
        """
        The node that takes over ``node_id``'s copy: the smallest node id
        among this node, its routed peers and its peers unrouted for less
        than the timeout, ``node_id`` excepted.
        """
        candidates = {self.state.node_id}
        candidates.update(peer.node_id for peer in self.state.peers.values())
        candidates.update(other for other in self.state.down_since if other not in self.state.lost)
        candidates.discard(node_id)
        return min(candidates)

    def _routed_epoch(self, node_id: str) -> Optional[str]:
        """The epoch ``node_id`` is routed in now, or None."""
        for peer in self.state.peers.values():
            if peer.node_id == node_id:
                return peer.epoch
        return None

    # -- failover -----------------------------------------------------------------

    def timed_out(self, node_id: str) -> None:
        """``node_id`` has been unrouted for the timeout: lost; its copy fails over."""
        self._timers.pop(node_id, None)
        self.state.lost.add(node_id)
        self.fail_over(node_id, "unreachable")
        self.reassess("taker lost")

    def fail_over(self, node_id: str, reason: str) -> None:
        """Take over ``node_id``'s copy if this node is its taker; else keep it aside."""
        if self.taker_of(node_id) == self.state.node_id:
            self._take_over(node_id, reason)
            return
        copy = self.state.copies.pop(node_id, None)
        if copy is None:
            return
        self.state.kept[node_id] = copy
        self._log.info(
            "mirror: {peer} {reason}: {taker} takes over its {count} messages; "
            "copy kept here until that is safe",
            peer=node_id,
            reason=reason,
            taker=self.taker_of(node_id),
            count=copy.count(),
        )
        self.reassess(reason)

    def reassess(self, reason: str) -> None:
        """
        The view changed: each kept copy is taken over if this node is now
        its taker, or dropped if its node is back as a new process while its
        taker is routed (the taker delivers it).
        """
        for node_id, copy in list(self.state.kept.items()):
            taker = self.taker_of(node_id)
            if taker == self.state.node_id:
                self._cancel_drop(node_id)
                self._take_over(node_id, reason, self.state.kept.pop(node_id))
                continue
            epoch = self._routed_epoch(node_id)
            if epoch is None or epoch == copy.epoch or self._routed_epoch(taker) is None:
                self._cancel_drop(node_id)
            elif node_id not in self._drops:
                # Not at once: the taker may not have seen the restart yet
                # (it takes over then, or at its own timeout, and mirrors
                # what it took to us as its own records).
                self._drops[node_id] = self.clock.callLater(
                    self.state.failover_timeout, self._drop_kept, node_id
                )

    def _cancel_drop(self, node_id: str) -> None:
        call = self._drops.pop(node_id, None)
        if call is not None and call.active():
            call.cancel()

    def _drop_kept(self, node_id: str) -> None:
        """Drop the kept copy of ``node_id`` if its taker is still routed and it still is not this node."""
        self._drops.pop(node_id, None)
        copy = self.state.kept.get(node_id)
        if copy is None:
            return
        taker = self.taker_of(node_id)
        epoch = self._routed_epoch(node_id)
        if (
            taker != self.state.node_id
            and epoch is not None
            and epoch != copy.epoch
            and self._routed_epoch(taker) is not None
        ):
            del self.state.kept[node_id]
            if self.journal is not None and node_id not in self.state.copies:
                self.journal.discard(node_id)
            self._log.info(
                "mirror: dropped kept copy of {peer} ({count} messages): "
                "{taker} took it over",
                peer=node_id,
                count=copy.count(),
                taker=taker,
            )

    def _take_over(self, node_id: str, reason: str, copy: Optional[StandbyCopy] = None) -> None:
        if copy is None:
            copy = self.state.copies.pop(node_id, None)
        if copy is None:
            return
        taken: Dict[Tuple[str, str], List[bytes]] = {}
        moved = copy.take_over(self.broker, taken, self.clock.seconds())
        if taken:
            self.state.taken_ids.setdefault(node_id, []).append((copy.epoch, taken))
        if self.journal is not None and node_id not in self.state.copies:
            self.journal.discard(node_id)
        self.state.taken_over.append(
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
