"""
Streaming queries over a retained topic, in their own driver process (the
exactly-once tests kill it with SIGKILL and start it again from the
checkpoints):

    python -m tests_spark.offset_query --metaq 127.0.0.1:PORT --topic T \\
        --checkpoint DIR [--parquet DIR] [--nsq TARGET_TOPIC PRODUCER_ID]

One query per sink given, each reading the topic from the earliest offset
with its own checkpoint (``DIR/parquet``, ``DIR/nsq``) and writing each
message's body: Parquet files, or the ``nsq`` sink in idempotent mode into
a second retained topic.  They run until killed, or with
``--available-now`` until they have read what the topic held when they
started.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from typing import Any, List, Optional, Sequence


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--metaq", required=True)
    parser.add_argument("--topic", required=True)
    parser.add_argument("--checkpoint", required=True)
    parser.add_argument("--available-now", action="store_true")
    parser.add_argument("--max-offsets", default="")
    parser.add_argument("--parquet")
    parser.add_argument("--nsq", nargs=2, metavar=("TARGET_TOPIC", "PRODUCER_ID"))
    args = parser.parse_args(argv)

    began = time.time()
    os.environ["PYSPARK_PYTHON"] = sys.executable
    from pyspark.sql import SparkSession

    import txnsq.spark

    spark = (
        SparkSession.builder.master("local[2]")
        .appName("txnsq-offset-query")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.driver.host", "127.0.0.1")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    txnsq.spark.register(spark)
    print("session after %.1fs" % (time.time() - began,), flush=True)

    def rows() -> Any:
        reader = (
            spark.readStream.format("nsq")
            .option("topic", args.topic)
            .option("metaq_addresses", args.metaq)
            .option("starting_offsets", "earliest")
        )
        if args.max_offsets:
            reader = reader.option("max_offsets_per_trigger", args.max_offsets)
        return reader.load().select("body")

    writers = []
    if args.parquet:
        writers.append(("parquet", rows().writeStream.format("parquet").option("path", args.parquet)))
    if args.nsq:
        target, producer = args.nsq
        writers.append(
            (
                "nsq",
                rows()
                .writeStream.format("nsq")
                .option("topic", target)
                .option("metaq_addresses", args.metaq)
                .option("idempotent", "true")
                .option("producer_id", producer),
            )
        )
    queries: List[Any] = []
    for name, writer in writers:
        writer = writer.option("checkpointLocation", os.path.join(args.checkpoint, name)).queryName(name)
        if args.available_now:
            writer = writer.trigger(availableNow=True)
        else:
            writer = writer.trigger(processingTime="500 milliseconds")
        if queries:
            _first_batch_done(queries[-1])
        queries.append(writer.start())
    print("queries started after %.1fs" % (time.time() - began,), flush=True)
    for query in queries:
        query.awaitTermination()
        for progress in query.recentProgress:
            print(
                "%s batch %d: %d rows, %s"
                % (query.name, progress["batchId"], progress["numInputRows"], progress["durationMs"])
            )
    print("done after %.1fs" % (time.time() - began,), flush=True)
    spark.stop()
    return 0


def _first_batch_done(query: Any, within: float = 120.0) -> None:
    """
    Until ``query`` has run a batch (or ended): two queries started at the
    same moment in one driver sometimes fail the first task of one of them
    with ``java.io.OptionalDataException`` while the executor deserializes
    it (Spark 4.3, ``local[2]``, when both plan their first batch at once:
    a race inside Spark, seen in most runs), so the next query starts
    once this one is under way.
    """
    deadline = time.time() + within
    while query.isActive and query.lastProgress is None and time.time() < deadline:
        time.sleep(0.05)


if __name__ == "__main__":
    sys.exit(main())
