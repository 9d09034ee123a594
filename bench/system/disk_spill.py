#!/usr/bin/env python
"""
Benchmark of the disk-spill path: publish N messages into a channel whose
in-memory part (``--mem-queue-size``) holds only some of them, then consume
them all, and print the rates.

Each run starts its own nsqd child process on ``127.0.0.1:0`` with a fresh
``--data-path``, creates the channel (``SUB`` on a connection that then
closes; the channel stays), publishes over one connection in ``MPUB``
batches (or single ``PUB``\\s) waiting for each ``OK``, sums the files in
the data path, then consumes with ``SUB``, ``RDY`` and a ``FIN`` for every
message, checking that every body came back once and intact.

Run by hand; not part of the test suite::

    python bench/system/disk_spill.py                       # --storage disk
    python bench/system/disk_spill.py --compare-memory --pub
    python bench/system/disk_spill.py --storage memory --mem-queue-size 300000

No Twisted: the standard library and txnsq's sans-IO codec (see ``harness``).
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from dataclasses import dataclass
from typing import List, Optional, Sequence, Tuple

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

from bench.common.report import progress, table  # noqa: E402  (needs the path above)
from bench.system.harness import (  # noqa: E402
    SEQUENCE,
    BenchError,
    NSQDChild,
    NSQDError,
    NSQDStartError,
    V2Connection,
    create_channel,
    directory_size,
    describe_frame,
    filler,
    nsqd_command,
)
from txnsq.protocol.frames import FRAME_TYPE_ERROR, FRAME_TYPE_MESSAGE  # noqa: E402
from txnsq.protocol.message import MESSAGE_HEADER_LENGTH  # noqa: E402
from txnsq.protocol.v2_client import OK, fin, mpub, pub, rdy, sub  # noqa: E402

TOPIC = b"bench_spill"
CHANNEL = b"bench"

@dataclass(frozen=True)
class RunConfig:
    """
    One benchmark run.

    :ivar batch: messages per ``MPUB``; 0 publishes with single ``PUB``\\s.
    :ivar timeout: seconds the consumer waits with no message arriving.
    """

    storage: str
    mem_queue_size: int
    count: int
    size: int
    batch: int
    sync_every: Optional[int]
    command: Tuple[str, ...]
    rdy: int
    timeout: float

    @property
    def method(self) -> str:
        """How it publishes, for the table: ``MPUB×100`` or ``PUB``."""
        return "PUB" if self.batch == 0 else "MPUB×%d" % (self.batch,)

    def nsqd_args(self, data_path: str) -> List[str]:
        """nsqd's flags for this run."""
        args = [
            "--tcp-address=127.0.0.1:0",
            "--http-address=127.0.0.1:0",
            "--data-path=%s" % (data_path,),
            "--storage=%s" % (self.storage,),
            "--mem-queue-size=%d" % (self.mem_queue_size,),
        ]
        if self.sync_every is not None:
            args.append("--sync-every=%d" % (self.sync_every,))
        return args


@dataclass
class RunResult:
    """
    What one run measured.

    :ivar disk_bytes: the size of the files in the data path right after
        the last publish was acknowledged.
    :ivar wall_seconds: from spawning nsqd to its exit.
    :ivar intact: distinct messages consumed with the body they were
        published with.
    :ivar duplicates: messages delivered again after an intact copy.
    :ivar corrupt: messages whose body was not one that was published.
    """

    config: RunConfig
    publish_seconds: float
    consume_seconds: float
    disk_bytes: int
    wall_seconds: float
    intact: int
    duplicates: int
    corrupt: int

    @property
    def ok(self) -> bool:
        """Every message came back once and intact."""
        return self.intact == self.config.count and not (self.duplicates or self.corrupt)

    def publish_rate(self) -> float:
        """Messages published per second."""
        return self.config.count / self.publish_seconds

    def consume_rate(self) -> float:
        """Messages consumed (and FINished) per second."""
        return self.config.count / self.consume_seconds


def body(sequence: int, tail: bytes) -> bytes:
    """Message ``sequence``'s body."""
    return SEQUENCE.pack(sequence) + tail


def publish_commands(count: int, size: int, batch: int) -> List[bytes]:
    """
    Every command the producer sends, built before the clock starts so that
    the client's own work stays out of the publish rate.
    """
    tail = filler(size)
    if batch == 0:
        return [pub(TOPIC, body(i, tail)) for i in range(count)]
    return [
        mpub(TOPIC, [body(i, tail) for i in range(start, min(start + batch, count))])
        for start in range(0, count, batch)
    ]


def publish(address: Tuple[str, int], commands: Sequence[bytes]) -> float:
    """
    Send each command and wait for its ``OK``.

    :return: the seconds it took.
    :raises ProtocolError: nsqd refused one (``E_MPUB_FAILED`` when a
        memory queue is full, say).
    """
    with V2Connection(address) as connection:
        send = connection.send
        expect = connection.expect
        start = time.perf_counter()
        for command in commands:
            send(command)
            expect(OK)
        return time.perf_counter() - start


