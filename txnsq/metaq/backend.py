# -*- test-case-name: tests.test_metaq_backend -*-
"""
What the MetaQ listener asks of nsqd: :class:`IMetaqBackend`, and two
implementations of it.

- :class:`BrokerMetaqBackend` serves nsqd's own retained topics through
  the broker (``broker.retained_log(name)`` and ``broker.put_retained``):
  a put through MetaQ is a publish to the topic, so its channels get the
  message as well, and an NSQ publish to a retained topic is readable
  with ``get``.  The listener keeps no topics of its own.
- :class:`LogMetaqBackend` serves a set of :class:`TopicLog <txnsq.storage.topic_log.TopicLog>`
  objects it owns (tests, benchmarks, a log directory served without a
  broker).

Refusals are :class:`MetaqRefused` with the reply's code and text; reads
raise the log's own :class:`OffsetOutOfRange <txnsq.storage.log.OffsetOutOfRange>` (301)
and :class:`RecordTooLarge <txnsq.storage.log.RecordTooLarge>` (``value 0``).
"""

from __future__ import annotations

import os
import struct
from typing import Any, Dict, List, Optional, Tuple

from zope.interface import Attribute, Interface, implementer

from txnsq.mirror.recorder import StandbysUnavailable
from txnsq.nsqd.topic import PublishError
from txnsq.protocol.metaq import BAD_REQUEST, FORBIDDEN, INTERNAL_SERVER_ERROR, NOT_FOUND, SERVICE_UNAVAILABLE
from txnsq.protocol.names import is_valid_topic_name
from txnsq.storage.log import PartitionLog, PartitionStats
from txnsq.storage.topic_log import TopicLog

__all__ = [
    "SEQUENCE_PREFIX",
    "BrokerMetaqBackend",
    "IMetaqBackend",
    "LogMetaqBackend",
    "MetaqRefused",
    "NoSuchPartition",
    "message_id_number",
    "parse_sequence",
    "sequence_attribute",
]

#: The attribute of an idempotent put starts with this, then ``<producer>
#: <sequence>``: nsqd drops a put whose sequence is not above the last one
#: it appended for that producer to that partition (txnsq's extension).
SEQUENCE_PREFIX = b"txnsq-seq "

_ATTRIBUTE_LENGTH = struct.Struct(">i")

_ID = struct.Struct(">q")


def message_id_number(msg_id: bytes) -> int:
    """A record's 8-byte message id as MetaQ's signed 64-bit ``msgId``."""
    return int(_ID.unpack(msg_id)[0])


def sequence_attribute(producer: str, sequence: int) -> bytes:
    """
    The attribute that makes a put idempotent: ``txnsq-seq <producer>
    <sequence>``.

    :raises ValueError: a producer with whitespace, or a negative sequence.
    """
    if not producer or any(c.isspace() for c in producer) or sequence < 0:
        raise ValueError("a producer id is a non-empty word and a sequence is >= 0")
    return SEQUENCE_PREFIX + ("%s %d" % (producer, sequence)).encode("utf-8")


def parse_sequence(flag: int, data: bytes) -> Optional[Tuple[bytes, int]]:
    """
    ``(producer, sequence)`` of a put's data whose attribute (``flag & 1``)
    is :func:`sequence_attribute`'s; None for any other put.

    :raises ValueError: the attribute starts with the prefix but is not
        ``<producer> <sequence>``.
    """
    if not flag & 1 or len(data) < 4 + len(SEQUENCE_PREFIX):
        return None
    if data[4 : 4 + len(SEQUENCE_PREFIX)] != SEQUENCE_PREFIX:
        return None
    (length,) = _ATTRIBUTE_LENGTH.unpack_from(data, 0)
    attribute = data[4 + len(SEQUENCE_PREFIX) : 4 + length]
    producer, _, number = attribute.rpartition(b" ")
    if not producer or not number.isdigit() or length > len(data) - 4:
        raise ValueError("bad sequence attribute %r" % (data[4 : 4 + min(length, 64)],))
    return producer, int(number)


