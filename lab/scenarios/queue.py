"""
Queue scenarios: mirrored topics on three (or two) nsqds, numbered
publishes from a client host, consumers on two channels found through
two nsqlookupds, under partitions and process faults.
"""

from __future__ import annotations

import time
from typing import Any, Callable, List, Optional

from lab.errors import LabError
from lab.disk_nemeses import PowerLoss, under_power_loss
from lab.nemesis import HostLoss, Nemesis, Partition, ProcessFault
from lab.net import Host
from lab.queue_workload import QueueWorkload, failover_seconds
from lab.scenarios import register
from lab.scenarios.base import Scenario
from lab.world import NsqdNode, World

__all__ = ["MirroredQueue", "start_queue_world", "wait_mirrored"]

TOPIC = "orders"
#: ``billing`` is consumed throughout; ``audit``'s consumer starts after
#: the faults, so its backlog sits on the nsqds while they happen.
CHANNELS = ["billing", "audit"]

#: ``fault(context, nodes) -> [(offset from the fault's start, nemesis), ...]``:
#: each nemesis starts at its offset and stops at ``fault_seconds``
#: (or its own stop offset, when the tuple has three items).
FaultPlan = Callable[[Any, List[NsqdNode]], List[tuple]]

#: ``prepare(context, nodes)``: called once the nsqds are made and
#: before they start (a fake clock is installed then, proxies started).
Prepare = Callable[[Any, List[NsqdNode]], None]


def start_queue_world(
    context: Any,
    node_names: List[str],
    min_standbys: int,
    failover_timeout: float,
    mirror_ack: str = "sync",
    extra: Optional[List[str]] = None,
    prepare: Optional[Prepare] = None,
    route_via: Optional[Callable[[Host], str]] = None,
) -> List[NsqdNode]:
    """
    Two nsqlookupds, nsqadmin, and mirroring nsqds on ``node_names``; all
    started (after ``prepare``; ``route_via`` as for ``World.add_nsqd``).
    """
    world: World = context.world
    world.start_lookupd("l1")
    world.start_lookupd("l2")
    world.start_nsqadmin("l1")
    world.host("c1")
    nodes = world.add_nsqd(
        node_names,
        mirror_topics="^%s$" % TOPIC,
        mirror_ack=mirror_ack,
        min_standbys=min_standbys,
        failover_timeout=failover_timeout,
        extra=extra,
        route_via=route_via,
    )
    if prepare is not None:
        prepare(context, nodes)
    for node in nodes:
        node.start()
    return nodes


def wait_mirrored(world: World, nodes: List[NsqdNode], topic: str, timeout: float = 20.0) -> None:
    """Wait until every node's ``topic`` names all the others as live mirror peers."""
    client = world.host("c1")
    deadline = time.monotonic() + timeout
    while True:
        ready = 0
        for node in nodes:
            stats = world.stats(client, node)
            topics = (stats or {}).get("topics", [])
            for entry in topics:
                if entry.get("topic_name") == topic:
                    peers = (entry.get("mirror") or {}).get("peers", [])
                    if len(peers) >= len(nodes) - 1:
                        ready += 1
        if ready == len(nodes):
            return
        if time.monotonic() > deadline:
            raise LabError("mirror routes not up in %.0f s (%d of %d nodes ready)" % (timeout, ready, len(nodes)))
        time.sleep(0.3)


def poll_nsqadmin(world: World) -> int:
    """The health view: nsqadmin's /api/nodes answered from the client host (its HTTP status)."""
    host = world.host("l1")
    status, _ = world.http(world.host("c1"), "GET", "http://%s:4171/api/nodes" % host.address)
    return status


