"""
Tests for txnsq.nsqd.quantile: the windowed end-to-end latency percentiles
(``--e2e-processing-latency-*``), driven by a task.Clock.
"""

from __future__ import annotations

from typing import Any

from twisted.internet.task import Clock
from twisted.trial.unittest import SynchronousTestCase

from tests.core_fakes import START, FakeConsumer, TopicTestCase
from txnsq.nsqd.quantile import (
    EMPTY_RESULT,
    Quantile,
    QuantileResult,
    aggregate,
    nanoseconds_to_human,
)

NS = 1000000000


class QuantileTestCase(SynchronousTestCase):
    """A Clock at START and a helper to record latencies."""

    def setUp(self) -> None:
        self.clock = Clock()
        self.clock.advance(START)

    def make(self, window: float = 600.0, percentiles: Any = (1.0, 0.99, 0.5)) -> Quantile:
        return Quantile(self.clock, window, percentiles)

    def record(self, quantile: Quantile, latency_ns: int) -> None:
        """Record a message finished now that was published latency_ns ago."""
        quantile.insert(int(self.clock.seconds() * NS) - latency_ns)


class QuantileTests(QuantileTestCase):
    """Recording and querying one distribution."""

    def test_empty(self) -> None:
        """With no sample every percentile is 0 and the count 0, as Go reports."""
        result = self.make().result()
        self.assertEqual(result, QuantileResult(0, [(1.0, 0), (0.99, 0), (0.5, 0)]))

    def test_small_values_exact(self) -> None:
        """Latencies below 128 ns are reported exactly, with Go's rank rule."""
        quantile = self.make()
        for latency in range(1, 11):
            self.record(quantile, latency)
        # n=10: q=1 -> the 10th, q=0.99 -> int(9.9)=9th, q=0.5 -> 5th.
        self.assertEqual(
            quantile.result(), QuantileResult(10, [(1.0, 10), (0.99, 9), (0.5, 5)])
        )

    def test_single_sample(self) -> None:
        """One sample is every percentile."""
        quantile = self.make()
        self.record(quantile, 42)
        self.assertEqual(quantile.result().percentiles, [(1.0, 42), (0.99, 42), (0.5, 42)])

    def test_relative_error(self) -> None:
        """Large latencies are reported within 1/128 of their value."""
        for latency in (128, 255, 1000, 123456, 250 * 1000000, 3 * NS + 7, 2**40 + 12345):
            quantile = self.make(percentiles=[1.0])
            self.record(quantile, latency)
            [(_, value)] = quantile.result().percentiles or []
            self.assertLessEqual(abs(value - latency), latency / 128.0, latency)

    def test_rank_over_many(self) -> None:
        """The percentiles of 1..1000 ms land on the right samples."""
        quantile = self.make(percentiles=[1.0, 0.99, 0.95, 0.5])
        for ms in range(1, 1001):
            self.record(quantile, ms * 1000000)
        result = quantile.result()
        self.assertEqual(result.count, 1000)
        for (q, value), expected in zip(result.percentiles or [], [1000, 990, 950, 500]):
            self.assertLessEqual(abs(value - expected * 1000000), expected * 1000000 / 128.0, q)

    def test_negative_latency(self) -> None:
        """A message from the future (clock went back) counts as 0 ns."""
        quantile = self.make(percentiles=[1.0])
        quantile.insert(int(self.clock.seconds() * NS) + 5000)
        self.assertEqual(quantile.result(), QuantileResult(1, [(1.0, 0)]))

    def test_measured_against_clock(self) -> None:
        """The latency is the clock's now minus the message timestamp."""
        quantile = self.make(percentiles=[1.0])
        published = int(self.clock.seconds() * NS)
        self.clock.advance(0.002)
        quantile.insert(published)
        [(_, value)] = quantile.result().percentiles or []
        self.assertLessEqual(abs(value / 1e6 - 2.0), 2.0 / 128)


class WindowTests(QuantileTestCase):
    """The two half-windows, as Go's moveWindow."""

    def test_previous_half_kept(self) -> None:
        """Samples survive one rotation (up to a whole window)."""
        quantile = self.make(window=10.0)
        self.record(quantile, 100)
        self.clock.advance(6)
        self.assertEqual(quantile.count(), 1)
        self.record(quantile, 50)
        self.assertEqual(quantile.count(), 2)

    def test_dropped_after_two_halves(self) -> None:
        """Samples are gone once both halves rotated past them."""
        quantile = self.make(window=10.0)
        self.record(quantile, 100)
        self.clock.advance(6)
        self.record(quantile, 50)
        self.clock.advance(5)
        # The first sample's half is gone, the second's is the previous one.
        self.assertEqual(quantile.result(), QuantileResult(1, [(1.0, 50), (0.99, 50), (0.5, 50)]))
        self.clock.advance(5)
        self.assertEqual(quantile.count(), 0)

    def test_boundary_not_stale(self) -> None:
        """Exactly half a window later the half has not rotated yet (Go's After)."""
        quantile = self.make(window=10.0)
        self.record(quantile, 100)
        self.clock.advance(5)
        self.record(quantile, 100)
        self.clock.advance(4.5)
        # One rotation: both samples are in the previous half.
        self.assertEqual(quantile.count(), 2)

    def test_long_idle(self) -> None:
        """After a long idle period everything old is gone and recording goes on."""
        quantile = self.make(window=10.0)
        self.record(quantile, 100)
        self.clock.advance(86400 * 7 + 0.3)
        self.assertEqual(quantile.count(), 0)
        self.record(quantile, 7)
        self.assertEqual(quantile.count(), 1)
        self.clock.advance(5.1)
        self.assertEqual(quantile.count(), 1)

    def test_no_window(self) -> None:
        """A window of 0 keeps every sample (Go would spin forever)."""
        quantile = self.make(window=0.0)
        self.record(quantile, 100)
        self.clock.advance(86400)
        self.assertEqual(quantile.count(), 1)


