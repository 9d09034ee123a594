"""
Tests for txnsq.nsqd.statsd: the lines and datagrams of Go nsqd's
statsdLoop, the push schedule on a task.Clock, and one real UDP exchange.
"""

from __future__ import annotations

import copy
from typing import Any, Dict, List, Mapping, Optional, Tuple

from twisted.internet import reactor as global_reactor
from twisted.internet.defer import Deferred, fail, succeed
from twisted.internet.error import DNSLookupError
from twisted.internet.protocol import DatagramProtocol
from twisted.internet.task import Clock
from twisted.logger import Logger
from twisted.trial.unittest import SynchronousTestCase, TestCase

from txnsq.nsqd.statsd import (
    StatsdService,
    pack_lines,
    parse_statsd_address,
    statsd_host_key,
    statsd_lines,
    statsd_prefix,
)

PREFIX = "nsq.host_4151."


def channel(name: str, **fields: Any) -> Dict[str, Any]:
    """A channel entry of /stats?format=json; unnamed fields are zero."""
    entry: Dict[str, Any] = {
        "channel_name": name,
        "depth": 0,
        "backend_depth": 0,
        "in_flight_count": 0,
        "deferred_count": 0,
        "message_count": 0,
        "requeue_count": 0,
        "timeout_count": 0,
        "client_count": 0,
        "clients": [],
        "paused": False,
        "e2e_processing_latency": {"count": 0, "percentiles": None},
    }
    entry.update(fields)
    return entry


def topic(name: str, channels: List[Dict[str, Any]], **fields: Any) -> Dict[str, Any]:
    """A topic entry of /stats?format=json; unnamed fields are zero."""
    entry: Dict[str, Any] = {
        "topic_name": name,
        "channels": channels,
        "depth": 0,
        "backend_depth": 0,
        "message_count": 0,
        "message_bytes": 0,
        "paused": False,
        "e2e_processing_latency": {"count": 0, "percentiles": None},
    }
    entry.update(fields)
    return entry


def memory(**fields: int) -> Dict[str, int]:
    """The memory block of /stats?format=json."""
    entry = {
        "heap_objects": 1000,
        "heap_idle_bytes": 2000,
        "heap_in_use_bytes": 3000,
        "heap_released_bytes": 4000,
        "gc_pause_usec_100": 50,
        "gc_pause_usec_99": 40,
        "gc_pause_usec_95": 30,
        "next_gc_bytes": 5000,
        "gc_total_runs": 7,
    }
    entry.update(fields)
    return entry


def snapshot(topics: List[Dict[str, Any]], mem: Optional[Dict[str, int]] = None) -> Dict[str, Any]:
    """A whole /stats?format=json document."""
    stats: Dict[str, Any] = {
        "version": "1.3.0",
        "health": "OK",
        "start_time": 1700000000,
        "topics": topics,
        "producers": None,
    }
    if mem is not None:
        stats["memory"] = mem
    return stats


def first_stats() -> Dict[str, Any]:
    """One topic with an e2e percentile and one busy channel, plus memory."""
    return snapshot(
        [
            topic(
                "orders",
                [
                    channel(
                        "billing",
                        depth=3,
                        backend_depth=1,
                        in_flight_count=2,
                        deferred_count=1,
                        message_count=10,
                        requeue_count=2,
                        timeout_count=1,
                        client_count=4,
                        e2e_processing_latency={
                            "count": 5,
                            "percentiles": [
                                {"quantile": 0.5, "value": 1500.9},
                                {"quantile": 0.999, "value": 9000.0},
                            ],
                        },
                    )
                ],
                depth=5,
                backend_depth=2,
                message_count=10,
                message_bytes=100,
                e2e_processing_latency={
                    "count": 5,
                    "percentiles": [{"quantile": 0.99, "value": 2000.0}],
                },
            )
        ],
        memory(),
    )


