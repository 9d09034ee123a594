#!/usr/bin/env python
"""
nsqd's performance table: how fast it takes messages in and hands them out,
and how much memory it holds per queued message and per idle connection.

Each scenario starts a fresh nsqd child process (``127.0.0.1:0``, a fresh
temporary ``--data-path``, the scenario's ``--mem-queue-size`` and
``--storage``) and stops it at the end. A flow scenario creates the topic
and its channel (``SUB`` on a connection that then closes), reads nsqd's
resident memory, runs ``bench_writer`` for ``--runfor``, reads the memory
again (the peak: everything published is queued), then runs
``bench_reader`` with the scenario's number of consumer connections until
it has received every message published (or, with ``--read runfor``, for
``--runfor``). The idle-connections scenario opens N connections that send
the magic and ``IDENTIFY`` and then stay idle, and reports what each one
costs nsqd in resident memory.

Run by hand; not part of the test suite::

    python bench/system/nsqd_perf.py                          # the whole table
    python bench/system/nsqd_perf.py --quick                  # --runfor 2s
    python bench/system/nsqd_perf.py --scenarios 'consumers-*,idle-connections'
    python bench/system/nsqd_perf.py --nsqd '/usr/local/bin/nsqd' --scenarios '*-disk,consumers-*'

No Twisted: the standard library and txnsq's sans-IO codec (see ``harness``).
"""

from __future__ import annotations

import argparse
import fnmatch
import os
import platform
import re
import sys
import tempfile
import time
from dataclasses import dataclass, field
from typing import List, Optional, Sequence, Tuple

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

from bench.common.process import process_rss_bytes, raise_open_files_limit  # noqa: E402
from bench.common.report import progress, table  # noqa: E402
from bench.system.bench_reader import ReaderConfig, ReadResult, run_reader  # noqa: E402
from bench.system.bench_writer import WriteResult, WriterConfig, run_writer  # noqa: E402
from bench.system.loadgen import WorkerError, default_processes, format_go_duration, parse_go_duration  # noqa: E402
from bench.system.harness import (  # noqa: E402
    NSQDChild,
    NSQDError,
    V2Connection,
    create_channel,
    nsqd_command,
)
from txnsq.protocol.v2_client import OK, identify, pub  # noqa: E402

TOPIC = "perf"
CHANNEL = "ch"

#: Open files kept free beside the idle connections, in this process and in
#: nsqd (listeners, log, data files, the workers' pipes).
FD_MARGIN = 200

#: Idle connections are opened this many at a time, each batch sending its
#: IDENTIFYs before reading the replies. Kept below the listen backlog
#: (Twisted's default is 50), so that no connect waits for a SYN retry.
CONNECT_BATCH = 32

#: How long nsqd is left alone before its memory is read again.
SETTLE_SECONDS = 1.0

#: nsqd's output lines worth reporting.
_TROUBLE = re.compile(r"^.*(?:ERROR|FATAL|Traceback|Unhandled).*$", re.MULTILINE)

_MIB = 1024 * 1024


class ScenarioError(Exception):
    """A scenario could not finish; the message says where, with nsqd's output."""


@dataclass(frozen=True)
class Scenario:
    """
    One row of the table.

    :ivar kind: ``flow`` (write, then read) or ``idle`` (idle connections).
    :ivar consumers: consumer connections (flow), or connections (idle).
    :ivar capped: the writer stops after ``mem_queue_size`` messages, so
        that every message stays in memory (and a memory queue has room).
    :ivar skip: when not empty, why the scenario is not run.
    """

    name: str
    kind: str
    size: int = 0
    mem_queue_size: int = 10000
    storage: str = "disk"
    consumers: int = 1
    capped: bool = False
    skip: str = ""

    def nsqd_args(self, data_path: str) -> List[str]:
        """
        nsqd's flags. ``--storage`` only when it is not ``disk``, nsqd's
        default, so that an nsqd without the flag (Go's) runs the rest.
        """
        args = [
            "--tcp-address=127.0.0.1:0",
            "--http-address=127.0.0.1:0",
            "--data-path=%s" % (data_path,),
            "--mem-queue-size=%d" % (self.mem_queue_size,),
        ]
        if self.storage != "disk":
            args.append("--storage=%s" % (self.storage,))
        return args


