#!/usr/bin/env python
"""
Benchmark of a consumer library's sustained throughput: txnsq's
:class:`~txnsq.client.Consumer` (Twisted, default reactor) and pynsq's
``Reader`` (Tornado) on the same data, from the same nsqd, in the same run.

One nsqd child process is started on ``127.0.0.1:0`` with a
``--mem-queue-size`` that holds every message. For each client, in turn,
the script creates a fresh topic and its channel (``SUB`` on a connection
that then closes; the channel stays), publishes ``--count`` bodies of
``--size`` bytes in ``MPUB`` batches over a plain socket, waiting for each
``OK``, and only then starts the client in a subprocess of its own (its own
event loop, its own CPU account). The client subscribes with
``max_in_flight=--max-in-flight``; its handler checks the body (an 8-byte
sequence number, then fixed filler), counts it and returns ``True``, so the
library sends the ``FIN``. The clock runs from the first message handed to
the handler to the last one; at those two moments the subprocess reads its
own CPU time and nsqd's (``/proc/PID/stat``), and it prints one JSON line.

Run by hand; not part of the test suite::

    python bench/system/consumer.py
    python bench/system/consumer.py --count 400000 --rounds 2
    python bench/system/consumer.py --clients txnsq --profile 30   # cProfile, top 30
    python bench/system/consumer.py --clients txnsq --count 1000000 \
        --client-prefix 'py-spy record -r 1000 -f raw -o /tmp/txnsq.txt --'

The parent uses no Twisted (see ``harness``). The
``txnsq`` subprocess imports Twisted and txnsq; the ``pynsq`` one imports
pynsq (``pip install pynsq 'tornado<6.2'``). ``--python`` runs the
subprocesses with another interpreter (PyPy, say).
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

from bench.common.process import process_cpu_seconds  # noqa: E402  (needs the path above)
from bench.common.report import progress, table  # noqa: E402
from bench.system.harness import (  # noqa: E402
    SEQUENCE,
    BenchError,
    NSQDChild,
    NSQDError,
    NSQDStartError,
    V2Connection,
    create_channel,
    filler,
    nsqd_command,
)
from txnsq.protocol.v2_client import OK, mpub  # noqa: E402

CLIENTS = ("txnsq", "pynsq")
CHANNEL = "bench"


# -- the clients, each run in a subprocess ----------------------------------------


class Tally:
    """
    What a client's handler does per message: check the body, count it,
    and read both CPU clocks at the first and the last message.

    :param count: messages expected.
    :param size: their body size.
    :param nsqd_pid: whose CPU time to read.
    :param done: called once, right after the last message was counted.
    """

    __slots__ = ("count", "size", "tail", "seen", "received", "intact", "duplicates",
                 "corrupt", "nsqd_pid", "done", "marks", "profiler")

    def __init__(self, count: int, size: int, nsqd_pid: int, done: Callable[[], None]) -> None:
        self.count = count
        self.size = size
        self.tail = filler(size)
        self.seen = bytearray(count)
        self.received = 0
        self.intact = 0
        self.duplicates = 0
        self.corrupt = 0
        self.nsqd_pid = nsqd_pid
        self.done = done
        self.marks: List[Tuple[float, float, Optional[float]]] = []
        self.profiler: Any = None

    def mark(self) -> None:
        """Wall clock, own CPU, nsqd's CPU."""
        self.marks.append((time.perf_counter(), time.process_time(),
                           process_cpu_seconds(self.nsqd_pid)))

    def body(self, body: bytes) -> None:
        """One message's body (the handler's work)."""
        self.received += 1
        if self.received == 1:
            self.mark()
            if self.profiler is not None:
                self.profiler.enable()
        if len(body) != self.size or body[8:] != self.tail:
            self.corrupt += 1
        else:
            (sequence,) = SEQUENCE.unpack_from(body)
            if sequence >= self.count:
                self.corrupt += 1
            elif self.seen[sequence]:
                self.duplicates += 1
            else:
                self.seen[sequence] = 1
                self.intact += 1
        if self.received == self.count:
            if self.profiler is not None:
                self.profiler.disable()
            self.mark()
            self.done()

    def report(self, **extra: Any) -> Dict[str, Any]:
        """The JSON the parent reads."""
        result: Dict[str, Any] = {
            "received": self.received, "intact": self.intact,
            "duplicates": self.duplicates, "corrupt": self.corrupt,
        }
        if len(self.marks) == 2:
            (wall0, cpu0, nsqd0), (wall1, cpu1, nsqd1) = self.marks
            result.update(seconds=wall1 - wall0, client_cpu=cpu1 - cpu0,
                          nsqd_cpu=None if nsqd0 is None or nsqd1 is None else nsqd1 - nsqd0)
        result.update(extra)
        return result


