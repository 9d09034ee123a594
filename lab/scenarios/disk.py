"""
Queue-on-disk scenarios: one plain (not mirrored) durable nsqd
(``--mem-queue-size=0``: every message through its files), numbered
PUBs from ``c1`` pinned to it, consumers on two channels found through
an nsqlookupd (``billing`` throughout, ``audit`` from a later point, so
that its backlog sits on disk through the fault), under a power loss or
a full disk.
"""

from __future__ import annotations

import time
from typing import Any, List

from lab.disk_nemeses import DiskFull, PowerLoss, on_small_tmpfs, under_power_loss
from lab.nemesis import ProcessFault
from lab.queue_workload import QueueWorkload
from lab.scenarios import register
from lab.scenarios.base import Scenario
from lab.world import NsqdNode, World

__all__ = ["QueueDiskFull", "QueuePowerLoss"]

TOPIC = "orders"
CHANNELS = ["billing", "audit"]


def _start(context: Any, flags: List[str], prepare: Any) -> NsqdNode:
    """nsqlookupd ``l1``, client ``c1`` and nsqd ``n1`` with ``flags``, started after ``prepare(node)``."""
    world: World = context.world
    world.start_lookupd("l1")
    world.host("c1")
    node = world.add_nsqd(["n1"], extra=flags)[0]
    prepare(node)
    node.start()
    return node


def _pub_events(workload: QueueWorkload, kind: str, since: float, until: float = float("inf")) -> List[dict]:
    return [e for e in workload.events()
            if e.get("f") == "pub" and e.get("type") == kind and since <= e.get("t", 0) < until]


def _check(workload: QueueWorkload, result: Any) -> None:
    check = workload.check()
    result.figures.update(check.as_dict())
    if check.acknowledged == 0:
        result.problems.append("nothing was acknowledged")
    if check.unexpected:
        result.problems.append("unexpected deliveries: %s" % check.unexpected_sample[:5])
    if check.lost:
        result.problems.append("lost %d acknowledged: %s" % (check.lost, check.lost_sample[:5]))


class QueuePowerLoss(Scenario):
    """
    ``--mem-queue-size=0 --sync-every=1`` under the power-loss shim;
    the nsqd loses power under PUB load (SIGKILL, every write since the
    last ``fsync`` undone) and restarts on what is left.  Every
    acknowledged PUB must be delivered on both channels (docs/storage.md,
    "What OK means").
    """

    name = "queue-power-loss"
    summary = "a durable nsqd (--mem-queue-size=0 --sync-every=1) loses power under PUB load"
    nemeses = ["power-loss"]
    workload = "queue"

    def run_round(self, context: Any, result: Any) -> None:
        world: World = context.world
        history = context.history
        journal: List[str] = []
        node = _start(context, ["--mem-queue-size=0", "--sync-every=1"],
                      lambda node: journal.append(under_power_loss(world, node)))
        workload = QueueWorkload(world, history.folder, world.host("c1"), [node], TOPIC, CHANNELS)
        workload.create()
        workload.start_consumers(CHANNELS[:1])
        warmup, down, after = (3.0, 1.0, 3.0) if context.quick else (5.0, 2.0, 6.0)
        rate = 200.0 if context.quick else 400.0
        t0 = time.time()
        workload.start_producer("p1", warmup + down + after + 3.0, rate, mode="pinned")
        context.sleep_until(t0, warmup)
        nemesis = PowerLoss(world, history, node, journal[0])
        fault_at = time.time()
        nemesis.start()
        try:
            time.sleep(down)
        finally:
            nemesis.stop()
        restarted = time.time()
        result.failover_s = round(restarted - fault_at, 2)
        workload.wait_producers(60)
        workload.start_consumers(CHANNELS[1:])
        last = workload.drain(quiet=8, limit=40)
        workload.stop_consumers()
        _check(workload, result)
        result.recover_s = round(max(0.0, last - restarted), 2) if last else None
        result.figures["power_loss"] = nemesis.describe()
        result.figures["acked_after_restart"] = len(_pub_events(workload, "ok", restarted))
        if result.figures["acked_after_restart"] == 0:
            result.problems.append("no PUB was acknowledged after the restart")
        result.passed = not result.problems