def _scan_sequences(log: PartitionLog) -> Dict[bytes, int]:
    """The last sequence of each producer among a partition's retained records."""
    from txnsq.storage.log import OffsetOutOfRange
    from txnsq.storage.log_format import iter_records

    found: Dict[bytes, int] = {}
    offset = log.first_offset
    while offset < log.next_offset:
        try:
            data, following = log.read(offset, 1024 * 1024)
        except OffsetOutOfRange as moved:
            if moved.nearest <= offset:
                break
            offset = moved.nearest
            continue
        if not data:
            break
        for record in iter_records(data, offset):
            try:
                sequence = parse_sequence(record.flag, record.data)
            except ValueError:
                continue
            if sequence is not None and sequence[1] > found.get(sequence[0], -1):
                found[sequence[0]] = sequence[1]
        offset = following
    return found


class MetaqRefused(Exception):
    """
    A request the backend refuses: answered ``result <code>`` with
    ``message`` as the body.
    """

    def __init__(self, code: int, message: str) -> None:
        Exception.__init__(self, message)
        self.code = code
        self.message = message


class NoSuchPartition(MetaqRefused):
    """No retained topic ``topic``, or it has no partition ``partition`` (404)."""

    def __init__(self, topic: str, partition: int) -> None:
        MetaqRefused.__init__(
            self, NOT_FOUND, "The topic `%s` in partition `%d` is not exists" % (topic, partition)
        )
        self.topic = topic
        self.partition = partition


class IMetaqBackend(Interface):
    """
    The topics a MetaQ listener serves.  Every call is synchronous and
    made on the reactor thread; none may block for long (the retained log
    reads with ``pread`` from the page cache).
    """

    version = Attribute("The version ``version`` answers with (str).")

    def put(topic: str, partition: int, flag: int, data: bytes) -> Tuple[int, int, int]:
        """
        Store a message (``data`` as the put's body: with its attribute
        when ``flag & 1``) in ``partition`` (-1: the backend picks one).

        :return: ``(msg_id, partition, offset)``: the message id as a
            signed 64-bit number, the partition and the record's offset.
        :raises MetaqRefused: 400 for a bad topic name, 403 for a topic
            that may not be put to, 404 for a partition the topic does not
            have, 500 when it could not be stored (nothing was stored).
        """

    def read(topic: str, partition: int, offset: int, max_size: int) -> bytes:
        """
        The whole records from ``offset`` that fit in ``max_size`` bytes,
        as the log stores them (``b""`` at the end of the partition).

        :raises NoSuchPartition: no such retained topic or partition.
        :raises OffsetOutOfRange: no record starts at ``offset``.
        :raises RecordTooLarge: the record at ``offset`` is larger than
            ``max_size``.
        :raises OSError: the log could not be read.
        """

    def nearest_offset(topic: str, partition: int, offset: int) -> int:
        """
        The valid offset nearest ``offset``.

        :raises NoSuchPartition: no such retained topic or partition.
        """

    def offset_for_timestamp(topic: str, partition: int, timestamp_ms: int) -> int:
        """
        Where to start reading to get every record published at or after
        ``timestamp_ms`` (unix milliseconds): a record start at or before
        the first such record (the log's time index is sparse, so a few
        older records may come first), the end of the partition when every
        record is older.

        :raises NoSuchPartition: no such retained topic or partition.
        """

    def topics() -> List[str]:
        """The names of the retained topics, sorted."""

    def partition_stats(topic: str) -> Optional[List[PartitionStats]]:
        """Each partition's offsets, bytes and segments; None for no such retained topic."""


def _partition(log: Optional[TopicLog], topic: str, partition: int) -> PartitionLog:
    """``partition`` of ``log``, or :class:`NoSuchPartition`."""
    if log is None or not 0 <= partition < len(log.partitions):
        raise NoSuchPartition(topic, partition)
    return log.partitions[partition]


