"""Tests for txnsq.tools.hostpool, on a task.Clock."""

from __future__ import annotations

from typing import List

from twisted.internet.task import Clock
from twisted.trial.unittest import SynchronousTestCase

from txnsq.tools.hostpool import EpsilonGreedyHostPool, HostPool


class Draws:
    """A ``random.Random`` stand-in giving ``random()`` values from a list (then 0.5)."""

    def __init__(self, values: List[float]) -> None:
        self.values = list(values)

    def random(self) -> float:
        return self.values.pop(0) if self.values else 0.5


def take(pool: HostPool, count: int) -> List[str]:
    """The next ``count`` hosts, each marked a success."""
    hosts = []
    for _ in range(count):
        response = pool.get()
        response.mark(True)
        hosts.append(response.address)
    return hosts


class HostPoolTests(SynchronousTestCase):
    """go-hostpool's standard pool."""

    def setUp(self) -> None:
        self.clock = Clock()
        self.pool = HostPool(["a", "b", "c"], self.clock)

    def test_in_turn(self) -> None:
        """Hosts are handed out in order, round and round."""
        self.assertEqual(take(self.pool, 5), ["a", "b", "c", "a", "b"])

    def test_no_hosts(self) -> None:
        """A pool needs a host."""
        self.assertRaises(ValueError, HostPool, [], self.clock)

    def test_failed_host_rested(self) -> None:
        """A failed host is skipped until 30 seconds have passed, then tried again."""
        self.pool.get().mark(False)  # a
        self.assertEqual(self.pool.dead(), ["a"])
        self.assertEqual(take(self.pool, 4), ["b", "c", "b", "c"])
        self.clock.advance(30.5)
        self.assertEqual(take(self.pool, 3), ["a", "b", "c"])
        self.assertEqual(self.pool.dead(), [])

    def test_retry_delay_doubles(self) -> None:
        """A host failing again on its retry is rested twice as long before the next retry."""
        self.pool.get().mark(False)
        self.clock.advance(31)
        while True:
            retry = self.pool.get()
            if retry.address == "a":
                break
            retry.mark(True)
        # Still dead: the next retry is 60 s after this one.
        self.assertEqual(take(self.pool, 2), ["b", "c"])
        self.clock.advance(59)
        self.assertEqual(take(self.pool, 2), ["b", "c"])
        self.clock.advance(2)
        self.assertEqual(take(self.pool, 1), ["a"])

    def test_all_dead_revived(self) -> None:
        """When every host is down, all are revived and the first is used."""
        for _ in range(3):
            self.pool.get().mark(False)
        self.assertEqual(self.pool.get().address, "a")
        self.assertEqual(self.pool.dead(), [])


class EpsilonGreedyHostPoolTests(SynchronousTestCase):
    """go-hostpool's epsilon-greedy pool with linear values."""

    def setUp(self) -> None:
        self.clock = Clock()

    def timed(self, pool: HostPool, seconds: float) -> str:
        """Get a host, let ``seconds`` pass, mark it a success."""
        response = pool.get()
        self.clock.advance(seconds)
        response.mark(True)
        return response.address

    def test_explores_in_turn_with_decaying_epsilon(self) -> None:
        """Below epsilon the pool explores in turn; epsilon shrinks by 0.9 each time, to 0.01."""
        pool = EpsilonGreedyHostPool(["a", "b"], self.clock, rng=Draws([0.0] * 60))
        self.assertEqual(pool.epsilon, 0.3)
        self.assertEqual(take(pool, 3), ["a", "b", "a"])
        self.assertAlmostEqual(pool.epsilon, 0.3 * 0.9**3)
        take(pool, 57)
        self.assertEqual(pool.epsilon, 0.01)

    def test_no_timings_round_robin(self) -> None:
        """Without response times to go by, exploiting falls back to turns."""
        pool = EpsilonGreedyHostPool(["a", "b"], self.clock, rng=Draws([0.9, 0.9]))
        self.assertEqual(take(pool, 2), ["a", "b"])

    def test_faster_host_preferred(self) -> None:
        """Hosts are picked in proportion to 1 / their average response time."""
        pool = EpsilonGreedyHostPool(["fast", "slow"], self.clock, rng=Draws([0.0, 0.0]))
        self.timed(pool, 0.010)  # fast: 10 ms
        self.timed(pool, 0.030)  # slow: 30 ms
        # fast's share is (1/10) / (1/10 + 1/30) = 0.75.
        pool._rng = Draws([0.9, 0.74, 0.9, 0.76])  # type: ignore[assignment]
        self.assertEqual(pool.get().address, "fast")
        self.assertEqual(pool.get().address, "slow")

    def test_sub_millisecond_not_counted(self) -> None:
        """Times are whole milliseconds: a host answering in under 1 ms has no value yet."""
        pool = EpsilonGreedyHostPool(["a", "b"], self.clock, rng=Draws([0.0, 0.0]))
        self.timed(pool, 0.0005)
        self.timed(pool, 0.0005)
        pool._rng = Draws([0.9, 0.9, 0.9])  # type: ignore[assignment]
        # Round robin continues after the two explorations: a, then b.
        self.assertEqual(take(pool, 2), ["a", "b"])

    def test_window_slides(self) -> None:
        """Timings older than the five-minute window are forgotten."""
        pool = EpsilonGreedyHostPool(["a", "b"], self.clock, rng=Draws([0.0, 0.0]))
        self.timed(pool, 0.030)
        self.timed(pool, 0.010)
        pool._rng = Draws([0.9, 0.5])  # type: ignore[assignment]
        self.assertEqual(pool.get().address, "b")
        self.clock.advance(301)
        pool._rng = Draws([0.9, 0.5])  # type: ignore[assignment]
        # No timings left to choose by: the turns go on (a, b, then a).
        self.assertEqual(pool.get().address, "a")

    def test_failed_host_skipped(self) -> None:
        """A failed host is not chosen by its timings while it rests."""
        pool = EpsilonGreedyHostPool(["a", "b"], self.clock, rng=Draws([0.0, 0.0]))
        self.timed(pool, 0.001)  # a: fast
        self.timed(pool, 0.050)  # b: slow
        pool._rng = Draws([0.9, 0.0])  # type: ignore[assignment]
        failing = pool.get()
        self.assertEqual(failing.address, "a")
        failing.mark(False)
        pool._rng = Draws([0.9, 0.0])  # type: ignore[assignment]
        self.assertEqual(pool.get().address, "b")
