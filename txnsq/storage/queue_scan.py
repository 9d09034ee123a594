# -*- test-case-name: tests.test_storage_queue_scan -*-
"""
Reading an ``IBackendQueue`` through without losing its order: what a
topic or a channel holds, copied out (a mirrored topic's catch-up) or
some of it taken out by id (the mirror's fail-back exchange).  Both read
every message and put back those that stay, so they cost a pass over the
queue: they run once per peer that comes or per exchange, never per
message published.
"""

from __future__ import annotations

from typing import Any, Collection, List, Set, Tuple

__all__ = ["read_through", "take_out"]


def read_through(queue: Any, limit: int) -> Tuple[List[bytes], bool]:
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


def take_out(queue: Any, ids: Collection[bytes]) -> Set[bytes]:
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
