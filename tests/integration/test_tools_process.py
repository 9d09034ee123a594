"""
The tools as real processes against an nsqd running in the test's reactor
on 127.0.0.1: ``to_nsq`` into ``nsq_tail -n``, ``nsq_to_file`` with gzip
and tiny rotation stopped by SIGTERM, ``nsq_stat`` printing intervals.

Each tool runs as its console script when installed next to the running
interpreter, else as ``python -m txnsq.tools.NAME``.  Nothing sleeps for a
fixed time: waits poll a condition under a deadline.
"""

from __future__ import annotations

import gzip
import json
import os
import sys
from typing import Any, Callable, Dict, Generator, List, Optional, Sequence

from twisted.internet import reactor
from twisted.internet.defer import Deferred, inlineCallbacks
from twisted.internet.protocol import ProcessProtocol
from twisted.internet.task import LoopingCall, deferLater
from twisted.python.failure import Failure
from twisted.trial.unittest import TestCase

from txnsq.http_client import GoHTTPClient
from txnsq.testing import start_nsqd

#: Seconds any one process or condition may take.
DEADLINE = 30.0

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def tool_command(program: str) -> List[str]:
    """The command running a tool's console script (or ``python -m``)."""
    script = os.path.join(os.path.dirname(sys.executable), program)
    if os.path.isfile(script) and os.access(script, os.X_OK):
        return [script]
    return [sys.executable, "-m", "txnsq.tools." + program]


class ToolProcess(ProcessProtocol):
    """A tool's process: its output, and a Deferred firing with its exit code."""

    def __init__(self, stdin: Optional[bytes] = None) -> None:
        self.stdin = stdin
        self.out = b""
        self.err = b""
        self.ended: Deferred[Optional[int]] = Deferred()

    def connectionMade(self) -> None:
        if self.stdin is not None:
            assert self.transport is not None
            self.transport.write(self.stdin)
            self.transport.closeStdin()

    def outReceived(self, data: bytes) -> None:
        self.out += data

    def errReceived(self, data: bytes) -> None:
        self.err += data

    def processEnded(self, reason: Failure) -> None:
        self.ended.callback(getattr(reason.value, "exitCode", None))

    def signal(self, name: str) -> None:
        assert self.transport is not None
        self.transport.signalProcess(name)


def spawn(program: str, args: Sequence[str], stdin: Optional[bytes] = None) -> ToolProcess:
    """Start a tool."""
    process = ToolProcess(stdin)
    command = tool_command(program) + list(args)
    env = dict(os.environ)
    env["PYTHONUNBUFFERED"] = "1"
    reactor.spawnProcess(  # type: ignore[attr-defined]
        process, command[0], command, env=env, path=ROOT, usePTY=False,
        childFDs=None if stdin is not None else {0: "w", 1: "r", 2: "r"},
    )
    return process


@inlineCallbacks
def wait_for(condition: Callable[[], Any], what: str) -> Generator[Any, Any, None]:
    """Poll ``condition`` (may return a Deferred) until true, or fail after the deadline."""
    deadline = reactor.seconds() + DEADLINE  # type: ignore[attr-defined]
    while True:
        result = yield condition()
        if result:
            return
        if reactor.seconds() > deadline:  # type: ignore[attr-defined]
            raise AssertionError("timed out waiting for " + what)
        yield deferLater(reactor, 0.05, lambda: None)


def ended_within(process: ToolProcess) -> "Deferred[Optional[int]]":
    """The exit code, or a failure after the deadline (the process is killed)."""

    def kill() -> None:
        try:
            process.signal("KILL")
        except Exception:
            pass

    timer = reactor.callLater(DEADLINE, kill)  # type: ignore[attr-defined]

    def done(code: Optional[int]) -> Optional[int]:
        if timer.active():
            timer.cancel()
        return code

    return process.ended.addCallback(done)