@implementer(IMetaqBackend)
class BrokerMetaqBackend:
    """
    nsqd's retained topics, through its broker.

    Written against the broker's retained-topic API:
    ``broker.retained_log(name) -> Optional[TopicLog]`` and
    ``broker.put_retained(name, partition, flag, data) -> (msg_id bytes,
    partition, offset)``, which creates a missing topic as a retained one,
    delivers the message to the topic's channels (the payload only when it
    carries an attribute) and raises ``ValueError`` for a bad topic name
    or attribute, ``LookupError`` for a partition the topic does not have,
    :class:`PublishError <txnsq.nsqd.topic.PublishError>` when the message could not be
    published (the log could not be written, a channel is full) and
    ``OSError`` when the log could not be written.

    A ``put`` to a topic that exists without a retained log is refused
    with 403 (retention is turned on over HTTP or by flag, not by a put);
    a ``put`` to partition -1 goes to the topic's partitions in turn (to
    partition 0 when it creates the topic).  A ``put`` to a mirrored topic
    short of ``--mirror-min-standbys`` live standbys is refused with 503,
    nothing stored.

    :param broker: the nsqd broker.
    :param version: what ``version`` answers.
    """

    def __init__(self, broker: Any, version: str) -> None:
        self.broker = broker
        self.version = version
        # The next partition of each topic for puts to partition -1.
        self._turns: Dict[str, int] = {}
        # Idempotent puts: the last sequence per producer, per (topic,
        # partition), read from the log on the first such put.
        self._sequences: Dict[Tuple[str, int], Tuple[Optional[PartitionLog], Dict[bytes, int]]] = {}

    def _last_sequences(self, log: Optional[TopicLog], topic: str, partition: int) -> Dict[bytes, int]:
        # Keyed by the partition's log too: a topic deleted and created
        # again starts with no sequences.
        key = (topic, partition)
        current = log.partitions[partition] if log is not None and 0 <= partition < len(log.partitions) else None
        known = self._sequences.get(key)
        if known is not None and known[0] is current and current is not None:
            return known[1]
        table = _scan_sequences(current) if current is not None else {}
        self._sequences[key] = (current, table)
        return table

    def put(self, topic: str, partition: int, flag: int, data: bytes) -> Tuple[int, int, int]:
        """See :meth:`IMetaqBackend.put`."""
        broker = self.broker
        log = broker.retained_log(topic)
        if log is None and broker.find_topic(topic) is not None:
            raise MetaqRefused(FORBIDDEN, "put: topic `%s` is not retained" % (topic,))
        if partition == -1:
            if log is None:
                partition = 0
            else:
                turn = self._turns.get(topic, 0)
                partition = turn % len(log.partitions)
                self._turns[topic] = partition + 1
        try:
            sequence = parse_sequence(flag, data)
        except ValueError as error:
            raise MetaqRefused(BAD_REQUEST, "put: %s" % (error,))
        last: Optional[Dict[bytes, int]] = None
        if sequence is not None:
            last = self._last_sequences(log, topic, partition)
            if sequence[1] <= last.get(sequence[0], -1):
                # A repeat of what this producer already appended: dropped.
                return 0, partition, -1
        try:
            msg_id, partition, offset = broker.put_retained(topic, partition, flag, data)
        except LookupError:
            raise NoSuchPartition(topic, partition)
        except ValueError as error:
            raise MetaqRefused(BAD_REQUEST, "put: %s" % (error,))
        except StandbysUnavailable as error:
            # A mirrored topic short of --mirror-min-standbys: nothing stored.
            raise MetaqRefused(SERVICE_UNAVAILABLE, "put: %s" % (error,))
        except PublishError as error:
            raise MetaqRefused(INTERNAL_SERVER_ERROR, "put: PUB failed %s" % (error,))
        except OSError as error:
            raise MetaqRefused(INTERNAL_SERVER_ERROR, "put: could not store the message: %s" % (error,))
        barrier = broker.barrier
        if barrier is not None:
            # Storage that must write before nsqd answers (the NSQ side of
            # the message, in the channels' queues).
            barrier()
        if sequence is not None:
            # (Re)read after the put: a topic created by it has its log now.
            self._last_sequences(broker.retained_log(topic), topic, partition)[sequence[0]] = sequence[1]
        return message_id_number(msg_id), partition, offset

    def mirror_gate(self, topic: str, waiter: Any) -> bool:
        """
        After a ``put`` to ``topic``: True when its reply must wait for the
        mirror (a mirrored topic whose standbys have not acked it yet); the
        broker's mirror gate then calls ``waiter.mirror_release()`` or
        ``waiter.mirror_fail(reason)`` (perhaps before this returns).  Not
        part of :class:`IMetaqBackend`: nsqd hands it to the listener with
        ``--mirror-min-standbys``.
        """
        gate = self.broker.mirror_gate
        found = self.broker.find_topic(topic)
        if gate is None or found is None or found.mirror is None:
            return False
        return bool(gate(waiter))

    def read(self, topic: str, partition: int, offset: int, max_size: int) -> bytes:
        """See :meth:`IMetaqBackend.read`."""
        return _partition(self.broker.retained_log(topic), topic, partition).read(offset, max_size)[0]

    def nearest_offset(self, topic: str, partition: int, offset: int) -> int:
        """See :meth:`IMetaqBackend.nearest_offset`."""
        return _partition(self.broker.retained_log(topic), topic, partition).nearest_offset(offset)

    def offset_for_timestamp(self, topic: str, partition: int, timestamp_ms: int) -> int:
        """See :meth:`IMetaqBackend.offset_for_timestamp`."""
        log = _partition(self.broker.retained_log(topic), topic, partition)
        return log.offset_for_timestamp(timestamp_ms * 1000000)

    def topics(self) -> List[str]:
        """See :meth:`IMetaqBackend.topics`."""
        retained_log = self.broker.retained_log
        return sorted(name for name in list(self.broker.topics) if retained_log(name) is not None)

    def partition_stats(self, topic: str) -> Optional[List[PartitionStats]]:
        """See :meth:`IMetaqBackend.partition_stats`."""
        log = self.broker.retained_log(topic)
        return None if log is None else log.stats()


