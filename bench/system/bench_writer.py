#!/usr/bin/env python
"""
Load generator: publish to an nsqd as fast as it takes the messages, with
the flags and the summary line of Go NSQ's ``bench/bench_writer``.

``--processes`` worker processes (default: the number of CPUs, as Go's
``GOMAXPROCS`` goroutines) each open a connection, send ``IDENTIFY``, and
build one ``MPUB`` of ``--batch-size`` bodies of ``--size`` zero bytes. When
all are ready the clock starts; each sends its ``MPUB`` and waits for the
``OK``, again and again, until ``--runfor`` has passed, then reports how many
messages it published. The client's work per batch is a ``sendall`` of bytes
built before the clock started and the read of one small frame: nsqd, not
the client, sets the pace. The line printed on stderr at the end is Go's::

    [bench_writer] YYYY/MM/DD HH:MM:SS duration: D - X.XXXmb/s - Y.YYYops/s - Z.ZZZus/op

Run by hand against a running nsqd::

    python bench/system/bench_writer.py --nsqd-tcp-address 127.0.0.1:4150 --runfor 10s

No Twisted: the standard library and txnsq's sans-IO codec (see ``harness``).
"""

from __future__ import annotations

import argparse
import datetime
import os
import sys
import time
from dataclasses import dataclass
from typing import Callable, List, Optional, Sequence, Tuple

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

from bench.system.loadgen import (  # noqa: E402  (needs the path above)
    GoSummary,
    add_deadline_argument,
    add_processes_argument,
    add_runfor_and_address_arguments,
    parse_command_line,
    run_and_log,
    run_workers,
    split_evenly,
)
from bench.system.harness import V2Connection  # noqa: E402
from txnsq.protocol.v2_client import OK, mpub  # noqa: E402

PROGRAM = "bench_writer"


@dataclass(frozen=True)
class WriterConfig:
    """
    One writer run.

    :ivar runfor: seconds each worker keeps publishing.
    :ivar count: when not 0, stop after this many messages in all (rounded
        down to whole batches), even before ``runfor`` has passed.
    """

    address: Tuple[str, int]
    topic: str
    size: int
    batch_size: int
    runfor: float
    processes: int
    count: int = 0

    def batches_per_process(self) -> List[int]:
        """
        How many batches each worker may send (0: no limit), one entry per
        worker; fewer workers than ``processes`` when ``count`` leaves some
        with nothing to send.

        :raises ValueError: ``count`` is smaller than one batch.
        """
        if not self.count:
            return [0] * self.processes
        batches = self.count // self.batch_size
        if batches == 0:
            raise ValueError("--count %d is less than one batch of %d"
                             % (self.count, self.batch_size))
        return [share for share in split_evenly(batches, self.processes) if share]


@dataclass(frozen=True)
class WriteResult(GoSummary):
    """
    What a writer run published.

    :ivar duration: seconds from the start to the last worker's report.
    :ivar count: messages published (each acknowledged by an ``OK``).
    """

    duration: float
    count: int
    size: int


def pub_worker(job: Tuple[WriterConfig, int], ready: Callable[[], None]) -> int:
    """
    One worker: connect, ``IDENTIFY``, build the ``MPUB``, wait for the
    start, then publish and wait for each ``OK`` until ``runfor`` has passed
    or ``batches`` (when not 0) were sent.

    :return: the messages published.
    :raises ProtocolError: nsqd refused a batch (``E_MPUB_FAILED``, say).
    """
    config, batches = job
    topic = config.topic.encode("utf-8")
    command = mpub(topic, [bytes(config.size)] * config.batch_size)
    features = {"client_id": "writer", "hostname": "writer", "user_agent": "bench_writer.py"}
    with V2Connection(config.address, features=features) as connection:
        send = connection.send
        expect = connection.expect
        monotonic = time.monotonic
        ready()
        end = monotonic() + config.runfor
        sent = 0
        while True:
            send(command)
            expect(OK)
            sent += 1
            if sent == batches or monotonic() > end:
                break
    return sent * config.batch_size


def run_writer(config: WriterConfig, deadline: Optional[datetime.datetime] = None) -> WriteResult:
    """
    Run the workers and add up what they published.

    :raises WorkerError: a worker could not connect, or nsqd refused a
        batch or closed a connection (the message says which).
    :raises ValueError: ``count`` is smaller than one batch.
    """
    jobs = [(pub_worker, (config, batches)) for batches in config.batches_per_process()]
    run = run_workers(jobs, PROGRAM, deadline)
    return WriteResult(run.duration, sum(run.results), config.size)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Go's ``bench_writer`` flags, with their defaults, and ours."""
    add_runfor_and_address_arguments(parser)
    parser.add_argument("--topic", default="sub_bench",
                        help="topic to publish to (default: sub_bench)")
    parser.add_argument("--size", type=int, default=200,
                        help="size of messages in bytes (default: 200)")
    parser.add_argument("--batch-size", type=int, default=200,
                        help="messages per MPUB (default: 200)")
    add_deadline_argument(parser)
    add_processes_argument(parser, "worker processes, each with its own connection")
    parser.add_argument("--count", type=int, default=0,
                        help="stop after this many messages in all, rounded down to "
                        "whole batches (default: 0, no limit but --runfor)")


def parse_args(argv: Optional[Sequence[str]] = None) -> argparse.Namespace:
    """The command line; exits with a usage message on bad values."""
    parser, args = parse_command_line(
        "Publish MPUB batches to nsqd as fast as it takes them; Go NSQ's "
        "bench_writer in Python. Prints Go's summary line on stderr.",
        add_arguments,
        argv,
        ("size", "batch_size", "processes"),
    )
    if args.count and args.count < args.batch_size:
        parser.error("--count must be 0 or at least --batch-size")
    return args


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Run the writer and log Go's line; 1 if a worker failed."""
    args = parse_args(argv)
    config = WriterConfig(
        address=args.nsqd_tcp_address,
        topic=args.topic,
        size=args.size,
        batch_size=args.batch_size,
        runfor=args.runfor,
        processes=args.processes,
        count=args.count,
    )
    result = run_and_log(PROGRAM, lambda: run_writer(config, args.deadline))
    return 1 if result is None else 0


if __name__ == "__main__":
    sys.exit(main())
