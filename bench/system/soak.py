"""
The fault suite at full scale: nsqd stopped with SIGTERM and started again
20 times under load, killed with SIGKILL 10 times (with
``--mem-queue-size=0 --sync-every=1``), killed 0.5 s after 20 deferred
publishes (with the defaults, and with the durable flags), storms of 5,000 and 10,000 connections, and 1,000,000 fuzzed
frames with a control round trip after
every batch.  Prints one progress line per step to stderr and a markdown
table to stdout; exits 1 if any acceptance bound is missed.

    python bench/system/soak.py                         # everything, full scale
    python bench/system/soak.py --parts storm,fuzz --fuzz-frames 100000

The machinery is the CI-scale tests' (``tests/integration/faults.py``),
so this runs from the repository root in a venv where txnsq is installed
(it imports Twisted and the ``tests`` package, unlike the other
benchmarks).  Every part starts its own nsqd (the ``nsqd`` script next to
this Python) on 127.0.0.1 and a fresh data directory.
"""

from __future__ import annotations

import argparse
import datetime
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Any, Generator, List, Optional, Sequence

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

from twisted.internet import task  # noqa: E402  (needs the path above)
from twisted.internet.defer import inlineCallbacks  # noqa: E402

from bench.common.report import markdown_table  # noqa: E402
from tests.integration.faults import (  # noqa: E402
    CLEAN_EXIT,
    DeferredReport,
    FuzzReport,
    LoadReport,
    NSQDRunner,
    StormReport,
    connection_storm,
    durable_flags,
    raise_open_files_limit,
    run_deferred_kill,
    run_fuzz,
    run_restart_loop,
)
from tests.integration.v2_strategies import FrameBatches, command_pool  # noqa: E402

PARTS = ("sigterm", "sigkill", "deferred", "storm", "fuzz")

#: The acceptance bounds.
STORM_BOUND_CONNECTIONS = 5000
STORM_BOUND_SECONDS = 2.0
RSS_BOUND = 0.20


def progress(message: str) -> None:
    """A progress line on stderr, with the time."""
    sys.stderr.write("[soak] %s %s\n" % (time.strftime("%H:%M:%S"), message))
    sys.stderr.flush()


def commit() -> str:
    """The repository's commit (with ``-dirty`` if the tree has changes), or ``unknown``."""
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    try:
        head = subprocess.check_output(["git", "-C", root, "rev-parse", "--short", "HEAD"], text=True).strip()
        dirty = subprocess.call(["git", "-C", root, "diff", "--quiet", "HEAD"])
    except (OSError, subprocess.CalledProcessError):
        return "unknown"
    return head + ("-dirty" if dirty else "")


class Row:
    """One line of the table: the fault, its scale, the verdict and the figures."""

    def __init__(self, fault: str, scale: str, result: str, passed: Optional[bool], figures: str) -> None:
        self.fault = fault
        self.scale = scale
        self.result = result
        self.passed = passed
        self.figures = figures

    def cells(self) -> List[str]:
        verdict = {True: "pass", False: "**FAIL**", None: "—"}[self.passed]
        return [self.fault, self.scale, self.result, verdict, self.figures]


def _seconds(values: Sequence[float]) -> str:
    if not values:
        return "—"
    return "median %.2f s, max %.2f s" % (statistics.median(values), max(values))


def loop_row(report: LoadReport, rate: float, durable: bool) -> Row:
    """The row of a restart loop."""
    exits_ok = (
        all(status == CLEAN_EXIT for status in report.exits)
        if report.signal == "TERM"
        else all(status.signal == 9 for status in report.exits)
    )
    clean = exits_ok and report.foreign == 0 and not report.errors
    if report.signal == "TERM":
        fault = "SIGTERM, restart, under load"
        passed = clean and not report.lost and report.duplicates == 0
        result = "%d lost, %d duplicates" % (len(report.lost), report.duplicates)
    else:
        fault = "SIGKILL, restart, under load (`%s`)" % (" ".join(durable_flags()),)
        passed = clean and not report.lost
        result = "%d lost; %d duplicates (allowed: at-least-once)" % (len(report.lost), report.duplicates)
    figures = (
        "%s acknowledged of %s sent (%d unanswered at a stop); %s delivered, %s deliveries; "
        "exits: %s; nsqd start (exec → listening) %s; %.0f s"
        % (
            format(report.acknowledged, ","), format(report.sent, ","), report.unanswered,
            format(report.delivered, ","), format(report.deliveries, ","),
            "all clean (0)" if report.signal == "TERM" and exits_ok
            else "all killed (9)" if exits_ok else ", ".join(map(str, report.exits)),
            _seconds(report.restart_seconds), report.seconds,
        )
    )
    if report.lost:
        figures += "; first lost: %s" % (report.lost[:5],)
    if report.errors or report.foreign:
        figures += "; errors %r, foreign %d" % (report.errors[:3], report.foreign)
    scale = "%d cycles, %s msg/s, one consumer RDY 100 FIN each" % (report.cycles, format(int(rate), ","))
    return Row(fault, scale, result, passed, figures)


