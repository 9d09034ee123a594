"""
The publish cost of a mirrored topic (docs/mirroring.md): two nsqd
children routed to each other with ``--mirror-topics=^mirrored`` and
``--mirror-ack=sync`` (then, with a new pair, ``async``); the same
publisher sends ``--count`` messages of ``--size`` bytes to topic
``plain`` (not mirrored) and to ``mirrored`` on the first node, each with
a channel and no consumer, and the rates are compared.

Two publishers:

- ``PUB`` pipelined: ``--window`` PUBs written at once, then their OKs
  read, and again (a producer with that many publishes outstanding);
- ``MPUB`` of ``--batch`` messages, one at a time (each waits for the
  previous one's OK: in ``sync`` mode every MPUB waits a whole round
  trip to the standby, so this row measures latency);
- ``MPUB`` of ``--batch`` messages pipelined, ``--mpub-window`` written
  at once before their OKs are read (a producer with several publishes
  outstanding, as go-nsq's ``PublishAsync`` or concurrent ``Producer``
  calls make: one round trip to the standby covers them all).

Each figure is the median of ``--rounds`` runs, ``plain`` and
``mirrored`` alternating.  The nodes run with ``--nats-topics=^$``, so
that ``plain`` is not bridged to the peer either (with routes every
topic is bridged by default, and the peer's work on the bridged copies
would slow the baseline); ``--bridged`` keeps that default.

Besides the rates, the CPU time each nsqd spent per message (user +
system, from ``/proc``, read once the standby has acked everything): on
a machine shared with other work the rates move with the load, the CPU
per message much less.  The primary's CPU ratio (plain / mirrored) is
what the rate ratio would be with the primary CPU-bound on a core of its
own (the standby on another).

    python bench/system/mirror_cost.py [--count 300000] [--size 100] [--window 100]
        [--batch 100] [--mpub-window 4] [--rounds 3] [--nsqd 'COMMAND'] [--bridged]
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import statistics
import sys
import tempfile
import time
import urllib.request
from typing import Any, Dict, List, Tuple

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

from bench.system.harness import (  # noqa: E402
    NSQDChild,
    V2Connection,
    create_channel,
    free_ports,
    nsqd_command,
)
from txnsq.protocol.v2_client import mpub, pub  # noqa: E402


def stats(http_port: int) -> Dict[str, Any]:
    url = "http://127.0.0.1:%d/stats?format=json&include_clients=false" % (http_port,)
    with urllib.request.urlopen(url, timeout=10) as response:
        return json.loads(response.read())  # type: ignore[no-any-return]


def start_pair(
    mode: str, count: int, directory: str, command: List[str], bridged: bool = False
) -> Tuple[NSQDChild, NSQDChild, int]:
    """Two routed nsqd mirroring ``^mirrored``; the first one's HTTP port."""
    http_a, http_b, cluster_a, cluster_b = free_ports(4)
    children = []
    for name, http, mine, other in (("a", http_a, cluster_a, cluster_b), ("b", http_b, cluster_b, cluster_a)):
        data = os.path.join(directory, "%s-%s" % (mode, name))
        os.makedirs(data)
        child = NSQDChild(
            [
                "--tcp-address=127.0.0.1:0",
                "--http-address=127.0.0.1:%d" % (http,),
                "--storage=memory",
                "--mem-queue-size=%d" % (count * 8,),
                "--data-path=" + data,
                "--cluster-name=bench",
                "--cluster-address=127.0.0.1:%d" % (mine,),
                "--routes=nats-route://127.0.0.1:%d" % (other,),
                "--mirror-topics=^mirrored",
                "--mirror-ack=" + mode,
            ]
            + ([] if bridged else ["--nats-topics=^$"]),
            command,
            os.path.join(directory, "%s-%s.log" % (mode, name)),
        )
        child.start()
        children.append(child)
    deadline = time.monotonic() + 20
    while not stats(http_a)["cluster"]["mirror"]["peers"]:
        if time.monotonic() > deadline:
            raise RuntimeError("the nodes did not route to each other")
        time.sleep(0.05)
    return children[0], children[1], http_a


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds used so far by ``pid`` (Linux ``/proc``)."""
    with open("/proc/%d/stat" % (pid,)) as stream:
        fields = stream.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def wait_acked(http_port: int, within: float = 30.0) -> None:
    """Until the primary's standby has acked every payload (async lag drained)."""
    deadline = time.monotonic() + within
    while stats(http_port)["cluster"]["mirror"]["lag_bytes"]:
        if time.monotonic() > deadline:
            return
        time.sleep(0.05)


def publish_pub(address: Tuple[str, int], topic: bytes, count: int, size: int, window: int) -> float:
    """Messages per second of pipelined PUBs."""
    body = b"x" * size
    command = pub(topic, body)
    with V2Connection(address) as conn:
        start = time.monotonic()
        left = count
        while left:
            n = min(window, left)
            conn.send(command * n)
            for _ in range(n):
                conn.expect()
            left -= n
        return count / (time.monotonic() - start)


