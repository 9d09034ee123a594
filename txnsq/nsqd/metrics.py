# -*- test-case-name: tests.test_metrics -*-
"""
``GET /metrics``: nsqd's stats in the Prometheus text exposition format,
version 0.0.4.

Go nsqd has no Prometheus endpoint (people run an exporter that scrapes
``/stats``); txnsq serves the same numbers directly.  The input is the
snapshot of ``GET /stats?format=json``, so the page and ``/stats`` always
agree.

The text is written by hand rather than with ``prometheus_client``: the
numbers already exist as one snapshot dict, so the client's registry,
collectors and metric objects would only be scaffolding around some forty
lines of string formatting, and a drop-in nsqd (also on PyPy and minimal
installs) should not need a runtime dependency for that.  The tests parse
this output with ``prometheus_client``'s own parser, so a format slip is
caught there.

Metric families (labels in braces):

* ``nsqd_up``, ``nsqd_healthy``, ``nsqd_info{version}``,
  ``nsqd_start_time_seconds``, ``nsqd_topics``, ``nsqd_channels``,
  ``nsqd_producers``;
* ``nsqd_topic_{depth,backend_depth,paused}{topic}``,
  ``nsqd_topic_messages_total{topic}``,
  ``nsqd_topic_message_bytes_total{topic}``,
  ``nsqd_topic_e2e_processing_latency_seconds{topic,quantile}``;
* ``nsqd_channel_{depth,backend_depth,in_flight_messages,deferred_messages,
  clients,paused}{topic,channel}``,
  ``nsqd_channel_{messages,requeues,timeouts}_total{topic,channel}``,
  ``nsqd_channel_e2e_processing_latency_seconds{topic,channel,quantile}``;
* when the snapshot has ``memory``: ``nsqd_mem_heap_objects``,
  ``nsqd_mem_heap_{idle,in_use,released}_bytes``, ``nsqd_mem_next_gc_bytes``,
  ``nsqd_mem_gc_pause_seconds{quantile}`` and ``nsqd_mem_gc_runs_total``.

Counters end in ``_total``; latencies are converted to seconds (the
snapshot has nanoseconds, and microseconds for GC pauses).
"""

from __future__ import annotations

import math
from typing import Any, Dict, List, Mapping, Sequence, Tuple, Union

__all__ = ["CONTENT_TYPE", "escape_label_value", "format_value", "render_metrics"]

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"

Number = Union[int, float]
Labels = Tuple[Tuple[str, str], ...]


def escape_label_value(value: str) -> str:
    """Escape a label value: backslash, double quote and newline."""
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def _escape_help(text: str) -> str:
    """Escape HELP text: backslash and newline (quotes stay as they are)."""
    return text.replace("\\", "\\\\").replace("\n", "\\n")


def format_value(value: Number) -> str:
    """A sample value as Prometheus reads it: integers plainly, floats
    shortest-exact, booleans as 0/1, and ``+Inf``/``-Inf``/``NaN``."""
    if isinstance(value, bool):
        return "1" if value else "0"
    if isinstance(value, int):
        return "%d" % (value,)
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    return repr(float(value))


def _format_quantile(quantile: float) -> str:
    """A quantile label like Go's client_golang: ``0.99``, ``1``."""
    text = repr(float(quantile))
    return text[:-2] if text.endswith(".0") else text


class _Family:
    """One metric family: its HELP and TYPE lines and its samples."""

    __slots__ = ("name", "kind", "help", "samples")

    def __init__(self, name: str, kind: str, help_text: str) -> None:
        self.name = name
        self.kind = kind
        self.help = help_text
        self.samples: List[Tuple[Labels, Number]] = []

    def add(self, value: Number, **labels: str) -> None:
        """Add a sample; labels keep the order they are given in."""
        self.samples.append((tuple(labels.items()), value))

    def render(self, out: List[str]) -> None:
        """Append this family's lines, samples together as the format requires."""
        out.append("# HELP %s %s\n" % (self.name, _escape_help(self.help)))
        out.append("# TYPE %s %s\n" % (self.name, self.kind))
        for labels, value in self.samples:
            if labels:
                text = ",".join(
                    '%s="%s"' % (key, escape_label_value(val)) for key, val in labels
                )
                out.append("%s{%s} %s\n" % (self.name, text, format_value(value)))
            else:
                out.append("%s %s\n" % (self.name, format_value(value)))


