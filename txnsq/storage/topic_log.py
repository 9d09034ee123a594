# -*- test-case-name: tests.test_storage_log -*-
"""
A topic's retained log: its partition logs (:class:`PartitionLog <txnsq.storage.log.PartitionLog>`)
in MetaQ's directory layout, appended to in turn, with retention over the
whole topic.
"""

from __future__ import annotations

import os
from typing import Any, List, Optional, Sequence, Tuple

from txnsq.storage.log import (
    INDEX_INTERVAL,
    RETENTION_CHECK_INTERVAL,
    SEGMENT_BYTES,
    PartitionLog,
    PartitionStats,
    _Record,
)
from txnsq.storage.log_retention import LogRetention
from txnsq.storage.sync_worker import SyncWorker

__all__ = ["TopicLog"]


class TopicLog:
    """
    A topic's retained log: ``partitions`` partition logs in
    ``directory/TOPIC-N`` (MetaQ's layout), appended to in turn, with
    retention over the whole topic.

    The segment size is capped at ``retention_bytes / partitions`` so that
    the segments still written to never hold more than the limit between
    them: the topic then never holds more than ``retention_bytes`` plus
    one segment.  Other parameters are :class:`PartitionLog`'s.
    """

    def __init__(
        self,
        directory: str,
        topic: str,
        partitions: int,
        clock: Any,
        segment_bytes: int = SEGMENT_BYTES,
        index_interval: int = INDEX_INTERVAL,
        sync_every: int = 2500,
        sync_timeout: float = 2.0,
        retention_bytes: Optional[int] = None,
        retention_age: Optional[float] = None,
        sync_worker: Optional[SyncWorker] = None,
        retention_check_interval: float = RETENTION_CHECK_INTERVAL,
    ) -> None:
        if partitions < 1:
            raise ValueError("a topic has at least one partition")
        if retention_bytes is not None:
            segment_bytes = max(1, min(segment_bytes, retention_bytes // partitions))
        self.topic = topic
        self._retention: Optional[LogRetention] = None
        if retention_bytes is not None or retention_age is not None:
            self._retention = LogRetention(
                clock, retention_bytes, retention_age, retention_check_interval
            )
        self.partitions: List[PartitionLog] = [
            PartitionLog(
                os.path.join(directory, "%s-%d" % (topic, number)),
                clock,
                name="%s-%d" % (topic, number),
                segment_bytes=segment_bytes,
                index_interval=index_interval,
                sync_every=sync_every,
                sync_timeout=sync_timeout,
                sync_worker=sync_worker,
                _retention=self._retention,
            )
            for number in range(partitions)
        ]
        if self._retention is not None:
            self._retention.start(self.partitions)
        self._next = 0

    def append(self, msg_id: bytes, flag: int, data: bytes, timestamp_ns: int) -> Tuple[int, int]:
        """
        Append one record to the next partition in turn: ``(partition, offset)``.

        :raises OSError: as :meth:`append_many`.
        """
        number = self._next
        offset = self.partitions[number].append(msg_id, flag, data, timestamp_ns)
        self._next = (number + 1) % len(self.partitions)
        return number, offset

    def append_many(self, records: Sequence[_Record], timestamp_ns: int) -> Tuple[int, int]:
        """
        Append a batch (an MPUB) to the next partition in turn, with one
        write: ``(partition, offset of the first record)``.

        :raises OSError: it could not be written; the partition is unchanged
            and the next batch goes to the same partition's turn again.
        """
        number = self._next
        offset = self.partitions[number].append_many(records, timestamp_ns)
        self._next = (number + 1) % len(self.partitions)
        return number, offset

    def append_id_batch(
        self, ids: Sequence[int], bodies: Sequence[bytes], timestamp_ns: int
    ) -> Tuple[int, int]:
        """
        Append NSQ messages (a PUB run or an MPUB; ids as integers) to the
        next partition in turn, with one write: ``(partition, offset of
        the first record)``.

        :raises OSError: as :meth:`append_many`.
        """
        number = self._next
        offset = self.partitions[number].append_id_batch(ids, bodies, timestamp_ns)
        self._next = (number + 1) % len(self.partitions)
        return number, offset

    @property
    def retained_bytes(self) -> int:
        """Bytes of records retained over every partition."""
        return sum(partition.retained_bytes for partition in self.partitions)

    def stats(self) -> List[PartitionStats]:
        """Each partition's offsets, bytes and segment count."""
        return [partition.stats() for partition in self.partitions]

    def enforce_retention(self) -> None:
        """Delete what the topic's retention no longer keeps."""
        if self._retention is not None:
            self._retention.enforce()

    def sync(self) -> None:
        """Sync every partition now."""
        for partition in self.partitions:
            partition.sync()

    def close(self) -> None:
        """Stop the retention timer; sync and close every partition."""
        if self._retention is not None:
            self._retention.stop()
        for partition in self.partitions:
            partition.close()
