"""
Tests for txnsq.metaq.backend: BrokerMetaqBackend against a broker that
has the documented retained-topic API (retained_log, put_retained), and
LogMetaqBackend over topic logs in a temporary directory.
"""

from __future__ import annotations

import struct
from typing import Any, Dict, List, Optional, Tuple

from twisted.internet.task import Clock
from twisted.trial.unittest import SynchronousTestCase
from zope.interface.verify import verifyObject

from txnsq.metaq.backend import (
    BrokerMetaqBackend,
    IMetaqBackend,
    LogMetaqBackend,
    MetaqRefused,
    NoSuchPartition,
    message_id_number,
    parse_sequence,
    sequence_attribute,
)
from txnsq.storage.log_format import with_attribute
from txnsq.protocol.metaq_record import iter_records
from txnsq.storage.log import OffsetOutOfRange, RecordTooLarge
from txnsq.storage.topic_log import TopicLog


class RetainedBroker:
    """
    A broker with the retained-topic API the listener is written against:
    topics by name, ``find_topic``, ``retained_log(name)``,
    ``put_retained(name, partition, flag, data)`` (new topics get two
    partitions; no partition -1, as nsqd's).
    """

    def __init__(self, clock: Clock, directory: str) -> None:
        self.clock = clock
        self.directory = directory
        self.topics: Dict[str, Any] = {"plain": object()}
        self.logs: Dict[str, TopicLog] = {}
        self.barrier: Any = None
        self.mirror_gate: Any = None
        self.error: Optional[BaseException] = None
        self.ids = 0

    def retained_log(self, name: str) -> Optional[TopicLog]:
        return self.logs.get(name)

    def find_topic(self, name: str) -> Any:
        return self.topics.get(name)

    def put_retained(self, name: str, partition: int, flag: int, data: bytes) -> Tuple[bytes, int, int]:
        if self.error is not None:
            raise self.error
        log = self.logs.get(name)
        if log is None:
            log = self.logs[name] = TopicLog(self.directory + "/" + name, name, 2, self.clock)
            self.topics[name] = object()
        if not 0 <= partition < len(log.partitions):
            raise LookupError("topic %s has no partition %d" % (name, partition))
        self.ids += 1
        msg_id = struct.pack(">q", self.ids)
        offset = log.partitions[partition].append(msg_id, flag, data, 0)
        return msg_id, partition, offset

    def close(self) -> None:
        for log in self.logs.values():
            log.close()


