# -*- test-case-name: tests.test_nsqd_mirror -*-
"""
What a topic and its channels hold, read for a peer's catch-up
(:mod:`txnsq.mirror.catch_up`) and dropped by the fail-back exchange
(:mod:`txnsq.mirror.exchange`); no IO.  The topic and the channels do the
work (their public ``held_messages``, ``unfinished_messages`` and
``drop_messages``): once per peer that comes or per exchange, never per
message.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Collection, List, Set, Tuple

if TYPE_CHECKING:
    from txnsq.nsqd.channel import Channel
    from txnsq.nsqd.topic import Topic

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


def channel_snapshot(channel: Channel, limit: int = CATCH_UP_LIMIT) -> Tuple[List[bytes], bool]:
    """
    A channel's unfinished messages: in flight, deferred (sent as due
    now), then queued, in that order; and whether all of them fit in
    ``limit``.
    """
    return channel.unfinished_messages(limit)


def topic_snapshot(topic: Topic, limit: int = CATCH_UP_LIMIT) -> Tuple[List[bytes], bool]:
    """The messages a topic holds itself (no channel yet, or paused), as :func:`channel_snapshot`."""
    return topic.held_messages(limit)


def drop_from_channel(channel: Channel, ids: Collection[bytes]) -> Set[bytes]:
    """
    Take the messages whose id is in ``ids`` out of ``channel``: queued,
    deferred, or in flight (as if they had timed out there and gone: a
    later FIN of one by its consumer fails as for a timed-out message);
    the ids found.  The fail-back exchange drops here what the other node
    took over and delivers now.
    """
    return channel.drop_messages(ids)


def drop_from_topic(topic: Topic, ids: Collection[bytes]) -> Set[bytes]:
    """
    Take the messages whose id is in ``ids`` out of what ``topic`` holds
    itself (no channel yet, or paused), as :func:`drop_from_channel`.
    """
    return topic.drop_messages(ids)


def holds_messages(topic: Topic) -> bool:
    """``topic`` or one of its channels holds some message (queued, deferred or in flight)."""
    if topic.depth():
        return True
    for channel in topic.channels.values():
        if channel.depth() or channel.in_flight_count or channel.deferred_count:
            return True
    return False
