"""
Tests for the ``nsq`` source's offset mode (:mod:`txnsq.spark.offsets`,
:mod:`txnsq.spark.log_rows`): the planning and reading logic against a
fake MetaQ broker, then Spark reading a real nsqd's retained topics.
"""

from __future__ import annotations

import json
import os
import time
from typing import Any, Dict, List, Optional, Tuple

from twisted.trial.unittest import SynchronousTestCase

from tests_spark.nsqd import NSQDProcess, shared_nsqd, unique_topic
from txnsq.client.metaq import MetaqEndOfPartition, MetaqMoved, MetaqNotFound
from txnsq.nsqd.guid import TWEPOCH
from txnsq.spark.blocking import BlockingConnection
from txnsq.spark.log_rows import ARROW_SCHEMA, CorruptRecord, frame_records, records_to_batch
from txnsq.spark.offsets import (
    DataLossError,
    LogOptions,
    LogView,
    OffsetSourceError,
    ReadRange,
    parse_position,
    plan_ranges,
    read_range,
)
from txnsq.spark.options import OptionError
from txnsq.storage.log_format import encode_record, with_attribute

TIMEOUT = 180.0


def _id(ms: int, sequence: int) -> bytes:
    """An nsqd-style 8-byte id published at unix ms ``ms``."""
    return ((((ms * 1000000) >> 20) - TWEPOCH) << 22 | sequence).to_bytes(8, "big")


class FakeBroker:
    """
    One partition (or several) held in memory, answering like
    :class:`~txnsq.spark.metaq.BlockingMetaqClient` does.
    """

    def __init__(self, partitions: List[bytes], first: Optional[List[int]] = None) -> None:
        self.data = partitions
        self.first = first or [0] * len(partitions)
        self.closed = False
        self.starts = [self._starts(p) for p in range(len(partitions))]

    def _starts(self, partition: int) -> List[int]:
        data, pos, found = self.data[partition], 0, []
        while pos < len(data):
            found.append(self.first[partition] + pos)
            pos += 20 + int.from_bytes(data[pos : pos + 4], "big")
        return found

    def end(self, partition: int) -> int:
        return self.first[partition] + len(self.data[partition])

    def stats(self, topic: str) -> str:
        if topic != "t":
            raise MetaqNotFound(404, "no such item")
        return "".join(
            "t-%d %d %d 0 1\r\n" % (p, self.first[p], self.end(p)) for p in range(len(self.data))
        )

    def offset(self, topic: str, partition: int, offset: int) -> int:
        if offset <= self.first[partition]:
            return self.first[partition]
        if offset >= self.end(partition):
            return self.end(partition)
        return max(s for s in self.starts[partition] if s <= offset)

    def offset_for_time(self, topic: str, partition: int, ms: int) -> int:
        return self.first[partition]

    def get_raw(self, topic: str, partition: int, offset: int, size: int) -> bytes:
        first, end = self.first[partition], self.end(partition)
        if offset == end:
            raise MetaqEndOfPartition(404, "Could not find message at position %d" % offset, offset)
        if offset < first or offset > end or offset not in self.starts[partition]:
            raise MetaqMoved(301, str(self.offset(topic, partition, offset)), self.offset(topic, partition, offset))
        stop = offset
        for start in self.starts[partition] + [end]:
            if start > offset and start - offset <= size:
                stop = start
        return self.data[partition][offset - first : stop - first]

    def close(self) -> None:
        self.closed = True


def _records(count: int, ms: int = 1_795_000_000_000, size: int = 10) -> bytes:
    return b"".join(encode_record(_id(ms + i, i), 0, b"%0*d" % (size, i)) for i in range(count))


def first_at(ms_after: int, base: int = 1_795_000_000_000) -> int:
    """The index of the first record of :func:`_records` whose id time is not before ``base + ms_after``."""
    threshold = ((base + ms_after) * 1000000) >> 20
    return [i for i in range(10) if ((base + i) * 1000000) >> 20 >= threshold][0]


