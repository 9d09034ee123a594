# -*- test-case-name: tests.integration.test_nsqd_process -*-
"""
Run the real ``nsqd`` console script as a child process, as test harnesses
of NSQ clients do: spawn it with ``--tcp-address=127.0.0.1:0``, read the
bound ports from its ``TCP: listening on HOST:PORT`` lines, signal it.

``nsqlookupd`` logs the same listening lines, so the same plumbing runs it:
pass ``command=nsqlookupd_command()`` (or use :class:`NSQLookupdProcess`
and :func:`run_nsqlookupd`).

Everything is driven by the reactor (``spawnProcess``); nothing blocks.
"""

from __future__ import annotations

import os
import re
import signal as _signal
import sys
from typing import Any, Dict, List, Mapping, NamedTuple, Optional, Sequence

from twisted.internet.defer import Deferred, inlineCallbacks
from twisted.internet.protocol import ProcessProtocol
from twisted.python.failure import Failure
from twisted.trial.unittest import FailTest

__all__ = [
    "ExitStatus",
    "GNSQ_NSQD_VERSION",
    "NSQDProcess",
    "NSQDStartError",
    "NSQLookupdProcess",
    "daemon_command",
    "free_port",
    "nsqd_command",
    "nsqlookupd_command",
    "run_nsqd",
    "run_nsqlookupd",
]

#: How long nsqd may take to print both listening lines.
START_TIMEOUT = 20.0

#: How long a one-shot command (``--version``) or a signalled nsqd may take
#: to exit before the test gives up (and kills it).
EXIT_TIMEOUT = 10.0

#: The pattern gnsq's integration harness requires of ``nsqd --version``
#: before it starts nsqd (gnsq 1.0.2, ``tests/integration_server.py``).
GNSQ_NSQD_VERSION = r"^nsqd v\d+\.\d+\.\d+(-\S+)? \(built w/[a-z0-9.-]+\)$"

_LISTENING = re.compile(rb"(TCP|HTTP|HTTPS|MetaQ): listening on (\S+):([0-9]+)")


class ExitStatus(NamedTuple):
    """How a process ended: ``code`` (None if signalled) or ``signal``."""

    code: Optional[int]
    signal: Optional[int]


class NSQDStartError(FailTest):
    """The daemon exited or stayed silent instead of listening; carries its output."""


def daemon_command(program: str) -> List[str]:
    """
    The command running one of txnsq's console scripts (``nsqd``,
    ``nsqlookupd``).

    The script installed next to the running interpreter (the venv's or
    tox env's ``bin/PROGRAM``) when there is one, else ``python -m
    txnsq.PROGRAM``.
    """
    script = os.path.join(os.path.dirname(sys.executable), program)
    if os.path.isfile(script) and os.access(script, os.X_OK):
        return [script]
    return [sys.executable, "-m", "txnsq." + program]


def nsqd_command() -> List[str]:
    """The command running the ``nsqd`` console script (see :func:`daemon_command`)."""
    return daemon_command("nsqd")


def nsqlookupd_command() -> List[str]:
    """The command running the ``nsqlookupd`` console script (see :func:`daemon_command`)."""
    return daemon_command("nsqlookupd")


def _program_name(command: Sequence[str]) -> str:
    """What to call the daemon in messages: ``nsqd`` for ``.../bin/nsqd`` or ``-m txnsq.nsqd``."""
    if len(command) >= 3 and command[1] == "-m":
        return command[2].rsplit(".", 1)[-1]
    return os.path.basename(command[0])


def _child_env(extra: Optional[Mapping[str, str]] = None) -> Dict[str, str]:
    """The environment for a child: ours, unbuffered (lines arrive as printed)."""
    env = dict(os.environ)
    env["PYTHONUNBUFFERED"] = "1"
    env.update(extra or {})
    return env


def _exit_status(reason: Failure) -> ExitStatus:
    value = reason.value
    return ExitStatus(getattr(value, "exitCode", None), getattr(value, "signal", None))