def _families(specs: Sequence[Tuple[str, str, str]]) -> Dict[str, _Family]:
    """Families keyed by name, in the order given."""
    return {name: _Family(name, kind, text) for name, kind, text in specs}


_NSQD = (
    ("nsqd_up", "gauge", "1 when nsqd answered this scrape."),
    ("nsqd_healthy", "gauge", "1 when nsqd's health is OK, 0 when it is NOK (a queue cannot write)."),
    ("nsqd_info", "gauge", "Always 1; the version label is nsqd's version."),
    ("nsqd_start_time_seconds", "gauge", "When nsqd started, in seconds since the Unix epoch."),
    ("nsqd_topics", "gauge", "Number of topics."),
    ("nsqd_channels", "gauge", "Number of channels, over all topics."),
    ("nsqd_producers", "gauge", "Number of connected clients that have published."),
)

# (name, type, help) of each family, in output order; then which stats key
# feeds each family that maps one field to one sample.
_TOPIC = (
    ("nsqd_topic_depth", "gauge", "Messages queued in the topic (memory and backend)."),
    ("nsqd_topic_backend_depth", "gauge", "Messages queued in the topic's backend queue."),
    ("nsqd_topic_messages_total", "counter", "Messages published to the topic."),
    ("nsqd_topic_message_bytes_total", "counter", "Bytes of message bodies published to the topic."),
    ("nsqd_topic_paused", "gauge", "1 when the topic is paused."),
    (
        "nsqd_topic_e2e_processing_latency_seconds",
        "gauge",
        "End-to-end processing latency percentiles of the topic, in seconds.",
    ),
)
_TOPIC_KEYS = (
    ("nsqd_topic_depth", "depth"),
    ("nsqd_topic_backend_depth", "backend_depth"),
    ("nsqd_topic_messages_total", "message_count"),
    ("nsqd_topic_message_bytes_total", "message_bytes"),
    ("nsqd_topic_paused", "paused"),
)

_CHANNEL = (
    ("nsqd_channel_depth", "gauge", "Messages queued in the channel (memory and backend)."),
    ("nsqd_channel_backend_depth", "gauge", "Messages queued in the channel's backend queue."),
    ("nsqd_channel_in_flight_messages", "gauge", "Messages sent to consumers and not yet finished, requeued or timed out."),
    ("nsqd_channel_deferred_messages", "gauge", "Messages deferred for later delivery."),
    ("nsqd_channel_messages_total", "counter", "Messages the channel has received from its topic."),
    ("nsqd_channel_requeues_total", "counter", "Messages requeued by consumers."),
    ("nsqd_channel_timeouts_total", "counter", "Messages whose in-flight timeout expired."),
    ("nsqd_channel_clients", "gauge", "Consumers subscribed to the channel."),
    ("nsqd_channel_paused", "gauge", "1 when the channel is paused."),
    (
        "nsqd_channel_e2e_processing_latency_seconds",
        "gauge",
        "End-to-end processing latency percentiles of the channel, in seconds.",
    ),
)
_CHANNEL_KEYS = (
    ("nsqd_channel_depth", "depth"),
    ("nsqd_channel_backend_depth", "backend_depth"),
    ("nsqd_channel_in_flight_messages", "in_flight_count"),
    ("nsqd_channel_deferred_messages", "deferred_count"),
    ("nsqd_channel_messages_total", "message_count"),
    ("nsqd_channel_requeues_total", "requeue_count"),
    ("nsqd_channel_timeouts_total", "timeout_count"),
    ("nsqd_channel_clients", "client_count"),
    ("nsqd_channel_paused", "paused"),
)

