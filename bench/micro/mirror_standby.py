"""
The CPU a standby spends per mirrored message, in-process, from the
route's bytes on: the primary's payloads (MPUBs of ``--batch`` messages
to a topic with one channel, each payload also carrying the FINs of the
previous one's messages when ``--fin``) framed as the route sends them
(one ``RMSG`` each), fed to a route parser in 64 KiB reads, decoded and
applied to a :class:`~txnsq.mirror.standby.StandbyCopy` (and written to a
:class:`~txnsq.mirror.journal.CopyJournal` with ``--journal``).
``count()`` afterwards (the copy brought up to date, as ``/stats`` or a
failover does) is timed apart.  ``--rounds 0`` only reads the bytes.
With ``--wire FILE`` the bytes are made once and kept in FILE (the run
that makes it stops there), and later runs read them from it.

Median of ``--rounds`` runs of ``--count`` messages, in microseconds of
CPU (``time.process_time``) per message.  ``--rounds 1 --count 20000``
under ``valgrind --tool=callgrind`` gives instruction counts that do not
move with the machine's load.

    python bench/micro/mirror_standby.py [--count 200000] [--batch 100] [--size 100]
        [--rounds 5] [--fin] [--journal] [--no-count] [--wire FILE]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from typing import List, Optional, Tuple

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

from twisted.internet.task import Clock  # noqa: E402

from bench.micro.measure import broker  # noqa: E402
from txnsq.mirror.journal import CopyJournal  # noqa: E402
from txnsq.mirror.recorder import MirrorRecorder  # noqa: E402
from txnsq.mirror.standby import StandbyCopy  # noqa: E402
from txnsq.protocol.mirror import (  # noqa: E402
    OP_CHANNEL_CREATE,
    RecordBuilder,
    decode_records,
)
from txnsq.protocol.nats_route import RouteMessages, RouteParser, encode_rmsg_head  # noqa: E402

READ_SIZE = 65536


def route_bytes(count: int, batch: int, size: int, fin: bool) -> Tuple[List[bytes], int]:
    """The route's bytes as read from the socket, and how many messages they carry."""
    found, _, _ = broker("memory", mem_queue_size=count * 4, node_id=1)
    topic = found.get_topic("t")
    topic.get_channel("c")
    recorder = MirrorRecorder(lambda: None, lambda: None)
    recorder.live = True
    topic.mirror = recorder
    create = RecordBuilder()
    create.add(OP_CHANNEL_CREATE, "t", "c", [])
    payloads = [create.encode(1)]
    bodies = [b"x" * size] * batch
    previous: List[bytes] = []
    for seq in range(2, count // batch + 2):
        for msg_id in previous:
            recorder.finished("t", "c", msg_id)
        topic.publish_many(bodies)
        payload = recorder.builder.encode(seq)
        payloads.append(payload)
        if fin:
            previous = [
                data[10:26]
                for op, _, _, items in decode_records(payload)[1]
                if op == b"M"
                for data in items
            ]
    wire = b"".join(
        encode_rmsg_head("$G", "$NSQ.mirror.data", len(payload)) + payload + b"\r\n"
        for payload in payloads
    )
    return [wire[pos : pos + READ_SIZE] for pos in range(0, len(wire), READ_SIZE)], (
        count // batch * batch
    )


def apply(
    chunks: List[bytes], journal: Optional[CopyJournal], count: bool = True
) -> Tuple[float, float, int]:
    """CPU seconds applying, then bringing the copy up to date (count()); the count."""
    parser = RouteParser(batch=True)
    copy = StandbyCopy("a", "e")
    if journal is not None:
        journal.started(copy)
    now = 1700000000.0
    start = time.process_time()
    for chunk in chunks:
        for op in parser.feed(chunk):
            assert type(op) is RouteMessages
            for payload in op.payloads:
                seq, records = decode_records(payload)
                copy.apply(seq, records, now)
                if journal is not None:
                    journal.applied(
                        copy, payload, sum(len(items) for _, _, _, items in records) or 1, now
                    )
    applied = time.process_time()
    held = copy.count() if count else -1
    return applied - start, time.process_time() - applied, held


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--count", type=int, default=200000)
    parser.add_argument("--batch", type=int, default=100)
    parser.add_argument("--size", type=int, default=100)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--fin", action="store_true", help="each payload FINs the previous one's")
    parser.add_argument("--journal", action="store_true", help="keep the copy on disk too")
    parser.add_argument(
        "--no-count", action="store_true", help="no count() after (a standby nobody asks)"
    )
    parser.add_argument(
        "--wire", help="read the route's bytes from this file (made first if missing): "
        "under callgrind, the run then counts the standby's instructions only"
    )
    options = parser.parse_args()
    if options.wire and os.path.exists(options.wire):
        with open(options.wire, "rb") as stream:
            count = int(stream.readline())
            wire = stream.read()
        chunks = [wire[pos : pos + READ_SIZE] for pos in range(0, len(wire), READ_SIZE)]
    else:
        chunks, count = route_bytes(options.count, options.batch, options.size, options.fin)
        if options.wire:
            with open(options.wire, "wb") as stream:
                stream.write(b"%d\n" % (count,) + b"".join(chunks))
            return
    applying: List[float] = []
    counting: List[float] = []
    held = 0
    for _ in range(options.rounds):
        with tempfile.TemporaryDirectory() as directory:
            journal = CopyJournal(directory, Clock()) if options.journal else None
            spent, then, held = apply(chunks, journal, not options.no_count)
            if journal is not None:
                journal.close()
        applying.append(spent / count * 1e6)
        counting.append(then / count * 1e6)
    if not applying:
        # --rounds 0: the bytes read and cut only (what a callgrind count
        # of the runs includes besides the standby's work).
        return
    print(
        "%s, standby of MPUB x%d of %d-byte messages%s%s, CPU us per message (median of %d):"
        % (
            sys.implementation.name, options.batch, options.size,
            ", FINed" if options.fin else "", ", journal" if options.journal else "",
            options.rounds,
        )
    )
    print("  route bytes to copy:   %.3f" % statistics.median(applying))
    print("  then count():          %.3f  (%d held)" % (statistics.median(counting), held))


if __name__ == "__main__":
    main()
