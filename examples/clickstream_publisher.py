#!/usr/bin/env python3
"""
Publish a synthetic clickstream to an NSQ topic: one JSON message per page
view, ``{"page": "/pricing", "user": "u17", "ts": 1795651200123}`` (``ts``
in milliseconds since the epoch, the event time).

    python examples/clickstream_publisher.py --nsqd-tcp-address 127.0.0.1:4150 \\
        --topic clicks --count 10000 --rate 500

Uses txnsq's blocking client (:mod:`txnsq.spark.blocking`), MPUB in batches.
"""

from __future__ import annotations

import argparse
import json
import random
import time
from typing import Dict, List, Optional, Sequence

from txnsq.spark.blocking import BlockingConnection

PAGES = ["/", "/pricing", "/docs", "/blog", "/signup", "/login"]


def make_events(
    count: int,
    start_ms: int,
    span_minutes: int = 5,
    seed: int = 1,
    pages: Sequence[str] = PAGES,
) -> List[Dict[str, object]]:
    """
    ``count`` page views spread at random over ``span_minutes`` minutes from
    ``start_ms``, in time order, reproducible for a given ``seed``.
    """
    rng = random.Random(seed)
    span = span_minutes * 60_000
    stamps = sorted(start_ms + rng.randrange(span) for _ in range(count))
    return [
        {"page": rng.choice(list(pages)), "user": "u%d" % rng.randrange(100), "ts": ts}
        for ts in stamps
    ]


def encode(event: Dict[str, object]) -> bytes:
    """The message body of an event."""
    return json.dumps(event, separators=(",", ":")).encode("utf-8")


def publish(
    nsqd: str,
    topic: str,
    events: Sequence[Dict[str, object]],
    rate: Optional[float] = None,
    batch: int = 100,
) -> int:
    """
    Publish ``events`` to ``topic`` on ``nsqd`` with MPUB, ``batch`` at a
    time, at about ``rate`` events per second (``None``: as fast as nsqd
    takes them); how many were published.
    """
    conn = BlockingConnection(nsqd)
    started = time.monotonic()
    sent = 0
    try:
        for first in range(0, len(events), batch):
            chunk = events[first : first + batch]
            conn.mpublish(topic, [encode(e) for e in chunk])
            sent += len(chunk)
            if rate:
                ahead = sent / rate - (time.monotonic() - started)
                if ahead > 0:
                    time.sleep(ahead)
    finally:
        conn.close()
    return sent


def main(argv: Optional[Sequence[str]] = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--nsqd-tcp-address", default="127.0.0.1:4150")
    parser.add_argument("--topic", default="clicks")
    parser.add_argument("--count", type=int, default=10000)
    parser.add_argument("--rate", type=float, default=None, help="events per second (default: unlimited)")
    parser.add_argument("--span-minutes", type=int, default=5, help="event times spread over this many minutes")
    parser.add_argument("--start-ms", type=int, default=None, help="first event time (default: now)")
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args(argv)
    start = args.start_ms if args.start_ms is not None else int(time.time() * 1000)
    events = make_events(args.count, start, args.span_minutes, args.seed)
    sent = publish(args.nsqd_tcp_address, args.topic, events, args.rate)
    print("published %d events to %s on %s" % (sent, args.topic, args.nsqd_tcp_address))


if __name__ == "__main__":
    main()
