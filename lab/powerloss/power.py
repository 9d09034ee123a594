# -*- test-case-name: lab.tests.test_powerloss -*-
"""
Lost unsynced writes: run a process under ``shim.c`` (an ``LD_PRELOAD``
library) and, once it has been killed, put every file it changed under one
directory back to what that file held at its last ``fsync``.

The shim keeps one undo journal per changed file in a journal directory,
named ``<dev>-<ino>.undo`` (both hex, 16 digits).  Its layout, native byte
order (the journal never leaves the host that wrote it):

* a 64-byte header: ``TXPLJ001``, then the file's ``dev``, ``ino``, synced
  size, the first live record's sequence number and the length of the path
  (u64 each, then 16 bytes reserved); the path the file had at its first
  change follows, in a 4096-byte area;
* from byte 4160, records: ``UNDO`` (u32), flags (u32: 1 means the old
  bytes could not be read and only their span is known), sequence number,
  file offset and length (u64 each), then the old bytes.

Records below the header's sequence number are void (an ``fsync`` made
them so), as is a record cut short at the end (the kill came between it
and the change it guards, so that change never happened).
:func:`lose_unsynced_writes` writes the live records back newest first,
then cuts the file to its synced size.

Creating, renaming and unlinking count as durable at once; ``lab/README.md``
lists what else the shim cannot see.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import struct
import subprocess
import tempfile
from dataclasses import dataclass, field
from typing import Dict, Iterator, List, Optional, Tuple

__all__ = [
    "FileLoss",
    "LIBRARY_NAME",
    "PowerLossReport",
    "PowerLossUnavailable",
    "build",
    "environment",
    "lose_unsynced_writes",
    "settle",
]

LIBRARY_NAME = "libtxnsqpowerloss.so"
JOURNAL_VARIABLE = "TXNSQ_POWERLOSS_JOURNAL"
WATCH_VARIABLE = "TXNSQ_POWERLOSS_WATCH"

_SOURCE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "shim.c")
_HEADER = struct.Struct("=8sQQQQQ16x")
_RECORD = struct.Struct("=IIQQQ")
_MAGIC = b"TXPLJ001"
_RECORD_MAGIC = 0x4F444E55
_UNKNOWN = 1
_PATH_AREA = 4096
_RECORDS_START = _HEADER.size + _PATH_AREA
_WATCH_FILE = "watch"
_ERRORS_FILE = "errors"
_SUFFIX = ".undo"


class PowerLossUnavailable(Exception):
    """The shim cannot be built here; ``str()`` is a one-line reason."""


@dataclass
class FileLoss:
    """
    What putting one file back did.

    :ivar path: the file.
    :ivar size_before: its size as the killed process left it.
    :ivar size_after: its size now (the size at its last ``fsync``).
    :ivar bytes_discarded: bytes the process wrote since that ``fsync``
        that are gone: the part cut off the end, plus the bytes inside the
        kept part that differ from what was written back.
    :ivar bytes_restored: bytes written back from undo records (the same
        byte may count more than once).
    :ivar unknown: ``(offset, length)`` spans whose old bytes the shim
        could not read: they hold what the process wrote, not what was
        synced.
    """

    path: str
    size_before: int
    size_after: int
    bytes_discarded: int
    bytes_restored: int
    unknown: List[Tuple[int, int]] = field(default_factory=list)

    @property
    def truncated(self) -> bool:
        """Whether the file lost bytes off its end."""
        return self.size_after < self.size_before


@dataclass
class PowerLossReport:
    """
    What :func:`lose_unsynced_writes` did.

    :ivar files: files that had unsynced changes and were put back.
    :ivar files_truncated: those of them that lost bytes off their end.
    :ivar bytes_discarded: the sum of :attr:`FileLoss.bytes_discarded`.
    :ivar details: one :class:`FileLoss` per file, sorted by path.
    :ivar gone: paths (as first seen) of files with unsynced changes that
        no longer exist (unlinked: nothing to put back).
    :ivar warnings: what the shim could not journal (its ``errors`` file).
    """

    files: int = 0
    files_truncated: int = 0
    bytes_discarded: int = 0
    details: List[FileLoss] = field(default_factory=list)
    gone: List[str] = field(default_factory=list)
    warnings: List[str] = field(default_factory=list)


def build(cache_dir: str) -> str:
    """
    Compile ``shim.c`` into ``cache_dir/libtxnsqpowerloss.so`` with ``cc``
    (``-O2 -shared -fPIC -ldl -lpthread``), or reuse the library there if
    it was built from the same source (its SHA-256 is kept beside it).

    :return: the library's absolute path.
    :raises PowerLossUnavailable: no C compiler, or the source does not
        compile (the first line of the compiler's complaint).
    """
    with open(_SOURCE, "rb") as source:
        digest = hashlib.sha256(source.read()).hexdigest()
    cache_dir = os.path.abspath(cache_dir)
    library = os.path.join(cache_dir, LIBRARY_NAME)
    stamp = library + ".sha256"
    try:
        with open(stamp) as f:
            if f.read().strip() == digest and os.path.exists(library):
                return library
    except OSError:
        pass
    compiler = shutil.which(os.environ.get("CC", "cc"))
    if compiler is None:
        raise PowerLossUnavailable("no C compiler: cc is not on PATH")
    os.makedirs(cache_dir, exist_ok=True)
    # Built under a temporary name and renamed: two labs building at once,
    # or a process loading the old library, never see half a file.
    fd, tmp = tempfile.mkstemp(prefix=LIBRARY_NAME + ".", dir=cache_dir)
    os.close(fd)
    try:
        result = subprocess.run(
            [compiler, "-O2", "-shared", "-fPIC", "-o", tmp, _SOURCE, "-ldl", "-lpthread"],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
        )
        if result.returncode != 0:
            lines = result.stdout.decode("utf-8", "replace").strip().splitlines() or ["(no output)"]
            raise PowerLossUnavailable("cc cannot build %s: %s" % (_SOURCE, lines[0]))
        os.chmod(tmp, 0o755)
        os.replace(tmp, library)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    with open(stamp, "w") as f:
        f.write(digest + "\n")
    return library


def environment(library: str, journal_dir: str, watched_dir: str) -> Dict[str, str]:
    """
    The variables to add to a process's environment to run it under the
    shim.  Creates ``journal_dir`` and notes ``watched_dir`` in it (for
    :func:`lose_unsynced_writes` to find renamed files by).

    ``LD_PRELOAD`` holds only the shim: a caller that already preloads
    something joins the two with a space.

    :raises ValueError: one directory is inside the other (the journal
        must not watch itself), or ``watched_dir`` does not exist.
    """
    watched = os.path.realpath(watched_dir)
    if not os.path.isdir(watched):
        raise ValueError("watched directory %s does not exist" % (watched_dir,))
    os.makedirs(journal_dir, exist_ok=True)
    journal = os.path.realpath(journal_dir)
    for inner, outer in ((journal, watched), (watched, journal)):
        if inner == outer or inner.startswith(outer + os.sep):
            raise ValueError("journal %s and watched directory %s must not nest" % (journal, watched))
    with open(os.path.join(journal, _WATCH_FILE), "w") as f:
        f.write(watched)
    return {
        "LD_PRELOAD": os.path.abspath(library),
        JOURNAL_VARIABLE: journal,
        WATCH_VARIABLE: watched,
    }


def lose_unsynced_writes(journal_dir: str) -> PowerLossReport:
    """
    Put every file journaled in ``journal_dir`` back to what it held at its
    last ``fsync`` (``fdatasync`` counts as one; ``sync_file_range`` does
    not), then clear the journal.  Every process that ran under the shim
    with this journal must be dead.  The files put back are ``fsync``\\ ed.

    :raises OSError: a file could not be read or written (the journals not
        yet applied are kept: calling again goes on with them).
    """
    report = PowerLossReport()
    if not os.path.isdir(journal_dir):
        return report
    watched = _read_watch(journal_dir)
    inodes: Optional[Dict[Tuple[int, int], str]] = None
    for name in sorted(os.listdir(journal_dir)):
        if not name.endswith(_SUFFIX):
            continue
        journal_path = os.path.join(journal_dir, name)
        parsed = _read_journal(journal_path)
        if parsed is None:
            report.warnings.append("%s: not a journal, left alone" % (journal_path,))
            continue
        dev, ino, synced, first_path, records = parsed
        path = _same_file(first_path, dev, ino)
        if path is None and watched is not None:
            if inodes is None:
                inodes = _inodes_under(watched)
            path = inodes.get((dev, ino))
        if path is None:
            report.gone.append(first_path)
        else:
            loss = _put_back(path, synced, records)
            report.details.append(loss)
            report.files += 1
            report.files_truncated += loss.truncated
            report.bytes_discarded += loss.bytes_discarded
        os.unlink(journal_path)
    report.warnings.extend(_take_errors(journal_dir))
    report.details.sort(key=lambda loss: loss.path)
    return report


def settle(journal_dir: str) -> int:
    """
    Forget the journal: every write so far counts as durable (the host
    synced, or shut down cleanly).  Every process under the shim with this
    journal must have exited.

    :return: the number of files that had unsynced changes.
    """
    count = 0
    if not os.path.isdir(journal_dir):
        return 0
    for name in os.listdir(journal_dir):
        if name.endswith(_SUFFIX):
            os.unlink(os.path.join(journal_dir, name))
            count += 1
    _take_errors(journal_dir)
    return count


# -- internals ---------------------------------------------------------------

_Record = Tuple[int, int, int, Optional[bytes]]  # seq, offset, length, old bytes


def _read_watch(journal_dir: str) -> Optional[str]:
    try:
        with open(os.path.join(journal_dir, _WATCH_FILE)) as f:
            return f.read().strip() or None
    except FileNotFoundError:
        return None


def _take_errors(journal_dir: str) -> List[str]:
    path = os.path.join(journal_dir, _ERRORS_FILE)
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            lines = [line.rstrip("\n") for line in f if line.strip()]
    except FileNotFoundError:
        return []
    os.unlink(path)
    return lines


def _read_journal(path: str) -> Optional[Tuple[int, int, int, str, List[_Record]]]:
    """A journal's file identity, synced size, first path and live records."""
    with open(path, "rb") as f:
        data = f.read()
    if len(data) < _HEADER.size:
        return None
    magic, dev, ino, synced, min_seq, path_len = _HEADER.unpack_from(data, 0)
    if magic != _MAGIC or path_len >= _PATH_AREA:
        return None
    first_path = data[_HEADER.size : _HEADER.size + path_len].decode("utf-8", "surrogateescape")
    return dev, ino, synced, first_path, [r for r in _records(data) if r[0] >= min_seq]


def _records(data: bytes) -> Iterator[_Record]:
    pos = _RECORDS_START
    while pos + _RECORD.size <= len(data):
        magic, flags, seq, offset, length = _RECORD.unpack_from(data, pos)
        if magic != _RECORD_MAGIC:
            return
        pos += _RECORD.size
        if flags & _UNKNOWN:
            yield seq, offset, length, None
            continue
        if pos + length > len(data):
            return  # torn by the kill: its change never happened
        yield seq, offset, length, data[pos : pos + length]
        pos += length


def _same_file(path: str, dev: int, ino: int) -> Optional[str]:
    """``path`` if it still names the file (dev, ino)."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    return path if (st.st_dev, st.st_ino) == (dev, ino) else None


def _inodes_under(top: str) -> Dict[Tuple[int, int], str]:
    """Every regular file under ``top`` by (dev, ino): where renamed files went."""
    found: Dict[Tuple[int, int], str] = {}
    for directory, _, names in os.walk(top):
        for name in names:
            path = os.path.join(directory, name)
            try:
                st = os.lstat(path)
            except OSError:
                continue
            found.setdefault((st.st_dev, st.st_ino), path)
    return found


def _merged(spans: List[Tuple[int, int]]) -> List[Tuple[int, int]]:
    out: List[Tuple[int, int]] = []
    for start, end in sorted(spans):
        if out and start <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], end))
        else:
            out.append((start, end))
    return out


def _differing(a: bytes, b: bytes) -> int:
    """How many bytes of two equally long strings differ."""
    count = 0
    for start in range(0, len(a), 4096):
        # Most of a span is usually unchanged: compare in blocks first.
        x, y = a[start : start + 4096], b[start : start + 4096]
        if x != y:
            count += sum(1 for p, q in zip(x, y) if p != q)
    return count


def _put_back(path: str, synced: int, records: List[_Record]) -> FileLoss:
    """Write ``records`` back newest first, then cut ``path`` to ``synced``."""
    fd = os.open(path, os.O_RDWR)
    try:
        size_before = os.fstat(fd).st_size
        kept = min(size_before, synced)
        spans = _merged([(o, min(o + n, kept)) for _, o, n, _ in records if o < kept])
        before = [os.pread(fd, end - start, start) for start, end in spans]
        restored = 0
        unknown: List[Tuple[int, int]] = []
        for _, offset, length, old in sorted(records, key=lambda r: r[0], reverse=True):
            if old is None:
                unknown.append((offset, length))
                continue
            written = 0
            while written < len(old):
                written += os.pwrite(fd, old[written:], offset + written)
            restored += len(old)
        os.ftruncate(fd, synced)
        changed = 0
        for (start, end), old_bytes in zip(spans, before):
            changed += _differing(old_bytes, os.pread(fd, end - start, start))
        os.fsync(fd)
    finally:
        os.close(fd)
    return FileLoss(
        path=path,
        size_before=size_before,
        size_after=synced,
        bytes_discarded=max(0, size_before - synced) + changed,
        bytes_restored=restored,
        unknown=sorted(unknown),
    )
