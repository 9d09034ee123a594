#!/usr/bin/env python
"""
The NATS route's CPU per message without sockets: a route connection
(``RouteProtocol`` on a ``StringTransport``, routed to a made-up server)
fed ``RMSG``\\s in chunks of 64 KiB, as the reactor hands them over, and
NSQ publishes going out to a route that wants their subject. Timed with
``time.process_time``, best of ``--rounds``:

- **route in**: parse and dispatch only (a handler that takes every batch);
- **NATS->NSQ**: route in plus the bridge: every message published to the
  NSQ topic and queued in its one channel (memory storage);
- **NSQ->NATS**: ``Topic.publish_many`` of ``--batch`` bodies to a topic a
  route wants (the bridge writes each batch as one buffer);
- **NSQ alone**: the same publishes to a topic no route wants.

    python bench/micro/nats_route_hot.py [--count 200000] [--size 100] [--rounds 5]

It imports txnsq (run it from a venv where txnsq is installed, or from the
repository's root). Figures are µs of CPU per message; compare runs on the
same machine only.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from typing import Any, Callable, Dict, List

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

from twisted.internet.defer import Deferred  # noqa: E402
from twisted.internet.task import Clock  # noqa: E402
from twisted.internet.testing import StringTransport  # noqa: E402

from txnsq.cluster.bridge import NatsBridge  # noqa: E402
from txnsq.cluster.node import RouteNode  # noqa: E402
from txnsq.nsqd.broker import Broker  # noqa: E402
from txnsq.nsqd.options import NSQDOptions  # noqa: E402
from txnsq.protocol.nats_route import encode_info  # noqa: E402
from txnsq.storage.plugins import get_storage_backend  # noqa: E402


def setup(count: int, bridge: bool) -> Any:
    """A broker, a node routed to server ``S`` over a StringTransport, and the route."""
    options = NSQDOptions(storage="memory", mem_queue_size=count * 4)
    clock = Clock()
    broker = Broker(options, clock, get_storage_backend("memory"))
    dials: List[Any] = []

    def connect(host: str, port: int, dialer: Any) -> "Deferred[Any]":
        dials.append(dialer)
        return Deferred()

    node = RouteNode(clock, "bench", connect, advertise=("127.0.0.1", 7000))
    if bridge:
        NatsBridge(broker, node).start()
    else:
        node.subscribe("$G", "nsq.>", lambda route, batch: len(batch.payloads))
    node.start(["nats-route://127.0.0.1:6222"])
    route = node.build_protocol(dials[0])
    transport = StringTransport()
    route.makeConnection(transport)
    route.dataReceived(encode_info({"server_id": "S", "host": "127.0.0.1", "port": 6222}))
    broker.get_topic("t").get_channel("c")
    return broker, route, transport


def route_in(count: int, size: int, bridge: bool) -> float:
    broker, route, transport = setup(count, bridge)
    frame = b"RMSG $G nsq.t %d\r\n" % (size,) + b"x" * size + b"\r\n"
    per_chunk = max(1, 65536 // len(frame))
    chunk = frame * per_chunk
    chunks = count // per_chunk
    started = time.process_time()
    for _ in range(chunks):
        route.dataReceived(chunk)
    seconds = time.process_time() - started
    if bridge:
        assert broker.topics["t"].message_count == chunks * per_chunk
    return seconds / (chunks * per_chunk)


def nsq_out(count: int, size: int, batch: int, wanted: bool) -> float:
    broker, route, transport = setup(count, True)
    if wanted:
        route.dataReceived(b"RS+ $G nsq.t\r\n")
    topic = broker.topics["t"]
    bodies = [b"x" * size] * batch
    batches = count // batch
    started = time.process_time()
    for index in range(batches):
        topic.publish_many(bodies)
        if index % 50 == 0:
            transport.clear()
    seconds = time.process_time() - started
    if wanted:
        assert route.messages_out == batches * batch
    return seconds / (batches * batch)


def main(argv: Any = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--count", type=int, default=200000)
    parser.add_argument("--size", type=int, default=100)
    parser.add_argument("--batch", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=5)
    options = parser.parse_args(argv)
    runs: Dict[str, Callable[[], float]] = {
        "route in": lambda: route_in(options.count, options.size, False),
        "NATS->NSQ": lambda: route_in(options.count, options.size, True),
        "NSQ->NATS": lambda: nsq_out(options.count, options.size, options.batch, True),
        "NSQ alone": lambda: nsq_out(options.count, options.size, options.batch, False),
    }
    best: Dict[str, float] = {}
    for _ in range(options.rounds):
        for name, run in runs.items():
            value = run()
            best[name] = min(best.get(name, value), value)
    print("%s, %d messages of %d B, best of %d rounds" % (
        sys.version.split()[0], options.count, options.size, options.rounds))
    for name, value in best.items():
        print("%-10s %6.2f µs/msg  (%.0f msgs/s of CPU)" % (name, value * 1e6, 1 / value))


if __name__ == "__main__":
    main()
