# -*- test-case-name: tests.test_nsqadmin_stats -*-
"""
Depth and message counts of topics and channels over the last minutes,
sampled every ``--sample-interval`` by the service and whenever nsqadmin
gathers stats for a page, for message rates and the small charts.

Go nsqadmin takes rates from graphite; txnsq's keeps its own samples.
Samples are kept per key (``topic`` or ``topic/channel``) for ``window``
seconds, at most one per ``min_interval`` seconds.
"""

from __future__ import annotations

from collections import deque
from typing import Deque, Dict, List, NamedTuple, Optional

from twisted.internet.interfaces import IReactorTime

__all__ = ["History", "Sample"]


class Sample(NamedTuple):
    """One observation: when, the depth, and the message count."""

    when: float
    depth: int
    messages: int


class History:
    """
    Samples by key over a sliding window.

    :param clock: gives the time of each sample.
    :param window: seconds of samples kept.
    :param min_interval: a sample closer than this to the previous one
        replaces it rather than being added.
    """

    def __init__(
        self, clock: IReactorTime, window: float = 300.0, min_interval: float = 1.0
    ) -> None:
        self._clock = clock
        self.window = window
        self.min_interval = min_interval
        self._samples: Dict[str, Deque[Sample]] = {}

    def record(self, key: str, depth: int, messages: int) -> None:
        """Note ``key``'s depth and message count now."""
        now = self._clock.seconds()
        samples = self._samples.setdefault(key, deque())
        if samples and now - samples[-1].when < self.min_interval:
            samples.pop()
        samples.append(Sample(now, depth, messages))
        while samples and samples[0].when < now - self.window:
            samples.popleft()

    def samples(self, key: str) -> List[Sample]:
        """``key``'s samples within the window, oldest first."""
        samples = self._samples.get(key)
        if not samples:
            return []
        horizon = self._clock.seconds() - self.window
        return [s for s in samples if s.when >= horizon]

    def rate(self, key: str) -> Optional[float]:
        """
        Messages per second between the last two samples, or None until
        there are two (a count that went down, an nsqd restarted, is 0).
        """
        samples = self.samples(key)
        if len(samples) < 2:
            return None
        before, last = samples[-2], samples[-1]
        elapsed = last.when - before.when
        if elapsed <= 0:
            return None
        return max(0, last.messages - before.messages) / elapsed

    def rates(self, key: str) -> List[float]:
        """The rate between each pair of consecutive samples (for the chart)."""
        samples = self.samples(key)
        result = []
        for before, after in zip(samples, samples[1:]):
            elapsed = after.when - before.when
            if elapsed > 0:
                result.append(max(0, after.messages - before.messages) / elapsed)
        return result

    def forget(self, key: str) -> None:
        """Drop ``key``'s samples (a deleted topic or channel)."""
        self._samples.pop(key, None)
