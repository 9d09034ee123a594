#!/usr/bin/env python3
"""
The ``nsq`` Spark source on a retained topic (offset mode) against the
channel source, on one machine, ``local[2]``, 100-byte bodies:

1. ``available-now``: ``--count`` messages (default 1,000,000) already
   published to a retained topic; a streaming query with
   ``Trigger.AvailableNow`` counts them (``foreachBatch``, ``df.count()``).
   Timed from ``writeStream.start()`` to the end of ``awaitTermination()``
   (end to end: the source's planning, the executors' MetaQ reads and
   Arrow batches, Spark's count and its commit), in a Spark session that
   ran the query once before (the JVM and the Python workers started).
2. ``live``: a query (default trigger: the next batch as soon as one
   ends) counting a retained topic while a publisher process MPUBs
   ``--live-rate`` messages/s for ``--live-seconds``; reports the rate
   published, the rate counted, each batch's duration (median and 95th
   percentile of ``triggerExecution``) and how long the query took to
   catch up once publishing stopped.
3. ``channel``: the channel source (the mode for topics that are not
   retained) streaming ``--channel-count`` messages into the same count,
   with the defaults (``max_messages_per_batch`` 1250 under nsqd's
   ``--max-rdy-count`` 2500) and tuned (10,000 per batch, nsqd's
   ``--max-rdy-count`` 20,000; that nsqd keeps the channel in memory,
   ``--mem-queue-size=1000000``, as ``examples/stream_rate.py`` does).

Each figure is the median of ``--rounds`` runs (3).  The nsqds are child
processes started here (``--metaq-address``, ``--log-partitions``).  Each
run prints Spark's ``durationMs`` of its micro-batches (AvailableNow: every
batch's; live: the medians), which tell the query's fixed costs
(``walCommit``, ``commitOffsets``, ``queryPlanning``) from the read and the
count (``addBatch``).  ``--conf KEY=VALUE`` adds a Spark conf to the session.

    python bench/system/spark_offsets.py
    python bench/system/spark_offsets.py --only available-now --count 1000000
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from datetime import datetime, timezone
from typing import Any, Dict, List, Optional, Sequence, Tuple

BODY = b"x" * 100

_PUBLISHER = r"""
import sys, time
from txnsq.spark.blocking import BlockingConnection
address, topic, rate, seconds, batch = sys.argv[1], sys.argv[2], float(sys.argv[3]), float(sys.argv[4]), int(sys.argv[5])
conn = BlockingConnection(address)
bodies = [b"x" * 100] * batch
started = time.monotonic()
sent = 0
while time.monotonic() - started < seconds:
    conn.mpublish(topic, bodies)
    sent += batch
    ahead = sent / rate - (time.monotonic() - started)
    if ahead > 0:
        time.sleep(ahead)