class OffsetPlanningTests(SynchronousTestCase):
    """Offsets resolved, checked and split on the driver; ranges read on executors (fake broker)."""

    def view(self, broker: FakeBroker, **options: Any) -> LogView:
        return LogView(LogOptions(topic="t", metaq_addresses=["b:1"], **options), lambda address: broker)

    def test_positions(self) -> None:
        """starting_offsets takes earliest, latest, timestamp: and JSON; anything else names the option."""
        self.assertEqual(parse_position("starting_offsets", "EARLIEST", "latest"), "earliest")
        self.assertEqual(parse_position("starting_offsets", None, "latest"), "latest")
        self.assertEqual(parse_position("s", "timestamp:1795000000000", "latest"), ("timestamp", 1795000000000))
        self.assertEqual(
            parse_position("s", "timestamp:2026-11-18T11:06:40Z", "latest"), ("timestamp", 1795000000000)
        )
        self.assertEqual(parse_position("s", '{"0": 30, "1": -2}', "latest"), {"0": 30, "1": -2})
        for bad in ("soon", "[1]", '{"0": -3}', '{"0": "x"}', "timestamp:yesterday"):
            error = self.assertRaises(OptionError, parse_position, "starting_offsets", bad, "latest")
            self.assertIn("starting_offsets", str(error))

    def test_resolve(self) -> None:
        """earliest and latest are each partition's first and next offsets; JSON offsets are checked and kept."""
        broker = FakeBroker([_records(5), _records(3)], first=[0, 60])
        view = self.view(broker)
        spans = view.ranges()
        self.assertEqual(spans, {"0": (0, 150), "1": (60, 150)})
        self.assertEqual(view.resolve("earliest", spans, "starting_offsets"), {"0": 0, "1": 60})
        self.assertEqual(view.resolve("latest", spans, "starting_offsets"), {"0": 150, "1": 150})
        self.assertEqual(view.resolve({"0": 60}, spans, "starting_offsets"), {"0": 60, "1": 60})
        self.assertEqual(view.resolve({"1": -1}, spans, "ending_offsets"), {"0": 150, "1": 150})

    def test_beyond_end(self) -> None:
        """An offset past the log's end is refused, naming topic, partition, offset and the end."""
        view = self.view(FakeBroker([_records(5)]))
        error = self.assertRaises(OffsetSourceError, view.resolve, {"0": 151}, view.ranges(), "starting_offsets")
        self.assertEqual(
            str(error), "nsq source: topic t partition 0: starting_offsets offset 151 is beyond the log's end (next offset 150)"
        )

    def test_not_record_start(self) -> None:
        """An offset inside a record is refused, naming the record's start."""
        view = self.view(FakeBroker([_records(5)]))
        error = self.assertRaises(OffsetSourceError, view.resolve, {"0": 35}, view.ranges(), "starting_offsets")
        self.assertIn("partition 0: starting_offsets offset 35 is not a record start (the record holding it starts at 30)", str(error))

    def test_deleted_offsets(self) -> None:
        """An offset retention deleted fails naming the earliest valid offset; fail_on_data_loss=false skips to it."""
        broker = FakeBroker([_records(5)], first=[300])
        error = self.assertRaises(
            DataLossError, self.view(broker).resolve, {"0": 30}, self.view(broker).ranges(), "starting_offsets"
        )
        self.assertIn("topic t partition 0: starting_offsets offset 30 was deleted", str(error))
        self.assertIn("the earliest valid offset is 300", str(error))
        self.assertEqual(error.earliest, 300)
        lenient = self.view(broker, fail_on_data_loss=False)
        self.assertEqual(lenient.resolve({"0": 30}, lenient.ranges(), "starting_offsets"), {"0": 300})

    def test_unknown_partition(self) -> None:
        """Offsets for a partition the topic lacks are refused; a topic that is not retained is named."""
        view = self.view(FakeBroker([_records(2)]))
        error = self.assertRaises(OffsetSourceError, view.resolve, {"4": 0}, view.ranges(), "starting_offsets")
        self.assertIn("topic t has no partition 4", str(error))
        other = LogView(LogOptions(topic="u", metaq_addresses=["b:1"]), lambda a: FakeBroker([b""]))
        self.assertIn("topic u is not retained", str(self.assertRaises(OffsetSourceError, other.ranges)))

    def test_split(self) -> None:
        """A range larger than max_bytes_per_partition is split at record starts into pieces no larger."""
        view = self.view(FakeBroker([_records(10)]), max_bytes_per_partition=1024)
        view.options.max_bytes_per_partition = 70
        pieces = plan_ranges(view, {"0": 0}, {"0": 300})
        self.assertEqual([(p.start, p.end) for p in pieces], [(0, 60), (60, 120), (120, 180), (180, 240), (240, 300)])
        self.assertEqual(plan_ranges(view, {"0": 300}, {"0": 300}), [])

    def test_admission(self) -> None:
        """after_records and after_bytes end at record starts: at most N records, at most N bytes (one at least)."""
        view = self.view(FakeBroker([_records(10)]))
        self.assertEqual(view.after_records("0", 30, 300, 4), 150)
        self.assertEqual(view.after_records("0", 270, 300, 4), 300)
        self.assertEqual(view.after_bytes("0", 0, 300, 100), 90)
        self.assertEqual(view.after_bytes("0", 0, 300, 5), 30)

    def test_offset_for_time(self) -> None:
        """A timestamp resolves to the first record whose id time is not before it."""
        view = self.view(FakeBroker([_records(10, ms=1_795_000_000_000, size=10)]))
        spans = view.ranges()
        # Ids keep time in units of 2**20 ns: the records of 4 and 5 ms after
        # the first fall in the unit after the first four's.
        self.assertEqual(view.resolve(("timestamp", 1_795_000_000_005), spans, "starting_offsets"), {"0": 30 * first_at(5)})
        self.assertEqual(view.resolve(("timestamp", 1_795_000_009_000), spans, "starting_offsets"), {"0": 300})

    def test_read_range(self) -> None:
        """A range is read as Arrow batches of get_size bytes: every record once, with partition and offset."""
        broker = FakeBroker([_records(10)])
        options = LogOptions(topic="t", metaq_addresses=["b:1"], get_size=100)
        batches = list(read_range(options, ReadRange("b:1", 0, "0", 30, 270), connect=lambda a: broker))
        rows = [row for batch in batches for row in batch.to_pylist()]
        self.assertEqual([r["offset"] for r in rows], list(range(30, 270, 30)))
        self.assertEqual([r["body"] for r in rows], [b"%010d" % i for i in range(1, 9)])
        self.assertEqual(len(batches), 3)
        self.assertTrue(broker.closed)

    def test_read_data_loss(self) -> None:
        """Records deleted before a range is read fail naming the partition and earliest offset, or are skipped."""
        broker = FakeBroker([_records(10)[120:]], first=[120])
        piece = ReadRange("b:1", 0, "0", 30, 300)
        options = LogOptions(topic="t", metaq_addresses=["b:1"])
        error = self.assertRaises(DataLossError, list, read_range(options, piece, connect=lambda a: broker))
        self.assertIn("topic t partition 0: reading offset 30 was deleted", str(error))
        options.fail_on_data_loss = False
        rows = [r for b in read_range(options, piece, connect=lambda a: broker) for r in b.to_pylist()]
        self.assertEqual([r["offset"] for r in rows], [120, 150, 180, 210, 240, 270])

    def test_read_past_log_end(self) -> None:
        """A range beyond what the log holds now (a truncated log) fails naming the partition and offset."""
        broker = FakeBroker([_records(3)])
        options = LogOptions(topic="t", metaq_addresses=["b:1"])
        error = self.assertRaises(
            OffsetSourceError, list, read_range(options, ReadRange("b:1", 0, "0", 0, 300), connect=lambda a: broker)
        )
        self.assertIn("topic t partition 0: the log ends at offset 90", str(error))

    def test_corrupt_record(self) -> None:
        """A record failing its checksum fails the read naming topic, partition and offset."""
        data = bytearray(_records(5))
        data[3 * 30 + 25] ^= 0xFF
        broker = FakeBroker([bytes(data)])
        options = LogOptions(topic="t", metaq_addresses=["b:1"])
        error = self.assertRaises(
            CorruptRecord, list, read_range(options, ReadRange("b:1", 0, "0", 0, 150), connect=lambda a: broker)
        )
        self.assertEqual(str(error), "nsq source: topic t partition 0: checksum mismatch at offset 90")
        # Records of mixed sizes take the header walk: same check.
        mixed = bytearray(_records(2) + encode_record(_id(1_795_000_000_000, 1), 0, b"longer body"))
        mixed[60 + 21] ^= 1
        error = self.assertRaises(CorruptRecord, frame_records, bytes(mixed), 1000, "t", 2)
        self.assertEqual(str(error), "nsq source: topic t partition 2: checksum mismatch at offset 1060")

    def test_rows(self) -> None:
        """Rows carry the hex id, the id's publish time, the payload (attribute dropped), partition and offset."""
        data = (
            encode_record(_id(1_795_000_000_000, 1), 0, b"plain")
            + encode_record(_id(1_795_000_000_001, 2), 1, with_attribute(b"k=v", b"with attribute"))
            + encode_record(_id(1_795_000_000_002, 3), 0, b"")
        )
        starts, lengths = frame_records(data, 500, "t", 3)
        rows = records_to_batch(data, starts, lengths, 500, "t", 3, "h:1").to_pylist()
        self.assertEqual([r["body"] for r in rows], [b"plain", b"with attribute", b""])
        self.assertEqual([r["offset"] for r in rows], [500, 525, 566])
        self.assertEqual(rows[0]["id"], _id(1_795_000_000_000, 1).hex())
        self.assertEqual({(r["partition"], r["topic"], r["nsqd"], r["attempts"]) for r in rows}, {(3, "t", "h:1", 1)})
        self.assertLess(abs(rows[1]["timestamp"].timestamp() - 1_795_000_000.001), 0.002)
        self.assertEqual(records_to_batch(data, starts, lengths, 0, "t", 3, "h").schema, ARROW_SCHEMA)