class ToolsProcessTests(TestCase):
    """The tools against a live nsqd."""

    timeout = 120

    @inlineCallbacks
    def setUp(self) -> Generator[Any, Any, None]:  # type: ignore[override]
        self.nsqd = yield start_nsqd()
        self.addCleanup(self.nsqd.stop)
        self.http = GoHTTPClient(reactor, 2.0, 5.0)

    @inlineCallbacks
    def post(self, path: str, body: bytes = b"") -> Generator[Any, Any, bytes]:
        code, _, content = yield self.http.request(
            "POST", "http://%s%s" % (self.nsqd.http_address, path), body
        )
        self.assertEqual(code, 200, content)
        return content

    @inlineCallbacks
    def channel_stats(self, topic: str, channel: str) -> Generator[Any, Any, Dict[str, Any]]:
        _, _, content = yield self.http.request(
            "GET", "http://%s/stats?format=json&topic=%s" % (self.nsqd.http_address, topic)
        )
        for topic_stats in json.loads(content)["topics"]:
            for channel_stats in topic_stats["channels"]:
                if channel_stats["channel_name"] == channel:
                    return channel_stats
        return {}

    @inlineCallbacks
    def test_to_nsq_then_nsq_tail(self) -> Generator[Any, Any, None]:
        """Lines given to to_nsq come out of nsq_tail -n N, in order, and both exit 0."""
        lines = [b"message %d" % (i,) for i in range(50)]
        publisher = spawn(
            "to_nsq",
            ["--topic=roundtrip", "--nsqd-tcp-address=" + self.nsqd.tcp_address],
            stdin=b"\n".join(lines) + b"\n",
        )
        code = yield ended_within(publisher)
        self.assertEqual(code, 0, publisher.err)
        tail = spawn(
            "nsq_tail",
            ["--topic=roundtrip", "--nsqd-tcp-address=" + self.nsqd.tcp_address, "-n", "50"],
        )
        code = yield ended_within(tail)
        self.assertEqual(code, 0, tail.err)
        self.assertEqual(tail.out.splitlines(), lines)

    @inlineCallbacks
    def test_nsq_to_file_gzip_rotation(self) -> Generator[Any, Any, None]:
        """
        nsq_to_file writes every message exactly once into several gzip
        files, and on SIGTERM moves them all out of the work directory.
        """
        base = os.path.abspath(self.mktemp())
        work, output = os.path.join(base, "work"), os.path.join(base, "out")
        os.makedirs(work)
        os.makedirs(output)
        expected = [b"line %04d" % (i,) for i in range(300)]
        yield self.post("/mpub?topic=archive", b"\n".join(expected))
        archiver = spawn(
            "nsq_to_file",
            [
                "--topic=archive",
                "--nsqd-tcp-address=" + self.nsqd.tcp_address,
                "--output-dir=" + output,
                "--work-dir=" + work,
                "--gzip",
                "--rotate-size=500",
                "--sync-interval=100ms",
                "--max-in-flight=50",
            ],
        )

        @inlineCallbacks
        def all_finished() -> Generator[Any, Any, bool]:
            stats = yield self.channel_stats("archive", "nsq_to_file")
            return (
                stats.get("message_count") == len(expected)
                and stats.get("depth") == 0
                and stats.get("in_flight_count") == 0
            )

        yield wait_for(all_finished, "every message to be FINished")
        archiver.signal("TERM")
        code = yield ended_within(archiver)
        self.assertEqual(code, 0, archiver.err)
        self.assertEqual(os.listdir(work), [])
        names = sorted(os.listdir(output))
        self.assertGreater(len(names), 1, names)
        lines: List[bytes] = []
        for name in names:
            self.assertTrue(name.startswith("archive."), name)
            self.assertTrue(name.endswith(".log.gz"), name)
            with open(os.path.join(output, name), "rb") as handle:
                lines.extend(gzip.decompress(handle.read()).splitlines())
        self.assertEqual(sorted(lines), expected)

    @inlineCallbacks
    def test_nsq_stat_intervals(self) -> Generator[Any, Any, None]:
        """nsq_stat prints its header and one row per interval for a channel with traffic."""
        yield self.post("/topic/create?topic=busy")
        yield self.post("/channel/create?topic=busy&channel=watched")
        yield self.post("/mpub?topic=busy", b"a\nb\nc")
        # Background traffic: the last request is waited for before nsqd
        # stops (cleanups run last-in, first-out), so none is left open.
        last: List["Deferred[Any]"] = []

        def publish_more() -> None:
            request = self.http.request(
                "POST", "http://%s/pub?topic=busy" % (self.nsqd.http_address,), b"more")
            request.addErrback(lambda failure: None)
            last[:] = [request]

        publishing = LoopingCall(publish_more)
        publishing.start(0.05)

        def stop_publishing() -> "Optional[Deferred[Any]]":
            if publishing.running:
                publishing.stop()
            return last[0] if last else None

        self.addCleanup(stop_publishing)
        stat = spawn(
            "nsq_stat",
            [
                "--topic=busy",
                "--channel=watched",
                "--nsqd-http-address=" + self.nsqd.http_address,
                "--interval=200ms",
                "--count=2",
            ],
        )
        code = yield ended_within(stat)
        self.assertEqual(code, 0, stat.err)
        lines = stat.out.decode().splitlines()
        self.assertEqual(len(lines), 4, lines)
        self.assertTrue(lines[0].startswith("------rate------+"))
        self.assertEqual(lines[1].split(), [
            "ingress", "egress", "|", "total", "mem", "disk", "inflt", "def", "|",
            "req", "t-o", "msgs", "clients",
        ])
        counts = [int(line.split()[-2]) for line in lines[2:]]
        self.assertGreaterEqual(counts[0], 3)
        self.assertGreaterEqual(counts[1], counts[0])
