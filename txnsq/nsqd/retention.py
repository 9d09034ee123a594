# -*- test-case-name: tests.test_retention -*-
"""
Retained topics: a topic whose every message is also appended to a
:class:`TopicLog <txnsq.storage.topic_log.TopicLog>` before it is acknowledged, so that
channels can be rewound and the MetaQ listener can read it by offset.

The design (see ``docs/retention.md``): channels keep their own queues
exactly as for any topic; the log is written beside them.  A record's
``data`` is the message body only (MetaQ clients treat it as the payload)
and its 8-byte id is the NSQ message id (16 hex digits as 8 bytes), which
carries the publish time in pseudo-milliseconds (nanoseconds >> 20): a
rewind re-feeds NSQ messages built from ``(id, body)`` with that time, and
a rewind to a timestamp keeps only the records whose id time is not before
it.

This module does no network IO.  :class:`TopicRetention` is owned by a
:class:`Topic <txnsq.nsqd.topic.Topic>`; :class:`Rewind` re-feeds a channel over
several reactor turns.
"""

from __future__ import annotations

import os
import re
import shutil
import struct
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any, Dict, List, Optional, Sequence, Tuple

from twisted.logger import Logger

from txnsq.protocol.message_id import TWEPOCH, id_time_threshold
from txnsq.nsqd.topic import PublishError
from txnsq.protocol.message import encode_message
from txnsq.files import write_file_atomically
from txnsq.storage.log import OffsetOutOfRange, RecordTooLarge
from txnsq.storage.topic_log import TopicLog
from txnsq.storage.sync_worker import SyncWorker
from txnsq.storage.log_format import ATTRIBUTE_FLAG, HEADER, HEADER_SIZE

if TYPE_CHECKING:
    from txnsq.nsqd.channel import Channel
    from txnsq.nsqd.topic import Topic

#: ``--retention-bytes`` default: 1 GiB per retained topic.
DEFAULT_RETENTION_BYTES = 1 << 30

#: ``--retention-age`` default: 7 days.
DEFAULT_RETENTION_AGE = 7 * 24 * 3600.0

__all__ = [
    "EARLIEST",
    "NoSuchPartition",
    "NotRetained",
    "RetainedWriteError",
    "Retention",
    "RetentionSettings",
    "Rewind",
    "TopicRetention",
    "parse_offsets",
    "parse_timestamp",
    "payload_of",
    "retention_directory",
]

_log = Logger(namespace="txnsq.nsqd.retention")

#: ``from=earliest`` / ``earliest``: every retained record.
EARLIEST = "earliest"

#: Bytes of records read per partition per reactor turn while rewinding.
REWIND_READ = 1024 * 1024

_ID = struct.Struct(">q")
_LENGTH = struct.Struct(">i")
_TIMESTAMP_SHIFT = 22


class NotRetained(LookupError):
    """The topic exists and keeps no retained log (HTTP 403, MetaQ 403)."""


class NoSuchPartition(LookupError):
    """The partition asked for is not one of the topic's (HTTP 400, MetaQ 400)."""


class RetainedWriteError(PublishError):
    """
    Appending to the log failed (a full disk, say); nothing was published
    or acknowledged.  ``str()`` names the error (E_PUB_FAILED's text; HTTP
    answers 500).
    """


@dataclass(frozen=True)
class RetentionSettings:
    """
    A topic's retention: keep ``bytes`` bytes of records (at least: whole
    segments go), records younger than ``age`` seconds (0: no age limit),
    over ``partitions`` partitions.
    """

    bytes: int
    age: float
    partitions: int

    def to_json(self) -> Dict[str, Any]:
        """How ``nsqd.dat`` and ``/stats`` write it (age in milliseconds)."""
        return {"bytes": self.bytes, "age_ms": int(round(self.age * 1000)), "partitions": self.partitions}

    @classmethod
    def from_json(cls, value: Any) -> Optional["RetentionSettings"]:
        """
        The settings written by :meth:`to_json`, or ``None`` when
        ``value`` is not such an object (or has ``bytes`` 0: off).
        """
        if not isinstance(value, dict):
            return None
        try:
            size = int(value["bytes"])
            age = int(value.get("age_ms", 0)) / 1000.0
            partitions = int(value.get("partitions", 1))
        except (KeyError, TypeError, ValueError):
            return None
        if size <= 0 or age < 0 or partitions < 1:
            return None
        return cls(size, age, partitions)


