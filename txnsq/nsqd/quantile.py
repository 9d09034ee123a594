# -*- test-case-name: tests.test_quantile -*-
"""
End-to-end processing latency: how long messages took from publish to
``FIN``, as percentiles over a sliding window (Go nsqd's
``--e2e-processing-latency-percentile`` and
``--e2e-processing-latency-window-time``, ``internal/quantile``).

Each channel keeps one :class:`Quantile` when percentiles are configured;
a topic reports the merge of its channels' (:func:`aggregate`).

The window works as Go's: two halves of ``window / 2`` each.  Samples go
into the current half; once it is older than ``window / 2`` the halves
rotate and the oldest is dropped.  A query covers both halves, so it sees
between ``window / 2`` and ``window`` of history.

Unlike Go (a biased-quantile stream from ``bmizerany/perks``), a half is a
log-linear histogram in the style of HdrHistogram: a latency below 128 ns
has a bucket of its own; above, each power of two is split into 64
buckets.  Recording a sample is a few integer operations and one dict
update (no timer, no allocation beyond the dict entry), merging is adding
counts, and the memory is bounded by the spread of the latencies (at most
64 buckets per power of two actually seen).

Accuracy: counts are exact, so the rank of a reported percentile is exact
within the window; the value reported is the middle of its bucket, within
0.8% (1/128) of the true sample value (exact below 128 ns).  The rank of
``quantile q`` among ``n`` samples is Go's (perks' small-data rule): the
``int(n * q)``-th smallest sample, counted from 1 (the smallest for
``int(n * q) == 0``).
"""

from __future__ import annotations

import math
from typing import Any, Dict, Iterable, List, Optional, Sequence, Tuple

__all__ = [
    "EMPTY_RESULT",
    "Quantile",
    "QuantileResult",
    "aggregate",
    "nanoseconds_to_human",
]

# Buckets per power of two is 2 ** _SUB_BITS; values below _EXACT are exact.
_SUB_BITS = 6
_EXACT = 2 << _SUB_BITS  # 128


def _bucket_value(index: int) -> int:
    """The value a bucket stands for: the middle of its range."""
    if index < _EXACT:
        return index
    shift = (index >> _SUB_BITS) - 1
    low = (index - (shift << _SUB_BITS)) << shift
    return low + ((1 << shift) - 1) // 2


def nanoseconds_to_human(value: float) -> str:
    """
    Go's ``stringy.NanoSecondToHuman``: ``1.5s``, ``12.0ms``, ``800.0us``,
    ``42.0ns`` (one decimal, the largest unit the value exceeds).
    """
    if value > 1000000000:
        value /= 1000000000
        suffix = "s"
    elif value > 1000000:
        value /= 1000000
        suffix = "ms"
    elif value > 1000:
        value /= 1000
        suffix = "us"
    else:
        suffix = "ns"
    return "%0.1f%s" % (value, suffix)


class QuantileResult:
    """
    What ``/stats`` reports for one channel or topic (Go's
    ``quantile.Result``).

    :ivar count: samples in the window.
    :ivar percentiles: ``(quantile, value in ns)`` pairs in the configured
        order, or ``None`` when no percentile is configured (Go's JSON
        ``null``).
    """

    __slots__ = ("count", "percentiles")

    def __init__(
        self, count: int, percentiles: Optional[List[Tuple[float, int]]]
    ) -> None:
        self.count = count
        self.percentiles = percentiles

    def __repr__(self) -> str:
        return "QuantileResult(%r, %r)" % (self.count, self.percentiles)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, QuantileResult):
            return NotImplemented
        return (self.count, self.percentiles) == (other.count, other.percentiles)

    def __str__(self) -> str:
        """Go's ``Result.String()``: the values, human readable, comma separated."""
        return ", ".join(
            nanoseconds_to_human(value) for _, value in self.percentiles or ()
        )

    def to_json(self) -> Dict[str, Any]:
        """
        ``{"count": N, "percentiles": [{"quantile": q, "value": ns}, ...]}``
        with Go's number forms (a whole quantile such as 1 has no ``.0``),
        or ``"percentiles": None``.
        """
        percentiles: Optional[List[Dict[str, Any]]] = None
        if self.percentiles is not None:
            percentiles = [
                {"quantile": _go_number(q), "value": value}
                for q, value in self.percentiles
            ]
        return {"count": self.count, "percentiles": percentiles}


#: The result of a channel or topic without latency tracking.
EMPTY_RESULT = QuantileResult(0, None)


def _go_number(value: float) -> Any:
    """A float as Go's encoding/json writes it: whole numbers without ``.0``."""
    if value == int(value):
        return int(value)
    return value


