"""
NATS bridge scenarios: two real nats-servers (x1, x2) in one cluster, a
txnsq nsqd (n1) joined to it as a route peer of both, and traffic both
ways under a fault between nsqd and x1:

- NSQ to NATS: numbered PUBs to nsqd's topic ``tonats`` (producer p1 on
  c1); NATS subscribers of ``nsq.tonats`` on x1 and on x2 (c2) count
  what they get; an NSQ consumer of ``tonats`` (channel ``sink``) is the
  control;
- NATS to NSQ: numbered NATS publishes to ``nsq.fromnats`` through x1
  and through x2 (each acknowledged by a PING after it), counted by an
  NSQ consumer of ``fromnats`` (channel ``bridge``) on c1.

The fault cuts only the paths through x1; :mod:`lab.checkers_nats`
holds them to what docs/nats.md promises (at most once while cut,
everything outside the cut, nothing unexpected ever).
"""

from __future__ import annotations

import os
import time
from typing import Any, Callable, List

from lab.checkers_nats import BridgeResult, Path, check_bridge
from lab.errors import LabError
from lab.history import read_history
from lab.nats_servers import (
    NatsServer,
    NatsServerKill,
    bridge_flags,
    check_nats_py,
    nats_server_binary,
    start_nats_cluster,
    wait_bridge,
)
from lab.nemesis import Partition
from lab.procs import LabProcess
from lab.scenarios import register
from lab.scenarios.base import Scenario
from lab.world import NsqdNode, World

__all__ = ["NatsBridge"]

TO_NATS, FROM_NATS = "tonats", "fromnats"
PREFIX = "nsq."

#: ``plan(context, servers, nsqd) -> [(offset from the fault's start, nemesis)]``;
#: every nemesis stops at the end of the fault window.
BridgePlan = Callable[[Any, List[NatsServer], NsqdNode], List[tuple]]


