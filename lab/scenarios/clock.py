"""
Clock scenarios: nsqds whose clocks step or run fast (libfaketime, see
:mod:`lab.clock`) under the queue workload, and two timing workloads
read against the client's true clock: deferred publishes (DPUB) and
messages left unanswered until nsqd's msg-timeout requeues them.

Every timer of txnsq -- the mirror's heartbeat and failover timeout,
message timeouts, deferred messages, retention by age -- is scheduled
on the reactor's clock, which nsqd's console script makes a steady one
(wall time at start plus ``time.monotonic`` since,
:func:`txnsq.reactors.install_steady_clock`): a step of the wall clock
moves none of them, and the checkers here allow a stepped node no
earliness.  Besides the queue checker's properties, each scenario
requires that no clock fault makes a standby take over a primary that
is alive and routed (``taken_over`` in the nsqds' /stats): with both
alive, a takeover delivers the primary's messages twice.
"""

from __future__ import annotations

import time
from typing import Any, Dict, List

from lab.clock import ClockRate, ClockSkew, FakeClock
from lab.errors import LabError
from lab.history import read_history
from lab.queue_workload import QueueWorkload
from lab.scenarios import register
from lab.scenarios.base import Scenario
from lab.scenarios.queue import TOPIC, FaultPlan, MirroredQueue, Prepare, start_queue_world, wait_mirrored
from lab.timing_checkers import check_deferred, check_timeouts
from lab.world import NsqdNode, World

__all__ = ["ClockQueue", "RetentionSkew", "TimedQueue", "mirror_takeovers"]


def fake_clocks(names: List[str], fake_monotonic: bool = False) -> Prepare:
    """A :data:`Prepare` installing a :class:`FakeClock` on the nodes named."""

    def prepare(context: Any, nodes: List[NsqdNode]) -> None:
        for node in nodes:
            if node.name in names:
                FakeClock(context.world, node, fake_monotonic=fake_monotonic)

    return prepare


def skew(index: int, offset: float) -> FaultPlan:
    """The node at ``index`` steps ``offset`` seconds at the fault's start, and back at its end."""

    def plan(context: Any, nodes: List[NsqdNode]) -> List[tuple]:
        return [(0.0, ClockSkew(context.world, context.history, nodes[index], offset))]

    return plan


def rate(index: int, factor: float) -> FaultPlan:
    """The node at ``index`` runs ``factor`` times as fast through the fault, then is stepped back."""

    def plan(context: Any, nodes: List[NsqdNode]) -> List[tuple]:
        return [(0.0, ClockRate(context.world, context.history, nodes[index], factor))]

    return plan


def mirror_takeovers(world: World) -> Dict[str, Any]:
    """
    Every nsqd's takeovers with messages (``taken_over`` in /stats) and
    heartbeat silences, by node; a node that does not answer is ``None``.
    """
    found: Dict[str, Any] = {}
    client = world.host("c1")
    for name, node in world.nsqds.items():
        stats = world.stats(client, node) if node.alive() else None
        mirror = ((stats or {}).get("cluster") or {}).get("mirror")
        if mirror is None:
            found[name] = None
            continue
        found[name] = {
            "taken_over": [
                {k: done.get(k) for k in ("node_id", "reason", "messages", "split_brain")}
                for done in mirror.get("taken_over", [])
                if done.get("messages")
            ],
            "silences": (mirror.get("heartbeat") or {}).get("silences"),
        }
    return found


def _takeover_problems(takeovers: Dict[str, Any]) -> List[str]:
    problems = []
    for name, entry in sorted(takeovers.items()):
        for done in (entry or {}).get("taken_over", []):
            problems.append(
                "%s took over %s messages of live node %s (%s)"
                % (name, done.get("messages"), done.get("node_id"), done.get("reason"))
            )
    return problems