def deferred_row(report: DeferredReport, durable: bool) -> Row:
    """
    The row of deferred messages killed with nsqd: with the durable flags
    every one must be kept; with the defaults (as with Go nsqd) they are
    in memory only, and the row is a comparison.
    """
    flags = "`%s`" % (" ".join(durable_flags()),) if durable else "default flags"
    return Row(
        "SIGKILL %.1f s after deferred PUBs" % (report.kill_after,),
        "%d `POST /pub?defer=60000`, %s" % (report.published, flags),
        "%d of %d kept" % (report.kept, report.published),
        report.kept == report.published if durable else None,
        "queued, in flight or deferred in the channel after the restart",
    )


def storm_row(report: StormReport) -> Row:
    """The row of a connection storm."""
    all_in = report.connected == report.count == report.answered and not report.failures
    passed: Optional[bool] = all_in
    bound = ""
    if report.count == STORM_BOUND_CONNECTIONS:
        passed = all_in and report.connect_seconds <= STORM_BOUND_SECONDS
        bound = " (bound %.0f s)" % (STORM_BOUND_SECONDS,)
    result = "opened in %.2f s%s" % (report.connect_seconds, bound)
    figures = "%s connected, %s answered IDENTIFY (%.2f s more)" % (
        format(report.connected, ","), format(report.answered, ","), report.answer_seconds)
    if report.failures:
        figures += "; failures: %s" % ("; ".join(report.failures[:3]),)
    return Row("connection storm, one after another", format(report.count, ",") + " connections",
               result, passed, figures)


def fuzz_row(report: FuzzReport, pool: int) -> Row:
    """The row of a fuzz run."""
    passed = (
        not report.crashed and not report.round_trip_failures and report.hung == 0
        and report.rss_growth <= RSS_BOUND
    )
    result = "%d crashes, %d failed control round trips, RSS %+.1f%%" % (
        int(report.crashed), len(report.round_trip_failures), report.rss_growth * 100)
    figures = (
        "%s frames (from a pool of %s drawn by Hypothesis) in %s batches on %s connections, "
        "%d not closed by nsqd; %s round trips; RSS start %.1f MB, peak %.1f MB, end %.1f MB; %.0f s"
        % (
            format(report.frames, ","), format(pool, ","), format(report.batches, ","),
            format(report.connections, ","), report.hung, format(report.round_trips, ","),
            report.rss_start / 1e6, report.rss_peak / 1e6, report.rss_end / 1e6, report.seconds,
        )
    )
    answers = sorted(report.answers.items(), key=lambda item: -item[1])
    figures += "; nsqd's answers: %s" % (
        ", ".join("%s %s" % (kind, format(count, ",")) for kind, count in answers),)
    if report.round_trip_failures:
        figures += "; %s" % (report.round_trip_failures[:3],)
    return Row("fuzzed V2 frames, control round trip after each batch",
               format(report.frames, ",") + " frames", result, passed, figures)


def soak_table(rows: Sequence[Row], command: str, started: str, revision: str) -> str:
    """The markdown table, with how it was made (``revision``: the commit when the run started)."""
    lines = [
        "soak run %s to %s, commit %s, %s %s, %d CPUs" % (
            started, datetime.datetime.now(datetime.timezone.utc).strftime("%H:%M UTC"),
            revision, platform.python_implementation(), platform.python_version(), os.cpu_count() or 0),
        "",
        "    " + command,
        "",
        markdown_table([["fault", "scale", "result", "acceptance", "figures"]] + [row.cells() for row in rows]),
    ]
    return "\n".join(lines)


