"""
Retained topics in the broker core and nsqd's HTTP API: the log append
before the acknowledgement, round-robin partitions, rewind (offset,
earliest, timestamp), ``from=``, ``POST /topic/retention``, persistence in
``nsqd.dat``, ``/stats``, the MetaQ-facing ``put_retained`` and a failing
disk.  Brokers run on a ``Clock``.
"""

from __future__ import annotations

import errno
import json
import os
from typing import Any, List, Tuple

from twisted.internet.task import Clock
from twisted.trial.unittest import SynchronousTestCase

from tests.core_fakes import START, FakeConsumer, decode, make_broker
from tests.test_http import HTTPTestCase
from txnsq.nsqd.broker import Broker
from txnsq.nsqd.metadata import MetadataStore
from txnsq.nsqd.metadata_format import decode_metadata, encode_metadata
from txnsq.nsqd.retention import (
    REWIND_READ,
    NoSuchPartition,
    NotRetained,
    RetainedWriteError,
    RetentionSettings,
    parse_offsets,
    parse_timestamp,
    payload_of,
    retention_directory,
)
from txnsq.nsqd.topic import PublishError
from txnsq.storage.topic_log import TopicLog
from txnsq.storage.log_format import iter_records, nsq_message_id, with_attribute
from txnsq.storage.memory import MemoryStorage


def records(log: TopicLog, partition: int) -> List[Any]:
    """Every record of one partition, decoded."""
    part = log.partitions[partition]
    found: List[Any] = []
    offset = part.first_offset
    while offset < part.next_offset:
        data, offset = part.read(offset, 1 << 20)
        found.extend(iter_records(data, offset - len(data)))
    return found


class RetainedTestCase(SynchronousTestCase):
    """A broker on a Clock with a data directory."""

    def setUp(self) -> None:
        self.directory = self.mktemp()
        os.makedirs(self.directory)
        self.clock = Clock()
        self.clock.advance(START)
        self.broker = self.open()

    def open(self, **overrides: Any) -> Broker:
        values = dict(data_path=self.directory, sync_every=1, sync_timeout=2.0)
        values.update(overrides)
        broker = make_broker(self.clock, MemoryStorage(), **values)
        self.addCleanup(broker.close)
        return broker

    def retained(self, name: str = "t", partitions: int = 1, size: int = 1 << 20) -> Any:
        topic = self.broker.get_topic(name)
        topic.set_retention(RetentionSettings(size, 0.0, partitions))
        return topic

    def consumer(self, topic: Any, channel: str = "c") -> FakeConsumer:
        consumer = FakeConsumer(ready_count=100000, msg_timeout=1e6)
        found = topic.get_channel(channel)
        found.add_consumer(consumer)
        found.consumer_ready(consumer)
        return consumer


