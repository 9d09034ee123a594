"""
One read pass over a retained topic: every partition from its first
record to its end by MetaQ ``get`` (txnsq's blocking client,
:mod:`txnsq.spark.metaq`, which reads replies with the same functions as
the Twisted one), each record recorded with its partition, offset and a
hash of its bytes.

The reader frames and checksums every reply itself, so that a record
failing its checksum is seen even if a client would let it through: each
one is recorded (``f: bad``) together with what the clients' reply
parser (:func:`txnsq.client.metaq.get_result`) made of that reply (it
should refuse it).  Offsets the broker moves a read away from (301: a
segment set aside, the start of the log) are recorded as ``skip``.

Events (``type: read``, ``pass``: this pass's label, ``v``: ``[partition,
offset]``): ``record`` (``h`` hash, ``size``, ``src``/``n`` the writer
and number its body names, ``body_ok`` whether its body is that record's,
``id``), ``bad`` (``why``, ``client``), ``skip`` (``to``), ``end`` (``v``:
the partition's next offset), ``error`` (``why``: the partition was not
read to its end), and one ``pass`` at the end (``complete``).

    python -m lab.workers.log_reader --metaq A:8123 --topic log \\
        --partitions 2 --label before --out reader.jsonl
"""

from __future__ import annotations

import argparse
import struct
import sys
import time
import zlib
from typing import List, Optional

from lab.log_bodies import parse_body, record_body, record_hash
from lab.workers.common import HistoryWriter
from txnsq.client.metaq import (
    MetaqConnectionError,
    MetaqEndOfPartition,
    MetaqMoved,
    MetaqNotFound,
    MetaqProtocolError,
    MetaqResultError,
    MetaqTimeoutError,
    get_result,
)
from txnsq.protocol.metaq import ValueResponse
from txnsq.spark.metaq import BlockingMetaqClient

__all__ = ["main"]

_HEADER = struct.Struct(">iiqi")
_MASK = 0x7FFFFFFF
_MAX_GET = 1024 * 1024


class PassReader:
    """
    Reads partitions for one pass, reconnecting while nsqd comes back
    (up to ``wait`` seconds in all).
    """

    def __init__(self, args: argparse.Namespace, history: HistoryWriter) -> None:
        self.args = args
        self.history = history
        self.client: Optional[BlockingMetaqClient] = None
        self.deadline = time.monotonic() + args.wait
        self.bad = 0
        self.records = 0

    def event(self, f: str, partition: int, offset: int, **fields: object) -> None:
        self.history.write("read", f, [partition, offset], self.args.metaq, **{"pass": self.args.label}, **fields)

    def connected(self) -> BlockingMetaqClient:
        while self.client is None:
            try:
                self.client = BlockingMetaqClient(self.args.metaq, connect_timeout=1.0, request_timeout=5.0)
            except MetaqConnectionError:
                if time.monotonic() > self.deadline:
                    raise
                time.sleep(0.2)
        return self.client

    def drop(self) -> None:
        if self.client is not None:
            self.client.close()
        self.client = None

    def read_partition(self, partition: int) -> bool:
        """Read one partition to its end; whether it was read whole."""
        offset = 0
        max_size = self.args.max_size
        skips = 0
        while True:
            try:
                data = self.connected().get_raw(self.args.topic, partition, offset, max_size)
            except MetaqMoved as moved:
                self.event("skip", partition, offset, to=moved.offset)
                skips += 1
                if moved.offset <= offset or skips > 100:
                    self.event("error", partition, offset, why="moved backwards or in a loop to %d" % moved.offset)
                    return False
                offset = moved.offset
                continue
            except MetaqEndOfPartition:
                self.event("end", partition, offset)
                return True
            except MetaqNotFound as error:
                self.event("error", partition, offset, why=str(error)[:200])
                return False
            except (MetaqConnectionError, MetaqTimeoutError) as error:
                self.drop()
                if time.monotonic() > self.deadline:
                    self.event("error", partition, offset, why=str(error)[:200])
                    return False
                time.sleep(0.2)
                continue
            except MetaqResultError as error:
                self.event("error", partition, offset, why=str(error)[:200])
                return False
            if not data:
                # The first record is larger than max_size (docs/metaq.md).
                if max_size >= _MAX_GET:
                    self.event("error", partition, offset, why="a record larger than %d bytes" % max_size)
                    return False
                max_size *= 2
                continue
            max_size = self.args.max_size
            self.frame(partition, offset, data)
            # Whole records up to the reply's end: the broker's own boundary.
            offset += len(data)

    def frame(self, partition: int, offset: int, data: bytes) -> None:
        """Record every record of a reply; check each checksum."""
        pos = 0
        end = len(data)
        bad_here: List[int] = []
        while pos < end:
            at = offset + pos
            if end - pos < _HEADER.size:
                self.event("bad", partition, at, why="record header cut short")
                bad_here.append(at)
                break
            size, stored, msg_id, flag = _HEADER.unpack_from(data, pos)
            following = pos + _HEADER.size + size
            if size < 0 or following > end:
                self.event("bad", partition, at, why="record cut short (data length %d)" % size)
                bad_here.append(at)
                break
            body = data[pos + _HEADER.size : following]
            if zlib.crc32(body) & _MASK != stored:
                self.event("bad", partition, at, why="checksum mismatch", size=following - pos)
                bad_here.append(at)
                pos = following
                continue
            named = parse_body(body)
            fields: dict = {"h": record_hash(data[pos:following]), "size": following - pos, "id": "%016x" % (msg_id & 0xFFFFFFFFFFFFFFFF)}
            if flag:
                fields["flag"] = flag
            if named is not None:
                src, n = named
                fields["src"], fields["n"] = src, n
                fields["body_ok"] = flag == 0 and body == record_body(src, n, len(body))
            self.event("record", partition, at, **fields)
            self.records += 1
            pos = following
        if bad_here:
            self.bad += len(bad_here)
            # What a txnsq client does with this reply: it must refuse it.
            try:
                got = get_result(ValueResponse(data, 0), offset)
                verdict = "accepted %d records" % len(got.records)
            except MetaqProtocolError as error:
                verdict = "refused: %s" % (str(error)[:160],)
            self.event("client", partition, offset, client=verdict, bad=bad_here)


def main(argv: Optional[List[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[1] if __doc__ else None)
    parser.add_argument("--metaq", required=True, help="nsqd's MetaQ address")
    parser.add_argument("--topic", required=True)
    parser.add_argument("--partitions", type=int, default=1)
    parser.add_argument("--label", required=True, help="this pass's name in the history")
    parser.add_argument("--max-size", type=int, default=8192, help="bytes per get")
    parser.add_argument("--wait", type=float, default=20.0, help="seconds to wait for nsqd in all")
    parser.add_argument("--out", required=True)
    parser.add_argument("--process", default="reader")
    args = parser.parse_args(argv)
    history = HistoryWriter(args.out, args.process, flush_every=2000)
    reader = PassReader(args, history)
    complete = True
    for partition in range(args.partitions):
        complete = reader.read_partition(partition) and complete
    reader.drop()
    history.write("read", "pass", args.label, args.metaq, **{"pass": args.label}, complete=complete,
                  records=reader.records, bad=reader.bad)
    history.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
