"""
Tests for txnsq.nsqd.metrics: the /metrics page, read back with
prometheus_client's own text parser.
"""

from __future__ import annotations

from typing import Any, Dict, List, Tuple

from prometheus_client.parser import text_string_to_metric_families
from twisted.trial.unittest import SynchronousTestCase

from tests.test_statsd import channel, first_stats, memory, snapshot, topic
from txnsq.nsqd.metrics import (
    CONTENT_TYPE,
    escape_label_value,
    format_value,
    render_metrics,
)

Sample = Tuple[str, Tuple[Tuple[str, str], ...], float]


def parse(stats: Dict[str, Any]) -> Tuple[Dict[str, str], List[Sample]]:
    """Render and parse: the type of every family and every sample."""
    text = render_metrics(stats).decode("utf-8")
    types: Dict[str, str] = {}
    samples: List[Sample] = []
    for family in text_string_to_metric_families(text):
        types[family.name] = family.type
        for sample in family.samples:
            samples.append(
                (sample.name, tuple(sorted(sample.labels.items())), sample.value)
            )
    return types, samples


def value(samples: List[Sample], name: str, **labels: str) -> float:
    """The value of the one sample with this name and these labels."""
    key = tuple(sorted(labels.items()))
    found = [v for n, l, v in samples if n == name and l == key]
    if len(found) != 1:
        raise AssertionError("%d samples of %s%r" % (len(found), name, labels))
    return found[0]


