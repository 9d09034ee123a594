# -*- test-case-name: tests.test_storage_disk -*-
"""
A thread that does the disk queues' ``fsync`` calls and meta file writes,
so that a sync does not hold the reactor (and every connection) for the
milliseconds an ``fsync`` takes.

Jobs run one at a time in the order submitted, so a queue's meta files are
written in order and each only after the data it describes was synced.
A queue that needs its files settled (before a synchronous sync, an empty,
a delete or a close) calls :meth:`SyncWorker.wait`.

Failures cannot be logged from the thread; they are kept and handed back
by :meth:`SyncWorker.failures` for the queue to log on the reactor thread.
"""

from __future__ import annotations

import os
import threading
from collections import deque
from typing import Callable, Deque, Dict, List, Optional, Tuple

__all__ = ["SyncWorker"]

_Job = Tuple[object, Optional[int], Optional[str], Optional[bytes]]


class SyncWorker:
    """
    One daemon thread, started on the first job, syncing for any number of
    queues.

    :param write_meta: writes a meta file atomically (``path, data``).
    """

    def __init__(self, write_meta: Callable[[str, bytes], None]) -> None:
        self._write_meta = write_meta
        self._jobs: Deque[_Job] = deque()
        self._condition = threading.Condition()
        self._pending: Dict[int, int] = {}
        self._failures: Dict[int, List[str]] = {}
        self._thread: Optional[threading.Thread] = None

    def submit(
        self,
        owner: object,
        fd: Optional[int],
        meta_path: Optional[str],
        meta: Optional[bytes],
    ) -> None:
        """
        Queue a job: ``fsync`` a duplicate of ``fd`` (if given), then write
        ``meta`` to ``meta_path`` (if given).  The caller may close ``fd``
        at once.
        """
        dup = os.dup(fd) if fd is not None else None
        key = id(owner)
        with self._condition:
            self._jobs.append((owner, dup, meta_path, meta))
            self._pending[key] = self._pending.get(key, 0) + 1
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._run, name="txnsq-disk-sync", daemon=True
                )
                self._thread.start()
            self._condition.notify_all()

    def wait(self, owner: object) -> None:
        """Block until every job ``owner`` submitted is done."""
        key = id(owner)
        with self._condition:
            while self._pending.get(key):
                self._condition.wait()

    def failures(self, owner: object) -> List[str]:
        """What failed in ``owner``'s jobs since the last call."""
        with self._condition:
            return self._failures.pop(id(owner), [])

    def _run(self) -> None:
        while True:
            with self._condition:
                while not self._jobs:
                    self._condition.wait()
                owner, fd, meta_path, meta = self._jobs.popleft()
            failure = None
            try:
                if fd is not None:
                    os.fsync(fd)
                if meta_path is not None and meta is not None:
                    self._write_meta(meta_path, meta)
            except OSError as error:
                failure = str(error)
            finally:
                if fd is not None:
                    try:
                        os.close(fd)
                    except OSError:
                        pass
            key = id(owner)
            with self._condition:
                if failure is not None:
                    self._failures.setdefault(key, []).append(failure)
                left = self._pending[key] - 1
                if left:
                    self._pending[key] = left
                else:
                    del self._pending[key]
                self._condition.notify_all()