def retention_directory(options: Any) -> str:
    """Where retained logs live: ``<data-path>/retained``."""
    return os.path.join(options.data_path or os.getcwd(), "retained")


def payload_of(flag: int, data: bytes) -> bytes:
    """
    What NSQ delivers of a record's data: the payload after the attribute
    when ``flag & 1`` (MetaQ's ``int32 length | attribute | payload``).

    :raises ValueError: the attribute length does not fit ``data``.
    """
    if not flag & ATTRIBUTE_FLAG:
        return data
    if len(data) < 4:
        raise ValueError("data with an attribute is at least 4 bytes")
    (length,) = _LENGTH.unpack_from(data)
    if length < 0 or 4 + length > len(data):
        raise ValueError("attribute length %d does not fit %d bytes of data" % (length, len(data)))
    return data[4 + length :]


def parse_offsets(text: str, partitions: int) -> List[int]:
    """
    ``offset=`` of a rewind: ``0:1024,1:0`` (partition:offset, each
    partition at most once), or one number for a one-partition topic.
    Partitions not named are not rewound (``-1``).

    :raises ValueError: malformed, or a partition the topic does not have.
    """
    starts = [-1] * partitions
    text = text.strip()
    if re.match(r"^[0-9]+$", text):
        if partitions != 1:
            raise ValueError("offset needs partition:offset pairs")
        return [int(text)]
    for part in text.split(","):
        match = re.match(r"^\s*([0-9]+)\s*:\s*([0-9]+)\s*$", part)
        if match is None:
            raise ValueError("bad partition:offset %r" % (part,))
        number, offset = int(match.group(1)), int(match.group(2))
        if number >= partitions:
            raise NoSuchPartition("no partition %d" % (number,))
        if starts[number] >= 0:
            raise ValueError("partition %d given twice" % (number,))
        starts[number] = offset
    return starts


def parse_timestamp(text: str) -> int:
    """
    ``timestamp=`` of a rewind or ``from=``, in nanoseconds since the
    epoch: unix milliseconds, or RFC 3339 (``2026-11-26T10:00:00.5Z``).

    :raises ValueError: neither.
    """
    text = text.strip()
    if re.match(r"^-?[0-9]+$", text):
        return int(text) * 1000000
    match = re.match(
        r"^(\d{4}-\d{2}-\d{2}[Tt ]\d{2}:\d{2}:\d{2})(?:\.(\d{1,9}))?([Zz]|[+-]\d{2}:\d{2})$", text
    )
    if match is None:
        raise ValueError("not unix milliseconds or RFC 3339: %r" % (text,))
    zone = match.group(3)
    zone = "+00:00" if zone in ("Z", "z") else zone
    when = datetime.fromisoformat(match.group(1).replace("t", "T").replace(" ", "T") + zone)
    fraction = (match.group(2) or "").ljust(9, "0")
    return int(when.timestamp()) * 1000000000 + int(fraction or 0)


