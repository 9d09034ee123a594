# -*- test-case-name: tests.test_metadata -*-
"""
nsqd's data-path lock, as Go's ``internal/dirlock`` takes it: ``flock`` on
the directory itself, so that a Go nsqd and a txnsq nsqd never share one
data path.
"""

from __future__ import annotations

import errno
import os
import sys
from typing import Optional

if sys.platform != "win32":
    import fcntl

__all__ = ["DataPathError", "DataPathInUse", "DataPathLock"]


class DataPathError(Exception):
    """The data path cannot be locked: ``str()`` says why."""


class DataPathInUse(DataPathError):
    """
    Another process (a Go or txnsq nsqd) holds the data path's lock.
    ``str()`` is Go nsqd's message.
    """


class DataPathLock:
    """
    An exclusive lock on a data directory, the one Go nsqd takes (an
    ``flock(LOCK_EX|LOCK_NB)`` on a descriptor of the directory itself).

    ``flock`` locks belong to an open file description, so two locks on
    one directory exclude each other even within one process.  As in Go,
    there is no lock on Windows.

    :param path: the data path; ``""`` is the current directory, as in Go.
    :ivar path: the locked directory (the current one resolved).
    """

    def __init__(self, path: str) -> None:
        self.path = path if path else os.getcwd()
        self._fd: Optional[int] = None

    def __repr__(self) -> str:
        return "<DataPathLock %s%s>" % (self.path, " locked" if self.locked else "")

    @property
    def locked(self) -> bool:
        """Whether this object holds the lock."""
        return self._fd is not None

    def acquire(self) -> None:
        """
        Take the lock, without waiting.  Does nothing if already held.

        :raises DataPathInUse: another holder has it.
        :raises DataPathError: the directory cannot be opened (it is
            missing, say) or locked.
        """
        if self._fd is not None or sys.platform == "win32":
            return
        try:
            fd = os.open(self.path, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
        except OSError as e:
            raise DataPathError(
                "cannot open --data-path=%s - %s" % (self.path, e.strerror or e)
            ) from e
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as e:
            os.close(fd)
            if e.errno in (errno.EWOULDBLOCK, errno.EAGAIN):
                raise DataPathInUse(
                    "--data-path=%s in use (possibly by another instance of nsqd)"
                    % (self.path,)
                ) from e
            # Go's dirlock wording, for a lock that cannot be taken at all
            # (ENOLCK on some network filesystems).
            raise DataPathError(
                "cannot lock directory %s - %s" % (self.path, e.strerror or e)
            ) from e
        self._fd = fd

    def release(self) -> None:
        """Drop the lock (closing the descriptor).  Does nothing if not held."""
        fd, self._fd = self._fd, None
        if fd is None:
            return
        try:
            fcntl.flock(fd, fcntl.LOCK_UN)
        except OSError:
            pass  # closing the descriptor releases it anyway
        finally:
            os.close(fd)