class RenderMetricsTests(SynchronousTestCase):
    """render_metrics exposes a stats snapshot in Prometheus text format 0.0.4."""

    def test_content_type(self) -> None:
        """The content type names text format version 0.0.4 in UTF-8."""
        self.assertEqual(CONTENT_TYPE, "text/plain; version=0.0.4; charset=utf-8")

    def test_nsqd_level(self) -> None:
        """nsqd-wide gauges: up, health, version, start time and topic, channel and producer counts."""
        stats = first_stats()
        stats["topics"].append(topic("other", [channel("a"), channel("b")]))
        stats["producers"] = [{"client_id": "p1"}, {"client_id": "p2"}]
        types, samples = parse(stats)
        self.assertEqual(value(samples, "nsqd_up"), 1)
        self.assertEqual(value(samples, "nsqd_healthy"), 1)
        self.assertEqual(value(samples, "nsqd_info", version="1.3.0"), 1)
        self.assertEqual(value(samples, "nsqd_start_time_seconds"), 1700000000)
        self.assertEqual(value(samples, "nsqd_topics"), 2)
        self.assertEqual(value(samples, "nsqd_channels"), 3)
        self.assertEqual(value(samples, "nsqd_producers"), 2)
        for name in ("nsqd_up", "nsqd_healthy", "nsqd_topics", "nsqd_producers"):
            self.assertEqual(types[name], "gauge")

    def test_unhealthy(self) -> None:
        """A NOK health reads as nsqd_healthy 0."""
        stats = snapshot([])
        stats["health"] = "NOK - disk full"
        _, samples = parse(stats)
        self.assertEqual(value(samples, "nsqd_healthy"), 0)
        self.assertEqual(value(samples, "nsqd_producers"), 0)

    def test_topic_samples(self) -> None:
        """Each topic has depth, backend depth, counters with _total, paused and e2e quantiles in seconds."""
        stats = first_stats()
        stats["topics"][0]["paused"] = True
        types, samples = parse(stats)
        self.assertEqual(value(samples, "nsqd_topic_depth", topic="orders"), 5)
        self.assertEqual(value(samples, "nsqd_topic_backend_depth", topic="orders"), 2)
        self.assertEqual(value(samples, "nsqd_topic_messages_total", topic="orders"), 10)
        self.assertEqual(
            value(samples, "nsqd_topic_message_bytes_total", topic="orders"), 100
        )
        self.assertEqual(value(samples, "nsqd_topic_paused", topic="orders"), 1)
        self.assertAlmostEqual(
            value(
                samples,
                "nsqd_topic_e2e_processing_latency_seconds",
                topic="orders",
                quantile="0.99",
            ),
            2e-6,
        )
        self.assertEqual(types["nsqd_topic_messages"], "counter")
        self.assertEqual(types["nsqd_topic_message_bytes"], "counter")
        self.assertEqual(types["nsqd_topic_e2e_processing_latency_seconds"], "gauge")

    def test_channel_samples(self) -> None:
        """Each channel has its gauges and counters labelled by topic and channel."""
        types, samples = parse(first_stats())
        labels = {"topic": "orders", "channel": "billing"}
        expected = {
            "nsqd_channel_depth": 3,
            "nsqd_channel_backend_depth": 1,
            "nsqd_channel_in_flight_messages": 2,
            "nsqd_channel_deferred_messages": 1,
            "nsqd_channel_messages_total": 10,
            "nsqd_channel_requeues_total": 2,
            "nsqd_channel_timeouts_total": 1,
            "nsqd_channel_clients": 4,
            "nsqd_channel_paused": 0,
        }
        for name, number in expected.items():
            self.assertEqual(value(samples, name, **labels), number, name)
        for family in ("nsqd_channel_messages", "nsqd_channel_requeues", "nsqd_channel_timeouts"):
            self.assertEqual(types[family], "counter")
        self.assertEqual(types["nsqd_channel_depth"], "gauge")
        quantiles = {
            dict(l)["quantile"]: v
            for n, l, v in samples
            if n == "nsqd_channel_e2e_processing_latency_seconds"
        }
        self.assertEqual(sorted(quantiles), ["0.5", "0.999"])
        self.assertAlmostEqual(quantiles["0.5"], 1.5009e-6)

    def test_memory(self) -> None:
        """The memory block becomes gauges, GC pause quantiles in seconds and a GC run counter."""
        types, samples = parse(first_stats())
        self.assertEqual(value(samples, "nsqd_mem_heap_objects"), 1000)
        self.assertEqual(value(samples, "nsqd_mem_heap_idle_bytes"), 2000)
        self.assertEqual(value(samples, "nsqd_mem_heap_in_use_bytes"), 3000)
        self.assertEqual(value(samples, "nsqd_mem_heap_released_bytes"), 4000)
        self.assertEqual(value(samples, "nsqd_mem_next_gc_bytes"), 5000)
        self.assertAlmostEqual(value(samples, "nsqd_mem_gc_pause_seconds", quantile="1"), 5e-5)
        self.assertAlmostEqual(value(samples, "nsqd_mem_gc_pause_seconds", quantile="0.99"), 4e-5)
        self.assertAlmostEqual(value(samples, "nsqd_mem_gc_pause_seconds", quantile="0.95"), 3e-5)
        self.assertEqual(value(samples, "nsqd_mem_gc_runs_total"), 7)
        self.assertEqual(types["nsqd_mem_gc_runs"], "counter")

    def test_no_memory(self) -> None:
        """Without a memory block there is no nsqd_mem_* family."""
        types, _ = parse(snapshot([topic("t", [channel("c")])]))
        self.assertFalse([name for name in types if name.startswith("nsqd_mem_")])
        self.assertIn("nsqd_channel_depth", types)

    def test_empty_families_still_typed(self) -> None:
        """With no topics every family keeps its HELP and TYPE lines and has no samples."""
        text = render_metrics(snapshot([], memory())).decode()
        self.assertIn("# TYPE nsqd_topic_depth gauge\n", text)
        self.assertIn("# TYPE nsqd_channel_messages_total counter\n", text)
        types, samples = parse(snapshot([]))
        self.assertEqual(
            [n for n, _, _ in samples if n.startswith(("nsqd_topic_", "nsqd_channel_"))],
            [],
        )

    def test_help_and_type_precede_samples(self) -> None:
        """Every sample follows its family's HELP and TYPE lines, and families are not split."""
        lines = render_metrics(first_stats()).decode().splitlines()
        seen: List[str] = []
        current = "?"
        for line in lines:
            if line.startswith("# HELP "):
                name = line.split()[2]
                self.assertNotIn(name, seen)
                seen.append(name)
                current = name
            elif line.startswith("# TYPE "):
                self.assertEqual(line.split()[2], current)
            else:
                self.assertTrue(line.startswith(current + " ") or line.startswith(current + "{"), line)

    def test_label_escaping(self) -> None:
        """Backslashes, double quotes and newlines in label values are escaped and read back intact."""
        odd = 'a\\b"c\nd'
        stats = snapshot([topic(odd, [channel(odd)])])
        text = render_metrics(stats).decode()
        self.assertIn('nsqd_topic_depth{topic="a\\\\b\\"c\\nd"} 0\n', text)
        _, samples = parse(stats)
        self.assertEqual(value(samples, "nsqd_channel_depth", topic=odd, channel=odd), 0)
        _, samples = parse(dict(snapshot([]), version='v"1\n'))
        self.assertEqual(value(samples, "nsqd_info", version='v"1\n'), 1)

    def test_escape_label_value(self) -> None:
        """escape_label_value handles backslash before quote and newline."""
        self.assertEqual(escape_label_value('\\"\n'), '\\\\\\"\\n')
        self.assertEqual(escape_label_value("plain"), "plain")

    def test_format_value(self) -> None:
        """Integers print plainly, booleans as 0/1, floats exactly, and infinities and NaN by name."""
        self.assertEqual(format_value(12345678901234), "12345678901234")
        self.assertEqual(format_value(True), "1")
        self.assertEqual(format_value(False), "0")
        self.assertEqual(format_value(0.1), "0.1")
        self.assertEqual(format_value(float("inf")), "+Inf")
        self.assertEqual(format_value(float("-inf")), "-Inf")
        self.assertEqual(format_value(float("nan")), "NaN")

    def test_utf8_bytes(self) -> None:
        """The page is UTF-8 bytes ending in a newline."""
        page = render_metrics(snapshot([topic("t", [])]))
        self.assertIsInstance(page, bytes)
        self.assertTrue(page.endswith(b"\n"))