def run_txnsq(args: argparse.Namespace, tally: Tally) -> Dict[str, Any]:
    """txnsq's Consumer under the default reactor; returns its report."""
    from twisted.internet import reactor

    import twisted

    from txnsq import __version__
    from txnsq.client import Consumer, Message

    body = tally.body

    def handler(message: Message) -> bool:
        body(message.body)
        return True

    consumer = Consumer(args.topic, CHANNEL, handler, nsqd_tcp_addresses=[args.address],
                        max_in_flight=args.max_in_flight, reactor=reactor)

    def done() -> None:
        # After the handler returned (and the library sent the last FIN).
        reactor.callLater(0, lambda: consumer.close().addBoth(lambda _: reactor.stop()))

    def too_late() -> None:
        if reactor.running:
            reactor.stop()

    tally.done = done
    consumer.start()
    reactor.callLater(args.timeout, too_late)
    reactor.run()
    return tally.report(library="txnsq %s" % (__version__,),
                        loop="Twisted %s %s" % (twisted.__version__, type(reactor).__name__))


def run_pynsq(args: argparse.Namespace, tally: Tally) -> Dict[str, Any]:
    """pynsq's Reader on its Tornado IOLoop; returns its report."""
    import logging

    import nsq
    import tornado
    import tornado.ioloop

    logging.basicConfig(level=logging.WARNING)
    loop = tornado.ioloop.IOLoop.current()
    body = tally.body

    def handler(message: Any) -> bool:
        body(message.body)
        return True

    reader = nsq.Reader(topic=args.topic, channel=CHANNEL, message_handler=handler,
                        nsqd_tcp_addresses=[args.address], max_in_flight=args.max_in_flight)

    def stop() -> None:
        reader.close()
        loop.stop()

    def done() -> None:
        # After the handler returned and pynsq sent the last FIN.
        loop.add_callback(stop)

    tally.done = done
    loop.call_later(args.timeout, loop.stop)
    loop.start()
    return tally.report(library="pynsq %s" % (nsq.__version__,),
                        loop="Tornado %s %s" % (tornado.version, type(loop).__name__))


def worker(args: argparse.Namespace) -> int:
    """The subprocess side: consume, print one JSON line (and a profile on stderr)."""
    tally = Tally(args.count, args.size, args.nsqd_pid, lambda: None)
    profiler = None
    if args.profile:
        import cProfile

        profiler = cProfile.Profile()
        tally.profiler = profiler
    run = run_txnsq if args.worker == "txnsq" else run_pynsq
    report = run(args, tally)
    report["python"] = "%s %s" % (sys.implementation.name, sys.version.split()[0])
    sys.stdout.write(json.dumps(report) + "\n")
    sys.stdout.flush()
    if profiler is not None:
        print_profile(profiler, args.profile, args.profile_out)
    # Skip interpreter teardown: nothing is left to flush.
    os._exit(0)


def print_profile(profiler: Any, top: int, path: Optional[str]) -> None:
    """The ``top`` functions by own time, with their share of the profiled time, on stderr."""
    import pstats

    stats = pstats.Stats(profiler)
    if path:
        stats.dump_stats(path)
    entries = stats.stats  # type: ignore[attr-defined]
    total = sum(entry[2] for entry in entries.values()) or 1.0
    rows = sorted(entries.items(), key=lambda item: -item[1][2])[:top]
    out = sys.stderr
    out.write("profile (cProfile, first to last message): %.3f s of own time in all\n" % (total,))
    out.write("%7s %8s %8s %10s  %s\n" % ("own %", "own s", "cum s", "calls", "function"))
    for (filename, line, name), (_, calls, own, cumulative, _) in rows:
        where = filename
        for marker in ("site-packages/", "/lib/python3", "/work/main/"):
            if marker in where:
                where = where.split(marker, 1)[1]
                break
        out.write("%6.1f%% %8.3f %8.3f %10d  %s:%d(%s)\n"
                  % (100.0 * own / total, own, cumulative, calls, where, line, name))
    out.flush()


# -- the parent --------------------------------------------------------------------


@dataclass
class Result:
    """One client's run, as its subprocess reported it."""

    client: str
    round: int
    report: Dict[str, Any]
    count: int
    size: int

    @property
    def ok(self) -> bool:
        """Every message came once and intact."""
        report = self.report
        return (report.get("intact") == self.count and not report.get("duplicates")
                and not report.get("corrupt") and "seconds" in report)

    @property
    def rate(self) -> float:
        """Messages per second, first to last."""
        return self.count / self.report["seconds"]


