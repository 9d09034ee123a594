# -*- test-case-name: tests.test_tools_to_nsq -*-
"""
``to_nsq --rate``: at most ``rate`` messages a second, by Go ``to_nsq``'s
token bucket -- one token to begin with, one more every ``1/rate``
seconds, never more than ``rate`` saved up.
"""

from __future__ import annotations

from typing import Any

from twisted.internet.defer import Deferred, succeed
from twisted.internet.interfaces import IReactorTime
from twisted.internet.task import deferLater

__all__ = ["Throttle"]


class Throttle:
    """
    A token bucket on an injected clock.

    :param rate: tokens per second (at least 1).
    :raises ValueError: ``rate`` is below 1.
    """

    def __init__(self, rate: int, clock: IReactorTime) -> None:
        if rate < 1:
            raise ValueError("rate must be at least 1")
        self.rate = rate
        self.interval = 1.0 / rate
        self._clock = clock
        self._tokens = 1.0
        self._updated = clock.seconds()

    def _refill(self) -> None:
        now = self._clock.seconds()
        self._tokens = min(float(self.rate), self._tokens + (now - self._updated) * self.rate)
        self._updated = now

    def take(self) -> "Deferred[Any]":
        """A Deferred firing when one message may go (at once if a token is saved)."""
        self._refill()
        if self._tokens >= 1.0:
            self._tokens -= 1.0
            return succeed(None)
        wait = (1.0 - self._tokens) / self.rate

        def later() -> None:
            self._refill()
            self._tokens = max(0.0, self._tokens - 1.0)

        return deferLater(self._clock, wait, later)
