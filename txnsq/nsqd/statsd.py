# -*- test-case-name: tests.test_statsd -*-
"""
Push nsqd's stats to statsd, the way Go nsqd's ``statsdLoop`` does.

Every ``--statsd-interval`` nsqd turns a stats snapshot (the dict of
``GET /stats?format=json``) into statsd lines, packs them into UDP
datagrams of at most ``--statsd-udp-packet-size`` bytes and spreads the
datagrams over the interval, less a second.  Reproduced from nsqio/nsq
``nsqd/statsd.go``, ``internal/statsd/client.go``, ``internal/statsd/host.go``
and ``internal/writers/{boundary_buffered,spread}_writer.go``:

* every line is ``<prefix><stat>:<int>|g`` (gauge) or ``|c`` (counter),
  ended by ``\\n`` on the wire;
* counters (``message_count``, ``message_bytes``, ``requeue_count``,
  ``timeout_count``, ``mem.gc_runs``) carry the difference from the
  previous push; a topic or channel the previous push did not see counts
  from zero, so the first push sends the totals;
* e2e percentiles are gauges named ``e2e_processing_latency_<q*100 as %.0f>``
  whose value is the nanosecond latency truncated to an integer;
* the prefix is ``--statsd-prefix`` with every ``%s`` replaced by
  ``<broadcast-address>:<http-port>`` with dots and colons turned into
  underscores, and a trailing dot added (:func:`statsd_prefix`).

The line builder and the packer are pure functions; :class:`StatsdService`
only schedules them and writes datagrams.
"""

from __future__ import annotations

from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Tuple

from twisted.application.service import Service
from twisted.internet import abstract
from twisted.internet.defer import Deferred, succeed
from twisted.internet.interfaces import IDelayedCall, IListeningPort
from twisted.internet.protocol import DatagramProtocol
from twisted.internet.task import LoopingCall
from twisted.logger import Logger
from twisted.python.failure import Failure

__all__ = [
    "StatsdService",
    "pack_lines",
    "parse_statsd_address",
    "statsd_host_key",
    "statsd_lines",
    "statsd_prefix",
]

# Go's bufio.NewWriterSize falls back to this size when given size <= 0.
_BUFIO_DEFAULT_SIZE = 4096

# Go nsqd's getMemStats fields, in the order statsdLoop sends them.
_MEM_GAUGES = (
    "heap_objects",
    "heap_idle_bytes",
    "heap_in_use_bytes",
    "heap_released_bytes",
    "gc_pause_usec_100",
    "gc_pause_usec_99",
    "gc_pause_usec_95",
    "next_gc_bytes",
)

_EPHEMERAL_SUFFIX = "#ephemeral"


def statsd_host_key(host_port: str) -> str:
    """Go's ``statsd.HostKey``: dots and colons become underscores."""
    return host_port.replace(".", "_").replace(":", "_")


def statsd_prefix(template: str, broadcast_address: str, http_port: int) -> str:
    """
    The prefix Go nsqd derives from ``--statsd-prefix`` at start-up.

    Every ``%s`` in ``template`` becomes the host key of
    ``JoinHostPort(broadcast_address, http_port)`` (so ``nsq.%s`` with
    ``host.example`` and 4151 gives ``nsq.host_example_4151.``) and a dot
    is appended unless the result already ends with one.  An empty
    template stays empty: no prefix.  ``http_port`` is the broadcast HTTP
    port, which defaults to the port actually bound.
    """
    if not template:
        return ""
    host = broadcast_address
    if ":" in host:
        # net.JoinHostPort brackets IPv6 literals; HostKey keeps the brackets.
        host = "[%s]" % (host,)
    key = statsd_host_key("%s:%d" % (host, http_port))
    prefix = template.replace("%s", key)
    if not prefix.endswith("."):
        prefix += "."
    return prefix


def parse_statsd_address(address: str) -> Tuple[str, int]:
    """
    Split ``--statsd-address`` (``host:port``, ``[v6]:port``) in two.

    :raises ValueError: there is no port, or it is not a number in
        0..65535.
    """
    host, sep, port_text = address.rpartition(":")
    if not sep or not port_text.isdigit():
        raise ValueError("invalid statsd address %r (want host:port)" % (address,))
    port = int(port_text)
    if port > 65535:
        raise ValueError("invalid statsd address %r (port out of range)" % (address,))
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    elif ":" in host:
        raise ValueError("invalid statsd address %r (bracket IPv6 hosts)" % (address,))
    return host, port


