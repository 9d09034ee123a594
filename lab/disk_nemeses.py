"""
Nemeses of a node's disk, each logged into the round's history like
those of :mod:`lab.nemesis`:

- :class:`PowerLoss`: the nsqd runs under the power-loss shim
  (:mod:`lab.powerloss`, set up by :func:`under_power_loss`); ``start``
  SIGKILLs it and puts every file back to what it held at its last
  ``fsync``; ``stop`` restarts it, still under the shim.
- :class:`DiskFull`: the file system of a path (a small tmpfs, see
  :func:`on_small_tmpfs`) filled to the last byte (and, held, filled
  again as space is freed); ``stop`` frees it.
- :class:`StoppedDamage`: the nsqd stopped cleanly (SIGTERM), its files
  damaged by a callback while it is down, then restarted.
"""

from __future__ import annotations

import os
import tempfile
import threading
import time
from typing import Any, Callable, Dict, List, Optional

from lab.errors import LabError
from lab.history import History
from lab.nemesis import Nemesis
from lab.world import NsqdNode, World

__all__ = ["DiskFull", "PowerLoss", "StoppedDamage", "disk_faults", "on_small_tmpfs", "under_power_loss"]


class _DiskFaults:
    """:mod:`lab.disk_faults`, its ``DiskFaultError`` raised as :class:`LabError` (a round's failure)."""

    def __init__(self, module: Any) -> None:
        self._module = module

    def __getattr__(self, name: str) -> Any:
        function = getattr(self._module, name)
        error = self._module.DiskFaultError

        def call(*args: Any, **kwargs: Any) -> Any:
            try:
                return function(*args, **kwargs)
            except error as e:
                raise LabError("%s: %s" % (name, e))

        return call


def disk_faults() -> Any:
    """
    :mod:`lab.disk_faults`, imported when first used (the lab lists its
    scenarios without it), raising :class:`LabError` where it raises
    ``DiskFaultError``.

    :raises LabError: it is not there.
    """
    try:
        from lab import disk_faults as module
    except ImportError as e:
        raise LabError("lab.disk_faults is missing: %s" % (e,))
    return _DiskFaults(module)


def _powerloss() -> Any:
    try:
        import lab.powerloss as module
    except ImportError as e:
        raise LabError("lab.powerloss is missing: %s" % (e,))
    return module


#: Where the shim is built once for every round (it is rebuilt when its source changes).
SHIM_CACHE = os.path.join(tempfile.gettempdir(), "txnsq-lab-powerloss")


def under_power_loss(world: World, node: NsqdNode) -> str:
    """
    Run ``node`` (from its next start) under the power-loss shim, watching
    its data path; returns the journal folder.

    :raises LabError: the shim cannot be built here (no C compiler).
    """
    powerloss = _powerloss()
    try:
        library = powerloss.build(SHIM_CACHE)
    except powerloss.PowerLossUnavailable as e:
        raise LabError("power loss unavailable: %s" % (e,))
    journal = os.path.join(world.round_dir, "powerloss", node.name)
    os.makedirs(node.data_path, exist_ok=True)
    node.env.update(powerloss.environment(library, journal, node.data_path))
    return journal


def on_small_tmpfs(world: World, path: str, size: int) -> None:
    """A tmpfs of ``size`` bytes mounted at ``path`` (recorded in the ledger: teardown unmounts it)."""
    os.makedirs(path, exist_ok=True)
    disk_faults().mount_small_tmpfs(path, size)
    world.ledger.mount(path)


class PowerLoss(Nemesis):
    """
    The power of ``node``'s host cut: SIGKILL, then every write it made
    since its last ``fsync`` undone (``lose_unsynced_writes``); ``stop``
    restarts it on what is left.
    """

    name = "power-loss"

    def __init__(self, world: World, history: History, node: NsqdNode, journal: str) -> None:
        super().__init__(world, history)
        self.node = node
        self.journal = journal
        self.report: Optional[Any] = None

    def describe(self) -> Dict[str, Any]:
        fields: Dict[str, Any] = {"node": self.node.name}
        if self.report is not None:
            fields.update(
                files=self.report.files,
                files_truncated=self.report.files_truncated,
                bytes_discarded=self.report.bytes_discarded,
                warnings=self.report.warnings[:5],
                details=[
                    [os.path.relpath(d.path, self.node.data_path), d.size_before, d.size_after, d.bytes_discarded]
                    for d in self.report.details[:20]
                ],
            )
        return fields

    def _start(self) -> None:
        process = self.node.process
        assert process is not None
        process.kill()
        self.report = _powerloss().lose_unsynced_writes(self.journal)
        self.history.event("info", "power-loss-report", **self.describe())

    def _stop(self) -> None:
        self.node.start()


class DiskFull(Nemesis):
    """
    The file system holding ``path`` filled (``leave_bytes`` left);
    ``stop`` frees it.

    :param hold: fill again every ``interval`` seconds while it lasts, so
        that space nsqd frees (consumed segments it deletes) is taken
        back and writes keep failing.
    """

    name = "disk-full"

    def __init__(self, world: World, history: History, path: str, leave_bytes: int = 0,
                 hold: bool = False, interval: float = 0.05) -> None:
        super().__init__(world, history)
        self.path = path
        self.leave_bytes = leave_bytes
        self.hold = hold
        self.interval = interval
        self.fillers: List[str] = []
        self._holding = threading.Event()
        self._thread: Optional[threading.Thread] = None

    def describe(self) -> Dict[str, Any]:
        return {"path": self.path, "hold": self.hold}

    def _start(self) -> None:
        faults = disk_faults()
        self.fillers.append(faults.fill(self.path, leave_bytes=self.leave_bytes))
        st = os.statvfs(self.path)
        self.history.event("info", "disk-full-filled", path=self.path, free_bytes=st.f_bavail * st.f_frsize)
        if self.hold:
            self._holding.set()
            self._thread = threading.Thread(target=self._keep_full, args=(faults,), daemon=True)
            self._thread.start()

    def _keep_full(self, faults: Any) -> None:
        while self._holding.is_set():
            try:
                self.fillers.append(faults.fill(self.path, leave_bytes=self.leave_bytes))
            except LabError:
                return
            time.sleep(self.interval)

    def _stop(self) -> None:
        self._holding.clear()
        if self._thread is not None:
            self._thread.join(10)
            self._thread = None
        faults = disk_faults()
        fillers, self.fillers = self.fillers, []
        for filler in fillers:
            faults.unfill(filler)


class StoppedDamage(Nemesis):
    """
    ``node`` stopped with SIGTERM (a clean shutdown), ``damage()`` run on
    its files, and (``stop``) started again on them.

    :param damage: does the damage and records what it did in the history.
    :param label: its name in the history.
    """

    name = "damage"

    def __init__(self, world: World, history: History, node: NsqdNode, damage: Callable[[], None], label: str) -> None:
        super().__init__(world, history)
        self.node = node
        self.damage = damage
        self.label = label
        self.exit_code: Optional[int] = None

    def describe(self) -> Dict[str, Any]:
        return {"node": self.node.name, "label": self.label}

    def _start(self) -> None:
        process = self.node.process
        assert process is not None
        self.exit_code = process.terminate(30)
        self.damage()

    def _stop(self) -> None:
        self.node.start()