FIRST_LINES = [
    "nsq.host_4151.topic.orders.message_count:10|c",
    "nsq.host_4151.topic.orders.message_bytes:100|c",
    "nsq.host_4151.topic.orders.depth:5|g",
    "nsq.host_4151.topic.orders.backend_depth:2|g",
    "nsq.host_4151.topic.orders.e2e_processing_latency_99:2000|g",
    "nsq.host_4151.topic.orders.channel.billing.message_count:10|c",
    "nsq.host_4151.topic.orders.channel.billing.depth:3|g",
    "nsq.host_4151.topic.orders.channel.billing.backend_depth:1|g",
    "nsq.host_4151.topic.orders.channel.billing.in_flight_count:2|g",
    "nsq.host_4151.topic.orders.channel.billing.deferred_count:1|g",
    "nsq.host_4151.topic.orders.channel.billing.requeue_count:2|c",
    "nsq.host_4151.topic.orders.channel.billing.timeout_count:1|c",
    "nsq.host_4151.topic.orders.channel.billing.clients:4|g",
    "nsq.host_4151.topic.orders.channel.billing.e2e_processing_latency_50:1500|g",
    "nsq.host_4151.topic.orders.channel.billing.e2e_processing_latency_100:9000|g",
    "nsq.host_4151.mem.heap_objects:1000|g",
    "nsq.host_4151.mem.heap_idle_bytes:2000|g",
    "nsq.host_4151.mem.heap_in_use_bytes:3000|g",
    "nsq.host_4151.mem.heap_released_bytes:4000|g",
    "nsq.host_4151.mem.gc_pause_usec_100:50|g",
    "nsq.host_4151.mem.gc_pause_usec_99:40|g",
    "nsq.host_4151.mem.gc_pause_usec_95:30|g",
    "nsq.host_4151.mem.next_gc_bytes:5000|g",
    "nsq.host_4151.mem.gc_runs:7|c",
]


def second_stats() -> Dict[str, Any]:
    """first_stats() one interval later: more traffic, a new channel."""
    stats = first_stats()
    orders = stats["topics"][0]
    orders.update(message_count=15, message_bytes=160, depth=1)
    billing = orders["channels"][0]
    billing.update(
        message_count=15,
        requeue_count=5,
        timeout_count=1,
        depth=0,
        in_flight_count=0,
        e2e_processing_latency={"count": 0, "percentiles": None},
    )
    orders["channels"].append(channel("audit", message_count=5, client_count=1))
    orders["e2e_processing_latency"] = {"count": 0, "percentiles": None}
    stats["memory"] = memory(gc_total_runs=10)
    return stats


SECOND_LINES = [
    "nsq.host_4151.topic.orders.message_count:5|c",
    "nsq.host_4151.topic.orders.message_bytes:60|c",
    "nsq.host_4151.topic.orders.depth:1|g",
    "nsq.host_4151.topic.orders.backend_depth:2|g",
    "nsq.host_4151.topic.orders.channel.billing.message_count:5|c",
    "nsq.host_4151.topic.orders.channel.billing.depth:0|g",
    "nsq.host_4151.topic.orders.channel.billing.backend_depth:1|g",
    "nsq.host_4151.topic.orders.channel.billing.in_flight_count:0|g",
    "nsq.host_4151.topic.orders.channel.billing.deferred_count:1|g",
    "nsq.host_4151.topic.orders.channel.billing.requeue_count:3|c",
    "nsq.host_4151.topic.orders.channel.billing.timeout_count:0|c",
    "nsq.host_4151.topic.orders.channel.billing.clients:4|g",
    "nsq.host_4151.topic.orders.channel.audit.message_count:5|c",
    "nsq.host_4151.topic.orders.channel.audit.depth:0|g",
    "nsq.host_4151.topic.orders.channel.audit.backend_depth:0|g",
    "nsq.host_4151.topic.orders.channel.audit.in_flight_count:0|g",
    "nsq.host_4151.topic.orders.channel.audit.deferred_count:0|g",
    "nsq.host_4151.topic.orders.channel.audit.requeue_count:0|c",
    "nsq.host_4151.topic.orders.channel.audit.timeout_count:0|c",
    "nsq.host_4151.topic.orders.channel.audit.clients:1|g",
    "nsq.host_4151.mem.heap_objects:1000|g",
    "nsq.host_4151.mem.heap_idle_bytes:2000|g",
    "nsq.host_4151.mem.heap_in_use_bytes:3000|g",
    "nsq.host_4151.mem.heap_released_bytes:4000|g",
    "nsq.host_4151.mem.gc_pause_usec_100:50|g",
    "nsq.host_4151.mem.gc_pause_usec_99:40|g",
    "nsq.host_4151.mem.gc_pause_usec_95:30|g",
    "nsq.host_4151.mem.next_gc_bytes:5000|g",
    "nsq.host_4151.mem.gc_runs:3|c",
]


