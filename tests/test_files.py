"""Tests for txnsq.files: replacing a file atomically and durably."""

from __future__ import annotations

import errno
import os
import stat
from typing import List

from twisted.trial.unittest import SynchronousTestCase

from txnsq import files
from txnsq.files import fsync_directory, write_file_atomically


class WriteFileAtomicallyTests(SynchronousTestCase):
    """write_file_atomically."""

    def setUp(self) -> None:
        self.dir = self.mktemp()
        os.mkdir(self.dir)
        self.path = os.path.join(self.dir, "nsqd.dat")

    def test_write_and_replace(self) -> None:
        """The file is created (mode 0600), then replaced, and no temporary file is left."""
        write_file_atomically(self.path, b"one")
        write_file_atomically(self.path, bytearray(b"two"))
        with open(self.path, "rb") as f:
            self.assertEqual(f.read(), b"two")
        self.assertEqual(stat.S_IMODE(os.stat(self.path).st_mode), 0o600)
        self.assertEqual(os.listdir(self.dir), ["nsqd.dat"])

    def test_syncs_file_then_directory(self) -> None:
        """The temporary file is fsynced before the rename, the directory after it."""
        synced: List[str] = []
        real_fsync = os.fsync

        def fsync(fd: int) -> None:
            target = os.readlink("/proc/self/fd/%d" % (fd,)) if os.path.exists("/proc/self/fd") else "?"
            synced.append("dir" if os.path.isdir(target) else ("tmp" if target.endswith(".tmp") else target))
            real_fsync(fd)

        self.patch(files.os, "fsync", fsync)
        write_file_atomically(self.path, b"data")
        if os.path.exists("/proc/self/fd"):
            self.assertEqual(synced, ["tmp", "dir"])
        else:
            self.assertEqual(len(synced), 2)

    def test_rename_failure(self) -> None:
        """When the rename fails the error is raised and the temporary file removed."""
        os.mkdir(self.path)
        with open(os.path.join(self.path, "keep"), "wb"):
            pass
        self.assertRaises(OSError, write_file_atomically, self.path, b"data")
        self.assertEqual(os.listdir(self.dir), ["nsqd.dat"])

    def test_write_failure(self) -> None:
        """When the write fails (a full disk) the error is raised, the old file kept, the temporary removed."""
        write_file_atomically(self.path, b"old")

        def full(fd: int, data: object) -> int:
            raise OSError(errno.ENOSPC, "No space left on device")

        self.patch(files.os, "write", full)
        self.assertRaises(OSError, write_file_atomically, self.path, b"new")
        with open(self.path, "rb") as f:
            self.assertEqual(f.read(), b"old")
        self.assertEqual(os.listdir(self.dir), ["nsqd.dat"])

    def test_missing_directory(self) -> None:
        """Writing into a missing directory raises OSError."""
        self.assertRaises(OSError, write_file_atomically, os.path.join(self.dir, "no", "nsqd.dat"), b"x")


class FsyncDirectoryTests(SynchronousTestCase):
    """fsync_directory."""

    def test_unsupported_is_not_an_error(self) -> None:
        """A filesystem that cannot sync a directory (EINVAL) is not an error; EIO is."""

        def refuse(code: int):  # type: ignore[no-untyped-def]
            def fsync(fd: int) -> None:
                raise OSError(code, os.strerror(code))

            return fsync

        directory = self.mktemp()
        os.mkdir(directory)
        self.patch(files.os, "fsync", refuse(errno.EINVAL))
        fsync_directory(directory)
        self.patch(files.os, "fsync", refuse(errno.EIO))
        self.assertRaises(OSError, fsync_directory, directory)