print("%d %.3f" % (sent, time.monotonic() - started), flush=True)
conn.close()
"""


class NSQD:
    """A txnsq nsqd child process with a MetaQ listener."""

    def __init__(self, data_path: str, *flags: str, python: str = sys.executable) -> None:
        os.makedirs(data_path, exist_ok=True)
        script = os.path.join(os.path.dirname(python), "nsqd")
        command = [script] if os.path.exists(script) else [python, "-m", "txnsq.nsqd"]
        self.process = subprocess.Popen(
            command
            + [
                "--tcp-address=127.0.0.1:0",
                "--http-address=127.0.0.1:0",
                "--metaq-address=127.0.0.1:0",
                "--data-path=" + data_path,
            ]
            + list(flags),
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            env=dict(os.environ, PYTHONUNBUFFERED="1"),
        )
        ports: Dict[str, str] = {}
        assert self.process.stdout is not None
        for raw in self.process.stdout:
            match = re.search(r"(TCP|HTTP): listening on (\S+):([0-9]+)", raw.decode("utf-8", "replace"))
            if match:
                ports[match.group(1)] = "%s:%s" % (match.group(2), match.group(3))
                if len(ports) == 2:
                    break
        if len(ports) != 2:
            raise SystemExit("nsqd did not start")
        # Keep reading its output so that it never blocks on a full pipe.
        import threading

        threading.Thread(target=lambda: [None for _ in self.process.stdout or ()], daemon=True).start()
        self.tcp, self.http = ports["TCP"], ports["HTTP"]
        info = json.loads(urllib.request.urlopen("http://%s/info" % (self.http,)).read())
        self.metaq = "127.0.0.1:%d" % (info["metaq_port"],)

    def post(self, path: str) -> None:
        urllib.request.urlopen(urllib.request.Request("http://%s%s" % (self.http, path), data=b"", method="POST")).read()

    def publish(self, topic: str, count: int, batch: int = 2000) -> float:
        from txnsq.spark.blocking import BlockingConnection

        conn = BlockingConnection(self.tcp)
        started = time.monotonic()
        try:
            for first in range(0, count, batch):
                conn.mpublish(topic, [BODY] * min(batch, count - first))
        finally:
            conn.close()
        return time.monotonic() - started

    def stop(self) -> None:
        self.process.terminate()
        self.process.wait(30)


def _stamp(progress: Dict[str, Any]) -> float:
    return datetime.strptime(progress["timestamp"], "%Y-%m-%dT%H:%M:%S.%fZ").replace(tzinfo=timezone.utc).timestamp()


def available_now(spark: Any, nsqd: NSQD, topic: str, count: int, work: str, run: int) -> Tuple[float, Dict[str, Any]]:
    """One AvailableNow count of the whole topic: (seconds, details)."""
    counted = [0]

    def count_batch(df: Any, batch_id: int) -> None:
        counted[0] += df.count()

    started = time.monotonic()
    query = (
        spark.readStream.format("nsq")
        .option("topic", topic)
        .option("metaq_addresses", nsqd.metaq)
        .option("starting_offsets", "earliest")
        .load()
        .writeStream.foreachBatch(count_batch)
        .option("checkpointLocation", os.path.join(work, "available-now-%d" % (run,)))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination()
    seconds = time.monotonic() - started
    if counted[0] != count:
        raise SystemExit("counted %d of %d" % (counted[0], count))
    progress = query.recentProgress
    first = _stamp(progress[0]) if progress else 0.0
    return seconds, {
        "batches": len(progress),
        "duration_ms": [p["durationMs"] for p in progress],
        "before_first_batch_s": round(first - (time.time() - seconds), 2) if progress else None,
    }


def live(
    spark: Any,
    nsqd: NSQD,
    topic: str,
    rate: float,
    seconds: float,
    work: str,
    run: int,
    publisher_python: str = sys.executable,
    publish_batch: int = 1000,
) -> Dict[str, Any]:
    """A live query counting while a publisher process runs."""
    counted = [0]

    def count_batch(df: Any, batch_id: int) -> None:
        counted[0] += df.count()

    query = (
        spark.readStream.format("nsq")
        .option("topic", topic)
        .option("metaq_addresses", nsqd.metaq)
        .option("starting_offsets", "latest")
        .load()
        .writeStream.foreachBatch(count_batch)
        .option("checkpointLocation", os.path.join(work, "live-%d" % (run,)))
        .start()
    )
    while query.lastProgress is None:
        time.sleep(0.1)
    before = counted[0]
    publisher = subprocess.Popen(
        [publisher_python, "-c", _PUBLISHER, nsqd.tcp, topic, str(rate), str(seconds), str(publish_batch)],
        stdout=subprocess.PIPE,
        cwd=os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))),
    )
    started = time.monotonic()
    out, _ = publisher.communicate()
    published_at = time.monotonic()
    sent, publish_seconds = out.split()
    sent_count = int(sent)
    while counted[0] - before < sent_count:
        if query.exception() is not None:
            raise SystemExit(str(query.exception()))
        time.sleep(0.05)
    caught_up = time.monotonic()
    progress = [p for p in query.recentProgress if p["numInputRows"] > 0]
    query.stop()
    durations = sorted(p["durationMs"]["triggerExecution"] for p in progress)
    parts = sorted({key for p in progress for key in p["durationMs"]})
    breakdown = {key: statistics.median(p["durationMs"].get(key, 0) for p in progress) for key in parts}
    return {
        "published_per_s": sent_count / float(publish_seconds),
        "counted_per_s": sent_count / (caught_up - started),
        "catch_up_after_publish_s": caught_up - published_at,
        "batches": len(progress),
        "batch_ms_p50": statistics.median(durations),
        "batch_ms_p95": durations[max(0, -(-95 * len(durations) // 100) - 1)],
        "rows_per_batch_p50": statistics.median(p["numInputRows"] for p in progress),
        "duration_ms_p50": breakdown,
    }


def channel(spark: Any, nsqd: NSQD, count: int, per_batch: int, work: str, run: int) -> float:
    """The channel source streaming ``count`` messages: messages/s from start() to the last row."""
    topic = "chan_%d_%d" % (per_batch, run)
    nsqd.post("/topic/create?topic=%s" % (topic,))
    nsqd.post("/channel/create?topic=%s&channel=spark" % (topic,))
    nsqd.publish(topic, count, 1000)
    counted = [0]

    def count_batch(df: Any, batch_id: int) -> None:
        counted[0] += df.count()

    started = time.monotonic()
    query = (
        spark.readStream.format("nsq")
        .option("nsqd_tcp_addresses", nsqd.tcp)
        .option("topic", topic)
        .option("channel", "spark")
        .option("spool_path", os.path.join(work, "spool-%s-%d" % (per_batch, run)))
        .option("max_messages_per_batch", str(per_batch))
        .option("batch_timeout", "0.5")
        .load()
        .writeStream.foreachBatch(count_batch)
        .option("checkpointLocation", os.path.join(work, "channel-%d-%d" % (per_batch, run)))
        .start()
    )
    while counted[0] < count:
        if query.exception() is not None:
            raise SystemExit(str(query.exception()))
        time.sleep(0.05)
    seconds = time.monotonic() - started
    query.stop()
    return count / seconds


def main(argv: Optional[Sequence[str]] = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--count", type=int, default=1_000_000)
    parser.add_argument("--partitions", type=int, default=2, help="--log-partitions of the retained topic")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--live-rate", type=float, default=100_000.0)
    parser.add_argument("--live-seconds", type=float, default=20.0)
    parser.add_argument("--channel-count", type=int, default=50_000)
    parser.add_argument("--only", choices=["available-now", "live", "channel"], action="append")
    parser.add_argument("--publish-batch", type=int, default=1000, help="messages per MPUB of the live publisher")
    parser.add_argument(
        "--conf",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a Spark conf for the session (repeatable), e.g. spark.sql.adaptive.enabled=false",
    )
    parser.add_argument(
        "--publisher-python", default=sys.executable, help="interpreter of the live publisher (e.g. a PyPy venv's)"
    )
    parser.add_argument(
        "--nsqd-python",
        default=sys.executable,
        help="interpreter whose venv's nsqd script runs the nsqd (e.g. a PyPy venv's python)",
    )
    args = parser.parse_args(argv)
    only = set(args.only or ["available-now", "live", "channel"])

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    import txnsq.spark

    work = tempfile.mkdtemp(prefix="spark-offsets-")
    nsqd = NSQD(
        os.path.join(work, "nsqd"),
        "--retain-topics=^(bulk|live)",
        "--log-partitions=%d" % (args.partitions,),
        python=args.nsqd_python,
    )
    report: Dict[str, Any] = {}
    try:
        builder = (
            SparkSession.builder.master("local[2]")
            .config("spark.ui.enabled", "false")
            .config("spark.ui.showConsoleProgress", "false")
            .config("spark.sql.shuffle.partitions", "2")
            .config("spark.driver.host", "127.0.0.1")
        )
        for conf in args.conf:
            key, _, value = conf.partition("=")
            builder = builder.config(key, value)
        spark = builder.getOrCreate()
        spark.sparkContext.setLogLevel("ERROR")
        txnsq.spark.register(spark)
        if "available-now" in only:
            nsqd.post("/topic/create?topic=bulk")
            seconds = nsqd.publish("bulk", args.count)
            print("published %d x 100 B in %.1fs (%.0f msg/s)" % (args.count, seconds, args.count / seconds), flush=True)
            warm, _ = available_now(spark, nsqd, "bulk", args.count, work, 0)
            print("warm-up run (JVM and Python workers starting): %.2fs" % (warm,), flush=True)
            rates = []
            for run in range(1, args.rounds + 1):
                seconds, details = available_now(spark, nsqd, "bulk", args.count, work, run)
                rates.append(args.count / seconds)
                print("AvailableNow run %d: %.2fs, %.0f msg/s %s" % (run, seconds, args.count / seconds, details), flush=True)
            report["available_now_msg_per_s"] = statistics.median(rates)
            report["available_now_cold_s"] = warm
        if "live" in only:
            nsqd.post("/topic/create?topic=live")
            results = []
            for run in range(args.rounds):
                result = live(
                    spark, nsqd, "live", args.live_rate, args.live_seconds, work, run, args.publisher_python, args.publish_batch
                )
                results.append(result)
                print(
                    "live run %d: %s"
                    % (run + 1, {k: v if isinstance(v, dict) else round(v, 2) for k, v in result.items()}),
                    flush=True,
                )
            report["live"] = {
                key: statistics.median(r[key] for r in results) for key in results[0] if not isinstance(results[0][key], dict)
            }
        if "channel" in only:
            # As examples/stream_rate.py: the channel's backlog in memory,
            # nsqd's --max-rdy-count raised for the tuned batches.
            nsqd.stop()
            nsqd = NSQD(
                os.path.join(work, "nsqd-channel"), "--mem-queue-size=1000000", "--max-rdy-count=20000", python=args.nsqd_python
            )
            for per_batch in (1250, 10000):
                rates = [channel(spark, nsqd, args.channel_count, per_batch, work, run) for run in range(args.rounds)]
                print("channel source, %d per batch: %s msg/s" % (per_batch, [round(r) for r in rates]), flush=True)
                report["channel_%d_msg_per_s" % (per_batch,)] = statistics.median(rates)
        report["confs"] = args.conf
        report["load_average"] = os.getloadavg()
        print(json.dumps(report, indent=2))
        spark.stop()
    finally:
        nsqd.stop()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