def consume(config: RunConfig, address: Tuple[str, int]) -> Tuple[float, int, int, int]:
    """
    Subscribe, take every message and ``FIN`` it, checking the bodies.

    FINs for everything one ``recv`` brought are sent in one write.

    :return: ``(seconds, intact, duplicates, corrupt)``.
    :raises BenchError: no message came for ``config.timeout`` seconds.
    :raises ProtocolError: nsqd sent an error frame.
    """
    count = config.count
    size = config.size
    tail = filler(size)
    seen = bytearray(count)
    intact = duplicates = corrupt = 0
    unpack = SEQUENCE.unpack_from
    header = MESSAGE_HEADER_LENGTH
    with V2Connection(address) as connection:
        connection.send(sub(TOPIC, CHANNEL))
        connection.expect(OK)
        start = time.perf_counter()
        connection.send(rdy(config.rdy))
        while intact + corrupt < count:
            try:
                frames = connection.frames(time.monotonic() + config.timeout)
            except (TimeoutError, OSError) as error:
                raise BenchError(
                    "consumer stalled after %d of %d messages (%s)"
                    % (intact + corrupt, count, str(error) or type(error).__name__)
                )
            fins = []
            for frame_type, data in frames:
                if frame_type == FRAME_TYPE_MESSAGE:
                    fins.append(fin(data[10:header]))
                    if len(data) != header + size or data[header + 8 :] != tail:
                        corrupt += 1
                        continue
                    (sequence,) = unpack(data, header)
                    if sequence >= count:
                        corrupt += 1
                    elif seen[sequence]:
                        duplicates += 1
                    else:
                        seen[sequence] = 1
                        intact += 1
                elif frame_type == FRAME_TYPE_ERROR:
                    raise BenchError("nsqd sent an %s while consuming" % (describe_frame(frame_type, data),))
            if fins:
                connection.send(b"".join(fins))
        seconds = time.perf_counter() - start
    return seconds, intact, duplicates, corrupt


def run(config: RunConfig) -> RunResult:
    """
    One run: start nsqd, create the channel, publish, measure the data
    path, consume, stop nsqd.

    :raises NSQDStartError: nsqd did not start (its output is in the message).
    :raises BenchError: a phase failed (with nsqd's output).
    """
    commands = publish_commands(config.count, config.size, config.batch)
    with tempfile.TemporaryDirectory(prefix="txnsq-bench-") as root:
        data_path = os.path.join(root, "data")
        os.mkdir(data_path)
        child = NSQDChild(config.nsqd_args(data_path), config.command, os.path.join(root, "nsqd.log"))
        _progress("%s: starting %s" % (config.method, " ".join(child.argv)))
        wall_start = time.perf_counter()
        child.start()
        phase = "creating the channel"
        try:
            address = child.tcp_address
            create_channel(address, TOPIC, CHANNEL)
            phase = "publishing"
            _progress("publishing %d messages of %d bytes" % (config.count, config.size))
            publish_seconds = publish(address, commands)
            disk_bytes = directory_size(data_path)
            phase = "consuming"
            _progress("published in %.2f s; consuming" % (publish_seconds,))
            consume_seconds, intact, duplicates, corrupt = consume(config, address)
            _progress("consumed in %.2f s" % (consume_seconds,))
        except (NSQDError, BenchError, OSError) as error:
            raise BenchError("%s: %s\n%s" % (phase, error, child.describe_exit()))
        finally:
            status = child.stop()
        wall_seconds = time.perf_counter() - wall_start
        if status not in (0, None, -15):  # -15: SIGTERM ended it unhandled
            _progress("warning: nsqd exited with status %s" % (status,))
    return RunResult(
        config,
        publish_seconds,
        consume_seconds,
        disk_bytes,
        wall_seconds,
        intact,
        duplicates,
        corrupt,
    )


def _progress(message: str) -> None:
    progress("disk_spill", message)


def _megabytes(count: float) -> str:
    return "%.1f MB" % (count / 1e6,)


def result_rows(results: Sequence[RunResult]) -> List[Tuple[str, ...]]:
    """The table's header, then one row per run."""
    header = (
        "storage", "mem-queue", "N", "size", "publish",
        "pub msg/s", "pub MB/s", "sub msg/s", "sub MB/s",
        "disk after pub", "wall s", "check",
    )
    rows: List[Tuple[str, ...]] = [header]
    for result in results:
        config = result.config
        body_bytes = config.count * config.size
        if result.ok:
            check = "ok"
        else:
            check = "%d/%d intact, %d dup, %d corrupt" % (
                result.intact, config.count, result.duplicates, result.corrupt
            )
        rows.append((
            config.storage,
            "{:,}".format(config.mem_queue_size),
            "{:,}".format(config.count),
            str(config.size),
            config.method,
            "{:,.0f}".format(result.publish_rate()),
            "%.2f" % (body_bytes / result.publish_seconds / 1e6,),
            "{:,.0f}".format(result.consume_rate()),
            "%.2f" % (body_bytes / result.consume_seconds / 1e6,),
            _megabytes(result.disk_bytes),
            "%.1f" % (result.wall_seconds,),
            check,
        ))
    return rows


