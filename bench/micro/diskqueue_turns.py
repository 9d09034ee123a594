"""
How long the disk queue holds the reactor: throughput and per-turn time of
``DiskQueue`` puts and reads, in-process, for several write/sync policies.

Each "turn" puts ``--batch`` messages (an MPUB, or a busy reactor turn of
PUBs) and then runs what the queue scheduled for the end of the turn (the
batched write, and the fsync + meta file when it is time).  The figures
show what batching buys over a ``write`` per message, and how long the
turn that carries an ``fsync`` stalls every other connection.

Run by hand::

    python bench/micro/diskqueue_turns.py --count 200000 --size 100

Not a test; nothing is asserted.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import tempfile
import time
from typing import Dict, List, Tuple

from twisted.internet.task import Clock

from txnsq.storage import disk
from txnsq.files import write_file_atomically
from txnsq.storage.disk import DiskQueue
from txnsq.storage.sync_worker import SyncWorker


def run(
    directory: str,
    count: int,
    size: int,
    batch: int,
    sync_every: int,
    flush_bytes: int,
    threaded: bool,
) -> Dict[str, float]:
    """Put then read ``count`` messages; return rates and turn times."""
    saved = disk.FLUSH_BYTES
    disk.FLUSH_BYTES = flush_bytes
    try:
        clock = Clock()
        queue = DiskQueue(
            "bench:ch",
            directory,
            clock,
            mem_limit=0,
            max_bytes_per_file=100 * 1024 * 1024,
            max_msg_size=1024 * 1024 + 26,
            sync_every=sync_every,
            sync_timeout=2.0,
            sync_worker=SyncWorker(write_file_atomically) if threaded else None,
        )
        body = b"x" * size
        turns: List[float] = []
        started = time.perf_counter()
        sent = 0
        while sent < count:
            turn = time.perf_counter()
            for _ in range(min(batch, count - sent)):
                queue.put(body)
            sent += batch
            clock.advance(0)
            turns.append(time.perf_counter() - turn)
        put_seconds = time.perf_counter() - started
        started = time.perf_counter()
        got = 0
        while queue.read() is not None:
            got += 1
        read_seconds = time.perf_counter() - started
        queue.delete()
        assert got == count, (got, count)
    finally:
        disk.FLUSH_BYTES = saved
    turns.sort()
    return {
        "put": count / put_seconds,
        "read": count / read_seconds,
        "median": statistics.median(turns) * 1e3,
        "p99": turns[int(len(turns) * 0.99) - 1] * 1e3,
        "max": turns[-1] * 1e3,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--count", type=int, default=200000)
    parser.add_argument("--size", type=int, default=100)
    parser.add_argument("--batch", type=int, default=100)
    parser.add_argument("--dir", default=None, help="where to write (default: a temp dir)")
    args = parser.parse_args()
    policies: List[Tuple[str, int, int, bool]] = [
        ("batched, sync every 2500, sync thread", 2500, disk.FLUSH_BYTES, True),
        ("batched, sync every 2500, inline", 2500, disk.FLUSH_BYTES, False),
        ("write per message, sync every 2500", 2500, 1, False),
        ("batched, sync every 1 (inline)", 1, disk.FLUSH_BYTES, False),
        ("batched, sync on timer only", 0, disk.FLUSH_BYTES, False),
    ]
    print(
        "%-40s %11s %11s %10s %10s %10s"
        % ("policy", "put msg/s", "read msg/s", "turn med", "turn p99", "turn max")
    )
    for label, sync_every, flush_bytes, threaded in policies:
        directory = tempfile.mkdtemp(prefix="txnsq-bench-", dir=args.dir)
        try:
            figures = run(
                directory, args.count, args.size, args.batch, sync_every, flush_bytes, threaded
            )
        finally:
            shutil.rmtree(directory, ignore_errors=True)
        print(
            "%-40s %11.0f %11.0f %8.3fms %8.3fms %8.3fms"
            % (
                label,
                figures["put"],
                figures["read"],
                figures["median"],
                figures["p99"],
                figures["max"],
            )
        )
    print("(%d messages of %d bytes, %d per turn, in %s)" % (
        args.count, args.size, args.batch, args.dir or tempfile.gettempdir()))


if __name__ == "__main__":
    os.environ.setdefault("PYTHONHASHSEED", "0")
    main()
