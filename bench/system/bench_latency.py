#!/usr/bin/env python
"""
Latency from publish to delivery through an nsqd, at a fixed rate.

Two worker processes, started together as ``bench_writer.py``'s are. The
publisher wakes every ``--tick`` (1 ms) and publishes the messages due by
then at ``--rate`` (20,000/s: 20 a tick), as one ``MPUB`` or, with
``--pub``, as that many ``PUB``\\s in one write, and reads the ``OK``\\s. A
tick that comes late publishes what is due, so the rate holds on average;
the late ticks are counted. Every body starts with the time it was
published, a big-endian ``CLOCK_MONOTONIC`` reading in nanoseconds, which is
one clock for every process on the machine. The consumer (``SUB``,
``RDY --rdy``, a ``FIN`` for every message, batched per read; its
``IDENTIFY`` may set ``--output-buffer-size`` and ``--output-buffer-timeout``)
reads the clock once per read and records, for each message in it, the
difference. Messages
published during ``--warmup`` are received but not recorded, and bodies
stamped before the run started (a backlog left in the channel) are counted
as stale and ignored.

The result, on stderr in the style of Go's tools::

    [bench_latency] YYYY/MM/DD HH:MM:SS rate: R/s asked, A/s published (N messages, L late ticks)
    [bench_latency] YYYY/MM/DD HH:MM:SS count: C - p50: Xms - p99: Xms - p999: Xms - max: Xms

Run by hand against a running nsqd; the channel should be empty::

    python bench/system/bench_latency.py --nsqd-tcp-address 127.0.0.1:4150 --runfor 10s

No Twisted: the standard library and txnsq's sans-IO codec (see ``harness``).
"""

from __future__ import annotations

import argparse
import math
import os
import selectors
import struct
import sys
import time
from array import array
from dataclasses import dataclass
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

from bench.system.loadgen import (  # noqa: E402  (needs the path above)
    WorkerError,
    log,
    parse_address,
    parse_go_duration,
    run_workers,
    shared_counters,
)
from bench.system.harness import (  # noqa: E402
    MessageStream,
    NSQDError,
    V2Connection,
)
from txnsq.protocol.v2_client import OK, mpub, pub, rdy, sub  # noqa: E402

PROGRAM = "bench_latency"

_STAMP = struct.Struct(">Q")

#: Slots of the shared counters: messages published, and 1 once the
#: publisher is done (the count is then final).
_PUBLISHED = 0
_DONE = 1


def clock_ns() -> int:
    """
    Nanoseconds on ``CLOCK_MONOTONIC`` (POSIX): one clock for every process
    on the machine, never stepped by NTP.
    """
    return time.clock_gettime_ns(time.CLOCK_MONOTONIC)


@dataclass(frozen=True)
class LatencyConfig:
    """
    One latency run.

    :ivar rate: messages per second to publish.
    :ivar tick: seconds between the publisher's wake-ups.
    :ivar pub: publish with single ``PUB``\\s instead of one ``MPUB`` a tick.
    :ivar warmup: seconds at the start whose messages are not recorded.
    :ivar stall: seconds the consumer waits, once the publisher is done,
        for messages still missing.
    :ivar output_buffer_size: the consumer's IDENTIFY ``output_buffer_size``
        in bytes (-1: no buffering); ``None`` leaves nsqd's default.
    :ivar output_buffer_timeout: the consumer's IDENTIFY
        ``output_buffer_timeout`` in ms; ``None`` leaves nsqd's default.
    """

    address: Tuple[str, int]
    topic: str
    channel: str
    rate: int
    size: int
    runfor: float
    warmup: float
    tick: float
    pub: bool
    rdy: int
    stall: float
    output_buffer_size: Optional[int] = None
    output_buffer_timeout: Optional[int] = None


@dataclass(frozen=True)
class LatencyResult:
    """
    What a latency run measured.

    :ivar latencies: nanoseconds from publish to delivery, one per recorded
        message, sorted.
    :ivar published: messages the publisher sent (each acknowledged).
    :ivar received: messages of this run the consumer received.
    :ivar stale: messages received that were published before the run.
    :ivar late_ticks: ticks the publisher woke up for after the next was due.
    """

    latencies: Sequence[int]
    published: int
    publish_seconds: float
    received: int
    stale: int
    late_ticks: int

    def percentile(self, fraction: float) -> float:
        """The nearest-rank ``fraction`` percentile in milliseconds (NaN if none)."""
        values = self.latencies
        if not values:
            return math.nan
        rank = max(1, math.ceil(fraction * len(values)))
        return values[rank - 1] / 1e6

    def summary(self) -> str:
        """``count: N - p50: ...ms - p99 - p999 - max``."""
        return "count: %d - p50: %.3fms - p99: %.3fms - p999: %.3fms - max: %.3fms" % (
            len(self.latencies),
            self.percentile(0.50),
            self.percentile(0.99),
            self.percentile(0.999),
            self.percentile(1.0),
        )


