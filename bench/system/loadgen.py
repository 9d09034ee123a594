"""
What the load generators ``bench_writer.py``, ``bench_reader.py`` and
``bench_latency.py`` share: Go NSQ's flag values and log line, and the
worker processes; and what ``bench_writer.py`` and ``bench_reader.py``
share besides: their common flags, the parsing of their command line,
and the run that ends in Go's summary line.

Go's ``bench/bench_writer`` and ``bench/bench_reader`` run ``GOMAXPROCS``
goroutines, each with a connection of its own; the clock starts once every
one is connected, and stops when the last one is done. CPython runs one
thread at a time, so here each worker is an OS process (:func:`run_workers`):
it connects and prepares its commands, reports that it is ready, waits for
the start, runs, and sends back what it counted. The start is one
:class:`multiprocessing.Event`; the parent times the run.

No Twisted, like ``harness``.
"""

from __future__ import annotations

import argparse
import datetime
import multiprocessing
import os
import re
import sys
import time
from dataclasses import dataclass
from typing import Any, Callable, List, Optional, Sequence, Tuple, TypeVar

from bench.system.harness import NSQDError

__all__ = [
    "WorkerError",
    "GoSummary",
    "WorkerRun",
    "add_deadline_argument",
    "add_processes_argument",
    "add_runfor_and_address_arguments",
    "default_processes",
    "format_go_duration",
    "go_summary",
    "log",
    "parse_address",
    "parse_command_line",
    "parse_deadline",
    "parse_go_duration",
    "run_and_log",
    "run_workers",
    "shared_counters",
    "split_evenly",
    "wait_until",
]

#: ``time.Parse("2006-01-02 15:04:05", ...)``, the ``--deadline`` layout.
DEADLINE_FORMAT = "%Y-%m-%d %H:%M:%S"

#: How long a worker may take to connect and prepare before the start.
READY_TIMEOUT = 60.0

_NANOSECONDS = {
    "ns": 1,
    "us": 1_000,
    "\u00b5s": 1_000,  # MICRO SIGN
    "\u03bcs": 1_000,  # GREEK SMALL LETTER MU
    "ms": 1_000_000,
    "s": 1_000_000_000,
    "m": 60_000_000_000,
    "h": 3_600_000_000_000,
}
_DURATION_PART = re.compile("([0-9]*(?:\\.[0-9]*)?)(ns|us|\u00b5s|\u03bcs|ms|s|m|h)")

#: A worker: called in its own process with its job and ``ready``, which
#: it calls once connected; ``ready`` returns at the start. What the worker
#: returns goes back to the parent (it must pickle).
Worker = Callable[[Any, Callable[[], None]], Any]


class WorkerError(Exception):
    """A worker failed, or exited without reporting; the message says why."""


def parse_go_duration(text: str) -> float:
    """
    Seconds in a Go duration (``10s``, ``1m30s``, ``250ms``, ``1.5h``), as
    ``time.ParseDuration`` reads it.

    :raises ValueError: it is not one (argparse reports it as a bad value).
    """
    body = text.strip()
    sign = 1
    if body[:1] in ("-", "+"):
        sign = -1 if body[0] == "-" else 1
        body = body[1:]
    if body == "0":
        return 0.0
    if not body:
        raise ValueError("invalid duration %r" % (text,))
    position = 0
    total = 0.0
    while position < len(body):
        found = _DURATION_PART.match(body, position)
        if found is None or found.group(1) in ("", "."):
            raise ValueError("invalid duration %r" % (text,))
        total += float(found.group(1)) * _NANOSECONDS[found.group(2)]
        position = found.end()
    return sign * total / 1e9


def _fraction(value: int, unit: int) -> str:
    """``value / unit`` with Go's digits: no trailing zeros, no dot if whole."""
    whole, rest = divmod(value, unit)
    digits = str(rest).rjust(len(str(unit)) - 1, "0").rstrip("0")
    return "%d.%s" % (whole, digits) if digits else str(whole)


def format_go_duration(seconds: float) -> str:
    """``seconds`` as Go's ``time.Duration.String()`` prints it: ``10.000213s``."""
    nanoseconds = round(seconds * 1e9)
    sign = "-" if nanoseconds < 0 else ""
    nanoseconds = abs(nanoseconds)
    if nanoseconds == 0:
        return "0s"
    if nanoseconds < 1_000:
        return "%s%dns" % (sign, nanoseconds)
    if nanoseconds < 1_000_000:
        return sign + _fraction(nanoseconds, 1_000) + "\u00b5s"
    if nanoseconds < 1_000_000_000:
        return sign + _fraction(nanoseconds, 1_000_000) + "ms"
    hours, rest = divmod(nanoseconds, 3_600_000_000_000)
    minutes, rest = divmod(rest, 60_000_000_000)
    text = _fraction(rest, 1_000_000_000) + "s"
    if hours or minutes:
        text = "%dm" % (minutes,) + text
    if hours:
        text = "%dh" % (hours,) + text
    return sign + text


