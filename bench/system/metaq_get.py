"""
MetaQ ``get`` throughput: a blocking client reading a retained partition
of ``--count`` records of ``--size`` bytes from the first offset to the
end, one ``get`` of ``--max-size`` bytes at a time, over loopback.

Servers (``--server``):

- ``log`` (default): a child process running the MetaQ listener
  (:class:`txnsq.metaq.MetaqFactory`) over a
  :class:`~txnsq.metaq.LogMetaqBackend` serving a topic log this script
  fills first (``TopicLog.append_many``, 1,000 records per call);
- ``nsqd``: an ``nsqd --metaq-address`` child (``--nsqd`` names the
  command) filled through MetaQ ``put``\\s, pipelined 1,000 at a time; it
  needs the broker's retained topics (``broker.retained_log``).

Each round reads the whole partition (``--rounds``, after one warm-up
round, so the log is in the page cache).  The client does no per-record
work while timed: it reads each ``value`` header and then the reply's
bytes into one reusable buffer; the records are counted from the bytes
(every record is ``20 + size`` bytes), and the count is checked against
``--count``, the end of the partition (``404``) reached, and the first and
last replies of each round validated record by record, after the clock
stops.  Prints records/s and MB/s per round (wall clock) and the best.

Run by hand; not a test, nothing is asserted::

    python bench/system/metaq_get.py                          # 1,000,000 x 100 B
    python bench/system/metaq_get.py --max-size 4194304 --rounds 5
"""

from __future__ import annotations

import argparse
import os
import shutil
import socket
import struct
import subprocess
import sys
import tempfile
import time
from typing import List, Optional, Tuple

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

from bench.system.harness import NSQDChild, nsqd_command  # noqa: E402

from txnsq.protocol.metaq_record import HEADER_LENGTH, iter_records, validate_records  # noqa: E402

TOPIC = "bench"


def fill_log(directory: str, count: int, size: int) -> None:
    """Append ``count`` records of ``size`` bytes to partition 0 of a one-partition topic log."""
    from twisted.internet.task import Clock

    from txnsq.storage.topic_log import TopicLog

    log = TopicLog(directory, TOPIC, 1, Clock(), sync_every=0)
    payload = b"x" * size
    batch = 1000
    written = 0
    while written < count:
        step = min(batch, count - written)
        log.append_many(
            [(struct.pack(">q", written + n + 1), 0, payload) for n in range(step)], 0
        )
        written += step
    log.close()


def serve(directory: str) -> None:
    """The ``log`` server child: listen on 127.0.0.1:0, print the port, serve until killed."""
    from twisted.internet import reactor

    from txnsq.metaq import LogMetaqBackend, MetaqFactory
    from txnsq.protocol.metaq import DEFAULT_MAX_BODY_SIZE
    from txnsq.storage.topic_log import TopicLog

    backend = LogMetaqBackend(reactor)
    backend.add_topic(TopicLog(directory, TOPIC, 1, reactor))
    factory = MetaqFactory(backend, reactor, DEFAULT_MAX_BODY_SIZE)
    port = reactor.listenTCP(0, factory, interface="127.0.0.1")  # type: ignore[attr-defined]
    print("MetaQ: listening on 127.0.0.1:%d" % (port.getHost().port,), flush=True)
    reactor.run()  # type: ignore[attr-defined]


class Client:
    """A blocking MetaQ client: requests out, ``result``/``value`` replies in."""

    def __init__(self, address: Tuple[str, int], max_size: int) -> None:
        self.sock = socket.create_connection(address)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.reader = self.sock.makefile("rb", buffering=1 << 16)
        self.buffer = bytearray(max_size)
        self.view = memoryview(self.buffer)

    def reply(self) -> Tuple[str, int, int, memoryview]:
        """The next reply: ``(kind, code or 0, length, body view)``."""
        fields = self.reader.readline().split()
        kind = fields[0].decode()
        if kind == "value":
            length = int(fields[1])
            code = 0
        else:
            code, length = int(fields[1]), int(fields[2])
        body = self.view[:length]
        got = 0
        while got < length:
            read = self.reader.readinto(body[got:])
            if not read:
                raise EOFError("connection closed mid-reply")
            got += read
        return kind, code, length, body

    def close(self) -> None:
        self.reader.close()
        self.sock.close()


def put_all(client: Client, count: int, size: int) -> None:
    """Fill the partition through MetaQ puts, 1,000 pipelined at a time."""
    line = b"put %s 0 %d 0 1\r\n" % (TOPIC.encode(), size) + b"x" * size
    written = 0
    while written < count:
        step = min(1000, count - written)
        client.sock.sendall(line * step)
        for _ in range(step):
            kind, code, _, body = client.reply()
            if code != 200:
                raise SystemExit("put refused: %d %s" % (code, bytes(body)))
        written += step


