# -*- test-case-name: lab.tests.test_disk_faults -*-
"""
Disks that fill up or go bad: small tmpfs mounts to give nsqd a data path
that fills, a filler file that takes what room is left, bytes flipped and
tails cut off files, and the functions that find those files in an nsqd
data path (go-diskqueue segments, retained-log segments and indexes).

Mounts are made in the lab's own mount namespace (the root one: the lab's
hosts are network namespaces only), under a lab temporary directory;
:func:`mounts_under` lets a teardown find any left behind.
"""

from __future__ import annotations

import ctypes
import errno
import os
import random
import re
from typing import Callable, List, Optional

from txnsq.storage.diskqueue_format import meta_file_name, parse_segment_file_name
from txnsq.storage.log_format import parse_segment_file_name as parse_log_segment_file_name

__all__ = [
    "DiskFaultError",
    "diskqueue_meta",
    "diskqueue_segments",
    "fill",
    "flip_byte",
    "free_bytes",
    "log_indexes",
    "log_segments",
    "mount_small_tmpfs",
    "mounts_under",
    "truncate_tail",
    "unfill",
    "unmount",
]

#: The "device" named in /proc/mounts for the lab's tmpfs mounts.
TMPFS_SOURCE = "txnsq-lab"

_FILLER_PREFIX = ".lab-filler-"
_CHUNK = 1 << 20
_MNT_DETACH = 2
_INDEX = re.compile(r"^([0-9]{20})\.index$")


class DiskFaultError(Exception):
    """A disk fault could not be made or undone; ``str()`` says why."""


# -- mounts --------------------------------------------------------------------


def _libc() -> ctypes.CDLL:
    return ctypes.CDLL(None, use_errno=True)


def mount_small_tmpfs(path: str, size_bytes: int) -> None:
    """
    Mount a tmpfs of ``size_bytes`` (rounded up to whole pages by the
    kernel) on ``path``, created if need be.

    :raises DiskFaultError: not root, a size below one byte, ``path``
        already a mount point, or the mount refused (the kernel's reason).
    """
    if size_bytes < 1:
        raise DiskFaultError("a tmpfs needs a size of at least 1 byte, not %d" % (size_bytes,))
    if os.geteuid() != 0:
        raise DiskFaultError("mounting a tmpfs needs root (euid is %d)" % (os.geteuid(),))
    path = os.path.realpath(path)
    os.makedirs(path, exist_ok=True)
    if os.path.ismount(path):
        raise DiskFaultError("%s is already a mount point" % (path,))
    options = ("size=%d,mode=0755" % (size_bytes,)).encode()
    if _libc().mount(TMPFS_SOURCE.encode(), os.fsencode(path), b"tmpfs", 0, options) != 0:
        code = ctypes.get_errno()
        raise DiskFaultError("cannot mount a tmpfs on %s: %s" % (path, os.strerror(code)))


def unmount(path: str) -> None:
    """
    Unmount ``path``.  When it is busy (a process still has a file open
    there), it is detached instead: gone from the tree at once, freed when
    the last file closes.

    :raises DiskFaultError: ``path`` is not a mount point, or the kernel
        refuses both (its reason).
    """
    path = os.path.realpath(path)
    target = os.fsencode(path)
    libc = _libc()
    if libc.umount2(target, 0) == 0:
        return
    code = ctypes.get_errno()
    if code == errno.EBUSY:
        if libc.umount2(target, _MNT_DETACH) == 0:
            return
        code = ctypes.get_errno()
    raise DiskFaultError("cannot unmount %s: %s" % (path, os.strerror(code)))


def mounts_under(prefix: str) -> List[str]:
    """
    Mount points at or below ``prefix``, from ``/proc/mounts``, deepest
    first (the order to unmount them in).
    """
    top = os.path.realpath(prefix)
    found = []
    with open("/proc/mounts", "rb") as mounts:
        for line in mounts:
            fields = line.split()
            if len(fields) < 2:
                continue
            # /proc/mounts writes space, tab, newline and backslash as \ooo.
            point = os.fsdecode(re.sub(rb"\\([0-7]{3})", lambda m: bytes([int(m.group(1), 8)]), fields[1]))
            if point == top or point.startswith(top.rstrip("/") + "/"):
                found.append(point)
    return sorted(set(found), key=lambda p: (-p.count("/"), p))