def parse_deadline(text: str) -> datetime.datetime:
    """
    A ``--deadline`` (``2006-01-02 15:04:05``, UTC as Go's ``time.Parse``
    reads a time without a zone), or ``datetime.min`` for ``""``.

    :raises ValueError: it has another layout.
    """
    if not text:
        return datetime.datetime.min.replace(tzinfo=datetime.timezone.utc)
    return datetime.datetime.strptime(text, DEADLINE_FORMAT).replace(tzinfo=datetime.timezone.utc)


def parse_address(text: str) -> Tuple[str, int]:
    """
    ``host:port`` (``[v6]:port`` too) as ``(host, port)``.

    :raises ValueError: there is no port.
    """
    host, separator, port = text.rpartition(":")
    if not separator or not port.isdigit():
        raise ValueError("expected <addr>:<port>, got %r" % (text,))
    return host.strip("[]") or "127.0.0.1", int(port)


def default_processes() -> int:
    """Go's default worker count, ``GOMAXPROCS``: the number of CPUs."""
    return os.cpu_count() or 1


def split_evenly(total: int, parts: int) -> List[int]:
    """``total`` split into ``parts`` whole numbers differing by at most one."""
    base, extra = divmod(total, parts)
    return [base + (1 if index < extra else 0) for index in range(parts)]


def log(program: str, message: str) -> None:
    """
    A line on stderr as Go's ``log`` prints it after
    ``log.SetPrefix("[program] ")``: prefix, local date and time, message.
    """
    stamp = time.strftime("%Y/%m/%d %H:%M:%S")
    sys.stderr.write("[%s] %s %s\n" % (program, stamp, message))
    sys.stderr.flush()


def go_summary(duration: float, count: int, size: int) -> str:
    """
    The figures of Go's ``bench_writer`` and ``bench_reader`` line:
    ``duration: D - X.XXXmb/s - Y.YYYops/s - Z.ZZZus/op``.

    As Go computes them: "mb" is MiB (1024 × 1024 bytes) of bodies, and
    us/op divides the duration truncated to whole microseconds by the count.
    """
    if duration <= 0 or count == 0:
        return "duration: %s - 0.000mb/s - 0.000ops/s - +Infus/op" % (
            format_go_duration(duration),
        )
    return "duration: %s - %.03fmb/s - %.03fops/s - %.03fus/op" % (
        format_go_duration(duration),
        count * size / duration / 1024 / 1024,
        count / duration,
        int(duration * 1e6) / count,
    )


def wait_until(deadline: datetime.datetime, program: str) -> None:
    """Sleep until ``deadline`` (a UTC time), logging it as Go's tools do."""
    now = datetime.datetime.now(datetime.timezone.utc)
    delay = (deadline - now).total_seconds()
    log(program, "sleeping until %s (%s)" % (
        deadline.strftime("%Y-%m-%d %H:%M:%S +0000 UTC"), format_go_duration(delay)))
    if delay > 0:
        time.sleep(delay)


@dataclass
class WorkerRun:
    """
    One run of workers.

    :ivar started: :func:`time.monotonic` at the start signal. On Linux this
        clock is the system's ``CLOCK_MONOTONIC``, so workers' own readings
        compare with it.
    :ivar finished: :func:`time.monotonic` when the last worker reported.
    :ivar results: what each worker returned, in the order of the jobs.
    """

    started: float
    finished: float
    results: List[Any]

    @property
    def duration(self) -> float:
        """Seconds from the start to the last report, as Go's tools time a run."""
        return self.finished - self.started


def _context() -> Any:
    """
    ``fork`` where there is one: it starts workers fastest and passes them
    anything; ``spawn`` elsewhere.
    """
    if "fork" in multiprocessing.get_all_start_methods():
        return multiprocessing.get_context("fork")
    return multiprocessing.get_context("spawn")


def shared_counters(count: int) -> Any:
    """
    ``count`` 64-bit integers in shared memory, all 0, to pass to workers in
    their jobs: each worker writes its own slot, and any worker may read the
    sum (no lock: a slot has one writer, and a stale read only delays a
    decision by one loop).
    """
    return _context().RawArray("q", count)


def _worker_main(worker: Worker, job: Any, pipe: Any, go: Any) -> None:
    """A worker process's body: run ``worker``, send back its outcome."""

    def ready() -> None:
        pipe.send(("ready", None))
        go.wait()

    try:
        result = worker(job, ready)
    except BaseException as error:  # reported to the parent, which raises it
        pipe.send(("error", "%s: %s" % (type(error).__name__, error)))
    else:
        pipe.send(("done", result))
    finally:
        pipe.close()


def _receive(pipe: Any, process: Any, expected: str, timeout: Optional[float]) -> Any:
    """
    The next report of one worker, checked to be ``expected``.

    :raises WorkerError: the worker failed, exited without a report, or
        sent nothing within ``timeout`` seconds.
    """
    if not pipe.poll(timeout):
        raise WorkerError("worker %s sent nothing within %s s" % (process.name, timeout))
    try:
        kind, value = pipe.recv()
    except EOFError:
        process.join(1.0)
        raise WorkerError("worker %s exited (status %s) without reporting"
                          % (process.name, process.exitcode))
    if kind == "error":
        raise WorkerError("worker %s failed: %s" % (process.name, value))
    if kind != expected:
        raise WorkerError("worker %s sent %r before %r" % (process.name, kind, expected))
    return value


