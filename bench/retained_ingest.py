#!/usr/bin/env python
"""
What retention costs a publish: the ingest time of a retained topic over
the same topic without retention, in-process (the V2 adapter and the
broker core on a ``task.Clock``, as ``hot_path.py``), no sockets.

Each repeat publishes ``--count`` bodies of ``--size`` bytes to a fresh
topic with one channel and no consumer (messages are queued in memory),
once without retention and once retained (``--partitions`` partitions,
the log in a temporary ``--data-path``, the default fsync policy), as
``PUB`` commands (``--pub-chunk`` per ``dataReceived``) and as ``MPUB`` of
``--batch``; the two are interleaved ``--repeat`` times and the medians
printed with their ratio.  Times are this process's CPU
(``time.process_time``), so the log's ``write`` system calls count,
the sync thread's ``fsync`` does not.

Run by hand; not part of the test suite::

    python bench/retained_ingest.py
    python bench/retained_ingest.py --count 200000 --size 100 --repeat 7
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import struct
import sys
import tempfile
import time
from typing import Any, Callable, Dict, List

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from twisted.internet.task import Clock  # noqa: E402

from hot_path import connect, mpub  # noqa: E402
from txnsq.nsqd.broker import Broker  # noqa: E402
from txnsq.nsqd.options import NSQDOptions  # noqa: E402
from txnsq.nsqd.retention import RetentionSettings  # noqa: E402
from txnsq.nsqd.tcp import NSQDFactory  # noqa: E402
from txnsq.storage.plugins import get_storage_backend  # noqa: E402

_U32 = struct.Struct(">I")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--count", type=int, default=100000)
    parser.add_argument("--size", type=int, default=100)
    parser.add_argument("--batch", type=int, default=100, help="bodies per MPUB")
    parser.add_argument("--pub-chunk", type=int, default=100, help="PUBs per dataReceived")
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--storage", default="memory", choices=("memory", "disk"))
    args = parser.parse_args()

    clock = Clock()
    clock.advance(1_700_000_000)
    data_path = tempfile.mkdtemp(prefix="txnsq-retained-ingest-")
    options = NSQDOptions()
    options.mem_queue_size = args.count + 1000
    options.data_path = data_path
    broker = Broker(options, clock, get_storage_backend(args.storage))
    factory = NSQDFactory(broker, clock)
    publisher, _ = connect(factory, 1)
    body = b"x" * args.size
    settings = RetentionSettings(1 << 40, 0.0, args.partitions)

    def pub_commands(topic: bytes) -> List[bytes]:
        one = b"PUB " + topic + b"\n" + _U32.pack(len(body)) + body
        return [one * args.pub_chunk] * (args.count // args.pub_chunk)

    def mpub_commands(topic: bytes) -> List[bytes]:
        return [mpub(topic, [body] * args.batch)] * (args.count // args.batch)

    def run(kind: str, retained: bool, serial: int) -> float:
        name = "%s-%s-%d" % (kind, "r" if retained else "p", serial)
        topic = broker.get_topic(name)
        topic.get_channel("c")
        if retained:
            topic.set_retention(settings)
        commands = (pub_commands if kind == "PUB" else mpub_commands)(name.encode())
        feed = publisher.dataReceived
        start = time.process_time()
        for command in commands:
            feed(command)
            clock.advance(0)
        seconds = time.process_time() - start
        published = topic.message_count
        if published != args.count - args.count % (args.pub_chunk if kind == "PUB" else args.batch):
            raise SystemExit("check failed: %s published %d" % (name, published))
        if retained:
            assert topic.retention is not None
            logged = topic.retention.log.retained_bytes
            if logged != published * (20 + args.size):
                raise SystemExit("check failed: %s logged %d bytes" % (name, logged))
        broker.delete_topic(name)
        return 1e6 * seconds / published

    results: Dict[str, List[float]] = {}
    serial = 0
    for _ in range(args.repeat):
        for kind in ("PUB", "MPUB"):
            for retained in (False, True):
                serial += 1
                results.setdefault("%s %s" % (kind, retained), []).append(run(kind, retained, serial))
    broker.close()
    shutil.rmtree(data_path, ignore_errors=True)

    print("%d x %d B, %d partitions, MPUB x %d, %d PUBs per read, --storage %s, %s, median of %d" % (
        args.count, args.size, args.partitions, args.batch, args.pub_chunk, args.storage,
        sys.version.split()[0], args.repeat))
    print("command   plain µs/msg   retained µs/msg   ratio")
    median: Callable[[List[float]], Any] = statistics.median
    for kind in ("PUB", "MPUB"):
        plain = median(results["%s False" % (kind,)])
        retained = median(results["%s True" % (kind,)])
        print("%-8s %13.2f %17.2f %7.2f" % (kind, plain, retained, retained / plain))


if __name__ == "__main__":
    main()
