#!/usr/bin/env python
"""
What retention costs a publish: the ingest time of a retained topic over
the same topic without retention, in-process (the V2 adapter and the
broker core on a ``task.Clock``, as ``hot_path.py``), no sockets.

Two topics with one channel and no consumer (messages are queued in
memory): one plain, one retained (``--partitions`` partitions, the log in
a temporary ``--data-path``, nsqd's default fsync policy
``--sync-every=2500`` unless given).  One publisher connection feeds them
alternately, ``--chunk`` messages at a time, as ``PUB`` commands
(``--pub-chunk`` per ``dataReceived``) and as ``MPUB`` of ``--batch``;
each retained chunk's time is divided by the plain chunk's just before
it, so that both halves of a pair see the same machine (a shared virtual
machine drifts between speeds by tens of percent over seconds).  A run is
``--pairs`` pairs per command; the figures are medians over the pairs,
and the run is made ``--repeat`` times (the medians of those are printed).

Two clocks: **wall** time (the ingest time a publisher sees: the log's
``fsync`` runs on the sync thread, beside the reactor) and **CPU** time
of the whole process (every thread, the sync thread's share of the
kernel's ``fsync`` work included).

Run by hand; not part of the test suite::

    python bench/micro/retained_ingest.py
    python bench/micro/retained_ingest.py --pairs 80 --repeat 5
    python bench/micro/retained_ingest.py --sync-every 0     # no fsync
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time
from typing import Dict, List, Tuple

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

from bench.micro.measure import broker, connect, mpub, pub  # noqa: E402
from txnsq.nsqd.retention import RetentionSettings  # noqa: E402
from txnsq.storage import log_format  # noqa: E402

#: Per command: wall µs/msg plain, retained; CPU µs/msg plain, retained;
#: wall ratio, CPU ratio (medians over the pairs of one run).
Figures = Tuple[float, float, float, float, float, float]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--chunk", type=int, default=5000, help="messages per timed chunk")
    parser.add_argument("--pairs", type=int, default=40, help="plain/retained chunk pairs per run")
    parser.add_argument("--size", type=int, default=100)
    parser.add_argument("--batch", type=int, default=100, help="bodies per MPUB")
    parser.add_argument("--pub-chunk", type=int, default=100, help="PUBs per dataReceived")
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--storage", default="memory", choices=("memory", "disk"))
    parser.add_argument("--sync-every", type=int, default=2500,
                        help="nsqd's --sync-every (the log's fsync policy; 0: never)")
    args = parser.parse_args()

    runs: Dict[str, List[Figures]] = {"PUB": [], "MPUB": []}
    for serial in range(args.repeat):
        for kind in ("PUB", "MPUB"):
            runs[kind].append(run(args, kind, serial))

    encoder = "compiled" if log_format.compiled is not None else "pure Python"
    print("%d pairs of %d x %d B, %d partitions, MPUB x %d, %d PUBs per read, --storage %s, "
          "--sync-every %d, %s (%s record encoder), median of %d runs" % (
              args.pairs, args.chunk, args.size, args.partitions, args.batch, args.pub_chunk,
              args.storage, args.sync_every, sys.version.split()[0], encoder, args.repeat))
    print("command   wall µs/msg plain  retained  ratio   CPU µs/msg plain  retained  ratio")
    for kind in ("PUB", "MPUB"):
        columns = [statistics.median(column) for column in zip(*runs[kind])]
        print("%-8s %17.2f %9.2f %6.2f %16.2f %9.2f %6.2f" % (
            kind, columns[0], columns[1], columns[4], columns[2], columns[3], columns[5]))


def run(args: argparse.Namespace, kind: str, serial: int) -> Figures:
    """One run of ``--pairs`` pairs of ``kind``; its medians."""
    data_path = tempfile.mkdtemp(prefix="txnsq-retained-ingest-")
    nsqd, factory, clock = broker(args.storage, mem_queue_size=args.chunk * (args.pairs + 1) + 1000,
                                  data_path=data_path, sync_every=args.sync_every)
    publisher, _ = connect(factory, 1)
    body = b"x" * args.size
    per_read = args.pub_chunk if kind == "PUB" else args.batch

    def commands(topic: bytes) -> List[bytes]:
        if kind == "PUB":
            one = pub(topic, body)
            return [one * args.pub_chunk] * (args.chunk // args.pub_chunk)
        return [mpub(topic, [body] * args.batch)] * (args.chunk // args.batch)

    plain = nsqd.get_topic("plain-%d" % (serial,))
    retained = nsqd.get_topic("retained-%d" % (serial,))
    for topic in (plain, retained):
        topic.get_channel("c")
    retained.set_retention(RetentionSettings(1 << 40, 0.0, args.partitions))
    feeds = {topic: commands(topic.name.encode()) for topic in (plain, retained)}
    feed = publisher.dataReceived

    def timed(topic: object) -> Tuple[float, float]:
        wall = time.perf_counter()
        cpu = time.process_time()
        for command in feeds[topic]:
            feed(command)
            clock.advance(0)
        return time.perf_counter() - wall, time.process_time() - cpu

    # One pair first, untimed: files opened, code paths warm.
    timed(plain)
    timed(retained)
    walls: List[Tuple[float, float]] = []
    cpus: List[Tuple[float, float]] = []
    for _ in range(args.pairs):
        plain_wall, plain_cpu = timed(plain)
        retained_wall, retained_cpu = timed(retained)
        walls.append((plain_wall, retained_wall))
        cpus.append((plain_cpu, retained_cpu))

    published = (args.chunk - args.chunk % per_read) * (args.pairs + 1)
    for topic in (plain, retained):
        if topic.message_count != published:
            raise SystemExit("check failed: %s published %d" % (topic.name, topic.message_count))
    assert retained.retention is not None
    logged = retained.retention.log.retained_bytes
    if logged != published * (20 + args.size):
        raise SystemExit("check failed: the log holds %d bytes" % (logged,))
    nsqd.close()
    shutil.rmtree(data_path, ignore_errors=True)

    count = args.chunk - args.chunk % per_read
    median = statistics.median
    return (
        1e6 * median([p for p, _ in walls]) / count,
        1e6 * median([r for _, r in walls]) / count,
        1e6 * median([p for p, _ in cpus]) / count,
        1e6 * median([r for _, r in cpus]) / count,
        median([r / p for p, r in walls]),
        median([r / p for p, r in cpus]),
    )


if __name__ == "__main__":
    main()
