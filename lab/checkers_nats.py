# -*- test-case-name: lab.tests.test_checkers_nats -*-
"""
The NATS bridge checker: what a bridge round's history says, per path
(one producer to one receiver: an NSQ producer to a NATS subscriber, a
NATS publisher to an NSQ consumer, ...).

What the bridge promises (docs/nats.md) and so what is checked:

- nothing arrives that was never published: ``unexpected`` is 0 on
  every receiver (the hard property);
- a path the fault does not cross loses nothing acknowledged;
- a path it crosses may lose what was acknowledged while it was cut
  (NATS core is at-most-once: "a route that is down at that moment gets
  nothing"), from ``grace`` seconds before the fault began until the
  path *resumed* -- the acknowledgement of the first message after the
  fault's end that was delivered.  What was acknowledged before that
  window, or after the path resumed, must be delivered; and the path
  must resume;
- each NATS server gets a message once, so a NATS subscriber never sees
  one twice, and the bridge gives a NATS message to each channel once:
  an ``exactly_once`` receiver never gets two *first* deliveries of a
  message (a NATS delivery has no attempts count; an NSQ one is first
  when its attempts is 1).  NSQ redeliveries (attempts above 1) are at
  least once and only counted in ``duplicates``;
- the producers in ``serving`` had publishes acknowledged during the
  fault (nsqd, or the server the fault spares, kept serving).
"""

from __future__ import annotations

from collections import Counter, defaultdict
from typing import Any, Dict, Iterable, List, Optional, Set, Tuple

__all__ = ["BridgeResult", "Path", "check_bridge", "fault_window"]

Key = Tuple[str, int]


class Path:
    """
    One producer's messages as one receiver sees them.

    :param producer: the publishing process's name (``p`` of its events).
    :param receiver: the receiving process's channel name (``ch`` of its
        ``recv`` events).
    :param affected: whether the fault cuts this path (losses inside the
        fault window are then NATS's documented at-most-once).
    """

    def __init__(self, producer: str, receiver: str, affected: bool) -> None:
        self.producer = producer
        self.receiver = receiver
        self.affected = affected

    @property
    def name(self) -> str:
        """``producer->receiver``."""
        return "%s->%s" % (self.producer, self.receiver)


class BridgeResult:
    """
    The bridge checker's figures, with the queue checker's names for the
    totals; ``lost`` and its two parts are summed over the paths (a
    message two receivers missed counts twice).
    """

    def __init__(self) -> None:
        self.invoked = 0
        self.acknowledged = 0
        self.unknown = 0
        self.failed = 0
        self.lost = 0
        self.lost_in_fault = 0
        self.lost_outside_fault = 0
        self.unexpected = 0
        self.duplicates = 0
        self.recovered = 0
        self.fault_start: Optional[float] = None
        self.fault_stop: Optional[float] = None
        self.paths: Dict[str, Dict[str, Any]] = {}
        self.receivers: Dict[str, Dict[str, int]] = {}
        self.problems: List[str] = []

    def as_dict(self) -> Dict[str, Any]:
        """JSON-ready figures."""
        return dict(self.__dict__)


def fault_window(events: Iterable[Dict[str, Any]]) -> Tuple[Optional[float], Optional[float]]:
    """The first nemesis start and the last nemesis stop of a history (None when absent)."""
    starts = [e["t"] for e in events if e.get("p") == "nemesis" and e.get("type") == "start"]
    stops = [e["t"] for e in events if e.get("p") == "nemesis" and e.get("type") == "stop"]
    return (min(starts) if starts else None), (max(stops) if stops else None)


def _numbers(value: Any) -> List[int]:
    if isinstance(value, list):
        return [v for v in value if isinstance(v, int)]
    return [value] if isinstance(value, int) else []