class RetainedPublishTests(RetainedTestCase):
    """Publishing to a retained topic."""

    def test_record_is_body_with_message_id(self) -> None:
        """A PUB's record holds the body, and its id is the delivered message's id as 8 bytes."""
        topic = self.retained()
        consumer = self.consumer(topic)
        topic.publish(b"hello")
        [message] = consumer.take()
        [record] = records(topic.retention.log, 0)
        self.assertEqual((record.data, record.flag), (b"hello", 0))
        self.assertEqual(nsq_message_id(record.msg_id), message.id)

    def test_failed_append_publishes_nothing(self) -> None:
        """When the log cannot be written the publish fails and no channel or topic queue gets it."""
        topic = self.retained()
        consumer = self.consumer(topic)

        def full(fd: int, data: Any) -> int:
            raise OSError(errno.ENOSPC, "No space left on device")

        topic.retention.log.partitions[0].os_write = full
        self.assertRaises(RetainedWriteError, topic.publish, b"lost")
        self.assertRaises(RetainedWriteError, topic.publish_many, [b"a", b"b"])
        self.assertRaises(RetainedWriteError, topic.publish_deferred, b"d", 5.0)
        self.assertIsInstance(RetainedWriteError("x"), PublishError)
        self.assertEqual((consumer.take(), topic.message_count), ([], 0))
        self.assertEqual(topic.get_channel("c").depth(), 0)
        # Space returns: the topic works again and only acknowledged records are kept.
        topic.retention.log.partitions[0].os_write = os.write
        topic.publish(b"kept")
        self.assertEqual([m.body for m in consumer.take()], [b"kept"])
        self.assertEqual([r.data for r in records(topic.retention.log, 0)], [b"kept"])

    def test_round_robin(self) -> None:
        """PUBs go to the partitions in turn; an MPUB goes whole to one partition."""
        topic = self.retained(partitions=4)
        for number in range(8):
            topic.publish(b"m%d" % (number,))
        topic.publish_many([b"x", b"y", b"z"])
        log = topic.retention.log
        self.assertEqual([r.data for r in records(log, 0)], [b"m0", b"m4", b"x", b"y", b"z"])
        self.assertEqual([r.data for r in records(log, 1)], [b"m1", b"m5"])
        self.assertEqual([r.data for r in records(log, 3)], [b"m3", b"m7"])

    def test_without_channel_still_appended(self) -> None:
        """A retained topic with no channel logs the message and holds it as usual."""
        topic = self.retained()
        topic.publish(b"held")
        self.assertEqual(topic.depth(), 1)
        self.assertEqual([r.data for r in records(topic.retention.log, 0)], [b"held"])

    def test_retain_topics(self) -> None:
        """--retain-topics retains new topics whose names match, with the --retention-* defaults."""
        broker = self.open(retain_topics="^audit", retention_bytes=5000, log_partitions=3)
        self.assertIsNone(broker.get_topic("other").retention)
        topic = broker.get_topic("audit.x")
        self.assertEqual(topic.retention.settings, RetentionSettings(5000, 7 * 24 * 3600.0, 3))
        self.assertIsNone(broker.get_topic("audit#ephemeral").retention)

    def test_retention_bytes_bound(self) -> None:
        """A topic never holds more than its retention bytes plus one segment."""
        topic = self.retained(partitions=2, size=10000)
        body = b"x" * 80
        for _ in range(2000):
            topic.publish(body)
        log = topic.retention.log
        largest = max(s.bytes for p in log.partitions for s in p.segments())
        self.assertLessEqual(log.retained_bytes, 10000 + largest)


    def test_retention_ten_megabytes(self) -> None:
        """
        A topic retained with bytes=10 MB over 4 partitions, fed 30 MB, never
        holds more than 10 MB plus one segment, in its counters or its files,
        and keeps at least the newest 10 MB.
        """
        self.broker = self.open(sync_every=2500, mem_queue_size=100000)
        limit = 10 * 1024 * 1024
        topic = self.retained(partitions=4, size=limit)
        log = topic.retention.log
        bodies = [bytes([n % 256]) * 1000 for n in range(100)]
        written = 0
        largest = 0
        for _ in range(320):
            topic.publish_many(bodies)
            written += 100 * 1020
            largest = max([largest] + [s.bytes for p in log.partitions for s in p.segments()])
            self.assertLessEqual(log.retained_bytes, limit + largest)
        self.assertGreater(written, 3 * limit)
        self.assertGreaterEqual(log.retained_bytes, limit)
        self.assertLess(largest, limit)
        on_disk = sum(
            os.path.getsize(os.path.join(root, name))
            for root, _, names in os.walk(self.directory)
            for name in names
            if name.endswith(".log")
        )
        self.assertLessEqual(on_disk, limit + largest)


