"""Tests for txnsq.nsqd.memstats: the memory block of /stats."""

from __future__ import annotations

import gc

from twisted.trial.unittest import SynchronousTestCase

from txnsq.nsqd.memstats import MemStats, memory_stats


class MemoryTests(SynchronousTestCase):
    """The memory block."""

    def test_all_ints(self) -> None:
        """Every field is a non-negative int, under Go's names in Go's order."""
        document = MemStats.to_json(memory_stats())
        self.assertEqual(
            list(document),
            [
                "heap_objects",
                "heap_idle_bytes",
                "heap_in_use_bytes",
                "heap_released_bytes",
                "gc_pause_usec_100",
                "gc_pause_usec_99",
                "gc_pause_usec_95",
                "next_gc_bytes",
                "gc_total_runs",
            ],
        )
        for name, value in document.items():
            self.assertIsInstance(value, int, name)
            self.assertGreaterEqual(value, 0, name)

    def test_gc_counted(self) -> None:
        """Collections are counted and timed once watched."""
        before = memory_stats()
        gc.collect()
        # PyPy reports a collection to its hook at the next one.
        gc.collect()
        after = memory_stats()
        self.assertGreater(after.gc_total_runs, before.gc_total_runs)
        self.assertGreaterEqual(after.gc_pause_usec_100, after.gc_pause_usec_95)
