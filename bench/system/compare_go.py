#!/usr/bin/env python
"""
Go nsqd against txnsq's nsqd, same run, driven by Go's own load generators.

How fast is txnsq's nsqd next to Go's nsqd on this machine, measured the
same way at the same time? Each round runs, for each ``--memq`` in turn,
a fresh Go nsqd and then a fresh txnsq nsqd (interleaved, so that both see
the machine in the same mood), each on 127.0.0.1 with free ports, a
temporary ``--data-path`` and ``--mem-queue-size`` set to that ``--memq``.
On each one it sends ``POST /topic/create?topic=sub_bench`` and
``POST /channel/create?topic=sub_bench&channel=ch``, then runs Go's
``bench_writer -size 100 -batch-size 200 -runfor 10s`` and then Go's
``bench_reader -size 100 -channel ch -runfor 10s``, and reads the rate
(``ops/s``) from each one's summary line. It prints each run, then a table
per ``--memq`` with the rates of every round, the ratios txnsq/Go, and
the median of the per-round ratios; ``uptime`` before and after, and the
machine: CPUs, Python, kernel, and both nsqd's ``--version`` (txnsq's
says whether its hot path is compiled).

Run by hand; not part of the test suite, and nothing in the project needs
Go: ``--go-bin DIR`` names a folder holding Go NSQ v1.3's ``nsqd``,
``bench_writer`` and ``bench_reader`` (built from nsqio/nsq)::

    python bench/system/compare_go.py --go-bin DIR
    python bench/system/compare_go.py --go-bin DIR --rounds 1 --runfor 3s
    python bench/system/compare_go.py --go-bin DIR --memq 1000000 --gomaxprocs 1
    python bench/system/compare_go.py --go-bin DIR --txnsq-cmd 'pypy-venv/bin/nsqd'

No Twisted: the standard library and txnsq's sans-IO codec (see ``harness``).
"""

from __future__ import annotations

import argparse
import os
import platform
import re
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from typing import Dict, List, Mapping, Optional, Sequence, Tuple

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

from bench.common.report import markdown_table  # noqa: E402
from bench.system.loadgen import parse_go_duration  # noqa: E402
from bench.system.harness import NSQDChild, NSQDError, free_ports, http_post  # noqa: E402

TOPIC = "sub_bench"
CHANNEL = "ch"
KINDS = ("go", "txnsq")

#: How much longer than ``--runfor`` a load generator may take.
TOOL_SLACK_SECONDS = 60.0

#: Go's summary line: ``duration: 10.0002s - 34.885mb/s - 365798.578ops/s - 2.734us/op``.
_SUMMARY = re.compile(r"duration: (\S+) - ([0-9.]+)mb/s - ([0-9.]+)ops/s")


class CompareError(Exception):
    """A run failed; the message says why, with the output that shows it."""


@dataclass
class Rate:
    """One load generator's summary: messages per second over its run."""

    ops: float
    duration: float

    @property
    def count(self) -> float:
        """About how many messages it moved."""
        return self.ops * self.duration


@dataclass
class Run:
    """One nsqd's writer and reader."""

    writer: Rate
    reader: Rate

    @property
    def drained(self) -> bool:
        """Whether the reader emptied the channel (its rate is then a floor)."""
        return self.reader.count >= 0.999 * self.writer.count


def run_tool(path: str, args: Sequence[str], timeout: float) -> Rate:
    """Run a Go load generator; the rate on its summary line."""
    argv = [path] + list(args)
    shown = " ".join(shlex.quote(arg) for arg in argv)
    try:
        done = subprocess.run(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, timeout=timeout)
    except subprocess.TimeoutExpired as expired:
        output = (expired.output or b"").decode("utf-8", "replace")
        raise CompareError("%s ran past %.0f s:\n%s" % (shown, timeout, output))
    output = done.stdout.decode("utf-8", "replace")
    found = _SUMMARY.findall(output)
    if done.returncode != 0 or not found:
        raise CompareError("%s exited with status %d:\n%s" % (shown, done.returncode, output))
    duration, _, ops = found[-1]
    return Rate(float(ops), parse_go_duration(duration))


