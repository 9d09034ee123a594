# -*- test-case-name: tests.test_nsqd_mirror -*-
"""
What a topic and its channels hold, read for a peer's catch-up
(:mod:`txnsq.mirror.catch_up`) and dropped by the fail-back exchange
(:mod:`txnsq.mirror.exchange`); no IO.
"""

from __future__ import annotations

import heapq
from typing import Any, Collection, List, Set, Tuple

__all__ = [
    "CATCH_UP_LIMIT",
    "channel_snapshot",
    "drop_from_channel",
    "drop_from_topic",
    "holds_messages",
    "topic_snapshot",
]

#: The most messages of one channel (or topic) sent to a new peer.
CATCH_UP_LIMIT = 200000


def _drain_and_restore(queue: Any, limit: int) -> Tuple[List[bytes], bool]:
    """
    The messages in ``queue`` (an IBackendQueue), in order, read out and
    put back (up to ``limit``: beyond it they stay where they are), and
    whether that was all of them.
    """
    found: List[bytes] = []
    depth = queue.depth()
    take = min(depth, limit)
    read = queue.read
    for _ in range(take):
        data = read()
        if data is None:
            break
        found.append(data)
    put = queue.put
    for data in found:
        put(data)
    # What was not read (past the limit) is now ahead of what was put
    # back: rotate it behind, so the order stays as it was.
    for _ in range(depth - len(found)):
        data = read()
        if data is None:
            break
        put(data)
    return found, depth <= limit


def channel_snapshot(channel: Any, limit: int = CATCH_UP_LIMIT) -> Tuple[List[bytes], bool]:
    """
    A channel's unfinished messages: in flight, deferred (sent as due
    now), then queued, in that order; and whether all of them fit in
    ``limit``.
    """
    found = [entry.data for entry in channel._in_flight.values()]
    found.extend(data for _, _, data in sorted(channel._deferred, key=lambda item: item[:2]))
    queued, complete = _drain_and_restore(channel._queue, max(0, limit - len(found)))
    found.extend(queued)
    return found, complete and len(found) <= limit


def topic_snapshot(topic: Any, limit: int = CATCH_UP_LIMIT) -> Tuple[List[bytes], bool]:
    """The messages a topic holds itself (no channel yet, or paused), as :func:`channel_snapshot`."""
    found = [data for data, _ in topic._backlog]
    queued, complete = _drain_and_restore(topic._queue, max(0, limit - len(found)))
    found.extend(queued)
    return found, complete and len(found) <= limit


def _filter_queue(queue: Any, ids: Collection[bytes]) -> Set[bytes]:
    """
    Take the messages whose id is in ``ids`` out of ``queue`` (an
    IBackendQueue: read through and put back, the others in order); the
    ids taken out.
    """
    removed: Set[bytes] = set()
    depth = queue.depth()
    if not depth:
        return removed
    read = queue.read
    put = queue.put
    for _ in range(depth):
        data = read()
        if data is None:
            break
        msg_id = data[10:26]
        if msg_id in ids:
            removed.add(msg_id)
        else:
            put(data)
    return removed


def drop_from_channel(channel: Any, ids: Collection[bytes]) -> Set[bytes]:
    """
    Take the messages whose id is in ``ids`` out of ``channel``: queued,
    deferred, or in flight (as if they had timed out there and gone: a
    later FIN of one by its consumer fails as for a timed-out message);
    the ids found.  The fail-back exchange drops here what the other node
    took over and delivers now.
    """
    removed = _filter_queue(channel._queue, ids)
    flight_log = channel._flight
    deferred = channel._deferred
    if deferred:
        kept = [item for item in deferred if item[2][10:26] not in ids]
        if len(kept) != len(deferred):
            for item in deferred:
                msg_id = item[2][10:26]
                if msg_id in ids:
                    removed.add(msg_id)
                    if flight_log is not None:
                        flight_log.release(msg_id)
            heapq.heapify(kept)
            channel._deferred = kept
    in_flight = channel._in_flight
    freed = []
    for msg_id in [msg_id for msg_id in in_flight if msg_id in ids]:
        entry = in_flight.pop(msg_id)
        channel._unschedule(entry)
        entry.consumer.in_flight_count -= 1
        if flight_log is not None:
            flight_log.release(msg_id)
        removed.add(msg_id)
        freed.append(entry.consumer)
    if freed:
        channel._check_idle()
        for consumer in freed:
            channel._freed(consumer)
    return removed


def drop_from_topic(topic: Any, ids: Collection[bytes]) -> Set[bytes]:
    """
    Take the messages whose id is in ``ids`` out of what ``topic`` holds
    itself (no channel yet, or paused), as :func:`drop_from_channel`.
    """
    removed = _filter_queue(topic._queue, ids)
    backlog = topic._backlog
    if backlog:
        kept = [item for item in backlog if item[0][10:26] not in ids]
        if len(kept) != len(backlog):
            flight_log = topic._flight
            for data, _ in backlog:
                msg_id = data[10:26]
                if msg_id in ids:
                    removed.add(msg_id)
                    if flight_log is not None:
                        flight_log.release(msg_id)
            topic._backlog = kept
    return removed


def holds_messages(topic: Any) -> bool:
    """``topic`` or one of its channels holds some message (queued, deferred or in flight)."""
    if topic.depth():
        return True
    for channel in topic.channels.values():
        if channel.depth() or channel.in_flight_count or channel.deferred_count:
            return True
    return False