class ClockQueue(MirroredQueue):
    """
    :class:`MirroredQueue` under a clock fault; the round also fails
    when a standby took over a primary (none is down: only clocks are
    off).
    """

    def run_round(self, context: Any, result: Any) -> None:
        super().run_round(context, result)
        takeovers = mirror_takeovers(context.world)
        result.figures["mirror"] = takeovers
        problems = _takeover_problems(takeovers)
        if problems:
            result.problems.extend(problems)
            result.passed = False


#: ``--mirror-min-standbys`` of the timing workloads (1 once nsqd has the flag).
MIN_STANDBYS = 1


class TimedQueue(Scenario):
    """
    Two mirrored nsqds, a producer on the client host and one consumer
    (channel ``billing``), under a clock skew of one node, checked
    against the client's clock.

    - ``deferred``: every publish is a DPUB with a delay of 1-8 s; no
      delivery may come before ``invoke + delay - bound``.
    - ``timeout``: the consumer leaves one message in ten unanswered at
      its first delivery; nsqd (``--msg-timeout``) must deliver each
      again, not before ``msg_timeout - bound`` after the first.

    ``bound`` is 0: nsqd's timers run on a steady clock, so a step of a
    node's wall clock makes nothing early.  (Before they did, a forward
    step of the delivering node made deliveries up to the step early,
    and the bound was that step.)

    :param index: the node whose clock steps (0: the primary the
        producer publishes to, 1: its standby).
    :param offset: the step in seconds (back at the end of the fault).
    """

    def __init__(
        self,
        name: str,
        summary: str,
        kind: str,
        index: int,
        offset: float,
        fault_seconds: float = 6.0,
        msg_timeout: float = 3.0,
        min_standbys: int = MIN_STANDBYS,
    ) -> None:
        self.name = name
        self.summary = summary
        self.workload = kind
        self.nemeses = ["clock:skew"]
        self.kind = kind
        self.index = index
        self.offset = offset
        self.fault_seconds = fault_seconds
        self.msg_timeout = msg_timeout
        self.min_standbys = min_standbys

    def bound(self) -> float:
        """The early delivery the checker allows: none, whatever the step."""
        return 0.0

    def run_round(self, context: Any, result: Any) -> None:
        world: World = context.world
        history = context.history
        extra = ["--msg-timeout=%gs" % self.msg_timeout] if self.kind == "timeout" else []
        nodes = start_queue_world(
            context, ["n1", "n2"], self.min_standbys, 2.0, extra=extra,
            prepare=fake_clocks([["n1", "n2"][self.index]]),
        )
        channel = "billing"
        workload = QueueWorkload(world, history.folder, world.host("c1"), nodes, TOPIC, [channel])
        workload.create()
        wait_mirrored(world, nodes, TOPIC)
        workload.start_consumers(extra=["--hold-every", "10"] if self.kind == "timeout" else [])
        warmup, after = 2.0, 2.0
        duration = warmup + self.fault_seconds + after
        producer_args = ["--seed", str(context.rng.randrange(1 << 30))]
        if self.kind == "deferred":
            producer_args += ["--defer-ms", "1000:8000"]
        history.event("phase", "publishing", duration=duration)
        t0 = time.time()
        workload.start_producer("p1", duration, 40.0 if context.quick else 100.0, extra=producer_args)
        nemesis = ClockSkew(world, history, nodes[self.index], self.offset)
        context.sleep_until(t0, warmup)
        try:
            nemesis.start()
            context.sleep_until(t0, warmup + self.fault_seconds)
        finally:
            nemesis.stop()
        workload.wait_producers(duration + 30)
        # Deferred messages come up to 8 s after their publish; the step
        # is kept in the wait in case a node's timers follow it after all.
        quiet = 8.0 + abs(self.offset) + 3.0 if self.kind == "deferred" else self.msg_timeout + abs(self.offset) + 3.0
        workload.drain(quiet=quiet, limit=60)
        if self.kind == "timeout":
            self._wait_requeued(workload, channel, limit=self.msg_timeout + abs(self.offset) + 10)
        workload.stop_consumers()
        events = read_history(history.folder)
        if self.kind == "deferred":
            check: Any = check_deferred(events, channel, self.bound())
        else:
            check = check_timeouts(events, channel, self.msg_timeout, self.bound())
        result.figures = check.as_dict()
        takeovers = mirror_takeovers(world)
        result.figures["mirror"] = takeovers
        queue = check.queue
        if queue.acknowledged == 0:
            result.problems.append("nothing was acknowledged")
        if queue.lost:
            result.problems.append("lost %d acknowledged: %s" % (queue.lost, queue.lost_sample[:5]))
        if queue.unexpected:
            result.problems.append("unexpected deliveries: %s" % queue.unexpected_sample[:5])
        if check.early:
            result.problems.append("%d delivered early (bound %gs): %s" % (check.early, self.bound(), check.early_sample))
        if self.kind == "timeout":
            if check.held == 0:
                result.problems.append("no message was held")
            if check.not_redelivered:
                result.problems.append("%d held messages never delivered again: %s" % (
                    check.not_redelivered, check.not_redelivered_sample))
        result.problems.extend(_takeover_problems(takeovers))
        result.passed = not result.problems

    def _wait_requeued(self, workload: QueueWorkload, channel: str, limit: float) -> None:
        """Wait until every held message was delivered again (or ``limit`` seconds)."""
        deadline = time.monotonic() + limit
        while time.monotonic() < deadline:
            check = check_timeouts(workload.events(), channel, self.msg_timeout, self.bound())
            if check.not_redelivered == 0:
                return
            time.sleep(0.5)


