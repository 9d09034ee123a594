#!/usr/bin/env python
"""
The channel's in-flight bookkeeping alone, with no adapter and no parser:
``--count`` messages published to a topic with one channel, delivered to
one consumer that only keeps their IDs (``Channel.consumer_ready``, the
delivery loop), then FINed one by one with ``Channel.finish`` while the
channel is held, as the TCP adapter runs a read's FINs (the consumer
stays ready, so each FIN also puts it back in line; the queue is empty by
then, so nothing is delivered again).

For instruction counts per phase under callgrind (runs with ``--phases``
N and N-1, subtracted, divided by ``--count``)::

    valgrind --tool=callgrind python bench/micro/channel_fin.py --count 20000 --phases 2

Run by hand; not part of the test suite.  Without callgrind it prints µs
of CPU per message for each phase.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from typing import List

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

from bench.micro.measure import broker  # noqa: E402
from txnsq.speedups import hot_path  # noqa: E402


class IdKeeper:
    """A consumer that keeps the IDs of the messages sent to it."""

    in_flight_count = 0
    msg_timeout = 60.0

    def __init__(self, ready: int) -> None:
        self.ready_count = ready
        self.ids: List[bytes] = []

    def send_message(self, data: bytes) -> None:
        self.ids.append(data[10:26])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--count", type=int, default=200000)
    parser.add_argument("--size", type=int, default=100)
    parser.add_argument("--storage", default="memory", choices=("memory", "disk"))
    parser.add_argument("--phases", type=int, default=2, choices=(0, 1, 2),
                        help="run only the first N phases (deliver, FIN), for callgrind")
    args = parser.parse_args()

    data_path = tempfile.mkdtemp(prefix="txnsq-channel-fin-")
    try:
        nsqd, _, clock = broker(args.storage, mem_queue_size=args.count + 1000, data_path=data_path)
        topic = nsqd.get_topic("bench")
        channel = topic.get_channel("fin")
        body = b"x" * args.size
        for _ in range(args.count // 100):
            topic.publish_many([body] * 100)
        count = args.count // 100 * 100
        clock.advance(0)
        consumer = IdKeeper(count)
        deliver_seconds = fin_seconds = 0.0
        if args.phases >= 1:
            start = time.process_time()
            channel.add_consumer(consumer)
            clock.advance(0)
            deliver_seconds = time.process_time() - start
            assert len(consumer.ids) == count, len(consumer.ids)
        if args.phases >= 2:
            finish = channel.finish
            ids = consumer.ids
            start = time.process_time()
            channel.hold()
            for msg_id in ids:
                finish(consumer, msg_id)
            channel.release()
            clock.advance(0)
            fin_seconds = time.process_time() - start
            assert not channel.in_flight_count
        nsqd.close()
    finally:
        shutil.rmtree(data_path, ignore_errors=True)
    if args.phases < 2:
        return
    print("%d × %d B, --storage %s, %s, hot path: %s" % (
        count, args.size, args.storage, sys.version.split()[0], hot_path()))
    print("phase     µs/msg")
    for name, seconds in (("deliver", deliver_seconds), ("FIN", fin_seconds)):
        print("%-8s %7.2f" % (name, 1e6 * seconds / count))


if __name__ == "__main__":
    main()