class StatsdLinesTests(SynchronousTestCase):
    """statsd_lines builds Go statsdLoop's lines from stats snapshots."""

    def test_first_push(self) -> None:
        """The first push sends counter totals, gauges, e2e percentiles and memory, in Go's order."""
        self.assertEqual(statsd_lines(None, first_stats(), PREFIX, True), FIRST_LINES)

    def test_counters_are_deltas(self) -> None:
        """Counters carry the change since the previous snapshot; a new channel counts from zero."""
        self.assertEqual(
            statsd_lines(first_stats(), second_stats(), PREFIX, True), SECOND_LINES
        )

    def test_counter_that_went_down_is_negative(self) -> None:
        """A topic recreated with lower counts sends a negative count, like Go's uint64-to-int64 cast."""
        later = snapshot([topic("orders", [], message_count=2, message_bytes=20)])
        lines = statsd_lines(first_stats(), later, "", False)
        self.assertEqual(
            lines[:2],
            ["topic.orders.message_count:-8|c", "topic.orders.message_bytes:-80|c"],
        )

    def test_mem_stats_off(self) -> None:
        """Without --statsd-mem-stats no mem.* line is sent."""
        lines = statsd_lines(None, first_stats(), PREFIX, False)
        self.assertEqual(lines, [line for line in FIRST_LINES if ".mem." not in line])

    def test_snapshot_without_memory(self) -> None:
        """A snapshot without a memory block sends no mem.* line even with --statsd-mem-stats."""
        stats = first_stats()
        del stats["memory"]
        lines = statsd_lines(None, stats, PREFIX, True)
        self.assertEqual(lines, [line for line in FIRST_LINES if ".mem." not in line])

    def test_empty(self) -> None:
        """No topics and no memory make no lines; null topics and channels are empty."""
        self.assertEqual(statsd_lines(None, snapshot([]), PREFIX, True), [])
        self.assertEqual(statsd_lines(None, {"topics": None}, PREFIX, True), [])
        self.assertEqual(
            len(statsd_lines(None, snapshot([topic("t", None)]), "", False)),  # type: ignore[arg-type]
            4,
        )

    def test_exclude_ephemeral(self) -> None:
        """With --statsd-exclude-ephemeral, '#ephemeral' topics and channels are skipped."""
        stats = snapshot(
            [
                topic("t", [channel("c#ephemeral"), channel("d")]),
                topic("e#ephemeral", [channel("c")]),
            ]
        )
        names = [
            line.split(":")[0]
            for line in statsd_lines(None, stats, "", False, exclude_ephemeral=True)
        ]
        self.assertIn("topic.t.depth", names)
        self.assertIn("topic.t.channel.d.depth", names)
        self.assertFalse([name for name in names if "ephemeral" in name])
        kept = statsd_lines(None, stats, "", False)
        self.assertIn("topic.e#ephemeral.channel.c.depth:0|g", kept)

    def test_percentile_names(self) -> None:
        """Percentile names are quantile*100 formatted as %.0f; values are truncated to integers."""
        stats = snapshot(
            [
                topic(
                    "t",
                    [],
                    e2e_processing_latency={
                        "count": 3,
                        "percentiles": [
                            {"quantile": 1.0, "value": 10.99},
                            {"quantile": 0.95, "value": 5.0},
                            {"quantile": 0.125, "value": 0.5},
                        ],
                    },
                )
            ]
        )
        lines = statsd_lines(None, stats, "", False)
        self.assertEqual(
            lines[4:],
            [
                "topic.t.e2e_processing_latency_100:10|g",
                "topic.t.e2e_processing_latency_95:5|g",
                "topic.t.e2e_processing_latency_12:0|g",
            ],
        )


