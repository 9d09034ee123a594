# -*- test-case-name: tests.test_files -*-
"""
Replacing a file so that a crash leaves the old or the new one, never a
mix: the one helper nsqd's metadata (``nsqd.dat``), the disk queues' meta
and deferred files, the retained log's sealed indexes, the flight logs
and the Spark spool all write with.
"""

from __future__ import annotations

import errno
import os
import random
from typing import Union

__all__ = ["fsync_directory", "write_file_atomically"]

_random = random.SystemRandom()


def fsync_directory(path: str) -> None:
    """
    Make the renames and new names in directory ``path`` durable.

    :raises OSError: the directory could not be opened or synced (a
        filesystem that cannot sync a directory at all is not an error).
    """
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    try:
        os.fsync(fd)
    except OSError as error:
        # Some filesystems cannot fsync a directory; the rename stands.
        if error.errno not in (errno.EINVAL, errno.ENOTSUP, errno.EBADF):
            raise
    finally:
        os.close(fd)


def write_file_atomically(path: str, data: Union[bytes, bytearray, memoryview]) -> None:
    """
    Replace the file ``path`` with ``data``: write ``<path>.<random>.tmp``
    beside it (mode 0600, named as Go names its own), ``fsync`` it, rename
    it over ``path``, ``fsync`` the directory.

    :raises OSError: the file could not be written or renamed (the
        temporary file is removed and ``path`` is untouched), or the
        directory not synced (the new file is then in place, maybe not yet
        durable).
    """
    tmp = "%s.%d.tmp" % (path, _random.getrandbits(62))
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        try:
            with memoryview(data) as view:
                written = 0
                while written < len(view):
                    written += os.write(fd, view[written:])
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
    fsync_directory(os.path.dirname(path) or ".")