def comparison(spilled: RunResult, memory: RunResult) -> str:
    """How long the spilling run took next to the all-in-memory one."""
    return ("cost of spilling (%s, %s vs memory): publishing took %.2f×, "
            "consuming %.2f× the memory run's time") % (
        spilled.config.method,
        spilled.config.storage,
        memory.publish_rate() / spilled.publish_rate(),
        memory.consume_rate() / spilled.consume_rate(),
    )


def parse_args(argv: Optional[Sequence[str]] = None) -> argparse.Namespace:
    """The command line; exits with a usage message on bad values."""
    parser = argparse.ArgumentParser(
        description="Benchmark nsqd's disk-spill path: publish N messages "
        "into a channel holding --mem-queue-size of them in memory, then "
        "consume them. Run by hand; not part of the test suite.",
    )
    parser.add_argument("--storage", default="disk", help="nsqd --storage backend (default: disk)")
    parser.add_argument("--mem-queue-size", type=int, default=10000,
                        help="nsqd --mem-queue-size (default: 10000)")
    parser.add_argument("--count", type=int, default=200000,
                        help="messages to publish and consume (default: 200000)")
    parser.add_argument("--size", type=int, default=100,
                        help="body size in bytes, at least 8 (default: 100)")
    parser.add_argument("--batch", type=int, default=100,
                        help="messages per MPUB (default: 100)")
    parser.add_argument("--pub", action="store_true",
                        help="also run with single PUBs (one round trip per message)")
    parser.add_argument("--nsqd", default=None, metavar="COMMAND",
                        help="command running nsqd, shell-quoted (default: the nsqd "
                        "script next to this Python, else python -m txnsq.nsqd)")
    parser.add_argument("--sync-every", type=int, default=None,
                        help="nsqd --sync-every (default: nsqd's own, 2500)")
    parser.add_argument("--compare-memory", action="store_true",
                        help="also run with --storage memory and a --mem-queue-size "
                        "holding every message, to show the cost of spilling")
    parser.add_argument("--rdy", type=int, default=2500,
                        help="the consumer's RDY count (default: 2500, nsqd's max)")
    parser.add_argument("--timeout", type=float, default=60.0,
                        help="give up when no message arrives for this many seconds (default: 60)")
    args = parser.parse_args(argv)
    if args.size < SEQUENCE.size:
        parser.error("--size must be at least %d (bodies carry a sequence number)" % (SEQUENCE.size,))
    for name in ("count", "batch", "rdy"):
        if getattr(args, name) < 1:
            parser.error("--%s must be at least 1" % (name,))
    return args


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Run the benchmark, print the table; 0 when every check passed."""
    args = parse_args(argv)
    command = tuple(nsqd_command(args.nsqd))
    batches = [args.batch] + ([0] if args.pub else [])
    pairs: List[Tuple[RunConfig, Optional[RunConfig]]] = []
    for batch in batches:
        main_run = RunConfig(args.storage, args.mem_queue_size, args.count, args.size,
                             batch, args.sync_every, command, args.rdy, args.timeout)
        memory_run = None
        if args.compare_memory:
            memory_run = RunConfig("memory", max(args.count, args.mem_queue_size), args.count,
                                   args.size, batch, args.sync_every, command, args.rdy,
                                   args.timeout)
        pairs.append((main_run, memory_run))
    results: List[RunResult] = []
    comparisons: List[str] = []
    try:
        for main_run, memory_run in pairs:
            spilled = run(main_run)
            results.append(spilled)
            if memory_run is not None:
                memory = run(memory_run)
                results.append(memory)
                comparisons.append(comparison(spilled, memory))
    except NSQDStartError as error:
        sys.stderr.write("disk_spill: nsqd did not start: %s\n" % (error,))
        if "unknown storage backend" in str(error):
            sys.stderr.write("disk_spill: this nsqd has no %r backend; try --storage memory "
                             "--mem-queue-size %d\n" % (args.storage, args.count))
        return 1
    except BenchError as error:
        sys.stderr.write("disk_spill: run failed while %s\n" % (error,))
        if "is full" in str(error):
            sys.stderr.write("disk_spill: a memory queue refuses messages past "
                             "--mem-queue-size; give at least --count (%d)\n" % (args.count,))
        if results:
            print(table(result_rows(results), left=(0, 4, 11)))
        return 1
    print(table(result_rows(results), left=(0, 4, 11)))
    for line in comparisons:
        print(line)
    return 0 if all(result.ok for result in results) else 1


if __name__ == "__main__":
    sys.exit(main())
