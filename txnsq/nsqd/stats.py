# -*- test-case-name: tests.test_stats -*-
"""
nsqd's statistics: the data behind ``GET /stats``, in Go nsqd v1.3's
shapes (``nsqd/stats.go``, ``clientV2.Stats``, ``httpServer.doStats`` and
``printStats``).

:func:`collect` takes a snapshot of a broker and its TCP clients;
:func:`to_json` turns it into the JSON document (keys in Go's order, Go's
``null``\\ s); :func:`txnsq.nsqd.stats_text.to_text` into the plain-text
page, and :mod:`txnsq.nsqd.memstats` gives the memory block.

Clients are read duck-typed (the TCP adapter's
:class:`txnsq.nsqd.tcp.NSQDProtocol` is the real one), so that this module
stays in the core and imports no adapter.  A client has:

- ``conn_id`` (int, connection order), ``client_id``, ``hostname``,
  ``user_agent``, ``remote_address`` (``"host:port"``, IPv6 host in
  brackets), ``connect_time`` (float seconds);
- ``stats_state``: Go's client state number (0 init, 1 disconnected,
  2 connected, 3 subscribed, 4 closing);
- ``ready_count``, ``in_flight_count``, ``message_count`` (messages sent to
  it), ``finish_count``, ``requeue_count``, ``sample_rate``;
- ``pub_counts``: ``{topic: messages published}`` (a producer is a client
  with any);
- optionally ``deflate``, ``snappy``, ``tls``, ``authed``,
  ``auth_identity``, ``auth_identity_url``, ``tls_cipher_suite``,
  ``tls_version``, ``tls_negotiated_protocol``,
  ``tls_negotiated_protocol_is_mutual`` (false or empty when absent).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Dict, Iterable, List, Optional

from txnsq.version import NSQ_VERSION, build_token
from txnsq.protocol.go_values import format_duration_ns
from txnsq.nsqd.memstats import MemStats, memory_stats
from txnsq.nsqd.quantile import EMPTY_RESULT, QuantileResult, aggregate

if TYPE_CHECKING:
    from txnsq.nsqd.broker import Broker
    from txnsq.nsqd.channel import Channel
    from txnsq.nsqd.topic import Topic

__all__ = [
    "ChannelStats",
    "ClientStats",
    "NSQDStats",
    "PubCount",
    "TopicStats",
    "client_stats",
    "collect",
    "health",
    "parse_bool_param",
    "to_json",
]

#: Go's client states (``nsqd/client_v2.go``).
STATE_INIT = 0
STATE_DISCONNECTED = 1
STATE_CONNECTED = 2
STATE_SUBSCRIBED = 3
STATE_CLOSING = 4

_BOOL_PARAMS = {"true": True, "1": True, "false": False, "0": False}


def parse_bool_param(value: Optional[str], default: bool = True) -> bool:
    """
    Go's ``boolParams`` for ``include_clients`` and ``include_mem``:
    ``true``/``1`` and ``false``/``0``; anything else (or no value) is
    ``default``.
    """
    if value is None:
        return default
    return _BOOL_PARAMS.get(value, default)


# -- the snapshot ----------------------------------------------------------


@dataclass
class PubCount:
    """Messages one producer published to one topic."""

    topic: str
    count: int

    def to_json(self) -> Dict[str, Any]:
        """``{"topic": ..., "count": ...}``."""
        return {"topic": self.topic, "count": self.count}


@dataclass
class ClientStats:
    """
    One TCP client (Go's ``ClientV2Stats``).  ``pub_counts`` is non-empty
    for a producer; ``connect_ts`` is whole Unix seconds.
    """

    client_id: str
    hostname: str
    remote_address: str
    state: int
    ready_count: int
    in_flight_count: int
    message_count: int
    finish_count: int
    requeue_count: int
    connect_ts: int
    sample_rate: int
    user_agent: str
    version: str = "V2"
    deflate: bool = False
    snappy: bool = False
    authed: bool = False
    auth_identity: str = ""
    auth_identity_url: str = ""
    pub_counts: List[PubCount] = field(default_factory=list)
    tls: bool = False
    tls_cipher_suite: str = ""
    tls_version: str = ""
    tls_negotiated_protocol: str = ""
    tls_negotiated_protocol_is_mutual: bool = False

    def to_json(self) -> Dict[str, Any]:
        """Go's JSON: ``authed``, ``auth_*`` and ``pub_counts`` only when set."""
        out: Dict[str, Any] = {
            "client_id": self.client_id,
            "hostname": self.hostname,
            "version": self.version,
            "remote_address": self.remote_address,
            "state": self.state,
            "ready_count": self.ready_count,
            "in_flight_count": self.in_flight_count,
            "message_count": self.message_count,
            "finish_count": self.finish_count,
            "requeue_count": self.requeue_count,
            "connect_ts": self.connect_ts,
            "sample_rate": self.sample_rate,
            "deflate": self.deflate,
            "snappy": self.snappy,
            "user_agent": self.user_agent,
        }
        if self.authed:
            out["authed"] = True
        if self.auth_identity:
            out["auth_identity"] = self.auth_identity
        if self.auth_identity_url:
            out["auth_identity_url"] = self.auth_identity_url
        if self.pub_counts:
            out["pub_counts"] = [pub.to_json() for pub in self.pub_counts]
        out["tls"] = self.tls
        out["tls_cipher_suite"] = self.tls_cipher_suite
        out["tls_version"] = self.tls_version
        out["tls_negotiated_protocol"] = self.tls_negotiated_protocol
        out["tls_negotiated_protocol_is_mutual"] = self.tls_negotiated_protocol_is_mutual
        return out

    def to_text(self, now: float) -> str:
        """
        Go's ``ClientV2Stats.String()``: a producer's or a consumer's line,
        ``HOST:PORT USER_AGENT`` padded to 21 columns, the connection age
        in whole seconds.
        """
        port = self.remote_address.rpartition(":")[2] if ":" in self.remote_address else ""
        ident = "%s:%s %s" % (self.hostname, port, self.user_agent)
        age = int(now) - self.connect_ts if now >= self.connect_ts else 0
        connected = format_duration_ns(age * 1000000000)
        if self.pub_counts:
            total = sum(pub.count for pub in self.pub_counts)
            topics = ",".join("%s=%d" % (pub.topic, pub.count) for pub in self.pub_counts)
            return "[%s %-21s] msgs: %-8d topics: %s connected: %s" % (
                self.version,
                ident,
                total,
                topics,
                connected,
            )
        return (
            "[%s %-21s] state: %d inflt: %-4d rdy: %-4d fin: %-8d re-q: %-8d "
            "msgs: %-8d connected: %s"
        ) % (
            self.version,
            ident,
            self.state,
            self.in_flight_count,
            self.ready_count,
            self.finish_count,
            self.requeue_count,
            self.message_count,
            connected,
        )


@dataclass
class ChannelStats:
    """One channel.  ``clients`` is ``None`` when clients were not asked for."""

    channel_name: str
    depth: int
    backend_depth: int
    in_flight_count: int
    deferred_count: int
    message_count: int
    requeue_count: int
    timeout_count: int
    client_count: int
    clients: Optional[List[ClientStats]]
    paused: bool
    e2e_processing_latency: QuantileResult = field(default_factory=lambda: EMPTY_RESULT)

    def to_json(self) -> Dict[str, Any]:
        """Go's ``ChannelStats`` JSON, in its field order."""
        return {
            "channel_name": self.channel_name,
            "depth": self.depth,
            "backend_depth": self.backend_depth,
            "in_flight_count": self.in_flight_count,
            "deferred_count": self.deferred_count,
            "message_count": self.message_count,
            "requeue_count": self.requeue_count,
            "timeout_count": self.timeout_count,
            "client_count": self.client_count,
            "clients": (
                None if self.clients is None else [c.to_json() for c in self.clients]
            ),
            "paused": self.paused,
            "e2e_processing_latency": self.e2e_processing_latency.to_json(),
        }


@dataclass
class TopicStats:
    """One topic; ``depth`` counts what the topic holds itself."""

    topic_name: str
    channels: List[ChannelStats]
    depth: int
    backend_depth: int
    message_count: int
    message_bytes: int
    paused: bool
    e2e_processing_latency: QuantileResult = field(default_factory=lambda: EMPTY_RESULT)
    #: txnsq's retained log (``None``: not retained): its settings and,
    #: per partition, first and next offset, bytes and segments.
    retention: Optional[Dict[str, Any]] = None

    def to_json(self) -> Dict[str, Any]:
        """Go's ``TopicStats`` JSON, in its field order, plus ``retention`` when retained."""
        found = self._go_json()
        if self.retention is not None:
            found["retention"] = self.retention
        return found

    def _go_json(self) -> Dict[str, Any]:
        return {
            "topic_name": self.topic_name,
            "channels": [c.to_json() for c in self.channels],
            "depth": self.depth,
            "backend_depth": self.backend_depth,
            "message_count": self.message_count,
            "message_bytes": self.message_bytes,
            "paused": self.paused,
            "e2e_processing_latency": self.e2e_processing_latency.to_json(),
        }


@dataclass
class NSQDStats:
    """
    A whole ``/stats`` snapshot.

    ``topics`` is ``None`` when a ``topic`` filter named no topic (Go's
    ``null``; a ``channel`` filter naming no channel gives ``[]``),
    ``memory`` is ``None`` without ``include_mem``, ``producers`` is
    ``None`` without ``include_clients`` or when there is none.
    """

    version: str
    health: str
    start_time: float
    topics: Optional[List[TopicStats]]
    memory: Optional[MemStats]
    producers: Optional[List[ClientStats]]
    #: The build token named in the text page's first line, where Go
    #: names its toolchain.
    build: str = field(default_factory=build_token)


# -- collecting ------------------------------------------------------------


def client_stats(client: Any, topic: Optional[str] = None) -> ClientStats:
    """
    One client's stats (Go's ``clientV2.Stats(topicName)``).

    Like Go v1.3, ``pub_counts`` holds at most one topic: ``topic`` when
    given (nothing if the client never published to it), else the first
    topic the client published to (Go picks one at random).
    """
    pub_counts: List[PubCount] = []
    for name, count in getattr(client, "pub_counts", {}).items():
        if topic and name != topic:
            continue
        pub_counts.append(PubCount(name, count))
        # Go's loop breaks after its first entry.
        break
    return ClientStats(
        client_id=client.client_id,
        hostname=client.hostname,
        remote_address=client.remote_address,
        state=client.stats_state,
        ready_count=client.ready_count,
        in_flight_count=client.in_flight_count,
        message_count=client.message_count,
        finish_count=client.finish_count,
        requeue_count=client.requeue_count,
        connect_ts=int(client.connect_time),
        sample_rate=client.sample_rate,
        user_agent=client.user_agent,
        deflate=bool(getattr(client, "deflate", False)),
        snappy=bool(getattr(client, "snappy", False)),
        authed=bool(getattr(client, "authed", False)),
        auth_identity=getattr(client, "auth_identity", "") or "",
        auth_identity_url=getattr(client, "auth_identity_url", "") or "",
        pub_counts=pub_counts,
        tls=bool(getattr(client, "tls", False)),
        tls_cipher_suite=getattr(client, "tls_cipher_suite", "") or "",
        tls_version=getattr(client, "tls_version", "") or "",
        tls_negotiated_protocol=getattr(client, "tls_negotiated_protocol", "") or "",
        tls_negotiated_protocol_is_mutual=bool(
            getattr(client, "tls_negotiated_protocol_is_mutual", False)
        ),
    )


def _backend_depth(queue: Any) -> int:
    """The part of a queue on disk; 0 for a queue that has no disk part."""
    backend_depth = getattr(queue, "backend_depth", None)
    return backend_depth() if backend_depth is not None else 0


def _channel_stats(
    channel: Channel, include_clients: bool, topic: Optional[str]
) -> ChannelStats:
    clients: Optional[List[ClientStats]] = None
    if include_clients:
        clients = [client_stats(c, topic) for c in channel.consumers]
    latency = channel.e2e_latency
    return ChannelStats(
        channel_name=channel.name,
        depth=channel.depth(),
        backend_depth=_backend_depth(channel.queue),
        in_flight_count=channel.in_flight_count,
        deferred_count=channel.deferred_count,
        message_count=channel.message_count,
        requeue_count=channel.requeue_count,
        timeout_count=channel.timeout_count,
        client_count=len(channel.consumers),
        clients=clients,
        paused=channel.paused,
        e2e_processing_latency=(
            EMPTY_RESULT if latency is None else latency.result()
        ),
    )


def _topic_stats(topic: Topic, channels: List[ChannelStats]) -> TopicStats:
    # Aggregated over all the topic's channels, also when the stats are
    # filtered to one channel (as Go).
    latencies = [
        c.e2e_latency for c in topic.channels.values() if c.e2e_latency is not None
    ]
    return TopicStats(
        topic_name=topic.name,
        channels=channels,
        depth=topic.depth(),
        backend_depth=_backend_depth(topic.queue),
        message_count=topic.message_count,
        message_bytes=topic.message_bytes,
        paused=topic.paused,
        e2e_processing_latency=aggregate(latencies),
        retention=retention_stats(topic),
    )


def retention_stats(topic: Topic) -> Optional[Dict[str, Any]]:
    """
    A retained topic's ``retention`` object in ``/stats``: ``bytes_limit``,
    ``age_ms``, ``log_bytes`` (over every partition) and ``partitions``,
    each ``{"partition", "first_offset", "next_offset", "bytes",
    "segments"}``; ``None`` when the topic is not retained.
    """
    retention = topic.retention
    if retention is None:
        return None
    settings = retention.settings
    partitions = [
        {
            "partition": number,
            "first_offset": stats.first_offset,
            "next_offset": stats.next_offset,
            "bytes": stats.bytes,
            "segments": stats.segments,
        }
        for number, stats in enumerate(retention.log.stats())
    ]
    return {
        "bytes_limit": settings.bytes,
        "age_ms": int(round(settings.age * 1000)),
        "log_bytes": sum(p["bytes"] for p in partitions),
        "partitions": partitions,
    }


def health(broker: Broker) -> str:
    """Go's ``GetHealth``: ``OK``, or ``NOK - <why>`` while a queue cannot store."""
    error = broker.storage_error()
    if error is None:
        return "OK"
    return "NOK - %s" % (error,)


def collect(
    broker: Broker,
    clients: Iterable[Any],
    start_time: float,
    version: str = NSQ_VERSION,
    topic: Optional[str] = None,
    channel: Optional[str] = None,
    include_clients: bool = True,
    include_mem: bool = True,
) -> NSQDStats:
    """
    Snapshot the broker as Go's ``NSQD.GetStats`` and ``doStats`` do.

    :param clients: every connected TCP client (``NSQDFactory.clients``);
        the producers among them are listed under ``producers``.
    :param start_time: when nsqd started (Unix seconds).
    :param version: nsqd's version string.
    :param topic: only this topic (``None`` or ``""``: all).  A topic that
        does not exist gives ``topics`` and ``producers`` ``None``.
    :param channel: only this channel of each listed topic; a topic without
        it is left out.
    :param include_clients: list each channel's consumers and the
        producers; otherwise ``clients`` and ``producers`` are ``None``.
    :param include_mem: include :func:`memory_stats`.

    Topics and channels are sorted by name, consumers are in subscription
    order and producers in connection order.
    """
    stats = NSQDStats(
        version=version,
        health=health(broker),
        start_time=start_time,
        topics=None,
        memory=memory_stats() if include_mem else None,
        producers=None,
    )
    if topic:
        found = broker.topics.get(topic)
        if found is None:
            return stats
        topics = [found]
    else:
        topics = sorted(broker.topics.values(), key=lambda t: t.name)
    topic_stats: List[TopicStats] = []
    for each in topics:
        if channel:
            wanted = each.channels.get(channel)
            if wanted is None:
                continue
            channels = [wanted]
        else:
            channels = sorted(each.channels.values(), key=lambda c: c.name)
        topic_stats.append(
            _topic_stats(
                each, [_channel_stats(c, include_clients, topic) for c in channels]
            )
        )
    stats.topics = topic_stats
    if include_clients:
        producers = [
            client_stats(c, topic)
            for c in sorted(clients, key=lambda c: c.conn_id)
            if getattr(c, "pub_counts", None)
        ]
        stats.producers = producers or None
    return stats


# -- rendering -------------------------------------------------------------


def to_json(stats: NSQDStats) -> Dict[str, Any]:
    """
    The ``/stats?format=json`` document, ready for ``json.dumps``: Go's
    keys in Go's order, ``memory`` only when collected.
    """
    out: Dict[str, Any] = {
        "version": stats.version,
        "health": stats.health,
        "start_time": int(stats.start_time),
        "topics": (
            None if stats.topics is None else [t.to_json() for t in stats.topics]
        ),
    }
    if stats.memory is not None:
        out["memory"] = stats.memory.to_json()
    out["producers"] = (
        None if stats.producers is None else [p.to_json() for p in stats.producers]
    )
    return out
