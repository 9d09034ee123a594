"""
Processes of the lab's hosts: each runs inside its host's namespace, in a
session of its own (a Ctrl-C at the lab's terminal reaches the lab, which
then tears down in order), with its output kept in the run's log folder.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import time
from typing import Dict, List, Optional, Pattern

from lab.errors import LabError
from lab.ledger import Ledger
from lab.net import Host

__all__ = ["LabProcess", "Launcher"]


class LabProcess:
    """
    One process on one host.

    :ivar name: the lab's name for it (``nsqd-n1``).
    :ivar host: where it runs.
    :ivar log_path: its stdout and stderr.
    """

    def __init__(self, name: str, host: Host, popen: subprocess.Popen, log_path: str, argv: List[str]) -> None:
        self.name = name
        self.host = host
        self.popen = popen
        self.log_path = log_path
        self.argv = argv

    @property
    def pid(self) -> int:
        """Its process id (``ip netns exec`` execs the command itself)."""
        return self.popen.pid

    def alive(self) -> bool:
        """Whether it is still running (or stopped)."""
        return self.popen.poll() is None

    def signal(self, signum: int) -> None:
        """Send ``signum`` (no error when it is already gone)."""
        if self.alive():
            try:
                os.kill(self.pid, signum)
            except ProcessLookupError:
                pass

    def kill(self) -> Optional[int]:
        """SIGKILL (after SIGCONT is not needed: a stopped process dies too) and wait."""
        self.signal(signal.SIGKILL)
        return self.wait(10)

    def terminate(self, timeout: float = 20.0) -> Optional[int]:
        """SIGTERM and wait up to ``timeout`` seconds, then SIGKILL.  Returns the exit status."""
        self.signal(signal.SIGCONT)
        self.signal(signal.SIGTERM)
        code = self.wait(timeout)
        if code is None:
            return self.kill()
        return code

    def wait(self, timeout: Optional[float] = None) -> Optional[int]:
        """Its exit status, or ``None`` if it is still running after ``timeout`` seconds."""
        try:
            return self.popen.wait(timeout)
        except subprocess.TimeoutExpired:
            return None

    def log(self) -> str:
        """Its output so far."""
        try:
            with open(self.log_path, errors="replace") as f:
                return f.read()
        except OSError:
            return ""

    def wait_for(self, pattern: "str | Pattern[str]", timeout: float = 30.0) -> "re.Match[str]":
        """
        Wait until its output matches ``pattern``; :class:`LabError` naming
        the process and the end of its log when it exits or time runs out.
        """
        regex = re.compile(pattern) if isinstance(pattern, str) else pattern
        deadline = time.monotonic() + timeout
        while True:
            match = regex.search(self.log())
            if match:
                return match
            if not self.alive():
                raise LabError(
                    "%s on %s exited (%s) before %r: %s"
                    % (self.name, self.host.name, self.popen.returncode, regex.pattern, self.log()[-600:].replace("\n", " | "))
                )
            if time.monotonic() > deadline:
                raise LabError(
                    "%s on %s: no %r in %.0f s: %s"
                    % (self.name, self.host.name, regex.pattern, timeout, self.log()[-600:].replace("\n", " | "))
                )
            time.sleep(0.05)

    def __repr__(self) -> str:
        return "<LabProcess %s pid %d on %s>" % (self.name, self.pid, self.host.name)


class Launcher:
    """
    Starts processes on hosts, each recorded in the ledger, its output in
    ``log_dir/<host>/<name>.log`` (appended: a restarted process keeps
    one log).

    :param ledger: records every process.
    :param log_dir: the run's log folder.
    :param base_env: the environment every process starts from.
    """

    def __init__(self, ledger: Ledger, log_dir: str, base_env: Dict[str, str]) -> None:
        self.ledger = ledger
        self.log_dir = log_dir
        self.base_env = base_env
        self.processes: List[LabProcess] = []

    def start(
        self,
        host: Host,
        name: str,
        argv: List[str],
        env: Optional[Dict[str, str]] = None,
        cwd: Optional[str] = None,
    ) -> LabProcess:
        """Start ``argv`` on ``host``."""
        folder = os.path.join(self.log_dir, host.name)
        os.makedirs(folder, exist_ok=True)
        log_path = os.path.join(folder, name + ".log")
        full_env = dict(self.base_env)
        if env:
            full_env.update(env)
        with open(log_path, "ab") as log:
            log.write(("\n=== %s start: %s\n" % (time.strftime("%H:%M:%S"), " ".join(argv))).encode())
            log.flush()
            try:
                popen = subprocess.Popen(
                    host.exec_argv(argv),
                    stdin=subprocess.DEVNULL,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    env=full_env,
                    cwd=cwd,
                    start_new_session=True,
                )
            except OSError as e:
                raise LabError("cannot start %s on %s: %s" % (argv[0], host.name, e))
        self.ledger.process(popen.pid, name)
        process = LabProcess(name, host, popen, log_path, argv)
        self.processes.append(process)
        return process

    def stop_all(self) -> None:
        """SIGKILL every process still running."""
        for process in self.processes:
            if process.alive():
                process.kill()
