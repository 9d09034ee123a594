"""
Tests for :mod:`txnsq.spark.datasource` on a real local Spark session
against a real nsqd process.
"""

from __future__ import annotations

import os
import socket
import time
from typing import Any, Dict, List, Tuple

from twisted.trial.unittest import SynchronousTestCase

from tests_spark.nsqd import shared_nsqd, unique_topic, wait_until
from tests_spark.spark import spark_session
from txnsq.spark.blocking import BlockingConnection
from txnsq.spark.consumer import drain
from txnsq.spark.options import SourceOptions

#: Bound on every wait for Spark (micro-batches take a second or two each).
TIMEOUT = 180.0


def _free_address() -> str:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return "127.0.0.1:%d" % (s.getsockname()[1],)


class _SparkCase(SynchronousTestCase):
    def setUp(self) -> None:
        self.spark = spark_session()
        self.nsqd = shared_nsqd()
        self.topic = unique_topic("spark")

    def publish(self, topic: str, bodies: List[bytes]) -> None:
        conn = BlockingConnection(self.nsqd.tcp_address)
        try:
            for start in range(0, len(bodies), 500):
                conn.mpublish(topic, bodies[start : start + 500])
        finally:
            conn.close()

    def drained(self, topic: str, channel: str) -> Dict[str, bytes]:
        """Every message now queued in ``channel``, by id (FINed)."""
        options = SourceOptions.parse(
            {"nsqd_tcp_addresses": self.nsqd.tcp_address, "topic": topic, "channel": channel, "drain_timeout": "0.5"},
            False,
        )
        found: Dict[str, bytes] = {}
        while True:
            got = list(drain(self.nsqd.tcp_address, options, 2500))
            found.update((m.id.decode(), m.body) for m in got)
            if not got:
                return found

    def stream_options(self, **extra: str) -> Dict[str, str]:
        options = {
            "nsqd_tcp_addresses": self.nsqd.tcp_address,
            "topic": self.topic,
            "channel": "spark",
            "spool_path": os.path.abspath(self.mktemp()),
            "max_messages_per_batch": "100",
            "batch_timeout": "0.3",
        }
        options.update(extra)
        return options

    def error_text(self, call: Any, *args: Any) -> str:
        error = self.assertRaises(Exception, call, *args)
        return str(error)


