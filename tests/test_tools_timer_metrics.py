"""Tests for txnsq.tools.timer_metrics: Go timer_metrics' status lines."""

from __future__ import annotations

import io
import time

from twisted.internet.task import Clock
from twisted.trial.unittest import SynchronousTestCase

from txnsq.tools.timer_metrics import Stats, TimerMetrics, percentile

SECOND = 1000000000


def stamp(clock: Clock) -> str:
    return time.strftime("%Y/%m/%d %H:%M:%S", time.localtime(clock.seconds()))


class PercentileTests(SynchronousTestCase):
    """Go's percentile index."""

    def test_index(self) -> None:
        """The element at ceil(p/100*n + 0.5), capped at the last; 0 when empty."""
        ordered = list(range(1, 101))
        self.assertEqual(percentile(95.0, ordered), 97)
        self.assertEqual(percentile(99.0, ordered), 100)
        self.assertEqual(percentile(50.0, [1, 2, 3, 4]), 4)
        self.assertEqual(percentile(99.0, [7]), 7)
        self.assertEqual(percentile(99.0, []), 0)


class StatsTests(SynchronousTestCase):
    """The text of a status line."""

    def test_text(self) -> None:
        """Go's format: prefix, count, 99th, 95th and average in milliseconds with two decimals."""
        stats = Stats("[aggregate]:", 250, 520000, 1400000, 3125000)
        self.assertEqual(
            str(stats),
            "[aggregate]: finished 250 - 99th: 3.12ms - 95th: 1.40ms - avg: 0.52ms",
        )


class TimerMetricsTests(SynchronousTestCase):
    """Recording durations and writing lines."""

    def setUp(self) -> None:
        self.clock = Clock()
        self.clock.advance(1700000000)
        self.out = io.StringIO()

    def test_go_sequence(self) -> None:
        """
        Go's own test: with 5 slots, durations 1s..11s leave 7..11 in the
        ring, average 9s and 99th 11s; a line is written on the 6th and 11th.
        """
        metrics = TimerMetrics("prefix", 5, self.out, self.clock)
        self.out.truncate(0)
        self.out.seek(0)
        for n in range(1, 12):
            metrics.status_duration(float(n))
        stats = metrics.stats()
        self.assertEqual((stats.count, stats.avg, stats.p99), (5, 9 * SECOND, 11 * SECOND))
        self.assertEqual(
            self.out.getvalue().splitlines(),
            [
                stamp(self.clock) + " prefix finished 5 - 99th: 6000.00ms - 95th: 6000.00ms"
                " - avg: 4000.00ms",
                stamp(self.clock) + " prefix finished 5 - 99th: 11000.00ms - 95th: 11000.00ms"
                " - avg: 9000.00ms",
            ],
        )

    def test_status_measures_from_clock(self) -> None:
        """status(started) records the clock's time since started."""
        metrics = TimerMetrics("[x]:", 100, self.out, self.clock)
        started = self.clock.seconds()
        self.clock.advance(0.25)
        metrics.status(started)
        self.assertEqual(metrics.stats().avg, SECOND // 4)
        self.assertEqual(self.out.getvalue(), "")

    def test_line_every_status_every(self) -> None:
        """After the first line (at N+1), a line every N durations."""
        metrics = TimerMetrics("[a]:", 100, self.out, self.clock)
        for _ in range(100):
            metrics.status_duration(0.001)
        self.assertEqual(self.out.getvalue(), "")
        metrics.status_duration(0.001)
        self.assertEqual(len(self.out.getvalue().splitlines()), 1)
        for _ in range(99):
            metrics.status_duration(0.001)
        self.assertEqual(len(self.out.getvalue().splitlines()), 1)
        metrics.status_duration(0.001)
        lines = self.out.getvalue().splitlines()
        self.assertEqual(len(lines), 2)
        self.assertTrue(lines[1].endswith(" [a]: finished 100 - 99th: 1.00ms - 95th: 1.00ms - avg: 1.00ms"))

    def test_zero_disables(self) -> None:
        """status_every 0 records nothing and writes nothing."""
        metrics = TimerMetrics("", 0, self.out, self.clock)
        for _ in range(1000):
            metrics.status(self.clock.seconds())
        self.assertEqual(metrics.stats().count, 0)
        self.assertEqual(self.out.getvalue(), "")

    def test_warning_below_100(self) -> None:
        """Fewer than 100 slots writes Go's warning when made; 100 or more does not."""
        TimerMetrics("", 50, self.out, self.clock)
        self.assertEqual(
            self.out.getvalue(),
            stamp(self.clock) + " Warning: use more than 100 status values for accurate"
            " percentiles (configured with 50)\n",
        )
        quiet = io.StringIO()
        TimerMetrics("", 100, quiet, self.clock)
        self.assertEqual(quiet.getvalue(), "")

    def test_negative_writes_every_duration(self) -> None:
        """A negative status_every writes a line for every duration, as Go's does."""
        metrics = TimerMetrics("[n]:", -1, self.out, self.clock)
        metrics.status_duration(0.002)
        metrics.status_duration(0.004)
        lines = self.out.getvalue().splitlines()
        self.assertEqual(len(lines), 2)
        self.assertTrue(lines[1].endswith(" [n]: finished 1 - 99th: 4.00ms - 95th: 4.00ms - avg: 4.00ms"))
