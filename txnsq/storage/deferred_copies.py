# -*- test-case-name: tests.test_storage_disk -*-
"""
Plain copies, in a disk queue's segments, of messages that are deferred
elsewhere: they are skipped when read, since the message is deferred
already.

Two sources: the runs a clean shutdown recorded in the deferred file
(:meth:`DeferredCopies.load`), and, after a crash, the deferred messages
recovered from the flight log, whose copies a clean shutdown before the
crash may have left in the segments without recording where
(:meth:`DeferredCopies.hold`).
"""

from __future__ import annotations

from collections import deque
from typing import Deque, Dict, List, Tuple

from txnsq.storage.diskqueue_format import DeferredState

__all__ = ["DeferredCopies"]


class DeferredCopies:
    """
    The copies one queue skips.

    :ivar count: recorded copies not read yet (the queue's depth leaves
        them out).
    :ivar held: after a crash, how many copies of each recovered deferred
        message may still be in the segments.
    """

    __slots__ = ("_runs", "count", "_unread", "held", "_held_end")

    def __init__(self) -> None:
        # Runs of [file, pos, count] in file order.
        self._runs: Deque[List[int]] = deque()
        self.count = 0
        # The messages whose recorded copies are unread, by body.
        self._unread: Dict[bytes, int] = {}
        self.held: Dict[bytes, int] = {}
        self._held_end = (0, 0)

    def load(self, state: DeferredState, items: List[Tuple[int, bytes]]) -> None:
        """Skip the runs of copies the deferred file records, of these messages."""
        self._runs = deque([list(run) for run in state.runs])
        self.count = state.copies
        unread: Dict[bytes, int] = {}
        for _, data in items:
            unread[data] = unread.get(data, 0) + 1
        self._unread = unread

    def hold(self, deferred: List[Tuple[int, bytes]], end: Tuple[int, int]) -> None:
        """Skip records equal to these recovered messages, up to ``end`` (file, pos)."""
        copies: Dict[bytes, int] = {}
        for _, data in deferred:
            copies[data] = copies.get(data, 0) + 1
        self.held = copies
        self._held_end = end

    def skip_copy(self, number: int, pos: int, data: bytes) -> bool:
        """Whether the record read at ``number``/``pos`` is a recorded copy
        (call only while :attr:`count`)."""
        run = self._runs[0]
        if (number, pos) < (run[0], run[1]):
            return False
        run[2] -= 1
        if not run[2]:
            self._runs.popleft()
        self.count -= 1
        unread = self._unread.get(data)
        if unread:
            self._unread[data] = unread - 1
        return True

    def skip_held_copy(self, number: int, pos: int, data: bytes) -> bool:
        """Whether the record read at ``number``/``pos`` is a plain copy
        of a deferred message recovered from the flight log (call only
        while :attr:`held`)."""
        copies = self.held
        if (number, pos) >= self._held_end:
            copies.clear()
            return False
        left = copies.get(data)
        if not left:
            return False
        if left == 1:
            del copies[data]
        else:
            copies[data] = left - 1
        return True

    def take_unread(self, data: bytes) -> bool:
        """Whether a recorded copy of ``data`` is still unread (it is then
        counted as used: the message need not be written again)."""
        unread = self._unread
        if unread.get(data):
            unread[data] -= 1
            return True
        return False

    def unread_runs(self, read_file: int, read_pos: int) -> List[List[int]]:
        """The runs of copies not read yet, starting where they now start
        (reading is at ``read_file``/``read_pos``)."""
        runs = [list(run) for run in self._runs]
        if runs and (read_file, read_pos) > (runs[0][0], runs[0][1]):
            # Some of the first run were skipped: the rest start here.
            runs[0][0], runs[0][1] = read_file, read_pos
        return runs

    def forget(self) -> None:
        """Skip nothing any more (the queue was emptied or read to its end)."""
        self.held.clear()
        self._runs.clear()
        self.count = 0
        self._unread = {}
