"""
A numbering producer: publishes ``<process>:<n>`` bodies with PUB (or
MPUB runs) at a fixed rate to one nsqd at a time, recording each
publish's invoke and its outcome: ``ok`` (nsqd answered OK), ``fail``
(never sent: no connection) or ``info`` (unknown: an E_* answer, a lost
connection or no answer within ``--timeout``).

``--defer-ms MIN:MAX`` makes every publish a DPUB (``--batch 1``) with a
delay drawn uniformly from MIN..MAX milliseconds (``--seed``), recorded
in the invoke event as ``d`` (seconds).

``--mode pinned`` publishes to the first node only (what a producer that
knows one nsqd does); ``failover`` moves to the next node when one fails
and comes back round-robin; ``roundrobin`` sends each publish to the next
node, skipping for a second one that failed (so every nsqd holds a share).

    python -m lab.workers.producer --nodes A:4150,B:4150 --topic t \\
        --rate 500 --duration 20 --out history.jsonl --process p1
"""

from __future__ import annotations

import argparse
import random
import sys
from typing import Dict, List, Optional, Tuple

from twisted.internet import reactor as _reactor
from twisted.internet.defer import Deferred
from twisted.internet.task import LoopingCall
from twisted.python.failure import Failure

from lab.workers.common import HistoryWriter
from txnsq.client import ConnectionConfig, Producer
from txnsq.client.connection import NSQConnectionError

reactor: object = _reactor

__all__ = ["main"]


class _Node:
    """One nsqd: its Producer (replaced after a timeout) and the publishes it has outstanding."""

    def __init__(self, address: str, config: ConnectionConfig) -> None:
        self.address = address
        self.config = config
        self.producer: Optional[Producer] = None
        self.generation = 0
        self.outstanding: Dict[int, List[int]] = {}
        self.bad_until = 0.0

    def get(self) -> Producer:
        if self.producer is None:
            self.producer = Producer(self.address, config=self.config, initial_backoff=0.2, max_backoff=1.0)
        return self.producer

    def reset(self) -> None:
        """Drop the producer (its outstanding publishes are of unknown outcome)."""
        self.generation += 1
        self.outstanding = {}
        producer, self.producer = self.producer, None
        if producer is not None:
            producer.close().addErrback(lambda _: None)