class StatsdPrefixTests(SynchronousTestCase):
    """statsd_prefix and statsd_host_key reproduce Go nsqd's prefix set-up."""

    def test_default_template(self) -> None:
        """nsq.%s gets the broadcast address and HTTP port with dots and colons as underscores."""
        self.assertEqual(
            statsd_prefix("nsq.%s", "host.example.com", 4151),
            "nsq.host_example_com_4151.",
        )

    def test_every_placeholder_and_trailing_dot(self) -> None:
        """Every %s is replaced and a dot is added only when missing."""
        self.assertEqual(statsd_prefix("a.%s.b.%s", "h", 1), "a.h_1.b.h_1.")
        self.assertEqual(statsd_prefix("stats.", "h", 1), "stats.")
        self.assertEqual(statsd_prefix("stats", "h", 1), "stats.")

    def test_empty_template(self) -> None:
        """An empty --statsd-prefix means no prefix at all."""
        self.assertEqual(statsd_prefix("", "h", 1), "")

    def test_ipv6_broadcast_address(self) -> None:
        """IPv6 addresses are bracketed by JoinHostPort before HostKey, which keeps the brackets."""
        self.assertEqual(statsd_prefix("nsq.%s", "::1", 4151), "nsq.[__1]_4151.")

    def test_host_key(self) -> None:
        """HostKey replaces dots and colons only."""
        self.assertEqual(statsd_host_key("10.0.0.1:4151"), "10_0_0_1_4151")


class ParseStatsdAddressTests(SynchronousTestCase):
    """parse_statsd_address splits --statsd-address."""

    def test_forms(self) -> None:
        """Names, IPv4 and bracketed IPv6 hosts are accepted."""
        self.assertEqual(parse_statsd_address("statsd:8125"), ("statsd", 8125))
        self.assertEqual(parse_statsd_address("127.0.0.1:8125"), ("127.0.0.1", 8125))
        self.assertEqual(parse_statsd_address("[::1]:8125"), ("::1", 8125))

    def test_invalid(self) -> None:
        """A missing or bad port, or an unbracketed IPv6 host, raises ValueError."""
        for address in ("statsd", "statsd:", "statsd:x", "statsd:70000", "::1:8125"):
            self.assertRaises(ValueError, parse_statsd_address, address)