def _by_name(items: Optional[Sequence[Mapping[str, Any]]], key: str) -> Dict[str, Mapping[str, Any]]:
    """Index stats entries by name; the first of a duplicated name wins, as in Go."""
    found: Dict[str, Mapping[str, Any]] = {}
    for item in items or ():
        found.setdefault(item[key], item)
    return found


def _percentile_lines(
    lines: List[str], base: str, latency: Optional[Mapping[str, Any]]
) -> None:
    """Append one gauge per e2e percentile; absent or null percentiles add none."""
    if not latency:
        return
    for item in latency.get("percentiles") or ():
        # Go: fmt.Sprintf("%.0f", quantile*100.0) and int64(value).
        lines.append(
            "%se2e_processing_latency_%.0f:%d|g"
            % (base, item["quantile"] * 100.0, int(item["value"]))
        )


def statsd_lines(
    previous_stats: Optional[Mapping[str, Any]],
    stats: Mapping[str, Any],
    prefix: str,
    mem_stats: bool,
    exclude_ephemeral: bool = False,
) -> List[str]:
    """
    The statsd lines one push of Go nsqd's ``statsdLoop`` sends, in order.

    :param previous_stats: the snapshot of the previous push, or ``None``
        for the first; counters are the difference from it.
    :param stats: the current snapshot, shaped as ``GET
        /stats?format=json`` (``topics``; ``memory`` optional).
    :param prefix: the final prefix, e.g. from :func:`statsd_prefix`.
    :param mem_stats: ``--statsd-mem-stats``: add the ``mem.*`` lines
        (skipped when the snapshot has no ``memory``).
    :param exclude_ephemeral: ``--statsd-exclude-ephemeral``: skip topics
        and channels whose name ends in ``#ephemeral``.
    :return: lines without their trailing newline (:func:`pack_lines`
        adds it).
    :raises KeyError: a topic or channel lacks a field Go always sends.
    """
    previous: Mapping[str, Any] = previous_stats or {}
    last_topics = _by_name(previous.get("topics"), "topic_name")
    lines: List[str] = []
    for topic in stats.get("topics") or ():
        topic_name = topic["topic_name"]
        if exclude_ephemeral and topic_name.endswith(_EPHEMERAL_SUFFIX):
            continue
        last_topic = last_topics.get(topic_name, {})
        base = "%stopic.%s." % (prefix, topic_name)
        # Go subtracts uint64s and casts to int64: a counter that went down
        # (topic deleted and recreated) is sent as a negative count.
        lines.append(
            "%smessage_count:%d|c"
            % (base, topic["message_count"] - last_topic.get("message_count", 0))
        )
        lines.append(
            "%smessage_bytes:%d|c"
            % (base, topic["message_bytes"] - last_topic.get("message_bytes", 0))
        )
        lines.append("%sdepth:%d|g" % (base, topic["depth"]))
        lines.append("%sbackend_depth:%d|g" % (base, topic["backend_depth"]))
        _percentile_lines(lines, base, topic.get("e2e_processing_latency"))

        last_channels = _by_name(last_topic.get("channels"), "channel_name")
        for channel in topic.get("channels") or ():
            channel_name = channel["channel_name"]
            if exclude_ephemeral and channel_name.endswith(_EPHEMERAL_SUFFIX):
                continue
            last = last_channels.get(channel_name, {})
            cbase = "%schannel.%s." % (base, channel_name)
            lines.append(
                "%smessage_count:%d|c"
                % (cbase, channel["message_count"] - last.get("message_count", 0))
            )
            lines.append("%sdepth:%d|g" % (cbase, channel["depth"]))
            lines.append("%sbackend_depth:%d|g" % (cbase, channel["backend_depth"]))
            lines.append("%sin_flight_count:%d|g" % (cbase, channel["in_flight_count"]))
            lines.append("%sdeferred_count:%d|g" % (cbase, channel["deferred_count"]))
            lines.append(
                "%srequeue_count:%d|c"
                % (cbase, channel["requeue_count"] - last.get("requeue_count", 0))
            )
            lines.append(
                "%stimeout_count:%d|c"
                % (cbase, channel["timeout_count"] - last.get("timeout_count", 0))
            )
            lines.append("%sclients:%d|g" % (cbase, channel["client_count"]))
            _percentile_lines(lines, cbase, channel.get("e2e_processing_latency"))

    memory = stats.get("memory")
    if mem_stats and memory:
        for field in _MEM_GAUGES:
            lines.append("%smem.%s:%d|g" % (prefix, field, memory[field]))
        last_memory = previous.get("memory") or {}
        lines.append(
            "%smem.gc_runs:%d|c"
            % (prefix, memory["gc_total_runs"] - last_memory.get("gc_total_runs", 0))
        )
    return lines


