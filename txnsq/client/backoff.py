# -*- test-case-name: tests.test_client_backoff -*-
"""
A consumer's backoff state and the delays between reconnection attempts.

Both are plain objects with no timers: the consumer asks them what to do and
schedules the timers itself, so every sequence can be checked with numbers
alone.

:class:`BackoffState` follows go-nsq's ``startStopContinueBackoff``: a failed
message raises a counter, a successful one lowers it, and while the counter is
above zero the consumer holds every connection at ``RDY 0`` for
``backoff_multiplier * 2 ** counter`` seconds (never more than
``max_backoff_duration``), then lets one message through to test the waters.
Results that arrive during a backoff interval are not counted, so a burst of
failures that were already in flight raises the counter only once.
"""

from __future__ import annotations

import enum
import random
from typing import Optional

__all__ = ["BackoffAction", "BackoffSignal", "BackoffState", "ReconnectDelays"]


class BackoffSignal(enum.Enum):
    """What a message's answer says about the handler's health."""

    #: FIN: the handler succeeded.
    RESUME = "resume"
    #: REQ with backoff: the handler failed.
    BACKOFF = "backoff"
    #: REQ without backoff: neither success nor failure, but while backing
    #: off it still closes the current test (go-nsq's ``continueFlag``).
    CONTINUE = "continue"


class BackoffAction(enum.Enum):
    """What the consumer must do after :meth:`BackoffState.signal`."""

    #: Nothing changes.
    NONE = "none"
    #: Set RDY 0 everywhere and wait :attr:`BackoffState.duration` seconds.
    START = "start"
    #: The counter is back at zero: restore the normal RDY distribution.
    EXIT = "exit"


class BackoffState:
    """
    The backoff counter and whether a backoff interval is running.

    :param backoff_multiplier: seconds; the interval at counter ``n`` is
        ``backoff_multiplier * 2 ** n``.
    :param max_backoff_duration: seconds; no interval is longer, and the
        counter stops rising once its next interval would exceed it (as
        go-nsq, so that recovering never takes more successes than needed).
        ``0`` disables backoff altogether.

    :ivar counter: consecutive failures not yet paid back by successes.
    :ivar in_timeout: a backoff interval is running; results are ignored.
    :ivar duration: seconds of the interval last started by ``START``.
    """

    def __init__(self, backoff_multiplier: float = 1.0, max_backoff_duration: float = 128.0) -> None:
        if backoff_multiplier < 0 or max_backoff_duration < 0:
            raise ValueError("backoff_multiplier and max_backoff_duration must not be negative")
        self.backoff_multiplier = backoff_multiplier
        self.max_backoff_duration = max_backoff_duration
        self.counter = 0
        self.in_timeout = False
        self.duration = 0.0

    @property
    def enabled(self) -> bool:
        """Whether failures can ever cause a backoff."""
        return self.max_backoff_duration > 0

    @property
    def backing_off(self) -> bool:
        """Whether the consumer must keep RDY throttled (counter or interval)."""
        return self.counter > 0 or self.in_timeout

    def interval(self, counter: int) -> float:
        """Seconds of backoff at ``counter``, capped by ``max_backoff_duration``."""
        return min(self.backoff_multiplier * 2.0**counter, self.max_backoff_duration)

    def signal(self, signal: BackoffSignal) -> BackoffAction:
        """
        Count one message's answer and say what the consumer must do.

        Ignored (``NONE``) while an interval runs: only one result counts per
        interval.
        """
        if self.in_timeout or not self.enabled:
            return BackoffAction.NONE
        updated = False
        if signal is BackoffSignal.RESUME:
            if self.counter > 0:
                self.counter -= 1
                updated = True
        elif signal is BackoffSignal.BACKOFF:
            if self.backoff_multiplier * 2.0 ** (self.counter + 1) <= self.max_backoff_duration:
                self.counter += 1
                updated = True
            elif self.counter == 0:
                # A multiplier so large that even the first interval exceeds
                # the cap: back off for the cap rather than never.
                self.counter = 1
                updated = True
        if self.counter == 0:
            return BackoffAction.EXIT if updated else BackoffAction.NONE
        self.in_timeout = True
        self.duration = self.interval(self.counter)
        return BackoffAction.START

    def timeout_ended(self) -> None:
        """The interval is over: the next result counts again."""
        self.in_timeout = False

    def reset(self) -> None:
        """Forget all failures (the consumer is closing)."""
        self.counter = 0
        self.in_timeout = False
        self.duration = 0.0


class ReconnectDelays:
    """
    Exponential delays, with jitter and a cap, between attempts to reach an
    nsqd the consumer was told to use directly (the guide's "8 s, 16 s,
    32 s, ... up to a maximum").

    The ``n``-th delay (from 0) is drawn from
    ``[d * (1 - jitter), d]`` with ``d = min(maximum, initial * 2 ** n)``, so
    consumers restarted together spread their attempts and no delay exceeds
    ``maximum``.
    """

    def __init__(
        self,
        initial: float = 1.0,
        maximum: float = 60.0,
        jitter: float = 0.3,
        rng: Optional[random.Random] = None,
    ) -> None:
        if initial <= 0 or maximum < initial or not 0 <= jitter <= 1:
            raise ValueError("need 0 < initial <= maximum and 0 <= jitter <= 1")
        self.initial = initial
        self.maximum = maximum
        self.jitter = jitter
        self._rng = rng if rng is not None else random.Random()

    def delay(self, attempt: int) -> float:
        """Seconds to wait before attempt ``attempt + 1`` after ``attempt`` failures."""
        # min() before the power would overflow; 2**64 is plenty.
        ceiling = min(self.maximum, self.initial * 2.0 ** min(attempt, 64))
        return ceiling * (1.0 - self.jitter * self._rng.random())