class _Collector(ProcessProtocol):
    """Collects stdout/stderr and the exit status; notifies line watchers."""

    def __init__(self) -> None:
        self.stdout = bytearray()
        self.stderr = bytearray()
        self.ended: Deferred[ExitStatus] = Deferred()
        self.status: Optional[ExitStatus] = None
        self.on_output: Optional[Any] = None

    def outReceived(self, data: bytes) -> None:
        self.stdout += data
        if self.on_output is not None:
            self.on_output()

    def errReceived(self, data: bytes) -> None:
        self.stderr += data
        if self.on_output is not None:
            self.on_output()

    def processEnded(self, reason: Failure) -> None:
        self.status = _exit_status(reason)
        self.ended.callback(self.status)

    def output(self) -> str:
        """Both streams, for failure messages."""
        return "stdout:\n%s\nstderr:\n%s" % (
            self.stdout.decode("utf-8", "replace"),
            self.stderr.decode("utf-8", "replace"),
        )


class NSQDProcess:
    """
    One spawned nsqd, or another daemon printing the same listening lines.

    :param args: the flags.
    :param command: what runs the daemon, before the flags; ``nsqd``
        (:func:`nsqd_command`, looked up at :meth:`start`) when omitted.
    :ivar ports: bound ports by listener (``TCP``, ``HTTP``, ``HTTPS``,
        ``MetaQ``) as printed on its listening lines.
    :ivar host: the host of its TCP listening line.
    :ivar frozen: whether it was sent SIGSTOP and not SIGCONT since.
    """

    def __init__(
        self,
        args: Sequence[str],
        reactor: Any = None,
        cwd: Optional[str] = None,
        env: Optional[Mapping[str, str]] = None,
        command: Optional[Sequence[str]] = None,
    ) -> None:
        if reactor is None:
            from twisted.internet import reactor as global_reactor

            reactor = global_reactor
        self.args = list(args)
        self.reactor = reactor
        self.cwd = cwd
        self.env = env
        self._command = None if command is None else list(command)
        self.collector = _Collector()
        self.transport: Any = None
        self.ports: Dict[str, int] = {}
        self.host = "127.0.0.1"
        self.frozen = False

    def command(self) -> List[str]:
        """The full command line: the daemon's command, then :attr:`args`."""
        prefix = self._command if self._command is not None else nsqd_command()
        return prefix + self.args

    @property
    def program(self) -> str:
        """The daemon's name, for messages (``nsqd``, ``nsqlookupd``)."""
        return _program_name(self.command())

    @property
    def tcp_port(self) -> int:
        """The TCP (V2 protocol) port."""
        return self.ports["TCP"]

    @property
    def http_port(self) -> int:
        """The HTTP API port."""
        return self.ports["HTTP"]

    @property
    def metaq_port(self) -> int:
        """The MetaQ listener's port (with ``--metaq-address``)."""
        return self.ports["MetaQ"]

    @property
    def ended(self) -> "Deferred[ExitStatus]":
        """A new Deferred firing with the exit status once it has exited."""
        done: Deferred[ExitStatus] = Deferred()
        if self.collector.status is not None:
            done.callback(self.collector.status)
        else:
            def relay(result: ExitStatus) -> ExitStatus:
                done.callback(result)
                return result

            self.collector.ended.addCallback(relay)
        return done

    def output(self) -> str:
        """Everything it printed so far."""
        return self.collector.output()

    def _scan(self) -> bool:
        """
        Record listening lines seen so far; True once TCP and HTTP are
        known, and MetaQ too when ``--metaq-address`` names one.
        """
        for stream in (self.collector.stdout, self.collector.stderr):
            for found in _LISTENING.finditer(bytes(stream)):
                label = found.group(1).decode("ascii")
                self.ports[label] = int(found.group(3))
                if label == "TCP":
                    self.host = found.group(2).decode("ascii").strip("[]")
        metaq = any(arg.startswith("--metaq-address=") and arg.split("=", 1)[1] for arg in self.args)
        return "TCP" in self.ports and "HTTP" in self.ports and ("MetaQ" in self.ports or not metaq)

    def start(self) -> "Deferred[NSQDProcess]":
        """
        Spawn it; fires with self once both listening lines appeared.

        Fails with :class:`NSQDStartError` (and kills the process) when it
        exits first or does not listen within ``START_TIMEOUT``.
        """
        started: Deferred[NSQDProcess] = Deferred()
        command = self.command()
        program = _program_name(command)

        def fail(message: str) -> None:
            if not started.called:
                started.errback(NSQDStartError(
                    "%s\ncommand: %s\n%s" % (message, " ".join(command), self.output())))

        def check() -> None:
            if not started.called and self._scan():
                self.collector.on_output = None
                if timer.active():
                    timer.cancel()
                started.callback(self)

        def exited(status: ExitStatus) -> ExitStatus:
            if timer.active():
                timer.cancel()
            fail("%s exited before listening: %s" % (program, status))
            return status

        def too_slow() -> None:
            fail("%s did not print both listening lines within %s s" % (program, START_TIMEOUT))
            self.kill()

        timer = self.reactor.callLater(START_TIMEOUT, too_slow)
        self.collector.on_output = check
        self.collector.ended.addCallback(exited)
        self.transport = self.reactor.spawnProcess(
            self.collector, command[0], command, env=_child_env(self.env), path=self.cwd
        )
        return started

    def signal(self, name: str) -> None:
        """
        Send a signal by name (``TERM``, ``KILL``, ``INT``, ``STOP``,
        ``CONT`` ...) if it still runs.
        """
        if self.collector.status is None:
            if name in ("STOP", "CONT"):
                self.frozen = name == "STOP"
            try:
                self.transport.signalProcess(getattr(_signal, "SIG" + name))
            except Exception:  # it exited meanwhile (ProcessExitedAlready)
                pass

    def kill(self) -> None:
        """SIGKILL it if it still runs."""
        self.signal("KILL")

    @inlineCallbacks
    def stop(self, sig: str = "TERM", timeout: float = EXIT_TIMEOUT) -> Any:
        """
        Send ``sig`` and wait for the exit; fires with its :class:`ExitStatus`.

        If it has not exited after ``timeout`` seconds it is killed and the
        Deferred fails with :class:`NSQDStartError` carrying its output.  A
        frozen (SIGSTOPped) process is sent SIGCONT after ``sig``, so that
        it can act on it.
        """
        self.signal(sig)
        if self.frozen:
            self.signal("CONT")
        ended = self.ended
        timer = self.reactor.callLater(timeout, self.kill)
        status = yield ended
        if timer.active():
            timer.cancel()
            return status
        raise NSQDStartError(
            "%s did not exit within %s s of SIG%s\n%s" % (self.program, timeout, sig, self.output())
        )


