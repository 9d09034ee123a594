# -*- test-case-name: tests.test_tools_timer_metrics -*-
"""
The status line of ``nsq_to_nsq`` and ``nsq_to_http``: Go's
``github.com/bitly/timer_metrics`` (v1.0.0, the version Go NSQ v1.3 uses).

A :class:`TimerMetrics` keeps the last ``status_every`` durations in a ring.
Each time the ring wraps around (on the ``status_every + 1``-th duration,
then every ``status_every`` more) it writes one line, as Go's
``log.Printf`` does::

    2024/01/02 15:04:05 [aggregate]: finished 250 - 99th: 3.12ms - 95th: 1.40ms - avg: 0.52ms

Percentiles are Go's: the sorted durations' element at
``ceil(p / 100 * n + 0.5)``, capped at the last.  ``status_every`` 0
disables everything; with fewer than 100 (but more than 0) a warning is
written when the object is made, as Go does.  A negative ``status_every``
writes a line for every duration, as Go's does.

Usage::

    metrics = TimerMetrics("[aggregate]:", 250, sys.stderr, reactor)
    started = reactor.seconds()
    ...  # the work being timed
    metrics.status(started)

Durations are kept as integer nanoseconds, like Go's ``time.Duration``, so
the averages and percentiles round as Go's do.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import IO, Dict, List, Sequence, Tuple

from twisted.internet.interfaces import IReactorTime

__all__ = ["Stats", "TimerMetrics", "percentile", "status_metrics"]

_NANOSECONDS = 1000000000


def _milliseconds(nanoseconds: int) -> float:
    # Go: d.Seconds() * 1000, Seconds() being sec + nsec / 1e9.
    seconds, rest = divmod(nanoseconds, _NANOSECONDS)
    return (seconds + rest / 1e9) * 1000


def percentile(perc: float, ordered: List[int]) -> int:
    """
    Go timer_metrics' percentile of sorted ``ordered`` durations: the
    element at ``ceil(perc / 100 * n + 0.5)``, or the last one; 0 when
    empty.
    """
    length = len(ordered)
    if length == 0:
        return 0
    index = int(math.ceil(perc / 100.0 * length + 0.5))
    if index >= length:
        index = length - 1
    return ordered[index]


@dataclass(frozen=True)
class Stats:
    """
    A summary of the recorded durations (nanoseconds).

    ``str()`` is Go's text: ``PREFIX finished N - 99th: 1.00ms - 95th:
    1.00ms - avg: 1.00ms``.
    """

    prefix: str
    count: int
    avg: int
    p95: int
    p99: int

    def __str__(self) -> str:
        return "%s finished %d - 99th: %.02fms - 95th: %.02fms - avg: %.02fms" % (
            self.prefix,
            self.count,
            _milliseconds(self.p99),
            _milliseconds(self.p95),
            _milliseconds(self.avg),
        )


class TimerMetrics:
    """
    Records durations and writes Go's status line every ``status_every``.

    :param prefix: starts each line (``[aggregate]:``, ``[host:port]:``).
    :param status_every: how many durations a line summarises; 0 disables.
    :param out: where lines go (standard error in the tools), each as
        Go's ``log.Printf`` writes it: ``"2006/01/02 15:04:05 "`` and the text.
    :param clock: gives "now" to :meth:`status` and the lines' timestamps.
    """

    __slots__ = ("prefix", "status_every", "out", "clock", "_timings", "_position")

    def __init__(self, prefix: str, status_every: int, out: IO[str], clock: IReactorTime) -> None:
        self.prefix = prefix
        self.status_every = status_every
        self.out = out
        self.clock = clock
        self._timings: List[int] = []
        self._position = 0
        if 0 < status_every < 100:
            self._write(
                "Warning: use more than 100 status values for accurate percentiles"
                " (configured with %d)" % (status_every,)
            )

    def status(self, started: float) -> None:
        """Record the time from ``started`` (a ``clock.seconds()`` value) to now."""
        if self.status_every == 0:
            return
        self.status_duration(self.clock.seconds() - started)

    def status_duration(self, duration: float) -> None:
        """Record ``duration`` seconds; write a line when the ring wraps around."""
        if self.status_every == 0:
            return
        self._position += 1
        looped = False
        if self._position > self.status_every:
            looped = True
            self._position = 1
        nanoseconds = int(round(duration * _NANOSECONDS))
        if self._position > len(self._timings):
            self._timings.append(nanoseconds)
        else:
            self._timings[self._position - 1] = nanoseconds
        if looped:
            self._write(str(self.stats()))

    def stats(self) -> Stats:
        """The summary of the durations now in the ring."""
        timings = self._timings
        count = len(timings)
        ordered = sorted(timings)
        avg = 0
        if count:
            total = sum(timings)
            # Go's integer Duration division truncates toward zero.
            avg = abs(total) // count * (1 if total >= 0 else -1)
        return Stats(
            self.prefix, count, avg, percentile(95.0, ordered), percentile(99.0, ordered)
        )

    def _write(self, text: str) -> None:
        stamp = time.strftime("%Y/%m/%d %H:%M:%S", time.localtime(self.clock.seconds()))
        self.out.write("%s %s\n" % (stamp, text))
        self.out.flush()


def status_metrics(
    addresses: Sequence[str], status_every: int, out: IO[str], clock: IReactorTime
) -> Tuple[TimerMetrics, Dict[str, TimerMetrics]]:
    """
    The ``[aggregate]:`` status line and one per address, as Go makes them:
    with a single address its own line is disabled.
    """
    per_address: Dict[str, TimerMetrics] = {}
    if len(addresses) == 1:
        per_address[addresses[0]] = TimerMetrics("", 0, out, clock)
    else:
        for address in addresses:
            per_address[address] = TimerMetrics("[%s]:" % (address,), status_every, out, clock)
    return TimerMetrics("[aggregate]:", status_every, out, clock), per_address
