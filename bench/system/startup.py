#!/usr/bin/env python
"""
How long nsqd takes to start and how much memory it holds once idle.

Each run spawns a fresh nsqd child (``--tcp-address`` and ``--http-address``
``127.0.0.1:0``, a fresh temporary ``--data-path``), reads the HTTP port
from its ``HTTP: listening on HOST:PORT`` line and asks ``GET /ping`` until
the answer is ``200 OK``. The start time runs from just before the
``exec`` to that first 200. The process is then left alone for
``--idle`` seconds, and its resident memory (``VmRSS`` in
``/proc/PID/status``) and its peak (``VmHWM``) are read before it is sent
SIGTERM. Several runs are made; the table gives the minimum and the median
of each figure.

Run by hand; not part of the test suite::

    python bench/system/startup.py                                  # the nsqd next to this Python
    python bench/system/startup.py --runs 10 \\
        --nsqd venv/bin/nsqd --label CPython --nsqd pypy-venv/bin/nsqd --label PyPy
    python bench/system/startup.py --importtime 25                  # where the import time goes

``--nsqd`` may be given more than once: one row per command, named by the
``--label`` of the same rank (else by the command). With
``--importtime N``, one more start of each CPython nsqd runs with
``PYTHONPROFILEIMPORTTIME=1`` (``python -X importtime``) and the ``N``
imports that took longest, counting what they imported, are printed
(PyPy has no such report). ``--env NAME=VALUE`` sets an environment
variable for the children (``PYPY_GC_NURSERY``, ``PYPY_GC_MAX``, …).

No Twisted: the standard library and txnsq's sans-IO codec (see ``harness``).
"""

from __future__ import annotations

import argparse
import http.client
import os
import re
import shlex
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from typing import IO, Dict, List, Optional, Sequence, Tuple

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

from bench.common.process import process_cpu_seconds  # noqa: E402
from bench.common.report import table  # noqa: E402
from bench.system.harness import nsqd_command  # noqa: E402

#: How long one start may take before the run is given up.
START_TIMEOUT = 30.0

#: How long nsqd may take to exit after SIGTERM.
STOP_TIMEOUT = 10.0

_HTTP_LISTENING = re.compile(rb"HTTP: listening on (\S+):([0-9]+)")
_IMPORT_LINE = re.compile(r"^import time:\s+(\d+)\s+\|\s+(\d+)\s+\|(\s*)(\S+)\s*$")
_MIB = 1024 * 1024


class StartError(Exception):
    """nsqd exited, or did not answer ``/ping``, in time; carries its output."""


@dataclass
class Sample:
    """
    One start: seconds to the first ``/ping`` 200, the CPU seconds nsqd had
    used by then (less swayed than the wall clock by other work on the
    machine), and its memory once idle.
    """

    start_seconds: float
    cpu_seconds: float
    rss_bytes: int
    peak_bytes: int


@dataclass
class Row:
    """Every run of one nsqd command."""

    label: str
    samples: List[Sample] = field(default_factory=list)


def proc_status(pid: int) -> Dict[str, int]:
    """``VmRSS`` and ``VmHWM`` of ``pid`` in bytes (empty where /proc has none)."""
    found: Dict[str, int] = {}
    try:
        with open("/proc/%d/status" % (pid,), "rb") as status:
            for line in status:
                name, _, rest = line.partition(b":")
                if name in (b"VmRSS", b"VmHWM"):
                    # "VmRSS:	  123456 kB": the kernel's kB are KiB.
                    found[name.decode("ascii")] = int(rest.split()[0]) * 1024
    except OSError:
        pass
    return found


