"""
The example pipeline of ``examples/`` on small data: per-page per-minute
counts from the streaming job over a retained topic (Parquet and the
idempotent output topic), from its replay of a time range (in this process
and under ``spark-submit``) and from the batch job over ``nsq_to_file``'s
files, checked against counts computed in plain Python.
"""

from __future__ import annotations

import glob
import importlib.util
import json
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from types import ModuleType
from typing import Any, Dict, Tuple

from twisted.trial.unittest import SynchronousTestCase

from tests.integration.nsqd_process import daemon_command
from tests_spark.nsqd import shared_nsqd, unique_topic, wait_until
from tests_spark.spark import spark_session
from tests_spark.test_offsets import metaq_address, metaq_nsqd

TIMEOUT = 240.0
_EXAMPLES = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "examples")
#: A minute boundary (2026-11-19 07:20 UTC), so the windows are whole.
START_MS = 1_795_000_000_000 // 60_000 * 60_000


def _example(name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location("example_" + name, os.path.join(_EXAMPLES, name + ".py"))
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _expected(events: Any) -> Dict[Tuple[int, str], int]:
    """Page views per (minute start in ms, page), in plain Python."""
    return dict(Counter((e["ts"] // 60_000 * 60_000, e["page"]) for e in events))


class ClickPipelineTests(SynchronousTestCase):
    """examples/clickstream_publisher.py, clicks_per_minute.py and nsq_to_file_batch.py."""

    def setUp(self) -> None:
        self.spark = spark_session()
        self.nsqd = shared_nsqd()
        self.publisher = _example("clickstream_publisher")

    def test_streaming_counts(self) -> None:
        """The streaming job over the retained topic: per-minute counts in Parquet and on the (idempotent) output topic are the plain-Python counts."""
        job = _example("clicks_per_minute")
        topic, out = unique_topic("off_clicks"), unique_topic("off_counts")
        nsqd = metaq_nsqd()
        metaq = metaq_address(nsqd)
        nsqd.http("POST", "/topic/create?topic=%s" % (out,), b"")
        events = self.publisher.make_events(600, START_MS, span_minutes=5, seed=7)
        expected = _expected(events)
        parquet = os.path.abspath(self.mktemp())
        source = {"topic": topic, "metaq_addresses": metaq, "starting_offsets": "earliest"}
        self.publisher.publish(nsqd.tcp_address, topic, events)
        query = job.start(
            self.spark, source, out, parquet, os.path.abspath(self.mktemp()), trigger="300 milliseconds", idempotent=True
        )
        self.addCleanup(query.stop)
        # An event half an hour later moves the watermark past every minute above.
        late = {"page": "/", "user": "u0", "ts": START_MS + 30 * 60_000}
        self.publisher.publish(nsqd.tcp_address, topic, [late])

        def written() -> int:
            if not glob.glob(os.path.join(parquet, "batch_id=*", "*.parquet")):
                return 0
            try:
                return int(self.spark.read.parquet(parquet).agg({"count": "sum"}).collect()[0][0] or 0)
            except Exception:
                # A batch directory being written as it was listed.
                return 0

        def published() -> list:
            reader = self.spark.read.format("nsq").option("topic", out).option("metaq_addresses", metaq)
            return [json.loads(r.body) for r in reader.load().collect()]

        wait_until(lambda: written() >= len(events), TIMEOUT, "the counts in Parquet", 1.0)
        # The batch writes Parquet, then publishes.
        wait_until(lambda: len(published()) >= len(expected), TIMEOUT, "the counts on the output topic", 1.0)
        query.stop()
        rows = self.spark.read.parquet(parquet).collect()
        self.assertEqual({(r.minute_ms, r.page): r["count"] for r in rows}, expected)
        self.assertEqual(len(rows), len(expected))
        found = published()
        self.assertEqual({(p["minute_ms"], p["page"]): p["count"] for p in found}, expected)
        self.assertEqual(len(found), len(expected))

    def _replay_data(self) -> Tuple[Any, str, Dict[Tuple[int, str], int], str, str]:
        """Three publishes to a retained topic; the middle one's counts and the times around it."""
        nsqd = metaq_nsqd()
        topic = unique_topic("off_replay")
        self.publisher.publish(nsqd.tcp_address, topic, self.publisher.make_events(100, START_MS, span_minutes=2, seed=1))
        time.sleep(0.05)
        start = "%d" % (time.time() * 1000,)
        time.sleep(0.05)
        middle = self.publisher.make_events(300, START_MS, span_minutes=3, seed=2)
        self.publisher.publish(nsqd.tcp_address, topic, middle)
        time.sleep(0.05)
        end = "%d" % (time.time() * 1000,)
        time.sleep(0.05)
        self.publisher.publish(nsqd.tcp_address, topic, self.publisher.make_events(50, START_MS, span_minutes=2, seed=3))
        return nsqd, topic, _expected(middle), start, end

    def test_replay(self) -> None:
        """Replaying from a timestamp to another counts exactly the events published between them."""
        job = _example("clicks_per_minute")
        nsqd, topic, expected, start, end = self._replay_data()
        source = {"topic": topic, "nsqd_http_addresses": nsqd.http_address}
        rows = job.replay(self.spark, source, start, end).collect()
        self.assertEqual({(r.minute_ms, r.page): r["count"] for r in rows}, expected)

    def test_spark_submit(self) -> None:
        """spark-submit --master local[2] of the example's replay writes the plain-Python counts to Parquet."""
        nsqd, topic, expected, start, end = self._replay_data()
        output = os.path.abspath(self.mktemp())
        submit = os.path.join(os.path.dirname(sys.executable), "spark-submit")
        env = dict(os.environ, PYSPARK_PYTHON=sys.executable, PYSPARK_DRIVER_PYTHON=sys.executable)
        done = subprocess.run(
            [
                submit,
                "--master",
                "local[2]",
                "--conf",
                "spark.ui.enabled=false",
                "--conf",
                "spark.driver.host=127.0.0.1",
                os.path.join(_EXAMPLES, "clicks_per_minute.py"),
                "--nsqd-http-address",
                nsqd.http_address,
                "--topic",
                topic,
                "--replay-from",
                start,
                "--replay-to",
                end,
                "--parquet",
                output,
            ],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            timeout=TIMEOUT,
        )
        self.assertEqual(done.returncode, 0, done.stdout[-4000:].decode("utf-8", "replace"))
        rows = self.spark.read.parquet(output).collect()
        self.assertEqual({(r.minute_ms, r.page): r["count"] for r in rows}, expected)

    def test_batch_over_nsq_to_file(self) -> None:
        """The batch job over nsq_to_file's gzipped files counts the same as plain Python."""
        job = _example("nsq_to_file_batch")
        topic = unique_topic("archive")
        self.nsqd.create_channel(topic, "nsq_to_file")
        events = self.publisher.make_events(400, START_MS, span_minutes=3, seed=11)
        self.publisher.publish(self.nsqd.tcp_address, topic, events)
        output = os.path.abspath(self.mktemp())
        os.makedirs(output)
        archiver = subprocess.Popen(
            daemon_command("nsq_to_file")
            + [
                "--nsqd-tcp-address=" + self.nsqd.tcp_address,
                "--topic=" + topic,
                "--output-dir=" + output,
                "--gzip",
                "--sync-interval=200ms",
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        self.addCleanup(lambda: archiver.poll() is None and archiver.kill())

        def archived() -> bool:
            stats = self.nsqd.channel_stats(topic, "nsq_to_file")
            return stats.get("depth") == 0 and stats.get("in_flight_count") == 0

        wait_until(archived, 60, "nsq_to_file to write and FIN every message", 0.2)
        archiver.send_signal(signal.SIGTERM)
        self.assertEqual(archiver.wait(30), 0)
        self.assertTrue(glob.glob(os.path.join(output, "*.gz")))
        rows = job.minute_counts_from_files(self.spark, output).collect()
        self.assertEqual({(r.minute_ms, r.page): r["count"] for r in rows}, _expected(events))
