# -*- test-case-name: tests.test_stats -*-
"""
The plain-text ``/stats`` page: Go nsqd's ``printStats`` layout, byte for
byte, of a :class:`NSQDStats <txnsq.nsqd.stats.NSQDStats>` snapshot.
"""

from __future__ import annotations

from datetime import datetime, timezone

from txnsq.nsqd.stats import NSQDStats
from txnsq.protocol.go_values import format_duration_ns

__all__ = ["to_text"]


def _rfc3339(seconds: float) -> str:
    """Go's ``Time.Format(time.RFC3339)`` in local time: ``...T03:04:05Z`` or ``+01:00``."""
    local = datetime.fromtimestamp(int(seconds // 1), tz=timezone.utc).astimezone()
    text = local.strftime("%Y-%m-%dT%H:%M:%S")
    offset = local.utcoffset()
    minutes = int(offset.total_seconds()) // 60 if offset is not None else 0
    if minutes == 0:
        return text + "Z"
    sign = "+" if minutes > 0 else "-"
    minutes = abs(minutes)
    return "%s%s%02d:%02d" % (text, sign, minutes // 60, minutes % 60)


def to_text(stats: NSQDStats, now: float) -> str:
    """
    The plain-text ``/stats`` page (Go's ``printStats``), with uptime and
    connection ages measured at ``now`` (Unix seconds).
    """
    lines = [
        "nsqd v%s (built w/%s)\n" % (stats.version, stats.build),
        "start_time %s\n" % (_rfc3339(stats.start_time),),
        "uptime %s\n" % (format_duration_ns(int(round((now - stats.start_time) * 1e9))),),
        "\nHealth: %s\n" % (stats.health,),
    ]
    memory = stats.memory
    if memory is not None:
        lines.append("\nMemory:\n")
        for name, value in memory.to_json().items():
            lines.append("   %-25s\t%d\n" % (name, value))
    topics = stats.topics or []
    lines.append("\nTopics:" if topics else "\nTopics: None\n")
    for topic in topics:
        lines.append(
            "\n%s[%-15s] depth: %-5d be-depth: %-5d msgs: %-8d e2e%%: %s\n"
            % (
                "*P " if topic.paused else "   ",
                topic.topic_name,
                topic.depth,
                topic.backend_depth,
                topic.message_count,
                topic.e2e_processing_latency,
            )
        )
        retained = topic.retention
        if retained is not None:
            lines.append(
                "   retained: log-bytes: %d limit: %d age: %s\n"
                % (
                    retained["log_bytes"],
                    retained["bytes_limit"],
                    format_duration_ns(retained["age_ms"] * 1000000),
                )
            )
            for part in retained["partitions"]:
                lines.append(
                    "      [partition %d] first: %d next: %d bytes: %d segments: %d\n"
                    % (
                        part["partition"],
                        part["first_offset"],
                        part["next_offset"],
                        part["bytes"],
                        part["segments"],
                    )
                )
        for channel in topic.channels:
            lines.append(
                "%s[%-25s] depth: %-5d be-depth: %-5d inflt: %-4d def: %-4d "
                "re-q: %-5d timeout: %-5d msgs: %-8d e2e%%: %s\n"
                % (
                    "   *P " if channel.paused else "      ",
                    channel.channel_name,
                    channel.depth,
                    channel.backend_depth,
                    channel.in_flight_count,
                    channel.deferred_count,
                    channel.requeue_count,
                    channel.timeout_count,
                    channel.message_count,
                    channel.e2e_processing_latency,
                )
            )
            for client in channel.clients or ():
                lines.append("        %s\n" % (client.to_text(now),))
    producers = stats.producers
    if not producers:
        lines.append("\nProducers: None\n")
    else:
        lines.append("\nProducers:\n")
        for producer in producers:
            lines.append("   %s\n" % (producer.to_text(now),))
    return "".join(lines)