class MirroredQueue(Scenario):
    """
    The queue workload on mirrored nsqds under one fault plan.

    :param expect_lost: ``None`` when 0 acknowledged messages may be lost
        (the guarantee); a number is not a bound but marks the scenario
        as one that documents a loss (N = 0 with host loss).
    :param prepare: called before the nsqds start (see :data:`Prepare`).
    :param route_via: where peers dial a host's route listener (see
        ``World.add_nsqd``).
    """

    workload = "queue"

    def __init__(
        self,
        name: str,
        summary: str,
        nemeses: List[str],
        plan: FaultPlan,
        nodes: int = 3,
        min_standbys: int = 1,
        producer_mode: str = "failover",
        batch: int = 1,
        fault_seconds: float = 6.0,
        failover_timeout: float = 2.0,
        documents_loss: bool = False,
        extra: Optional[List[str]] = None,
        prepare: Optional[Prepare] = None,
        route_via: Optional[Callable[[Host], str]] = None,
    ) -> None:
        self.name = name
        self.summary = summary
        self.nemeses = nemeses
        self.plan = plan
        self.node_names = ["n%d" % (i + 1) for i in range(nodes)]
        self.min_standbys = min_standbys
        self.producer_mode = producer_mode
        self.batch = batch
        self.fault_seconds = fault_seconds
        self.failover_timeout = failover_timeout
        self.documents_loss = documents_loss
        self.extra = extra
        self.prepare = prepare
        self.route_via = route_via

    def run_round(self, context: Any, result: Any) -> None:
        world: World = context.world
        history = context.history
        nodes = start_queue_world(context, self.node_names, self.min_standbys, self.failover_timeout,
                                  extra=self.extra, prepare=self.prepare, route_via=self.route_via)
        workload = QueueWorkload(world, history.folder, world.host("c1"), nodes, TOPIC, CHANNELS)
        workload.create()
        wait_mirrored(world, nodes, TOPIC)
        workload.start_consumers(CHANNELS[:1])
        warmup = 2.0 if context.quick else 4.0
        after = 3.0 if context.quick else 6.0
        duration = warmup + self.fault_seconds + after
        rate = 300.0 if context.quick else 500.0
        history.event("phase", "publishing", duration=duration)
        t0 = time.time()
        targets = nodes if self.producer_mode == "failover" else nodes[:1] + nodes[1:]
        workload.start_producer("p1", duration, rate, mode=self.producer_mode, batch=self.batch, nodes=targets)
        # A plan's nemeses may re-create the topic and channels on a node
        # that comes back empty (HostLoss).
        context.queue_workload = workload
        steps = self.plan(context, nodes)
        context.sleep_until(t0, warmup)
        fault_at = time.time()
        pending: List[tuple] = []
        for step in steps:
            offset, nemesis = step[0], step[1]
            stop_at = step[2] if len(step) > 2 else self.fault_seconds
            pending.append((offset, "start", nemesis))
            pending.append((stop_at, "stop", nemesis))
        pending.sort(key=lambda item: (item[0], item[1] == "start"))
        nemeses: List[Nemesis] = []
        try:
            for offset, action, nemesis in pending:
                context.sleep_until(fault_at, offset)
                if action == "start":
                    nemeses.append(nemesis)
                    nemesis.start()
                else:
                    nemesis.stop()
        finally:
            for nemesis in nemeses:
                nemesis.stop()
        healed_at = time.time()
        for node in nodes:
            if not node.alive():
                node.start()
        workload.wait_producers(duration + 30)
        workload.start_consumers(CHANNELS[1:])
        health = poll_nsqadmin(world)
        last = workload.drain(quiet=3 * self.failover_timeout + 6, limit=60)
        workload.stop_consumers()
        check = workload.check()
        result.figures = check.as_dict()
        result.figures["nsqadmin_api"] = health
        result.failover_s = failover_seconds(workload.events(), fault_at)
        result.recover_s = round(max(0.0, last - healed_at), 2) if last else None
        if check.acknowledged == 0:
            result.problems.append("nothing was acknowledged")
        if check.unexpected:
            result.problems.append("unexpected deliveries: %s" % check.unexpected_sample[:5])
        if check.lost and not self.documents_loss:
            result.problems.append("lost %d acknowledged: %s" % (check.lost, check.lost_sample[:5]))
        result.passed = not result.problems


# -- the fault plans -------------------------------------------------------------------


def _isolate_primary(context: Any, nodes: List[NsqdNode]) -> List[tuple]:
    return [(0.0, Partition.isolate(context.world, context.history, nodes[0].host))]


def _halves(context: Any, nodes: List[NsqdNode]) -> List[tuple]:
    world = context.world
    minority = [nodes[0].host, world.host("l1")]
    return [(0.0, Partition.halves(world, context.history, minority))]


def _inbound(context: Any, nodes: List[NsqdNode]) -> List[tuple]:
    world = context.world
    return [(0.0, Partition.inbound(world, context.history, nodes[0].host, [n.host for n in nodes[1:]]))]


def _route_cut(context: Any, nodes: List[NsqdNode]) -> List[tuple]:
    return [(0.0, Partition.route(context.world, context.history, nodes[0].host, nodes[1].host))]


