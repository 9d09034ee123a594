#!/usr/bin/env python3
"""
Measure the sustained rate of the ``nsq`` streaming source: publish
``--count`` messages, then run a Structured Streaming query that reads them
into Spark's ``noop`` sink, and report messages per second.

    python examples/stream_rate.py --count 100000 --max-messages-per-batch 1250
    python examples/stream_rate.py --count 200000 --max-messages-per-batch 10000 --max-rdy-count 20000

Without ``--nsqd-tcp-address`` it starts a txnsq nsqd of its own on a free
loopback port.  Two rates are printed: over the wall-clock time from the
first micro-batch to the last, and over the micro-batches' own durations.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.request
from typing import Optional, Sequence, Tuple


def start_nsqd(data_path: str, max_rdy_count: int) -> Tuple[subprocess.Popen, str, str]:
    """A txnsq nsqd on loopback ports; (process, tcp address, http address)."""
    os.makedirs(data_path, exist_ok=True)
    script = os.path.join(os.path.dirname(sys.executable), "nsqd")
    command = [script] if os.path.exists(script) else [sys.executable, "-m", "txnsq.nsqd"]
    process = subprocess.Popen(
        command + ["--tcp-address=127.0.0.1:0", "--http-address=127.0.0.1:0", "--data-path=" + data_path,
                   "--mem-queue-size=1000000", "--max-rdy-count=%d" % (max_rdy_count,)],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        env=dict(os.environ, PYTHONUNBUFFERED="1"),
    )
    ports = {}
    assert process.stdout is not None
    for raw in process.stdout:
        match = re.search(r"(TCP|HTTP): listening on (\S+):([0-9]+)", raw.decode("utf-8", "replace"))
        if match:
            ports[match.group(1)] = "%s:%s" % (match.group(2), match.group(3))
            if len(ports) == 2:
                break
    if len(ports) != 2:
        raise SystemExit("nsqd did not start")
    return process, ports["TCP"], ports["HTTP"]


def main(argv: Optional[Sequence[str]] = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--nsqd-tcp-address", default=None)
    parser.add_argument("--nsqd-http-address", default=None, help="needed with --nsqd-tcp-address")
    parser.add_argument("--count", type=int, default=200000)
    parser.add_argument("--size", type=int, default=100, help="body bytes")
    parser.add_argument("--max-messages-per-batch", default="1250")
    parser.add_argument("--master", default="local[2]")
    parser.add_argument(
        "--max-rdy-count", type=int, default=2500,
        help="--max-rdy-count of the nsqd started here; a batch has at most half of it",
    )
    args = parser.parse_args(argv)

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    import txnsq.spark
    from txnsq.spark.blocking import BlockingConnection

    work = tempfile.mkdtemp(prefix="nsq-rate-")
    process = None
    try:
        if args.nsqd_tcp_address:
            tcp, http = args.nsqd_tcp_address, args.nsqd_http_address
        else:
            process, tcp, http = start_nsqd(os.path.join(work, "nsqd"), args.max_rdy_count)
        topic = "rate_%d" % (int(time.time()),)
        for path in ("/topic/create?topic=%s" % topic, "/channel/create?topic=%s&channel=spark" % topic):
            urllib.request.urlopen(urllib.request.Request("http://%s%s" % (http, path), data=b"", method="POST")).read()
        conn = BlockingConnection(tcp)
        body = b"x" * args.size
        published = time.monotonic()
        for first in range(0, args.count, 1000):
            conn.mpublish(topic, [body] * min(1000, args.count - first))
        conn.close()
        print("published %d messages in %.1fs" % (args.count, time.monotonic() - published))

        spark = (
            SparkSession.builder.master(args.master)
            .config("spark.ui.enabled", "false")
            .config("spark.ui.showConsoleProgress", "false")
            .config("spark.sql.shuffle.partitions", "2")
            .getOrCreate()
        )
        spark.sparkContext.setLogLevel("ERROR")
        txnsq.spark.register(spark)
        stream = (
            spark.readStream.format("nsq")
            .option("nsqd_tcp_addresses", tcp)
            .option("topic", topic)
            .option("channel", "spark")
            .option("spool_path", os.path.join(work, "spool"))
            .option("max_messages_per_batch", args.max_messages_per_batch)
            .option("batch_timeout", "0.5")
            .load()
        )
        query = stream.writeStream.format("noop").option("checkpointLocation", os.path.join(work, "checkpoint")).start()
        seen = 0
        while seen < args.count:
            time.sleep(0.5)
            progress = query.recentProgress
            seen = sum(p["numInputRows"] for p in progress)
            if query.exception() is not None:
                raise SystemExit(str(query.exception()))
        progress = [p for p in query.recentProgress if p["numInputRows"] > 0]
        query.stop()
        # recentProgress keeps the last 100 batches by default.
        rows = sum(p["numInputRows"] for p in progress)
        busy = sum(p["durationMs"]["triggerExecution"] for p in progress) / 1000.0
        from datetime import datetime

        def stamp(p: dict) -> float:
            return datetime.strptime(p["timestamp"], "%Y-%m-%dT%H:%M:%S.%fZ").timestamp()

        wall = stamp(progress[-1]) + progress[-1]["durationMs"]["triggerExecution"] / 1000.0 - stamp(progress[0])
        print(
            "streamed %d messages in %d micro-batches: %.0f msg/s over %.1fs wall clock, %.0f msg/s over the batches' own %.1fs"
            % (rows, len(progress), rows / wall, wall, rows / busy, busy)
        )
        spark.stop()
    finally:
        if process is not None:
            process.terminate()
            process.wait(10)
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