class StreamingSourceTests(_SparkCase):
    """readStream.format("nsq")."""

    def test_consumes_exactly_published(self) -> None:
        """A streaming query reads exactly the N messages published: same ids, same bodies, once each."""
        count = 500
        self.nsqd.create_channel(self.topic, "spark")
        self.nsqd.create_channel(self.topic, "audit")
        self.publish(self.topic, [b"msg-%05d" % i for i in range(count)])
        name = "exact_" + self.topic
        stream = self.spark.readStream.format("nsq").options(**self.stream_options()).load()
        query = (
            stream.writeStream.format("memory")
            .queryName(name)
            .option("checkpointLocation", os.path.abspath(self.mktemp()))
            .start()
        )
        self.addCleanup(query.stop)
        wait_until(
            lambda: self.spark.sql("select count(*) from %s" % name).collect()[0][0] >= count,
            TIMEOUT,
            "%d rows" % (count,),
            0.5,
        )
        rows = self.spark.sql("select id, body, attempts, topic, nsqd, timestamp from %s" % name).collect()
        query.stop()
        self.assertEqual(len(rows), count)
        self.assertEqual({r.id: bytes(r.body) for r in rows}, self.drained(self.topic, "audit"))
        self.assertEqual({(r.attempts, r.topic, r.nsqd) for r in rows}, {(1, self.topic, self.nsqd.tcp_address)})
        self.assertTrue(all(r.timestamp is not None for r in rows))

    def test_restart_loses_none(self) -> None:
        """A query stopped mid-stream and restarted from its checkpoint loses no message (duplicates are counted)."""
        count = 1000
        self.nsqd.create_channel(self.topic, "spark")
        bodies = [b"r-%05d" % i for i in range(count)]
        self.publish(self.topic, bodies)
        options = self.stream_options(max_messages_per_batch="50")
        checkpoint = os.path.abspath(self.mktemp())
        seen: List[Tuple[str, bytes, int]] = []

        def collect(batch: Any, batch_id: int) -> None:
            seen.extend((r.id, bytes(r.body), batch_id) for r in batch.collect())

        def start() -> Any:
            stream = self.spark.readStream.format("nsq").options(**options).load()
            query = stream.writeStream.foreachBatch(collect).option("checkpointLocation", checkpoint).start()
            self.addCleanup(query.stop)
            return query

        first = start()
        wait_until(lambda: len(seen) >= 200, TIMEOUT, "200 rows before the stop", 0.2)
        first.stop()
        before = len(seen)
        self.assertLess(before, count)
        second = start()
        wait_until(lambda: {b for _, b, _ in seen} >= set(bodies), TIMEOUT, "every message after the restart", 0.5)
        second.stop()
        self.assertEqual({b for _, b, _ in seen}, set(bodies))
        duplicates = len(seen) - len({i for i, _, _ in seen})
        # Duplicates are allowed (at least once); report them.
        print("\nrestart: %d rows before the stop, %d rows in all, %d duplicates" % (before, len(seen), duplicates))
        self.assertEqual(len({i for i, _, _ in seen}), count)

    def test_idle_stream_redelivers_nothing(self) -> None:
        """Once a stream goes idle its last batch is FINed: for longer than nsqd's --max-msg-timeout nothing times out and nothing is delivered again."""
        count = 300
        nsqd = shared_nsqd("short-timeouts", "--msg-timeout=2s", "--max-msg-timeout=10s")
        nsqd.create_channel(self.topic, "spark")
        bodies = [b"idle-%05d" % i for i in range(count)]
        seen: List[bytes] = []

        def collect(batch: Any, batch_id: int) -> None:
            seen.extend(bytes(r.body) for r in batch.collect())

        def publish(messages: List[bytes]) -> None:
            conn = BlockingConnection(nsqd.tcp_address)
            conn.mpublish(self.topic, messages)
            conn.close()

        options = self.stream_options(nsqd_tcp_addresses=nsqd.tcp_address)
        stream = self.spark.readStream.format("nsq").options(**options).load()
        query = stream.writeStream.foreachBatch(collect).option("checkpointLocation", os.path.abspath(self.mktemp())).start()
        self.addCleanup(query.stop)
        # A first batch starts Spark's Python workers, which can take
        # longer than --max-msg-timeout on a loaded machine: warm up.
        publish([b"warm-up"])
        wait_until(lambda: b"warm-up" in seen, TIMEOUT, "the warm-up message", 0.1)
        publish(bodies)

        def idle() -> Any:
            stats = nsqd.channel_stats(self.topic, "spark")
            if set(bodies) <= set(seen) and stats["in_flight_count"] == 0 and stats["depth"] == 0:
                return stats
            return None

        before = wait_until(idle, TIMEOUT, "every message, and the last batch FINed", 0.1)
        rows = len(seen)
        # Outlive --max-msg-timeout: a batch still in flight would have
        # timed out and been delivered again by now.
        time.sleep(12.0)
        after = nsqd.channel_stats(self.topic, "spark")
        self.assertTrue(query.isActive)
        query.stop()
        self.assertEqual(
            (after["depth"], after["in_flight_count"], after["timeout_count"], after["requeue_count"]),
            (0, 0, before["timeout_count"], before["requeue_count"]),
        )
        self.assertEqual(len(seen), rows)
        # Warm batches take well under 10 s: each message came once (the
        # warm-up message may have come twice, if the first batch was slow).
        self.assertEqual(sorted(b for b in seen if b != b"warm-up"), bodies)

    def test_bad_options(self) -> None:
        """A stream without spool_path, or with no reachable nsqd, fails naming the problem."""
        options = self.stream_options()
        del options["spool_path"]
        text = self.error_text(lambda: self.spark.readStream.format("nsq").options(**options).load().writeStream.format("memory").queryName("bad_" + self.topic).start().processAllAvailable())
        self.assertIn("spool_path", text)
        address = _free_address()
        options = self.stream_options(nsqd_tcp_addresses=address, connect_timeout="1")
        query = (
            self.spark.readStream.format("nsq").options(**options).load()
            .writeStream.format("memory").queryName("unreachable_" + self.topic)
            .option("checkpointLocation", os.path.abspath(self.mktemp())).start()
        )
        self.addCleanup(query.stop)
        text = self.error_text(query.awaitTermination, TIMEOUT)
        self.assertIn(address, text)