class RetentionSkew(Scenario):
    """
    A retained topic with ``--retention-age`` A (60 s) on one nsqd: records
    published, then the node's clock steps forward and its retention is
    made to run (changing the topic's age by a second reopens the log,
    which enforces it).

    - Stepped +``keep_skew`` (records aged e with e + skew < A - 1 s): no
      record may be deleted (``first_offset`` 0 and ``next_offset`` as
      before in every partition).
    - Stepped +``drop_skew`` (e + skew > A): no record may be deleted
      either: retention runs on nsqd's steady clock, which a step of the
      wall clock does not move.  (Before it did, every record went here,
      and the round required it.)
    - Not stepped, the age set to ``short_age`` once every record is
      older than that: every record is deleted, which shows that
      retention did run, without which the checks above prove nothing.
    """

    workload = "retention"
    nemeses = ["clock:skew"]

    def __init__(self, name: str, summary: str, age: float = 60.0, keep_skew: float = 30.0,
                 drop_skew: float = 75.0, short_age: float = 1.0) -> None:
        self.name = name
        self.summary = summary
        self.age = age
        self.keep_skew = keep_skew
        self.drop_skew = drop_skew
        self.short_age = short_age

    def run_round(self, context: Any, result: Any) -> None:
        world: World = context.world
        history = context.history
        client = world.host("c1")
        [node] = world.add_nsqd(["n1"], extra=["--retain-topics=^kept$", "--retention-age=%gs" % self.age])
        FakeClock(world, node)
        node.start()
        workload = QueueWorkload(world, history.folder, client, [node], "kept", [])
        workload.create()
        history.event("phase", "publishing", duration=3.0)
        workload.start_producer("p1", 3.0, 100.0, mode="pinned")
        workload.wait_producers(40)
        events = workload.events()
        acked = [e["t"] for e in events if e.get("f") == "pub" and e.get("type") == "ok"]
        if not acked:
            result.problems.append("nothing was acknowledged")
            return
        oldest = min(e["t"] for e in events if e.get("f") == "pub" and e.get("type") == "invoke")
        before = self._retained(world, node)
        figures: Dict[str, Any] = {"acknowledged": len(acked), "before": before}
        result.figures = figures

        # Every record is younger than age - keep_skew: none may go.
        age_then = time.time() - oldest
        self._stepped_enforce(world, history, node, self.keep_skew, self.age - 1)
        kept = self._retained(world, node)
        figures.update(keep_skew=self.keep_skew, oldest_age_s=round(age_then, 2), after_keep_skew=kept)
        if age_then + self.keep_skew > self.age - 1 - 1.0:
            result.problems.append("inconclusive: records %.1f s old at the step, too old for the check" % age_then)
        elif kept != before:
            result.problems.append("records younger than the age minus the skew deleted: %s -> %s" % (before, kept))

        # Every record is older than age - drop_skew: a step must still delete none.
        self._stepped_enforce(world, history, node, self.drop_skew, self.age)
        stepped = self._retained(world, node)
        figures.update(drop_skew=self.drop_skew, after_drop_skew=stepped)
        if stepped != before:
            result.problems.append(
                "records deleted at +%g s (%s -> %s): retention followed the wall clock's step"
                % (self.drop_skew, before, stepped))

        # Unstepped, every record older than short_age: all go.
        time.sleep(max(0.0, max(acked) + self.short_age + 1.5 - time.time()))
        self._stepped_enforce(world, history, node, 0.0, self.short_age)
        dropped = self._retained(world, node)
        figures.update(short_age=self.short_age, after_short_age=dropped)
        if any(first != end for first, end in dropped):
            result.problems.append(
                "nothing deleted with an age of %g s (%s): retention did not run" % (self.short_age, dropped))
        result.passed = not result.problems

    def _stepped_enforce(self, world: World, history: Any, node: NsqdNode, offset: float, age: float) -> None:
        """Step the node's clock by ``offset`` (unless 0), run its retention (a new age), step it back."""
        step = ClockSkew(world, history, node, offset) if offset else None
        if step is not None:
            step.start()
        try:
            path = "/topic/retention?topic=kept&age=%gs" % age
            status, text = world.http(world.host("c1"), "POST", "http://%s%s" % (node.http, path))
            if status != 200:
                raise LabError("%s: %s %s" % (path, status, text[:200]))
        finally:
            if step is not None:
                step.stop()

    def _retained(self, world: World, node: NsqdNode) -> List[List[int]]:
        """``[first_offset, next_offset]`` of each partition of ``kept``."""
        stats = world.stats(world.host("c1"), node)
        for topic in (stats or {}).get("topics", []):
            if topic.get("topic_name") == "kept":
                partitions = (topic.get("retention") or {}).get("partitions", [])
                return [[p["first_offset"], p["next_offset"]] for p in partitions]
        raise LabError("no retained topic 'kept' in n1's /stats")