class TopicRetention:
    """
    The retained log of one topic, and what it is set to.

    :param topic: the topic.
    :param settings: its retention.
    :raises OSError: the log cannot be opened.
    """

    def __init__(self, topic: "Topic", settings: RetentionSettings) -> None:
        self.topic = topic
        self.settings = settings
        options = topic.options
        worker = topic.broker.retention.sync_worker(topic.broker.storage)
        self.log = TopicLog(
            retention_directory(options),
            topic.name,
            settings.partitions,
            topic.clock,
            sync_every=int(getattr(options, "sync_every", 2500)),
            sync_timeout=float(getattr(options, "sync_timeout", 2.0)),
            retention_bytes=settings.bytes,
            retention_age=settings.age or None,
            sync_worker=worker,
        )
        #: Rewinds in progress, by channel name.
        self.rewinds: Dict[str, Rewind] = {}

    def __repr__(self) -> str:
        return "<TopicRetention %s %r>" % (self.topic.name, self.settings)

    def append(self, records: Sequence[Tuple[bytes, int, bytes]], timestamp_ns: int) -> Tuple[int, int]:
        """
        Append a batch to the next partition in turn: ``(partition,
        offset of the first)``.

        :raises RetainedWriteError: it could not be written.
        """
        try:
            return self.log.append_many(records, timestamp_ns)
        except OSError as error:
            raise RetainedWriteError("retained log write failed - %s" % (error,)) from None

    def append_id_batch(self, ids: Sequence[int], bodies: Sequence[bytes], timestamp_ns: int) -> None:
        """
        Append NSQ messages (ids as integers, flag 0) to the next partition
        in turn, with one write.

        :raises RetainedWriteError: they could not be written.
        """
        try:
            self.log.append_id_batch(ids, bodies, timestamp_ns)
        except OSError as error:
            raise RetainedWriteError("retained log write failed - %s" % (error,)) from None

    def append_one(self, msg_id: bytes, data: bytes, timestamp_ns: int) -> None:
        """
        Append one NSQ message's record (flag 0) to the next partition in turn.

        :raises RetainedWriteError: it could not be written.
        """
        try:
            self.log.append(msg_id, 0, data, timestamp_ns)
        except OSError as error:
            raise RetainedWriteError("retained log write failed - %s" % (error,)) from None

    def append_to(
        self, partition: int, records: Sequence[Tuple[bytes, int, bytes]], timestamp_ns: int
    ) -> int:
        """
        Append a batch to ``partition``: the offset of the first record.

        :raises NoSuchPartition: the topic has no such partition.
        :raises RetainedWriteError: it could not be written.
        """
        partitions = self.log.partitions
        if not 0 <= partition < len(partitions):
            raise NoSuchPartition("topic %s has no partition %d" % (self.topic.name, partition))
        try:
            return partitions[partition].append_many(records, timestamp_ns)
        except OSError as error:
            raise RetainedWriteError("retained log write failed - %s" % (error,)) from None

    def close(self) -> None:
        """Stop rewinds; sync and close the log."""
        for rewind in list(self.rewinds.values()):
            rewind.stop()
        self.log.close()

    def delete(self) -> None:
        """Close the log and remove its files."""
        self.close()
        for partition in self.log.partitions:
            shutil.rmtree(partition.directory, ignore_errors=True)

    # -- rewind ----------------------------------------------------------

    def starts_for_timestamp(self, timestamp_ns: int) -> List[int]:
        """Per partition, where a rewind to ``timestamp_ns`` starts reading."""
        return [p.offset_for_timestamp(timestamp_ns) for p in self.log.partitions]

    def earliest(self) -> List[int]:
        """Per partition, the first retained offset."""
        return [p.first_offset for p in self.log.partitions]

    def rewind(
        self, channel: "Channel", starts: List[int], since_ns: Optional[int] = None
    ) -> "Rewind":
        """
        Re-feed ``channel``'s queue from the log: each partition from its
        start (``-1``: not rewound) up to the end of the log now (what is
        published later reaches the channel anyway); with ``since_ns``,
        only the records published at or after it.  A rewind of the same
        channel in progress is replaced.

        :raises OffsetOutOfRange: a start is not a record's offset (its
            ``nearest`` says where one is).
        """
        partitions = self.log.partitions
        for number, start in enumerate(starts):
            if start < 0:
                continue
            partition = partitions[number]
            if start < partition.first_offset or start > partition.next_offset:
                partition.read(start, HEADER_SIZE)  # raises OffsetOutOfRange
            if start != partition.nearest_offset(start):
                raise OffsetOutOfRange(start, partition.nearest_offset(start), "is inside a record")
        previous = self.rewinds.pop(channel.name, None)
        if previous is not None:
            previous.stop()
        rewind = Rewind(self, channel, starts, since_ns)
        self.rewinds[channel.name] = rewind
        rewind.step()
        return rewind


