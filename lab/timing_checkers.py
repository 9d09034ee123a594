# -*- test-case-name: lab.tests.test_timing_checkers -*-
"""
Checkers of what nsqd promises about time, read against the client's
clock (the lab host's true time): a deferred message is not delivered
before its delay has passed, and a message left unanswered is delivered
again once its msg-timeout has passed and not before.  A node whose
clock was stepped forward by S may be early by S, no more: the bound is
given to the checker.  Both also run the queue checker (nothing
acknowledged lost, nothing unpublished delivered).
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any, Dict, List, Optional, Tuple

from lab.checkers import QueueResult, check_queue

__all__ = ["DeferredResult", "TimeoutResult", "check_deferred", "check_timeouts"]

Key = Tuple[str, int]


def _key(event: Dict[str, Any]) -> Optional[Key]:
    value = event.get("v")
    if not isinstance(value, int):
        return None
    return (str(event.get("src", "")), value)


class DeferredResult:
    """
    :func:`check_deferred`'s figures.

    :ivar queue: the queue checker's result on the channel.
    :ivar deferred: acknowledged DPUBs.
    :ivar early: deliveries before ``invoke + delay - bound - tolerance``.
    :ivar max_early_s: the most any delivery came before its due time
        (negative: every one came after it).
    :ivar max_late_s: the most a first delivery came after its due time.
    """

    def __init__(self, queue: QueueResult) -> None:
        self.queue = queue
        self.deferred = 0
        self.early = 0
        self.early_sample: List[str] = []
        self.max_early_s: Optional[float] = None
        self.max_late_s: Optional[float] = None

    def as_dict(self) -> Dict[str, Any]:
        """JSON-ready: the queue checker's figures and these."""
        figures = self.queue.as_dict()
        figures.update(
            deferred=self.deferred,
            early=self.early,
            early_sample=self.early_sample,
            max_early_s=self.max_early_s,
            max_late_s=self.max_late_s,
        )
        return figures


def check_deferred(
    events: List[Dict[str, Any]], channel: str, bound: float, tolerance: float = 0.05
) -> DeferredResult:
    """
    Check DPUBs (invoke events with ``d``, the delay in seconds) against
    their deliveries on ``channel``: every delivery of a message invoked
    at ``t`` with delay ``d`` must come at ``t + d - bound - tolerance``
    or later (``bound``: the most any delivering node's clock was
    stepped forward), and the queue checker's properties hold.  The
    invoke time is the earliest nsqd can have received the DPUB, so the
    bound needs no allowance for the network.
    """
    queue = check_queue(events, [channel])
    result = DeferredResult(queue)
    due: Dict[Key, float] = {}
    acked: Dict[Key, bool] = {}
    deliveries: Dict[Key, List[float]] = defaultdict(list)
    for event in events:
        if event.get("f") == "pub":
            values = event.get("v")
            numbers = values if isinstance(values, list) else [values]
            for number in numbers:
                if not isinstance(number, int):
                    continue
                published = (str(event.get("p", "")), number)
                if event.get("type") == "invoke" and "d" in event:
                    due[published] = float(event["t"]) + float(event["d"])
                elif event.get("type") == "ok":
                    acked[published] = True
        elif event.get("type") == "recv" and event.get("ch") == channel:
            received = _key(event)
            if received is not None:
                deliveries[received].append(float(event["t"]))
    result.deferred = sum(1 for key in due if key in acked)
    early: List[Tuple[float, Key]] = []
    for key, times in deliveries.items():
        if key not in due:
            continue
        when = due[key]
        soonest = min(times)
        ahead = when - soonest
        if result.max_early_s is None or ahead > result.max_early_s:
            result.max_early_s = round(ahead, 3)
        late = soonest - when
        if result.max_late_s is None or late > result.max_late_s:
            result.max_late_s = round(late, 3)
        if ahead > bound + tolerance:
            early.append((ahead, key))
    early.sort(reverse=True)
    result.early = len(early)
    result.early_sample = ["%s:%d %.2fs early" % (k[0], k[1], ahead) for ahead, k in early[:5]]
    return result


class TimeoutResult:
    """
    :func:`check_timeouts`'s figures.

    :ivar queue: the queue checker's result on the channel.
    :ivar held: messages whose first delivery was left unanswered.
    :ivar not_redelivered: held messages never delivered again.
    :ivar early: held messages delivered again before ``msg_timeout -
        bound - tolerance`` had passed since the held delivery.
    :ivar min_requeue_s, max_requeue_s: the shortest and longest time
        from a held delivery to the next one.
    """

    def __init__(self, queue: QueueResult) -> None:
        self.queue = queue
        self.held = 0
        self.not_redelivered = 0
        self.not_redelivered_sample: List[str] = []
        self.early = 0
        self.early_sample: List[str] = []
        self.min_requeue_s: Optional[float] = None
        self.max_requeue_s: Optional[float] = None

    def as_dict(self) -> Dict[str, Any]:
        """JSON-ready: the queue checker's figures and these."""
        figures = self.queue.as_dict()
        figures.update(
            held=self.held,
            not_redelivered=self.not_redelivered,
            not_redelivered_sample=self.not_redelivered_sample,
            early=self.early,
            early_sample=self.early_sample,
            min_requeue_s=self.min_requeue_s,
            max_requeue_s=self.max_requeue_s,
        )
        return figures


def check_timeouts(
    events: List[Dict[str, Any]],
    channel: str,
    msg_timeout: float,
    bound: float,
    tolerance: float = 0.5,
) -> TimeoutResult:
    """
    Check messages left unanswered (``recv`` events with ``held``) on
    ``channel``: each must be delivered again, and not before
    ``msg_timeout - bound - tolerance`` seconds after the held delivery
    (``bound``: the most the node's clock was stepped forward; the
    tolerance covers the held delivery's own way from nsqd to the
    consumer, as nsqd starts the timeout when it sends).  The queue
    checker's properties hold too.
    """
    queue = check_queue(events, [channel])
    result = TimeoutResult(queue)
    held: Dict[Key, float] = {}
    after: Dict[Key, float] = {}
    for event in events:
        if event.get("type") != "recv" or event.get("ch") != channel:
            continue
        key = _key(event)
        if key is None:
            continue
        t = float(event["t"])
        if event.get("held") and key not in held:
            held[key] = t
        elif key in held and key not in after and t >= held[key]:
            after[key] = t
    result.held = len(held)
    early: List[Tuple[float, Key]] = []
    missing: List[Key] = []
    for key, t in sorted(held.items()):
        if key not in after:
            missing.append(key)
            continue
        gap = after[key] - t
        if result.min_requeue_s is None or gap < result.min_requeue_s:
            result.min_requeue_s = round(gap, 3)
        if result.max_requeue_s is None or gap > result.max_requeue_s:
            result.max_requeue_s = round(gap, 3)
        if gap < msg_timeout - bound - tolerance:
            early.append((gap, key))
    early.sort()
    result.early = len(early)
    result.early_sample = ["%s:%d again after %.2fs" % (k[0], k[1], gap) for gap, k in early[:5]]
    result.not_redelivered = len(missing)
    result.not_redelivered_sample = ["%s:%d" % k for k in missing[:10]]
    return result