class AggregateTests(QuantileTestCase):
    """Merging channels into a topic's distribution."""

    def test_no_quantile(self) -> None:
        """Nothing to merge is Go's empty result: count 0, percentiles null."""
        self.assertIs(aggregate([]), EMPTY_RESULT)
        self.assertEqual(EMPTY_RESULT.to_json(), {"count": 0, "percentiles": None})

    def test_merged(self) -> None:
        """Counts add up and percentiles cover every channel's samples."""
        first, second = self.make(), self.make()
        for latency in (1, 2, 3):
            self.record(first, latency)
        for latency in (10, 20):
            self.record(second, latency)
        self.assertEqual(
            aggregate([first, second]), QuantileResult(5, [(1.0, 20), (0.99, 10), (0.5, 2)])
        )
        # The channels are unchanged.
        self.assertEqual(first.count(), 3)
        self.assertEqual(second.count(), 2)


class RenderTests(SynchronousTestCase):
    """JSON and text forms of a result."""

    def test_json(self) -> None:
        """Go's JSON: quantile 1 without a fraction, integer nanoseconds."""
        result = QuantileResult(3, [(1.0, 2500000), (0.99, 120)])
        self.assertEqual(
            result.to_json(),
            {
                "count": 3,
                "percentiles": [
                    {"quantile": 1, "value": 2500000},
                    {"quantile": 0.99, "value": 120},
                ],
            },
        )
        self.assertIsInstance(result.to_json()["percentiles"][0]["quantile"], int)

    def test_text(self) -> None:
        """Go's String(): human values joined by a comma; empty without percentiles."""
        self.assertEqual(str(QuantileResult(3, [(1.0, 2500000), (0.5, 120)])), "2.5ms, 120.0ns")
        self.assertEqual(str(EMPTY_RESULT), "")

    def test_human(self) -> None:
        """Go's NanoSecondToHuman picks the unit the value strictly exceeds."""
        self.assertEqual(nanoseconds_to_human(1500000000), "1.5s")
        self.assertEqual(nanoseconds_to_human(1000000000), "1000.0ms")
        self.assertEqual(nanoseconds_to_human(2000), "2.0us")
        self.assertEqual(nanoseconds_to_human(1000), "1000.0ns")
        self.assertEqual(nanoseconds_to_human(0), "0.0ns")


class ChannelLatencyTests(TopicTestCase):
    """A channel records publish-to-FIN latencies when percentiles are set."""

    def test_off_by_default(self) -> None:
        """Without --e2e-processing-latency-percentile a channel tracks nothing."""
        self.assertIsNone(self.topic.get_channel("c").e2e_latency)
        self.build(e2e_processing_latency_percentile=[])
        self.assertIsNone(self.topic.get_channel("c").e2e_latency)

    def test_finish_recorded(self) -> None:
        """FIN records now minus the message's timestamp; REQ records nothing."""
        self.build(
            e2e_processing_latency_percentile=[1.0, 0.5],
            e2e_processing_latency_window_time=600.0,
        )
        channel = self.topic.get_channel("c")
        consumer = FakeConsumer(ready_count=2)
        channel.add_consumer(consumer)
        self.topic.publish(b"a")
        self.topic.publish(b"b")
        first, second = consumer.take()
        self.clock.advance(0.25)
        channel.finish(consumer, first.id)
        channel.requeue(consumer, second.id, 0)
        latency = channel.e2e_latency
        assert latency is not None
        result = latency.result()
        self.assertEqual(result.count, 1)
        [(_, value), _] = result.percentiles or []
        self.assertLessEqual(abs(value / 1e6 - 250.0), 250.0 / 128)

    def test_window_from_options(self) -> None:
        """The window is --e2e-processing-latency-window-time."""
        self.build(
            e2e_processing_latency_percentile=[1.0],
            e2e_processing_latency_window_time=2.0,
        )
        channel = self.topic.get_channel("c")
        consumer = FakeConsumer(ready_count=1)
        channel.add_consumer(consumer)
        self.topic.publish(b"a")
        [message] = consumer.take()
        channel.finish(consumer, message.id)
        latency = channel.e2e_latency
        assert latency is not None
        self.clock.advance(2.5)
        self.assertEqual(latency.count(), 0)