def _identified(config: LatencyConfig, role: str, **features: Any) -> V2Connection:
    """A connection that has sent ``IDENTIFY``, with ``features`` added."""
    return V2Connection(config.address, features=dict(features, client_id=role, hostname=role,
                                                       user_agent="bench_latency.py"))


def publisher(job: Tuple[LatencyConfig, Any], ready: Callable[[], None]) -> Tuple[int, float, int]:
    """
    Publish at ``rate`` for ``runfor``, each body stamped at its sending.

    :return: ``(published, seconds, late ticks)``.
    :raises ProtocolError: nsqd refused a publish.
    """
    config, shared = job
    topic = config.topic.encode("utf-8")
    tail = bytes(config.size - _STAMP.size)
    tick = int(config.tick * 1e9)
    # A late tick catches up, but in batches no larger than ten ticks' worth.
    most = max(1, math.ceil(config.rate * config.tick)) * 10
    with _identified(config, "latency-publisher") as connection:
        send = connection.send
        expect = connection.expect
        ready()
        start = clock_ns()
        end = start + int(config.runfor * 1e9)
        published = late = ticks = 0
        while True:
            now = clock_ns()
            if now >= end:
                break
            due = (now - start) * config.rate // 1_000_000_000
            count = min(due - published, most)
            if count > 0:
                body = _STAMP.pack(clock_ns()) + tail
                if config.pub:
                    send(pub(topic, body) * count)
                    for _ in range(count):
                        expect(OK)
                else:
                    send(mpub(topic, [body] * count))
                    expect(OK)
                published += count
                shared[_PUBLISHED] = published
            ticks += 1
            delay = start + ticks * tick - clock_ns()
            if delay > 0:
                time.sleep(delay / 1e9)
            else:
                late += 1
                ticks = (clock_ns() - start) // tick
        seconds = (clock_ns() - start) / 1e9
    shared[_DONE] = 1
    return published, seconds, late


def consumer(job: Tuple[LatencyConfig, Any], ready: Callable[[], None]) -> Tuple[bytes, int, int]:
    """
    Take every message, ``FIN`` it, and record its latency, until the
    publisher is done and everything it published arrived (or ``stall``
    seconds passed after it was done).

    :return: ``(latencies, received, stale)``: the latencies in nanoseconds
        as the bytes of an ``array("q")``.
    :raises ConnectionError: nsqd closed the connection.
    :raises ProtocolError: nsqd sent an error frame.
    """
    config, shared = job
    heads: List[int] = []
    latencies = array("q")
    received = stale = 0
    features: Dict[str, Any] = {}
    if config.output_buffer_size is not None:
        features["output_buffer_size"] = config.output_buffer_size
    if config.output_buffer_timeout is not None:
        features["output_buffer_timeout"] = config.output_buffer_timeout
    with _identified(config, "latency-consumer", **features) as connection:
        connection.send(sub(config.topic, config.channel))
        connection.expect(OK)
        stream = MessageStream(connection.release_socket(), config.size, heads)
        sock = stream.sock
        selector = selectors.DefaultSelector()
        selector.register(sock, selectors.EVENT_READ)
        before = clock_ns()  # anything stamped earlier is a leftover backlog
        ready()
        recorded_from = before + int(config.warmup * 1e9)
        sock.sendall(rdy(config.rdy))
        done_at: Optional[float] = None
        try:
            while True:
                if selector.select(0.05):
                    if not stream.receive():
                        raise ConnectionError("nsqd closed the connection")
                    arrival = clock_ns()
                    _, reply = stream.take()
                    if reply:
                        sock.sendall(reply)
                    for stamp in heads:
                        if stamp < before:
                            stale += 1
                            continue
                        received += 1
                        if stamp >= recorded_from:
                            latencies.append(arrival - stamp)
                    del heads[:]
                if shared[_DONE]:
                    if received >= shared[_PUBLISHED]:
                        break
                    if done_at is None:
                        done_at = time.monotonic()
                    elif time.monotonic() - done_at > config.stall:
                        break
        finally:
            selector.close()
    return latencies.tobytes(), received, stale


