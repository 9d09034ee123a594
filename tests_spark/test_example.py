"""
The example pipeline of ``examples/`` on small data: per-page per-minute
counts from the streaming job (Parquet and the output topic) and from the
batch job over ``nsq_to_file``'s files, checked against counts computed in
plain Python.
"""

from __future__ import annotations

import glob
import importlib.util
import json
import os
import signal
import subprocess
from collections import Counter
from types import ModuleType
from typing import Any, Dict, Tuple

from twisted.trial.unittest import SynchronousTestCase

from tests.integration.nsqd_process import daemon_command
from tests_spark.nsqd import shared_nsqd, unique_topic, wait_until
from tests_spark.spark import spark_session
from txnsq.spark.consumer import drain
from txnsq.spark.options import SourceOptions

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
        """The streaming job's per-minute counts, in Parquet and on the output topic, are the plain-Python counts."""
        job = _example("clicks_per_minute")
        topic, out = unique_topic("clicks"), unique_topic("counts")
        self.nsqd.create_channel(topic, "pipeline")
        self.nsqd.create_channel(out, "check")
        events = self.publisher.make_events(600, START_MS, span_minutes=5, seed=7)
        expected = _expected(events)
        parquet = os.path.abspath(self.mktemp())
        source = {
            "nsqd_tcp_addresses": self.nsqd.tcp_address,
            "topic": topic,
            "channel": "pipeline",
            "spool_path": os.path.abspath(self.mktemp()),
            "max_messages_per_batch": "200",
            "batch_timeout": "0.3",
        }
        query = job.start(self.spark, source, out, parquet, os.path.abspath(self.mktemp()))
        self.addCleanup(query.stop)
        self.publisher.publish(self.nsqd.tcp_address, topic, events)
        # An event half an hour later moves the watermark past every minute above.
        late = {"page": "/", "user": "u0", "ts": START_MS + 30 * 60_000}
        self.publisher.publish(self.nsqd.tcp_address, topic, [late])

        def written() -> int:
            if not glob.glob(os.path.join(parquet, "batch_id=*", "*.parquet")):
                return 0
            try:
                return int(self.spark.read.parquet(parquet).agg({"count": "sum"}).collect()[0][0] or 0)
            except Exception:
                # A batch directory being written as it was listed.
                return 0

        wait_until(lambda: written() >= len(events), TIMEOUT, "the counts in Parquet", 1.0)
        query.stop()
        rows = self.spark.read.parquet(parquet).collect()
        self.assertEqual({(r.minute_ms, r.page): r["count"] for r in rows}, expected)
        self.assertEqual(len(rows), len(expected))

        options = SourceOptions.parse(
            {"nsqd_tcp_addresses": self.nsqd.tcp_address, "topic": out, "channel": "check", "drain_timeout": "1"}, False
        )
        published = [json.loads(m.body) for m in drain(self.nsqd.tcp_address, options, 2500)]
        self.assertEqual({(p["minute_ms"], p["page"]): p["count"] for p in published}, expected)

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