class RetainedTCPTests(RetainedTestCase):
    """Publishing to a retained topic over the V2 protocol."""

    def test_failed_write_is_pub_failed(self) -> None:
        """PUB, MPUB and DPUB whose log write fails are answered E_*PUB_FAILED, then PUB works again."""
        from twisted.internet.address import IPv4Address
        from twisted.internet.testing import StringTransport

        from txnsq.nsqd.options import NSQDOptions
        from txnsq.nsqd.tcp import NSQDFactory

        options = NSQDOptions(storage="memory", data_path=self.directory, sync_every=1)
        self.broker = Broker(options, self.clock, MemoryStorage())
        self.addCleanup(self.broker.close)
        topic = self.retained()
        consumer = self.consumer(topic)
        factory = NSQDFactory(self.broker, self.clock)

        def full(fd: int, data: Any) -> int:
            raise OSError(errno.ENOSPC, "No space left on device")

        partition = topic.retention.log.partitions[0]
        for command, code in (
            (b"PUB t\n\x00\x00\x00\x01x", b"E_PUB_FAILED PUB failed retained log write failed"),
            (b"MPUB t\n\x00\x00\x00\x09\x00\x00\x00\x01\x00\x00\x00\x01y", b"E_MPUB_FAILED MPUB failed retained"),
            (b"DPUB t 1000\n\x00\x00\x00\x01z", b"E_DPUB_FAILED DPUB failed retained"),
        ):
            transport = StringTransport(peerAddress=IPv4Address("TCP", "127.0.0.1", 1))
            protocol = factory.buildProtocol(transport.getPeer())
            protocol.makeConnection(transport)
            partition.os_write = full
            protocol.dataReceived(b"  V2" + command)
            self.clock.advance(1)
            self.assertIn(code, transport.value())
            self.assertNotIn(b"OK", transport.value())
        self.assertEqual((consumer.take(), topic.message_count), ([], 0))
        partition.os_write = os.write
        transport = StringTransport(peerAddress=IPv4Address("TCP", "127.0.0.1", 2))
        protocol = factory.buildProtocol(transport.getPeer())
        protocol.makeConnection(transport)
        protocol.dataReceived(b"  V2PUB t\n\x00\x00\x00\x02ok")
        self.clock.advance(1)
        self.assertIn(b"OK", transport.value())
        self.assertEqual([m.body for m in consumer.take()], [b"ok"])
        self.assertEqual([r.data for r in records(topic.retention.log, 0)], [b"ok"])


    def tcp_client(self, port: int) -> Tuple[Any, Any]:
        """A V2 connection (protocol, StringTransport) that sent the magic."""
        from twisted.internet.address import IPv4Address
        from twisted.internet.testing import StringTransport

        from txnsq.nsqd.tcp import NSQDFactory

        transport = StringTransport(peerAddress=IPv4Address("TCP", "127.0.0.1", port))
        protocol = NSQDFactory(self.broker, self.clock).buildProtocol(transport.getPeer())
        protocol.makeConnection(transport)
        protocol.dataReceived(b"  V2")
        return protocol, transport

    def use_nsqd_options(self) -> None:
        """A broker with nsqd's full options, as the V2 adapter needs."""
        from txnsq.nsqd.options import NSQDOptions

        options = NSQDOptions(storage="memory", data_path=self.directory)
        self.broker = Broker(options, self.clock, MemoryStorage())
        self.addCleanup(self.broker.close)

    def test_pub_run_one_write(self) -> None:
        """PUBs read together go to one partition in one write, answered OK each, in order."""
        self.use_nsqd_options()
        topic = self.retained()
        consumer = self.consumer(topic)
        writes: List[int] = []
        partition = topic.retention.log.partitions[0]

        def counted(fd: int, data: Any) -> int:
            writes.append(len(data))
            return os.write(fd, data)

        partition.os_write = counted
        protocol, transport = self.tcp_client(1)
        protocol.dataReceived(b"".join(b"PUB t\n\x00\x00\x00\x02m%d" % (i,) for i in range(5)))
        self.clock.advance(0)
        self.assertEqual(transport.value(), b"\x00\x00\x00\x06\x00\x00\x00\x00OK" * 5)
        self.assertEqual(writes, [5 * 22])
        self.assertEqual([r.data for r in records(topic.retention.log, 0)], [b"m%d" % (i,) for i in range(5)])
        self.assertEqual([m.body for m in consumer.take()], [b"m%d" % (i,) for i in range(5)])

    def test_pub_run_failed_write(self) -> None:
        """
        A run of PUBs whose log write fails is published PUB by PUB: those
        written are answered OK, the first that fails E_PUB_FAILED (fatal),
        and nothing after it is published or logged.
        """
        self.use_nsqd_options()
        topic = self.retained()
        consumer = self.consumer(topic)
        calls: List[int] = []

        def flaky(fd: int, data: Any) -> int:
            # The run's write fails, the first single write works, the second fails.
            calls.append(len(data))
            if len(calls) in (1, 3):
                raise OSError(errno.ENOSPC, "No space left on device")
            return os.write(fd, data)

        for log_partition in topic.retention.log.partitions:
            log_partition.os_write = flaky
        protocol, transport = self.tcp_client(1)
        protocol.dataReceived(b"".join(b"PUB t\n\x00\x00\x00\x02m%d" % (i,) for i in range(4)))
        self.clock.advance(0)
        self.assertEqual(calls, [4 * 22, 22, 22])
        answer = transport.value()
        self.assertTrue(answer.startswith(b"\x00\x00\x00\x06\x00\x00\x00\x00OK"), answer)
        self.assertIn(b"E_PUB_FAILED PUB failed retained log write failed", answer)
        self.assertEqual(answer.count(b"OK"), 1)
        self.assertTrue(transport.disconnecting)
        self.assertEqual([m.body for m in consumer.take()], [b"m0"])
        self.assertEqual(topic.message_count, 1)
        partitions = range(len(topic.retention.log.partitions))
        logged = [r.data for p in partitions for r in records(topic.retention.log, p)]
        self.assertEqual(logged, [b"m0"])