def run_latency(config: LatencyConfig) -> LatencyResult:
    """
    Run the publisher and the consumer together.

    :raises WorkerError: one of them could not connect, or nsqd refused a
        publish, sent an error or closed a connection.
    """
    shared = shared_counters(2)
    run = run_workers([(publisher, (config, shared)), (consumer, (config, shared))], PROGRAM)
    (published, seconds, late), (raw, received, stale) = run.results
    latencies = array("q")
    latencies.frombytes(raw)
    return LatencyResult(sorted(latencies), published, seconds, received, stale, late)


def parse_args(argv: Optional[Sequence[str]] = None) -> argparse.Namespace:
    """The command line; exits with a usage message on bad values."""
    parser = argparse.ArgumentParser(
        description="Publish at a fixed rate and measure the latency to delivery "
        "(p50, p99, p999, max). Prints on stderr.",
        allow_abbrev=False,
    )
    parser.add_argument("--nsqd-tcp-address", type=parse_address,
                        default=("127.0.0.1", 4150), metavar="ADDR:PORT",
                        help="<addr>:<port> to connect to nsqd (default: 127.0.0.1:4150)")
    parser.add_argument("--topic", default="latency_bench",
                        help="topic to publish to (default: latency_bench)")
    parser.add_argument("--channel", default="ch",
                        help="channel to receive messages on (default: ch)")
    parser.add_argument("--rate", type=int, default=20000,
                        help="messages per second (default: 20000)")
    parser.add_argument("--size", type=int, default=200,
                        help="size of messages in bytes, at least 8 (default: 200)")
    parser.add_argument("--runfor", type=parse_go_duration, default=10.0, metavar="DURATION",
                        help="how long to publish, a Go duration (default: 10s)")
    parser.add_argument("--warmup", type=parse_go_duration, default=1.0, metavar="DURATION",
                        help="messages published this early are not recorded (default: 1s)")
    parser.add_argument("--tick", type=parse_go_duration, default=0.001, metavar="DURATION",
                        help="how often the publisher sends what is due (default: 1ms)")
    parser.add_argument("--pub", action="store_true",
                        help="publish with single PUBs (default: one MPUB per tick)")
    parser.add_argument("--rdy", type=int, default=2500,
                        help="the consumer's RDY count (default: 2500)")
    parser.add_argument("--stall", type=parse_go_duration, default=10.0, metavar="DURATION",
                        help="how long to wait for missing messages once publishing "
                        "is done (default: 10s)")
    parser.add_argument("--output-buffer-size", type=int, default=None, metavar="BYTES",
                        help="the consumer's IDENTIFY output_buffer_size, -1 for no "
                        "output buffering (default: not sent, nsqd's default)")
    parser.add_argument("--output-buffer-timeout", type=int, default=None, metavar="MS",
                        help="the consumer's IDENTIFY output_buffer_timeout in ms "
                        "(default: not sent; Go nsqd then flushes a partly filled "
                        "buffer every 250 ms)")
    args = parser.parse_args(argv)
    if args.size < _STAMP.size:
        parser.error("--size must be at least %d (bodies carry a timestamp)" % (_STAMP.size,))
    if args.rate < 1 or args.rdy < 1 or args.tick <= 0:
        parser.error("--rate, --rdy and --tick must be positive")
    return args


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Run, log the rate and the percentiles; 1 if a message was lost or a worker failed."""
    args = parse_args(argv)
    config = LatencyConfig(
        address=args.nsqd_tcp_address,
        topic=args.topic,
        channel=args.channel,
        rate=args.rate,
        size=args.size,
        runfor=args.runfor,
        warmup=args.warmup,
        tick=args.tick,
        pub=args.pub,
        rdy=args.rdy,
        stall=args.stall,
        output_buffer_size=args.output_buffer_size,
        output_buffer_timeout=args.output_buffer_timeout,
    )
    try:
        result = run_latency(config)
    except (WorkerError, NSQDError, OSError) as error:
        log(PROGRAM, "failed: %s" % (error,))
        return 1
    achieved = result.published / result.publish_seconds if result.publish_seconds else 0.0
    log(PROGRAM, "rate: %d/s asked, %.3f/s published (%d messages, %d late ticks)"
        % (config.rate, achieved, result.published, result.late_ticks))
    log(PROGRAM, result.summary())
    status = 0
    if result.stale:
        log(PROGRAM, "ignored %d messages published before this run (the channel "
            "was not empty)" % (result.stale,))
    if result.received != result.published:
        log(PROGRAM, "received %d of the %d messages published"
            % (result.received, result.published))
        status = 1
    return status


if __name__ == "__main__":
    sys.exit(main())
