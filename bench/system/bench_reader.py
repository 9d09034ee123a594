#!/usr/bin/env python
"""
Load generator: consume from an nsqd channel as fast as nsqd delivers, with
the flags and the summary line of Go NSQ's ``bench/bench_reader``.

``--connections`` connections (default: one per worker process; Go opens
one per ``GOMAXPROCS``) each send ``IDENTIFY`` and ``SUB``. They are spread
over ``--processes`` worker processes, which wait for their sockets with
:mod:`selectors`. When all are ready the clock starts; every connection sends
``RDY --rdy`` and then answers each read with one write of a ``FIN`` for
every message in it. Frames are parsed in place (``harness.MessageStream``:
one buffer, ``struct.unpack_from``, only the 16-byte IDs copied), so the
client stays far cheaper than nsqd. A message whose body is not ``--size``
bytes is counted and reported.

As Go's, a run lasts ``--runfor``; ``--count N`` instead stops when the
workers have received N messages between them (a shared counter), or when
none has arrived for ``--stall``, which is how ``nsqd_perf.py`` drains a
channel. The line printed on stderr at the end is Go's::

    [bench_reader] YYYY/MM/DD HH:MM:SS duration: D - X.XXXmb/s - Y.YYYops/s - Z.ZZZus/op

Run by hand against a running nsqd::

    python bench/system/bench_reader.py --nsqd-tcp-address 127.0.0.1:4150 --runfor 10s

No Twisted: the standard library and txnsq's sans-IO codec (see ``harness``).
"""

from __future__ import annotations

import argparse
import datetime
import os
import selectors
import sys
import time
from dataclasses import dataclass
from typing import Any, Callable, List, Optional, Sequence, Tuple

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

from bench.system.loadgen import (  # noqa: E402  (needs the path above)
    GoSummary,
    add_deadline_argument,
    add_processes_argument,
    add_runfor_and_address_arguments,
    log,
    parse_command_line,
    parse_go_duration,
    run_and_log,
    run_workers,
    shared_counters,
    split_evenly,
)
from bench.system.harness import MessageStream, V2Connection  # noqa: E402
from txnsq.protocol import v2_client  # noqa: E402

PROGRAM = "bench_reader"

#: How long a worker waits in ``select`` before it looks at the shared
#: count (with ``--count``) and at the clock again.
POLL_SECONDS = 0.02


@dataclass(frozen=True)
class ReaderConfig:
    """
    One reader run.

    :ivar runfor: seconds to run, when ``count`` is 0.
    :ivar count: when not 0, stop once the workers have received this many
        messages between them, or when none arrived for ``stall`` seconds.
    """

    address: Tuple[str, int]
    topic: str
    channel: str
    size: int
    rdy: int
    runfor: float
    connections: int
    processes: int
    count: int = 0
    stall: float = 30.0

    def connections_per_process(self) -> List[int]:
        """How many connections each worker opens: all at least one."""
        return split_evenly(self.connections, min(self.processes, self.connections))


@dataclass(frozen=True)
class ReadResult(GoSummary):
    """
    What a reader run received.

    :ivar duration: with ``count``, seconds from the start to the last
        message received; else to the last worker's report, as Go times it.
    :ivar count: messages received (and ``FIN``\\ed).
    :ivar bad_size: messages whose body was not ``size`` bytes.
    :ivar wanted: the config's ``count`` (0: none).
    """

    duration: float
    count: int
    bad_size: int
    size: int
    wanted: int

    @property
    def drained(self) -> bool:
        """With ``count``: every message wanted arrived, and no more."""
        return self.count == self.wanted


def _subscribe(config: ReaderConfig) -> MessageStream:
    """One connection, identified and subscribed, as a :class:`MessageStream`."""
    features = {"client_id": "reader", "hostname": "reader", "user_agent": "bench_reader.py"}
    connection = V2Connection(config.address, features=features)
    try:
        connection.send(v2_client.sub(config.topic, config.channel))
        connection.expect(v2_client.OK)
        return MessageStream(connection.release_socket(), config.size)
    except BaseException:
        connection.close()
        raise