# -- Spark over a real nsqd --------------------------------------------------------


def metaq_nsqd() -> NSQDProcess:
    """The nsqd of these tests: MetaQ on, topics named off_* or eo_* retained with 2 partitions."""
    return shared_nsqd("metaq", "--metaq-address=127.0.0.1:0", "--retain-topics=^(off|eo)_", "--log-partitions=2")


def metaq_address(nsqd: NSQDProcess) -> str:
    """The MetaQ ``host:port`` of ``nsqd``, from its ``/info``."""
    return "127.0.0.1:%d" % (json.loads(nsqd.http("GET", "/info"))["metaq_port"],)


def publish(nsqd: NSQDProcess, topic: str, bodies: List[bytes], batch: int = 100) -> None:
    """MPUB ``bodies`` to ``topic`` in batches of ``batch`` (each batch goes to the next partition in turn)."""
    conn = BlockingConnection(nsqd.tcp_address)
    try:
        for start in range(0, len(bodies), batch):
            conn.mpublish(topic, bodies[start : start + batch])
    finally:
        conn.close()


class _OffsetSparkCase(SynchronousTestCase):
    def setUp(self) -> None:
        from tests_spark.spark import spark_session

        self.spark = spark_session()
        self.nsqd = metaq_nsqd()
        self.metaq = metaq_address(self.nsqd)
        self.topic = unique_topic("off")

    def read(self, **options: str) -> Any:
        reader = self.spark.read.format("nsq").option("topic", self.topic).option("metaq_addresses", self.metaq)
        for name, value in options.items():
            reader = reader.option(name, value)
        return reader.load()

    def error_text(self, call: Any, *args: Any) -> str:
        return str(self.assertRaises(Exception, call, *args))


