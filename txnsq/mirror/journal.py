# -*- test-case-name: tests.test_mirror_journal,tests.test_cluster_mirror_journal -*-
"""
A standby's copies kept on disk, so that a standby restart keeps them:
one file per primary node in ``--data-path`` (``mirror-copy-<id>.log``),
used when the storage backend is durable (``--storage=disk``).

Each entry is a 4-byte big-endian length and the entry: ``E`` and the
primary's epoch (the file starts with it), or ``Q``, the time it was
applied (8-byte big-endian double, seconds since the epoch) and a data
payload as received (:mod:`txnsq.protocol.mirror`); ``P`` and a payload
alone, from older files, is read as applied at load time.  Reading a file back applies
its payloads in order.  When a file has grown past :data:`COMPACT_BYTES`
and four times what its copy holds, it is rewritten as one snapshot
payload (deferred messages keep their delay: a ``REQ`` record after the
channel's messages, or ``D`` for the topic's own).  A file is written
before the payload is acked (a killed nsqd keeps it: the kernel has it)
and fsynced as the disk backend fsyncs its queues: after ``sync_every``
messages (``--sync-every``) or ``sync_timeout`` seconds after the first
write not yet synced (``--sync-timeout``), whichever comes first, and
at each compaction and close.
"""

from __future__ import annotations

import os
import struct
import time
from typing import IO, Any, Dict, List, Optional, Set, Tuple, Union

from twisted.logger import Logger

from txnsq.mirror.standby import StandbyCopy
from txnsq.protocol.mirror import (
    OP_CHANNEL_CREATE,
    OP_CHANNEL_PAUSE,
    OP_DEFERRED,
    OP_MESSAGES,
    OP_REQ,
    MirrorDecodeError,
    RecordBuilder,
    decode_records,
    encode_delay_item,
)

__all__ = ["CopyJournal"]

#: A file is compacted only past this size.
COMPACT_BYTES = 64 * 1024 * 1024

_LEN = struct.Struct(">I")
_TIME = struct.Struct(">d")
_PREFIX = "mirror-copy-"

#: A file entry: its bytes, or its bytes in pieces.
Entry = Union[bytes, Tuple[bytes, ...]]