class PackLinesTests(SynchronousTestCase):
    """pack_lines fills datagrams like Go's BoundaryBufferedWriter."""

    lines = ["a" * 9, "b" * 9, "c" * 9]  # ten bytes each on the wire

    def test_all_fit(self) -> None:
        """Lines that fit share one datagram, each ended by a newline."""
        self.assertEqual(
            pack_lines(self.lines, 508),
            [b"aaaaaaaaa\nbbbbbbbbb\nccccccccc\n"],
        )

    def test_exact_boundary(self) -> None:
        """A datagram may be exactly packet_size bytes, never more."""
        self.assertEqual(
            pack_lines(self.lines, 20),
            [b"aaaaaaaaa\nbbbbbbbbb\n", b"ccccccccc\n"],
        )
        self.assertEqual(
            pack_lines(self.lines, 19),
            [b"aaaaaaaaa\n", b"bbbbbbbbb\n", b"ccccccccc\n"],
        )

    def test_never_over_size(self) -> None:
        """Packing Go's real lines never exceeds the size and loses nothing."""
        for size in (100, 200, 508, 1432):
            packets = pack_lines(FIRST_LINES, size)
            self.assertTrue(all(len(packet) <= size for packet in packets))
            self.assertEqual(
                b"".join(packets).decode().splitlines(), FIRST_LINES
            )
            self.assertTrue(all(packet.endswith(b"\n") for packet in packets))

    def test_oversized_line_alone(self) -> None:
        """A line longer than packet_size goes alone, unsplit, as Go writes it through."""
        self.assertEqual(
            pack_lines(["a" * 9, "x" * 30, "b" * 9], 20),
            [b"aaaaaaaaa\n", b"x" * 30 + b"\n", b"bbbbbbbbb\n"],
        )

    def test_empty_and_default_size(self) -> None:
        """No lines make no datagram; a size of 0 means bufio's 4096."""
        self.assertEqual(pack_lines([], 508), [])
        packets = pack_lines(["x" * 99] * 50, 0)
        self.assertEqual([len(packet) for packet in packets], [4000, 1000])


class FakeUDPPort:
    """Records datagrams the service writes; can be told to fail."""

    def __init__(self, interface: str) -> None:
        self.interface = interface
        self.sent: List[Tuple[bytes, Tuple[str, int]]] = []
        self.error: Optional[Exception] = None
        self.listening = True

    def write(self, data: bytes, addr: Tuple[str, int]) -> None:
        if self.error is not None:
            raise self.error
        self.sent.append((data, addr))

    def stopListening(self) -> None:
        self.listening = False


class FakeReactor(Clock):
    """A Clock that also resolves names and hands out FakeUDPPorts."""

    def __init__(self) -> None:
        Clock.__init__(self)
        self.ports: List[FakeUDPPort] = []
        self.resolutions: List[str] = []
        self.answers: Dict[str, Any] = {}

    def listenUDP(self, port: int, protocol: DatagramProtocol, interface: str = "") -> FakeUDPPort:
        udp = FakeUDPPort(interface)
        self.ports.append(udp)
        return udp

    def resolve(self, name: str) -> "Deferred[str]":
        self.resolutions.append(name)
        answer = self.answers[name]
        if isinstance(answer, Exception):
            return fail(answer)
        return succeed(str(answer))