def _count_label(count: int) -> str:
    """``1m``, ``10k``: for scenario names."""
    if count % 1_000_000 == 0:
        return "%dm" % (count // 1_000_000,)
    if count % 1_000 == 0:
        return "%dk" % (count // 1_000,)
    return str(count)


def all_scenarios(idle_connections: int) -> List[Scenario]:
    """
    Every scenario, in table order: 100 and 200-byte bodies × a
    ``--mem-queue-size`` of 1,000,000 and 10,000 × ``memory`` and ``disk``
    storage, with one consumer; 1, 4 and 64 consumers (200 B, 1,000,000 in
    memory); ``idle_connections`` idle connections.
    """
    scenarios = []
    for size in (100, 200):
        for mem_queue_size in (1_000_000, 10_000):
            for storage in ("memory", "disk"):
                skip = ""
                if storage == "memory" and mem_queue_size < 100_000:
                    skip = ("the memory backend refuses messages past --mem-queue-size, "
                            "and %s messages are gone in a few ms of publishing"
                            % ("{:,}".format(mem_queue_size),))
                scenarios.append(Scenario(
                    name="%db-%s-%s" % (size, _count_label(mem_queue_size), storage),
                    kind="flow",
                    size=size,
                    mem_queue_size=mem_queue_size,
                    storage=storage,
                    consumers=1,
                    capped=storage == "memory",
                    skip=skip,
                ))
    for consumers in (1, 4, 64):
        scenarios.append(Scenario(
            name="consumers-%d" % (consumers,),
            kind="flow",
            size=200,
            mem_queue_size=1_000_000,
            storage="disk",
            consumers=consumers,
            capped=True,
        ))
    scenarios.append(Scenario(name="idle-connections", kind="idle", consumers=idle_connections))
    return scenarios


def select_scenarios(scenarios: Sequence[Scenario], patterns: str) -> List[Scenario]:
    """
    The scenarios whose names match one of the comma-separated
    ``patterns`` (shell wildcards), in table order.

    :raises ValueError: a pattern matches no scenario.
    """
    wanted = [pattern.strip() for pattern in patterns.split(",") if pattern.strip()]
    for pattern in wanted:
        if not any(fnmatch.fnmatchcase(scenario.name, pattern) for scenario in scenarios):
            raise ValueError("no scenario matches %r; the scenarios are: %s"
                             % (pattern, ", ".join(scenario.name for scenario in scenarios)))
    return [scenario for scenario in scenarios
            if any(fnmatch.fnmatchcase(scenario.name, pattern) for pattern in wanted)]


@dataclass(frozen=True)
class Settings:
    """What applies to every scenario (from the command line)."""

    command: Tuple[str, ...]
    runfor: float
    writers: int
    readers: int
    batch_size: int
    rdy: int
    drain: bool
    stall: float


@dataclass
class Result:
    """
    One scenario's outcome; the figures stay ``None`` where it did not get
    that far.

    :ivar rss_before: nsqd's resident bytes before the load (after the
        channel was created, or before the idle connections).
    :ivar rss_peak: after the writes (flow), or with every idle connection
        open.
    :ivar notes: lines printed under the table.
    """

    scenario: Scenario
    write: Optional[WriteResult] = None
    read: Optional[ReadResult] = None
    rss_before: Optional[int] = None
    rss_peak: Optional[int] = None
    connections: int = 0
    check: str = ""
    ok: bool = True
    notes: List[str] = field(default_factory=list)

    def fail(self, check: str, note: str) -> None:
        """Mark it failed: ``check`` in the table, ``note`` below it."""
        self.ok = False
        self.check = check
        self.notes.append(note)


def _progress(message: str) -> None:
    progress("nsqd_perf", message)


def _rss_growth(result: Result) -> Optional[int]:
    if result.rss_before is None or result.rss_peak is None:
        return None
    return result.rss_peak - result.rss_before


def _trouble(child: NSQDChild, result: Result) -> None:
    """Note the error lines nsqd printed, and a bad exit status."""
    lines = _TROUBLE.findall(child.output())
    if lines:
        result.notes.append("nsqd printed %d error line(s); the first: %s"
                            % (len(lines), lines[0].strip()[:300]))


def _stop(child: NSQDChild, result: Result) -> None:
    """Stop nsqd; a crash or a bad exit status fails the scenario."""
    running = child.running()
    status = child.stop()
    if not running:
        result.fail("nsqd died", "nsqd exited during the run with status %s" % (status,))
    elif status not in (0, -15):  # -15: SIGTERM ended it unhandled
        result.notes.append("nsqd exited with status %s after SIGTERM" % (status,))
    _trouble(child, result)


def _start_nsqd(scenario: Scenario, settings: Settings, root: str, result: Result) -> Optional[NSQDChild]:
    """A fresh nsqd for ``scenario``, its data and log under ``root``; ``None``
    (with ``result`` failed) when it does not start."""
    data_path = os.path.join(root, "data")
    os.mkdir(data_path)
    child = NSQDChild(scenario.nsqd_args(data_path), settings.command,
                      os.path.join(root, "nsqd.log"))
    _progress("%s: starting %s" % (scenario.name, " ".join(child.argv)))
    try:
        child.start()
    except NSQDError as error:
        result.fail("no nsqd", "nsqd did not start: %s" % (error,))
        return None
    return child


def run_flow(scenario: Scenario, settings: Settings) -> Result:
    """
    One flow scenario: fresh nsqd, channel, write for ``runfor``, read nsqd's
    memory, read everything back, stop nsqd.
    """
    result = Result(scenario)
    with tempfile.TemporaryDirectory(prefix="txnsq-perf-") as root:
        child = _start_nsqd(scenario, settings, root, result)
        if child is None:
            return result
        phase = "creating the channel"
        try:
            address = child.tcp_address
            create_channel(address, TOPIC.encode("ascii"), CHANNEL.encode("ascii"))
            result.rss_before = process_rss_bytes(child.pid)
            phase = "writing"
            write = run_writer(WriterConfig(
                address=address,
                topic=TOPIC,
                size=scenario.size,
                batch_size=settings.batch_size,
                runfor=settings.runfor,
                processes=settings.writers,
                count=scenario.mem_queue_size if scenario.capped else 0,
            ))
            result.write = write
            result.rss_peak = process_rss_bytes(child.pid)
            _progress("%s: bench_writer %s" % (scenario.name, write.summary()))
            phase = "reading"
            read = run_reader(ReaderConfig(
                address=address,
                topic=TOPIC,
                channel=CHANNEL,
                size=scenario.size,
                rdy=settings.rdy,
                runfor=settings.runfor,
                connections=scenario.consumers,
                processes=min(scenario.consumers, settings.readers),
                count=write.count if settings.drain else 0,
                stall=settings.stall,
            ))
            result.read = read
            _progress("%s: bench_reader %s" % (scenario.name, read.summary()))
        except (WorkerError, NSQDError, OSError) as error:
            result.fail("failed", "%s while %s: %s" % (scenario.name, phase, error))
        finally:
            _stop(child, result)
    if result.read is not None and result.write is not None and result.ok:
        _check_flow(result, result.write, result.read, settings.drain)
    return result


def _check_flow(result: Result, write: WriteResult, read: ReadResult, drain: bool) -> None:
    """Compare what was read with what was written."""
    if read.bad_size:
        result.fail("bad bodies", "%s: %d messages had a body of another size than %d"
                    % (result.scenario.name, read.bad_size, result.scenario.size))
    elif drain and read.count != write.count:
        result.fail("%d/%d" % (read.count, write.count),
                    "%s: read %d messages of the %d written (%s)" % (
                        result.scenario.name, read.count, write.count,
                        "duplicates" if read.count > write.count else "stalled"))
    elif not drain and read.count > write.count:
        result.fail("%d/%d" % (read.count, write.count),
                    "%s: read %d messages, more than the %d written"
                    % (result.scenario.name, read.count, write.count))
    else:
        result.check = "ok" if drain else "{:,} left".format(write.count - read.count)


def run_idle(scenario: Scenario, settings: Settings, wanted: int) -> Result:
    """
    The idle-connections scenario: fresh nsqd; open ``scenario.consumers``
    connections (magic, ``IDENTIFY``, its ``OK``), let nsqd settle, read its
    memory, check that it still takes a ``PUB``, close them.
    """
    result = Result(scenario)
    count = scenario.consumers
    if count < wanted:
        result.notes.append(
            "idle-connections: {:,} connections, not {:,}: the hard limit on open files "
            "(ulimit -Hn) leaves no more".format(count, wanted))
    with tempfile.TemporaryDirectory(prefix="txnsq-perf-") as root:
        child = _start_nsqd(scenario, settings, root, result)
        if child is None:
            return result
        connections: List[V2Connection] = []
        try:
            address = child.tcp_address
            time.sleep(SETTLE_SECONDS)
            result.rss_before = process_rss_bytes(child.pid)
            command = identify({"client_id": "idle", "hostname": "idle", "user_agent": "nsqd_perf.py"})
            started = time.monotonic()
            while len(connections) < count:
                batch = [V2Connection(address)
                         for _ in range(min(CONNECT_BATCH, count - len(connections)))]
                connections.extend(batch)
                for connection in batch:
                    connection.send(command)
                for connection in batch:
                    connection.expect(OK)
            seconds = time.monotonic() - started
            result.connections = len(connections)
            _progress("%s: %d connections identified in %.2f s"
                      % (scenario.name, len(connections), seconds))
            time.sleep(SETTLE_SECONDS)
            result.rss_peak = process_rss_bytes(child.pid)
            with V2Connection(address) as publisher:
                publisher.send(pub(TOPIC, b"still serving"))
                publisher.expect(OK)
            for connection in connections:
                connection.close()
            connections = []
            time.sleep(SETTLE_SECONDS)
            after = process_rss_bytes(child.pid)
            growth = _rss_growth(result)
            if growth is not None and after is not None and result.rss_before is not None:
                result.notes.append(
                    "idle-connections: %s connections opened and identified in %.2f s "
                    "(%.0f/s); nsqd RSS %.1f -> %.1f MiB (%s B per connection), "
                    "%.1f MiB once they closed" % (
                        "{:,}".format(result.connections), seconds, result.connections / seconds,
                        result.rss_before / _MIB, (result.rss_before + growth) / _MIB,
                        "{:,.0f}".format(growth / result.connections), after / _MIB))
            result.check = "ok"
        except (NSQDError, OSError) as error:
            result.fail("failed", "%s after %d connections: %s"
                        % (scenario.name, len(connections), error))
        finally:
            for connection in connections:
                connection.close()
            _stop(child, result)
    return result


def _rate(count: int, seconds: float) -> str:
    return "{:,.0f}".format(count / seconds) if seconds > 0 else "-"


def _megabytes(count: int, size: int, seconds: float) -> str:
    return "%.2f" % (count * size / seconds / 1e6,) if seconds > 0 else "-"


def row(result: Result) -> Tuple[str, ...]:
    """One line of the table, ``-`` where there is no figure."""
    scenario = result.scenario
    rss = "-" if result.rss_peak is None else "%.1f" % (result.rss_peak / _MIB,)
    growth = _rss_growth(result)
    if scenario.kind == "idle":
        per = "-"
        if growth is not None and result.connections:
            per = "{:,.0f}/conn".format(growth / result.connections)
        return (scenario.name, "-", "{:,}".format(scenario.mem_queue_size), scenario.storage,
                "{:,} idle".format(result.connections or scenario.consumers), "-",
                "-", "-", "-", "-", rss, per, result.check or "skipped")
    write = result.write
    read = result.read
    cells = [scenario.name, str(scenario.size), "{:,}".format(scenario.mem_queue_size),
             scenario.storage, str(scenario.consumers)]
    if write is None:
        cells += ["-", "-", "-"]
    else:
        cells += ["{:,}".format(write.count), _rate(write.count, write.duration),
                  _megabytes(write.count, write.size, write.duration)]
    if read is None:
        cells += ["-", "-"]
    else:
        cells += [_rate(read.count, read.duration),
                  _megabytes(read.count, read.size, read.duration)]
    per = "-"
    if growth is not None and write is not None and write.count:
        per = "{:,.0f}".format(growth / write.count)
    cells += [rss, per, result.check or ("skipped" if scenario.skip else "-")]
    return tuple(cells)


HEADER = ("scenario", "size", "mem-queue", "storage", "consumers", "msgs",
          "ingest msg/s", "ingest MB/s", "drain msg/s", "drain MB/s",
          "RSS MiB", "RSS B/msg", "check")


def result_table(results: Sequence[Result]) -> str:
    """The results as an aligned text table, one row per scenario."""
    return table([HEADER] + [row(result) for result in results], left=(0, 3, len(HEADER) - 1))


def parse_args(argv: Optional[Sequence[str]] = None) -> argparse.Namespace:
    """The command line; exits with a usage message on bad values."""
    parser = argparse.ArgumentParser(
        description="nsqd's performance table: ingest and drain rates, memory per "
        "queued message and per idle connection, one fresh nsqd per scenario. "
        "Run by hand; not part of the test suite.",
        allow_abbrev=False,
    )
    parser.add_argument("--nsqd", default=None, metavar="COMMAND",
                        help="command running nsqd, shell-quoted (default: the nsqd "
                        "script next to this Python, else python -m txnsq.nsqd)")
    parser.add_argument("--scenarios", default="*", metavar="NAMES",
                        help="comma-separated scenario names or shell patterns "
                        "(default: all; --list shows them)")
    parser.add_argument("--list", action="store_true", help="list the scenarios and exit")
    parser.add_argument("--runfor", type=parse_go_duration, default=None, metavar="DURATION",
                        help="how long the writer runs, a Go duration (default: 10s, "
                        "2s with --quick)")
    parser.add_argument("--quick", action="store_true",
                        help="a short run: --runfor 2s, and 2,000 idle connections "
                        "unless --idle-connections is given")
    parser.add_argument("--writers", type=int, default=default_processes(),
                        help="writer processes, each with one connection (default: the "
                        "number of CPUs, %(default)s here)")
    parser.add_argument("--readers", type=int, default=default_processes(),
                        help="at most this many reader processes; a scenario's consumer "
                        "connections are spread over them (default: the number of "
                        "CPUs, %(default)s here)")
    parser.add_argument("--batch-size", type=int, default=200,
                        help="messages per MPUB (default: 200)")
    parser.add_argument("--rdy", type=int, default=2500,
                        help="RDY count per consumer connection (default: 2500)")
    parser.add_argument("--read", choices=("drain", "runfor"), default="drain",
                        help="drain: read until every message written came back "
                        "(default); runfor: read for --runfor")
    parser.add_argument("--stall", type=parse_go_duration, default=30.0, metavar="DURATION",
                        help="give a drain up after this long with no message (default: 30s)")
    parser.add_argument("--idle-connections", type=int, default=None, metavar="N",
                        help="connections of the idle-connections scenario (default: 10000)")
    args = parser.parse_args(argv)
    if args.runfor is None:
        args.runfor = 2.0 if args.quick else 10.0
    if args.idle_connections is None:
        args.idle_connections = 2000 if args.quick else 10000
    for name in ("writers", "readers", "batch_size", "rdy", "idle_connections"):
        if getattr(args, name) < 1:
            parser.error("--%s must be at least 1" % (name.replace("_", "-"),))
    return args


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Run the chosen scenarios and print the table; 0 when every one passed."""
    args = parse_args(argv)
    wanted = args.idle_connections
    try:
        chosen = select_scenarios(all_scenarios(wanted), args.scenarios)
    except ValueError as error:
        sys.stderr.write("nsqd_perf: %s\n" % (error,))
        return 2
    if args.list:
        for scenario in chosen:
            print(scenario.name)
        return 0
    idle = wanted
    if any(scenario.kind == "idle" for scenario in chosen):
        # nsqd inherits the limit: one socket per connection on both sides.
        idle = max(0, min(wanted, raise_open_files_limit(wanted + FD_MARGIN) - FD_MARGIN))
    settings = Settings(
        command=tuple(nsqd_command(args.nsqd)),
        runfor=args.runfor,
        writers=args.writers,
        readers=args.readers,
        batch_size=args.batch_size,
        rdy=args.rdy,
        drain=args.read == "drain",
        stall=args.stall,
    )
    print("nsqd: %s" % (" ".join(settings.command),))
    print("client: %s %s, %d CPUs; --runfor %s, %d writer processes, at most %d reader "
          "processes, MPUB of %d, RDY %d, read: %s" % (
              platform.python_implementation(), platform.python_version(),
              os.cpu_count() or 0, format_go_duration(settings.runfor), settings.writers,
              settings.readers, settings.batch_size, settings.rdy, args.read))
    sys.stdout.flush()
    results: List[Result] = []
    for scenario in chosen:
        if scenario.skip:
            result = Result(scenario, check="skipped")
            result.notes.append("%s skipped: %s" % (scenario.name, scenario.skip))
        elif scenario.kind == "idle":
            result = run_idle(Scenario(scenario.name, "idle", consumers=idle), settings, wanted)
        else:
            result = run_flow(scenario, settings)
        results.append(result)
        for note in result.notes:
            _progress(note)
    print()
    print(result_table(results))
    notes = [note for result in results for note in result.notes]
    if any(scenario.capped and not scenario.skip for scenario in chosen):
        notes.insert(0, "memory and consumers-* rows write at most --mem-queue-size "
                     "messages, so that all of them stay in memory")
    if notes:
        print()
        for note in notes:
            print(note)
    return 0 if all(result.ok for result in results) else 1


if __name__ == "__main__":
    sys.exit(main())
