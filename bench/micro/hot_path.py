#!/usr/bin/env python
"""
nsqd's per-message cost without sockets: the V2 adapter and the broker core
driven in-process, on a ``task.Clock``, with transports that only count the
bytes written to them.

Three phases, each timed with ``time.process_time`` (CPU of this process
only, so other load on the machine matters less than for the socket
benchmarks):

- **publish**: one publisher connection is fed ``MPUB`` commands of
  ``--batch`` bodies of ``--size`` bytes, ``--chunk`` commands per
  ``dataReceived`` (the topic has one channel and no consumer yet, so the
  messages are queued);
- **drain**: a consumer sends ``SUB`` and ``RDY --rdy``; then, as a client
  that answers every message would, it is fed one ``FIN`` per message it
  was sent, all the FINs of one flush in one ``dataReceived``, until the
  channel is empty;
- **pass-through**: the consumer subscribes first, then each ``MPUB`` is
  delivered as it arrives and FINed in the next read.

Run by hand; not part of the test suite::

    python bench/micro/hot_path.py
    python bench/micro/hot_path.py --count 500000 --storage disk
    python bench/micro/hot_path.py --storage disk --mem-queue-size 1000   # spilling to segment files
    python bench/micro/hot_path.py --profile 25      # cProfile of the drain phase
    TXNSQ_NO_EXTENSIONS=1 python bench/micro/hot_path.py   # the pure-Python path on CPython
    valgrind --tool=callgrind python bench/micro/hot_path.py --phases 1   # instructions: N minus N-1 phases

It imports txnsq (run it from a venv where txnsq is installed, or from the
repository's root). Its figures are µs of CPU per message; compare runs
on the same machine only.
"""

from __future__ import annotations

import argparse
import cProfile
import gc
import os
import pstats
import sys
import tempfile
import time
from typing import Callable, Tuple

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

from bench.micro.measure import broker, connect, fins_for, mpub  # noqa: E402
from txnsq.speedups import hot_path  # noqa: E402


def timed(run: Callable[[], int], profile: int) -> Tuple[float, int]:
    """CPU seconds ``run`` took, and what it returned."""
    profiler = cProfile.Profile() if profile else None
    start = time.process_time()
    if profiler is not None:
        profiler.enable()
    result = run()
    if profiler is not None:
        profiler.disable()
    seconds = time.process_time() - start
    if profiler is not None:
        pstats.Stats(profiler, stream=sys.stderr).sort_stats("tottime").print_stats(profile)
    return seconds, result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--count", type=int, default=200000)
    parser.add_argument("--size", type=int, default=100)
    parser.add_argument("--batch", type=int, default=100, help="bodies per MPUB")
    parser.add_argument("--chunk", type=int, default=1, help="MPUBs per dataReceived")
    parser.add_argument("--rdy", type=int, default=2500)
    parser.add_argument("--storage", default="memory", choices=("memory", "disk"))
    parser.add_argument("--mem-queue-size", type=int, default=None, metavar="N",
                        help="messages a queue keeps in memory (default: all of them); with "
                             "--storage disk a smaller N spills the rest to segment files")
    parser.add_argument("--gc-threshold", type=int, default=None, metavar="N",
                        help="gc.set_threshold(N, ...) before the run (default: Python's 700)")
    parser.add_argument("--gc-freeze", action="store_true",
                        help="gc.freeze() once the broker is set up, as nsqd does")
    parser.add_argument("--profile", type=int, default=0, metavar="TOP",
                        help="cProfile the drain phase and print the TOP functions")
    parser.add_argument("--phases", type=int, default=3, choices=(0, 1, 2, 3),
                        help="run only the first N phases (for instruction counts per phase: "
                             "run under callgrind with N and N-1 and subtract)")
    args = parser.parse_args()

    mem_queue_size = args.count + 1000 if args.mem_queue_size is None else args.mem_queue_size
    data_path = tempfile.mkdtemp(prefix="txnsq-hot-path-")
    nsqd, factory, clock = broker(args.storage, mem_queue_size=mem_queue_size, data_path=data_path)
    body = b"x" * args.size
    command = mpub(b"bench", [body] * args.batch) * args.chunk
    rounds = args.count // (args.batch * args.chunk)
    count = rounds * args.batch * args.chunk

    publisher, _ = connect(factory, 1)
    nsqd.get_topic("bench").get_channel("drain")
    if args.gc_threshold is not None:
        gc.set_threshold(args.gc_threshold, *gc.get_threshold()[1:])
    if args.gc_freeze:
        gc.freeze()

    def publish() -> int:
        feed = publisher.dataReceived
        for _ in range(rounds):
            feed(command)
        clock.advance(0)
        return count

    consumer, out = connect(factory, 2)

    def drain() -> int:
        consumer.dataReceived(b"SUB bench drain\nRDY %d\n" % (args.rdy,))
        received = 0
        feed = consumer.dataReceived
        while True:
            clock.advance(0)
            fins, n = fins_for(out.take())
            if not n:
                break
            received += n
            feed(fins)
        return received

    if args.phases < 1:
        return
    pub_seconds, published = timed(publish, 0)
    if args.phases < 2:
        return
    drain_seconds, drained = timed(drain, args.profile)
    if args.phases < 3:
        return

    # Pass-through: the consumer is there first.
    through, through_out = connect(factory, 3)
    through.dataReceived(b"SUB through c\nRDY %d\n" % (args.rdy,))
    through_command = mpub(b"through", [body] * args.batch) * args.chunk

    def pass_through() -> int:
        received = 0
        feed = publisher.dataReceived
        answer = through.dataReceived
        for _ in range(rounds):
            feed(through_command)
            clock.advance(0)
            fins, n = fins_for(through_out.take())
            received += n
            answer(fins)
        return received

    through_seconds, passed = timed(pass_through, 0)
    print("%d × %d B, MPUB × %d (%d per read), RDY %d, --storage %s, --mem-queue-size %d, %s, hot path: %s" % (
        count, args.size, args.batch, args.chunk, args.rdy, args.storage, mem_queue_size,
        sys.version.split()[0], hot_path()))
    print("phase          messages   µs/msg   msg/s (one core)")
    for name, seconds, n in (("publish", pub_seconds, published),
                             ("drain", drain_seconds, drained),
                             ("pass-through", through_seconds, passed)):
        print("%-13s %9d %8.2f %11s" % (name, n, 1e6 * seconds / max(n, 1),
                                       "{:,.0f}".format(n / seconds if seconds else 0)))
    if drained != count or passed != count:
        print("check failed: drained %d, passed through %d, expected %d" % (drained, passed, count))
        sys.exit(1)


if __name__ == "__main__":
    main()