class StatsdServiceTests(SynchronousTestCase):
    """StatsdService pushes on the reactor's clock, spreads datagrams and never raises."""

    def make(
        self,
        provider: Any,
        address: str = "127.0.0.1:8125",
        interval: float = 1.0,
        packet_size: int = 508,
    ) -> Tuple[StatsdService, FakeReactor, List[Dict[str, Any]]]:
        reactor = FakeReactor()
        service = StatsdService(
            provider, address, PREFIX, interval, True, packet_size, reactor
        )
        events: List[Dict[str, Any]] = []
        service._log = Logger(observer=events.append)  # type: ignore[misc, arg-type]
        return service, reactor, events

    def sent_lines(self, port: FakeUDPPort) -> List[str]:
        return b"".join(data for data, _ in port.sent).decode().splitlines()

    def test_first_push_after_interval(self) -> None:
        """Nothing is sent at start; the first push comes one interval later, logged as Go logs it."""
        service, reactor, events = self.make(first_stats)
        service.startService()
        reactor.advance(0.99)
        self.assertEqual(reactor.ports, [])
        reactor.advance(0.01)
        [port] = reactor.ports
        self.assertEqual(port.sent[0][1], ("127.0.0.1", 8125))
        self.assertEqual(self.sent_lines(port), FIRST_LINES)
        self.assertIn(
            "STATSD: pushing stats to 127.0.0.1:8125",
            [e["log_format"].format(**e) for e in events],
        )
        service.stopService()

    def test_deltas_across_pushes(self) -> None:
        """The second push's counters are the change since the first."""
        snapshots = [first_stats(), second_stats()]
        service, reactor, _ = self.make(lambda: snapshots.pop(0))
        service.startService()
        reactor.advance(1)
        [port] = reactor.ports
        del port.sent[:]
        reactor.advance(1)
        self.assertEqual(self.sent_lines(port), SECOND_LINES)
        service.stopService()

    def test_datagrams_spread_over_interval(self) -> None:
        """Datagrams go out evenly over interval - 1 seconds, like Go's SpreadWriter."""
        service, reactor, _ = self.make(first_stats, interval=10.0, packet_size=200)
        expected = pack_lines(FIRST_LINES, 200)
        self.assertEqual(len(expected), 7)
        service.startService()
        reactor.advance(10)
        [port] = reactor.ports
        self.assertEqual(len(port.sent), 1)
        spacing = 9.0 / 7
        reactor.advance(spacing - 0.01)
        self.assertEqual(len(port.sent), 1)
        reactor.advance(0.02)
        self.assertEqual(len(port.sent), 2)
        reactor.pump([spacing] * 5)
        self.assertEqual([data for data, _ in port.sent], expected)
        # Only the loop's next tick is left.
        self.assertEqual(len(reactor.getDelayedCalls()), 1)
        service.stopService()

    def test_stop_flushes_remaining(self) -> None:
        """Stopping sends the datagrams still waiting at once and closes the port."""
        service, reactor, events = self.make(first_stats, interval=10.0, packet_size=200)
        service.startService()
        reactor.advance(10)
        [port] = reactor.ports
        self.assertEqual(len(port.sent), 1)
        service.stopService()
        self.assertEqual([data for data, _ in port.sent], pack_lines(FIRST_LINES, 200))
        self.assertFalse(port.listening)
        self.assertEqual(reactor.getDelayedCalls(), [])
        self.assertIn("STATSD: closing", [e["log_format"] for e in events])

    def test_short_interval_sends_at_once(self) -> None:
        """With an interval of a second or less every datagram goes at once."""
        service, reactor, _ = self.make(first_stats, interval=0.5, packet_size=200)
        service.startService()
        reactor.advance(0.5)
        [port] = reactor.ports
        self.assertEqual(len(port.sent), 7)
        service.stopService()

    def test_resolves_once(self) -> None:
        """A host name is resolved once and its address reused for every push."""
        service, reactor, _ = self.make(first_stats, address="statsd.local:8125")
        reactor.answers["statsd.local"] = "10.1.2.3"
        service.startService()
        reactor.pump([1, 1, 1])
        self.assertEqual(reactor.resolutions, ["statsd.local"])
        [port] = reactor.ports
        self.assertEqual({addr for _, addr in port.sent}, {("10.1.2.3", 8125)})
        service.stopService()

    def test_resolution_failure(self) -> None:
        """A failed resolution is logged, skips the push and keeps the previous snapshot for deltas."""
        snapshots = [first_stats(), second_stats()]
        service, reactor, events = self.make(
            lambda: snapshots.pop(0), address="statsd.local:8125"
        )
        reactor.answers["statsd.local"] = DNSLookupError("statsd.local")
        service.startService()
        reactor.advance(1)
        self.assertEqual(reactor.ports, [])
        self.assertEqual(len(snapshots), 2)
        self.assertIn(
            "failed to create UDP socket to statsd({address}) - {error}",
            [e["log_format"] for e in events],
        )
        reactor.answers["statsd.local"] = "10.1.2.3"
        reactor.advance(1)
        [port] = reactor.ports
        self.assertEqual(self.sent_lines(port), FIRST_LINES)
        service.stopService()

    def test_send_error_logged(self) -> None:
        """A socket error on send is logged, not raised, and the loop goes on."""
        service, reactor, events = self.make(first_stats)
        service.startService()
        reactor.advance(1)
        [port] = reactor.ports
        port.error = OSError(101, "Network is unreachable")
        reactor.advance(1)
        errors = [e for e in events if e["log_format"].startswith("STATSD: failed to send")]
        repeat = statsd_lines(first_stats(), first_stats(), PREFIX, True)
        self.assertEqual(len(errors), len(pack_lines(repeat, 508)))
        port.error = None
        del port.sent[:]
        reactor.advance(1)
        self.assertTrue(port.sent)
        service.stopService()

    def test_provider_error_logged(self) -> None:
        """A stats provider that raises is logged and the loop keeps running."""
        calls: List[int] = []

        def provider() -> Mapping[str, Any]:
            calls.append(1)
            if len(calls) == 1:
                raise RuntimeError("boom")
            return first_stats()

        service, reactor, events = self.make(provider)
        service.startService()
        reactor.advance(1)
        self.assertTrue([e for e in events if "log_failure" in e])
        reactor.advance(1)
        [port] = reactor.ports
        self.assertEqual(self.sent_lines(port), FIRST_LINES)
        service.stopService()

    def test_next_push_flushes_previous(self) -> None:
        """A push started while the previous one is still spreading sends the rest of it first."""
        snapshots = [first_stats(), second_stats()]
        service, reactor, _ = self.make(
            lambda: snapshots.pop(0), interval=10.0, packet_size=200
        )
        service.startService()
        reactor.advance(10)
        [port] = reactor.ports
        self.assertEqual(len(port.sent), 1)
        service.push()
        lines = self.sent_lines(port)
        self.assertEqual(lines[: len(FIRST_LINES)], FIRST_LINES)
        self.assertEqual(lines[len(FIRST_LINES) : len(FIRST_LINES) + 1], SECOND_LINES[:1])
        service.stopService()

    def test_bad_arguments(self) -> None:
        """A bad address or a non-positive interval raises ValueError."""
        self.assertRaises(
            ValueError, StatsdService, dict, "nohost", "", 1.0, False, 508, Clock()
        )
        self.assertRaises(
            ValueError, StatsdService, dict, "h:1", "", 0, False, 508, Clock()
        )