def sub_worker(job: Tuple[ReaderConfig, int, int, Any], ready: Callable[[], None]) -> Tuple[int, int, float]:
    """
    One worker: subscribe ``connections`` connections, wait for the start,
    send ``RDY``, then take messages and ``FIN`` them until ``runfor`` has
    passed or, with ``count``, the shared total reaches it or stalls.

    :param job: ``(config, slot, connections, totals)``: ``totals`` is the
        shared counter array (:func:`loadgen.shared_counters`), of which
        this worker writes entry ``slot``.
    :return: ``(messages, bad_size, last)``: ``last`` is the
        :func:`time.monotonic` of the last read that brought a message.
    :raises ConnectionError: nsqd closed a connection.
    :raises ProtocolError: nsqd sent an error frame.
    """
    config, slot, connections, totals = job
    streams = [_subscribe(config) for _ in range(connections)]
    selector = selectors.DefaultSelector()
    for stream in streams:
        selector.register(stream.sock, selectors.EVENT_READ, stream)
    select = selector.select
    monotonic = time.monotonic
    target = config.count
    received = 0
    try:
        ready()
        started = last = progress_at = monotonic()
        end = float("inf") if target else started + config.runfor
        rdy = v2_client.rdy(config.rdy)
        for stream in streams:
            stream.sock.sendall(rdy)
        seen = 0
        while True:
            now = monotonic()
            if now >= end:
                break
            got = 0
            for key, _ in select(min(POLL_SECONDS, end - now)):
                stream = key.data
                if not stream.receive():
                    raise ConnectionError("nsqd closed a connection")
                messages, reply = stream.take()
                if reply:
                    stream.sock.sendall(reply)
                got += messages
            if got:
                received += got
                last = monotonic()
            if target:
                totals[slot] = received
                total = sum(totals)
                if total >= target:
                    break
                if total != seen:
                    seen = total
                    progress_at = now
                elif now - progress_at > config.stall:
                    break
    finally:
        selector.close()
        for stream in streams:
            stream.sock.close()
    return received, sum(stream.bad_size for stream in streams), last


def run_reader(config: ReaderConfig, deadline: Optional[datetime.datetime] = None) -> ReadResult:
    """
    Run the workers and add up what they received.

    :raises WorkerError: a worker could not subscribe, or nsqd sent an
        error or closed a connection (the message says which).
    """
    shares = config.connections_per_process()
    totals = shared_counters(len(shares))
    jobs = [(sub_worker, (config, slot, share, totals)) for slot, share in enumerate(shares)]
    run = run_workers(jobs, PROGRAM, deadline)
    count = sum(result[0] for result in run.results)
    bad_size = sum(result[1] for result in run.results)
    if config.count:
        duration = max(result[2] for result in run.results) - run.started
    else:
        duration = run.duration
    return ReadResult(duration, count, bad_size, config.size, config.count)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Go's ``bench_reader`` flags, with their defaults, and ours."""
    add_runfor_and_address_arguments(parser)
    parser.add_argument("--size", type=int, default=200,
                        help="size of messages in bytes: for MB/s, and bodies of "
                        "another size are counted (default: 200)")
    parser.add_argument("--topic", default="sub_bench",
                        help="topic to receive messages on (default: sub_bench)")
    parser.add_argument("--channel", default="ch",
                        help="channel to receive messages on (default: ch)")
    add_deadline_argument(parser)
    parser.add_argument("--rdy", type=int, default=2500,
                        help="RDY count to use, per connection (default: 2500)")
    add_processes_argument(parser)
    parser.add_argument("--connections", type=int, default=0,
                        help="connections in all, spread over the workers "
                        "(default: one per worker)")
    parser.add_argument("--count", type=int, default=0,
                        help="stop when this many messages have arrived in all, "
                        "instead of after --runfor (default: 0)")
    parser.add_argument("--stall", type=parse_go_duration, default=30.0, metavar="DURATION",
                        help="with --count, stop when no message arrived for this "
                        "long (default: 30s)")


def parse_args(argv: Optional[Sequence[str]] = None) -> argparse.Namespace:
    """The command line; exits with a usage message on bad values."""
    parser, args = parse_command_line(
        "Consume a channel as fast as nsqd delivers; Go NSQ's "
        "bench_reader in Python. Prints Go's summary line on stderr.",
        add_arguments,
        argv,
        ("size", "rdy", "processes"),
    )
    if args.connections < 0 or args.count < 0:
        parser.error("--connections and --count must not be negative")
    if not args.connections:
        args.connections = args.processes
    return args


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Run the reader and log Go's line; 1 if a worker failed or a check did."""
    args = parse_args(argv)
    config = ReaderConfig(
        address=args.nsqd_tcp_address,
        topic=args.topic,
        channel=args.channel,
        size=args.size,
        rdy=args.rdy,
        runfor=args.runfor,
        connections=args.connections,
        processes=args.processes,
        count=args.count,
        stall=args.stall,
    )
    result = run_and_log(PROGRAM, lambda: run_reader(config, args.deadline))
    if result is None:
        return 1
    status = 0
    if result.bad_size:
        log(PROGRAM, "%d messages had a body of another size than --size %d"
            % (result.bad_size, config.size))
        status = 1
    if config.count and not result.drained:
        log(PROGRAM, "received %d messages, --count was %d" % (result.count, config.count))
        status = 1
    return status


if __name__ == "__main__":
    sys.exit(main())
