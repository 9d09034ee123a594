# -*- test-case-name: lab.tests.test_checkers_lookupd -*-
"""
The lookupd checkers: what consumers that find nsqds only through
nsqlookupd got while an nsqd and a lookupd were cut off, and what
``/lookup`` answered while a producer was tombstoned.

- :func:`flow_during` -- deliveries on a channel from the nsqds the
  fault spares, inside the fault window: how many, the rate, the longest
  gap, and whether they kept coming in its second half;
- :func:`first_from_after` -- when a consumer got something from one
  nsqd again after a time (it reconnected);
- :func:`check_tombstone_polls` -- ``/lookup`` polls of every lookupd
  against the documented tombstone (the producer absent for
  ``--tombstone-lifetime`` after the tombstone, the others still listed;
  back after it);
- :func:`check_hidden_discovery` -- a consumer started during the
  tombstone got nothing from the tombstoned nsqd until the lifetime
  ended, and did find it afterwards.
"""

from __future__ import annotations

from typing import Any, Dict, Iterable, List, Optional

__all__ = [
    "LookupPoll",
    "check_hidden_discovery",
    "check_tombstone_polls",
    "first_from_after",
    "flow_during",
]


def _recvs(events: Iterable[Dict[str, Any]], channel: str) -> List[Dict[str, Any]]:
    return [e for e in events if e.get("type") == "recv" and e.get("ch") == channel]


def flow_during(
    events: List[Dict[str, Any]], channel: str, nodes: Iterable[str], start: float, stop: float
) -> Dict[str, Any]:
    """
    Deliveries on ``channel`` from ``nodes`` (nsqd TCP addresses) with
    times in ``[start, stop]``: ``count``, ``per_s``, ``second_half``
    (those after the window's middle), ``max_gap_s`` (the longest time
    without one, the window's ends included).
    """
    wanted = set(nodes)
    times = sorted(e["t"] for e in _recvs(events, channel) if e.get("node") in wanted and start <= e["t"] <= stop)
    middle = (start + stop) / 2
    edges = [start] + times + [stop]
    length = max(stop - start, 1e-9)
    return {
        "count": len(times),
        "per_s": round(len(times) / length, 1),
        "second_half": sum(1 for t in times if t >= middle),
        "max_gap_s": round(max(b - a for a, b in zip(edges, edges[1:])), 2),
    }


def first_from_after(events: List[Dict[str, Any]], channel: str, node: str, after: float) -> Optional[float]:
    """The time of the first delivery on ``channel`` from ``node`` at or after ``after`` (None: none)."""
    times = [e["t"] for e in _recvs(events, channel) if e.get("node") == node and e["t"] >= after]
    return min(times) if times else None


class LookupPoll:
    """
    One ``GET /lookup?topic=`` of one lookupd: when it was sent and
    answered, the producers it listed (``host:tcp_port``) and the
    channels.
    """

    def __init__(self, lookupd: str, sent: float, answered: float, status: int, producers: List[str],
                 channels: Optional[List[str]] = None) -> None:
        self.lookupd = lookupd
        self.sent = sent
        self.answered = answered
        self.status = status
        self.producers = producers
        self.channels = channels or []

    def as_dict(self) -> Dict[str, Any]:
        """JSON-ready."""
        return dict(self.__dict__)


def check_tombstone_polls(
    polls: List[LookupPoll],
    node: str,
    others: List[str],
    tombstoned_from: float,
    tombstoned_to: float,
    lifetime: float,
    margin: float = 1.0,
) -> List[str]:
    """
    Problems with ``/lookup`` around a tombstone of ``node`` set on
    every lookupd between ``tombstoned_from`` (before the first POST was
    sent) and ``tombstoned_to`` (after the last was answered):

    - a poll sent after ``tombstoned_to`` and answered before
      ``tombstoned_from + lifetime`` must not list ``node`` (the
      earliest any tombstone can end), and must list every one of
      ``others``;
    - a poll sent ``margin`` seconds after ``tombstoned_to + lifetime``
      (the latest any can end) must list ``node`` again;
    - a poll sent before ``tombstoned_from`` must list ``node`` (it was
      registered to begin with);
    - every lookupd must have answered polls of each of these three
      kinds (otherwise nothing was checked), with status 200.
    """
    # The first of each kind of problem per lookupd, and how many polls had it.
    found: Dict[tuple, List[Any]] = {}

    def problem(lookupd: str, kind: str, text: str) -> None:
        entry = found.setdefault((lookupd, kind), [text, 0])
        entry[1] += 1

    kinds: Dict[str, Dict[str, int]] = {}
    for poll in polls:
        seen = kinds.setdefault(poll.lookupd, {"before": 0, "hidden": 0, "back": 0})
        at = poll.sent - tombstoned_from
        if poll.status != 200:
            continue
        if poll.answered < tombstoned_from:
            seen["before"] += 1
            if node not in poll.producers:
                problem(poll.lookupd, "absent", "%s did not list %s before the tombstone (%.1f s)" % (
                    poll.lookupd, node, at))
        elif poll.sent >= tombstoned_to and poll.answered < tombstoned_from + lifetime:
            seen["hidden"] += 1
            if node in poll.producers:
                problem(poll.lookupd, "listed", "%s listed tombstoned %s at +%.1f s (lifetime %g s)" % (
                    poll.lookupd, node, at, lifetime))
            missing = [o for o in others if o not in poll.producers]
            if missing:
                problem(poll.lookupd, "others", "%s did not list %s at +%.1f s (only %s is tombstoned)" % (
                    poll.lookupd, ",".join(missing), at, node))
        elif poll.sent >= tombstoned_to + lifetime + margin:
            seen["back"] += 1
            if node not in poll.producers:
                problem(poll.lookupd, "hidden", "%s still hid %s at +%.1f s (lifetime %g s)" % (
                    poll.lookupd, node, at, lifetime))
    problems = ["%s (%d polls)" % (text, count) if count > 1 else text for text, count in found.values()]
    names = {"before": "before the tombstone", "hidden": "while it held", "back": "after its lifetime"}
    for lookupd, seen in sorted(kinds.items()):
        problems += ["%s: no poll answered %s" % (lookupd, names[k]) for k, count in seen.items() if not count]
    if not kinds:
        problems.append("no lookupd was polled")
    return problems


def check_hidden_discovery(
    events: List[Dict[str, Any]], channel: str, node: str, hidden_until: float
) -> Dict[str, Any]:
    """
    What a consumer of ``channel`` started while ``node`` was tombstoned
    got from it: ``early`` (deliveries before ``hidden_until``: it found
    the tombstoned node), ``after`` (deliveries from then on: it found it
    once the tombstone ended), ``first_after_s``.  ``problems`` names
    what breaks the documented behaviour.
    """
    times = sorted(e["t"] for e in _recvs(events, channel) if e.get("node") == node)
    early = [t for t in times if t < hidden_until]
    after = [t for t in times if t >= hidden_until]
    problems = []
    if early:
        problems.append("%s got %d from tombstoned %s, the first %.1f s before its tombstone ended" % (
            channel, len(early), node, hidden_until - early[0]))
    if not after:
        problems.append("%s never got anything from %s after its tombstone ended" % (channel, node))
    return {
        "early": len(early),
        "after": len(after),
        "first_after_s": round(after[0] - hidden_until, 2) if after else None,
        "problems": problems,
    }