class OffsetBatchReadTests(_OffsetSparkCase):
    """spark.read.format("nsq") of a retained topic: ranges of its history."""

    def test_whole_topic(self) -> None:
        """Every message once, spread over both partitions, offsets increasing; reading consumes nothing."""
        bodies = [b"m%05d" % i for i in range(3000)]
        publish(self.nsqd, self.topic, bodies, batch=1000)
        for _ in range(2):
            rows = self.read(max_bytes_per_partition="20000").collect()
            self.assertEqual(sorted(r.body for r in rows), bodies)
            self.assertEqual({r.partition for r in rows}, {0, 1})
            for partition in (0, 1):
                offsets = [r.offset for r in rows if r.partition == partition]
                self.assertEqual(offsets, sorted(set(offsets)))
                self.assertEqual(offsets[0], 0)
            self.assertEqual({(r.topic, r.attempts, r.nsqd) for r in rows}, {(self.topic, 1, self.metaq)})

    def test_offset_range(self) -> None:
        """starting_offsets and ending_offsets as JSON select exactly the records between them."""
        publish(self.nsqd, self.topic, [b"a%d" % i for i in range(200)])
        rows = sorted(self.read().collect(), key=lambda r: (r.partition, r.offset))
        part0 = [r for r in rows if r.partition == 0]
        start, end = part0[10].offset, part0[50].offset
        picked = self.read(
            starting_offsets=json.dumps({"0": start, "1": -1}), ending_offsets=json.dumps({"0": end})
        ).collect()
        self.assertEqual([r.body for r in sorted(picked, key=lambda r: r.offset)], [r.body for r in part0[10:50]])

    def test_timestamp_range(self) -> None:
        """timestamp: starting and ending offsets select the messages published between the two times."""
        publish(self.nsqd, self.topic, [b"before%d" % i for i in range(50)])
        time.sleep(0.05)
        start = int(time.time() * 1000)
        time.sleep(0.05)
        publish(self.nsqd, self.topic, [b"during%d" % i for i in range(70)])
        time.sleep(0.05)
        end = int(time.time() * 1000)
        time.sleep(0.05)
        publish(self.nsqd, self.topic, [b"after%d" % i for i in range(30)])
        rows = self.read(starting_offsets="timestamp:%d" % start, ending_offsets="timestamp:%d" % end).collect()
        self.assertEqual(sorted(r.body for r in rows), sorted(b"during%d" % i for i in range(70)))

    def test_bad_input(self) -> None:
        """Offset options on a topic that is not retained, offsets past the end, a corrupt record: clear errors."""
        plain = unique_topic("plain")
        self.nsqd.http("POST", "/topic/create?topic=%s" % (plain,), b"")
        text = self.error_text(
            lambda: self.spark.read.format("nsq").option("topic", plain).option("metaq_addresses", self.metaq).load().collect()
        )
        self.assertIn("topic %s is not retained" % (plain,), text)
        publish(self.nsqd, self.topic, [b"x" * 10] * 20, batch=10)
        text = self.error_text(lambda: self.read(starting_offsets='{"0": 100000}').collect())
        self.assertIn("topic %s partition 0: starting_offsets offset 100000 is beyond the log's end" % (self.topic,), text)
        # Flip a byte of the third record's body in partition 1's segment file.
        segment = os.path.join(self.nsqd.data_path, "retained", self.topic + "-1", "%020d.log" % 0)
        with open(segment, "r+b") as f:
            f.seek(2 * 30 + 25)
            byte = f.read(1)
            f.seek(2 * 30 + 25)
            f.write(bytes([byte[0] ^ 0xFF]))
        # nsqd checks every record before serving it: the damaged one is
        # never sent, and the source names the range it cannot read.
        text = self.error_text(lambda: self.read().collect())
        self.assertIn(
            "nsq source: topic %s partition 1: reading offset 60 was deleted by retention"
            " (or set aside as damaged); the earliest valid offset is 90" % (self.topic,),
            text,
        )

    def test_channel_mode_kept(self) -> None:
        """Without offset options and with only nsqd TCP addresses, a retained topic is read through a channel."""
        reader = (
            self.spark.read.format("nsq")
            .option("topic", self.topic)
            .option("nsqd_tcp_addresses", self.nsqd.tcp_address)
            .option("channel", "c")
        )
        self.assertNotIn("partition", reader.load().columns)
        text = self.error_text(lambda: reader.option("mode", "channel").option("starting_offsets", "earliest").load())
        self.assertIn("'starting_offsets' belongs to the offset mode", text)


