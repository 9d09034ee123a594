"""
Reads a retained topic back over MetaQ -- every partition of every nsqd
given, from its first record to its end -- and records each record as a
delivery (``recv``: the body's producer and number, the nsqd, the
partition and offset) on the channel named ``--channel``, so that the
queue checker counts what the topic holds.

    python -m lab.workers.log_dump --metaq A:8123 --topic t_copy \\
        --channel nsq-sink --out history.jsonl
"""

from __future__ import annotations

import argparse
import sys
from typing import List, Optional

from lab.workers.common import HistoryWriter
from txnsq.spark.metaq import BlockingMetaqClient, read_partition
from txnsq.spark.offsets import topic_partitions

__all__ = ["dump", "main"]


def dump(address: str, topic: str, channel: str, history: HistoryWriter) -> int:
    """Record every record of ``topic`` on the nsqd with MetaQ at ``address``; returns how many."""
    count = 0
    with BlockingMetaqClient(address, request_timeout=30.0) as client:
        partitions = topic_partitions(client, topic)
        if partitions is None:
            raise SystemExit("topic %s is not retained on %s" % (topic, address))
        for partition in range(len(partitions)):
            for record in read_partition(client, topic, partition, 0, 1 << 20):
                body = record.payload.decode("utf-8", "replace")
                producer, _, number = body.rpartition(":")
                try:
                    value: object = int(number)
                except ValueError:
                    value = body
                history.write("recv", "msg", value, address, ch=channel, src=producer,
                              part=partition, off=record.offset)
                count += 1
    return count


def main(argv: Optional[List[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[1] if __doc__ else None)
    parser.add_argument("--metaq", required=True, help="comma-separated MetaQ addresses")
    parser.add_argument("--topic", required=True)
    parser.add_argument("--channel", required=True, help="the name the checker gives this output")
    parser.add_argument("--out", required=True)
    parser.add_argument("--process", default="dump")
    args = parser.parse_args(argv)
    history = HistoryWriter(args.out, args.process, flush_every=5000)
    total = 0
    for address in args.metaq.split(","):
        total += dump(address, args.topic, args.channel, history)
    history.close()
    print("read %d records of %s" % (total, args.topic), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