class Collector(DatagramProtocol):
    """Collects statsd lines; fires when a line with a given name has arrived twice."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.lines: List[str] = []
        self.done: "Deferred[List[str]]" = Deferred()

    def datagramReceived(self, data: bytes, addr: Any) -> None:
        self.lines.extend(data.decode().splitlines())
        seen = [line for line in self.lines if line.startswith(self.name + ":")]
        if len(seen) >= 2 and not self.done.called:
            self.done.callback(self.lines)


class StatsdUDPTests(TestCase):
    """StatsdService sends real datagrams to a UDP listener on 127.0.0.1."""

    timeout = 10

    def test_real_udp(self) -> "Deferred[None]":
        """Two pushes arrive over UDP with Go's metric names and counter deltas."""
        snapshots = [first_stats(), second_stats()]
        last = snapshots[-1]

        def provider() -> Mapping[str, Any]:
            return snapshots.pop(0) if snapshots else copy.deepcopy(last)

        collector = Collector(PREFIX + "mem.gc_runs")
        port = global_reactor.listenUDP(  # type: ignore[attr-defined]
            0, collector, interface="127.0.0.1"
        )
        self.addCleanup(port.stopListening)
        service = StatsdService(
            provider,
            "127.0.0.1:%d" % (port.getHost().port,),
            PREFIX,
            0.05,
            True,
            200,
            global_reactor,
        )
        service.startService()
        self.addCleanup(service.stopService)

        def check(lines: List[str]) -> None:
            first = lines[: len(FIRST_LINES)]
            self.assertEqual(first, FIRST_LINES)
            second = lines[len(FIRST_LINES) : len(FIRST_LINES) + len(SECOND_LINES)]
            self.assertEqual(second, SECOND_LINES)
            names = {line.split(":")[0][len(PREFIX) :] for line in lines}
            self.assertIn("topic.orders.channel.audit.clients", names)
            self.assertIn("topic.orders.message_bytes", names)

        return collector.done.addCallback(check)