class PutRetainedTests(RetainedTestCase):
    """Broker.put_retained and retained_log, the MetaQ listener's interface."""

    def test_creates_retained_topic(self) -> None:
        """A put to a new topic creates it retained with --log-partitions partitions."""
        broker = self.open(log_partitions=2)
        msg_id, partition, offset = broker.put_retained("q", 1, 0, b"body")
        log = broker.retained_log("q")
        self.assertEqual((len(log.partitions), partition, offset), (2, 1, 0))
        self.assertEqual(records(log, 1)[0].msg_id, msg_id)
        msg_id, partition, offset = broker.put_retained("q", 1, 0, b"next")
        self.assertEqual(offset, 24)

    def test_attribute_payload_to_channels(self) -> None:
        """With flag & 1 the record keeps the attribute; channels get the payload only."""
        topic = self.retained()
        consumer = self.consumer(topic)
        data = with_attribute(b"attr", b"payload")
        msg_id, _, _ = self.broker.put_retained("t", 0, 1, data)
        [message] = consumer.take()
        self.assertEqual((message.body, message.id), (b"payload", nsq_message_id(msg_id)))
        self.assertEqual(records(topic.retention.log, 0)[0].data, data)
        self.assertRaises(ValueError, self.broker.put_retained, "t", 0, 1, b"\x00\x00\x00\x09ab")

    def test_errors(self) -> None:
        """Invalid names, missing partitions, unretained topics and failed writes are refused."""
        self.assertRaises(ValueError, self.broker.put_retained, "bad name", 0, 0, b"x")
        self.assertRaises(ValueError, self.broker.put_retained, "e#ephemeral", 0, 0, b"x")
        self.broker.get_topic("plain")
        self.assertRaises(NotRetained, self.broker.put_retained, "plain", 0, 0, b"x")
        self.assertIsNone(self.broker.retained_log("plain"))
        self.assertIsNone(self.broker.retained_log("missing"))
        self.retained()
        self.assertRaises(NoSuchPartition, self.broker.put_retained, "t", 1, 0, b"x")

        def full(fd: int, data: Any) -> int:
            raise OSError(errno.ENOSPC, "No space left on device")

        self.broker.retained_log("t").partitions[0].os_write = full
        self.assertRaises(RetainedWriteError, self.broker.put_retained, "t", 0, 0, b"x")
        self.assertEqual(self.broker.get_topic("t").depth(), 0)