def _route_cut_then_host_loss(context: Any, nodes: List[NsqdNode]) -> List[tuple]:
    # The route cut for twice the failover timeout, then the primary's
    # host lost (process killed, data gone) while still cut; it comes
    # back empty at the end of the fault window.
    world, history = context.world, context.history
    return [
        (0.0, Partition.route(world, history, nodes[0].host, nodes[1].host), 4.5),
        (4.0, HostLoss(world, history, nodes[0], prepare=context.queue_workload.create_on)),
    ]


def _flapping(context: Any, nodes: List[NsqdNode]) -> List[tuple]:
    # The route cut and healed at T/2, T and 2T of the failover timeout T.
    world, history = context.world, context.history
    t = 2.0
    steps: List[tuple] = []
    at = 0.0
    for length in (t / 2, t, 2 * t):
        steps.append((at, Partition.route(world, history, nodes[0].host, nodes[1].host), at + length))
        at += length + 0.5
    return steps


def _signal(how: str) -> FaultPlan:
    def plan(context: Any, nodes: List[NsqdNode]) -> List[tuple]:
        return [(0.0, ProcessFault(context.world, context.history, nodes[0], how))]

    return plan


def _host_loss(context: Any, nodes: List[NsqdNode]) -> List[tuple]:
    return [(0.0, HostLoss(context.world, context.history, nodes[0], prepare=context.queue_workload.create_on))]


register(MirroredQueue(
    "queue-isolate-primary", "one nsqd cut from every host for 3T; producers fail over",
    ["partition:isolate"], _isolate_primary))
register(MirroredQueue(
    "queue-halves", "an nsqd and a lookupd cut from the majority (n2, n3, l2, clients)",
    ["partition:halves"], _halves))
register(MirroredQueue(
    "queue-inbound-only", "one nsqd hears nothing from its peers but still reaches them (one way)",
    ["partition:one-way"], _inbound))
register(MirroredQueue(
    "queue-route-cut", "the cluster route n1-n2 cut, clients reach every nsqd",
    ["partition:route"], _route_cut))
register(MirroredQueue(
    "queue-route-cut-host-loss",
    "two nsqds, min-standbys 1: route cut 2T, then the primary's host lost; producer pinned to it",
    ["partition:route", "host-loss"], _route_cut_then_host_loss, nodes=2, producer_mode="pinned",
    fault_seconds=8.0))
register(MirroredQueue(
    "queue-route-cut-host-loss-n0",
    "the same with min-standbys 0: documents what N = 0 loses (not a bound)",
    ["partition:route", "host-loss"], _route_cut_then_host_loss, nodes=2, min_standbys=0,
    producer_mode="pinned", fault_seconds=8.0, documents_loss=True))
register(MirroredQueue(
    "queue-route-flapping", "the route n1-n2 cut and healed at T/2, T and 2T",
    ["partition:flapping"], _flapping, fault_seconds=9.0))
register(MirroredQueue(
    "queue-sigkill", "SIGKILL the first nsqd under MPUB load, restart it on its data",
    ["process:sigkill"], _signal("kill"), batch=10))
register(MirroredQueue(
    "queue-sigterm", "SIGTERM the first nsqd, restart it on its data",
    ["process:sigterm"], _signal("term")))
register(MirroredQueue(
    "queue-zombie-primary", "SIGSTOP the first nsqd for 3T (a zombie primary), then SIGCONT",
    ["process:sigstop"], _signal("pause")))
def _primary_under_power_loss(context: Any, nodes: List[NsqdNode]) -> None:
    # n1's writes journaled from its first start, so its power can be cut.
    context.power_journal = under_power_loss(context.world, nodes[0])


def _power_loss_primary(context: Any, nodes: List[NsqdNode]) -> List[tuple]:
    return [(0.0, PowerLoss(context.world, context.history, nodes[0], context.power_journal))]


register(MirroredQueue(
    "queue-power-loss-primary",
    "the first nsqd (on disk, --mem-queue-size=0, default --sync-every) loses power under load; its standbys have what it acknowledged",
    ["power-loss"], _power_loss_primary, prepare=_primary_under_power_loss, extra=["--mem-queue-size=0"]))
register(MirroredQueue(
    "queue-host-loss", "the first nsqd's host lost (SIGKILL, data gone); it comes back empty",
    ["host-loss"], _host_loss))