class BatchSourceTests(_SparkCase):
    """read.format("nsq")."""

    def test_drains_channel(self) -> None:
        """A batch read returns every queued message and FINs them: the channel is then empty."""
        count = 700
        self.nsqd.create_channel(self.topic, "batch")
        bodies = [b"b-%05d" % i for i in range(count)]
        self.publish(self.topic, bodies)
        df = (
            self.spark.read.format("nsq")
            .option("nsqd_tcp_addresses", self.nsqd.tcp_address)
            .option("topic", self.topic)
            .option("channel", "batch")
            .option("drain_timeout", "1")
            .load()
        )
        self.assertEqual(
            [(f.name, f.dataType.typeName()) for f in df.schema.fields],
            [("id", "string"), ("timestamp", "timestamp"), ("attempts", "integer"), ("topic", "string"), ("nsqd", "string"), ("body", "binary")],
        )
        rows = df.collect()
        self.assertEqual(sorted(bytes(r.body) for r in rows), bodies)
        stats = wait_until(
            lambda: (lambda s: s if s["in_flight_count"] == 0 else None)(self.nsqd.channel_stats(self.topic, "batch")),
            30,
            "FINs",
        )
        self.assertEqual((stats["depth"], stats["requeue_count"]), (0, 0))

    def test_max_messages(self) -> None:
        """max_messages bounds a batch read; the rest stays in the channel."""
        self.nsqd.create_channel(self.topic, "batch")
        self.publish(self.topic, [b"m%d" % i for i in range(50)])
        df = (
            self.spark.read.format("nsq")
            .options(nsqd_tcp_addresses=self.nsqd.tcp_address, topic=self.topic, channel="batch", max_messages="20", drain_timeout="1")
            .load()
        )
        self.assertEqual(len(df.collect()), 20)
        wait_until(lambda: self.nsqd.channel_stats(self.topic, "batch")["depth"] == 30, 30, "30 left")

    def test_failed_task_loses_nothing(self) -> None:
        """A task that fails while its rows are being read FINs nothing: every message is requeued and read again."""
        count = 2500
        self.nsqd.create_channel(self.topic, "batch")
        filler = b"x" * 16000
        bodies = [b"%05d " % i + filler for i in range(count)]
        # 40 MB: far more than the pipes between the Python worker and
        # the JVM hold, so the failure comes while the read goes on.
        bodies[50] = b"FAIL " + filler
        conn = BlockingConnection(self.nsqd.tcp_address)
        for start in range(0, count, 100):
            conn.mpublish(self.topic, bodies[start : start + 100])
        conn.close()
        options = dict(
            nsqd_tcp_addresses=self.nsqd.tcp_address, topic=self.topic, channel="batch", drain_timeout="1", max_messages=str(count)
        )
        failing = (
            self.spark.read.format("nsq").options(**options).load()
            .selectExpr("if(substring(body, 1, 4) = X'4641494C', raise_error('mid-read failure'), length(body)) as n")
        )
        self.assertIn("mid-read failure", self.error_text(failing.collect))
        stats = wait_until(
            lambda: (lambda s: s if s["in_flight_count"] == 0 and s["depth"] == count else None)(
                self.nsqd.channel_stats(self.topic, "batch")
            ),
            60,
            "every message requeued",
        )
        self.assertEqual(stats["requeue_count"] + stats["timeout_count"], count)
        rows = self.spark.read.format("nsq").options(**options).load().select("body", "attempts").collect()
        self.assertEqual(sorted(bytes(r.body) for r in rows), sorted(bodies))
        self.assertEqual({r.attempts for r in rows}, {2})
        wait_until(lambda: self.nsqd.channel_stats(self.topic, "batch")["depth"] == 0, 30, "the FINs")

    def test_bad_options(self) -> None:
        """Missing options and unreachable nsqds are reported by name."""
        text = self.error_text(lambda: self.spark.read.format("nsq").option("topic", "t").option("channel", "c").load().collect())
        self.assertIn("nsqd_tcp_addresses", text)
        address = _free_address()
        reader = self.spark.read.format("nsq").options(nsqd_tcp_addresses=address, topic="t", channel="c", connect_timeout="1")
        self.assertIn(address, self.error_text(lambda: reader.load().collect()))