class BrokerMetaqBackendTests(SynchronousTestCase):
    """BrokerMetaqBackend maps the broker's retained topics and errors to MetaQ's."""

    def setUp(self) -> None:
        self.broker = RetainedBroker(Clock(), self.mktemp())
        self.addCleanup(self.broker.close)
        self.backend = BrokerMetaqBackend(self.broker, "v9")

    def test_provides_interface(self) -> None:
        """BrokerMetaqBackend provides IMetaqBackend."""
        verifyObject(IMetaqBackend, self.backend)

    def test_put_then_read(self) -> None:
        """A put goes through put_retained; its record is read back through retained_log."""
        self.assertEqual(self.backend.put("orders", 1, 0, b"abc"), (1, 1, 0))
        [record] = list(iter_records(self.backend.read("orders", 1, 0, 1000)))
        self.assertEqual((record.msg_id, record.payload), (1, b"abc"))
        self.assertEqual(self.backend.nearest_offset("orders", 1, 5), 0)

    def test_offset_for_timestamp(self) -> None:
        """offset_for_timestamp takes unix ms to the log's nanoseconds: a time at or before a record is its start, a later one the end; no partition is NoSuchPartition."""
        self.backend.put("orders", 1, 0, b"abc")  # stored at timestamp 0
        self.assertEqual(self.backend.offset_for_timestamp("orders", 1, 0), 0)
        self.assertEqual(self.backend.offset_for_timestamp("orders", 1, 1), 23)
        self.assertRaises(NoSuchPartition, self.backend.offset_for_timestamp, "orders", 9, 0)
        self.assertRaises(NoSuchPartition, self.backend.offset_for_timestamp, "nope", 0, 0)

    def test_message_id_signed(self) -> None:
        """The 8-byte id is answered as a signed 64-bit number."""
        self.assertEqual(message_id_number(b"\xff" * 8), -1)
        self.assertEqual(message_id_number(b"\x00" * 7 + b"\x07"), 7)

    def test_put_errors(self) -> None:
        """ValueError is 400, LookupError 404, PublishError and OSError 500."""
        from txnsq.nsqd.topic import PublishError

        for error, code in [
            (ValueError("invalid topic name"), 400),
            (LookupError("no partition 9"), 404),
            (PublishError("topic log write failed"), 500),
            (OSError(28, "No space left on device"), 500),
        ]:
            self.broker.error = error
            with self.assertRaises(MetaqRefused) as caught:
                self.backend.put("orders", 9, 0, b"abc")
            self.assertEqual(caught.exception.code, code)

    def test_put_refused_by_mirror(self) -> None:
        """A mirrored topic short of --mirror-min-standbys is 503 with the reason, not 500."""
        from txnsq.mirror.recorder import StandbysUnavailable

        self.broker.error = StandbysUnavailable("mirror: 0 of 1 required standbys live")
        with self.assertRaises(MetaqRefused) as caught:
            self.backend.put("orders", 0, 0, b"abc")
        self.assertEqual(
            (caught.exception.code, caught.exception.message),
            (503, "put: mirror: 0 of 1 required standbys live"),
        )

    def test_mirror_gate(self) -> None:
        """mirror_gate asks the broker's gate for a mirrored topic only."""
        asked: List[Any] = []

        def gate(waiter: Any) -> bool:
            asked.append(waiter)
            return True

        self.assertFalse(self.backend.mirror_gate("orders", object()))
        self.broker.mirror_gate = gate
        self.assertFalse(self.backend.mirror_gate("orders", object()))

        class Topic:
            mirror: Any = None

        self.broker.topics["unmirrored"] = Topic()
        self.assertFalse(self.backend.mirror_gate("unmirrored", object()))
        self.broker.topics["mt"] = mirrored = Topic()
        mirrored.mirror = object()
        waiter = object()
        self.assertTrue(self.backend.mirror_gate("mt", waiter))
        self.assertEqual(asked, [waiter])

    def test_put_any_partition(self) -> None:
        """A put to partition -1 creates the topic in partition 0, then goes to the partitions in turn."""
        self.assertEqual([self.backend.put("orders", -1, 0, b"a")[1] for _ in range(5)], [0, 0, 1, 0, 1])

    def test_put_not_retained(self) -> None:
        """A put to an existing topic without a retained log is 403, nothing stored."""
        with self.assertRaises(MetaqRefused) as caught:
            self.backend.put("plain", 0, 0, b"abc")
        self.assertEqual(caught.exception.code, 403)
        self.assertEqual(self.broker.ids, 0)

    def test_barrier(self) -> None:
        """A broker barrier (storage that must write first) runs before the put is answered."""
        calls: List[int] = []
        self.broker.barrier = lambda: calls.append(1)
        self.backend.put("orders", 0, 0, b"abc")
        self.assertEqual(calls, [1])

    def test_not_retained(self) -> None:
        """A topic without a retained log, or a partition it lacks, is NoSuchPartition (404)."""
        self.backend.put("orders", 0, 0, b"abc")
        with self.assertRaises(NoSuchPartition) as caught:
            self.backend.read("plain", 0, 0, 100)
        self.assertEqual(caught.exception.code, 404)
        self.assertRaises(NoSuchPartition, self.backend.read, "orders", 2, 0, 100)
        self.assertRaises(NoSuchPartition, self.backend.nearest_offset, "orders", -1, 0)

    def test_read_errors_are_the_logs(self) -> None:
        """Out-of-range offsets and records too large are the log's own exceptions."""
        self.backend.put("orders", 0, 0, b"x" * 100)
        self.assertRaises(OffsetOutOfRange, self.backend.read, "orders", 0, 3, 1000)
        self.assertRaises(RecordTooLarge, self.backend.read, "orders", 0, 0, 50)

    def test_topics_and_stats(self) -> None:
        """Only retained topics are listed, with their partitions' stats."""
        self.backend.put("orders", 0, 0, b"abc")
        self.assertEqual(self.backend.topics(), ["orders"])
        stats = self.backend.partition_stats("orders")
        assert stats is not None
        self.assertEqual([s.next_offset for s in stats], [23, 0])
        self.assertIsNone(self.backend.partition_stats("plain"))


