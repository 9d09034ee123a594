"""
One round's world: the emulated hosts and the real components on them
(txnsq nsqd, nsqlookupd, nsqadmin, nats-server, Spark), started as
processes inside their hosts, with the helpers the nemeses and
workloads use to reach them.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import sys
import time
from typing import Callable, Dict, List, Optional, Tuple

from lab.errors import LabError
from lab.ledger import Ledger
from lab.net import Host, Network
from lab.procs import LabProcess, Launcher

__all__ = ["NsqdNode", "World", "REPO"]

#: The repository's root (``lab/`` is a top-level package in it).
REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

NSQD_TCP, NSQD_HTTP, ROUTE_PORT, METAQ_PORT = 4150, 4151, 6222, 8123
LOOKUPD_TCP, LOOKUPD_HTTP, NSQADMIN_HTTP = 4160, 4161, 4171

_HTTP_SCRIPT = (
    "import sys,urllib.request,urllib.error\n"
    "r=urllib.request.Request(sys.argv[1],data=(sys.argv[3].encode() if len(sys.argv)>3 else None),method=sys.argv[2])\n"
    "try:\n"
    " x=urllib.request.urlopen(r,timeout=float(sys.argv[4]) if len(sys.argv)>4 else 3);print(x.status);sys.stdout.write(x.read().decode('utf-8','replace'))\n"
    "except urllib.error.HTTPError as e:\n"
    " print(e.code);sys.stdout.write(e.read().decode('utf-8','replace'))\n"
    "except Exception as e:\n"
    " print(0);sys.stdout.write(repr(e))\n"
)


class NsqdNode:
    """
    A txnsq nsqd on a host: its flags, its data path, its process (and
    the ones before it, after restarts).

    :ivar name: ``n1``, ``n2``, ... (its host's name).
    :ivar env: extra environment for its next start (clock, power loss).
    :ivar start_hooks: called with the node after each start, once its
        process exists (a fake clock records its leftovers there).
    """

    def __init__(self, world: "World", host: Host, flags: List[str], data_path: str) -> None:
        self.world = world
        self.host = host
        self.name = host.name
        self.flags = flags
        self.data_path = data_path
        self.env: Dict[str, str] = {}
        self.start_hooks: List[Callable[["NsqdNode"], None]] = []
        self.process: Optional[LabProcess] = None
        self.starts = 0

    @property
    def tcp(self) -> str:
        """Its V2 address."""
        return "%s:%d" % (self.host.address, NSQD_TCP)

    @property
    def http(self) -> str:
        """Its HTTP address."""
        return "%s:%d" % (self.host.address, NSQD_HTTP)

    def start(self, timeout: float = 30.0) -> None:
        """Start it and wait for its TCP and HTTP listeners."""
        os.makedirs(self.data_path, exist_ok=True)
        argv = [self.world.python, "-m", "txnsq.nsqd", *self.flags]
        self.process = self.world.launcher.start(self.host, "nsqd-" + self.name, argv, env=self.env)
        self.starts += 1
        for hook in self.start_hooks:
            hook(self)
        marker = "=== "
        # Wait for this start's lines: the log is appended to across restarts.
        start_at = self.process.log().rfind(marker)
        deadline = time.monotonic() + timeout
        while True:
            text = self.process.log()[start_at:]
            if "TCP: listening on" in text and "HTTP: listening on" in text:
                return
            if not self.process.alive():
                raise LabError("nsqd %s exited at start: %s" % (self.name, text[-800:].replace("\n", " | ")))
            if time.monotonic() > deadline:
                raise LabError("nsqd %s did not start in %.0f s" % (self.name, timeout))
            time.sleep(0.05)

    def alive(self) -> bool:
        """Whether its process runs (or is stopped)."""
        return self.process is not None and self.process.alive()

    def wipe(self) -> None:
        """Its data path is gone (the host was lost)."""
        shutil.rmtree(self.data_path, ignore_errors=True)


class World:
    """
    The hosts and components of one round.

    :param ledger: records everything made.
    :param round_dir: the round's folder (logs, data, history).
    :param python: the interpreter nsqd runs on.
    """

    def __init__(self, ledger: Ledger, round_dir: str, python: str) -> None:
        self.ledger = ledger
        self.round_dir = round_dir
        self.python = python
        self.network = Network(ledger)
        env = {
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "PYTHONPATH": REPO,
            "PYTHONUNBUFFERED": "1",
            "PYTHONDONTWRITEBYTECODE": "1",
            "HOME": os.environ.get("HOME", "/root"),
            "LANG": "C.UTF-8",
        }
        self.launcher = Launcher(ledger, os.path.join(round_dir, "logs"), env)
        self.nsqds: Dict[str, NsqdNode] = {}
        self.lookupds: List[Tuple[Host, LabProcess]] = []
        self.others: Dict[str, LabProcess] = {}

    def host(self, name: str) -> Host:
        """The host ``name``, made on first use."""
        host = self.network.hosts.get(name)
        return host if host is not None else self.network.add_host(name)

    # -- components --------------------------------------------------------------

    def start_lookupd(self, name: str, extra: Optional[List[str]] = None) -> Host:
        """
        An nsqlookupd on host ``name``; ``extra`` flags come last (so they
        override the lab's, e.g. ``--tombstone-lifetime=3s``).
        """
        host = self.host(name)
        argv = [
            sys.executable, "-m", "txnsq.nsqlookupd",
            "--tcp-address=%s:%d" % (host.address, LOOKUPD_TCP),
            "--http-address=%s:%d" % (host.address, LOOKUPD_HTTP),
            "--broadcast-address=%s" % host.address,
            # Above nsqd's 15 s lookupd PING: with less, every nsqd drops
            # out of /lookup for the rest of each 15 s (10 s hid them 5 s
            # in every 15), and consumers could not rediscover one then.
            "--inactive-producer-timeout=20s",
            *(extra or []),
        ]
        process = self.launcher.start(host, "nsqlookupd-" + name, argv)
        process.wait_for(r"HTTP: listening on", 30)
        self.lookupds.append((host, process))
        return host

    @property
    def lookupd_tcp(self) -> List[str]:
        """The nsqlookupds' TCP addresses."""
        return ["%s:%d" % (h.address, LOOKUPD_TCP) for h, _ in self.lookupds]

    @property
    def lookupd_http(self) -> List[str]:
        """The nsqlookupds' HTTP addresses."""
        return ["%s:%d" % (h.address, LOOKUPD_HTTP) for h, _ in self.lookupds]

    def start_nsqadmin(self, name: str) -> Host:
        """nsqadmin on host ``name``, over the nsqlookupds (its /api is the health view)."""
        host = self.host(name)
        argv = [sys.executable, "-m", "txnsq.nsqadmin", "--http-address=%s:%d" % (host.address, NSQADMIN_HTTP)]
        argv += ["--lookupd-http-address=%s" % a for a in self.lookupd_http]
        process = self.launcher.start(host, "nsqadmin-" + name, argv)
        process.wait_for(r"HTTP: listening on", 30)
        self.others["nsqadmin"] = process
        return host

    def add_nsqd(
        self,
        names: List[str],
        mirror_topics: str = "",
        mirror_ack: str = "sync",
        min_standbys: int = 0,
        failover_timeout: float = 2.0,
        extra: Optional[List[str]] = None,
        metaq: bool = False,
        route_via: Optional[Callable[[Host], str]] = None,
    ) -> List[NsqdNode]:
        """
        nsqd nodes on hosts ``names``, routed to each other when they
        mirror; registered with every nsqlookupd.  Not started yet.

        :param route_via: ``route_via(host) -> "address:port"``: where
            the peers dial ``host``'s route listener (a proxy in front of
            it), also advertised by ``host`` so that gossip dials there
            too; its own listener by default.
        """
        hosts = [self.host(n) for n in names]
        nodes = []
        for index, host in enumerate(hosts):
            data_path = os.path.join(self.round_dir, "data", host.name)
            flags = [
                "--tcp-address=%s:%d" % (host.address, NSQD_TCP),
                "--http-address=%s:%d" % (host.address, NSQD_HTTP),
                "--https-address=",
                "--broadcast-address=%s" % host.address,
                "--data-path=%s" % data_path,
                "--node-id=%d" % (100 + index),
            ]
            flags += ["--lookupd-tcp-address=%s" % a for a in self.lookupd_tcp]
            if metaq:
                flags.append("--metaq-address=%s:%d" % (host.address, METAQ_PORT))
            if mirror_topics:
                via = route_via or (lambda h: "%s:%d" % (h.address, ROUTE_PORT))
                peers = ["nats-route://%s" % via(h) for h in hosts if h is not host]
                flags += [
                    "--cluster-name=lab",
                    "--cluster-address=%s:%d" % (host.address, ROUTE_PORT),
                    "--routes=%s" % ",".join(peers),
                    "--cluster-ping-interval=2s",
                    "--mirror-topics=%s" % mirror_topics,
                    "--mirror-ack=%s" % mirror_ack,
                    "--mirror-failover-timeout=%gs" % failover_timeout,
                ]
                if route_via is not None:
                    flags.append("--cluster-advertise=%s" % route_via(host))
                if min_standbys:
                    flags.append("--mirror-min-standbys=%d" % min_standbys)
            flags += extra or []
            node = self.nsqds[host.name] = NsqdNode(self, host, flags, data_path)
            nodes.append(node)
        return nodes

    # -- reaching the hosts ----------------------------------------------------------

    def http(self, via: Host, method: str, url: str, body: str = "", timeout: float = 3.0) -> Tuple[int, str]:
        """``method url`` sent from host ``via``: (status, body); status 0 when unreachable."""
        argv = [sys.executable, "-c", _HTTP_SCRIPT, url, method, body, str(timeout)]
        out = via.run(argv, check=False)
        first, _, rest = out.stdout.partition("\n")
        try:
            return int(first), rest
        except ValueError:
            return 0, out.stderr[-300:]

    def stats(self, via: Host, node: NsqdNode) -> Optional[dict]:
        """``/stats?format=json`` of ``node`` as seen from ``via`` (None when unreachable)."""
        status, text = self.http(via, "GET", "http://%s/stats?format=json" % node.http)
        if status != 200:
            return None
        try:
            return json.loads(text)
        except ValueError:
            return None

    def start_worker(self, host: Host, name: str, module: str, args: List[str]) -> LabProcess:
        """A lab worker (``lab.workers.MODULE``) on ``host`` under CPython."""
        argv = [sys.executable, "-m", "lab.workers." + module, *args]
        return self.launcher.start(host, name, argv, cwd=REPO)

    def iptables(self, host: Host, *rule: str) -> None:
        """An iptables command inside ``host`` (LabError when it fails)."""
        host.run(["iptables", "-w", *rule])

    def teardown_processes(self) -> None:
        """SIGKILL every process of the round (SIGCONT first: stopped ones too)."""
        for process in self.launcher.processes:
            process.signal(signal.SIGCONT)
        self.launcher.stop_all()
