"""
Checkers: what a round's history says.  The queue checker counts, for
every channel, what was acknowledged and never delivered (lost),
delivered and never published (unexpected), delivered more than once
(duplicates), and publishes of unknown outcome that were delivered
(recovered) -- overall and by the node that acknowledged.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from typing import Any, Dict, Iterable, List, Set, Tuple

__all__ = ["QueueResult", "check_queue"]

Key = Tuple[str, int]


class QueueResult:
    """The queue checker's figures for one round."""

    def __init__(self) -> None:
        self.invoked = 0
        self.acknowledged = 0
        self.failed = 0
        self.unknown = 0
        self.lost = 0
        self.unexpected = 0
        self.duplicates = 0
        self.recovered = 0
        self.channels: Dict[str, Dict[str, int]] = {}
        self.by_node: Dict[str, Dict[str, int]] = {}
        self.lost_sample: List[str] = []
        self.unexpected_sample: List[str] = []
        self.first_failover_s: float = -1.0

    def as_dict(self) -> Dict[str, Any]:
        """JSON-ready figures."""
        return dict(self.__dict__)


def _keys(event: Dict[str, Any]) -> Iterable[Key]:
    value = event["v"]
    process = event["p"]
    if isinstance(value, list):
        return [(process, n) for n in value]
    return [(process, value)]


def check_queue(events: List[Dict[str, Any]], channels: Iterable[str]) -> QueueResult:
    """
    Check a queue workload's history: every acknowledged message must be
    delivered on every channel in ``channels``; nothing unpublished may
    be delivered.
    """
    result = QueueResult()
    invoked: Set[Key] = set()
    acked: Dict[Key, str] = {}
    unknown: Set[Key] = set()
    failed: Set[Key] = set()
    delivered: Dict[str, Counter] = defaultdict(Counter)
    for event in events:
        kind = event.get("type")
        if event.get("f") == "pub":
            keys = list(_keys(event))
            if kind == "invoke":
                invoked.update(keys)
            elif kind == "ok":
                for key in keys:
                    acked[key] = event.get("node", "?")
            elif kind == "info":
                unknown.update(keys)
            elif kind == "fail":
                failed.update(keys)
        elif kind == "recv":
            src = event.get("src", "")
            value = event.get("v")
            if isinstance(value, int):
                delivered[event.get("ch", "?")][(src, value)] += 1
            else:
                delivered[event.get("ch", "?")][("?", -1)] += 1
    unknown -= set(acked)
    result.invoked = len(invoked)
    result.acknowledged = len(acked)
    result.unknown = len(unknown)
    result.failed = len(failed - set(acked) - unknown)
    lost_keys: Set[Key] = set()
    recovered: Set[Key] = set()
    for channel in channels:
        got = delivered.get(channel, Counter())
        lost = [key for key in acked if key not in got]
        unexpected = [key for key in got if key not in invoked]
        dups = sum(count - 1 for count in got.values() if count > 1)
        lost_keys.update(lost)
        recovered.update(key for key in unknown if key in got)
        result.unexpected += len(unexpected)
        result.duplicates += dups
        result.channels[channel] = {
            "delivered": len(got),
            "lost": len(lost),
            "unexpected": len(unexpected),
            "duplicates": dups,
        }
        result.unexpected_sample.extend("%s:%s" % k for k in unexpected[:5])
    result.lost = len(lost_keys)
    result.recovered = len(recovered)
    result.lost_sample = ["%s:%d" % k for k in sorted(lost_keys)[:10]]
    nodes: Dict[str, Dict[str, int]] = defaultdict(lambda: {"acknowledged": 0, "lost": 0})
    for key, node in acked.items():
        nodes[node]["acknowledged"] += 1
        if key in lost_keys:
            nodes[node]["lost"] += 1
    result.by_node = dict(nodes)
    return result