def publish_mpub(address: Tuple[str, int], topic: bytes, count: int, size: int, batch: int) -> float:
    """Messages per second of MPUBs of ``batch`` messages."""
    command = mpub(topic, [b"x" * size] * batch)
    with V2Connection(address) as conn:
        start = time.monotonic()
        for _ in range(count // batch):
            conn.send(command)
            conn.expect()
        return (count // batch) * batch / (time.monotonic() - start)


def publish_mpub_pipelined(
    address: Tuple[str, int], topic: bytes, count: int, size: int, batch: int, window: int
) -> float:
    """Messages per second of MPUBs of ``batch`` messages, ``window`` outstanding at a time."""
    command = mpub(topic, [b"x" * size] * batch)
    with V2Connection(address) as conn:
        start = time.monotonic()
        left = count // batch
        while left:
            n = min(window, left)
            conn.send(command * n)
            for _ in range(n):
                conn.expect()
            left -= n
        return (count // batch) * batch / (time.monotonic() - start)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--count", type=int, default=300000)
    parser.add_argument("--size", type=int, default=100)
    parser.add_argument("--window", type=int, default=100)
    parser.add_argument("--batch", type=int, default=100)
    parser.add_argument("--mpub-window", type=int, default=4)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--nsqd", default=None, help="command running nsqd")
    parser.add_argument(
        "--bridged", action="store_true", help="bridge the plain topic to the peer (the default with routes)"
    )
    options = parser.parse_args()
    command = nsqd_command(options.nsqd)
    print("mirror cost: %d messages of %d bytes, PUB window %d, MPUB batch %d, median of %d; plain %s"
          % (options.count, options.size, options.window, options.batch, options.rounds,
             "bridged to the peer" if options.bridged else "not bridged"))
    print(
        "| ack | publisher | plain msg/s | mirrored msg/s | ratio "
        "| primary CPU us/msg plain | mirrored | primary CPU ratio | standby CPU us/msg |"
    )
    print("| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    with tempfile.TemporaryDirectory() as directory:
        for mode in ("sync", "async"):
            a, b, http_a = start_pair(
                mode, options.count * options.rounds, directory, command, options.bridged
            )
            try:
                for topic in (b"plain", b"mirrored"):
                    create_channel(a.tcp_address, topic, b"c")
                pipelined = functools.partial(publish_mpub_pipelined, window=options.mpub_window)
                for label, run, arg in (
                    ("PUB x%d" % options.window, publish_pub, options.window),
                    ("MPUB x%d" % options.batch, publish_mpub, options.batch),
                    ("MPUB x%d, %d outstanding" % (options.batch, options.mpub_window), pipelined, options.batch),
                ):
                    rates: Dict[bytes, List[float]] = {b"plain": [], b"mirrored": []}
                    cpus: Dict[bytes, List[float]] = {b"plain": [], b"mirrored": []}
                    standby: List[float] = []
                    for index in range(options.rounds):
                        order = (b"plain", b"mirrored") if index % 2 == 0 else (b"mirrored", b"plain")
                        for topic in order:
                            wait_acked(http_a)
                            before = cpu_seconds(a.pid), cpu_seconds(b.pid)
                            rates[topic].append(
                                run(a.tcp_address, topic, options.count, options.size, arg)
                            )
                            wait_acked(http_a)
                            cpus[topic].append(
                                (cpu_seconds(a.pid) - before[0]) / options.count * 1e6
                            )
                            if topic == b"mirrored":
                                standby.append(
                                    (cpu_seconds(b.pid) - before[1]) / options.count * 1e6
                                )
                    plain = statistics.median(rates[b"plain"])
                    mirrored = statistics.median(rates[b"mirrored"])
                    plain_cpu = statistics.median(cpus[b"plain"])
                    mirrored_cpu = statistics.median(cpus[b"mirrored"])
                    print(
                        "| %s | %s | %.0f | %.0f | %.2fx | %.1f | %.1f | %.2fx | %.1f |"
                        % (
                            mode, label, plain, mirrored, mirrored / plain,
                            plain_cpu, mirrored_cpu, plain_cpu / mirrored_cpu,
                            statistics.median(standby),
                        )
                    )
                    sys.stdout.flush()
                lag = stats(http_a)["cluster"]["mirror"]
                held = stats(int(b.argv[[i for i, arg in enumerate(b.argv) if arg.startswith("--http-address")][0]].rsplit(":", 1)[1]))
                copies = held["cluster"]["mirror"]["copies"]
                kept = sum(
                    topic["held"] + sum(topic["channels"].values())
                    for copy in copies
                    for topic in copy["topics"].values()
                )
                print("  (%s: primary sent %d payloads, %d bytes; standby holds %d copies)"
                      % (mode, lag["batches_sent"], lag["bytes_sent"], kept))
            finally:
                a.stop()
                b.stop()


if __name__ == "__main__":
    main()
