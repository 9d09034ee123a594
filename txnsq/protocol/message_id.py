# -*- test-case-name: tests.test_guid -*-
"""
The layout of a message id as Go nsqd v1.x makes them (a snowflake)::

    (ts - TWEPOCH) << 22 | node_id << 12 | sequence

``ts`` is the time in "pseudo-milliseconds" (unix nanoseconds >> 20, about
1.05 ms).  Readers of retained topics use the time field to find what was
published since a moment (rewinds, ``nsq_log --since``, Spark's
``timestamp:`` offsets); :mod:`txnsq.nsqd.guid` makes the ids.
"""

from __future__ import annotations

__all__ = [
    "ID_TIME_SHIFT",
    "NODE_ID_BITS",
    "SEQUENCE_BITS",
    "TWEPOCH",
    "id_time",
    "id_time_threshold",
]

#: Go nsqd's epoch: (2012-10-28 16:23:42 UTC).UnixNano() >> 20.
TWEPOCH = 1288834974288
NODE_ID_BITS = 10
SEQUENCE_BITS = 12
#: Where the time field starts in an id.
ID_TIME_SHIFT = SEQUENCE_BITS + NODE_ID_BITS


def id_time_threshold(timestamp_ns: int) -> int:
    """
    The time field that an id made at ``timestamp_ns`` (unix nanoseconds)
    carries: a record whose :func:`id_time` is below it was published
    before that time.  Times before the epoch count as the epoch.
    """
    return max(0, (timestamp_ns >> 20) - TWEPOCH)


def id_time(record_id: int) -> int:
    """The time field of a message id (compare with :func:`id_time_threshold`)."""
    return record_id >> ID_TIME_SHIFT
