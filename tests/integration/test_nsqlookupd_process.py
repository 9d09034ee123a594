"""
The ``nsqlookupd`` console script as a child process, driven the way NSQ
test harnesses drive Go's nsqlookupd: kernel-chosen ports read from its
``TCP: listening on`` lines, V1 and HTTP over sockets, SIGTERM, and Go's
exit status and message for a bad command line.

The process plumbing is nsqd's (:mod:`tests.integration.nsqd_process`),
given the ``nsqlookupd`` command.
"""

from __future__ import annotations

import os
import platform
import socket
from typing import Any, List

from twisted.internet.defer import inlineCallbacks
from twisted.trial.unittest import TestCase

from tests.integration.conformance import (
    CaseReplay,
    Target,
    load_fixture,
    select_cases,
)
from tests.integration.nsqd_process import GNSQ_NSQD_VERSION, ExitStatus, NSQLookupdProcess, run_nsqlookupd
from txnsq.speedups import hot_path_token
from txnsq.version import NSQ_VERSION, TXNSQ_VERSION

LOOPBACK = ["--tcp-address=127.0.0.1:0", "--http-address=127.0.0.1:0"]


class NSQLookupdProcessTests(TestCase):
    """nsqlookupd run as its own process."""

    timeout = 60

    def cwd(self) -> str:
        path = self.mktemp()
        os.makedirs(path)
        return path

    def spawn(self, args: List[str]) -> NSQLookupdProcess:
        process = NSQLookupdProcess(args, cwd=self.cwd())
        self.addCleanup(process.kill)
        return process

    @inlineCallbacks
    def test_serves_v1_and_http_then_sigterm(self) -> Any:
        """It registers a producer over V1, shows it over HTTP, and exits 0 on SIGTERM, closing the producer."""
        process = self.spawn(LOOPBACK)
        yield process.start()
        self.assertEqual(process.host, "127.0.0.1")
        (case,) = select_cases(load_fixture("lookupd_v1.json"), ["register_topic_channel"])
        replay = CaseReplay(case)
        self.addCleanup(replay.close_connections)
        target = Target(
            process.host, {"lookupd_tcp": process.tcp_port, "lookupd_http": process.http_port}, NSQ_VERSION
        )
        yield replay.run(target)
        status = yield process.stop("TERM")
        self.assertEqual(status, ExitStatus(0, None), process.output())
        connection = replay.connections["c1"]
        closed = yield connection.changes.wait_for(lambda: connection.lost is not None, 5.0)
        self.assertTrue(closed, "the producer connection stayed open after nsqlookupd exited")
        output = process.output()
        self.assertIn("[nsqlookupd] ", output)
        self.assertIn("TCP: listening on 127.0.0.1:%d" % (process.tcp_port,), output)
        self.assertIn("HTTP: listening on 127.0.0.1:%d" % (process.http_port,), output)
        self.assertIn("TCP: closing 127.0.0.1:%d" % (process.tcp_port,), output)

    @inlineCallbacks
    def test_version(self) -> Any:
        """--version prints the version line on standard output and exits 0."""
        status, out, err = yield run_nsqlookupd(["--version"], cwd=self.cwd())
        expected = "nsqlookupd v1.3.0 (built w/txnsq-%s-%s-%s-%s)\n" % (
            TXNSQ_VERSION,
            platform.python_implementation().lower(),
            platform.python_version(),
            hot_path_token(),
        )
        self.assertEqual((status, out.decode()), (ExitStatus(0, None), expected), err.decode())
        # gnsq's harness reads nsqlookupd's line with nsqd's pattern, named for it.
        self.assertRegex(out.decode().rstrip("\n"), GNSQ_NSQD_VERSION.replace("nsqd", "nsqlookupd"))

    @inlineCallbacks
    def test_unknown_flag(self) -> Any:
        """An unknown flag exits 2 with Go's message, then the usage, on standard error."""
        status, out, err = yield run_nsqlookupd(["--mem-queue-size=1"], cwd=self.cwd())
        self.assertEqual(status, ExitStatus(2, None))
        lines = err.decode().splitlines()
        self.assertEqual(lines[:2], ["flag provided but not defined: -mem-queue-size", "Usage of nsqlookupd:"])
        self.assertEqual(out, b"")

    @inlineCallbacks
    def test_bad_flag_value(self) -> Any:
        """A bad flag value exits 2 with Go's message."""
        status, out, err = yield run_nsqlookupd(["--tombstone-lifetime=45"], cwd=self.cwd())
        self.assertEqual(status, ExitStatus(2, None))
        self.assertEqual(
            err.decode().splitlines()[0],
            'invalid value "45" for flag -tombstone-lifetime: parse error',
        )

    @inlineCallbacks
    def test_help(self) -> Any:
        """-h prints the usage and exits 0."""
        status, out, err = yield run_nsqlookupd(["-h"], cwd=self.cwd())
        self.assertEqual(status, ExitStatus(0, None))
        self.assertIn("  -inactive-producer-timeout duration\n", err.decode())

    @inlineCallbacks
    def test_impossible_setting(self) -> Any:
        """A listen address it cannot use exits 1 naming the flag."""
        status, out, err = yield run_nsqlookupd(["--tcp-address=nonsense"], cwd=self.cwd())
        self.assertEqual(status, ExitStatus(1, None))
        self.assertTrue(
            err.decode().startswith("nsqlookupd: --tcp-address: invalid listen address"), err.decode()
        )

    @inlineCallbacks
    def test_port_in_use(self) -> Any:
        """It exits 1 when it cannot listen, saying why."""
        taken = socket.socket()
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        self.addCleanup(taken.close)
        port = taken.getsockname()[1]
        status, out, err = yield run_nsqlookupd(
            ["--tcp-address=127.0.0.1:%d" % (port,), "--http-address=127.0.0.1:0"], cwd=self.cwd()
        )
        self.assertEqual(status, ExitStatus(1, None), err.decode())
        self.assertIn("TCP: listen (tcp:%d:interface=127.0.0.1) failed" % (port,), err.decode())