def read_round(client: Client, max_size: int, record_size: int) -> Tuple[float, int, int, List[bytes]]:
    """One pass over the partition: ``(seconds, records, bytes, [first and last replies])``."""
    sock = client.sock
    offset = 0
    total = 0
    samples: List[bytes] = []
    last = 0
    started = time.perf_counter()
    while True:
        sock.sendall(b"get %s g 0 %d %d 1\r\n" % (TOPIC.encode(), offset, max_size))
        kind, code, length, body = client.reply()
        if kind != "value":
            if code == 404:
                break
            raise SystemExit("get at %d: %d %s" % (offset, code, bytes(body)))
        if length == 0:
            raise SystemExit("get at %d: a record larger than --max-size" % (offset,))
        if not samples:
            samples.append(bytes(body))
        last = offset
        offset += length
        total += length
    elapsed = time.perf_counter() - started
    # The last reply again, outside the timing (its bytes were overwritten).
    sock.sendall(b"get %s g 0 %d %d 1\r\n" % (TOPIC.encode(), last, max_size))
    samples.append(bytes(client.reply()[3]))
    return elapsed, total // record_size, total, samples


def main(argv: Optional[List[str]] = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--count", type=int, default=1000000)
    parser.add_argument("--size", type=int, default=100)
    parser.add_argument("--max-size", type=int, default=1048576, help="each get's maxSize")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--server", choices=["log", "nsqd"], default="log")
    parser.add_argument("--nsqd", default=None, help="the nsqd command (--server nsqd)")
    parser.add_argument("--serve", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.serve:
        serve(args.serve)
        return
    record_size = HEADER_LENGTH + args.size
    workdir = tempfile.mkdtemp(prefix="metaq-get-")
    child: Optional["subprocess.Popen[bytes]"] = None
    nsqd: Optional[NSQDChild] = None
    try:
        if args.server == "log":
            started = time.perf_counter()
            fill_log(os.path.join(workdir, TOPIC), args.count, args.size)
            print("filled %d records in %.1f s (TopicLog.append_many)" % (args.count, time.perf_counter() - started))
            child = subprocess.Popen(
                [sys.executable, os.path.abspath(__file__), "--serve", os.path.join(workdir, TOPIC)],
                stdout=subprocess.PIPE,
            )
            assert child.stdout is not None
            line = child.stdout.readline().decode()
            port = int(line.rsplit(":", 1)[1])
            client = Client(("127.0.0.1", port), args.max_size)
        else:
            nsqd = NSQDChild(
                [
                    "--tcp-address=127.0.0.1:0",
                    "--http-address=127.0.0.1:0",
                    "--https-address=",
                    "--metaq-address=127.0.0.1:0",
                    "--data-path=" + workdir,
                ],
                nsqd_command(args.nsqd),
                os.path.join(workdir, "nsqd.log"),
            )
            nsqd.start()
            client = Client(("127.0.0.1", nsqd.ports["MetaQ"]), args.max_size)
            started = time.perf_counter()
            put_all(client, args.count, args.size)
            print("filled %d records in %.1f s (MetaQ puts)" % (args.count, time.perf_counter() - started))
        expected_payload = b"x" * args.size
        rates: List[float] = []
        for number in range(args.rounds + 1):
            elapsed, records, total, samples = read_round(client, args.max_size, record_size)
            if total != args.count * record_size or records != args.count:
                raise SystemExit("read %d bytes, expected %d" % (total, args.count * record_size))
            for sample in samples:
                good, problem = validate_records(sample)
                if problem is not None or good != len(sample):
                    raise SystemExit("bad records in a reply: %s" % (problem,))
            first = next(iter_records(samples[0]))
            if first.position != 0 or first.payload != expected_payload:
                raise SystemExit("the first record is not the first one written")
            label = "warm-up" if number == 0 else "round %d" % (number,)
            rate = records / elapsed
            print(
                "%-8s %9d records in %.3f s: %11.0f records/s, %7.1f MB/s (get maxSize %d)"
                % (label, records, elapsed, rate, total / elapsed / 1e6, args.max_size)
            )
            if number:
                rates.append(rate)
        print("best: %.0f records/s" % (max(rates),))
        client.sock.sendall(b"quit\r\n")
        client.close()
    finally:
        if child is not None:
            child.kill()
            child.wait()
        if nsqd is not None:
            nsqd.stop()
        shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    main()