class NumberingProducer:
    """The producer's state machine; see the module docstring."""

    def __init__(self, args: argparse.Namespace, history: HistoryWriter) -> None:
        self.args = args
        self.history = history
        config = ConnectionConfig(heartbeat_interval=1.0, read_timeout=3.0, dial_timeout=1.0)
        self.nodes = [_Node(a, config) for a in args.nodes.split(",")]
        self.current = 0
        self.next_n = args.start
        self.op = 0
        self.outstanding = 0
        self.stopping = False
        self.done: Deferred = Deferred()
        self.loop = LoopingCall(self.tick)
        self.defer_ms = _defer_range(args.defer_ms)
        self.rng = random.Random(args.seed)

    def start(self) -> None:
        interval = self.args.batch / float(self.args.rate)
        self.loop.start(interval, now=True)
        reactor.callLater(self.args.duration, self.stop)  # type: ignore[attr-defined]

    def stop(self) -> None:
        self.stopping = True
        if self.loop.running:
            self.loop.stop()
        reactor.callLater(self.args.timeout + 0.5, self.finish)  # type: ignore[attr-defined]

    def finish(self) -> None:
        for node in self.nodes:
            for numbers in node.outstanding.values():
                self.history.write("info", "pub", numbers, node.address, why="stopped")
            node.reset()
        if not self.done.called:
            self.done.callback(None)

    def pick(self) -> _Node:
        now = reactor.seconds()  # type: ignore[attr-defined]
        if self.args.mode == "pinned":
            return self.nodes[0]
        for step in range(len(self.nodes)):
            index = (self.current + step) % len(self.nodes)
            node = self.nodes[index]
            if node.bad_until <= now:
                self.current = index
                if self.args.mode == "roundrobin":
                    self.current = (index + 1) % len(self.nodes)
                return node
        return self.nodes[self.current]

    def failed_node(self, node: _Node) -> None:
        node.bad_until = reactor.seconds() + 1.0  # type: ignore[attr-defined]
        if self.args.mode != "pinned" and self.nodes[self.current] is node:
            self.current = (self.current + 1) % len(self.nodes)

    def tick(self) -> None:
        if self.stopping or self.outstanding >= self.args.window:
            return
        numbers = list(range(self.next_n, self.next_n + self.args.batch))
        self.next_n += self.args.batch
        node = self.pick()
        self.op += 1
        op = self.op
        producer = node.get()
        generation = node.generation
        node.outstanding[op] = numbers
        self.outstanding += 1
        name = self.args.process
        bodies = [("%s:%d" % (name, n)).encode() for n in numbers]
        if self.defer_ms is not None:
            low, high = self.defer_ms
            delay = round(self.rng.uniform(low, high)) / 1000.0
            self.history.write("invoke", "pub", numbers, node.address, d=delay)
            d = producer.deferred_publish(self.args.topic, delay, bodies[0])
        elif len(bodies) == 1:
            self.history.write("invoke", "pub", numbers, node.address)
            d = producer.publish(self.args.topic, bodies[0])
        else:
            self.history.write("invoke", "pub", numbers, node.address)
            d = producer.multi_publish(self.args.topic, bodies)
        timer = reactor.callLater(self.args.timeout, self.timed_out, node, generation)  # type: ignore[attr-defined]

        def settled(result: object) -> None:
            self.outstanding -= 1
            if timer.active():
                timer.cancel()
            if node.generation != generation or op not in node.outstanding:
                return  # already recorded as unknown by a timeout
            del node.outstanding[op]
            if not isinstance(result, Failure):
                self.history.write("ok", "pub", numbers, node.address)
                return
            error = result.value
            # Only a publish that never left is a definite failure; an
            # E_* answer or a dropped connection may follow a stored one.
            kind = "fail" if isinstance(error, NSQConnectionError) and _never_sent(error) else "info"
            self.history.write(kind, "pub", numbers, node.address, why=str(error)[:200])
            self.failed_node(node)

        d.addBoth(settled)

    def timed_out(self, node: _Node, generation: int) -> None:
        if node.generation != generation:
            return
        for numbers in node.outstanding.values():
            self.history.write("info", "pub", numbers, node.address, why="timeout")
        node.reset()
        self.failed_node(node)


def _never_sent(error: Exception) -> bool:
    """A Producer's 'no nsqd could be reached': the publish never left."""
    return str(error).startswith("no nsqd available")


def _defer_range(text: str) -> Optional[Tuple[int, int]]:
    """``MIN:MAX`` milliseconds (or one number), or None when empty."""
    if not text:
        return None
    low, _, high = text.partition(":")
    return int(low), int(high or low)


def main(argv: Optional[List[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[1] if __doc__ else None)
    parser.add_argument("--nodes", required=True, help="comma-separated nsqd TCP addresses")
    parser.add_argument("--topic", required=True)
    parser.add_argument("--rate", type=float, default=500.0, help="messages a second")
    parser.add_argument("--batch", type=int, default=1, help="1: PUB; more: MPUB of this many")
    parser.add_argument("--duration", type=float, default=20.0)
    parser.add_argument("--window", type=int, default=32, help="publishes outstanding at most")
    parser.add_argument("--timeout", type=float, default=4.0, help="seconds before an answer is unknown")
    parser.add_argument("--mode", choices=("pinned", "failover", "roundrobin"), default="failover")
    parser.add_argument("--start", type=int, default=1)
    parser.add_argument("--defer-ms", default="", help="MIN:MAX: DPUB with a delay drawn from this range")
    parser.add_argument("--seed", type=int, default=1, help="seeds the delays")
    parser.add_argument("--out", required=True)
    parser.add_argument("--process", default="p1")
    args = parser.parse_args(argv)
    if args.defer_ms and args.batch != 1:
        parser.error("--defer-ms publishes one message at a time (--batch 1)")
    history = HistoryWriter(args.out, args.process)
    producer = NumberingProducer(args, history)

    def end(_: object) -> None:
        history.close()
        reactor.stop()  # type: ignore[attr-defined]

    producer.done.addBoth(end)
    reactor.callWhenRunning(producer.start)  # type: ignore[attr-defined]
    reactor.run()  # type: ignore[attr-defined]
    return 0


if __name__ == "__main__":
    sys.exit(main())