def check_bridge(
    events: List[Dict[str, Any]],
    paths: List[Path],
    exactly_once: Iterable[str] = (),
    serving: Iterable[str] = (),
    grace: float = 1.0,
) -> BridgeResult:
    """
    Check a bridge round; ``result.problems`` lists every broken
    property (empty: the round passed).  See the module docstring.
    """
    result = BridgeResult()
    start, stop = fault_window(events)
    result.fault_start, result.fault_stop = start, stop
    invoked: Set[Key] = set()
    acked: Dict[Key, float] = {}
    unknown: Set[Key] = set()
    failed: Set[Key] = set()
    got: Dict[str, Counter] = defaultdict(Counter)
    firsts: Dict[str, Counter] = defaultdict(Counter)
    for event in events:
        kind = event.get("type")
        if event.get("f") == "pub" and event.get("p") != "nemesis":
            keys = [(event["p"], n) for n in _numbers(event.get("v"))]
            if kind == "invoke":
                invoked.update(keys)
            elif kind == "ok":
                for key in keys:
                    acked.setdefault(key, event["t"])
            elif kind == "info":
                unknown.update(keys)
            elif kind == "fail":
                failed.update(keys)
        elif kind == "recv":
            value = event.get("v")
            key = (str(event.get("src", "")), value if isinstance(value, int) else -1)
            got[str(event.get("ch", "?"))][key] += 1
            if event.get("a", 1) <= 1:
                firsts[str(event.get("ch", "?"))][key] += 1
    unknown -= set(acked)
    result.invoked = len(invoked)
    result.acknowledged = len(acked)
    result.unknown = len(unknown)
    result.failed = len(failed - set(acked) - unknown)
    once = set(exactly_once)

    # Per receiver: what never was published, and what came twice.
    for receiver in sorted({p.receiver for p in paths} | set(got)):
        counts = got.get(receiver, Counter())
        unexpected = sorted(k for k in counts if k not in invoked)
        dups = sum(c - 1 for c in counts.values() if c > 1)
        copies = sum(c - 1 for c in firsts.get(receiver, Counter()).values() if c > 1)
        result.unexpected += len(unexpected)
        result.duplicates += dups
        result.receivers[receiver] = {"delivered": len(counts), "unexpected": len(unexpected), "duplicates": dups}
        if unexpected:
            result.problems.append("%s got %d never published: %s" % (
                receiver, len(unexpected), ", ".join("%s:%s" % k for k in unexpected[:5])))
        if copies and receiver in once:
            result.problems.append("%s got %d copies (first deliveries of a message already delivered)" % (
                receiver, copies))

    recovered: Set[Key] = set()
    for path in paths:
        counts = got.get(path.receiver, Counter())
        mine = {k: t for k, t in acked.items() if k[0] == path.producer}
        delivered = {k for k in counts if k[0] == path.producer}
        lost = sorted((t, k) for k, t in mine.items() if k not in delivered)
        recovered.update(k for k in unknown if k[0] == path.producer and k in delivered)
        # The path resumed when the first message acknowledged after the
        # fault's end was delivered.
        resumed_at: Optional[float] = None
        if stop is not None:
            after = [t for k, t in mine.items() if t >= stop and k in delivered]
            resumed_at = min(after) if after else None
        in_fault: List[Tuple[float, Key]] = []
        outside: List[Tuple[float, Key]] = []
        for t, key in lost:
            allowed = (
                path.affected
                and start is not None
                and t >= start - grace
                and (resumed_at is None or t < resumed_at)
            )
            (in_fault if allowed else outside).append((t, key))
        result.lost += len(lost)
        acked_in_fault = (
            sum(1 for t in mine.values() if start <= t <= stop) if start is not None and stop is not None else 0
        )
        result.lost_in_fault += len(in_fault)
        result.lost_outside_fault += len(outside)
        result.paths[path.name] = {
            "affected": path.affected,
            "acknowledged": len(mine),
            "acked_in_fault": acked_in_fault,
            "delivered": len(delivered),
            "lost": len(lost),
            "lost_in_fault": len(in_fault),
            "lost_outside_fault": len(outside),
            "resumed_s": None if resumed_at is None or stop is None else round(resumed_at - stop, 2),
        }
        if not mine:
            result.problems.append("%s: nothing acknowledged" % path.name)
        if outside:
            where = "outside the fault window" if path.affected else "on a path the fault spares"
            result.problems.append("%s lost %d acknowledged %s: %s" % (
                path.name, len(outside), where, ", ".join("%s:%d@%.2f" % (k[0], k[1], t) for t, k in outside[:5])))
        if path.affected and stop is not None and resumed_at is None:
            result.problems.append("%s never resumed after the fault" % path.name)
    for producer in serving:
        acks = [t for k, t in acked.items() if k[0] == producer]
        if start is not None and stop is not None and not any(start <= t <= stop for t in acks):
            result.problems.append("%s had nothing acknowledged during the fault" % producer)
    result.recovered = len(recovered)
    return result