def publish(address: Tuple[str, int], topic: bytes, count: int, size: int, batch: int) -> float:
    """MPUB every body, waiting for each OK; the seconds it took."""
    tail = filler(size)
    pack = SEQUENCE.pack
    commands = [mpub(topic, [pack(i) + tail for i in range(start, min(start + batch, count))])
                for start in range(0, count, batch)]
    with V2Connection(address) as connection:
        start = time.perf_counter()
        for command in commands:
            connection.send(command)
            connection.expect(OK)
        return time.perf_counter() - start


def run_client(args: argparse.Namespace, child: NSQDChild, client: str, round_: int) -> Result:
    """Publish a fresh topic, then consume it with ``client`` in a subprocess."""
    topic = "bench_consumer_%s_%d" % (client, round_)
    address = child.tcp_address
    create_channel(address, topic.encode(), CHANNEL.encode())
    seconds = publish(address, topic.encode(), args.count, args.size, args.batch)
    _progress("%s round %d: published %d in %.2f s; consuming" % (client, round_, args.count, seconds))
    prefix = shlex.split(args.client_prefix) if args.client_prefix and client in args.prefix_clients.split(",") else []
    command = prefix + [args.python, os.path.abspath(__file__), "--worker", client,
               "--address", "%s:%d" % address, "--topic", topic, "--count", str(args.count),
               "--size", str(args.size), "--max-in-flight", str(args.max_in_flight),
               "--nsqd-pid", str(child.pid), "--timeout", str(args.timeout)]
    if args.profile and client == "txnsq":
        command += ["--profile", str(args.profile)]
        if args.profile_out:
            command += ["--profile-out", args.profile_out]
    try:
        done = subprocess.run(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              timeout=args.timeout + 60)
    except subprocess.TimeoutExpired:
        raise BenchError("%s did not exit within %s s" % (client, args.timeout + 60))
    stderr = done.stderr.decode("utf-8", "replace")
    lines = [line for line in done.stdout.decode("utf-8", "replace").splitlines() if line.startswith("{")]
    if done.returncode != 0 or not lines:
        raise BenchError("%s exited with status %s:\n%s" % (client, done.returncode, stderr[-4000:]))
    if (args.profile and client == "txnsq") or prefix:
        sys.stderr.write(stderr)
    return Result(client, round_, json.loads(lines[-1]), args.count, args.size)


def _fmt(value: Optional[float], pattern: str) -> str:
    return "?" if value is None else pattern % (value,)


def result_rows(results: Sequence[Result]) -> List[Tuple[str, ...]]:
    """The table's header, then one row per client run."""
    header = ("client", "round", "msg/s", "MB/s", "seconds", "client cpu", "µs/msg",
              "nsqd cpu", "µs/msg", "check")
    rows: List[Tuple[str, ...]] = [header]
    for result in results:
        report = result.report
        if "seconds" not in report:
            rows.append((result.client, str(result.round)) + ("-",) * 7
                        + ("got %d of %d" % (report.get("received", 0), result.count),))
            continue
        count = result.count
        nsqd = report.get("nsqd_cpu")
        check = "ok" if result.ok else "intact %s dup %s corrupt %s" % (
            report.get("intact"), report.get("duplicates"), report.get("corrupt"))
        rows.append((
            result.client, str(result.round), "{:,.0f}".format(result.rate),
            "%.2f" % (result.rate * result.size / 1e6), "%.2f" % (report["seconds"],),
            "%.2f" % (report["client_cpu"],), "%.1f" % (1e6 * report["client_cpu"] / count),
            _fmt(nsqd, "%.2f"), _fmt(None if nsqd is None else 1e6 * nsqd / count, "%.1f"), check))
    return rows


def summary(results: Sequence[Result]) -> List[str]:
    """Versions, who was busy, and the txnsq / pynsq ratio per round."""
    lines: List[str] = []
    seen = set()
    for result in results:
        report = result.report
        key = (result.client, report.get("library"))
        if key not in seen and "library" in report:
            seen.add(key)
            lines.append("%s: %s on %s, %s" % (result.client, report["library"], report.get("loop"),
                                               report.get("python")))
    for result in results:
        report = result.report
        if "seconds" in report:
            busy = 100.0 * report["client_cpu"] / report["seconds"]
            nsqd = report.get("nsqd_cpu")
            lines.append("%s round %d: client busy %.0f%% of the time, nsqd %s" % (
                result.client, result.round, busy,
                "?" if nsqd is None else "%.0f%%" % (100.0 * nsqd / report["seconds"],)))
    rounds = sorted({result.round for result in results})
    for round_ in rounds:
        by_client = {r.client: r for r in results if r.round == round_ and "seconds" in r.report}
        if "txnsq" in by_client and "pynsq" in by_client:
            txnsq, pynsq = by_client["txnsq"].report, by_client["pynsq"].report
            lines.append("round %d: txnsq / pynsq = %.1f× the messages per second, %.1f× less client "
                         "CPU per message" % (round_, by_client["txnsq"].rate / by_client["pynsq"].rate,
                                               pynsq["client_cpu"] / max(txnsq["client_cpu"], 1e-9)))
    return lines