def pack_lines(lines: Sequence[str], packet_size: int) -> List[bytes]:
    """
    Pack statsd lines into datagram payloads, as Go's
    ``BoundaryBufferedWriter`` over a ``bufio.Writer`` of ``packet_size``.

    Each line is sent with a trailing ``\\n`` and never split; a payload
    holds as many whole lines as fit in ``packet_size`` bytes.  A single
    line longer than ``packet_size`` goes alone in an oversized payload
    (Go writes it straight through).  ``packet_size <= 0`` means 4096, Go's
    bufio default.
    """
    if packet_size <= 0:
        packet_size = _BUFIO_DEFAULT_SIZE
    packets: List[bytes] = []
    current: List[bytes] = []
    used = 0
    for line in lines:
        data = line.encode("utf-8") + b"\n"
        if used + len(data) > packet_size and current:
            packets.append(b"".join(current))
            current = []
            used = 0
        if len(data) > packet_size:
            packets.append(data)
            continue
        current.append(data)
        used += len(data)
    if current:
        packets.append(b"".join(current))
    return packets


class StatsdService(Service):
    """
    Push stats to a statsd daemon every ``interval`` seconds.

    The first push is one interval after start, as with Go's ticker.  The
    host of ``address`` is resolved once (IPv4 names; IPv4 and IPv6
    literals) and one unconnected UDP port is used for the service's life.
    The datagrams of a push are spread evenly over ``interval - 1``
    seconds, like Go's ``SpreadWriter``; with an interval of a second or
    less they all go at once.  A push still spreading when the next one is
    due, or when the service stops, sends its remaining datagrams at once.
    Failures (resolution, the stats provider, ``sendto``) are logged and
    never stop the loop; a push that cannot resolve the address leaves the
    previous snapshot in place, so the next push's counters cover both
    intervals, as in Go.

    :param stats_provider: returns a fresh ``/stats?format=json``-shaped
        snapshot; it is kept until the next push to compute deltas.
    :param address: ``--statsd-address``, ``host:port``.
    :param prefix: the final prefix (:func:`statsd_prefix`).
    :param interval: ``--statsd-interval`` in seconds.
    :param mem_stats: ``--statsd-mem-stats``.
    :param packet_size: ``--statsd-udp-packet-size``.
    :param reactor: provides ``callLater``, ``resolve`` and ``listenUDP``.
    :param exclude_ephemeral: ``--statsd-exclude-ephemeral``.
    :raises ValueError: ``address`` is not ``host:port`` or ``interval``
        is not positive.
    """

    _log = Logger()

    def __init__(
        self,
        stats_provider: Callable[[], Mapping[str, Any]],
        address: str,
        prefix: str,
        interval: float,
        mem_stats: bool,
        packet_size: int,
        reactor: Any,
        exclude_ephemeral: bool = False,
    ) -> None:
        if interval <= 0:
            raise ValueError("statsd interval must be positive, not %r" % (interval,))
        self.stats_provider = stats_provider
        self.address = address
        self._host, self._port = parse_statsd_address(address)
        self.prefix = prefix
        self.interval = interval
        self.mem_stats = mem_stats
        self.packet_size = packet_size
        self.exclude_ephemeral = exclude_ephemeral
        self._reactor = reactor
        self._previous: Optional[Mapping[str, Any]] = None
        self._resolved: Optional[str] = None
        self._udp: Optional[IListeningPort] = None
        self._pending: List[bytes] = []
        self._spread_call: Optional[IDelayedCall] = None
        self._stopped = False
        self._loop = LoopingCall(self.push)
        self._loop.clock = reactor

    def startService(self) -> None:
        """Start the loop; the first push is one interval away."""
        Service.startService(self)
        self._stopped = False
        self._loop.start(self.interval, now=False)

    def stopService(self) -> "Deferred[None]":
        """Stop the loop, send what a push still holds, close the UDP port."""
        Service.stopService(self)
        self._stopped = True
        if self._loop.running:
            self._loop.stop()
        self._flush_pending()
        self._log.info("STATSD: closing")
        udp, self._udp = self._udp, None
        if udp is None:
            return succeed(None)
        stopped = udp.stopListening()
        if isinstance(stopped, Deferred):
            return stopped.addCallback(lambda _: None)
        return succeed(None)

    def push(self) -> "Deferred[None]":
        """
        One tick: make sure the address is resolved and a UDP port is open,
        then take a snapshot and send its lines.  The Deferred fires once
        the first datagram is written (the rest may be spread); it never
        fails.
        """
        self._flush_pending()

        def send(ok: bool) -> None:
            if ok:
                self._send_snapshot()

        return self._ensure_udp().addCallback(send).addErrback(self._push_failed)

    def _push_failed(self, failure: Failure) -> None:
        """Log a push that failed; the loop goes on."""
        self._log.failure(
            "STATSD: push to {address} failed", failure, address=self.address
        )

    def _ensure_udp(self) -> "Deferred[bool]":
        """
        Resolve the host and open the UDP port, both once.  Fires ``True``
        when ready, ``False`` when resolution failed (logged) or the service
        stopped meanwhile.
        """
        if self._udp is not None:
            return succeed(True)
        resolving: Deferred[str]
        if self._resolved is not None:
            resolving = succeed(self._resolved)
        elif abstract.isIPAddress(self._host) or abstract.isIPv6Address(self._host):
            resolving = succeed(self._host)
        else:
            resolving = self._reactor.resolve(self._host)

        def listen(ip: str) -> bool:
            self._resolved = ip
            if self._stopped:
                return False
            if self._udp is None:
                interface = "::" if abstract.isIPv6Address(ip) else ""
                self._udp = self._reactor.listenUDP(
                    0, DatagramProtocol(), interface=interface
                )
            return True

        def unresolved(failure: Failure) -> bool:
            # Go: "failed to create UDP socket to statsd(%s)", and no push.
            self._log.error(
                "failed to create UDP socket to statsd({address}) - {error}",
                address=self.address,
                error=failure.getErrorMessage(),
            )
            return False

        return resolving.addCallbacks(listen, unresolved)

    def _send_snapshot(self) -> None:
        """Build this push's datagrams from a fresh snapshot and start sending."""
        self._log.info("STATSD: pushing stats to {address}", address=self.address)
        stats = self.stats_provider()
        lines = statsd_lines(
            self._previous, stats, self.prefix, self.mem_stats, self.exclude_ephemeral
        )
        self._previous = stats
        self._pending = pack_lines(lines, self.packet_size)
        if not self._pending:
            return
        window = self.interval - 1.0
        spacing = window / len(self._pending) if window > 0 else 0.0
        self._send_next(spacing)

    def _send_next(self, spacing: float) -> None:
        """Send one datagram (or all, without spacing); schedule the next."""
        self._spread_call = None
        if spacing <= 0:
            self._flush_pending()
            return
        if self._pending:
            self._write(self._pending.pop(0))
        if self._pending:
            self._spread_call = self._reactor.callLater(spacing, self._send_next, spacing)

    def _flush_pending(self) -> None:
        """Send every datagram still waiting, now."""
        if self._spread_call is not None:
            if self._spread_call.active():
                self._spread_call.cancel()
            self._spread_call = None
        pending, self._pending = self._pending, []
        for packet in pending:
            self._write(packet)

    def _write(self, packet: bytes) -> None:
        """Send one datagram; log, never raise, when the socket refuses it."""
        if self._udp is None or self._resolved is None:
            return
        try:
            self._udp.write(packet, (self._resolved, self._port))  # type: ignore[attr-defined]
        except Exception as error:
            self._log.error(
                "STATSD: failed to send {size} bytes to {address} - {error}",
                size=len(packet),
                address=self.address,
                error=error,
            )

