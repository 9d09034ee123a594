# -*- test-case-name: tests.test_cluster_mirror_journal -*-
"""
A standby's copies kept on disk, so that a standby restart keeps them:
one file per primary node in ``--data-path`` (``mirror-copy-<id>.log``),
used when the storage backend is durable (``--storage=disk``).

Each entry is a 4-byte big-endian length and the entry: ``E`` and the
primary's epoch (the file starts with it), or ``P`` and a data payload
as received (:mod:`txnsq.protocol.mirror`).  Reading a file back applies
its payloads in order.  When a file has grown past :data:`COMPACT_BYTES`
and four times what its copy holds, it is rewritten as one snapshot
payload (delays of deferred messages are not kept by a snapshot).  A file
is written before the payload is acked, not fsynced: a killed nsqd keeps
it (the kernel has it), a machine that loses power may not.
"""

from __future__ import annotations

import os
import struct
from typing import IO, Dict, List, Optional, Set

from twisted.logger import Logger

from txnsq.nsqd.mirror import StandbyCopy
from txnsq.protocol.mirror import (
    OP_CHANNEL_CREATE,
    OP_CHANNEL_PAUSE,
    OP_MESSAGES,
    MirrorDecodeError,
    RecordBuilder,
    decode_records,
)

__all__ = ["CopyJournal"]

#: A file is compacted only past this size.
COMPACT_BYTES = 64 * 1024 * 1024

_LEN = struct.Struct(">I")
_PREFIX = "mirror-copy-"


class CopyJournal:
    """The copies of ``directory``'s standby, one file per primary node."""

    _log = Logger()

    def __init__(self, directory: str) -> None:
        self.directory = directory
        self._files: Dict[str, IO[bytes]] = {}
        self._sizes: Dict[str, int] = {}
        #: Nodes whose file could not be written (kept in memory only).
        self.failed: Set[str] = set()

    def _path(self, node_id: str) -> str:
        return os.path.join(self.directory, _PREFIX + node_id + ".log")

    def load(self) -> List[StandbyCopy]:
        """Every copy kept, read back (a damaged tail is ignored, and logged)."""
        found: List[StandbyCopy] = []
        try:
            names = sorted(os.listdir(self.directory))
        except OSError:
            return found
        for name in names:
            if not (name.startswith(_PREFIX) and name.endswith(".log")):
                continue
            node_id = name[len(_PREFIX) : -len(".log")]
            copy = self._read(node_id)
            if copy is not None and copy.count():
                found.append(copy)
        return found

    def _read(self, node_id: str) -> Optional[StandbyCopy]:
        with open(self._path(node_id), "rb") as stream:
            data = stream.read()
        copy: Optional[StandbyCopy] = None
        pos = 0
        while pos + 4 <= len(data):
            size = _LEN.unpack_from(data, pos)[0]
            entry = data[pos + 4 : pos + 4 + size]
            if len(entry) < size or not entry:
                break
            pos += 4 + size
            kind, body = entry[:1], entry[1:]
            if kind == b"E":
                copy = StandbyCopy(node_id, body.decode("ascii", "replace"))
            elif kind == b"P" and copy is not None:
                try:
                    seq, records = decode_records(body)
                except MirrorDecodeError:
                    break
                copy.apply(seq, records)
        if pos != len(data):
            self._log.warn(
                "mirror: copy of {node} read up to byte {pos} of {size}",
                node=node_id,
                pos=pos,
                size=len(data),
            )
        self._sizes[node_id] = pos
        return copy

    def _write(self, node_id: str, entries: List[bytes], truncate: bool = False) -> None:
        """
        Append ``entries`` (or start the file over with them).  A write
        that fails (a full disk) drops the file: a partial copy read back
        later would be wrong; the copy in memory goes on, and the next
        copy of that node starts a new file.
        """
        if node_id in self.failed and not truncate:
            return
        try:
            self._append(node_id, entries, truncate)
            self.failed.discard(node_id)
        except OSError as error:
            self._log.warn(
                "mirror: cannot keep the copy of {node} on disk ({error}); kept in memory only",
                node=node_id,
                error=error,
            )
            self.failed.add(node_id)
            self.discard(node_id)
            self.failed.add(node_id)

    def _append(self, node_id: str, entries: List[bytes], truncate: bool) -> None:
        stream = self._files.get(node_id)
        if stream is None or truncate:
            if stream is not None:
                stream.close()
            stream = self._files[node_id] = open(self._path(node_id), "wb" if truncate else "ab")
            if truncate:
                self._sizes[node_id] = 0
        parts = []
        for entry in entries:
            parts.append(_LEN.pack(len(entry)))
            parts.append(entry)
        data = b"".join(parts)
        stream.write(data)
        stream.flush()
        self._sizes[node_id] = self._sizes.get(node_id, 0) + len(data)

    def started(self, copy: StandbyCopy) -> None:
        """A new copy (a new primary, or a new process of one): its file starts over."""
        self._write(copy.node_id, [b"E" + copy.epoch.encode("ascii", "replace")], truncate=True)

    def applied(self, copy: StandbyCopy, payload: bytes) -> None:
        """``payload`` was applied to ``copy``: kept; the file compacted when it is time."""
        self._write(copy.node_id, [b"P" + payload])
        size = self._sizes.get(copy.node_id, 0)
        if size > COMPACT_BYTES and size > 4 * self._estimate(copy):
            try:
                self.compact(copy)
            except OSError as error:
                self._log.warn(
                    "mirror: cannot compact the copy of {node} ({error})",
                    node=copy.node_id,
                    error=error,
                )

    @staticmethod
    def _estimate(copy: StandbyCopy) -> int:
        total = 0
        for topic in copy.topics.values():
            total += sum(map(len, topic.held.values()))
            for messages in topic.channels.values():
                total += sum(map(len, messages.values()))
        return total

    def compact(self, copy: StandbyCopy) -> None:
        """Rewrite ``copy``'s file as its epoch and one snapshot payload."""
        builder = RecordBuilder()
        for name, topic in copy.topics.items():
            for channel, messages in topic.channels.items():
                builder.add(OP_CHANNEL_CREATE, name, channel, [])
                if topic.paused.get(channel):
                    builder.add(OP_CHANNEL_PAUSE, name, channel, [])
                builder.add(OP_MESSAGES, name, channel, list(messages.values()))
            if topic.held:
                builder.add(OP_MESSAGES, name, "", list(topic.held.values()))
        snapshot = builder.encode(copy.applied)
        path = self._path(copy.node_id)
        stream = self._files.pop(copy.node_id, None)
        if stream is not None:
            stream.close()
        with open(path + ".tmp", "wb") as out:
            for entry in (b"E" + copy.epoch.encode("ascii", "replace"), b"P" + snapshot):
                out.write(_LEN.pack(len(entry)) + entry)
        os.replace(path + ".tmp", path)
        self._sizes[copy.node_id] = os.path.getsize(path)

    def discard(self, node_id: str) -> None:
        """The copy of ``node_id`` is gone (taken over): its file too."""
        stream = self._files.pop(node_id, None)
        if stream is not None:
            stream.close()
        self._sizes.pop(node_id, None)
        try:
            os.remove(self._path(node_id))
        except OSError:
            pass

    def close(self) -> None:
        """Close the files (they stay)."""
        for stream in self._files.values():
            stream.close()
        self._files.clear()
