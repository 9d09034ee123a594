"""
A streaming query over a retained topic, as its own driver process (the
exactly-once tests kill it with SIGKILL and start it again from its
checkpoint):

    python -m tests_spark.offset_query --metaq 127.0.0.1:PORT --topic T \\
        --checkpoint DIR parquet DIR
    python -m tests_spark.offset_query --metaq 127.0.0.1:PORT --topic T \\
        --checkpoint DIR nsq TARGET_TOPIC PRODUCER_ID

It runs until killed, or with ``--available-now`` until it has read what
the topic held when it started.  Each row written is the message body.
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import Optional, Sequence


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--metaq", required=True)
    parser.add_argument("--topic", required=True)
    parser.add_argument("--checkpoint", required=True)
    parser.add_argument("--available-now", action="store_true")
    parser.add_argument("--max-offsets", default="")
    parser.add_argument("sink", choices=["parquet", "nsq"])
    parser.add_argument("target")
    parser.add_argument("producer_id", nargs="?", default="")
    args = parser.parse_args(argv)

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
    reader = (
        spark.readStream.format("nsq")
        .option("topic", args.topic)
        .option("metaq_addresses", args.metaq)
        .option("starting_offsets", "earliest")
    )
    if args.max_offsets:
        reader = reader.option("max_offsets_per_trigger", args.max_offsets)
    rows = reader.load().select("body")
    if args.sink == "parquet":
        writer = rows.writeStream.format("parquet").option("path", args.target)
    else:
        writer = (
            rows.writeStream.format("nsq")
            .option("topic", args.target)
            .option("metaq_addresses", args.metaq)
            .option("idempotent", "true")
            .option("producer_id", args.producer_id)
        )
    writer = writer.option("checkpointLocation", args.checkpoint)
    if args.available_now:
        writer = writer.trigger(availableNow=True)
    else:
        writer = writer.trigger(processingTime="500 milliseconds")
    query = writer.start()
    print("query started", flush=True)
    query.awaitTermination()
    spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