class Rewind:
    """
    Feeds one channel from the log, :data:`REWIND_READ` bytes per
    partition per reactor turn, partitions in turn.

    :ivar fed: messages given to the channel so far.
    :ivar done: every partition was read to where it ended at the start.
    """

    def __init__(
        self,
        retention: TopicRetention,
        channel: "Channel",
        starts: List[int],
        since_ns: Optional[int],
    ) -> None:
        self.retention = retention
        self.channel = channel
        partitions = retention.log.partitions
        self._cursors: List[Tuple[int, int, int]] = [
            (number, start, partitions[number].next_offset)
            for number, start in enumerate(starts)
            if start >= 0 and start < partitions[number].next_offset
        ]
        self._since = None if since_ns is None else id_time_threshold(since_ns)
        self._call: Any = None
        self.fed = 0
        self.done = False

    def __repr__(self) -> str:
        return "<Rewind %s fed=%d done=%s>" % (self.channel.name, self.fed, self.done)

    def step(self) -> None:
        """Feed one read per partition; schedule the next turn if not done."""
        self._call = None
        channel = self.channel
        if channel.exiting:
            self.stop()
            return
        partitions = self.retention.log.partitions
        since = self._since
        cursors = []
        for number, at, end in self._cursors:
            partition = partitions[number]
            try:
                try:
                    data, following = partition.read(at, min(REWIND_READ, max(end - at, HEADER_SIZE)))
                except RecordTooLarge as error:
                    # One record larger than a read (up to --max-msg-size).
                    data, following = partition.read(at, error.size)
            except OffsetOutOfRange as error:
                # Retention removed what was not read yet: go on from the oldest kept.
                if error.nearest <= at or error.nearest >= end:
                    continue
                cursors.append((number, error.nearest, end))
                continue
            except Exception:
                _log.failure("rewind of {channel!r} failed reading {partition!r}",
                             channel=channel, partition=partition)
                continue
            self.fed += _feed(channel, data, since)
            if following < end and data:
                cursors.append((number, following, end))
        self._cursors = cursors
        if cursors:
            self._call = self.retention.topic.clock.callLater(0, self.step)
        else:
            self._finish()

    def _finish(self) -> None:
        self.done = True
        rewinds = self.retention.rewinds
        if rewinds.get(self.channel.name) is self:
            del rewinds[self.channel.name]

    def stop(self) -> None:
        """Stop feeding (the channel or topic goes away)."""
        call, self._call = self._call, None
        if call is not None and call.active():
            call.cancel()
        self._cursors = []
        self._finish()


def _feed(channel: "Channel", data: bytes, since: Optional[int]) -> int:
    """Put the records of ``data`` into ``channel`` as NSQ messages; how many."""
    unpack = HEADER.unpack_from
    unpack_id = _ID.unpack
    put = channel.put
    pos = 0
    end = len(data)
    fed = 0
    while pos + HEADER_SIZE <= end:
        length, _, raw_id, flag = unpack(data, pos)
        body_at = pos + HEADER_SIZE
        pos = body_at + length
        (guid,) = unpack_id(raw_id)
        ts = guid >> _TIMESTAMP_SHIFT
        if since is not None and ts < since:
            continue
        body = data[body_at:pos]
        if flag & ATTRIBUTE_FLAG:
            try:
                body = payload_of(flag, body)
            except ValueError:
                continue
        put(encode_message((ts + TWEPOCH) << 20, 0, b"%016x" % (guid,), body))
        fed += 1
    return fed


class Retention:
    """
    The broker's retention defaults: ``--retention-bytes``,
    ``--retention-age``, ``--log-partitions`` and ``--retain-topics``.
    """

    def __init__(self, options: Any) -> None:
        self.bytes = int(getattr(options, "retention_bytes", DEFAULT_RETENTION_BYTES))
        self.age = float(getattr(options, "retention_age", DEFAULT_RETENTION_AGE))
        self.partitions = int(getattr(options, "log_partitions", 1) or 1)
        pattern = getattr(options, "retain_topics", "") or ""
        self.pattern = re.compile(pattern) if pattern else None
        self._worker: Optional[SyncWorker] = None

    def sync_worker(self, storage: Any) -> SyncWorker:
        """
        The thread the logs' periodic ``fsync``\s run on: the disk
        backend's, else one of this broker's own (so that a sync never
        blocks the reactor thread, whatever the queues' storage).
        """
        shared = getattr(storage, "sync_worker", None)
        if shared is not None:
            worker: SyncWorker = shared()
            return worker
        if self._worker is None:
            self._worker = SyncWorker(write_file_atomically)
        return self._worker

    def defaults(self) -> RetentionSettings:
        """The settings of a topic that turns retention on with no values."""
        return RetentionSettings(self.bytes, self.age, self.partitions)

    def retained_on_creation(self, name: str) -> bool:
        """Whether a new topic called ``name`` is retained (``--retain-topics``)."""
        pattern = self.pattern
        return pattern is not None and pattern.search(name) is not None
