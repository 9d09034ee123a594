"""
What the connection-upgrade client scripts (``pynsq_upgraded.py``,
``gnsq_upgraded.py``) share: their command line, the messages they publish
and check, JSON event output, and nsqd's own view of its clients from
``GET /stats``.

Not a test module: imported by those scripts, from this directory.
"""

from __future__ import annotations

import argparse
import json
import random
import urllib.request
from typing import Any, Dict, List, Optional, Sequence

from script_events import emit as emit  # re-exported to the upgrade scripts

def parse_args(argv: Optional[Sequence[str]] = None) -> argparse.Namespace:
    """``TCP_ADDRESS HTTP_ADDRESS TOPIC`` and the upgrade flags."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("tcp_address", help="nsqd HOST:PORT (TCP)")
    parser.add_argument("http_address", help="nsqd HOST:PORT (HTTP), for /stats")
    parser.add_argument("topic")
    parser.add_argument("--tls-ca", default="", help="ask for tls_v1, verifying nsqd against this CA file")
    parser.add_argument("--snappy", action="store_true", help="ask for snappy")
    parser.add_argument("--deflate", action="store_true", help="ask for deflate")
    parser.add_argument("--deflate-level", type=int, default=6)
    parser.add_argument("--count", type=int, default=120, help="messages to publish")
    parser.add_argument(
        "--incompressible-size", type=int, default=120_000,
        help="size of the random bodies (every 40th message); 0 for none",
    )
    parser.add_argument("--timeout", type=float, default=10.0, help="give up after this many seconds")
    return parser.parse_args(argv)


def body(index: int, incompressible_size: int = 120_000) -> bytes:
    """
    Message ``index``: a numbered prefix, then mostly small text, with a
    large compressible body every 40 and, unless ``incompressible_size``
    is 0, a random one of that size every 40 (at the default size, more
    than one 64 KiB snappy chunk and many TLS records).
    """
    prefix = b"%06d:" % index
    if index % 40 == 13 and incompressible_size > 0:
        size = incompressible_size
        return prefix + random.Random(index).getrandbits(8 * size).to_bytes(size, "little")
    if index % 40 == 27:
        return prefix + (b"compressible %d " % index) * 15_000
    words = [b"alpha", b"beta", b"gamma", b"delta", b"nsq", b"twisted"]
    rng = random.Random(index)
    return prefix + b" ".join(rng.choice(words) for _ in range(2 + index * 37 % 500))


def index_of(data: bytes) -> int:
    """The number a :func:`body` starts with; -1 when there is none."""
    try:
        return int(data[:6])
    except ValueError:
        return -1


def batches(count: int) -> List[List[int]]:
    """
    How the producers publish ``count`` messages: the first 5 with PUB,
    one at a time; the rest with MPUB, 10 at a time.
    """
    single = [[i] for i in range(min(5, count))]
    rest = list(range(len(single), count))
    return single + [rest[i:i + 10] for i in range(0, len(rest), 10)]


def record_message(data: bytes, attempts: int, incompressible_size: int) -> Dict[str, Any]:
    """The ``message`` event fields for a received body."""
    index = index_of(data)
    intact = data == body(index, incompressible_size)
    return {"index": index, "attempts": attempts, "size": len(data), "intact": intact}


def server_clients(http_address: str, topic: str) -> List[Dict[str, Any]]:
    """
    nsqd's view of the topic's clients (``GET /stats``): role
    (``producer`` or ``consumer``) and whether it upgraded to TLS, snappy
    or deflate.
    """
    url = "http://%s/stats?format=json&topic=%s" % (http_address, topic)
    with urllib.request.urlopen(url, timeout=5) as response:
        stats = json.loads(response.read().decode("utf-8"))
    stats = stats.get("data", stats)  # Go nsqd < 1.0 wrapped it

    def client(role: str, item: Dict[str, Any]) -> Dict[str, Any]:
        return {
            "role": role,
            "user_agent": item.get("user_agent", ""),
            "tls": bool(item.get("tls")),
            "tls_version": item.get("tls_version", ""),
            "snappy": bool(item.get("snappy")),
            "deflate": bool(item.get("deflate")),
        }

    clients = [client("producer", item) for item in stats.get("producers") or ()]
    for item in stats.get("topics") or ():
        if item.get("topic_name") != topic:
            continue
        for channel in item.get("channels") or ():
            clients.extend(client("consumer", c) for c in channel.get("clients") or ())
    return clients
