"""
Ten SIGKILL rounds of a mirrored topic (docs/mirroring.md): one
nsqlookupd, two nsqd routed to each other (``--mirror-ack=sync`` unless
``--ack async``), a txnsq Consumer finding both through the lookupd
(``--max-in-flight``), and a txnsq Producer publishing ``--count``
messages at ``--rate`` per second to the node it treats as primary.

Each round: halfway through, the primary is SIGKILLed and the rest is
published to the other node; once that node has failed over
(``--failover`` seconds) and every acknowledged message has been
received, the killed node is restarted on its ports (it becomes the
standby) and the next round publishes to the other node.  A row per
round: messages acknowledged, refused (unanswered when the primary died),
lost (acknowledged, never received), duplicates, messages taken over, and
the seconds from the SIGKILL to the takeover seen in ``/stats``.

    python bench/system/mirror_failover.py [--rounds 10] [--count 20000]
        [--rate 4000] [--max-in-flight 50] [--failover 1] [--ack sync]
        [--work-ms 0]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import sys
import tempfile
from collections import Counter
from typing import Any, Dict, Generator, List, Optional, Set

from twisted.internet import task
from twisted.internet.defer import Deferred, inlineCallbacks
from twisted.internet.protocol import ProcessProtocol
from twisted.internet.task import LoopingCall, deferLater

import treq
from txnsq.client import Consumer, Message, Producer

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

from bench.system.harness import free_ports  # noqa: E402

TOPIC = "orders"
CHANNEL = "billing"
TICKS_PER_SECOND = 100


class Child(ProcessProtocol):
    """A daemon child; :attr:`listening` fires at its TCP listening line."""

    def __init__(self, log_path: str) -> None:
        self.log = open(log_path, "ab")
        self.listening: Deferred[None] = Deferred()
        self.ended: Deferred[None] = Deferred()
        self.seen = b""

    def outReceived(self, data: bytes) -> None:
        self.errReceived(data)

    def errReceived(self, data: bytes) -> None:
        self.log.write(data)
        if not self.listening.called:
            self.seen += data
            if b"TCP: listening on" in self.seen:
                self.listening.callback(None)

    def processEnded(self, reason: Any) -> None:
        self.log.close()
        if not self.listening.called:
            self.listening.errback(RuntimeError("exited before listening: " + self.seen.decode("replace")))
        self.ended.callback(None)


def spawn(reactor: Any, program: str, args: List[str], log_path: str) -> Child:
    child = Child(log_path)
    binary = os.path.join(os.path.dirname(sys.executable), program)
    child.transport = reactor.spawnProcess(child, binary, [binary] + args, env=os.environ)
    return child


class Node:
    def __init__(self, name: str, directory: str, options: Any) -> None:
        self.name = name
        self.tcp_port, self.http_port, self.cluster_port = free_ports(3)
        self.data_path = os.path.join(directory, name)
        os.makedirs(self.data_path)
        self.log_path = os.path.join(directory, name + ".log")
        self.options = options
        self.other: Optional[Node] = None
        self.child: Optional[Child] = None

    @property
    def tcp_address(self) -> str:
        return "127.0.0.1:%d" % (self.tcp_port,)

    def start(self, reactor: Any, lookupd_tcp: int) -> "Deferred[None]":
        assert self.other is not None
        self.child = spawn(
            reactor,
            "nsqd",
            [
                "--tcp-address=" + self.tcp_address,
                "--http-address=127.0.0.1:%d" % (self.http_port,),
                "--broadcast-address=127.0.0.1",
                "--storage=memory",
                "--data-path=" + self.data_path,
                "--lookupd-tcp-address=127.0.0.1:%d" % (lookupd_tcp,),
                "--cluster-name=failover-bench",
                "--cluster-address=127.0.0.1:%d" % (self.cluster_port,),
                "--routes=nats-route://127.0.0.1:%d" % (self.other.cluster_port,),
                "--mirror-topics=^%s$" % (TOPIC,),
                "--mirror-ack=" + self.options.ack,
                "--mirror-failover-timeout=%gs" % (self.options.failover,),
            ],
            self.log_path,
        )
        return self.child.listening

    def kill(self) -> "Deferred[None]":
        assert self.child is not None
        self.child.transport.signalProcess(signal.SIGKILL)
        return self.child.ended

    @inlineCallbacks
    def mirror(self) -> Generator[Any, Any, Dict[str, Any]]:
        url = "http://127.0.0.1:%d/stats?format=json&include_clients=false" % (self.http_port,)
        response = yield treq.get(url)
        body = yield response.content()
        return json.loads(body)["cluster"]["mirror"]  # type: ignore[no-any-return]


@inlineCallbacks
def wait_for(reactor: Any, what: str, probe: Any, within: float) -> Generator[Any, Any, Any]:
    deadline = reactor.seconds() + within
    while True:
        try:
            seen = yield probe()
        except Exception:
            seen = None
        if seen:
            return seen
        if reactor.seconds() > deadline:
            raise RuntimeError("%s: not within %.0f s" % (what, within))
        yield deferLater(reactor, 0.02, lambda: None)


@inlineCallbacks
def run(reactor: Any, options: Any) -> Generator[Any, Any, None]:
    directory = tempfile.mkdtemp(prefix="mirror-failover-")
    lookupd_tcp, lookupd_http = free_ports(2)
    lookupd = spawn(
        reactor,
        "nsqlookupd",
        ["--tcp-address=127.0.0.1:%d" % lookupd_tcp, "--http-address=127.0.0.1:%d" % lookupd_http,
         "--broadcast-address=127.0.0.1"],
        os.path.join(directory, "lookupd.log"),
    )
    yield lookupd.listening
    a, b = Node("a", directory, options), Node("b", directory, options)
    a.other, b.other = b, a
    yield a.start(reactor, lookupd_tcp)
    yield b.start(reactor, lookupd_tcp)

    @inlineCallbacks
    def routed() -> Generator[Any, Any, bool]:
        first = yield a.mirror()
        second = yield b.mirror()
        return bool(first["peers"]) and bool(second["peers"])

    yield wait_for(reactor, "route a-b", routed, 30)
    producer = Producer(a.tcp_address, reactor=reactor)
    yield producer.publish(TOPIC, b"warm-up")
    yield producer.close()
    received: List[bytes] = []

    def handler(message: Message) -> Any:
        received.append(message.body)
        if options.work_ms:
            return deferLater(reactor, options.work_ms / 1000.0, lambda: True)
        return True

    consumer = Consumer(
        TOPIC, CHANNEL, handler,
        lookupd_http_addresses=["127.0.0.1:%d" % lookupd_http],
        lookupd_poll_interval=0.5, max_in_flight=options.max_in_flight, reactor=reactor,
    )
    consumer.start()
    yield wait_for(reactor, "consumer on both", lambda: deferLater(reactor, 0, lambda: consumer.connections == 2), 30)
    print("mirror failover: %d rounds, %d messages at %d/s, max-in-flight %d, --mirror-ack=%s, "
          "--mirror-failover-timeout=%gs, consumer work %g ms"
          % (options.rounds, options.count, options.rate, options.max_in_flight, options.ack,
             options.failover, options.work_ms))
    print("| round | killed | acknowledged | refused | lost | duplicates | taken over | kill to takeover (s) |")
    print("| ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: |")
    primary, standby = a, b
    totals = Counter()  # type: Counter[str]
    for round_number in range(1, options.rounds + 1):
        del received[:]
        acked: Set[bytes] = set()
        refused = [0]
        before = yield standby.mirror()
        taken_before = len(before["taken_over"])
        producers = [Producer(primary.tcp_address, reactor=reactor)]
        pending: List[Deferred[Any]] = []
        state = {"next": 0, "paused": False, "killed_at": 0.0}
        per_tick = max(1, options.rate // TICKS_PER_SECOND)

        def switched(_: Any) -> None:
            producers.append(Producer(standby.tcp_address, reactor=reactor))
            state["paused"] = False

        def kill() -> None:
            state["killed_at"] = reactor.seconds()
            primary.kill().addCallback(switched)

        def tick() -> None:
            if state["paused"]:
                return
            for _ in range(per_tick):
                index = int(state["next"])
                if index >= options.count:
                    loop.stop()
                    return
                if index == options.count // 2 and not state["killed_at"]:
                    state["paused"] = True
                    reactor.callLater(0, kill)
                body = b"r%d-%d" % (round_number, index)
                state["next"] = index + 1
                sent = producers[-1].publish(TOPIC, body)
                sent.addCallbacks(lambda _, body=body: acked.add(body), lambda _: refused.__setitem__(0, refused[0] + 1))
                pending.append(sent)

        loop = LoopingCall(tick)
        loop.clock = reactor
        yield loop.start(1.0 / TICKS_PER_SECOND)
        for sent in pending:
            yield sent

        @inlineCallbacks
        def took_over() -> Generator[Any, Any, Any]:
            view = yield standby.mirror()
            done = view["taken_over"][taken_before:]
            return done[0] if done else None

        done = yield wait_for(reactor, "takeover", took_over, options.failover + 30)
        yield wait_for(reactor, "all received", lambda: deferLater(reactor, 0, lambda: not (acked - set(received))), 60)
        yield deferLater(reactor, 0.5, lambda: None)  # late duplicates, if any
        counts = Counter(received)
        lost = len(acked - set(counts))
        duplicates = sum(n - 1 for n in counts.values() if n > 1)
        delay = done["at"] - state["killed_at"]
        print("| %d | %s | %d | %d | %d | %d | %d | %.2f |"
              % (round_number, primary.name, len(acked), refused[0], lost, duplicates, done["messages"], delay))
        sys.stdout.flush()
        totals.update(acked=len(acked), refused=refused[0], lost=lost, duplicates=duplicates, taken=done["messages"])
        for each in producers:
            yield each.close()
        # The killed node returns as the standby.
        yield primary.start(reactor, lookupd_tcp)
        yield wait_for(reactor, "route back", routed, 30)
        yield wait_for(reactor, "consumer on both", lambda: deferLater(reactor, 0, lambda: consumer.connections == 2), 30)
        primary, standby = standby, primary
    print("| all | | %d | %d | %d | %d | %d | |"
          % (totals["acked"], totals["refused"], totals["lost"], totals["duplicates"], totals["taken"]))
    yield consumer.close()
    for node in (a, b):
        if node.child is not None and not node.child.ended.called:
            node.child.transport.signalProcess(signal.SIGTERM)
            yield node.child.ended
    lookupd.transport.signalProcess(signal.SIGTERM)
    yield lookupd.ended
    shutil.rmtree(directory, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--count", type=int, default=20000)
    parser.add_argument("--rate", type=int, default=4000)
    parser.add_argument("--max-in-flight", type=int, default=50)
    parser.add_argument("--failover", type=float, default=1.0)
    parser.add_argument("--ack", choices=["sync", "async"], default="sync")
    parser.add_argument("--work-ms", type=float, default=0.0)
    options = parser.parse_args()
    task.react(lambda reactor: run(reactor, options))


if __name__ == "__main__":
    main()