class NatsBridge(Scenario):
    """
    The bridge workload under one fault plan that cuts the paths through
    x1 for ``fault_seconds`` (twice that without ``--quick``).
    """

    workload = "nats-bridge"

    def __init__(self, name: str, summary: str, nemeses: List[str], plan: BridgePlan,
                 fault_seconds: float = 6.0) -> None:
        self.name = name
        self.summary = summary
        self.nemeses = nemeses
        self.plan = plan
        self.fault_seconds = fault_seconds

    def run_round(self, context: Any, result: Any) -> None:
        nats_server_binary()
        check_nats_py()
        world: World = context.world
        history = context.history
        folder = history.folder
        servers = start_nats_cluster(world, ["x1", "x2"])
        node = world.add_nsqd(
            ["n1"], extra=bridge_flags(world.host("n1"), servers, "^(%s|%s)$" % (TO_NATS, FROM_NATS))
        )[0]
        nsq_client, nats_client = world.host("c1"), world.host("c2")
        node.start()
        for path in ("/topic/create?topic=%s" % TO_NATS, "/channel/create?topic=%s&channel=sink" % TO_NATS,
                     "/topic/create?topic=%s" % FROM_NATS, "/channel/create?topic=%s&channel=bridge" % FROM_NATS):
            status, text = world.http(nsq_client, "POST", "http://%s%s" % (node.http, path))
            if status != 200:
                raise LabError("%s: %s %s" % (path, status, text[:200]))
        stop_file = os.path.join(folder, "stop-receivers")
        receivers: List[LabProcess] = []
        for server in servers:
            sub = world.start_worker(nats_client, "sub-" + server.name, "nats_subscriber", [
                "--server", server.client_url, "--name", server.name, "--subject", PREFIX + TO_NATS,
                "--out", history.worker_file("sub-" + server.name), "--process", "sub-" + server.name,
                "--stop-file", stop_file,
            ])
            receivers.append(sub)
        for sub in receivers:
            sub.wait_for(r"subscribed to", 30)
        wait_bridge(world, nsq_client, node, servers, [PREFIX + TO_NATS])
        for topic, channel in ((TO_NATS, "sink"), (FROM_NATS, "bridge")):
            receivers.append(world.start_worker(nsq_client, channel, "consumer", [
                "--nodes", node.tcp, "--topic", topic, "--channel", channel,
                "--out", history.worker_file(channel), "--process", channel, "--stop-file", stop_file,
            ]))
        warmup = 2.0 if context.quick else 4.0
        fault = self.fault_seconds if context.quick else 2 * self.fault_seconds
        after = 4.0 if context.quick else 8.0
        duration = warmup + fault + after
        nsq_rate, nats_rate = (200.0, 60.0) if context.quick else (300.0, 100.0)
        history.event("phase", "publishing", duration=duration)
        t0 = time.time()
        publishers = [world.start_worker(nsq_client, "p1", "producer", [
            "--nodes", node.tcp, "--topic", TO_NATS, "--rate", str(nsq_rate), "--duration", str(duration),
            "--mode", "pinned", "--timeout", "3", "--out", history.worker_file("p1"), "--process", "p1",
        ])]
        for server in servers:
            name = "np-" + server.name
            publishers.append(world.start_worker(nats_client, name, "nats_publisher", [
                "--server", server.client_url, "--name", server.name, "--subject", PREFIX + FROM_NATS,
                "--rate", str(nats_rate), "--duration", str(duration), "--timeout", "1",
                "--out", history.worker_file(name), "--process", name,
            ]))
        steps = self.plan(context, servers, node)
        context.sleep_until(t0, warmup)
        fault_at = time.time()
        started = []
        try:
            for offset, nemesis in sorted(steps, key=lambda s: s[0]):
                context.sleep_until(fault_at, offset)
                started.append(nemesis)
                nemesis.start()
            context.sleep_until(fault_at, fault)
        finally:
            for nemesis in started:
                nemesis.stop()
        healed_at = time.time()
        for process in publishers:
            if process.wait(duration + 30) is None:
                process.kill()
                raise LabError("%s did not end: %s" % (process.name, process.log()[-400:]))
            if process.popen.returncode != 0:
                raise LabError("%s failed: %s" % (process.name, process.log()[-600:].replace("\n", " | ")))
        check = self._drain(folder, limit=30.0)
        serving = world.stats(nsq_client, node) is not None and node.alive()
        with open(stop_file, "w"):
            pass
        for process in receivers:
            if process.wait(15) is None:
                process.kill()
        check = self._check(read_history(folder))
        result.figures = check.as_dict()
        result.figures["nsqd_serving_after"] = serving
        resumed = [p["resumed_s"] for p in check.paths.values() if p["affected"] and p["resumed_s"] is not None]
        result.recover_s = max(resumed) if resumed else None
        result.problems.extend(check.problems)
        if not serving:
            result.problems.append("nsqd n1 does not answer /stats after the fault")
        for receiver in receivers:
            if receiver.popen.returncode not in (0, None):
                result.problems.append("%s exited %s: %s" % (
                    receiver.name, receiver.popen.returncode, receiver.log()[-300:].replace("\n", " | ")))
        result.figures["healed_at"] = healed_at
        result.passed = not result.problems

    @staticmethod
    def _check(events: List[dict]) -> BridgeResult:
        paths = [
            Path("p1", "sub-x1", affected=True),
            Path("p1", "sub-x2", affected=False),
            Path("p1", "sink", affected=False),
            Path("np-x1", "bridge", affected=True),
            Path("np-x2", "bridge", affected=False),
        ]
        return check_bridge(events, paths, exactly_once=["sub-x1", "sub-x2", "sink", "bridge"], serving=["p1", "np-x2"])

    def _drain(self, folder: str, limit: float, quiet: float = 4.0) -> BridgeResult:
        """Wait until the check passes, or nothing new arrived for ``quiet`` s, or ``limit`` s."""
        start = last_change = time.monotonic()
        last = -1
        while True:
            time.sleep(0.5)
            check = self._check(read_history(folder))
            if not check.problems:
                break
            delivered = sum(r["delivered"] for r in check.receivers.values())
            if delivered != last:
                last, last_change = delivered, time.monotonic()
            if time.monotonic() - last_change > quiet or time.monotonic() - start > limit:
                break
        # What arrives after: duplicates, unexpected messages.
        time.sleep(1.0)
        return check


# -- the fault plans -------------------------------------------------------------------


def _route_partition(context: Any, servers: List[NatsServer], node: NsqdNode) -> List[tuple]:
    return [(0.0, Partition.route(context.world, context.history, node.host, servers[0].host))]


def _server_kill(context: Any, servers: List[NatsServer], node: NsqdNode) -> List[tuple]:
    return [(0.0, NatsServerKill(context.world, context.history, servers[0]))]


register(NatsBridge(
    "nats-route-partition",
    "the route nsqd-x1 cut (clients reach every server); NSQ<->NATS both ways",
    ["partition:route"], _route_partition))
register(NatsBridge(
    "nats-server-kill",
    "SIGKILL nats-server x1, restart it (new server id); NSQ<->NATS both ways",
    ["process:sigkill-nats"], _server_kill))
