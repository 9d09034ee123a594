"""
Emulated hosts: one network namespace each, its loopback up and one veth
into a switch namespace holding a bridge.  Addresses come from
198.18.0.0/24 (the benchmarking range); there is no uplink, no default
route and no NAT, and the root namespace's network is never touched:
every link is made with ``ip -n`` inside the lab's own namespaces.
"""

from __future__ import annotations

import subprocess
from typing import Dict, List

from lab.errors import LabError
from lab.ledger import NAMESPACE_PREFIX, Ledger

__all__ = ["Host", "Network", "SUBNET"]

#: The lab's addresses: 198.18.0.<10 + host index>/24.
SUBNET = "198.18.0"


def ip(*argv: str) -> str:
    """Run ``ip ARGV``; raise :class:`LabError` with its message when it fails."""
    out = subprocess.run(["ip", *argv], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    if out.returncode != 0:
        raise LabError("ip %s: %s" % (" ".join(argv), out.stderr.strip()))
    return out.stdout


class Host:
    """
    One emulated host.

    :ivar name: the lab's name for it (``n1``, ``c1``, ...).
    :ivar namespace: its network namespace.
    :ivar address: its IPv4 address on the lab's bridge.
    :ivar port: the switch-side veth's name (in the switch namespace).
    """

    def __init__(self, name: str, namespace: str, address: str, port: str) -> None:
        self.name = name
        self.namespace = namespace
        self.address = address
        self.port = port

    def exec_argv(self, argv: List[str]) -> List[str]:
        """``argv`` run inside this host's namespace."""
        return ["ip", "netns", "exec", self.namespace, *argv]

    def run(self, argv: List[str], check: bool = True) -> subprocess.CompletedProcess:
        """Run ``argv`` in this host to its end; :class:`LabError` when it fails and ``check``."""
        out = subprocess.run(
            self.exec_argv(argv), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )
        if check and out.returncode != 0:
            raise LabError("%s on %s: %s" % (" ".join(argv), self.name, out.stderr.strip()))
        return out

    def __repr__(self) -> str:
        return "<Host %s %s>" % (self.name, self.address)


class Network:
    """
    The switch (a bridge in a namespace of its own) and the hosts on it.

    :param ledger: records every namespace made.
    """

    def __init__(self, ledger: Ledger) -> None:
        self.ledger = ledger
        self.prefix = "%s%s-" % (NAMESPACE_PREFIX, ledger.run_id)
        self.switch = self.prefix + "sw"
        self.hosts: Dict[str, Host] = {}
        self._make_namespace(self.switch)
        ip("-n", self.switch, "link", "add", "br0", "type", "bridge")
        ip("-n", self.switch, "link", "set", "br0", "up")

    def _make_namespace(self, name: str) -> None:
        ip("netns", "add", name)
        self.ledger.namespace(name)
        ip("-n", name, "link", "set", "lo", "up")

    def add_host(self, name: str) -> Host:
        """A new host named ``name`` (a few letters and digits), plugged into the switch."""
        if name in self.hosts or len(name) > 8:
            raise LabError("bad or duplicate host name %r" % (name,))
        index = len(self.hosts)
        namespace = self.prefix + name
        self._make_namespace(namespace)
        port = "v" + name
        address = "%s.%d" % (SUBNET, 10 + index)
        ip("-n", self.switch, "link", "add", port, "type", "veth", "peer", "name", "eth0", "netns", namespace)
        ip("-n", self.switch, "link", "set", port, "master", "br0")
        ip("-n", self.switch, "link", "set", port, "up")
        ip("-n", namespace, "addr", "add", address + "/24", "dev", "eth0")
        ip("-n", namespace, "link", "set", "eth0", "up")
        host = self.hosts[name] = Host(name, namespace, address, port)
        return host

    def hosts_file(self) -> str:
        """/etc/hosts lines naming every host (for logs and humans)."""
        return "".join("%s %s\n" % (h.address, h.name) for h in self.hosts.values())
