# -*- test-case-name: lab.tests.test_checkers_log -*-
"""
The retained-log checker: what a round's history says about a retained
topic's log, from the writer's operations (``put``/``pub``: invoke, ok
with the partition and offset a ``put`` returned, fail, info) and the
reader's passes (each a full read by offset, see
:mod:`lab.workers.log_reader`).

What it asserts (each a figure of :class:`LogResult`; :meth:`LogResult.violations`):

- ``unstable``: an offset that read back different bytes in a later pass
  (the log is immutable: an offset names one record forever);
- ``vanished``: an offset read in one pass and missing from a later,
  complete pass;
- ``lost``: an acknowledged record missing from the final pass;
- ``misplaced``: an acknowledged ``put`` whose record is in the final
  pass, but not at the partition and offset the ``put`` answered;
- ``bad_served``: records failing their checksum in a reply, and
  ``client_accepted_bad``: such replies a txnsq client took;
- ``unexpected``: records never written (no writer invoked that number,
  or the body names no writer), ``mismatched``: records whose body is not
  what was written for the number it names (with a valid checksum);
- ``duplicates``: a record at more than one offset in the final pass
  (writers never resend); ``failed_present``: a record whose write nsqd
  refused (or that never left) read back.

Damage the lab did on purpose is declared in the history as ``damage``
events (``f``: ``cut`` or ``altered``, ``partition``, offsets ``lo`` to
``hi``): after a ``cut``, the records read in that range before it are
expected gone (``cut`` counts the acknowledged ones that went,
``cut_kept`` the records still there, ``reused`` the offsets holding a
new record); after ``altered``, an offset of the range may read back
other bytes (``altered`` counts them).
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any, Dict, Iterable, List, Optional, Set, Tuple

__all__ = ["LogResult", "check_log", "VIOLATIONS"]

Key = Tuple[str, int]  # (writer, number)
Place = Tuple[int, int]  # (partition, offset)

#: The figures that are violations when not zero, unless a scenario
#: documents them (see :meth:`LogResult.violations`).
VIOLATIONS = (
    "lost",
    "vanished",
    "unstable",
    "misplaced",
    "bad_served",
    "client_accepted_bad",
    "unexpected",
    "mismatched",
    "duplicates",
    "failed_present",
)


class LogResult:
    """The log checker's figures for one round (see the module docstring)."""

    def __init__(self) -> None:
        self.invoked = 0
        self.acknowledged = 0
        self.failed = 0
        self.unknown = 0
        self.lost = 0
        self.vanished = 0
        self.unstable = 0
        self.misplaced = 0
        self.bad_served = 0
        self.client_accepted_bad = 0
        self.client_refused_bad = 0
        self.unexpected = 0
        self.mismatched = 0
        self.duplicates = 0
        self.failed_present = 0
        self.recovered = 0
        self.cut = 0
        self.cut_kept = 0
        self.reused = 0
        self.altered = 0
        self.passes = 0
        self.final_complete = False
        self.final_records = 0
        self.skips: List[List[int]] = []
        self.samples: Dict[str, List[str]] = {}

    def sample(self, figure: str, text: str) -> None:
        """Keep a few examples of ``figure``."""
        found = self.samples.setdefault(figure, [])
        if len(found) < 5:
            found.append(text)

    def violations(self, documented: Iterable[str] = ()) -> List[str]:
        """
        One line for each violated property, except those in
        ``documented`` (figures a scenario reports without asserting).
        """
        allowed = set(documented)
        lines = []
        for name in VIOLATIONS:
            value = getattr(self, name)
            if value and name not in allowed:
                lines.append("%s %d %s" % (name, value, self.samples.get(name, [])[:3]))
        if not self.final_complete:
            lines.append("the final read did not reach the end of every partition")
        return lines

    def as_dict(self) -> Dict[str, Any]:
        """JSON-ready figures."""
        return dict(self.__dict__)


class _Pass:
    """One reader pass: what it read, where it stopped."""

    def __init__(self, label: str) -> None:
        self.label = label
        self.t = 0.0
        self.finished = False
        self.records: Dict[Place, Dict[str, Any]] = {}
        self.ended: Set[int] = set()
        self.failed: Set[int] = set()

    def complete(self, partition: int) -> bool:
        return self.finished and partition in self.ended and partition not in self.failed


class _Damage:
    def __init__(self, event: Dict[str, Any]) -> None:
        self.t = float(event["t"])
        self.kind = event.get("f", "")
        self.partition = int(event["partition"])
        self.lo = int(event["lo"])
        self.hi = int(event["hi"])

    def covers(self, place: Place) -> bool:
        return place[0] == self.partition and self.lo <= place[1] < self.hi


def _damaged(damages: List[_Damage], kind: str, place: Place, after: float, before: float) -> bool:
    return any(d.kind == kind and after < d.t < before and d.covers(place) for d in damages)