class _OutputReader(threading.Thread):
    """Drains the child's output, noting its HTTP listening address."""

    def __init__(self, stream: IO[bytes]) -> None:
        threading.Thread.__init__(self, daemon=True)
        self.stream = stream
        self.lines: List[bytes] = []
        self.http: Optional[Tuple[str, int]] = None
        self.listening = threading.Event()

    def run(self) -> None:
        for line in iter(self.stream.readline, b""):
            self.lines.append(line)
            if self.http is None:
                found = _HTTP_LISTENING.search(line)
                if found is not None:
                    host = found.group(1).decode("ascii").strip("[]")
                    self.http = (host, int(found.group(2)))
                    self.listening.set()
        self.listening.set()  # end of output: the child is gone

    def text(self) -> str:
        return b"".join(self.lines).decode("utf-8", "replace")


def _ping(address: Tuple[str, int]) -> bool:
    """Whether ``GET /ping`` answers 200 now."""
    connection = http.client.HTTPConnection(address[0], address[1], timeout=5)
    try:
        connection.request("GET", "/ping")
        return connection.getresponse().status == 200
    except OSError:
        return False
    finally:
        connection.close()


def start_once(
    command: Sequence[str], idle: float, env: Dict[str, str], extra: Sequence[str]
) -> Tuple[Sample, str]:
    """
    Start nsqd once, time it to the first ``/ping`` 200, let it idle, read
    its memory and stop it.

    :return: the sample and everything the child printed.
    :raises StartError: it exited or did not answer within ``START_TIMEOUT``.
    """
    with tempfile.TemporaryDirectory(prefix="nsqd-startup-") as data_path:
        argv = list(command) + [
            "--tcp-address=127.0.0.1:0",
            "--http-address=127.0.0.1:0",
            "--data-path=" + data_path,
        ] + list(extra)
        began = time.monotonic()
        process = subprocess.Popen(
            argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env
        )
        assert process.stdout is not None
        reader = _OutputReader(process.stdout)
        reader.start()
        try:
            deadline = began + START_TIMEOUT
            if not reader.listening.wait(START_TIMEOUT) or reader.http is None:
                raise StartError("nsqd printed no HTTP listening line")
            while not _ping(reader.http):
                if process.poll() is not None:
                    raise StartError("nsqd exited with status %d" % (process.returncode,))
                if time.monotonic() > deadline:
                    raise StartError("nsqd did not answer /ping within %s s" % (START_TIMEOUT,))
                time.sleep(0.001)
            elapsed = time.monotonic() - began
            cpu = process_cpu_seconds(process.pid) or 0.0
            time.sleep(idle)
            status = proc_status(process.pid)
            if process.poll() is not None or "VmRSS" not in status:
                raise StartError("nsqd exited while idle")
        except StartError as error:
            process.kill()
            process.wait()
            reader.join()
            raise StartError(
                "%s\ncommand: %s\n--- output ---\n%s--- end ---"
                % (error, " ".join(shlex.quote(arg) for arg in argv), reader.text())
            )
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(STOP_TIMEOUT)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        reader.join()
        return Sample(elapsed, cpu, status["VmRSS"], status.get("VmHWM", 0)), reader.text()


def import_report(
    command: Sequence[str], env: Dict[str, str], extra: Sequence[str], top: int
) -> str:
    """
    One start with ``PYTHONPROFILEIMPORTTIME=1``: the ``top`` imports with
    the largest cumulative time, and the total.
    """
    env = dict(env, PYTHONPROFILEIMPORTTIME="1")
    sample, output = start_once(command, 0.0, env, extra)
    rows: List[Tuple[int, int, int, str]] = []
    for line in output.splitlines():
        found = _IMPORT_LINE.match(line)
        if found is not None:
            depth = (len(found.group(3)) - 1) // 2
            rows.append((int(found.group(2)), int(found.group(1)), depth, found.group(4)))
    if not rows:
        return "  (no import times reported: not CPython?)\n"
    total = sum(cumulative for cumulative, _, depth, _ in rows if depth == 0)
    lines = [
        "  imports: %d modules, %.0f ms at top level (start %.3f s with the report on)"
        % (len(rows), total / 1000.0, sample.start_seconds),
        "  %10s %10s  %s" % ("cumul. ms", "self ms", "module (depth)"),
    ]
    for cumulative, own, depth, name in sorted(rows, reverse=True)[:top]:
        lines.append("  %10.1f %10.1f  %s (%d)" % (cumulative / 1000.0, own / 1000.0, name, depth))
    return "\n".join(lines) + "\n"


