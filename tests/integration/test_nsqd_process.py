"""
The ``nsqd`` console script as a child process, driven the way NSQ client
test harnesses drive Go's nsqd: kernel-chosen ports read from its
``TCP: listening on`` lines, Go flag spellings, ``--version``, signals,
restart on the same port, relative paths, and recorded conformance cases.
"""

from __future__ import annotations

import os
import platform
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence

from twisted.internet.defer import Deferred, inlineCallbacks
from twisted.trial.unittest import TestCase

from tests.integration.conformance import (
    CaseReplay,
    ConformanceFailure,
    Target,
    generated_test_name,
    load_fixture,
    replay_case,
    select_cases,
)
from tests.integration.nsqd_process import GNSQ_NSQD_VERSION, ExitStatus, NSQDProcess, free_port, run_nsqd
from txnsq.speedups import hot_path_token
from txnsq.version import NSQ_VERSION, TXNSQ_VERSION

#: Recorded cases replayed against the process (a sample across the
#: protocol: errors, negotiation, flags, delivery, redelivery, timers).
PROCESS_CASES = [
    "magic_wrong",
    "identify_feature_negotiation",
    "pub_exactly_max_msg_size",
    "message_frame_layout",
    "redelivery_after_req_0",
    "fin_unknown_id",
    "long_line_without_newline",
    "heartbeat_frame",
]

LOOPBACK = ["--tcp-address=127.0.0.1:0", "--http-address=127.0.0.1:0"]


def pubsub_case(name: str = "pubsub") -> Dict[str, Any]:
    """A case publishing one message and consuming it over sockets."""
    return {
        "name": name,
        "description": "publish on one connection, consume on another",
        "steps": [
            {"connect": "sub", "to": "nsqd_tcp"},
            {"conn": "sub", "send": "  V2"},
            {"conn": "sub", "send": "SUB t c\\n"},
            {"conn": "sub", "expect_frames": [{"type": 0, "size": 6, "data": "OK"}]},
            {"conn": "sub", "send": "RDY 1\\n"},
            {"connect": "p", "to": "nsqd_tcp"},
            {"conn": "p", "send": "  V2"},
            {"conn": "p", "send": "PUB t\\n\\x00\\x00\\x00\\x05hello"},
            {"conn": "p", "expect_frames": [{"type": 0, "size": 6, "data": "OK"}]},
            {"conn": "sub", "expect_frames": [{"type": 2, "size": 35, "message": {
                "timestamp": "<timestamp_ns>", "attempts": 1, "id": "<id:m1>", "body": "hello"}}],
             "within_ms": 3000},
            {"conn": "sub", "send": "FIN <id:m1>\\n", "template": True},
            {"conn": "sub", "expect_nothing_ms": 200},
            {"http": {"to": "nsqd_http", "method": "GET", "path": "/ping"},
             "expect": {"status": 200, "body": "OK", "headers": {"Content-Type": "text/plain; charset=utf-8"}}},
        ],
    }


class ProcessStarter:
    """Starts nsqd processes for :func:`replay_case` and cleans them up."""

    def __init__(self, test: TestCase, extra_args: Sequence[str] = (), cwd: Optional[str] = None) -> None:
        self.test = test
        self.extra_args = list(extra_args)
        self.cwd = cwd
        self.processes: List[NSQDProcess] = []

    @inlineCallbacks
    def __call__(self, flags: List[str]) -> Any:
        cwd = self.cwd
        if cwd is None:
            cwd = self.test.mktemp()
            os.makedirs(cwd)
        process = NSQDProcess(LOOPBACK + flags + self.extra_args, cwd=cwd)
        self.processes.append(process)
        self.test.addCleanup(self._reap, process)
        yield process.start()
        target = Target(process.host, {"nsqd_tcp": process.tcp_port, "nsqd_http": process.http_port}, NSQ_VERSION)
        return target, lambda: self._stop(process)

    @inlineCallbacks
    def _stop(self, process: NSQDProcess) -> Any:
        status = yield process.stop("TERM")
        if status != ExitStatus(0, None):
            raise ConformanceFailure("nsqd exited with %s after SIGTERM\n%s" % (status, process.output()))

    @inlineCallbacks
    def _reap(self, process: NSQDProcess) -> Any:
        """Make sure no child outlives the test."""
        process.kill()
        yield process.ended