def check_log(events: List[Dict[str, Any]]) -> LogResult:
    """Check a retained-log workload's history (events ordered by time)."""
    result = LogResult()
    invoked: Set[Key] = set()
    acked: Dict[Key, Optional[Place]] = {}
    acked_at: Dict[Key, float] = {}
    failed: Set[Key] = set()
    unknown: Set[Key] = set()
    passes: Dict[str, _Pass] = {}
    damages: List[_Damage] = []
    for event in events:
        kind = event.get("type")
        f = event.get("f")
        if f in ("put", "pub") and kind in ("invoke", "ok", "fail", "info"):
            key = (event["p"], event["v"])
            if kind == "invoke":
                invoked.add(key)
            elif kind == "ok":
                place = (event["part"], event["off"]) if "off" in event else None
                acked[key] = place
                acked_at[key] = float(event.get("t", 0))
            elif kind == "fail":
                failed.add(key)
            else:
                unknown.add(key)
        elif kind == "read":
            label = event.get("pass", "?")
            one = passes.get(label)
            if one is None:
                one = passes[label] = _Pass(label)
            one.t = max(one.t, float(event.get("t", 0)))
            _read_event(result, one, event)
        elif kind == "damage":
            damages.append(_Damage(event))
    unknown -= set(acked)
    failed -= set(acked)
    result.invoked = len(invoked)
    result.acknowledged = len(acked)
    result.failed = len(failed)
    result.unknown = len(unknown)
    ordered = sorted(passes.values(), key=lambda p: p.t)
    result.passes = len(ordered)
    for one in ordered:
        for place, record in one.records.items():
            _judge_record(result, invoked, failed, one, place, record)
    _check_stability(result, ordered, damages)
    if not ordered:
        return result
    final = ordered[-1]
    result.final_complete = final.finished and not final.failed
    result.final_records = len(final.records)
    where: Dict[Key, List[Place]] = defaultdict(list)
    for place, record in final.records.items():
        if "src" in record:
            where[(record["src"], record["n"])].append(place)
    seen_at: Dict[Key, Place] = {}
    for one in ordered:
        for place, record in one.records.items():
            if "src" in record:
                seen_at.setdefault((record["src"], record["n"]), place)
    cuts = [d for d in damages if d.kind == "cut"]
    for key, place in sorted(acked.items()):
        found = where.get(key)
        if not found:
            known = place or seen_at.get(key)
            # A cut excuses what was acknowledged before it, not records
            # written later at offsets it freed.
            if known is not None and any(d.covers(known) and d.t > acked_at[key] for d in cuts):
                result.cut += 1
                continue
            result.lost += 1
            result.sample("lost", "%s:%d at %s" % (key[0], key[1], known))
        elif place is not None and place not in found:
            result.misplaced += 1
            result.sample("misplaced", "%s:%d put at %s read at %s" % (key[0], key[1], place, found))
    for key, places in where.items():
        if len(places) > 1:
            result.duplicates += len(places) - 1
            result.sample("duplicates", "%s:%d at %s" % (key[0], key[1], sorted(places)))
    result.recovered = sum(1 for key in unknown if key in where)
    return result


def _read_event(result: LogResult, one: _Pass, event: Dict[str, Any]) -> None:
    f = event.get("f")
    if f == "pass":
        one.finished = True
        return
    partition, offset = event["v"]
    place = (partition, offset)
    if f == "record":
        one.records[place] = event
    elif f == "bad":
        result.bad_served += 1
        result.sample("bad_served", "%s p%d@%d: %s" % (one.label, partition, offset, event.get("why")))
    elif f == "client":
        if str(event.get("client", "")).startswith("accepted"):
            result.client_accepted_bad += 1
            result.sample("client_accepted_bad", "%s p%d@%d" % (one.label, partition, offset))
        else:
            result.client_refused_bad += 1
    elif f == "skip":
        result.skips.append([partition, offset, event.get("to", -1)])
    elif f == "end":
        one.ended.add(partition)
    elif f == "error":
        one.failed.add(partition)


def _judge_record(
    result: LogResult, invoked: Set[Key], failed: Set[Key], one: _Pass, place: Place, record: Dict[str, Any]
) -> None:
    if "src" not in record:
        result.unexpected += 1
        result.sample("unexpected", "%s p%d@%d names no writer" % (one.label, place[0], place[1]))
        return
    key = (record["src"], record["n"])
    if key not in invoked:
        result.unexpected += 1
        result.sample("unexpected", "%s p%d@%d %s:%d" % (one.label, place[0], place[1], key[0], key[1]))
    elif not record.get("body_ok", False):
        result.mismatched += 1
        result.sample("mismatched", "%s p%d@%d %s:%d" % (one.label, place[0], place[1], key[0], key[1]))
    if key in failed:
        result.failed_present += 1
        result.sample("failed_present", "%s p%d@%d %s:%d" % (one.label, place[0], place[1], key[0], key[1]))


def _check_stability(result: LogResult, ordered: List[_Pass], damages: List[_Damage]) -> None:
    """Every offset reads back the same bytes in every later pass (or is gone as declared)."""
    places: Set[Place] = set()
    for one in ordered:
        places.update(one.records)
    cut_kept: Set[Place] = set()
    for place in sorted(places):
        last: Optional[Tuple[_Pass, str]] = None
        # Whether a declared cut took the record at ``last`` away since.
        gone = False
        flagged = False
        for one in ordered:
            record = one.records.get(place)
            if record is None:
                if last is None or not one.complete(place[0]):
                    continue
                if gone or _damaged(damages, "cut", place, last[0].t, one.t):
                    gone = True
                    continue
                if not flagged:
                    result.vanished += 1
                    result.sample("vanished", "p%d@%d read in %s, not in %s" % (place[0], place[1], last[0].label, one.label))
                    flagged = True
                continue
            digest = record["h"]
            if last is not None:
                cut = gone or _damaged(damages, "cut", place, last[0].t, one.t)
                if digest == last[1]:
                    if cut:
                        cut_kept.add(place)
                elif cut:
                    result.reused += 1
                elif _damaged(damages, "altered", place, last[0].t, one.t):
                    result.altered += 1
                elif not flagged:
                    result.unstable += 1
                    result.sample("unstable", "p%d@%d %s in %s, %s in %s" % (
                        place[0], place[1], last[1], last[0].label, digest, one.label))
                    flagged = True
            last = (one, digest)
            gone = False
    result.cut_kept = len(cut_kept)
