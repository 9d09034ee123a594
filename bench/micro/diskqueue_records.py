#!/usr/bin/env python
"""
The disk queue's own cost per message, with nothing around it: a
``DiskQueue`` with no memory front (``--mem-queue-size=0``, no flight log)
is given ``--count`` messages of ``--size`` bytes, ``--batch`` per reactor
turn (one ``put`` each, or one ``put_many`` per turn), and then read to
its end.  This is the record framing on the way to the segment files
(``append_record``, ``append_records``) and on the way back
(``split_records`` and the queue's read path), plus the queue's
bookkeeping; nsqd's whole spill path is ``hot_path.py --storage disk
--mem-queue-size N``.

Run by hand; not part of the test suite::

    python bench/micro/diskqueue_records.py
    python bench/micro/diskqueue_records.py --put-many                # a turn's messages in one run
    TXNSQ_NO_EXTENSIONS=1 python bench/micro/diskqueue_records.py    # the pure Python
    valgrind --tool=callgrind python bench/micro/diskqueue_records.py --count 20000 --phases 1
        # instructions per phase: runs with --phases N and N-1, subtracted

Its figures are µs of this process's CPU per message (``time.process_time``).
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

from twisted.internet.task import Clock  # noqa: E402

from txnsq.protocol.message import encode_message  # noqa: E402
from txnsq.speedups import hot_path  # noqa: E402
from txnsq.storage.disk import DiskQueue  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--count", type=int, default=200000)
    parser.add_argument("--size", type=int, default=100, help="body bytes per message")
    parser.add_argument("--batch", type=int, default=100, help="puts per reactor turn")
    parser.add_argument("--put-many", action="store_true",
                        help="put each turn's messages with one put_many (as an MPUB does), not one put each")
    parser.add_argument("--phases", type=int, default=2, choices=(0, 1, 2),
                        help="run only the first N phases (put, read), for callgrind")
    args = parser.parse_args()

    directory = tempfile.mkdtemp(prefix="txnsq-diskqueue-records-")
    try:
        clock = Clock()
        queue = DiskQueue(
            "bench:ch",
            directory,
            clock,
            mem_limit=0,
            max_bytes_per_file=100 * 1024 * 1024,
            max_msg_size=1024 * 1024 + 26,
            sync_every=2500,
            sync_timeout=2.0,
        )
        body = b"x" * args.size
        messages = [encode_message(1_700_000_000_000_000_000, 0, b"%016x" % (i,), body) for i in range(args.count)]
        put_seconds = read_seconds = 0.0
        if args.phases >= 1:
            put = queue.put
            put_many = queue.put_many if args.put_many else None
            start = time.process_time()
            for first in range(0, args.count, args.batch):
                if put_many is not None:
                    put_many(messages[first : first + args.batch])
                else:
                    for data in messages[first : first + args.batch]:
                        put(data)
                clock.advance(0)
            put_seconds = time.process_time() - start
        if args.phases >= 2:
            read = queue.read
            received = 0
            start = time.process_time()
            while read() is not None:
                received += 1
            clock.advance(0)
            read_seconds = time.process_time() - start
            if received != args.count:
                print("check failed: read %d of %d" % (received, args.count))
                sys.exit(1)
        queue.close()
    finally:
        shutil.rmtree(directory, ignore_errors=True)
    if args.phases < 2:
        return
    print("%d × %d B, %d per turn (%s), %s, hot path: %s" % (
        args.count, args.size, args.batch, "put_many" if args.put_many else "put each",
        sys.version.split()[0], hot_path()))
    print("phase   µs/msg")
    for name, seconds in (("put", put_seconds), ("read", read_seconds)):
        print("%-6s %7.2f" % (name, 1e6 * seconds / args.count))


if __name__ == "__main__":
    main()