class IdempotentPutTests(SynchronousTestCase):
    """Puts whose attribute carries a producer and a sequence are appended once."""

    def setUp(self) -> None:
        self.broker = RetainedBroker(Clock(), self.mktemp())
        self.addCleanup(self.broker.close)
        self.backend = BrokerMetaqBackend(self.broker, "v9")

    def put(self, producer: str, sequence: int, body: bytes, partition: int = 0) -> Tuple[int, int, int]:
        return self.backend.put("out", partition, 1, with_attribute(sequence_attribute(producer, sequence), body))

    def bodies(self, partition: int = 0) -> List[bytes]:
        data = self.backend.read("out", partition, 0, 1 << 20)
        return [record.payload for record in iter_records(data)]

    def test_repeat_dropped(self) -> None:
        """A sequence not above the producer's last appended one is answered with offset -1 and not stored."""
        self.assertEqual(self.put("p/0", 0, b"a")[2], 0)
        self.put("p/0", 1, b"b")
        self.assertEqual(self.put("p/0", 1, b"b"), (0, 0, -1))
        self.assertEqual(self.put("p/0", 0, b"a"), (0, 0, -1))
        self.put("p/0", 5, b"c")
        self.assertEqual(self.bodies(), [b"a", b"b", b"c"])

    def test_producers_and_partitions_apart(self) -> None:
        """Sequences are counted per producer and per partition."""
        self.put("p/0", 3, b"a")
        self.put("p/1", 1, b"b")
        self.put("p/0", 1, b"c", partition=1)
        self.assertEqual(self.bodies(0), [b"a", b"b"])
        self.assertEqual(self.bodies(1), [b"c"])

    def test_sequences_read_from_log(self) -> None:
        """A new backend over the same logs (nsqd restarted) reads the last sequences from the records."""
        self.put("p/0", 7, b"a")
        self.backend.put("out", 0, 0, b"plain")
        backend = BrokerMetaqBackend(self.broker, "v9")
        data = with_attribute(sequence_attribute("p/0", 7), b"a")
        self.assertEqual(backend.put("out", 0, 1, data), (0, 0, -1))
        self.assertEqual(backend.put("out", 0, 1, with_attribute(sequence_attribute("p/0", 8), b"b"))[2], 65)
        self.assertEqual(self.bodies(), [b"a", b"plain", b"b"])

    def test_other_attributes(self) -> None:
        """Any other attribute is an ordinary put; a malformed sequence attribute is 400."""
        self.backend.put("out", 0, 1, with_attribute(b"key=1", b"a"))
        self.backend.put("out", 0, 1, with_attribute(b"key=1", b"a"))
        self.assertEqual(self.bodies(), [b"a", b"a"])
        with self.assertRaises(MetaqRefused) as caught:
            self.backend.put("out", 0, 1, with_attribute(b"txnsq-seq nonumber", b"x"))
        self.assertEqual(caught.exception.code, 400)

    def test_attribute_codec(self) -> None:
        """sequence_attribute and parse_sequence are inverse; a producer with a space is refused."""
        data = with_attribute(sequence_attribute("q/3", 12), b"body")
        self.assertEqual(parse_sequence(1, data), (b"q/3", 12))
        self.assertIsNone(parse_sequence(0, data))
        self.assertRaises(ValueError, sequence_attribute, "a b", 1)


class LogMetaqBackendTests(SynchronousTestCase):
    """LogMetaqBackend serves topic logs it owns."""

    def test_without_directory(self) -> None:
        """Without a directory a put to an unknown topic is 404; added topics are served."""
        clock = Clock()
        backend = LogMetaqBackend(clock)
        self.assertRaises(NoSuchPartition, backend.put, "t", 0, 0, b"a")
        log = backend.add_topic(TopicLog(self.mktemp(), "t", 1, clock))
        self.addCleanup(backend.close)
        self.assertEqual(backend.put("t", 0, 0, b"a"), (1, 0, 0))
        self.assertEqual(backend.topics(), ["t"])
        self.assertEqual(log.stats()[0].next_offset, 21)
