# -*- test-case-name: tests.test_storage_log -*-
"""
A retained log's retention: ``--retention-bytes`` and ``--retention-age``
over the partitions of one topic, enforced by deleting whole segments,
oldest first.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, List, Optional, Tuple

if TYPE_CHECKING:
    from txnsq.storage.log import PartitionLog, _Segment

__all__ = ["LogRetention"]


class LogRetention:
    """
    Deletes whole segments, oldest first, across a set of partitions (a
    topic): by bytes after any append that takes the total past the
    threshold, by age on a timer and after each roll.

    :ivar total: bytes retained over the partitions, kept up to date by
        them (:meth:`grew`, and as they drop segments).
    """

    def __init__(
        self,
        clock: Any,
        retention_bytes: Optional[int],
        retention_age: Optional[float],
        check_interval: float,
    ) -> None:
        self.clock = clock
        self.limit = retention_bytes
        self.age = retention_age
        self.check_interval = check_interval
        self.logs: List[PartitionLog] = []
        self.total = 0
        self.threshold = float("inf")
        self._call: Any = None

    def start(self, logs: List["PartitionLog"]) -> None:
        self.logs = logs
        self.total = sum(log.retained_bytes for log in logs)
        self.enforce()

    def grew(self, count: int) -> None:
        self.total += count
        if self.total >= self.threshold:
            self.enforce()

    def enforce(self) -> None:
        if self.age is not None:
            cutoff = int((self.clock.seconds() - self.age) * 1e9)
            for log in self.logs:
                log.expire(cutoff)
        limit = self.limit
        if limit is not None:
            while True:
                oldest = self._oldest()
                if oldest is None or self.total - oldest[1].size < limit:
                    break
                oldest[0].drop_first_segment("retention bytes %d exceeded" % (limit,))
        oldest = self._oldest() if limit is not None else None
        self.threshold = float("inf") if oldest is None or limit is None else limit + oldest[1].size
        if self.age is not None and self._call is None:
            self._call = self.clock.callLater(self.check_interval, self._tick)

    def _oldest(self) -> Optional[Tuple["PartitionLog", _Segment]]:
        best: Optional[Tuple[PartitionLog, _Segment]] = None
        for log in self.logs:
            segment = log.oldest_sealed()
            if segment is not None and (best is None or segment.newest < best[1].newest):
                best = (log, segment)
        return best

    def _tick(self) -> None:
        self._call = None
        self.enforce()

    def stop(self) -> None:
        if self._call is not None:
            if self._call.active():
                self._call.cancel()
            self._call = None