class Quantile:
    """
    A windowed latency distribution for one channel.

    :param clock: an ``IReactorTime``; latencies are measured against
        ``clock.seconds()``.
    :param window_time: seconds of history (``--e2e-processing-latency-
        window-time``).  0 or less keeps every sample (Go would spin).
    :param percentiles: the quantiles to report, each in ``(0, 1]``.
    """

    __slots__ = (
        "percentiles",
        "_clock",
        "_move",
        "_last_move",
        "_current",
        "_previous",
        "_current_count",
        "_previous_count",
    )

    def __init__(
        self, clock: Any, window_time: float, percentiles: Sequence[float]
    ) -> None:
        self.percentiles: Tuple[float, ...] = tuple(percentiles)
        self._clock = clock
        self._move = window_time / 2 if window_time > 0 else math.inf
        self._last_move: float = clock.seconds()
        self._current: Dict[int, int] = {}
        self._previous: Dict[int, int] = {}
        self._current_count = 0
        self._previous_count = 0

    def __repr__(self) -> str:
        return "<Quantile count=%d>" % (self._current_count + self._previous_count,)

    def insert(self, timestamp_ns: int) -> None:
        """
        Record a message finished now that was published at
        ``timestamp_ns`` (nanoseconds since the epoch).  A negative latency
        (the clock went back) counts as 0.
        """
        now = self._clock.seconds()
        if now > self._last_move + self._move:
            self._rotate(now)
        latency = int(now * 1e9) - timestamp_ns
        if latency < _EXACT:
            index = latency if latency > 0 else 0
        else:
            shift = latency.bit_length() - _SUB_BITS - 1
            index = (shift << _SUB_BITS) + (latency >> shift)
        counts = self._current
        counts[index] = counts.get(index, 0) + 1
        self._current_count += 1

    def count(self) -> int:
        """Samples in the window now."""
        self._expire()
        return self._current_count + self._previous_count

    def window(self) -> Tuple[int, Tuple[Dict[int, int], Dict[int, int]]]:
        """
        The samples in the window now: how many, and their counts by
        bucket index, in two dicts (the window's two halves) that the
        caller must not change.
        """
        self._expire()
        return (
            self._current_count + self._previous_count,
            (self._current, self._previous),
        )

    def result(self) -> QuantileResult:
        """The configured percentiles over the window now."""
        return aggregate([self])

    def _expire(self) -> None:
        now = self._clock.seconds()
        if now > self._last_move + self._move:
            self._rotate(now)

    def _rotate(self, now: float) -> None:
        """Move the window forward to ``now`` (Go's ``moveWindow`` loop)."""
        move = self._move
        last = self._last_move
        steps = 0
        while now > last + move and steps < 2:
            last += move
            steps += 1
        if now > last + move:
            # Idle for more than a whole window: skip the rest at once.
            last += math.floor((now - last) / move) * move
            while now > last + move:
                last += move
        self._last_move = last
        if steps == 1:
            self._previous = self._current
            self._previous_count = self._current_count
        else:
            self._previous = {}
            self._previous_count = 0
        self._current = {}
        self._current_count = 0


def aggregate(quantiles: Iterable[Quantile]) -> QuantileResult:
    """
    Merge channels' distributions into one result (Go's
    ``Topic.AggregateChannelE2eProcessingLatency``): counts add up,
    percentiles are computed over all the samples.  With no quantile at
    all (no channel, or no percentile configured) the result is
    :data:`EMPTY_RESULT`, as in Go.
    """
    merged: Dict[int, int] = {}
    total = 0
    percentiles: Optional[Tuple[float, ...]] = None
    for quantile in quantiles:
        if percentiles is None:
            percentiles = quantile.percentiles
        count, halves = quantile.window()
        for counts in halves:
            for index, number in counts.items():
                merged[index] = merged.get(index, 0) + number
        total += count
    if percentiles is None:
        return EMPTY_RESULT
    values: List[Tuple[float, int]] = []
    indexes = sorted(merged)
    for q in percentiles:
        values.append((q, _query(indexes, merged, total, q)))
    return QuantileResult(total, values)


def _query(indexes: List[int], counts: Dict[int, int], total: int, q: float) -> int:
    """The value of quantile ``q``: Go's rank rule over the bucket counts."""
    if total == 0:
        return 0
    rank = int(total * q)
    if rank > 0:
        rank -= 1
    seen = 0
    for index in indexes:
        seen += counts[index]
        if seen > rank:
            return _bucket_value(index)
    return _bucket_value(indexes[-1])  # pragma: no cover - rank < total