_MEMORY = (
    ("nsqd_mem_heap_objects", "gauge", "Objects allocated on the heap."),
    ("nsqd_mem_heap_idle_bytes", "gauge", "Heap bytes not in use."),
    ("nsqd_mem_heap_in_use_bytes", "gauge", "Heap bytes in use."),
    ("nsqd_mem_heap_released_bytes", "gauge", "Heap bytes returned to the operating system."),
    ("nsqd_mem_next_gc_bytes", "gauge", "Heap size at which the next collection runs."),
    ("nsqd_mem_gc_pause_seconds", "gauge", "Garbage collection pause percentiles, in seconds."),
    ("nsqd_mem_gc_runs_total", "counter", "Garbage collections run."),
)
_MEMORY_KEYS = (
    ("nsqd_mem_heap_objects", "heap_objects"),
    ("nsqd_mem_heap_idle_bytes", "heap_idle_bytes"),
    ("nsqd_mem_heap_in_use_bytes", "heap_in_use_bytes"),
    ("nsqd_mem_heap_released_bytes", "heap_released_bytes"),
    ("nsqd_mem_next_gc_bytes", "next_gc_bytes"),
    ("nsqd_mem_gc_runs_total", "gc_total_runs"),
)
_GC_PAUSES = (("1", "gc_pause_usec_100"), ("0.99", "gc_pause_usec_99"), ("0.95", "gc_pause_usec_95"))


def _add_percentiles(family: _Family, latency: Any, **labels: str) -> None:
    """One sample per e2e percentile (nanoseconds in, seconds out)."""
    if not latency:
        return
    for item in latency.get("percentiles") or ():
        family.add(
            item["value"] / 1e9, **labels, quantile=_format_quantile(item["quantile"])
        )


def render_metrics(stats: Mapping[str, Any]) -> bytes:
    """
    The ``/metrics`` page for one stats snapshot, UTF-8 encoded; serve it
    with :data:`CONTENT_TYPE`.

    :param stats: shaped as ``GET /stats?format=json`` (``memory`` and
        ``producers`` may be absent or null).
    :raises KeyError: a topic or channel lacks a field Go always sends.
    """
    nsqd = _families(_NSQD)
    topic_families = _families(_TOPIC)
    channel_families = _families(_CHANNEL)
    topics = stats.get("topics") or ()

    channel_total = 0
    for topic in topics:
        topic_name = topic["topic_name"]
        for family, key in _TOPIC_KEYS:
            topic_families[family].add(topic[key], topic=topic_name)
        _add_percentiles(
            topic_families["nsqd_topic_e2e_processing_latency_seconds"],
            topic.get("e2e_processing_latency"),
            topic=topic_name,
        )
        for channel in topic.get("channels") or ():
            channel_total += 1
            channel_name = channel["channel_name"]
            for family, key in _CHANNEL_KEYS:
                channel_families[family].add(
                    channel[key], topic=topic_name, channel=channel_name
                )
            _add_percentiles(
                channel_families["nsqd_channel_e2e_processing_latency_seconds"],
                channel.get("e2e_processing_latency"),
                topic=topic_name,
                channel=channel_name,
            )

    nsqd["nsqd_up"].add(1)
    nsqd["nsqd_healthy"].add(1 if stats.get("health") == "OK" else 0)
    nsqd["nsqd_info"].add(1, version=str(stats.get("version", "")))
    if stats.get("start_time") is not None:
        nsqd["nsqd_start_time_seconds"].add(stats["start_time"])
    nsqd["nsqd_topics"].add(len(topics))
    nsqd["nsqd_channels"].add(channel_total)
    nsqd["nsqd_producers"].add(len(stats.get("producers") or ()))

    groups = [nsqd, topic_families, channel_families]
    memory = stats.get("memory")
    if memory:
        memory_families = _families(_MEMORY)
        for family, key in _MEMORY_KEYS:
            memory_families[family].add(memory[key])
        for quantile, key in _GC_PAUSES:
            memory_families["nsqd_mem_gc_pause_seconds"].add(
                memory[key] / 1e6, quantile=quantile
            )
        groups.append(memory_families)

    out: List[str] = []
    for group in groups:
        for family_obj in group.values():
            family_obj.render(out)
    return "".join(out).encode("utf-8")
