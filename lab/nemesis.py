"""
Nemeses: small objects with ``start`` and ``stop``, each logged with its
time into the round's history.

- :class:`Partition` drops packets with iptables inside the hosts'
  namespaces: one node isolated, two halves, one way only (inbound), or
  only the cluster route port between two nsqds.
- :class:`ProcessFault` SIGKILLs, SIGTERMs or SIGSTOPs (a zombie) an
  nsqd; ``stop`` brings it back (SIGCONT, or a restart on the same data),
  :class:`HostLoss` kills it and removes its data path (it comes back
  empty).
"""

from __future__ import annotations

import signal
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

from lab.history import History
from lab.net import Host
from lab.world import NSQD_TCP, ROUTE_PORT, NsqdNode, World

__all__ = ["HostLoss", "Nemesis", "Partition", "ProcessFault"]


class Nemesis:
    """A fault that starts and stops; :meth:`describe` names it in the history."""

    name = "nemesis"

    def __init__(self, world: World, history: History) -> None:
        self.world = world
        self.history = history
        self.active = False

    def describe(self) -> Dict[str, Any]:
        """What the history records of it."""
        return {}

    def start(self) -> None:
        """Begin the fault."""
        self.active = True
        self.history.event("start", self.name, **self.describe())
        self._start()

    def stop(self) -> None:
        """End it (heal, continue, restart)."""
        if not self.active:
            return
        self.active = False
        self._stop()
        self.history.event("stop", self.name, **self.describe())

    def _start(self) -> None:
        raise NotImplementedError

    def _stop(self) -> None:
        raise NotImplementedError


class Partition(Nemesis):
    """
    Packets between host groups dropped with iptables (established
    connections stall: no RST, as with a cut cable).

    :param pairs: (host, peer) pairs: ``host`` drops what comes from
        ``peer`` (and, unless ``one_way``, sends nothing to it).
    :param port: only this TCP port's traffic (either end), when given.
    :param label: its name in the history.
    """

    name = "partition"

    def __init__(
        self,
        world: World,
        history: History,
        pairs: Sequence[Tuple[Host, Host]],
        label: str,
        one_way: bool = False,
        port: Optional[int] = None,
    ) -> None:
        super().__init__(world, history)
        self.pairs = list(pairs)
        self.label = label
        self.one_way = one_way
        self.port = port
        self._hosts: List[Host] = []

    def describe(self) -> Dict[str, Any]:
        return {"label": self.label, "pairs": [[a.name, b.name] for a, b in self.pairs]}

    def _rules(self, peer: Host) -> List[List[str]]:
        rules: List[List[str]] = []
        ports = [["--dport", str(self.port)], ["--sport", str(self.port)]] if self.port else [[]]
        for match in ports:
            proto = ["-p", "tcp"] if match else []
            rules.append(["-A", "INPUT", "-s", peer.address, *proto, *match, "-j", "DROP"])
            if not self.one_way:
                rules.append(["-A", "OUTPUT", "-d", peer.address, *proto, *match, "-j", "DROP"])
        return rules

    def _start(self) -> None:
        for host, peer in self.pairs:
            for rule in self._rules(peer):
                self.world.iptables(host, *rule)
            if host not in self._hosts:
                self._hosts.append(host)

    def _stop(self) -> None:
        for host in self._hosts:
            self.world.iptables(host, "-F", "INPUT")
            self.world.iptables(host, "-F", "OUTPUT")
        self._hosts = []

    # -- the shapes ------------------------------------------------------------------

    @classmethod
    def isolate(cls, world: World, history: History, host: Host) -> "Partition":
        """``host`` cut from every other host, both ways."""
        others = [h for h in world.network.hosts.values() if h is not host]
        pairs = [(host, o) for o in others] + [(o, host) for o in others]
        return cls(world, history, pairs, "isolate %s" % host.name)

    @classmethod
    def halves(cls, world: World, history: History, minority: Sequence[Host]) -> "Partition":
        """The hosts in ``minority`` cut from all the others, both ways."""
        majority = [h for h in world.network.hosts.values() if h not in minority]
        pairs = [(a, b) for a in minority for b in majority] + [(b, a) for a in minority for b in majority]
        return cls(world, history, pairs, "halves %s | %s" % (
            ",".join(h.name for h in minority), ",".join(h.name for h in majority)))

    @classmethod
    def inbound(cls, world: World, history: History, host: Host, peers: Sequence[Host]) -> "Partition":
        """``host`` drops what ``peers`` send it; what it sends still arrives."""
        return cls(world, history, [(host, p) for p in peers], "inbound to %s from %s" % (
            host.name, ",".join(p.name for p in peers)), one_way=True)

    @classmethod
    def route(cls, world: World, history: History, a: Host, b: Host) -> "Partition":
        """Only the cluster route between two nsqds cut (clients still reach both)."""
        return cls(world, history, [(a, b), (b, a)], "route %s-%s" % (a.name, b.name), port=ROUTE_PORT)


class ProcessFault(Nemesis):
    """
    A signal to an nsqd: ``kill`` (SIGKILL), ``term`` (SIGTERM) or
    ``pause`` (SIGSTOP); :meth:`stop` sends SIGCONT to a paused one and
    restarts one that is gone, on the same data path and ports.
    """

    name = "process"

    def __init__(self, world: World, history: History, node: NsqdNode, how: str) -> None:
        super().__init__(world, history)
        self.node = node
        self.how = how
        self.exit_code: Optional[int] = None

    def describe(self) -> Dict[str, Any]:
        return {"node": self.node.name, "how": self.how}

    def _start(self) -> None:
        process = self.node.process
        assert process is not None
        if self.how == "kill":
            self.exit_code = process.kill()
        elif self.how == "term":
            self.exit_code = process.terminate(30)
        elif self.how == "pause":
            process.signal(signal.SIGSTOP)
        self._after_start()

    def _after_start(self) -> None:
        pass

    def _stop(self) -> None:
        process = self.node.process
        if self.how == "pause" and process is not None and process.alive():
            process.signal(signal.SIGCONT)
            return
        self.node.start()


class HostLoss(ProcessFault):
    """
    The host is lost: nsqd SIGKILLed and its data path gone; it comes back
    empty.

    :param prepare: run on the new, empty nsqd before clients may reach
        its TCP port (an operator re-creating the topics and channels of a
        replaced host): a channel made after a publish never gets it, so
        without this a channel whose consumer comes later would miss what
        the new nsqd took first.  HTTP stays open meanwhile.
    """

    name = "host-loss"

    def __init__(
        self,
        world: World,
        history: History,
        node: NsqdNode,
        prepare: Optional[Callable[[NsqdNode], None]] = None,
    ) -> None:
        super().__init__(world, history, node, "kill")
        self.prepare = prepare

    def _after_start(self) -> None:
        self.node.wipe()

    def _stop(self) -> None:
        if self.prepare is None:
            self.node.start()
            return
        rule = ["INPUT", "-p", "tcp", "--dport", str(NSQD_TCP), "-j", "DROP"]
        self.world.iptables(self.node.host, "-I", *rule)
        try:
            self.node.start()
            self.prepare(self.node)
        finally:
            self.world.iptables(self.node.host, "-D", *rule)
