"""
Tests for ``python -m lab``: bad input answered with one line and exit
2, and a run interrupted mid-round leaving nothing behind.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from typing import List

from twisted.trial.unittest import SkipTest, TestCase

from lab.__main__ import main
from lab.ledger import LEDGER_DIR, list_namespaces
from lab.world import REPO


def _lab(*argv: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "lab", *argv], cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        text=True, timeout=120,
    )


class UsageTests(TestCase):
    """Bad input: one line naming what is wrong, exit status 2."""

    def test_unknown_scenario(self) -> None:
        """A scenario that does not exist is named in one line, exit 2, nothing made."""
        out = _lab("run", "no-such-scenario", "--quick")
        self.assertEqual(out.returncode, 2)
        self.assertEqual(out.stderr.strip().splitlines(), ["lab: no scenario named 'no-such-scenario' (python -m lab list names them)"])
        # Nothing was started: no run id was given out.
        self.assertNotIn("run id", out.stdout)

    def test_not_root(self) -> None:
        """Without root the lab says so in one line and exits 2."""
        self.patch(os, "geteuid", lambda: 1000)
        err: List[str] = []
        self.patch(sys, "stderr", _Lines(err))
        self.assertEqual(main(["run", "queue-sigterm", "--quick"]), 2)
        self.assertEqual(len(err), 1)
        self.assertIn("needs root", err[0])

    def test_missing_tool(self) -> None:
        """A missing command is named with its Debian package, exit 2."""
        if os.geteuid() != 0:
            raise SkipTest("the root check comes first")
        import shutil

        real = shutil.which
        self.patch(shutil, "which", lambda name, *a, **k: None if name == "iptables" else real(name, *a, **k))
        err: List[str] = []
        self.patch(sys, "stderr", _Lines(err))
        self.assertEqual(main(["run", "queue-sigterm", "--quick"]), 2)
        self.assertEqual(err, ["lab: missing iptables (Debian package iptables; bash .ci/ensure_lab.sh installs it)"])

    def test_list(self) -> None:
        """``list`` names at least 14 scenarios, each with its workload and nemeses."""
        out = _lab("list")
        self.assertEqual(out.returncode, 0, out.stderr)
        lines = out.stdout.splitlines()
        self.assertGreaterEqual(len(lines), 11)
        for line in lines:
            self.assertEqual(len(line.split()) >= 4, True, line)


class _Lines:
    def __init__(self, lines: List[str]) -> None:
        self.lines = lines

    def write(self, text: str) -> None:
        self.lines.extend(t for t in text.splitlines() if t)

    def flush(self) -> None:
        pass


class InterruptTests(TestCase):
    """A run interrupted at any point leaves no namespace, process or rule behind."""

    timeout = 240

    def _interrupt_after(self, marker: str) -> None:
        if os.geteuid() != 0:
            raise SkipTest("the lab needs root")
        process = subprocess.Popen(
            [sys.executable, "-m", "lab", "run", "queue-sigterm", "--quick"],
            cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        )
        assert process.stdout is not None
        first = process.stdout.readline()
        while first.startswith("=="):
            first = process.stdout.readline()
        match = re.search(r"run id (\w+)", first)
        self.assertIsNotNone(match, first)
        run_id = match.group(1) if match else ""
        prefix = "txl" + run_id
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if marker == "namespaces" and len([n for n in list_namespaces() if n.startswith(prefix)]) >= 3:
                break
            if marker == "nsqd" and self._nsqd_pids(prefix):
                break
            time.sleep(0.05)
        else:
            process.kill()
            self.fail("the run never reached %s" % marker)
        pids = self._all_pids(prefix)
        process.send_signal(signal.SIGINT)
        out, _ = process.communicate(timeout=60)
        self.assertEqual(process.returncode, 130, out)
        self.assertEqual([n for n in list_namespaces() if n.startswith(prefix)], [])
        alive = [p for p in pids if os.path.exists("/proc/%d" % p)]
        self.assertEqual(alive, [], out)
        ledgers = [f for f in os.listdir(LEDGER_DIR) if f.startswith(run_id)] if os.path.isdir(LEDGER_DIR) else []
        self.assertEqual(ledgers, [])

    def _nsqd_pids(self, prefix: str) -> List[int]:
        return [p for p in self._all_pids(prefix) if b"txnsq.nsqd" in _cmdline(p)]

    def _all_pids(self, prefix: str) -> List[int]:
        pids: List[int] = []
        for ns in list_namespaces():
            if ns.startswith(prefix):
                out = subprocess.run(["ip", "netns", "pids", ns], stdout=subprocess.PIPE, text=True)
                pids.extend(int(p) for p in out.stdout.split())
        return pids

    def test_interrupt_while_building(self) -> None:
        """Ctrl-C while the hosts are being made removes the ones made."""
        self._interrupt_after("namespaces")

    def test_interrupt_while_running(self) -> None:
        """Ctrl-C once nsqds run kills every process and removes every namespace."""
        self._interrupt_after("nsqd")


def _cmdline(pid: int) -> bytes:
    try:
        with open("/proc/%d/cmdline" % pid, "rb") as f:
            return f.read()
    except OSError:
        return b""