def run_workers(
    jobs: Sequence[Tuple[Worker, Any]],
    program: str,
    deadline: Optional[datetime.datetime] = None,
    ready_timeout: float = READY_TIMEOUT,
) -> WorkerRun:
    """
    Start a process per ``(worker, job)``, wait until each is ready, wait
    for ``deadline`` if given, start them together, and collect what they
    return.

    :raises WorkerError: a worker failed or never got ready; the others
        are terminated.
    """
    context = _context()
    go = context.Event()
    processes = []
    pipes = []
    try:
        for index, (worker, job) in enumerate(jobs):
            receiver, sender = context.Pipe(duplex=False)
            process = context.Process(
                target=_worker_main,
                args=(worker, job, sender, go),
                name="%s-%d" % (program, index),
                daemon=True,
            )
            process.start()
            sender.close()  # the parent only receives: EOF when the worker dies
            processes.append(process)
            pipes.append(receiver)
        limit = time.monotonic() + ready_timeout
        for pipe, process in zip(pipes, processes):
            _receive(pipe, process, "ready", max(0.0, limit - time.monotonic()))
        if deadline is not None and deadline > datetime.datetime.min.replace(
            tzinfo=datetime.timezone.utc
        ):
            wait_until(deadline, program)
        started = time.monotonic()
        go.set()
        results = [_receive(pipe, process, "done", None) for pipe, process in zip(pipes, processes)]
        finished = time.monotonic()
    finally:
        for process in processes:
            if process.is_alive():
                process.join(0.5 if go.is_set() else 0)
            if process.is_alive():
                process.terminate()
                process.join()
        for pipe in pipes:
            pipe.close()
    return WorkerRun(started, finished, results)


# --- what bench_writer and bench_reader share -------------------------------


def add_runfor_and_address_arguments(parser: argparse.ArgumentParser) -> None:
    """Go's ``--runfor`` (10s) and ``--nsqd-tcp-address`` (127.0.0.1:4150)."""
    parser.add_argument("--runfor", type=parse_go_duration, default=10.0, metavar="DURATION",
                        help="duration of time to run, a Go duration (default: 10s)")
    parser.add_argument("--nsqd-tcp-address", type=parse_address,
                        default=("127.0.0.1", 4150), metavar="ADDR:PORT",
                        help="<addr>:<port> to connect to nsqd (default: 127.0.0.1:4150)")


def add_deadline_argument(parser: argparse.ArgumentParser) -> None:
    """Go's ``--deadline``: the UTC time to start at."""
    parser.add_argument("--deadline", type=parse_deadline, default="",
                        help='start at this UTC time, "2006-01-02 15:04:05" (default: at once)')


def add_processes_argument(parser: argparse.ArgumentParser, what: str = "worker processes") -> None:
    """``--processes`` (or ``--workers``), ``what`` its help says they are; Go's default."""
    parser.add_argument("--processes", "--workers", type=int, default=default_processes(),
                        help=what + " (default: the number of CPUs, %(default)s here)")


def parse_command_line(
    description: str,
    add_arguments: Callable[[argparse.ArgumentParser], None],
    argv: Optional[Sequence[str]],
    at_least_one: Sequence[str],
) -> Tuple[argparse.ArgumentParser, argparse.Namespace]:
    """
    A load generator's command line: ``add_arguments``' flags read from
    ``argv`` (``sys.argv[1:]`` when None), each of ``at_least_one`` checked
    to be 1 or more. The parser comes back for the script's own checks.

    :raises SystemExit: a usage message and status 2 on bad values.
    """
    parser = argparse.ArgumentParser(description=description, allow_abbrev=False)
    add_arguments(parser)
    args = parser.parse_args(argv)
    for name in at_least_one:
        if getattr(args, name) < 1:
            parser.error("--%s must be at least 1" % (name.replace("_", "-"),))
    return parser, args


class GoSummary:
    """
    What a writer or reader run's result (a dataclass with ``duration``,
    ``count`` and ``size`` fields) says: Go's figures.
    """

    duration: float
    count: int
    size: int

    def summary(self) -> str:
        """Go's figures: ``duration: ... - mb/s - ops/s - us/op``."""
        return go_summary(self.duration, self.count, self.size)


_Result = TypeVar("_Result", bound=GoSummary)


def run_and_log(program: str, run: Callable[[], _Result]) -> Optional[_Result]:
    """
    ``run()``, then Go's summary line of its result; or, if a worker failed,
    nsqd refused or a socket failed, a ``failed:`` line and None.
    """
    try:
        result = run()
    except (WorkerError, NSQDError, OSError) as error:
        log(program, "failed: %s" % (error,))
        return None
    log(program, result.summary())
    return result