class RewindTests(RetainedTestCase):
    """Re-feeding a channel from the log."""

    def test_earliest(self) -> None:
        """A channel rewound to the earliest offsets receives every message again, same ids."""
        topic = self.retained(partitions=3)
        consumer = self.consumer(topic)
        for number in range(10):
            topic.publish(b"m%d" % (number,))
        first = consumer.take()
        topic.retention.rewind(topic.get_channel("c"), topic.retention.earliest())
        self.clock.advance(0)
        again = consumer.take()
        self.assertEqual(sorted((m.id, m.body) for m in again), sorted((m.id, m.body) for m in first))

    def test_offset(self) -> None:
        """A rewind by offset re-feeds the named partitions from those offsets only."""
        topic = self.retained(partitions=2)
        consumer = self.consumer(topic)
        for number in range(6):
            topic.publish(b"m%d" % (number,))
        consumer.take()
        third = records(topic.retention.log, 0)[1].offset
        topic.retention.rewind(topic.get_channel("c"), [third, -1])
        self.assertEqual([m.body for m in consumer.take()], [b"m2", b"m4"])

    def test_timestamp_exact(self) -> None:
        """A rewind to a time receives exactly the messages published at or after it, though the index is sparse."""
        topic = self.retained()
        consumer = self.consumer(topic)
        body = b"x" * 200
        for _ in range(100):  # 22 KB: several index entries
            topic.publish(body)
            self.clock.advance(0.01)
        since = int(self.clock.seconds() * 1e9)
        for number in range(50):
            topic.publish(b"after %d" % (number,))
            self.clock.advance(0.01)
        consumer.take()
        start = topic.retention.starts_for_timestamp(since)
        self.assertLess(start[0], records(topic.retention.log, 0)[100].offset)
        topic.retention.rewind(topic.get_channel("c"), start, since)
        again = consumer.take()
        self.assertEqual([m.body for m in again], [b"after %d" % (n,) for n in range(50)])
        self.assertTrue(all(m.timestamp >= since - (1 << 20) for m in again))

    def test_large_rewind_over_turns(self) -> None:
        """A rewind larger than one read goes on over later reactor turns."""
        topic = self.retained()
        consumer = self.consumer(topic)
        body = b"y" * 1000
        count = 3 * REWIND_READ // 1020
        topic.publish_many([body] * count)
        consumer.take()
        rewind = topic.retention.rewind(topic.get_channel("c"), [0])
        self.assertFalse(rewind.done)
        self.assertLess(len(consumer.take()), count)
        self.clock.advance(0)
        self.clock.advance(0)
        self.clock.advance(0)
        self.assertTrue(rewind.done)
        self.assertEqual(rewind.fed, count)

    def test_record_larger_than_a_read(self) -> None:
        """A record larger than one rewind read is re-fed whole."""
        topic = self.retained(size=10 << 20)
        consumer = self.consumer(topic)
        big = b"b" * (REWIND_READ + 100)
        topic.publish(b"small")
        topic.publish(big)
        topic.publish(b"after")
        consumer.take()
        rewind = topic.retention.rewind(topic.get_channel("c"), [0])
        for _ in range(3):
            self.clock.advance(0)
        self.assertTrue(rewind.done)
        self.assertEqual([m.body for m in consumer.take()], [b"small", big, b"after"])

    def test_inside_record_refused(self) -> None:
        """An offset that is not a record's start is refused."""
        from txnsq.storage.log import OffsetOutOfRange

        topic = self.retained()
        topic.publish(b"abc")
        channel = topic.get_channel("c")
        self.assertRaises(OffsetOutOfRange, topic.retention.rewind, channel, [5])
        self.assertRaises(OffsetOutOfRange, topic.retention.rewind, channel, [500])

    def test_deleted_channel_stops(self) -> None:
        """Deleting a channel stops its rewind."""
        topic = self.retained()
        topic.publish_many([b"z" * 1000] * (2 * REWIND_READ // 1000))
        rewind = topic.retention.rewind(topic.get_channel("c"), [0])
        topic.delete_channel("c")
        self.assertTrue(rewind.done)
        self.clock.advance(0)


class ParseTests(SynchronousTestCase):
    """Parsing rewind arguments."""

    def test_offsets(self) -> None:
        """Partition:offset pairs, one number for one partition; bad ones raise."""
        self.assertEqual(parse_offsets("0:1024,2:0", 3), [1024, -1, 0])
        self.assertEqual(parse_offsets("77", 1), [77])
        self.assertRaises(ValueError, parse_offsets, "77", 2)
        self.assertRaises(ValueError, parse_offsets, "0:1,0:2", 2)
        self.assertRaises(NoSuchPartition, parse_offsets, "5:1", 2)
        self.assertRaises(ValueError, parse_offsets, "a:b", 2)

    def test_timestamps(self) -> None:
        """Unix milliseconds and RFC 3339 with a fraction and a zone."""
        self.assertEqual(parse_timestamp("1700000000123"), 1700000000123000000)
        self.assertEqual(parse_timestamp("2023-11-14T22:13:20Z"), 1700000000 * 10**9)
        self.assertEqual(parse_timestamp("2023-11-14T23:13:20.5+01:00"), 1700000000500000000)
        self.assertRaises(ValueError, parse_timestamp, "yesterday")

    def test_payload(self) -> None:
        """The payload follows the attribute when flag & 1."""
        self.assertEqual(payload_of(0, b"abc"), b"abc")
        self.assertEqual(payload_of(1, with_attribute(b"a", b"p")), b"p")
        self.assertRaises(ValueError, payload_of, 1, b"\x00")


class PersistenceTests(RetainedTestCase):
    """Retention settings in nsqd.dat."""

    def test_encoded_as_extra_key(self) -> None:
        """A retained topic's entry gets a "retention" key that the Go field decoder ignores."""
        from txnsq.nsqd.metadata_format import TopicMetadata

        data = encode_metadata(
            [TopicMetadata("t", retention={"bytes": 5, "age_ms": 0, "partitions": 2}), TopicMetadata("u")],
            "1.3.0",
        )
        self.assertEqual(
            data,
            b'{"topics":[{"name":"t","paused":false,"channels":null,'
            b'"retention":{"age_ms":0,"bytes":5,"partitions":2}},'
            b'{"name":"u","paused":false,"channels":null}],"version":"1.3.0"}',
        )
        topics, _ = decode_metadata(data)
        self.assertEqual(topics[0].retention, {"bytes": 5, "age_ms": 0, "partitions": 2})
        self.assertIsNone(topics[1].retention)

    def test_restart_keeps_settings_and_records(self) -> None:
        """After a restart a retained topic is retained again with its records and offsets."""
        store = MetadataStore(self.broker, self.directory, self.clock, version="1.3.0")
        topic = self.retained(partitions=2, size=123456)
        topic.get_channel("c")
        for number in range(5):
            topic.publish(b"m%d" % (number,))
        store.persist()
        before = topic.retention.log.stats()
        self.broker.close()
        broker = self.open()
        MetadataStore(broker, self.directory, self.clock, version="1.3.0").load()
        reopened = broker.get_topic("t")
        self.assertEqual(reopened.retention.settings, RetentionSettings(123456, 0.0, 2))
        self.assertEqual(reopened.retention.log.stats(), before)
        self.assertEqual(len(records(reopened.retention.log, 0)), 3)

    def test_turning_off_removes_log(self) -> None:
        """Turning retention off removes the log's files."""
        topic = self.retained(partitions=2)
        topic.publish(b"x")
        directory = retention_directory(self.broker.options)
        self.assertEqual(sorted(os.listdir(directory)), ["t-0", "t-1"])
        topic.set_retention(None)
        self.assertEqual(os.listdir(directory), [])
        self.assertIsNone(topic.retention)


class RetentionHTTPTests(HTTPTestCase):
    """POST /topic/retention, /channel/rewind, /channel/create?from= and /stats."""

    def setUp(self) -> None:
        self.directory = self.mktemp()
        os.makedirs(self.directory)
        self.build(data_path=self.directory, log_partitions=2)
        self.addCleanup(self.broker.close)

    def test_on_change_off(self) -> None:
        """Retention goes on with the defaults, changes, and goes off with bytes=0."""
        self.assertEmpty(self.post("/topic/retention?topic=t"))
        topic = self.broker.get_topic("t")
        self.assertEqual(topic.retention.settings, RetentionSettings(1 << 30, 7 * 24 * 3600.0, 2))
        self.assertEmpty(self.post("/topic/retention?topic=t&bytes=1000000&age=1h&partitions=4"))
        self.assertEqual(topic.retention.settings, RetentionSettings(1000000, 3600.0, 4))
        self.assertError(self.post("/topic/retention?topic=t&partitions=3"), 400, "INVALID_PARTITIONS")
        self.assertEmpty(self.post("/topic/retention?topic=t&bytes=0"))
        self.assertIsNone(topic.retention)

    def test_retention_errors(self) -> None:
        """Missing or invalid arguments get Go-style 400s."""
        self.assertError(self.post("/topic/retention"), 400, "MISSING_ARG_TOPIC")
        self.assertError(self.post("/topic/retention?topic=a b"), 400, "INVALID_TOPIC")
        self.assertError(self.post("/topic/retention?topic=t&bytes=x"), 400, "INVALID_BYTES")
        self.assertError(self.post("/topic/retention?topic=t&age=soon"), 400, "INVALID_AGE")
        self.assertError(self.post("/topic/retention?topic=t&partitions=0"), 400, "INVALID_PARTITIONS")
        self.assertError(self.post("/topic/retention?topic=e%23ephemeral"), 400, "INVALID_TOPIC")

    def test_rewind(self) -> None:
        """POST /channel/rewind by earliest, offset and timestamp re-feeds the channel."""
        self.post("/topic/retention?topic=t")
        consumer = self.consume("t")
        for number in range(4):
            self.assertOK(self.post("/pub?topic=t", b"m%d" % (number,)))
        self.clock.advance(1)
        since_ms = int(self.clock.seconds() * 1000)
        self.assertOK(self.post("/mpub?topic=t", b"n0\nn1"))
        consumer.take()
        self.assertEmpty(self.post("/channel/rewind?topic=t&channel=c&earliest"))
        self.assertEqual(sorted(m.body for m in consumer.take()), [b"m0", b"m1", b"m2", b"m3", b"n0", b"n1"])
        self.assertEmpty(self.post("/channel/rewind?topic=t&channel=c&offset=1:22"))
        self.assertEqual([m.body for m in consumer.take()], [b"m3"])
        self.assertEmpty(self.post("/channel/rewind?topic=t&channel=c&timestamp=%d" % (since_ms,)))
        self.assertEqual([m.body for m in consumer.take()], [b"n0", b"n1"])

    def test_rewind_errors(self) -> None:
        """Rewinds of unknown, unretained or bad targets are refused in Go's style."""
        self.assertError(self.post("/channel/rewind?channel=c"), 400, "MISSING_ARG_TOPIC")
        self.assertError(self.post("/channel/rewind?topic=t&channel=c&earliest"), 404, "TOPIC_NOT_FOUND")
        self.broker.get_topic("t").get_channel("c")
        self.assertError(self.post("/channel/rewind?topic=t&channel=c&earliest"), 403, "TOPIC_NOT_RETAINED")
        self.post("/topic/retention?topic=t")
        self.assertError(self.post("/channel/rewind?topic=t&channel=d&earliest"), 404, "CHANNEL_NOT_FOUND")
        self.assertError(self.post("/channel/rewind?topic=t&channel=c"), 400, "MISSING_ARG_OFFSET")
        self.assertError(self.post("/channel/rewind?topic=t&channel=c&offset=x"), 400, "INVALID_OFFSET")
        self.assertError(self.post("/channel/rewind?topic=t&channel=c&offset=7:0"), 400, "INVALID_PARTITION")
        self.assertError(self.post("/channel/rewind?topic=t&channel=c&offset=0:99"), 400, "OFFSET_OUT_OF_RANGE")
        self.assertError(self.post("/channel/rewind?topic=t&channel=c&timestamp=x"), 400, "INVALID_TIMESTAMP")

    def test_create_from(self) -> None:
        """A channel created with from=earliest or from=TIME starts in the past."""
        self.post("/topic/retention?topic=t")
        self.consume("t", "live")
        self.post("/pub?topic=t", b"old")
        self.clock.advance(1)
        since_ms = int(self.clock.seconds() * 1000)
        self.post("/pub?topic=t", b"new")
        self.assertEmpty(self.post("/channel/create?topic=t&channel=all&from=earliest"))
        self.assertEmpty(self.post("/channel/create?topic=t&channel=recent&from=%d" % (since_ms,)))
        self.assertEqual(sorted(self.consume("t", "all").bodies()), [b"new", b"old"])
        self.assertEqual(self.consume("t", "recent").bodies(), [b"new"])
        self.post("/topic/create?topic=plain")
        self.assertError(self.post("/channel/create?topic=plain&channel=c&from=earliest"), 403, "TOPIC_NOT_RETAINED")
        self.assertError(self.post("/channel/create?topic=t&channel=x&from=never"), 400, "INVALID_FROM")

    def test_disk_full_is_500(self) -> None:
        """A publish whose log write fails is HTTP 500 PUB_FAILED."""
        self.post("/topic/retention?topic=t&partitions=1")

        def full(fd: int, data: Any) -> int:
            raise OSError(errno.ENOSPC, "No space left on device")

        self.broker.retained_log("t").partitions[0].os_write = full
        self.assertError(self.post("/pub?topic=t", b"x"), 500, "PUB_FAILED")
        self.assertError(self.post("/mpub?topic=t", b"x\ny"), 500, "PUB_FAILED")

    def test_stats(self) -> None:
        """/stats shows a retained topic's partitions (JSON and text); other topics are unchanged."""
        self.post("/topic/retention?topic=t&bytes=5000&age=0")
        self.post("/pub?topic=t", b"abc")
        self.post("/topic/create?topic=u")
        topics = self.get("/stats?format=json").json()["topics"]
        self.assertNotIn("retention", topics[1])
        self.assertEqual(
            topics[0]["retention"],
            {
                "bytes_limit": 5000,
                "age_ms": 0,
                "log_bytes": 23,
                "partitions": [
                    {"partition": 0, "first_offset": 0, "next_offset": 23, "bytes": 23, "segments": 1},
                    {"partition": 1, "first_offset": 0, "next_offset": 0, "bytes": 0, "segments": 1},
                ],
            },
        )
        text = self.get("/stats").body.decode()
        self.assertIn("retained: log-bytes: 23 limit: 5000", text)
        self.assertIn("[partition 0] first: 0 next: 23 bytes: 23 segments: 1", text)
        json.dumps(topics)