@inlineCallbacks
def soak(reactor: Any, options: argparse.Namespace) -> Generator[Any, Any, int]:
    """Run the parts asked for; print the table; 0 if every bound held."""
    started = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M")
    revision = commit()
    root = tempfile.mkdtemp(prefix="txnsq-soak-", dir=options.data_dir)
    rows: List[Row] = []
    parts = options.parts.split(",")
    runners: List[NSQDRunner] = []

    def runner(name: str, flags: Sequence[str]) -> NSQDRunner:
        path = os.path.join(root, name)
        os.makedirs(path)
        made = NSQDRunner(reactor, path, flags)
        runners.append(made)
        return made

    try:
        if "sigterm" in parts:
            progress("SIGTERM loop: %d cycles at %d msg/s" % (options.sigterm_cycles, options.rate))
            report = yield run_restart_loop(
                reactor, runner("sigterm", options.nsqd_flags), "TERM",
                options.sigterm_cycles, options.rate, options.cycle_seconds, progress=progress)
            progress(report.summary())
            rows.append(loop_row(report, options.rate, False))
        if "sigkill" in parts:
            progress("SIGKILL loop: %d cycles at %d msg/s" % (options.sigkill_cycles, options.rate))
            report = yield run_restart_loop(
                reactor, runner("sigkill", durable_flags() + options.nsqd_flags), "KILL",
                options.sigkill_cycles, options.rate, options.cycle_seconds, progress=progress)
            progress(report.summary())
            rows.append(loop_row(report, options.rate, True))
        if "deferred" in parts:
            for durable in (False, True):
                flags = (durable_flags() if durable else []) + options.nsqd_flags
                progress("deferred: %d DPUBs, SIGKILL, flags %s" % (options.deferred, flags))
                deferred = yield run_deferred_kill(
                    reactor, runner("deferred%d" % (durable,), flags), options.deferred)
                progress(repr(deferred))
                yield runners[-1].stop()
                rows.append(deferred_row(deferred, durable))
        if "storm" in parts:
            counts = [int(count) for count in options.storm.split(",")]
            raise_open_files_limit(2 * max(counts) + 200)
            for count in counts:
                storm_runner = runner("storm%d" % (count,), options.nsqd_flags)
                yield storm_runner.start()
                progress("storm: %d connections" % (count,))
                storm = yield connection_storm("127.0.0.1", storm_runner.tcp_port, count)
                progress(repr(storm))
                yield storm_runner.stop()
                rows.append(storm_row(storm))
        if "fuzz" in parts:
            fuzz_runner = runner("fuzz", ["--mem-queue-size=100"] + options.nsqd_flags)
            yield fuzz_runner.start()
            progress("fuzz: drawing a pool of %d commands" % (options.fuzz_pool,))
            batches = FrameBatches(
                command_pool(options.fuzz_pool, options.fuzz_seed), options.fuzz_seed,
                options.fuzz_sessions, options.fuzz_commands)
            progress("fuzz: %d frames" % (options.fuzz_frames,))
            fuzz = yield run_fuzz(reactor, fuzz_runner, lambda: [batches()], options.fuzz_frames,
                                  progress=progress)
            progress(repr(fuzz))
            if not fuzz.crashed:
                yield fuzz_runner.stop()
            rows.append(fuzz_row(fuzz, options.fuzz_pool))
    finally:
        for made in runners:
            for process in made.processes:
                process.kill()
        if not options.keep:
            shutil.rmtree(root, ignore_errors=True)
    print(soak_table(rows, options.command, started, revision))
    sys.stdout.flush()
    if any(row.passed is False for row in rows):
        raise SystemExit(1)
    return 0


def parse(argv: Sequence[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--parts", default=",".join(PARTS), help="which parts, of %s" % (",".join(PARTS),))
    parser.add_argument("--sigterm-cycles", type=int, default=20)
    parser.add_argument("--sigkill-cycles", type=int, default=10)
    parser.add_argument("--rate", type=int, default=5000, help="messages a second during the loops")
    parser.add_argument("--cycle-seconds", type=float, default=3.0, help="load before each signal")
    parser.add_argument("--deferred", type=int, default=20, help="deferred messages published before SIGKILL")
    parser.add_argument("--storm", default="5000,10000", help="connection counts, one storm each")
    parser.add_argument("--fuzz-frames", type=int, default=1000000)
    parser.add_argument("--fuzz-pool", type=int, default=20000, help="commands drawn by Hypothesis")
    parser.add_argument("--fuzz-seed", type=int, default=0)
    parser.add_argument("--fuzz-sessions", type=int, default=8, help="most connections in a batch")
    parser.add_argument("--fuzz-commands", type=int, default=40, help="most commands on a connection")
    parser.add_argument("--nsqd-flag", dest="nsqd_flags", action="append", default=[],
                        help="one more nsqd flag for every part (repeatable)")
    parser.add_argument("--data-dir", default=None, help="where the data directories go (a temporary one)")
    parser.add_argument("--keep", action="store_true", help="keep the data directories")
    options = parser.parse_args(argv)
    unknown = set(options.parts.split(",")) - set(PARTS)
    if unknown:
        parser.error("unknown parts: %s" % (", ".join(sorted(unknown)),))
    options.command = "python bench/system/soak.py " + " ".join(argv)
    return options


def main(argv: Optional[Sequence[str]] = None) -> None:
    options = parse(sys.argv[1:] if argv is None else argv)
    task.react(lambda reactor: soak(reactor, options))


if __name__ == "__main__":
    main()