def measure(
    kind: str, command: Sequence[str], env: Mapping[str, str], memq: int,
    options: argparse.Namespace, workdir: str,
) -> Run:
    """A fresh nsqd: create the topic and channel, then the writer, then the reader."""
    tcp_port, http_port = free_ports(2)
    data_path = tempfile.mkdtemp(prefix="%s-data-" % (kind,), dir=workdir)
    args = [
        "--tcp-address=127.0.0.1:%d" % (tcp_port,),
        "--http-address=127.0.0.1:%d" % (http_port,),
        "--data-path=%s" % (data_path,),
        "--mem-queue-size=%d" % (memq,),
    ]
    log_path = os.path.join(workdir, "%s-%d.log" % (kind, memq))
    child = NSQDChild(args, command, log_path, env)
    child.start()
    try:
        http = (child.host, http_port)
        http_post(http, "/topic/create?topic=%s" % (TOPIC,))
        http_post(http, "/channel/create?topic=%s&channel=%s" % (TOPIC, CHANNEL))
        address = "-nsqd-tcp-address=%s:%d" % child.tcp_address
        timeout = parse_go_duration(options.runfor) + TOOL_SLACK_SECONDS
        size = ["-size", str(options.size)]
        runfor = ["-runfor", options.runfor]
        try:
            writer = run_tool(os.path.join(options.go_bin, "bench_writer"),
                              [address] + size + ["-batch-size", str(options.batch_size)] + runfor,
                              timeout)
            reader = run_tool(os.path.join(options.go_bin, "bench_reader"),
                              [address] + size + ["-channel", CHANNEL] + runfor, timeout)
        except CompareError as error:
            raise CompareError("%s\n%s" % (error, child.describe_exit()))
        if not child.running():
            raise CompareError(child.describe_exit())
        return Run(writer, reader)
    finally:
        child.stop()
        shutil.rmtree(data_path, ignore_errors=True)


def version(argv: Sequence[str]) -> str:
    """The last line ``ARGV --version`` prints."""
    try:
        done = subprocess.run(list(argv) + ["--version"], stdin=subprocess.DEVNULL,
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=60)
    except OSError as error:
        raise CompareError("cannot run %s: %s" % (argv[0], error))
    lines = done.stdout.decode("utf-8", "replace").strip().splitlines()
    if done.returncode != 0 or not lines:
        raise CompareError("%s --version exited with status %d:\n%s"
                           % (" ".join(argv), done.returncode, "\n".join(lines[:5])))
    return lines[-1]


def uptime() -> str:
    """What ``uptime`` prints, or the load average where there is no ``uptime``."""
    try:
        done = subprocess.run(["uptime"], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                              timeout=10)
        if done.returncode == 0 and done.stdout.strip():
            return done.stdout.decode("utf-8", "replace").strip()
    except (OSError, subprocess.TimeoutExpired):
        pass
    return "load average: %.2f, %.2f, %.2f" % os.getloadavg()


def cpus() -> int:
    """The CPUs this process may run on, as ``nproc`` counts them."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 0


def thousands(value: float) -> str:
    return "{:,.0f}".format(value)


def report(results: Dict[Tuple[int, int], Dict[str, Run]], memqs: Sequence[int], rounds: int) -> str:
    """Per ``--memq``: each round's rates and ratios, then the medians."""
    header = ["memq", "round", "Go writer", "txnsq writer", "writer ratio",
              "Go reader", "txnsq reader", "reader ratio"]
    rows = [header]
    summary = []
    drained = False
    for memq in memqs:
        writer_ratios: List[float] = []
        reader_ratios: List[float] = []
        columns: Dict[str, List[float]] = {"gw": [], "tw": [], "gr": [], "tr": []}
        for number in range(1, rounds + 1):
            go, tx = results[(number, memq)]["go"], results[(number, memq)]["txnsq"]
            writer_ratios.append(tx.writer.ops / go.writer.ops)
            reader_ratios.append(tx.reader.ops / go.reader.ops)
            for key, value in (("gw", go.writer.ops), ("tw", tx.writer.ops),
                               ("gr", go.reader.ops), ("tr", tx.reader.ops)):
                columns[key].append(value)
            marks = ["*" if run.drained else "" for run in (go, tx)]
            drained = drained or go.drained or tx.drained
            rows.append([str(memq), str(number),
                         thousands(go.writer.ops), thousands(tx.writer.ops),
                         "%.2f" % (writer_ratios[-1],),
                         thousands(go.reader.ops) + marks[0], thousands(tx.reader.ops) + marks[1],
                         "%.2f" % (reader_ratios[-1],)])
        median = statistics.median
        writer_median = median(writer_ratios)
        reader_median = median(reader_ratios)
        rows.append([str(memq), "median",
                     thousands(median(columns["gw"])), thousands(median(columns["tw"])),
                     "%.2f" % (writer_median,),
                     thousands(median(columns["gr"])), thousands(median(columns["tr"])),
                     "%.2f" % (reader_median,)])
        summary.append("memq %d: writer %.2fx, reader %.2fx"
                       % (memq, writer_median, reader_median))
    text = "msg/s; ratio = txnsq/Go; the median row: the median of each column, and the " \
           "median of the per-round ratios\n\n" + markdown_table(rows)
    if drained:
        text += ("\n\n* the reader emptied the channel before --runfor ended: "
                 "its rate is a floor (what the writer published, over --runfor)")
    text += "\n\nmedian of the per-round ratios txnsq/Go over %d round(s):\n  %s" % (
        rounds, "\n  ".join(summary))
    return text