def _median(values: Sequence[float]) -> float:
    return statistics.median(values)


def format_table(rows: Sequence[Row]) -> str:
    """The figures of every command, one line each."""
    lines = [["nsqd", "runs", "start min", "median", "CPU min", "median", "RSS min", "median", "peak med"]]
    for row in rows:
        starts = [sample.start_seconds for sample in row.samples]
        rss = [sample.rss_bytes / _MIB for sample in row.samples]
        peaks = [sample.peak_bytes / _MIB for sample in row.samples]
        cpus = [sample.cpu_seconds for sample in row.samples]
        lines.append(
            [row.label[-28:], str(len(row.samples))]
            + ["%.3f s" % (value,) for value in (min(starts), _median(starts), min(cpus), _median(cpus))]
            + ["%.1f MB" % (value,) for value in (min(rss), _median(rss), _median(peaks))]
        )
    return table(lines)


def parse_args(argv: Optional[Sequence[str]]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--nsqd",
        action="append",
        default=[],
        metavar="COMMAND",
        help="the nsqd to start (a shell-quoted command line); may be repeated "
        "(default: the nsqd script next to this Python)",
    )
    parser.add_argument(
        "--label",
        action="append",
        default=[],
        help="a name for the table's row of the --nsqd of the same rank; may be repeated",
    )
    parser.add_argument("--runs", type=int, default=5, help="starts per command (default 5)")
    parser.add_argument(
        "--idle",
        type=float,
        default=1.0,
        help="seconds left idle after the first /ping before memory is read (default 1)",
    )
    parser.add_argument(
        "--env",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="an environment variable for the children; may be repeated",
    )
    parser.add_argument(
        "--importtime",
        type=int,
        default=0,
        metavar="N",
        help="also print the N slowest imports of each (CPython) nsqd",
    )
    parser.add_argument(
        "extra", nargs="*", help="more nsqd flags, after --, e.g. -- --mem-queue-size=100"
    )
    return parser.parse_args(argv)


def main(argv: Optional[Sequence[str]] = None) -> int:
    args = parse_args(argv)
    env = dict(os.environ)
    env["PYTHONUNBUFFERED"] = "1"  # the listening line arrives as it is printed
    # Measure what a deployed nsqd does: the uncounted first start writes the
    # bytecode caches that the counted ones read (an editable install under
    # PYTHONDONTWRITEBYTECODE=1, as tox sets it, would compile every module
    # of txnsq at every start). --env PYTHONDONTWRITEBYTECODE=1 measures that.
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    for setting in args.env:
        name, _, value = setting.partition("=")
        env[name] = value
    commands = args.nsqd or [" ".join(shlex.quote(arg) for arg in nsqd_command())]
    rows: List[Row] = []
    for rank, text in enumerate(commands):
        command = shlex.split(text)
        row = Row(args.label[rank] if rank < len(args.label) else text)
        rows.append(row)
        start_once(command, 0.0, env, args.extra)  # warm the page cache, not counted
        for _ in range(args.runs):
            sample, _ = start_once(command, args.idle, env, args.extra)
            row.samples.append(sample)
            print(
                "%s: %.3f s (%.3f s CPU), %.1f MB idle, %.1f MB peak"
                % (
                    text,
                    sample.start_seconds,
                    sample.cpu_seconds,
                    sample.rss_bytes / _MIB,
                    sample.peak_bytes / _MIB,
                ),
                file=sys.stderr,
            )
        if args.importtime:
            print("%s:" % (text,))
            print(import_report(command, env, args.extra, args.importtime))
    print(
        "exec -> first GET /ping 200 (wall clock, and nsqd's CPU time by then), "
        "and VmRSS after %.1f s idle" % (args.idle,)
    )
    if args.env:
        print("environment: %s" % (" ".join(args.env),))
    print(format_table(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