class QueueDiskFull(Scenario):
    """
    ``--mem-queue-size=0 --sync-every=1`` with the data path on a small
    tmpfs, filled for a few seconds under PUB load; the ``audit``
    consumer starts while it is full (its backlog is on disk).  Records
    what a PUB gets while the disk is full; asserts nothing acknowledged
    is lost, nsqd keeps running and delivering, and PUBs succeed again
    once it is freed.

    :param kill: SIGKILL nsqd while the disk is still full (``audit``
        then starts after the restart): what was acknowledged must
        have been on disk.
    """

    workload = "queue"

    def __init__(self, name: str, summary: str, nemeses: List[str], kill: bool = False) -> None:
        self.name = name
        self.summary = summary
        self.nemeses = nemeses
        self.kill = kill

    def run_round(self, context: Any, result: Any) -> None:
        world: World = context.world
        history = context.history
        node = _start(context, ["--mem-queue-size=0", "--sync-every=1"],
                      lambda node: on_small_tmpfs(world, node.data_path, 16 * 1024 * 1024))
        workload = QueueWorkload(world, history.folder, world.host("c1"), [node], TOPIC, CHANNELS)
        workload.create()
        workload.start_consumers(CHANNELS[:1])
        warmup, full, after = (3.0, 3.0, 3.0) if context.quick else (5.0, 6.0, 6.0)
        rate = 200.0 if context.quick else 400.0
        t0 = time.time()
        workload.start_producer("p1", warmup + full + after, rate, mode="pinned")
        context.sleep_until(t0, warmup)
        # Consumed segments are deleted: the space they free is taken back.
        nemesis = DiskFull(world, history, node.data_path, hold=True)
        killed = ProcessFault(world, history, node, "kill")
        filled = time.time()
        nemesis.start()
        try:
            if not self.kill:
                # The backlog of audit is on the full disk: it must be served.
                workload.start_consumers(CHANNELS[1:])
            context.sleep_until(filled, full / 2)
            stats = world.stats(world.host("c1"), node)
            if self.kill:
                killed.start()
            context.sleep_until(filled, full)
        finally:
            nemesis.stop()
            killed.stop()
        freed = time.time()
        if self.kill:
            workload.start_consumers(CHANNELS[1:])
        workload.wait_producers(60)
        last = workload.drain(quiet=8, limit=40)
        workload.stop_consumers()
        _check(workload, result)
        result.recover_s = round(max(0.0, last - freed), 2) if last else None
        refused = _pub_events(workload, "info", filled, freed) + _pub_events(workload, "fail", filled, freed)
        delivered = [e for e in workload.events()
                     if e.get("type") == "recv" and e.get("ch") == "audit" and filled <= e["t"] < freed]
        result.figures.update(
            acked_while_full=len(_pub_events(workload, "ok", filled + 0.5, freed)),
            refused_while_full=len(refused),
            errors_while_full=sorted({str(e.get("why", ""))[:120] for e in refused})[:4],
            delivered_while_full=len(delivered),
            stats_while_full=stats is not None,
            acked_after_freed=len(_pub_events(workload, "ok", freed)),
        )
        if not refused:
            result.problems.append("no PUB was refused while the disk was full (the fault did not bite)")
        if stats is None:
            result.problems.append("/stats did not answer while the disk was full")
        if not delivered and not self.kill:
            result.problems.append("nothing was delivered while the disk was full")
        if result.figures["acked_after_freed"] == 0:
            result.problems.append("no PUB was acknowledged after the disk was freed")
        if not node.alive() or node.starts != (2 if self.kill else 1):
            result.problems.append("nsqd did not keep running through the full disk")
        result.passed = not result.problems


register(QueuePowerLoss())
register(QueueDiskFull(
    "queue-disk-full", "a durable nsqd's data path (a 16 MiB tmpfs) full for 3 s under PUB load",
    ["disk-full"]))
register(QueueDiskFull(
    "queue-disk-full-sigkill", "the same, nsqd SIGKILLed while the disk is full, restarted once it is freed",
    ["disk-full", "process:sigkill"], kill=True))
