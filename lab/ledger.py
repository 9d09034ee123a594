"""
What a lab run made -- namespaces, processes, mounts, directories,
files outside the run's folder -- kept
in a file as it is made, so that teardown (also after a failure, Ctrl-C
or a crash of the lab itself: ``python -m lab clean``) removes all of it.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import time
from typing import Dict, List, Sequence

__all__ = ["Ledger", "LEDGER_DIR", "NAMESPACE_PREFIX", "sweep"]

#: Where each run's ledger lives while the run's things exist.
LEDGER_DIR = "/run/txnsq-lab"

#: Every namespace the lab makes is named ``txl<run id>-<host>``.
NAMESPACE_PREFIX = "txl"


def _run(argv: List[str]) -> subprocess.CompletedProcess:
    return subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


class Ledger:
    """
    The things one run made, written to ``LEDGER_DIR/<run id>.json`` at
    every change.

    :param run_id: the run's short id.
    """

    def __init__(self, run_id: str) -> None:
        self.run_id = run_id
        self.path = os.path.join(LEDGER_DIR, run_id + ".json")
        self.namespaces: List[str] = []
        self.mounts: List[str] = []
        self.directories: List[str] = []
        self.files: List[str] = []
        self.pids: Dict[int, str] = {}
        os.makedirs(LEDGER_DIR, exist_ok=True)
        self._save()

    def _save(self) -> None:
        state = {
            "run_id": self.run_id,
            "namespaces": self.namespaces,
            "mounts": self.mounts,
            "directories": self.directories,
            "files": self.files,
            "pids": {str(pid): name for pid, name in self.pids.items()},
        }
        tmp = self.path + ".tmp"
        with open(tmp, "w") as f:
            json.dump(state, f)
        os.replace(tmp, self.path)

    def namespace(self, name: str) -> None:
        """A network namespace was made."""
        self.namespaces.append(name)
        self._save()

    def mount(self, path: str) -> None:
        """A file system was mounted at ``path``."""
        self.mounts.append(path)
        self._save()

    def unmounted(self, path: str) -> None:
        """The mount at ``path`` is gone."""
        if path in self.mounts:
            self.mounts.remove(path)
            self._save()

    def directory(self, path: str) -> None:
        """A temporary directory was made."""
        self.directories.append(path)
        self._save()

    def file(self, path: str) -> None:
        """A file outside the run's folder may be made (``/dev/shm`` leftovers): removed if there."""
        if path not in self.files:
            self.files.append(path)
            self._save()

    def process(self, pid: int, name: str) -> None:
        """A process was started."""
        self.pids[pid] = name
        self._save()

    def teardown(self, keep: bool = False) -> List[str]:
        """
        Remove everything listed (with ``keep``: leave it all, and return
        the commands that remove it).  Returns what could not be removed
        (empty when all went), or with ``keep`` the commands.
        """
        if keep:
            return ["python -m lab clean %s" % (self.run_id,)]
        problems = _remove(
            self.namespaces, self.mounts, self.directories, list(self.pids), self.files
        )
        if not problems:
            try:
                os.unlink(self.path)
            except FileNotFoundError:
                pass
        return problems


def _kill(pids: List[int]) -> None:
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
    # A stopped process dies on SIGKILL too; wait for the kernel to reap
    # (they are our children or the init's) before the namespace goes.
    deadline = time.monotonic() + 5
    for pid in pids:
        while time.monotonic() < deadline:
            try:
                done, _ = os.waitpid(pid, os.WNOHANG)
                if done:
                    break
            except ChildProcessError:
                if not os.path.exists("/proc/%d" % pid):
                    break
            time.sleep(0.02)


def _namespace_pids(namespace: str) -> List[int]:
    out = _run(["ip", "netns", "pids", namespace])
    return [int(p) for p in out.stdout.split()] if out.returncode == 0 else []


def _remove(
    namespaces: List[str],
    mounts: List[str],
    directories: List[str],
    pids: List[int],
    files: Sequence[str] = (),
) -> List[str]:
    problems: List[str] = []
    # Processes first: a namespace deleted under them keeps them alive.
    _kill([pid for pid in pids if os.path.exists("/proc/%d" % pid)])
    for ns in namespaces:
        _kill(_namespace_pids(ns))
    for path in sorted(mounts, key=len, reverse=True):
        if _is_mounted(path):
            out = _run(["umount", "-l", path])
            if out.returncode != 0:
                problems.append("umount %s: %s" % (path, out.stderr.strip()))
    for ns in namespaces:
        if ns in list_namespaces():
            out = _run(["ip", "netns", "del", ns])
            if out.returncode != 0:
                problems.append("ip netns del %s: %s" % (ns, out.stderr.strip()))
    for path in directories:
        shutil.rmtree(path, ignore_errors=True)
        if os.path.exists(path):
            problems.append("could not remove %s" % (path,))
    for path in files:
        try:
            os.unlink(path)
        except FileNotFoundError:
            pass
        except OSError as e:
            problems.append("could not remove %s: %s" % (path, e))
    return problems


def _is_mounted(path: str) -> bool:
    path = os.path.realpath(path)
    try:
        with open("/proc/mounts") as f:
            return any(line.split()[1] == path for line in f)
    except OSError:
        return False


def list_namespaces() -> List[str]:
    """The names of the network namespaces that ``ip netns`` knows."""
    out = _run(["ip", "netns", "list"])
    return [line.split()[0] for line in out.stdout.splitlines() if line.strip()]


def sweep(run_id: str = "") -> List[str]:
    """
    Remove what earlier runs left (all of them, or ``run_id``'s): their
    ledgers' contents, and any namespace named like the lab's.  Returns
    what could not be removed.
    """
    problems: List[str] = []
    if os.path.isdir(LEDGER_DIR):
        for name in sorted(os.listdir(LEDGER_DIR)):
            if not name.endswith(".json") or (run_id and name != run_id + ".json"):
                continue
            path = os.path.join(LEDGER_DIR, name)
            try:
                with open(path) as f:
                    state = json.load(f)
            except (OSError, ValueError):
                continue
            left = _remove(
                state.get("namespaces", []),
                state.get("mounts", []),
                state.get("directories", []),
                [int(p) for p in state.get("pids", {})],
                state.get("files", []),
            )
            problems.extend(left)
            if not left:
                os.unlink(path)
    strays = [
        ns
        for ns in list_namespaces()
        if ns.startswith(NAMESPACE_PREFIX + run_id) and "-" in ns
    ]
    problems.extend(_remove(strays, [], [], []))
    return problems
