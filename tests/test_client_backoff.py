"""
Tests for L{txnsq.client.backoff}: the backoff counter and the delays
between reconnections.
"""

from __future__ import annotations

import random
from typing import List, Tuple

from twisted.trial.unittest import SynchronousTestCase

from txnsq.client.backoff import BackoffAction, BackoffSignal, BackoffState, ReconnectDelays

FAIL = BackoffSignal.BACKOFF
OK = BackoffSignal.RESUME
CONTINUE = BackoffSignal.CONTINUE


def run(state: BackoffState, signals: List[BackoffSignal]) -> List[Tuple[str, int, float]]:
    """Feed signals, ending each interval at once; (action, counter, duration) per signal."""
    out = []
    for signal in signals:
        action = state.signal(signal)
        out.append((action.value, state.counter, state.duration if action is BackoffAction.START else 0.0))
        state.timeout_ended()
    return out


class BackoffStateTests(SynchronousTestCase):
    """Tests for L{BackoffState}."""

    def test_failures_double_the_interval(self) -> None:
        """Each failure raises the counter and the interval is multiplier * 2 ** counter."""
        state = BackoffState(backoff_multiplier=1.0, max_backoff_duration=128.0)
        self.assertEqual(
            run(state, [FAIL, FAIL, FAIL]),
            [("start", 1, 2.0), ("start", 2, 4.0), ("start", 3, 8.0)],
        )

    def test_successes_pay_back(self) -> None:
        """A success lowers the counter, backing off again until it reaches 0, which exits."""
        state = BackoffState(backoff_multiplier=0.5, max_backoff_duration=128.0)
        self.assertEqual(
            run(state, [FAIL, FAIL, OK, OK, OK]),
            [
                ("start", 1, 1.0),
                ("start", 2, 2.0),
                ("start", 1, 1.0),
                ("exit", 0, 0.0),
                ("none", 0, 0.0),
            ],
        )

    def test_one_result_per_interval(self) -> None:
        """Results arriving while an interval runs are ignored."""
        state = BackoffState()
        self.assertIs(state.signal(FAIL), BackoffAction.START)
        self.assertTrue(state.in_timeout)
        for signal in (FAIL, FAIL, OK, CONTINUE):
            self.assertIs(state.signal(signal), BackoffAction.NONE)
        self.assertEqual(state.counter, 1)
        state.timeout_ended()
        self.assertFalse(state.in_timeout)
        self.assertIs(state.signal(FAIL), BackoffAction.START)
        self.assertEqual(state.counter, 2)

    def test_counter_stops_below_the_cap(self) -> None:
        """The counter stops rising once its next interval would exceed max_backoff_duration."""
        state = BackoffState(backoff_multiplier=1.0, max_backoff_duration=128.0)
        results = run(state, [FAIL] * 10)
        self.assertEqual([c for _, c, _ in results], [1, 2, 3, 4, 5, 6, 7, 7, 7, 7])
        self.assertEqual(results[-1][2], 128.0)
        self.assertEqual(run(state, [OK] * 7)[-1], ("exit", 0, 0.0))

    def test_interval_capped(self) -> None:
        """An interval never exceeds max_backoff_duration."""
        state = BackoffState(backoff_multiplier=3.0, max_backoff_duration=10.0)
        self.assertEqual(run(state, [FAIL, FAIL]), [("start", 1, 6.0), ("start", 1, 6.0)])
        self.assertEqual(state.interval(5), 10.0)

    def test_huge_multiplier_still_backs_off(self) -> None:
        """When even the first interval exceeds the cap, backoff lasts the cap."""
        state = BackoffState(backoff_multiplier=100.0, max_backoff_duration=50.0)
        self.assertEqual(run(state, [FAIL, FAIL, OK]), [("start", 1, 50.0), ("start", 1, 50.0), ("exit", 0, 0.0)])

    def test_disabled(self) -> None:
        """max_backoff_duration=0 disables backoff: failures change nothing."""
        state = BackoffState(max_backoff_duration=0)
        self.assertFalse(state.enabled)
        self.assertEqual(run(state, [FAIL, FAIL, OK]), [("none", 0, 0.0)] * 3)
        self.assertFalse(state.backing_off)

    def test_continue(self) -> None:
        """A requeue without backoff restarts the interval while backing off, and is nothing otherwise."""
        state = BackoffState()
        self.assertIs(state.signal(CONTINUE), BackoffAction.NONE)
        self.assertEqual(run(state, [FAIL, CONTINUE]), [("start", 1, 2.0), ("start", 1, 2.0)])

    def test_success_without_backoff(self) -> None:
        """A success at counter 0 does nothing."""
        state = BackoffState()
        self.assertIs(state.signal(OK), BackoffAction.NONE)
        self.assertFalse(state.backing_off)

    def test_reset(self) -> None:
        """reset() forgets the counter and the running interval."""
        state = BackoffState()
        state.signal(FAIL)
        state.reset()
        self.assertEqual((state.counter, state.in_timeout, state.backing_off), (0, False, False))

    def test_negative(self) -> None:
        """Negative settings are refused."""
        self.assertRaises(ValueError, BackoffState, -1.0, 10.0)
        self.assertRaises(ValueError, BackoffState, 1.0, -10.0)


class ReconnectDelaysTests(SynchronousTestCase):
    """Tests for L{ReconnectDelays}."""

    def test_exponential_without_jitter(self) -> None:
        """Without jitter the delays double from initial up to maximum."""
        delays = ReconnectDelays(initial=1.0, maximum=60.0, jitter=0.0)
        self.assertEqual(
            [delays.delay(n) for n in range(9)],
            [1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 60.0, 60.0, 60.0],
        )

    def test_jitter_bounds(self) -> None:
        """With jitter each delay lies in [d * (1 - jitter), d] and never above maximum."""
        delays = ReconnectDelays(initial=0.5, maximum=30.0, jitter=0.3, rng=random.Random(7))
        for attempt in range(200):
            ceiling = min(30.0, 0.5 * 2**attempt)
            value = delays.delay(attempt)
            self.assertTrue(ceiling * 0.7 <= value <= ceiling, (attempt, value))

    def test_jitter_spreads(self) -> None:
        """Two consumers with different random sources do not reconnect together."""
        a = ReconnectDelays(rng=random.Random(1))
        b = ReconnectDelays(rng=random.Random(2))
        self.assertNotEqual([a.delay(n) for n in range(5)], [b.delay(n) for n in range(5)])

    def test_seeded(self) -> None:
        """The delays are drawn from the given random source."""
        rng = random.Random(3)
        expected = [min(60.0, 1.0 * 2**n) * (1 - 0.3 * rng.random()) for n in range(5)]
        delays = ReconnectDelays(rng=random.Random(3))
        self.assertEqual([delays.delay(n) for n in range(5)], expected)

    def test_large_attempt(self) -> None:
        """A huge attempt count does not overflow."""
        self.assertEqual(ReconnectDelays(jitter=0).delay(10**6), 60.0)

    def test_invalid(self) -> None:
        """Nonsensical settings are refused."""
        self.assertRaises(ValueError, ReconnectDelays, 0.0)
        self.assertRaises(ValueError, ReconnectDelays, 10.0, 5.0)
        self.assertRaises(ValueError, ReconnectDelays, 1.0, 5.0, 1.5)