def _progress(message: str) -> None:
    progress("consumer", message)


def parse_args(argv: Optional[Sequence[str]] = None) -> argparse.Namespace:
    """The command line."""
    parser = argparse.ArgumentParser(
        description="Consumer throughput: txnsq's Consumer and pynsq's Reader on the same nsqd.")
    parser.add_argument("--count", type=int, default=200000, help="messages per run (default: 200000)")
    parser.add_argument("--size", type=int, default=100, help="body bytes, at least 8 (default: 100)")
    parser.add_argument("--batch", type=int, default=100, help="messages per MPUB (default: 100)")
    parser.add_argument("--max-in-flight", type=int, default=2500,
                        help="the consumers' max_in_flight (default: 2500, nsqd's max RDY)")
    parser.add_argument("--clients", default=",".join(CLIENTS),
                        help="which clients, in order (default: txnsq,pynsq)")
    parser.add_argument("--rounds", type=int, default=1,
                        help="run every client this many times, alternating (default: 1)")
    parser.add_argument("--nsqd", default=None, metavar="COMMAND",
                        help="the nsqd command line (default: the nsqd next to this Python)")
    parser.add_argument("--python", default=sys.executable,
                        help="the interpreter the clients run with (default: this one)")
    parser.add_argument("--timeout", type=float, default=120.0,
                        help="seconds a client may take to consume everything (default: 120)")
    parser.add_argument("--profile", type=int, default=0, metavar="TOP",
                        help="cProfile the txnsq client from first to last message and print "
                             "the TOP functions by own time")
    parser.add_argument("--profile-out", default=None, help="also save the pstats file here")
    parser.add_argument("--client-prefix", default=None, metavar="COMMAND",
                        help="run the clients under this command (a sampling profiler: "
                             "'py-spy record -r 1000 -f raw -o OUT --'); its output goes to stderr")
    parser.add_argument("--prefix-clients", default="txnsq",
                        help="which clients --client-prefix applies to (default: txnsq)")
    # The subprocess side.
    parser.add_argument("--worker", choices=CLIENTS, help=argparse.SUPPRESS)
    parser.add_argument("--address", help=argparse.SUPPRESS)
    parser.add_argument("--topic", help=argparse.SUPPRESS)
    parser.add_argument("--nsqd-pid", type=int, default=0, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.size < SEQUENCE.size:
        parser.error("--size must be at least %d" % (SEQUENCE.size,))
    clients = [name.strip() for name in args.clients.split(",") if name.strip()]
    unknown = [name for name in clients if name not in CLIENTS]
    if unknown or not clients:
        parser.error("--clients: choose from %s" % (", ".join(CLIENTS),))
    args.client_list = clients
    return args


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Run the benchmark, print the table; 0 when every check passed."""
    args = parse_args(argv)
    if args.worker:
        return worker(args)
    results: List[Result] = []
    with tempfile.TemporaryDirectory(prefix="txnsq-bench-") as root:
        data_path = os.path.join(root, "data")
        os.mkdir(data_path)
        nsqd_args = ["--tcp-address=127.0.0.1:0", "--http-address=127.0.0.1:0",
                     "--data-path=%s" % (data_path,), "--mem-queue-size=%d" % (args.count + 1000,)]
        child = NSQDChild(nsqd_args, nsqd_command(args.nsqd), os.path.join(root, "nsqd.log"))
        _progress("starting %s" % (" ".join(child.argv),))
        try:
            child.start()
        except NSQDStartError as error:
            sys.stderr.write("consumer: nsqd did not start: %s\n" % (error,))
            return 1
        try:
            for round_ in range(1, args.rounds + 1):
                for client in args.client_list:
                    result = run_client(args, child, client, round_)
                    results.append(result)
                    if "seconds" in result.report:
                        _progress("%s round %d: %s msg/s" % (client, round_, "{:,.0f}".format(result.rate)))
        except (NSQDError, BenchError, OSError) as error:
            sys.stderr.write("consumer: run failed: %s\n%s\n" % (error, child.describe_exit()))
            if results:
                print(table(result_rows(results), left=(0, 9)))
            return 1
        finally:
            child.stop()
    print("%d × %d B, max_in_flight %d, nsqd: %s" % (
        args.count, args.size, args.max_in_flight, " ".join(nsqd_command(args.nsqd))))
    print(table(result_rows(results), left=(0, 9)))
    for line in summary(results):
        print(line)
    return 0 if all(result.ok for result in results) else 1


if __name__ == "__main__":
    sys.exit(main())