def memq_list(text: str) -> List[int]:
    values = [int(part) for part in text.split(",") if part.strip()]
    if not values or min(values) < 0:
        raise ValueError(text)
    return values


def positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise ValueError(text)
    return value


def go_duration(text: str) -> str:
    if parse_go_duration(text) <= 0:
        raise ValueError(text)
    return text


def parse_args(argv: Optional[Sequence[str]] = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description="Go nsqd against txnsq's nsqd in the same run, with Go's bench_writer "
                    "and bench_reader (the same-run method).")
    parser.add_argument("--go-bin", required=True, metavar="DIR",
                        help="the folder with Go's nsqd, bench_writer and bench_reader")
    parser.add_argument("--txnsq-cmd", metavar="COMMAND",
                        help="the command that runs txnsq's nsqd, shell-quoted "
                             "(default: this Python with -m txnsq.nsqd)")
    parser.add_argument("--memq", type=memq_list, default=memq_list("1000000,10000"),
                        metavar="N[,N...]",
                        help="--mem-queue-size of both nsqd, one configuration each "
                             "(default: 1000000,10000; 10000 spills to disk)")
    parser.add_argument("--size", type=positive, default=100, help="message size (100)")
    parser.add_argument("--batch-size", type=positive, default=200,
                        help="bench_writer's MPUB batch (200)")
    parser.add_argument("--runfor", type=go_duration, default="10s",
                        help="each load generator's -runfor, a Go duration (10s)")
    parser.add_argument("--rounds", type=positive, default=3, help="rounds (3)")
    parser.add_argument("--gomaxprocs", type=positive,
                        help="GOMAXPROCS for Go's nsqd (default: Go's, every CPU); "
                             "the load generators keep Go's default")
    options = parser.parse_args(argv)
    for name in ("nsqd", "bench_writer", "bench_reader"):
        path = os.path.join(options.go_bin, name)
        if not (os.path.isfile(path) and os.access(path, os.X_OK)):
            parser.error("--go-bin: no executable %s" % (path,))
    return options


def main(argv: Optional[Sequence[str]] = None) -> int:
    options = parse_args(argv)
    go_command = [os.path.join(options.go_bin, "nsqd")]
    go_env = {} if options.gomaxprocs is None else {"GOMAXPROCS": str(options.gomaxprocs)}
    tx_command = (shlex.split(options.txnsq_cmd) if options.txnsq_cmd
                  else [sys.executable, "-m", "txnsq.nsqd"])
    commands = {"go": (go_command, go_env), "txnsq": (tx_command, {})}

    def say(text: str = "") -> None:
        print(text, flush=True)

    try:
        go_version = version(go_command)
        tx_version = version(tx_command)
    except CompareError as error:
        print("compare_go: %s" % (error,), file=sys.stderr)
        return 1
    say("machine: %d CPUs, %s %s (%s), %s %s" % (
        cpus(), platform.python_implementation(), platform.python_version(),
        sys.executable, platform.system(), platform.release()))
    say("Go:    %s (%s, GOMAXPROCS=%s)" % (go_version, go_command[0],
                                          options.gomaxprocs or "default"))
    say("txnsq: %s (%s)" % (tx_version, " ".join(shlex.quote(arg) for arg in tx_command)))
    say("load:  -size %d -batch-size %d -runfor %s; %d round(s), memq %s"
        % (options.size, options.batch_size, options.runfor, options.rounds,
           ",".join(str(memq) for memq in options.memq)))
    say("uptime before: %s" % (uptime(),))
    say()
    results: Dict[Tuple[int, int], Dict[str, Run]] = {}
    with tempfile.TemporaryDirectory(prefix="compare_go-") as workdir:
        try:
            for number in range(1, options.rounds + 1):
                for memq in options.memq:
                    for kind in KINDS:
                        command, env = commands[kind]
                        run = measure(kind, command, env, memq, options, workdir)
                        results.setdefault((number, memq), {})[kind] = run
                        say("round %d memq %-8d %-5s writer %9s msg/s  reader %9s msg/s%s" % (
                            number, memq, kind, thousands(run.writer.ops),
                            thousands(run.reader.ops),
                            "  (the reader emptied the channel)" if run.drained else ""))
        except (CompareError, NSQDError, OSError) as error:
            print("compare_go: failed: %s" % (error,), file=sys.stderr)
            return 1
    say()
    say(report(results, options.memq, options.rounds))
    say()
    say("uptime after: %s" % (uptime(),))
    return 0


if __name__ == "__main__":
    sys.exit(main())