class SinkTests(_SparkCase):
    """write.format("nsq") and writeStream.format("nsq")."""

    def test_batch_sink(self) -> None:
        """A DataFrame of N rows is published; a consumer receives all N."""
        count = 2000
        self.nsqd.create_channel(self.topic, "check")
        df = self.spark.range(count).selectExpr("concat('row-', cast(id as string)) as body").repartition(3)
        df.write.format("nsq").option("nsqd_tcp_addresses", self.nsqd.tcp_address).option("topic", self.topic).option("max_body_size", "20000").mode("append").save()
        received = self.drained(self.topic, "check")
        self.assertEqual(sorted(received.values()), sorted(b"row-%d" % i for i in range(count)))

    def test_topic_column(self) -> None:
        """Without a topic option each row's topic column routes it."""
        other = unique_topic("spark")
        self.nsqd.create_channel(self.topic, "check")
        self.nsqd.create_channel(other, "check")
        df = self.spark.createDataFrame([(self.topic, b"a"), (other, b"b"), (self.topic, b"c")], "topic string, body binary")
        df.write.format("nsq").option("nsqd_tcp_addresses", self.nsqd.tcp_address).mode("append").save()
        self.assertEqual(sorted(self.drained(self.topic, "check").values()), [b"a", b"c"])
        self.assertEqual(list(self.drained(other, "check").values()), [b"b"])

    def test_bad_input(self) -> None:
        """A body that is not binary or string, no body, or an oversized row is refused with a clear error."""
        writer = lambda df: df.write.format("nsq").option("nsqd_tcp_addresses", self.nsqd.tcp_address).option("topic", self.topic).mode("append").save()  # noqa: E731
        self.assertIn("'body' must be binary or string, not integer", self.error_text(writer, self.spark.range(3).selectExpr("cast(id as int) as body")))
        self.assertIn("needs a 'body' column", self.error_text(writer, self.spark.range(3)))
        big = self.spark.createDataFrame([("x" * 200,)], "body string")
        text = self.error_text(lambda: big.write.format("nsq").options(nsqd_tcp_addresses=self.nsqd.tcp_address, topic=self.topic, max_msg_size="100").mode("append").save())
        self.assertIn("row 0", text)
        self.assertIn("max_msg_size 100", text)

    def test_streaming_sink(self) -> None:
        """A stream from one topic written to another delivers every message."""
        count = 300
        out = unique_topic("spark")
        self.nsqd.create_channel(self.topic, "spark")
        self.nsqd.create_channel(out, "check")
        self.publish(self.topic, [b"s-%d" % i for i in range(count)])
        stream = self.spark.readStream.format("nsq").options(**self.stream_options()).load()
        query = (
            stream.selectExpr("upper(cast(body as string)) as body")
            .writeStream.format("nsq")
            .option("nsqd_tcp_addresses", self.nsqd.tcp_address)
            .option("topic", out)
            .option("checkpointLocation", os.path.abspath(self.mktemp()))
            .start()
        )
        self.addCleanup(query.stop)
        received: Dict[str, bytes] = {}
        wait_until(lambda: received.update(self.drained(out, "check")) or len(received) >= count, TIMEOUT, "the output", 0.5)
        query.stop()
        self.assertEqual(sorted(received.values()), sorted(b"S-%d" % i for i in range(count)))


