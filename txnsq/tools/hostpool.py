# -*- test-case-name: tests.test_tools_hostpool -*-
"""
Choosing a destination host the way ``github.com/bitly/go-hostpool`` does,
for the tools' ``--mode=hostpool`` and ``--mode=epsilon-greedy``.

:class:`HostPool` (go-hostpool's ``New``) hands out its hosts in turn,
skipping a host marked failed until its retry time: 30 seconds after the
failure, then twice as long at each retry, up to 900 seconds.  When every
host is down, all are revived and the first is used.

:class:`EpsilonGreedyHostPool` (``NewEpsilonGreedy`` with the
``LinearEpsilonValueCalculator``, as Go's ``nsq_to_http`` and
``nsq_to_nsq`` build it) usually picks a host at random weighted by the
inverse of its recent response time (whole milliseconds, averaged over
120 buckets spanning five minutes, newer buckets weighing more), and
explores in turn a share *epsilon* of the time: 0.3 at first, 0.9 of
that after each exploration, never below 0.01.

Time comes from an injected clock (``IReactorTime``); the five-minute
window slides lazily when the pool is used, so the pool holds no timer.
"""

from __future__ import annotations

import random
from typing import Dict, List, Optional, Sequence

from twisted.internet.interfaces import IReactorTime

__all__ = ["EpsilonGreedyHostPool", "HostPool", "HostPoolResponse"]

#: go-hostpool's constants.
INITIAL_RETRY_DELAY = 30.0
MAX_RETRY_INTERVAL = 900.0
EPSILON_BUCKETS = 120
EPSILON_DECAY = 0.90
MIN_EPSILON = 0.01
INITIAL_EPSILON = 0.3
DEFAULT_DECAY_DURATION = 5 * 60.0


class _HostEntry:
    """One host's state: alive or dead, its retry schedule, its timings."""

    __slots__ = (
        "host",
        "dead",
        "next_retry",
        "retry_count",
        "retry_delay",
        "epsilon_counts",
        "epsilon_values",
        "epsilon_index",
    )

    def __init__(self, host: str, retry_delay: float) -> None:
        self.host = host
        self.dead = False
        self.next_retry = 0.0
        self.retry_count = 0
        self.retry_delay = retry_delay
        self.epsilon_counts: List[int] = []
        self.epsilon_values: List[int] = []
        self.epsilon_index = 0

    def can_try(self, now: float) -> bool:
        return not self.dead or self.next_retry < now

    def will_retry(self, now: float, max_retry_interval: float) -> None:
        self.retry_count += 1
        self.retry_delay = min(self.retry_delay * 2, max_retry_interval)
        self.next_retry = now + self.retry_delay

    def weighted_average_response_time(self) -> float:
        # Oldest bucket first; an empty bucket repeats the last value seen.
        value = 0.0
        last = 0.0
        for i in range(1, EPSILON_BUCKETS + 1):
            position = (self.epsilon_index + i) % EPSILON_BUCKETS
            count = self.epsilon_counts[position]
            weight = i / EPSILON_BUCKETS
            if count > 0:
                last = self.epsilon_values[position] / count
            value += last * weight
        return value


class HostPoolResponse:
    """
    A host handed out by a pool (go-hostpool's ``HostPoolResponse``); tell
    the pool how the request went with :meth:`mark`.

    :ivar address: the chosen host.
    :ivar started: when it was handed out (the clock's seconds).
    """

    __slots__ = ("address", "started", "_pool")

    def __init__(self, address: str, started: float, pool: "HostPool") -> None:
        self.address = address
        self.started = started
        self._pool = pool

    def mark(self, ok: bool) -> None:
        """The request to :attr:`address` succeeded (``ok``) or failed."""
        if ok:
            self._pool.mark_success(self.address, self.started)
        else:
            self._pool.mark_failed(self.address)