# Also run while developing, left out of the registry to keep `run all
# --quick` short: n1 -30 s then back (passed 4 of 4: the load keeps it
# heard), n1 at x0.7 (4 of 4), DPUBs while the standby steps +30 s (4
# of 4, none early with a bound of 0).
register(ClockQueue(
    "queue-clock-skew", "n1 (the producers' primary) steps +30 s under load, and back 6 s later",
    ["clock:skew"], skew(0, 30.0), prepare=fake_clocks(["n1"])))
register(ClockQueue(
    "queue-clock-skew-standby", "n2 (a standby) steps +30 s under load, and back 6 s later",
    ["clock:skew"], skew(1, 30.0), prepare=fake_clocks(["n2"])))
register(ClockQueue(
    "queue-clock-fast", "n2 (a standby) runs at x1.5 under load for 6 s, then is stepped back",
    ["clock:rate"], rate(1, 1.5), prepare=fake_clocks(["n2"], fake_monotonic=True)))
register(TimedQueue(
    "deferred-clock-skew", "DPUBs of 1-8 s to n1 while n1 steps +5 s for 6 s: none early, none lost",
    "deferred", 0, 5.0))
register(TimedQueue(
    "timeout-clock-skew", "1 in 10 messages left unanswered (msg-timeout 3 s) while n1 steps +2 s",
    "timeout", 0, 2.0))
register(RetentionSkew(
    "retention-clock-skew",
    "retained topic, age 60 s: n1 steps +30 s, then +75 s, retention runs (none may go); age 1 s (all go)"))