class OffsetStreamTests(_OffsetSparkCase):
    """spark.readStream.format("nsq") of a retained topic."""

    def test_available_now_with_limit(self) -> None:
        """Trigger.AvailableNow with max_offsets_per_trigger reads every message once, no batch above the limit."""
        bodies = [b"s%05d" % i for i in range(2500)]
        publish(self.nsqd, self.topic, bodies, batch=1000)
        found: List[bytes] = []
        query = (
            self.spark.readStream.format("nsq")
            .option("topic", self.topic)
            .option("metaq_addresses", self.metaq)
            .option("starting_offsets", "earliest")
            .option("max_offsets_per_trigger", "1000")
            .load()
            .writeStream.foreachBatch(lambda df, n: found.extend(r.body for r in df.collect()))
            .option("checkpointLocation", os.path.abspath(self.mktemp()))
            .trigger(availableNow=True)
            .start()
        )
        query.awaitTermination(TIMEOUT)
        self.assertEqual(sorted(found), bodies)
        sizes = [p["numInputRows"] for p in query.recentProgress]
        self.assertEqual(sum(sizes), 2500)
        self.assertTrue(all(size <= 1000 for size in sizes), sizes)
        self.assertGreaterEqual(len([s for s in sizes if s]), 3)

    def test_latest_then_live(self) -> None:
        """A new query starting at latest reads only what is published after it started, with bytes limits."""
        publish(self.nsqd, self.topic, [b"old"] * 100)
        found: List[bytes] = []
        query = (
            self.spark.readStream.format("nsq")
            .option("topic", self.topic)
            .option("metaq_addresses", self.metaq)
            .option("max_bytes_per_trigger", "3000")
            .load()
            .writeStream.foreachBatch(lambda df, n: found.extend(r.body for r in df.collect()))
            .option("checkpointLocation", os.path.abspath(self.mktemp()))
            .trigger(processingTime="200 milliseconds")
            .start()
        )
        self.addCleanup(query.stop)
        from tests_spark.nsqd import wait_until

        wait_until(lambda: query.lastProgress is not None, TIMEOUT, "the first batch")
        new = [b"new%03d" % i for i in range(300)]
        publish(self.nsqd, self.topic, new)
        wait_until(lambda: len(found) >= 300, TIMEOUT, "the new messages", 0.2)
        query.stop()
        self.assertEqual(sorted(found), new)
        self.assertTrue(all(p["numInputRows"] <= 3000 // 26 + 2 for p in query.recentProgress))
