"""
Throughput of the MetaQ codec (txnsq.protocol.metaq), in process, no sockets.

    python bench/micro/metaq_codec.py                  # 200,000 records of 100 bytes
    python bench/micro/metaq_codec.py --count 1000000 --record-size 100 --repeat 5

Measures, best of --repeat runs each:

- put parse: a stream of ``put`` requests (body = record size - 20 bytes,
  the data a 100-byte record holds) fed in 64 KiB reads to
  MetaqRequestParser;
- get parse: a stream of ``get`` lines fed the same way;
- split: split_whole_records over a buffer of records, in get-sized windows
  (--max-size bytes, as a get of that maxSize would ask), walked to the end;
- iter: iter_records over the same buffer (a copy per record, for contrast);
- validate: validate_records over the same buffer (CRC32 of every record);
- encode: encode_record for each record.

Prints records (or requests) per second and MB/s.
"""

from __future__ import annotations

import argparse
import time
from typing import Callable, List, Tuple

from txnsq.protocol.metaq_parser import MetaqRequestParser
from txnsq.protocol.metaq_record import (
    encode_record,
    iter_records,
    split_whole_records,
    validate_records,
)

READ_SIZE = 65536


def best(repeat: int, run: Callable[[], int]) -> Tuple[float, int]:
    """The shortest of ``repeat`` runs of ``run`` and what it returned."""
    fastest = float("inf")
    result = 0
    for _ in range(repeat):
        start = time.perf_counter()
        result = run()
        elapsed = time.perf_counter() - start
        fastest = min(fastest, elapsed)
    return fastest, result


def reads(stream: bytes) -> List[bytes]:
    """``stream`` cut into READ_SIZE reads, as a socket would deliver it."""
    return [stream[i:i + READ_SIZE] for i in range(0, len(stream), READ_SIZE)]


def report(name: str, seconds: float, items: int, nbytes: int) -> None:
    print(
        "%-10s %10d items in %7.3f s: %12.0f items/s %9.1f MB/s"
        % (name, items, seconds, items / seconds, nbytes / seconds / 1e6)
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--count", type=int, default=200000, help="records or requests per run")
    parser.add_argument("--record-size", type=int, default=100, help="bytes per record, header included")
    parser.add_argument("--max-size", type=int, default=1024 * 1024, help="a get's maxSize for the split run")
    parser.add_argument("--repeat", type=int, default=3, help="runs per measure; the best is shown")
    args = parser.parse_args()
    count = args.count
    data = b"x" * (args.record_size - 20)

    puts = reads(b"".join(b"put topic 0 %d 0 %d\r\n" % (len(data), i) + data for i in range(count)))
    gets = reads(b"".join(b"get topic group 0 %d 1048576 %d\r\n" % (i * 100, i) for i in range(count)))
    log = b"".join(encode_record(i, 0, data) for i in range(count))
    print("count=%d record-size=%d max-size=%d" % (count, args.record_size, args.max_size))

    def parse_all(stream: List[bytes]) -> Callable[[], int]:
        def run() -> int:
            p = MetaqRequestParser()
            n = 0
            for chunk in stream:
                n += len(p.feed(chunk))
            return n

        return run

    seconds, n = best(args.repeat, parse_all(puts))
    assert n == count, n
    report("put parse", seconds, n, sum(map(len, puts)))

    seconds, n = best(args.repeat, parse_all(gets))
    assert n == count, n
    report("get parse", seconds, n, sum(map(len, gets)))

    max_size = args.max_size

    def split() -> int:
        pos = 0
        end = len(log)
        while pos < end:
            taken = split_whole_records(log, max_size, pos)
            if not taken:
                break
            pos += taken
        return pos

    seconds, n = best(args.repeat, split)
    assert n == len(log), n
    report("split", seconds, count, len(log))

    seconds, n = best(args.repeat, lambda: sum(1 for _ in iter_records(log)))
    assert n == count, n
    report("iter", seconds, n, len(log))

    seconds, n = best(args.repeat, lambda: validate_records(log)[0])
    assert n == len(log), n
    report("validate", seconds, count, len(log))

    seconds, n = best(args.repeat, lambda: len([encode_record(i, 0, data) for i in range(count)]))
    report("encode", seconds, n, len(log))


if __name__ == "__main__":
    main()