# -- filling ---------------------------------------------------------------------


def free_bytes(path: str) -> int:
    """Bytes an unprivileged writer can still put on ``path``'s filesystem."""
    st = os.statvfs(path)
    return st.f_bavail * st.f_frsize


def fill(path: str, leave_bytes: int = 0) -> str:
    """
    Write a filler file in the directory ``path`` until the filesystem is
    full (``ENOSPC``), or until about ``leave_bytes`` are left (to within
    a block: filesystems count space in blocks).  The file is synced, so
    the space is really taken.

    :return: the filler's path, for :func:`unfill`.
    :raises DiskFaultError: ``path`` is not a directory, or writing failed
        otherwise than for lack of space.
    """
    if not os.path.isdir(path):
        raise DiskFaultError("cannot fill %s: not a directory" % (path,))
    if leave_bytes < 0:
        raise DiskFaultError("leave_bytes must not be negative, not %d" % (leave_bytes,))
    number = 0
    while os.path.exists(os.path.join(path, "%s%d" % (_FILLER_PREFIX, number))):
        number += 1
    filler = os.path.join(path, "%s%d" % (_FILLER_PREFIX, number))
    try:
        fd = os.open(filler, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except OSError as error:
        raise DiskFaultError("cannot create a filler in %s: %s" % (path, error.strerror))
    try:
        left = free_bytes(path) - leave_bytes if leave_bytes else None
        chunk = _CHUNK
        zeros = bytes(_CHUNK)
        while chunk and (left is None or left > 0):
            size = chunk if left is None else min(chunk, left)
            try:
                written = os.write(fd, zeros[:size])
            except OSError as error:
                if error.errno not in (errno.ENOSPC, errno.EDQUOT):
                    raise DiskFaultError("cannot fill %s: %s" % (path, error.strerror))
                # Smaller writes take the space a bigger one could not.
                chunk //= 2
                continue
            if left is not None:
                left -= written
        try:
            os.fsync(fd)
        except OSError as error:
            # A filesystem with delayed allocation finds it is full here.
            if error.errno not in (errno.ENOSPC, errno.EDQUOT):
                raise DiskFaultError("cannot sync the filler %s: %s" % (filler, error.strerror))
    finally:
        os.close(fd)
    return filler


def unfill(filler_path: str) -> None:
    """
    Remove a filler made by :func:`fill`, giving its space back.

    :raises DiskFaultError: it is not a filler, or cannot be removed.
    """
    if not os.path.basename(filler_path).startswith(_FILLER_PREFIX):
        raise DiskFaultError("%s is not a filler made by fill()" % (filler_path,))
    try:
        os.unlink(filler_path)
    except OSError as error:
        raise DiskFaultError("cannot remove the filler %s: %s" % (filler_path, error.strerror))


# -- damage ------------------------------------------------------------------------


def flip_byte(path: str, offset: Optional[int], rng: random.Random, mask: int = 0xFF) -> int:
    """
    Flip the bits ``mask`` of one byte of the file ``path`` (every bit, by
    default: the byte always changes), at ``offset`` or, with ``None``, at
    an offset ``rng`` picks.  The file is synced after.

    :return: the offset flipped.
    :raises DiskFaultError: the file is empty or cannot be read or
        written, ``offset`` is outside it, or ``mask`` flips nothing.
    """
    if not 0 < mask <= 0xFF:
        raise DiskFaultError("mask must flip 1 to 8 bits of a byte, not %r" % (mask,))
    try:
        fd = os.open(path, os.O_RDWR)
    except OSError as error:
        raise DiskFaultError("cannot open %s: %s" % (path, error.strerror))
    try:
        size = os.fstat(fd).st_size
        if size == 0:
            raise DiskFaultError("cannot flip a byte of %s: it is empty" % (path,))
        if offset is None:
            offset = rng.randrange(size)
        elif not 0 <= offset < size:
            raise DiskFaultError("offset %d is outside %s (%d bytes)" % (offset, path, size))
        old = os.pread(fd, 1, offset)
        os.pwrite(fd, bytes([old[0] ^ mask]), offset)
        os.fsync(fd)
    except OSError as error:
        raise DiskFaultError("cannot flip a byte of %s: %s" % (path, error.strerror))
    finally:
        os.close(fd)
    return offset


def truncate_tail(path: str, nbytes: int) -> int:
    """
    Cut the last ``nbytes`` bytes off the file ``path`` (all of it if it
    is shorter), and sync it.

    :return: the bytes cut.
    :raises DiskFaultError: ``nbytes`` is negative, or the file cannot be
        cut.
    """
    if nbytes < 0:
        raise DiskFaultError("cannot cut %d bytes" % (nbytes,))
    try:
        fd = os.open(path, os.O_RDWR)
    except OSError as error:
        raise DiskFaultError("cannot open %s: %s" % (path, error.strerror))
    try:
        size = os.fstat(fd).st_size
        cut = min(nbytes, size)
        os.ftruncate(fd, size - cut)
        os.fsync(fd)
    except OSError as error:
        raise DiskFaultError("cannot cut %s: %s" % (path, error.strerror))
    finally:
        os.close(fd)
    return cut


# -- targets in a data path ----------------------------------------------------------


def _queue_name(topic: str, channel: Optional[str]) -> str:
    # A channel's disk queue is named as go nsqd names it: topic:channel.
    return topic if channel is None else "%s:%s" % (topic, channel)


def diskqueue_segments(data_path: str, topic: str, channel: Optional[str] = None) -> List[str]:
    """
    The go-diskqueue segment files (``NAME.diskqueue.NNNNNN.dat``) of a
    topic's queue, or of one of its channels' queues, oldest first.
    Files set aside as ``.bad`` are not included.

    :raises DiskFaultError: ``data_path`` cannot be listed.
    """
    name = _queue_name(topic, channel)
    found = []
    for filename in _listdir(data_path):
        parsed = parse_segment_file_name(filename)
        if parsed is not None and parsed[0] == name:
            found.append((parsed[1], os.path.join(data_path, filename)))
    return [path for _, path in sorted(found)]


def diskqueue_meta(data_path: str, topic: str, channel: Optional[str] = None) -> str:
    """The path of a topic's (or channel's) meta file, whether or not it exists."""
    return os.path.join(data_path, meta_file_name(_queue_name(topic, channel)))


def log_segments(data_path: str, topic: str) -> List[str]:
    """
    The segment files (``<base>.log``) of a retained topic's log, in
    ``<data_path>/retained/TOPIC-N/``, by partition then base offset.
    Files set aside as ``.bad`` are not included.

    :raises DiskFaultError: ``data_path`` cannot be listed.
    """
    return _log_files(data_path, topic, parse_log_segment_file_name)


def log_indexes(data_path: str, topic: str) -> List[str]:
    """
    The index files (``<base>.index``) of a retained topic's log, in the
    order of :func:`log_segments`.

    :raises DiskFaultError: ``data_path`` cannot be listed.
    """

    def parse(filename: str) -> Optional[int]:
        match = _INDEX.match(filename)
        return int(match.group(1)) if match else None

    return _log_files(data_path, topic, parse)


def _log_files(data_path: str, topic: str, parse: Callable[[str], Optional[int]]) -> List[str]:
    retained = os.path.join(data_path, "retained")
    if not os.path.isdir(retained):
        return []
    partition_dir = re.compile(r"^%s-([0-9]+)$" % (re.escape(topic),))
    found = []
    for directory in _listdir(retained):
        match = partition_dir.match(directory)
        if match is None:
            continue
        partition = int(match.group(1))
        for filename in _listdir(os.path.join(retained, directory)):
            base = parse(filename)
            if base is not None:
                found.append((partition, base, os.path.join(retained, directory, filename)))
    return [path for _, _, path in sorted(found)]


def _listdir(path: str) -> List[str]:
    try:
        return os.listdir(path)
    except OSError as error:
        raise DiskFaultError("cannot list %s: %s" % (path, error.strerror))
