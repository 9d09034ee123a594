"""
What the retained log costs: append throughput (against a disk queue put
of the same messages) and MetaQ-style read throughput in whole-record
slices, in-process.

**append**: ``--count`` messages of ``--size`` bytes, ``--batch`` per call
(an MPUB), into a ``PartitionLog`` with the disk backend's default fsync
policy (sync every 2500 on the sync thread); then the same bodies, encoded
as NSQ messages, put into a ``DiskQueue`` with ``--mem-queue-size=0`` (a
topic without retention spilling every message to disk), ``--batch`` per
reactor turn.  Prints both rates and the ratio of their times per message.

**read**: ``--read-count`` records of ``--size`` bytes appended to a fresh
log, then read from the first offset to the end in ``--slice`` byte reads
(what a MetaQ ``get`` loop asks for), ``--rounds`` times after one warm-up
pass, so from the page cache.

Times are this process's CPU (``time.process_time``, as ``hot_path.py``
measures nsqd's publish path), so that other work on a shared machine
does not count; the ``fsync``\s of the sync thread are mostly waiting and
count little.  No record is decoded in the timed loop (the
broker sends slices as they are); the count is checked once afterwards.

Run by hand; not a test, nothing is asserted::

    python bench/micro/retained_log.py
    python bench/micro/retained_log.py --count 500000 --read-count 1000000 --repeat 5
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import struct
import tempfile
import time
from typing import Dict, List

from twisted.internet.task import Clock

from txnsq.files import write_file_atomically
from txnsq.storage.disk import DiskQueue
from txnsq.storage.log import PartitionLog
from txnsq.storage.log_format import iter_records
from txnsq.storage.sync_worker import SyncWorker

_ID = struct.Struct(">q")
_NSQ_HEADER = struct.Struct(">qH16s")


def append_rate(directory: str, count: int, size: int, batch: int) -> float:
    """Records per second appended to a retained log, ``batch`` per call."""
    log = PartitionLog(
        os.path.join(directory, "log"),
        Clock(),
        sync_every=2500,
        sync_worker=SyncWorker(write_file_atomically),
    )
    payload = b"x" * size
    batches = [
        [(_ID.pack(start + i), 0, payload) for i in range(min(batch, count - start))]
        for start in range(0, count, batch)
    ]
    started = time.process_time()
    stamp = time.time_ns()
    for records in batches:
        log.append_many(records, stamp)
    log.sync()
    seconds = time.process_time() - started
    log.close()
    return count / seconds


def disk_put_rate(directory: str, count: int, size: int, batch: int) -> float:
    """Messages per second put into a disk queue with no memory front."""
    clock = Clock()
    queue = DiskQueue(
        "bench",
        directory,
        clock,
        mem_limit=0,
        max_bytes_per_file=100 * 1024 * 1024,
        max_msg_size=1024 * 1024 + 26,
        sync_every=2500,
        sync_timeout=2.0,
        sync_worker=SyncWorker(write_file_atomically),
    )
    payload = b"x" * size
    stamp = time.time_ns()
    messages = [
        _NSQ_HEADER.pack(stamp, 0, b"%016x" % (number,)) + payload for number in range(count)
    ]
    started = time.process_time()
    for start in range(0, count, batch):
        for data in messages[start : start + batch]:
            queue.put(data)
        clock.advance(0)
    queue.sync()
    seconds = time.process_time() - started
    queue.delete()
    return count / seconds


def read_rates(directory: str, count: int, size: int, slice_size: int, rounds: int) -> List[float]:
    """Records per second read in ``slice_size`` slices, per round (after a warm-up)."""
    path = os.path.join(directory, "read")
    log = PartitionLog(path, Clock(), sync_every=0)
    payload = b"y" * size
    for start in range(0, count, 1000):
        log.append_many([(_ID.pack(start + i), 0, payload) for i in range(1000)], start)
    log.close()
    log = PartitionLog(path, Clock(), sync_every=0)
    end = log.next_offset
    rates = []
    for round_number in range(rounds + 1):
        offset = log.first_offset
        read = log.read
        nbytes = 0
        started = time.process_time()
        while offset < end:
            data, offset = read(offset, slice_size)
            nbytes += len(data)
        seconds = time.process_time() - started
        assert nbytes == end - log.first_offset, (nbytes, end)
        if round_number:
            rates.append(count / seconds)
    # Outside the timing: the slices hold every record, whole.
    offset = log.first_offset
    seen = 0
    while offset < end:
        data, following = log.read(offset, slice_size)
        seen += sum(1 for _ in iter_records(data, offset))
        offset = following
    assert seen == count, (seen, count)
    log.close()
    return rates


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--count", type=int, default=200000, help="messages appended")
    parser.add_argument("--size", type=int, default=100, help="body bytes")
    parser.add_argument("--batch", type=int, default=100, help="messages per MPUB")
    parser.add_argument("--read-count", type=int, default=1000000, help="records read")
    parser.add_argument("--slice", type=int, default=1024 * 1024, help="bytes per read")
    parser.add_argument("--rounds", type=int, default=3, help="timed read passes")
    parser.add_argument("--repeat", type=int, default=3, help="append runs (medians shown)")
    parser.add_argument("--dir", default=None, help="where to write (default: a temp dir)")
    args = parser.parse_args()
    figures: Dict[str, List[float]] = {"log": [], "disk": [], "ratio": []}
    for _ in range(args.repeat):
        directory = tempfile.mkdtemp(prefix="txnsq-bench-", dir=args.dir)
        try:
            # Interleaved, so that drift of the machine's speed hits both.
            log_rate = append_rate(directory, args.count, args.size, args.batch)
            disk_rate = disk_put_rate(directory, args.count, args.size, args.batch)
        finally:
            shutil.rmtree(directory, ignore_errors=True)
        figures["log"].append(log_rate)
        figures["disk"].append(disk_rate)
        figures["ratio"].append(disk_rate / log_rate)
        print(
            "append: log %9.0f rec/s (%.2f us/rec)  disk queue put %9.0f msg/s (%.2f us/msg)  "
            "log/disk time %.2f"
            % (log_rate, 1e6 / log_rate, disk_rate, 1e6 / disk_rate, disk_rate / log_rate)
        )
    print(
        "append medians: log %.0f rec/s, disk queue %.0f msg/s, log/disk time %.2f "
        "(%d x %d B, %d per batch, %d runs)"
        % (
            statistics.median(figures["log"]),
            statistics.median(figures["disk"]),
            statistics.median(figures["ratio"]),
            args.count,
            args.size,
            args.batch,
            args.repeat,
        )
    )
    directory = tempfile.mkdtemp(prefix="txnsq-bench-", dir=args.dir)
    try:
        rates = read_rates(directory, args.read_count, args.size, args.slice, args.rounds)
    finally:
        shutil.rmtree(directory, ignore_errors=True)
    for rate in rates:
        print("read: %10.0f rec/s" % (rate,))
    print(
        "read median: %.0f rec/s (%d x %d B in %d-byte slices, %d rounds after a warm-up)"
        % (statistics.median(rates), args.read_count, args.size, args.slice, args.rounds)
    )


if __name__ == "__main__":
    main()
