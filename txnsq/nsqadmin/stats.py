# -*- test-case-name: tests.test_nsqadmin_stats -*-
"""
nsqd ``/stats`` documents summed across nodes into the shapes Go nsqadmin's
JSON API answers with (``internal/clusterinfo``'s ``TopicStats``,
``ChannelStats`` and ``ClientStats``).

Each node's topic and channel keep nsqd's own fields plus ``node`` (the
nsqd's HTTP address), ``hostname`` and ``memory_depth``; a sum has
``node`` ``*``, the per-node entries under ``nodes`` and, for a channel,
every node's clients (each with its ``node``) under ``clients``.
"""

from __future__ import annotations

from typing import Any, Dict, Iterable, List, Optional

__all__ = [
    "CHANNEL_COUNTS",
    "TOPIC_COUNTS",
    "channel_total",
    "empty_channel",
    "empty_topic",
    "node_channel",
    "node_topic",
    "topic_total",
]

#: The counters a topic sum adds up.
TOPIC_COUNTS = ("depth", "memory_depth", "backend_depth", "message_count")

#: The counters a channel sum adds up.
CHANNEL_COUNTS = (
    "depth",
    "memory_depth",
    "backend_depth",
    "in_flight_count",
    "deferred_count",
    "requeue_count",
    "timeout_count",
    "message_count",
    "client_count",
)


def _int(value: Any) -> int:
    """A counter from a document: ints as they are, anything else 0."""
    if isinstance(value, bool) or not isinstance(value, int):
        return 0
    return value


def _latency(topic: str, channel: Optional[str]) -> Dict[str, Any]:
    # Go's E2eProcessingLatencyAggregate with nothing added: no percentiles.
    doc: Dict[str, Any] = {"count": 0, "percentiles": None, "topic": topic}
    if channel is not None:
        doc["channel"] = channel
    doc["host"] = "*"
    return doc


def empty_topic(topic: str) -> Dict[str, Any]:
    """A topic sum over no node (Go answers one for a topic nobody has)."""
    doc: Dict[str, Any] = {"node": "*", "hostname": "", "topic_name": topic}
    for name in TOPIC_COUNTS:
        doc[name] = 0
    doc.update(nodes=[], channels=[], paused=False, e2e_processing_latency=_latency(topic, None))
    return doc


def empty_channel(topic: str, channel: str) -> Dict[str, Any]:
    """A channel sum over no node."""
    doc: Dict[str, Any] = {
        "node": "*",
        "hostname": "",
        "topic_name": topic,
        "channel_name": channel,
    }
    for name in CHANNEL_COUNTS:
        doc[name] = 0
    doc.update(nodes=[], clients=[], paused=False, e2e_processing_latency=_latency(topic, channel))
    return doc


def node_channel(
    raw: Dict[str, Any], topic: str, node: str, hostname: str, include_clients: bool
) -> Dict[str, Any]:
    """One nsqd's channel, as Go's ``ChannelStats`` of one node."""
    doc = dict(raw)
    clients = [dict(c, node=node) for c in raw.get("clients") or () if isinstance(c, dict)]
    doc.update(node=node, hostname=hostname, topic_name=topic)
    for name in CHANNEL_COUNTS:
        doc[name] = _int(raw.get(name))
    doc["memory_depth"] = doc["depth"] - doc["backend_depth"]
    if "client_count" not in raw or clients:
        doc["client_count"] = len(clients)
    doc["clients"] = clients if include_clients else []
    doc["paused"] = bool(raw.get("paused"))
    return doc


def node_topic(
    raw: Dict[str, Any], node: str, hostname: str, include_clients: bool
) -> Dict[str, Any]:
    """One nsqd's topic, as Go's ``TopicStats`` of one node (its channels too)."""
    topic = str(raw.get("topic_name", ""))
    doc = dict(raw)
    doc.update(node=node, hostname=hostname, topic_name=topic)
    for name in TOPIC_COUNTS:
        doc[name] = _int(raw.get(name))
    doc["memory_depth"] = doc["depth"] - doc["backend_depth"]
    doc["paused"] = bool(raw.get("paused"))
    doc["channels"] = [
        node_channel(c, topic, node, hostname, include_clients)
        for c in raw.get("channels") or ()
        if isinstance(c, dict)
    ]
    return doc


def channel_total(topic: str, channel: str, per_node: Iterable[Dict[str, Any]]) -> Dict[str, Any]:
    """The sum of one channel's per-node stats (Go's ``ChannelStats.Add``)."""
    total = empty_channel(topic, channel)
    for doc in per_node:
        for name in CHANNEL_COUNTS:
            total[name] += doc[name]
        total["paused"] = total["paused"] or doc["paused"]
        total["nodes"].append(doc)
        total["clients"].extend(doc["clients"])
    total["nodes"].sort(key=lambda d: (d["hostname"], d["node"]))
    total["clients"].sort(key=lambda c: (str(c.get("hostname", "")), str(c.get("client_id", ""))))
    return total


def topic_total(topic: str, per_node: Iterable[Dict[str, Any]]) -> Dict[str, Any]:
    """
    The sum of one topic's per-node stats (Go's ``TopicStats.Add``), with
    its channels summed by name, in the order first seen.
    """
    total = empty_topic(topic)
    channels: Dict[str, List[Dict[str, Any]]] = {}
    for doc in per_node:
        for name in TOPIC_COUNTS:
            total[name] += doc[name]
        total["paused"] = total["paused"] or doc["paused"]
        total["nodes"].append(doc)
        for channel in doc["channels"]:
            channels.setdefault(channel["channel_name"], []).append(channel)
    total["nodes"].sort(key=lambda d: (d["hostname"], d["node"]))
    total["channels"] = [channel_total(topic, name, docs) for name, docs in channels.items()]
    return total


def topic_totals(per_node: Iterable[Dict[str, Any]]) -> Dict[str, Dict[str, Any]]:
    """Every topic's :func:`topic_total`, by name, from per-node topic stats."""
    by_name: Dict[str, List[Dict[str, Any]]] = {}
    for doc in per_node:
        by_name.setdefault(doc["topic_name"], []).append(doc)
    return {name: topic_total(name, docs) for name, docs in by_name.items()}