class HostPool:
    """
    go-hostpool's standard pool: hosts in turn, failed ones rested.

    :param addresses: the hosts, in order.
    :param clock: the time of failures and retries.
    :raises ValueError: no host.
    """

    def __init__(
        self,
        addresses: Sequence[str],
        clock: IReactorTime,
        initial_retry_delay: float = INITIAL_RETRY_DELAY,
        max_retry_interval: float = MAX_RETRY_INTERVAL,
    ) -> None:
        if not addresses:
            raise ValueError("a host pool needs at least one host")
        self._clock = clock
        self.initial_retry_delay = initial_retry_delay
        self.max_retry_interval = max_retry_interval
        self._list = [_HostEntry(address, initial_retry_delay) for address in addresses]
        self._hosts: Dict[str, _HostEntry] = {entry.host: entry for entry in self._list}
        self._next_index = 0

    @property
    def addresses(self) -> List[str]:
        """The hosts, in order."""
        return [entry.host for entry in self._list]

    def dead(self) -> List[str]:
        """The hosts now marked failed, in order."""
        return [entry.host for entry in self._list if entry.dead]

    def stop(self) -> None:
        """Nothing to stop: the pool holds no timer."""

    def get(self) -> HostPoolResponse:
        """The next host to use."""
        now = self._clock.seconds()
        return HostPoolResponse(self._round_robin(now), now, self)

    def _round_robin(self, now: float) -> str:
        count = len(self._list)
        for i in range(count):
            index = (i + self._next_index) % count
            entry = self._list[index]
            if not entry.dead:
                self._next_index = index + 1
                return entry.host
            if entry.next_retry < now:
                entry.will_retry(now, self.max_retry_interval)
                self._next_index = index + 1
                return entry.host
        # Every host is down: revive them all.
        for entry in self._hosts.values():
            entry.dead = False
        self._next_index = 0
        return self._list[0].host

    def mark_success(self, host: str, started: float) -> None:
        """A request to ``host`` handed out at ``started`` succeeded."""
        self._hosts[host].dead = False

    def mark_failed(self, host: str) -> None:
        """A request to ``host`` failed: rest it (unless it already is)."""
        entry = self._hosts[host]
        if not entry.dead:
            entry.dead = True
            entry.retry_count = 0
            entry.retry_delay = self.initial_retry_delay
            entry.next_retry = self._clock.seconds() + entry.retry_delay


class EpsilonGreedyHostPool(HostPool):
    """
    go-hostpool's epsilon-greedy pool with linear values (1 / average ms).

    :param rng: the random choices.
    :param decay_duration: the span of the response-time window (five
        minutes when 0).
    """

    def __init__(
        self,
        addresses: Sequence[str],
        clock: IReactorTime,
        rng: Optional[random.Random] = None,
        decay_duration: float = DEFAULT_DECAY_DURATION,
    ) -> None:
        HostPool.__init__(self, addresses, clock)
        if decay_duration <= 0:
            decay_duration = DEFAULT_DECAY_DURATION
        self.epsilon = INITIAL_EPSILON
        self._bucket_duration = decay_duration / EPSILON_BUCKETS
        self._rng = rng if rng is not None else random.Random()
        self._since = clock.seconds()
        self._decays = 0
        for entry in self._list:
            entry.epsilon_counts = [0] * EPSILON_BUCKETS
            entry.epsilon_values = [0] * EPSILON_BUCKETS

    def _decay(self, now: float) -> None:
        # Go moves every host to a fresh bucket on a ticker; catch up here.
        due = int((now - self._since) // self._bucket_duration)
        steps = min(due - self._decays, EPSILON_BUCKETS)
        self._decays = due
        for _ in range(steps):
            for entry in self._list:
                entry.epsilon_index = (entry.epsilon_index + 1) % EPSILON_BUCKETS
                entry.epsilon_counts[entry.epsilon_index] = 0
                entry.epsilon_values[entry.epsilon_index] = 0

    def get(self) -> HostPoolResponse:
        """A host: explored in turn, or chosen by its response times."""
        now = self._clock.seconds()
        self._decay(now)
        return HostPoolResponse(self._epsilon_greedy(now), now, self)

    def _epsilon_greedy(self, now: float) -> str:
        if self._rng.random() < self.epsilon:
            self.epsilon = max(self.epsilon * EPSILON_DECAY, MIN_EPSILON)
            return self._round_robin(now)
        possible: List[_HostEntry] = []
        values: List[float] = []
        for entry in self._list:
            if entry.can_try(now):
                average = entry.weighted_average_response_time()
                if average > 0:
                    possible.append(entry)
                    values.append(1.0 / average)
        chosen: Optional[_HostEntry] = None
        if possible:
            total = sum(values)
            pick = self._rng.random()
            ceiling = 0.0
            for entry, value in zip(possible, values):
                ceiling += value / total
                if pick <= ceiling:
                    chosen = entry
                    break
        if chosen is None:
            return self._round_robin(now)
        if chosen.dead:
            chosen.will_retry(now, self.max_retry_interval)
        return chosen.host

    def mark_success(self, host: str, started: float) -> None:
        """Revive ``host`` and count the request's time in whole milliseconds."""
        HostPool.mark_success(self, host, started)
        now = self._clock.seconds()
        self._decay(now)
        entry = self._hosts[host]
        entry.epsilon_counts[entry.epsilon_index] += 1
        entry.epsilon_values[entry.epsilon_index] += int((now - started) * 1000)
