"""
Throughput of the MetaQ client's reading of ``get`` replies, in process, no
sockets: a ``value`` reply of --count records is fed to MetaqResponseParser
in 64 KiB reads and turned into LogRecords by txnsq.client.metaq.get_result
(framing, CRC32 check, attribute split, offsets), best of --repeat runs.

    python bench/micro/metaq_client.py                     # 10,000 records of 100 bytes
    python bench/micro/metaq_client.py --count 50000 --record-size 200 --attribute

Prints records per second and MB/s.
"""

from __future__ import annotations

import argparse
import time

from txnsq.client.metaq import get_result
from txnsq.protocol.metaq import encode_value
from txnsq.protocol.metaq_parser import MetaqResponseParser
from txnsq.protocol.metaq_record import HEADER_LENGTH, encode_record, join_attribute

READ_SIZE = 65536


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--count", type=int, default=10000)
    parser.add_argument("--record-size", type=int, default=100, help="bytes per record, header included")
    parser.add_argument("--attribute", action="store_true", help="give each record an 8-byte attribute")
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    size = max(args.record_size - HEADER_LENGTH, 0)
    if args.attribute:
        data = join_attribute(b"a" * 8, b"x" * max(size - 12, 0))
        flag = 1
    else:
        data = b"x" * size
        flag = 0
    records = b"".join(encode_record(i, flag, data) for i in range(args.count))
    reply = encode_value(records, 1)
    best = float("inf")
    got = 0
    for _ in range(args.repeat):
        started = time.perf_counter()
        stream = MetaqResponseParser(max_body_size=len(records))
        items = []
        for start in range(0, len(reply), READ_SIZE):
            items.extend(stream.feed(reply[start:start + READ_SIZE]))
        got = len(get_result(items[0], 0).records)
        best = min(best, time.perf_counter() - started)
    print(
        "get_result: %d records of %d bytes in %.1f ms: %.0f records/s, %.1f MB/s"
        % (got, args.record_size, best * 1e3, got / best, len(reply) / best / 1e6)
    )


if __name__ == "__main__":
    main()
