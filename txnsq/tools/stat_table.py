# -*- test-case-name: tests.test_tools_nsq_stat -*-
"""
nsq_stat's numbers and table, as Go ``nsq_stat`` prints them.

:func:`channel_stats` adds up one channel's statistics over the ``/stats``
replies of its nsqds (Go's ``clusterinfo.ChannelStats.Add``);
:class:`StatTable` prints a header every 25 polls and, from the second
poll on, one row per poll: the ingress and egress rates over the interval,
then depth, in-memory and on-disk depth, in-flight, deferred, requeued,
timed out, message count and client count.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import IO, Any, Iterable, Mapping, Optional

__all__ = ["ChannelStats", "StatTable", "channel_stats"]

HEADER_EVERY = 25


@dataclass
class ChannelStats:
    """One channel's counters, summed over its nsqds."""

    depth: int = 0
    memory_depth: int = 0
    backend_depth: int = 0
    in_flight_count: int = 0
    deferred_count: int = 0
    requeue_count: int = 0
    timeout_count: int = 0
    message_count: int = 0
    client_count: int = 0

    def add(self, other: "ChannelStats") -> None:
        """Add another nsqd's counters to these."""
        for name in self.__dataclass_fields__:
            setattr(self, name, getattr(self, name) + getattr(other, name))


def _int(value: Any) -> int:
    return int(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else 0


def _from_json(channel: Mapping[str, Any]) -> ChannelStats:
    depth = _int(channel.get("depth"))
    backend = _int(channel.get("backend_depth"))
    clients = channel.get("client_count")
    if clients is None:
        listed = channel.get("clients")
        clients = len(listed) if isinstance(listed, list) else 0
    return ChannelStats(
        depth=depth,
        memory_depth=depth - backend,
        backend_depth=backend,
        in_flight_count=_int(channel.get("in_flight_count")),
        deferred_count=_int(channel.get("deferred_count")),
        requeue_count=_int(channel.get("requeue_count")),
        timeout_count=_int(channel.get("timeout_count")),
        message_count=_int(channel.get("message_count")),
        client_count=_int(clients),
    )


def channel_stats(
    replies: Iterable[Mapping[str, Any]], topic: str, channel: str
) -> Optional[ChannelStats]:
    """
    ``channel`` of ``topic`` summed over nsqd ``/stats?format=json``
    replies (bare, or wrapped in ``data`` as nsqd before 1.0 sends them);
    None when no nsqd has it.
    """
    total: Optional[ChannelStats] = None
    for reply in replies:
        if isinstance(reply.get("data"), dict) and "topics" not in reply:
            reply = reply["data"]
        for topic_stats in reply.get("topics") or ():
            if not isinstance(topic_stats, dict) or topic_stats.get("topic_name") != topic:
                continue
            for channel_stats_json in topic_stats.get("channels") or ():
                if (
                    not isinstance(channel_stats_json, dict)
                    or channel_stats_json.get("channel_name") != channel
                ):
                    continue
                stats = _from_json(channel_stats_json)
                if total is None:
                    total = stats
                else:
                    total.add(stats)
    return total


def _rate(delta: int, interval: float) -> int:
    # Go: int64(float64(delta) / interval.Seconds()), truncated toward zero.
    return int(float(delta) / interval)


class StatTable:
    """
    Writes nsq_stat's output, one poll at a time.

    :param out: where the table goes (standard output).
    :param interval: the polling interval in seconds, for the rates.
    """

    def __init__(self, out: IO[str], interval: float) -> None:
        self.out = out
        self.interval = interval
        self.polls = 0
        self._previous: Optional[ChannelStats] = None

    def header(self) -> str:
        """The two header lines."""
        return "%s+%s+%s\n%7s %7s | %7s %7s %7s %5s %5s | %7s %7s %12s %7s\n" % (
            "------rate------",
            "----------------depth----------------",
            "--------------metadata---------------",
            "ingress",
            "egress",
            "total",
            "mem",
            "disk",
            "inflt",
            "def",
            "req",
            "t-o",
            "msgs",
            "clients",
        )

    def row(self, current: ChannelStats, previous: ChannelStats) -> str:
        """One data line: rates since ``previous``, then ``current``'s counters."""
        messages = current.message_count - previous.message_count
        depth = current.depth - previous.depth
        return "%7d %7d | %7d %7d %7d %5d %5d | %7d %7d %12d %7d\n" % (
            _rate(messages, self.interval),
            _rate(messages - depth, self.interval),
            current.depth,
            current.memory_depth,
            current.backend_depth,
            current.in_flight_count,
            current.deferred_count,
            current.requeue_count,
            current.timeout_count,
            current.message_count,
            current.client_count,
        )

    def poll(self, stats: ChannelStats) -> None:
        """Print what one poll gives: the header every 25 polls, a row from the second poll."""
        if self.polls % HEADER_EVERY == 0:
            self.out.write(self.header())
        self.polls += 1
        previous, self._previous = self._previous, stats
        if previous is not None:
            self.out.write(self.row(stats, previous))
        self.out.flush()
