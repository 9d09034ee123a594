"""
Lookupd scenarios: two nsqlookupds (l1, l2), three nsqds (n1..n3, plain
topics) registered with both, consumers on c1 that find the nsqds only
through the lookupds (polled every second), and a numbering producer
that sends each publish to the next nsqd in turn.

- ``lookupd-partition``: n1 and l1 cut off together from every other
  host; consumers keep reading from n2 and n3, and after the heal find
  n1 again and get what it holds.
- ``lookupd-tombstone``: n1 tombstoned for the topic on both lookupds
  (``POST /topic/tombstone``); ``/lookup`` hides it for
  ``--tombstone-lifetime`` and a consumer started meanwhile does not find
  it, then it is back.
"""

from __future__ import annotations

import json
import time
from typing import Any, Dict, List, Optional, Tuple

from lab.checkers import check_queue
from lab.checkers_lookupd import (
    LookupPoll,
    check_hidden_discovery,
    check_tombstone_polls,
    first_from_after,
    flow_during,
)
from lab.errors import LabError
from lab.history import read_history
from lab.nemesis import Partition
from lab.net import Host
from lab.queue_workload import QueueWorkload, failover_seconds
from lab.scenarios import register
from lab.scenarios.base import Scenario
from lab.world import NsqdNode, World

__all__ = ["LookupdPartition", "LookupdTombstone", "lookup"]

TOPIC = "events"
#: ``billing`` is consumed throughout; ``audit``'s consumer starts later
#: (after the heal, or while n1 is tombstoned).
CHANNELS = ["billing", "audit"]


def lookup(world: World, via: Host, lookupd_http: str, topic: str) -> Tuple[int, List[str], List[str]]:
    """``GET /lookup?topic=`` of one lookupd: (status, producers as ``host:tcp_port``, channels)."""
    status, text = world.http(via, "GET", "http://%s/lookup?topic=%s" % (lookupd_http, topic))
    if status != 200:
        return status, [], []
    try:
        body = json.loads(text)
    except ValueError:
        return 0, [], []
    body = body.get("data", body)  # the V1 envelope of old clients' Accept header
    producers = ["%s:%s" % (p.get("broadcast_address"), p.get("tcp_port")) for p in body.get("producers") or []]
    return status, producers, list(body.get("channels") or [])


def wait_registered(world: World, via: Host, topic: str, nodes: List[NsqdNode], timeout: float = 30.0) -> None:
    """Wait until every lookupd lists every node for ``topic``."""
    deadline = time.monotonic() + timeout
    while True:
        missing = []
        for address in world.lookupd_http:
            _, producers, _ = lookup(world, via, address, topic)
            missing += ["%s on %s" % (n.name, address) for n in nodes if n.tcp not in producers]
        if not missing:
            return
        if time.monotonic() > deadline:
            raise LabError("%s not registered in %.0f s: %s" % (topic, timeout, ", ".join(missing)))
        time.sleep(0.3)


def start_lookupd_world(context: Any, lookupd_extra: Optional[List[str]] = None) -> Tuple[Host, List[NsqdNode]]:
    """Two lookupds, the client host, three plain nsqds (started): (client, nodes)."""
    world: World = context.world
    world.start_lookupd("l1", extra=lookupd_extra)
    world.start_lookupd("l2", extra=lookupd_extra)
    client = world.host("c1")
    nodes = world.add_nsqd(["n1", "n2", "n3"])
    for node in nodes:
        node.start()
    return client, nodes


def _acked_by(events: List[Dict[str, Any]], node: str, after: float) -> int:
    """Publishes ``node`` acknowledged at or after ``after``."""
    return sum(1 for e in events if e.get("f") == "pub" and e.get("type") == "ok"
               and e.get("node") == node and e["t"] >= after)