class NSQLookupdProcess(NSQDProcess):
    """One spawned ``nsqlookupd``: :class:`NSQDProcess` with its command."""

    def __init__(
        self,
        args: Sequence[str],
        reactor: Any = None,
        cwd: Optional[str] = None,
        env: Optional[Mapping[str, str]] = None,
    ) -> None:
        NSQDProcess.__init__(self, args, reactor, cwd, env, command=nsqlookupd_command())


@inlineCallbacks
def run_nsqd(
    args: Sequence[str],
    reactor: Any = None,
    cwd: Optional[str] = None,
    timeout: float = EXIT_TIMEOUT,
    command: Optional[Sequence[str]] = None,
) -> Any:
    """
    Run nsqd (or ``command``, as for :class:`NSQDProcess`) to completion
    (``--version``, a bad flag); fires with ``(ExitStatus, stdout bytes,
    stderr bytes)``.
    """
    process = NSQDProcess(args, reactor, cwd, command=command)
    reactor = process.reactor
    command = process.command()
    process.transport = reactor.spawnProcess(
        process.collector, command[0], command, env=_child_env(), path=cwd
    )
    timer = reactor.callLater(timeout, process.kill)
    status = yield process.ended
    if not timer.active():
        raise NSQDStartError(
            "%s %s did not exit within %s s\n%s"
            % (process.program, " ".join(args), timeout, process.output())
        )
    timer.cancel()
    return status, bytes(process.collector.stdout), bytes(process.collector.stderr)


def run_nsqlookupd(
    args: Sequence[str],
    reactor: Any = None,
    cwd: Optional[str] = None,
    timeout: float = EXIT_TIMEOUT,
) -> Any:
    """:func:`run_nsqd` for ``nsqlookupd``."""
    return run_nsqd(args, reactor, cwd, timeout, command=nsqlookupd_command())


def free_port() -> int:
    """
    A TCP port on 127.0.0.1 that is free right now (bound, then released).

    Racy by nature: another process may take it before the caller binds
    it.  Prefer port 0 and the listening lines; use this only where a
    port must be known in advance or kept across a restart.
    """
    import socket

    probe = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])
    finally:
        probe.close()