@implementer(IMetaqBackend)
class LogMetaqBackend:
    """
    Topic logs served without a broker: the topics given to
    :meth:`add_topic`, and those a ``put`` creates (``partitions``
    partitions in ``directory/TOPIC``, when a directory is given).

    :param clock: ``IReactorTime`` for the logs made here.
    :param directory: where a ``put`` to an unknown topic creates its log;
        None refuses such puts (404).
    :param partitions: partitions of a topic made by a ``put``.
    :param log_options: more :class:`TopicLog` arguments for those logs.
    """

    def __init__(
        self,
        clock: Any,
        directory: Optional[str] = None,
        partitions: int = 1,
        version: str = "txnsq",
        **log_options: Any,
    ) -> None:
        self.clock = clock
        self.directory = directory
        self.default_partitions = partitions
        self.version = version
        self.log_options = log_options
        self.logs: Dict[str, TopicLog] = {}
        self._next_id = 0

    def add_topic(self, log: TopicLog) -> TopicLog:
        """Serve ``log`` as its topic; returns it."""
        self.logs[log.topic] = log
        return log

    def close(self) -> None:
        """Close every log."""
        for log in self.logs.values():
            log.close()

    def put(self, topic: str, partition: int, flag: int, data: bytes) -> Tuple[int, int, int]:
        """See :meth:`IMetaqBackend.put`; message ids count up from 1."""
        log = self.logs.get(topic)
        if log is None:
            if self.directory is None:
                raise NoSuchPartition(topic, partition)
            if not is_valid_topic_name(topic):
                raise MetaqRefused(BAD_REQUEST, "put: invalid topic name %r" % (topic,))
            log = self.logs[topic] = TopicLog(
                os.path.join(self.directory, topic),
                topic,
                self.default_partitions,
                self.clock,
                **self.log_options,
            )
        self._next_id += 1
        msg_id = _ID.pack(self._next_id)
        now = int(self.clock.seconds() * 1e9)
        try:
            if partition == -1:
                partition, offset = log.append(msg_id, flag, data, now)
            else:
                offset = _partition(log, topic, partition).append(msg_id, flag, data, now)
        except OSError as error:
            raise MetaqRefused(INTERNAL_SERVER_ERROR, "put: could not store the message: %s" % (error,))
        return self._next_id, partition, offset

    def read(self, topic: str, partition: int, offset: int, max_size: int) -> bytes:
        """See :meth:`IMetaqBackend.read`."""
        return _partition(self.logs.get(topic), topic, partition).read(offset, max_size)[0]

    def nearest_offset(self, topic: str, partition: int, offset: int) -> int:
        """See :meth:`IMetaqBackend.nearest_offset`."""
        return _partition(self.logs.get(topic), topic, partition).nearest_offset(offset)

    def offset_for_timestamp(self, topic: str, partition: int, timestamp_ms: int) -> int:
        """See :meth:`IMetaqBackend.offset_for_timestamp`."""
        return _partition(self.logs.get(topic), topic, partition).offset_for_timestamp(timestamp_ms * 1000000)

    def topics(self) -> List[str]:
        """See :meth:`IMetaqBackend.topics`."""
        return sorted(self.logs)

    def partition_stats(self, topic: str) -> Optional[List[PartitionStats]]:
        """See :meth:`IMetaqBackend.partition_stats`."""
        log = self.logs.get(topic)
        return None if log is None else log.stats()