class CopyJournal:
    """
    The copies of ``directory``'s standby, one file per primary node.

    :param clock: ``IReactorTime`` for the ``sync_timeout`` timer (``None``:
        no timer; only ``sync_every`` syncs).
    :param sync_every: messages written between fsyncs (``--sync-every``;
        0 or 1: every write).
    :param sync_timeout: seconds after an unsynced write before an fsync
        (``--sync-timeout``).
    """

    _log = Logger()

    def __init__(
        self,
        directory: str,
        clock: Optional[Any] = None,
        sync_every: int = 2500,
        sync_timeout: float = 2.0,
    ) -> None:
        self.directory = directory
        self.clock = clock
        self.sync_every = sync_every
        self.sync_timeout = sync_timeout
        #: Messages written since the last fsync, and fsyncs done.
        self.unsynced = 0
        self.syncs = 0
        self._sync_call: Any = None
        self._dirty: Set[str] = set()
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
            elif kind in (b"P", b"Q") and copy is not None:
                if kind == b"Q":
                    if len(body) < 8:
                        break
                    applied_at = _TIME.unpack_from(body, 0)[0]
                    body = body[8:]
                else:
                    applied_at = self._now()
                try:
                    seq, records = decode_records(body, packed=True)
                except MirrorDecodeError:
                    break
                copy.apply(seq, records, applied_at)
        if pos != len(data):
            self._log.warn(
                "mirror: copy of {node} read up to byte {pos} of {size}",
                node=node_id,
                pos=pos,
                size=len(data),
            )
        self._sizes[node_id] = pos
        return copy

    def sync(self) -> None:
        """fsync every file written since the last sync."""
        call, self._sync_call = self._sync_call, None
        if call is not None and call.active():
            call.cancel()
        dirty, self._dirty = self._dirty, set()
        self.unsynced = 0
        for node_id in dirty:
            stream = self._files.get(node_id)
            if stream is None:
                continue
            try:
                os.fsync(stream.fileno())
            except OSError as error:
                self._log.warn(
                    "mirror: cannot sync the copy of {node} ({error})", node=node_id, error=error
                )
        if dirty:
            self.syncs += 1

    def _written(self, node_id: str, messages: int) -> None:
        """``messages`` more are written to ``node_id``'s file: sync when it is time."""
        self._dirty.add(node_id)
        self.unsynced += messages
        if self.unsynced >= self.sync_every:
            self.sync()
        elif self._sync_call is None and self.clock is not None:
            self._sync_call = self.clock.callLater(self.sync_timeout, self.sync)

    def _write(self, node_id: str, entries: List[Entry], truncate: bool = False) -> None:
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

    def _append(self, node_id: str, entries: List[Entry], truncate: bool) -> None:
        stream = self._files.get(node_id)
        if stream is None or truncate:
            if stream is not None:
                stream.close()
            stream = self._files[node_id] = open(self._path(node_id), "wb" if truncate else "ab")
            if truncate:
                self._sizes[node_id] = 0
        parts: List[bytes] = []
        for entry in entries:
            if isinstance(entry, tuple):
                # An entry in pieces (a payload as received, behind its
                # header): copied once, into the write.
                parts.append(_LEN.pack(sum(map(len, entry))))
                parts.extend(entry)
            else:
                parts.append(_LEN.pack(len(entry)))
                parts.append(entry)
        data = b"".join(parts)
        stream.write(data)
        stream.flush()
        self._sizes[node_id] = self._sizes.get(node_id, 0) + len(data)

    def started(self, copy: StandbyCopy) -> None:
        """A new copy (a new primary, or a new process of one): its file starts over."""
        self._write(copy.node_id, [b"E" + copy.epoch.encode("ascii", "replace")], truncate=True)

    def _now(self) -> float:
        return float(self.clock.seconds()) if self.clock is not None else time.time()

    def applied(
        self, copy: StandbyCopy, payload: bytes, messages: int = 1, now: Optional[float] = None
    ) -> None:
        """
        ``payload`` (of ``messages`` messages and records) was applied to
        ``copy`` at ``now``: kept; synced and compacted when it is time.
        """
        at = self._now() if now is None else now
        self._write(copy.node_id, [(b"Q" + _TIME.pack(at), payload)])
        if copy.node_id in self._files:
            self._written(copy.node_id, messages)
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
        # TopicCopy.size: no work per message unless the copy was
        # brought up to date since last asked.
        return sum(topic.size() for topic in copy.topics.values())

    def compact(self, copy: StandbyCopy) -> None:
        """Rewrite ``copy``'s file as its epoch and one snapshot payload."""
        builder = RecordBuilder()
        now = self._now()
        now_ms = int(now * 1000)
        for name, topic in copy.topics.items():
            delays = topic.delays
            if topic.paused.get(""):
                builder.add(OP_CHANNEL_PAUSE, name, "", [])
            for channel, messages in topic.channels.items():
                builder.add(OP_CHANNEL_CREATE, name, channel, [])
                if topic.paused.get(channel):
                    builder.add(OP_CHANNEL_PAUSE, name, channel, [])
                builder.add(OP_MESSAGES, name, channel, list(messages.values()))
                if delays:
                    # A REQ with its delay defers it again when read back.
                    builder.add(
                        OP_REQ,
                        name,
                        channel,
                        [
                            encode_delay_item(max(1, delays[(channel, msg_id)] - now_ms), msg_id)
                            for msg_id in messages
                            if (channel, msg_id) in delays
                        ],
                    )
            if topic.held:
                # Held only while the topic has no channel: D keeps delays.
                for msg_id, data in topic.held.items():
                    delay = delays.get(("", msg_id), 0) - now_ms if delays else 0
                    if delay > 0:
                        builder.add_one(OP_DEFERRED, name, "", encode_delay_item(delay, data))
                    else:
                        builder.add_one(OP_MESSAGES, name, "", data)
        snapshot = builder.encode(copy.applied)
        path = self._path(copy.node_id)
        stream = self._files.pop(copy.node_id, None)
        if stream is not None:
            stream.close()
        self._dirty.discard(copy.node_id)
        with open(path + ".tmp", "wb") as out:
            for entry in (
                b"E" + copy.epoch.encode("ascii", "replace"),
                b"Q" + _TIME.pack(now) + snapshot,
            ):
                out.write(_LEN.pack(len(entry)) + entry)
            out.flush()
            os.fsync(out.fileno())
        os.replace(path + ".tmp", path)
        self._sync_directory()
        self._sizes[copy.node_id] = os.path.getsize(path)

    def _sync_directory(self) -> None:
        """fsync the directory (a replaced or new file's name), where the OS allows."""
        try:
            fd = os.open(self.directory, os.O_RDONLY)
        except OSError:
            return
        try:
            os.fsync(fd)
        except OSError:
            pass
        finally:
            os.close(fd)

    def discard(self, node_id: str) -> None:
        """The copy of ``node_id`` is gone (taken over): its file too."""
        stream = self._files.pop(node_id, None)
        if stream is not None:
            stream.close()
        self._sizes.pop(node_id, None)
        self._dirty.discard(node_id)
        try:
            os.remove(self._path(node_id))
        except OSError:
            pass

    def close(self) -> None:
        """Sync and close the files (they stay)."""
        self.sync()
        for stream in self._files.values():
            stream.close()
        self._files.clear()