class LookupdPartition(Scenario):
    """n1 and l1 cut off together; see the module docstring."""

    workload = "lookupd"
    name = "lookupd-partition"
    summary = "n1 and lookupd l1 cut off together; consumers find nsqds only through lookupds"
    nemeses = ["partition:halves"]

    def run_round(self, context: Any, result: Any) -> None:
        world: World = context.world
        history = context.history
        client, nodes = start_lookupd_world(context)
        workload = QueueWorkload(world, history.folder, client, nodes, TOPIC, CHANNELS)
        workload.create()
        wait_registered(world, client, TOPIC, nodes)
        workload.start_consumers(CHANNELS[:1])
        warmup = 3.0 if context.quick else 5.0
        fault = 8.0 if context.quick else 15.0
        after = 5.0 if context.quick else 8.0
        duration = warmup + fault + after
        history.event("phase", "publishing", duration=duration)
        t0 = time.time()
        workload.start_producer("p1", duration, 300.0 if context.quick else 500.0, mode="roundrobin", timeout=2.0)
        isolated = nodes[0]
        nemesis = Partition.halves(world, history, [isolated.host, world.host("l1")])
        context.sleep_until(t0, warmup)
        start = time.time()
        try:
            nemesis.start()
            context.sleep_until(t0, warmup + fault)
        finally:
            nemesis.stop()
        stop = time.time()
        workload.wait_producers(duration + 30)
        workload.start_consumers(CHANNELS[1:])
        workload.drain(quiet=8.0, limit=60.0)
        workload.stop_consumers()
        events = workload.events()
        check = check_queue(events, CHANNELS)
        others = [n.tcp for n in nodes if n is not isolated]
        flow = flow_during(events, CHANNELS[0], others, start, stop)
        back = first_from_after(events, CHANNELS[0], isolated.tcp, stop)
        acked_after = _acked_by(events, isolated.tcp, stop)
        result.figures = check.as_dict()
        result.figures.update({
            "flow_from_others": flow,
            "isolated_acked_after_heal": acked_after,
            "isolated_held_delivered_after_heal": {
                c: _held_then_delivered(events, isolated.tcp, stop, c) for c in CHANNELS},
        })
        result.failover_s = failover_seconds(events, start)
        result.recover_s = round(back - stop, 2) if back is not None else None
        if check.acknowledged == 0:
            result.problems.append("nothing was acknowledged")
        if check.unexpected:
            result.problems.append("unexpected deliveries: %s" % check.unexpected_sample[:5])
        if check.lost:
            result.problems.append("lost %d acknowledged: %s" % (check.lost, check.lost_sample[:5]))
        if flow["count"] == 0 or flow["second_half"] == 0:
            result.problems.append("%s got %d from n2/n3 during the partition (%d in its second half)" % (
                CHANNELS[0], flow["count"], flow["second_half"]))
        if acked_after and back is None:
            result.problems.append("%s never got anything from %s after the heal (%d acknowledged by it then)" % (
                CHANNELS[0], isolated.name, acked_after))
        result.passed = not result.problems


def _held_then_delivered(events: List[Dict[str, Any]], node: str, stop: float, channel: str) -> int:
    """
    Messages ``node`` acknowledged before the heal whose first delivery
    on ``channel`` came after it: what the cut-off nsqd held meanwhile.
    """
    acked = set()
    for e in events:
        if e.get("f") == "pub" and e.get("type") == "ok" and e.get("node") == node and e["t"] < stop:
            for n in e["v"] if isinstance(e["v"], list) else [e["v"]]:
                acked.add((e["p"], n))
    first: Dict[tuple, float] = {}
    for e in events:
        if e.get("type") == "recv" and e.get("ch") == channel:
            key = (e.get("src"), e.get("v"))
            if key in acked and key not in first:
                first[key] = e["t"]
    return sum(1 for t in first.values() if t >= stop)


