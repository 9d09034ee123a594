"""
A host's link limited in bandwidth: a token bucket (``tc qdisc ... tbf``)
on both ends of its veth -- ``eth0`` inside the host for what it sends,
its port in the switch namespace for what it receives.  Both are the
lab's own namespaces; nothing of the root namespace is touched.

``tbf`` and ``htb`` work on these kernels; ``netem`` does not exist
(delay and loss are made by :mod:`lab.proxy` instead).
"""

from __future__ import annotations

import subprocess
from typing import Any, Dict, List

from lab.errors import LabError
from lab.history import History
from lab.nemesis import Nemesis
from lab.net import Host
from lab.world import World

__all__ = ["Bandwidth"]


def _tc(namespace: str, argv: List[str], check: bool = True) -> subprocess.CompletedProcess:
    out = subprocess.run(
        ["ip", "netns", "exec", namespace, "tc", *argv],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    if check and out.returncode != 0:
        raise LabError("tc %s in %s: %s" % (" ".join(argv), namespace, out.stderr.strip()))
    return out


class Bandwidth(Nemesis):
    """
    ``host``'s link limited to ``rate`` (a tc rate: ``256kbit``,
    ``1mbit``) each way, with a ``burst`` bucket and packets queued at
    most ``latency`` (beyond that tbf drops them and TCP retransmits).

    :raises LabError: at start, when tc cannot add the qdisc.
    """

    name = "bandwidth"

    def __init__(self, world: World, history: History, host: Host, rate: str,
                 burst: str = "32kbit", latency: str = "400ms") -> None:
        super().__init__(world, history)
        self.host = host
        self.rate = rate
        self.burst = burst
        self.latency = latency

    def describe(self) -> Dict[str, Any]:
        return {"host": self.host.name, "rate": self.rate, "burst": self.burst, "latency": self.latency}

    def _links(self) -> List[tuple]:
        return [(self.host.namespace, "eth0"), (self.world.network.switch, self.host.port)]

    def _start(self) -> None:
        for namespace, device in self._links():
            _tc(namespace, ["qdisc", "replace", "dev", device, "root", "tbf", "rate", self.rate,
                            "burst", self.burst, "latency", self.latency])

    def _stop(self) -> None:
        for namespace, device in self._links():
            _tc(namespace, ["qdisc", "del", "dev", device, "root"], check=False)