class StreamReaderRecoveryTests(SynchronousTestCase):
    """NSQStreamReader driven as Spark's driver drives it, without the engine."""

    def setUp(self) -> None:
        self.nsqd = shared_nsqd()
        self.topic = unique_topic("recover")
        self.nsqd.create_channel(self.topic, "spark")
        self.options = {
            "nsqd_tcp_addresses": self.nsqd.tcp_address,
            "topic": self.topic,
            "channel": "spark",
            "spool_path": os.path.abspath(self.mktemp()),
            "batch_timeout": "0.3",
        }

    def reader(self) -> Any:
        from txnsq.spark.datasource import NSQStreamReader

        reader = NSQStreamReader(SourceOptions.parse(self.options, True))
        self.addCleanup(reader.stop)
        return reader

    def rows(self, reader: Any, start: dict, end: dict) -> List[Tuple[Any, ...]]:
        return [row for part in reader.partitions(start, end) for row in reader.read(part)]

    def test_replay_after_restart(self) -> None:
        """A batch planned but not committed is re-read from the spool with the same rows after a restart; commit FINs."""
        conn = BlockingConnection(self.nsqd.tcp_address)
        conn.mpublish(self.topic, [b"a", b"b", b"c"])
        conn.close()
        first = self.reader()
        start = first.initialOffset()
        end = wait_until(lambda: (lambda e: e if e != start else None)(first.latestOffset(start, None)), 20, "a batch")
        self.assertEqual(end, {"batch": 1})
        rows = self.rows(first, start, end)
        self.assertEqual(sorted(r[5] for r in rows), [b"a", b"b", b"c"])
        first.stop()

        second = self.reader()
        self.assertEqual(self.rows(second, start, end), rows)
        # The driver that died had not FINed: nsqd delivers them again.
        again = wait_until(lambda: (lambda e: e if e != end else None)(second.latestOffset(end, None)), 20, "the redelivery")
        self.assertEqual(again, {"batch": 2})
        redelivered = self.rows(second, end, again)
        self.assertEqual(sorted((r[0], r[2]) for r in redelivered), sorted((r[0], 2) for r in rows))
        second.commit(again)
        self.assertEqual(second.spool.batches(), [])
        wait_until(lambda: self.nsqd.channel_stats(self.topic, "spark")["in_flight_count"] == 0, 20, "the FINs")

    def test_next_offset_fins_last_batch(self) -> None:
        """Asking for the offset after batch N (as Spark does once N is committed) FINs N's messages and deletes its spool file, with no commit() call."""
        conn = BlockingConnection(self.nsqd.tcp_address)
        conn.mpublish(self.topic, [b"a", b"b"])
        conn.close()
        reader = self.reader()
        start = reader.initialOffset()
        end = wait_until(lambda: (lambda e: e if e != start else None)(reader.latestOffset(start, None)), 20, "a batch")
        self.assertEqual(len(self.rows(reader, start, end)), 2)
        self.assertEqual(self.nsqd.channel_stats(self.topic, "spark")["in_flight_count"], 2)
        # No new message: the offset stays, and the batch is finished.
        self.assertEqual(reader.latestOffset(end, None), end)
        self.assertEqual(reader.spool.batches(), [])
        wait_until(lambda: self.nsqd.channel_stats(self.topic, "spark")["in_flight_count"] == 0, 20, "the FINs")
        reader.commit(end)
        stats = self.nsqd.channel_stats(self.topic, "spark")
        self.assertEqual((stats["depth"], stats["requeue_count"], stats["timeout_count"]), (0, 0, 0))

    def test_no_start_offset(self) -> None:
        """Called without a start offset (Spark before 4.2), numbering continues from the spool's last batch."""
        reader = self.reader()
        reader.spool.set_last_batch(7)
        self.assertEqual(reader.latestOffset(), {"batch": 7})
        conn = BlockingConnection(self.nsqd.tcp_address)
        conn.publish(self.topic, b"x")
        conn.close()
        end = wait_until(lambda: (lambda e: e if e != {"batch": 7} else None)(reader.latestOffset()), 20, "a batch")
        self.assertEqual(end, {"batch": 8})
        self.assertEqual([r[5] for r in self.rows(reader, {"batch": 7}, end)], [b"x"])