class NSQDProcessTests(TestCase):
    """The nsqd console script behaves as harnesses expect of Go's nsqd."""

    timeout = 90

    def cwd(self) -> str:
        """A fresh empty directory."""
        path = self.mktemp()
        os.makedirs(path)
        return path

    def test_publish_and_consume(self) -> "Deferred[None]":
        """Started on 127.0.0.1:0, nsqd reports its ports and delivers a published message."""
        return replay_case(pubsub_case(), ProcessStarter(self))  # type: ignore[no-any-return]

    @inlineCallbacks
    def test_version(self) -> Any:
        """``nsqd --version`` prints ``nsqd v1.3.0 (built w/txnsq-<version>-<impl>-<pyversion>-<hot path>)`` and exits 0."""
        expected = "nsqd v1.3.0 (built w/txnsq-%s-%s-%s-%s)\n" % (
            TXNSQ_VERSION, platform.python_implementation().lower(), platform.python_version(),
            hot_path_token())
        for flag in ("--version", "-version"):
            status, out, err = yield run_nsqd([flag], cwd=self.cwd())
            self.assertEqual((status, out.decode()), (ExitStatus(0, None), expected), err.decode())

    @inlineCallbacks
    def test_version_matches_gnsq_harness(self) -> Any:
        """The ``--version`` line matches the pattern gnsq's integration harness requires to start nsqd."""
        status, out, err = yield run_nsqd(["--version"], cwd=self.cwd())
        self.assertEqual(status, ExitStatus(0, None), err.decode())
        self.assertRegex(out.decode().rstrip("\n"), GNSQ_NSQD_VERSION)

    @inlineCallbacks
    def test_unknown_flag(self) -> Any:
        """An unknown flag exits 2 with Go's message on standard error."""
        status, out, err = yield run_nsqd(["--no-such-flag"], cwd=self.cwd())
        self.assertEqual(status, ExitStatus(2, None))
        self.assertEqual(err.decode().splitlines()[0], "flag provided but not defined: -no-such-flag")

    def _spelled(self, spelling: List[str]) -> "Deferred[None]":
        """Replay pub_too_big (--max-msg-size=100) with the flag spelled otherwise."""
        (case,) = select_cases(load_fixture("tcp_v2.json"), ["pub_too_big"])
        self.assertEqual(case["nsqd_flags"], ["--max-msg-size=100"])
        return replay_case(dict(case, nsqd_flags=[]), ProcessStarter(self, spelling))  # type: ignore[no-any-return]

    def test_flag_single_dash_space(self) -> "Deferred[None]":
        """``-max-msg-size 100`` (and a bare deprecated ``-verbose``) is understood."""
        return self._spelled(["-max-msg-size", "100", "-verbose"])

    def test_flag_double_dash_space(self) -> "Deferred[None]":
        """``--max-msg-size 100`` (and a bare boolean ``--snappy``) is understood."""
        return self._spelled(["--max-msg-size", "100", "--snappy"])

    def test_flag_single_dash_equals(self) -> "Deferred[None]":
        """``-max-msg-size=100`` (and ``-deflate=true``) is understood."""
        return self._spelled(["-max-msg-size=100", "-deflate=true"])

    def test_flag_double_dash_equals(self) -> "Deferred[None]":
        """``--max-msg-size=100`` (and ``--verbose=true``) is understood."""
        return self._spelled(["--max-msg-size=100", "--verbose=true"])

    @inlineCallbacks
    def test_sigterm(self) -> Any:
        """SIGTERM with a client connected: nsqd closes the client and exits 0 within 5 s."""
        process = NSQDProcess(LOOPBACK, cwd=self.cwd())
        self.addCleanup(ProcessStarter(self)._reap, process)
        yield process.start()
        replay = CaseReplay({"name": "idle_subscriber", "steps": [
            {"connect": "c1", "to": "nsqd_tcp"},
            {"conn": "c1", "send": "  V2"},
            {"conn": "c1", "send": "SUB t c\\n"},
            {"conn": "c1", "expect_frames": [{"type": 0, "size": 6, "data": "OK"}]},
        ]})
        self.addCleanup(replay.close_connections)
        yield replay.run(Target(process.host, {"nsqd_tcp": process.tcp_port}, NSQ_VERSION))
        status = yield process.stop("TERM", timeout=5.0)
        self.assertEqual(status, ExitStatus(0, None), process.output())
        connection = replay.connections["c1"]
        closed = yield connection.changes.wait_for(lambda: connection.lost is not None, 2.0)
        self.assertTrue(closed, "the client connection stayed open after nsqd exited")

    @inlineCallbacks
    def test_sigkill_then_restart_on_same_port(self) -> Any:
        """After SIGKILL a new nsqd listens on the same fixed TCP port at once."""
        port = free_port()
        args = ["--tcp-address=127.0.0.1:%d" % (port,), "--http-address=127.0.0.1:0"]
        first = NSQDProcess(args, cwd=self.cwd())
        self.addCleanup(ProcessStarter(self)._reap, first)
        yield first.start()
        self.assertEqual(first.tcp_port, port)
        # A connection that nsqd's side closes first leaves the port in
        # TIME_WAIT: the restart then needs SO_REUSEADDR, as with Go.
        replay = CaseReplay(pubsub_case("before_kill"))
        self.addCleanup(replay.close_connections)
        yield replay.run(Target(first.host, {"nsqd_tcp": first.tcp_port, "nsqd_http": first.http_port}, NSQ_VERSION))
        status = yield first.stop("KILL")
        self.assertEqual(status.signal, 9)
        yield replay.close_connections()

        second = NSQDProcess(args, cwd=self.cwd())
        self.addCleanup(ProcessStarter(self)._reap, second)
        yield second.start()
        self.assertEqual(second.tcp_port, port)
        again = CaseReplay(pubsub_case("after_restart"))
        self.addCleanup(again.close_connections)
        yield again.run(Target(second.host, {"nsqd_tcp": second.tcp_port, "nsqd_http": second.http_port}, NSQ_VERSION))
        yield again.close_connections()
        status = yield second.stop("TERM")
        self.assertEqual(status, ExitStatus(0, None), second.output())

    @inlineCallbacks
    def test_relative_data_path(self) -> Any:
        """A relative --data-path is taken relative to the working directory, and works."""
        cwd = self.cwd()
        os.makedirs(os.path.join(cwd, "data"))
        yield replay_case(pubsub_case(), ProcessStarter(self, ["--data-path=data"], cwd=cwd))
        self.assertEqual(os.listdir(cwd), ["data"])


def _process_case_test(case: Mapping[str, Any]) -> Callable[[TestCase], "Deferred[None]"]:
    """A test replaying a recorded case against a spawned nsqd."""

    def test(self: TestCase) -> "Deferred[None]":
        return replay_case(case, ProcessStarter(self))  # type: ignore[no-any-return]

    test.__name__ = generated_test_name("conformance_" + case["name"])
    test.__doc__ = "Against the process: " + case["description"]
    return test


def _generate() -> None:
    """Add the PROCESS_CASES tests (none if the fixture is missing: see below)."""
    try:
        cases = select_cases(load_fixture("tcp_v2.json"), PROCESS_CASES)
    except AssertionError:
        # Missing fixtures make tests.integration.test_conformance_tcp and
        # the flag spelling tests here fail with the explanation.
        return
    for case in cases:
        method = _process_case_test(case)
        setattr(NSQDProcessTests, method.__name__, method)


_generate()
