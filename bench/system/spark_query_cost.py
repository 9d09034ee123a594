#!/usr/bin/env python3
"""
Where an AvailableNow query of the offset mode spends its CPU: the query of
``bench/system/spark_offsets.py`` (``--count`` messages already published, counted
with ``foreachBatch``), run ``--queries`` times in one session after a
warm-up query, and for each query the CPU seconds of every process by kind
(Linux: ``/proc/<pid>/stat``):

- ``jvm``: Spark's driver and executors (``local[2]``);
- ``py-exec``: the executors' Python workers (reused from query to query);
- ``py-source``: the driver-side Python process Spark starts for each
  query to run the source's offsets and planning (measured from inside it,
  see ``bench/system/spark_cost_sources.py``: it exits with the query);
- ``nsqd``: the nsqd serving the reads;

with Spark's ``durationMs`` of the batch and the time before it started.
``--ready-made`` counts ready-made Arrow batches of the same schema instead
(no nsqd, no reads: Spark's own cost), ``--tasks`` of them.

    python bench/system/spark_query_cost.py
    python bench/system/spark_query_cost.py --ready-made --tasks 2
    python bench/system/spark_query_cost.py --option max_bytes_per_partition=67108864 --conf spark.sql.adaptive.enabled=false
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time
from typing import Any, Dict, List, Optional, Sequence

BENCH = os.path.dirname(os.path.abspath(__file__))


def _children(root: int) -> List[int]:
    """``root`` and every process under it."""
    kids: Dict[int, List[int]] = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open("/proc/%s/stat" % (name,)) as stat:
                parent = int(stat.read().rsplit(")", 1)[1].split()[1])
        except OSError:
            continue
        kids.setdefault(parent, []).append(int(name))
    found = [root]
    for pid in found:
        found.extend(kids.get(pid, []))
    return found


def _kind(command: str) -> str:
    if "java" in command:
        return "jvm"
    if "nsqd" in command:
        return "nsqd"
    if "pyspark.daemon" in command or "pyspark.worker" in command:
        return "py-exec"
    return "other"


def cpu_by_process(root: int) -> Dict[int, Any]:
    """``{pid: (kind, CPU seconds)}`` of the processes under ``root``."""
    tick = os.sysconf("SC_CLK_TCK")
    found = {}
    for pid in _children(root):
        try:
            with open("/proc/%d/stat" % (pid,)) as stat:
                fields = stat.read().rsplit(")", 1)[1].split()
            with open("/proc/%d/cmdline" % (pid,)) as cmdline:
                command = cmdline.read().replace("\0", " ")
        except OSError:
            continue
        found[pid] = (_kind(command), (int(fields[11]) + int(fields[12])) / tick)
    return found


def cpu_spent(before: Dict[int, Any], after: Dict[int, Any]) -> Dict[str, float]:
    spent: Dict[str, float] = {}
    for pid, (kind, seconds) in after.items():
        spent[kind] = spent.get(kind, 0.0) + seconds - before.get(pid, (kind, 0.0))[1]
    return spent


def main(argv: Optional[Sequence[str]] = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--count", type=int, default=1_000_000)
    parser.add_argument("--partitions", type=int, default=2, help="--log-partitions of the retained topic")
    parser.add_argument("--queries", type=int, default=5, help="queries measured (after one warm-up query)")
    parser.add_argument("--ready-made", action="store_true", help="count ready-made Arrow batches (Spark's own cost)")
    parser.add_argument("--tasks", type=int, default=4, help="tasks of --ready-made")
    parser.add_argument("--option", action="append", default=[], metavar="KEY=VALUE", help="a source option")
    parser.add_argument("--conf", action="append", default=[], metavar="KEY=VALUE", help="a Spark conf")
    args = parser.parse_args(argv)

    # Spark's Python processes import the sources' module by name.
    os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (BENCH, os.environ.get("PYTHONPATH")) if p)
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    from spark_cost_sources import CostedSource, ReadyMadeSource
    from spark_offsets import NSQD, _stamp

    work = tempfile.mkdtemp(prefix="spark-cost-")
    log = os.environ["SPARK_COST_LOG"] = os.path.join(work, "source-cpu.log")
    nsqd = NSQD(os.path.join(work, "nsqd"), "--retain-topics=^bulk", "--log-partitions=%d" % (args.partitions,))
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
        spark.dataSource.register(CostedSource)
        spark.dataSource.register(ReadyMadeSource)
        if not args.ready_made:
            nsqd.post("/topic/create?topic=bulk")
            nsqd.publish("bulk", args.count)
        rows: List[Dict[str, Any]] = []
        for query_number in range(args.queries + 1):
            if os.path.exists(log):
                os.remove(log)
            counted = [0]

            def count_batch(df: Any, batch_id: int) -> None:
                counted[0] += df.count()

            before = cpu_by_process(os.getpid())
            started = time.time()
            reader = spark.readStream.format("ready_made" if args.ready_made else "nsq_costed")
            reader = reader.option("topic", "bulk").option("metaq_addresses", nsqd.metaq)
            reader = reader.option("starting_offsets", "earliest")
            reader = reader.option("rows", str(args.count)).option("tasks", str(args.tasks))
            for option in args.option:
                key, _, value = option.partition("=")
                reader = reader.option(key, value)
            query = (
                reader.load()
                .writeStream.foreachBatch(count_batch)
                .option("checkpointLocation", os.path.join(work, "checkpoint-%d" % (query_number,)))
                .trigger(availableNow=True)
                .start()
            )
            query.awaitTermination()
            seconds = time.time() - started
            time.sleep(0.3)  # the executors' last CPU ticks
            spent = cpu_spent(before, cpu_by_process(os.getpid()))
            if counted[0] != args.count:
                raise SystemExit("counted %d of %d" % (counted[0], args.count))
            source = [line.split() for line in open(log)] if os.path.exists(log) else []
            progress = query.recentProgress
            row: Dict[str, Any] = {
                "total_s": round(seconds, 2),
                "before_first_batch_s": round(_stamp(progress[0]) - started, 2) if progress else None,
                "add_batch_ms": progress[0]["durationMs"].get("addBatch") if progress else None,
                "jvm": round(spent.get("jvm", 0.0), 2),
                "py-exec": round(spent.get("py-exec", 0.0), 2),
                "nsqd": round(spent.get("nsqd", 0.0), 2),
                "py-source": float(source[-1][2]) if source else None,
                "load": os.getloadavg()[0],
            }
            print("%s query %d: %s" % ("warm-up" if query_number == 0 else "", query_number, row), flush=True)
            if query_number:
                rows.append(row)
        medians = {
            key: statistics.median(r[key] for r in rows if r[key] is not None)
            for key in rows[0]
            if any(r[key] is not None for r in rows)
        }
        print("medians of %d queries: %s" % (len(rows), medians))
        spark.stop()
    finally:
        nsqd.stop()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
