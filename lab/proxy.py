"""
Slow and unreliable links made by a TCP proxy (:mod:`lab.workers.tcpproxy`)
running on a host: these kernels have no ``netem`` qdisc (``tc qdisc add
... netem`` answers "Specified qdisc kind is unknown"), so delay, jitter
and cut connections are made in user space, per TCP connection.

For mirrored nsqds, :func:`start_route_proxies` puts one proxy on each
nsqd's host, listening on :data:`PROXY_PORT` and relaying to the host's
own route listener; the nsqds dial (and advertise) the proxy's port
(``World.add_nsqd(route_via=via_route_proxy)``), so every route
connection, whichever side dialed it, goes through the proxy of the
host it was dialed to.  :class:`SlowLink` changes what the proxies do
while the nsqds run.
"""

from __future__ import annotations

import json
import os
import signal
import time
import weakref
from typing import Any, Dict, List, Optional, Sequence

from lab.errors import LabError
from lab.history import History
from lab.nemesis import Nemesis
from lab.net import Host
from lab.procs import LabProcess
from lab.world import ROUTE_PORT, World

__all__ = ["PROXY_PORT", "SlowLink", "TcpProxy", "route_proxies", "start_route_proxies", "via_route_proxy"]

#: Where a host's route proxy listens.
PROXY_PORT = 7222

_ROUTE_PROXIES: "weakref.WeakKeyDictionary[World, Dict[str, TcpProxy]]" = weakref.WeakKeyDictionary()


class TcpProxy:
    """
    A proxy process on ``host`` relaying ``listen`` to ``target``
    (``ADDR:PORT`` each), passing through until :meth:`configure`.

    :param name: its process's name (its log is ``<host>/<name>.log``).
    :param seed: seeds its jitter and cuts.
    """

    def __init__(self, world: World, host: Host, name: str, listen: str, target: str, seed: int) -> None:
        self.world = world
        self.host = host
        self.name = name
        self.listen = listen
        self.target = target
        self.control = os.path.join(world.round_dir, "proxy", name + ".json")
        os.makedirs(os.path.dirname(self.control), exist_ok=True)
        self.settings: Dict[str, float] = {"delay_ms": 0.0, "jitter_ms": 0.0, "drop": 0.0, "cut_every_s": 0.0}
        self._write()
        self.process: LabProcess = world.start_worker(host, name, "tcpproxy", [
            "--listen", listen, "--to", target, "--control", self.control, "--seed", str(seed),
        ])
        self.process.wait_for(r"tcpproxy: listening on", 30)

    def _write(self) -> None:
        tmp = self.control + ".tmp"
        with open(tmp, "w") as f:
            json.dump(self.settings, f)
        os.replace(tmp, self.control)

    def configure(self, timeout: float = 10.0, **settings: float) -> None:
        """
        New settings (``delay_ms``, ``jitter_ms``, ``drop``,
        ``cut_every_s``; the others keep their value), applied before it
        returns.

        :raises LabError: the proxy is gone or did not apply them.
        """
        self.settings.update({k: float(v) for k, v in settings.items()})
        self._write()
        if not self.process.alive():
            raise LabError("proxy %s on %s is gone: %s" % (self.name, self.host.name, self.process.log()[-300:]))
        before = self.process.log().count("tcpproxy: settings")
        self.process.signal(signal.SIGUSR1)
        deadline = time.monotonic() + timeout
        while self.process.log().count("tcpproxy: settings") <= before:
            if time.monotonic() > deadline or not self.process.alive():
                raise LabError("proxy %s on %s did not apply %s" % (self.name, self.host.name, settings))
            time.sleep(0.02)

    def cuts(self) -> int:
        """Connections it has cut so far."""
        return self.process.log().count("tcpproxy: cut connection")


def via_route_proxy(host: Host) -> str:
    """Where peers dial ``host``'s route listener: its proxy (``World.add_nsqd``'s ``route_via``)."""
    return "%s:%d" % (host.address, PROXY_PORT)


def start_route_proxies(world: World, hosts: Sequence[Host], seed: int) -> Dict[str, TcpProxy]:
    """A route proxy on each of ``hosts`` (relaying to its own route listener), by host name."""
    proxies = _ROUTE_PROXIES.setdefault(world, {})
    for index, host in enumerate(hosts):
        proxies[host.name] = TcpProxy(
            world, host, "route-proxy-" + host.name, via_route_proxy(host),
            "%s:%d" % (host.address, ROUTE_PORT), seed + index,
        )
    return proxies


def route_proxies(world: World, names: Optional[Sequence[str]] = None) -> List[TcpProxy]:
    """
    The route proxies started in ``world`` (those of the hosts in
    ``names``, when given).

    :raises LabError: none were started.
    """
    proxies = _ROUTE_PROXIES.get(world)
    if not proxies:
        raise LabError("no route proxies in this world (start_route_proxies before the nsqds)")
    return [p for name, p in sorted(proxies.items()) if names is None or name in names]


class SlowLink(Nemesis):
    """
    Proxies made slow or unreliable at start, passing through again at
    stop.  See :mod:`lab.workers.tcpproxy` for what each setting does.

    :param proxies: the proxies (route proxies: every route connection
        dialed to their hosts).
    :param label: its name in the history.
    """

    name = "slow-link"

    def __init__(
        self,
        world: World,
        history: History,
        proxies: Sequence[TcpProxy],
        label: str,
        delay_ms: float = 0.0,
        jitter_ms: float = 0.0,
        drop: float = 0.0,
        cut_every_s: float = 0.0,
    ) -> None:
        super().__init__(world, history)
        self.proxies = list(proxies)
        self.label = label
        self.settings = {"delay_ms": delay_ms, "jitter_ms": jitter_ms, "drop": drop, "cut_every_s": cut_every_s}
        self.cut_before = 0

    def describe(self) -> Dict[str, Any]:
        entry: Dict[str, Any] = {"label": self.label, "proxies": [p.host.name for p in self.proxies]}
        entry.update({k: v for k, v in self.settings.items() if v})
        if not self.active:
            entry["cuts"] = sum(p.cuts() for p in self.proxies) - self.cut_before
        return entry

    def _start(self) -> None:
        self.cut_before = sum(p.cuts() for p in self.proxies)
        for proxy in self.proxies:
            proxy.configure(**self.settings)

    def _stop(self) -> None:
        for proxy in self.proxies:
            proxy.configure(delay_ms=0.0, jitter_ms=0.0, drop=0.0, cut_every_s=0.0)