class LookupdTombstone(Scenario):
    """n1 tombstoned for the topic on both lookupds; see the module docstring."""

    workload = "lookupd"
    name = "lookupd-tombstone"
    summary = "POST /topic/tombstone of n1 on both lookupds: hidden from /lookup for its lifetime, then back"
    nemeses = ["admin:tombstone"]

    def run_round(self, context: Any, result: Any) -> None:
        world: World = context.world
        history = context.history
        lifetime = 5.0 if context.quick else 8.0
        client, nodes = start_lookupd_world(context, ["--tombstone-lifetime=%gs" % lifetime])
        workload = QueueWorkload(world, history.folder, client, nodes, TOPIC, CHANNELS)
        workload.create()
        retired = "retired"
        for node in nodes:
            world.http(client, "POST", "http://%s/topic/create?topic=%s" % (node.http, retired))
        wait_registered(world, client, TOPIC, nodes)
        wait_registered(world, client, retired, nodes)
        workload.start_consumers(CHANNELS[:1])
        warmup = 3.0
        after = 4.0 if context.quick else 6.0
        duration = warmup + lifetime + after
        history.event("phase", "publishing", duration=duration)
        t0 = time.time()
        workload.start_producer("p1", duration, 200.0 if context.quick else 400.0, mode="roundrobin", timeout=2.0)
        target, others = nodes[0], nodes[1:]
        polls: List[LookupPoll] = []

        def poll_all() -> None:
            for address in world.lookupd_http:
                sent = time.time()
                status, producers, channels = lookup(world, client, address, TOPIC)
                polls.append(LookupPoll(address, sent, time.time(), status, producers, channels))

        while time.time() < t0 + warmup:
            poll_all()
            time.sleep(0.2)
        tombstoned_from = time.time()
        history.event("start", "tombstone", node=target.name, topic=TOPIC)
        for address in world.lookupd_http:
            status, text = world.http(client, "POST", "http://%s/topic/tombstone?topic=%s&node=%s" % (
                address, TOPIC, target.http))
            if status != 200:
                raise LabError("tombstone on %s: %s %s" % (address, status, text[:200]))
        tombstoned_to = time.time()
        hidden_until = tombstoned_from + lifetime
        # A consumer that starts now must not find n1 until the tombstone ends.
        workload.start_consumers(CHANNELS[1:])
        rereg = self._reregistrations(world, client, target, retired, lifetime, tombstoned_to, poll_all)
        while time.time() < tombstoned_to + lifetime + 3.0:
            poll_all()
            time.sleep(0.2)
        history.event("stop", "tombstone", node=target.name, topic=TOPIC)
        workload.wait_producers(duration + 30)
        workload.drain(quiet=8.0, limit=60.0)
        workload.stop_consumers()
        events = workload.events()
        check = check_queue(events, CHANNELS)
        problems = check_tombstone_polls(polls, target.tcp, [n.tcp for n in others], tombstoned_from,
                                         tombstoned_to, lifetime)
        discovery = check_hidden_discovery(events, CHANNELS[1], target.tcp, hidden_until)
        late_seen = sorted({p.lookupd for p in polls if "late" in p.channels
                            and p.sent >= tombstoned_to and p.answered < hidden_until})
        result.figures = check.as_dict()
        result.figures.update({
            "lifetime_s": lifetime,
            "polls": len(polls),
            "hidden_polls": sum(1 for p in polls if p.sent >= tombstoned_to and p.answered < hidden_until),
            "audit_from_tombstoned": discovery,
            "late_channel_listed_while_hidden": late_seen,
            "reregistered_after_delete_s": rereg,
            "billing_from_tombstoned_while_hidden": sum(
                1 for e in events if e.get("type") == "recv" and e.get("ch") == CHANNELS[0]
                and e.get("node") == target.tcp and tombstoned_to <= e["t"] < hidden_until),
        })
        result.recover_s = discovery["first_after_s"]
        result.problems.extend(problems)
        result.problems.extend(discovery["problems"])
        if len(late_seen) < len(world.lookupd_http):
            result.problems.append("a channel n1 registered while tombstoned was listed by %s only" % (late_seen,))
        for address, seconds in rereg.items():
            if seconds is None:
                result.problems.append("%s: n1 deleted and re-created %s, still hidden until the lifetime" % (
                    address, retired))
        if check.acknowledged == 0:
            result.problems.append("nothing was acknowledged")
        if check.unexpected:
            result.problems.append("unexpected deliveries: %s" % check.unexpected_sample[:5])
        if check.lost:
            result.problems.append("lost %d acknowledged: %s" % (check.lost, check.lost_sample[:5]))
        result.passed = not result.problems

    @staticmethod
    def _reregistrations(world: World, client: Host, target: NsqdNode, retired: str, lifetime: float,
                         tombstoned_to: float, poll_all: Any) -> Dict[str, Optional[float]]:
        """
        While the tombstone holds: n1 registers a new channel of the topic
        (the tombstone must stay: the polls check it), and the documented
        way out -- tombstone n1 for topic ``retired``, delete it on n1
        (it unregisters), create it again (it registers afresh) -- must
        list n1 for ``retired`` at once, within the lifetime.  Returns,
        per lookupd, the seconds from the re-creation to n1 listed (None:
        not within the lifetime).
        """
        poll_all()
        world.http(client, "POST", "http://%s/channel/create?topic=%s&channel=late" % (target.http, TOPIC))
        for address in world.lookupd_http:
            world.http(client, "POST", "http://%s/topic/tombstone?topic=%s&node=%s" % (address, retired, target.http))
        retired_at = time.time()
        status, text = world.http(client, "POST", "http://%s/topic/delete?topic=%s" % (target.http, retired))
        if status != 200:
            raise LabError("topic/delete on n1: %s %s" % (status, text[:200]))
        poll_all()
        status, text = world.http(client, "POST", "http://%s/topic/create?topic=%s" % (target.http, retired))
        if status != 200:
            raise LabError("topic/create on n1: %s %s" % (status, text[:200]))
        created = time.time()
        listed: Dict[str, Optional[float]] = {a: None for a in world.lookupd_http}
        while time.time() < retired_at + lifetime - 0.5 and None in listed.values():
            for address in world.lookupd_http:
                if listed[address] is None:
                    _, producers, _ = lookup(world, client, address, retired)
                    if target.tcp in producers:
                        listed[address] = round(time.time() - created, 2)
            poll_all()
        return listed


register(LookupdPartition())
register(LookupdTombstone())
