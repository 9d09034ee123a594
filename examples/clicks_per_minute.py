#!/usr/bin/env python3
"""
Structured Streaming over NSQ: count page views per page per minute (event
time) from a clickstream topic, and write the counts both to another NSQ
topic (one JSON message per page and minute) and to Parquet.

    spark-submit examples/clicks_per_minute.py --nsqd-tcp-address 127.0.0.1:4150 \\
        --topic clicks --output-topic clicks_per_minute \\
        --parquet /tmp/clicks/parquet --checkpoint /tmp/clicks/checkpoint \\
        --spool /tmp/clicks/spool

The source is at least once: a message can come twice after a failure, so
events are deduplicated by their NSQ message id within the watermark.  A
minute is written once the watermark (``--watermark``, default 1 minute of
event time) has passed its end.  Each micro-batch's Parquet output goes to
its own ``batch_id=N`` directory, overwritten if the batch is replayed.
"""

from __future__ import annotations

import argparse
import os
from typing import Any, Dict, Optional, Sequence

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

import txnsq.spark

EVENT_SCHEMA = "page string, user string, ts long"


def minute_counts(events: DataFrame, watermark: str = "1 minute") -> DataFrame:
    """
    Page views per page per event-time minute from the ``nsq`` source's rows:
    ``minute_ms`` (the minute's start, milliseconds since the epoch),
    ``page``, ``count``.
    """
    parsed = events.select(
        "id", F.from_json(F.col("body").cast("string"), EVENT_SCHEMA).alias("event")
    ).select("id", "event.page", F.timestamp_millis("event.ts").alias("ts"))
    return (
        parsed.withWatermark("ts", watermark)
        .dropDuplicatesWithinWatermark(["id"])
        .groupBy(F.window("ts", "1 minute"), "page")
        .count()
        .select(F.unix_millis(F.col("window.start")).alias("minute_ms"), "page", "count")
    )


def start(
    spark: SparkSession,
    source: Dict[str, str],
    output_topic: str,
    parquet: str,
    checkpoint: str,
    watermark: str = "1 minute",
    trigger: Optional[str] = None,
) -> Any:
    """
    Start the query; ``source`` are the ``nsq`` source's options
    (addresses, topic, channel, spool_path, ...).  Returns the StreamingQuery.
    """
    txnsq.spark.register(spark)
    nsqd = source["nsqd_tcp_addresses"]

    def write_batch(counts: DataFrame, batch_id: int) -> None:
        counts = counts.persist()
        try:
            if counts.isEmpty():
                return
            counts.write.mode("overwrite").parquet(os.path.join(parquet, "batch_id=%d" % (batch_id,)))
            (
                counts.select(F.to_json(F.struct("minute_ms", "page", "count")).alias("body"))
                .write.format("nsq")
                .option("nsqd_tcp_addresses", nsqd)
                .option("topic", output_topic)
                .mode("append")
                .save()
            )
        finally:
            counts.unpersist()

    events = spark.readStream.format("nsq").options(**source).load()
    writer = (
        minute_counts(events, watermark)
        .writeStream.outputMode("append")
        .foreachBatch(write_batch)
        .option("checkpointLocation", checkpoint)
    )
    if trigger:
        writer = writer.trigger(processingTime=trigger)
    return writer.start()


def main(argv: Optional[Sequence[str]] = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--nsqd-tcp-address", default="127.0.0.1:4150")
    parser.add_argument("--topic", default="clicks")
    parser.add_argument("--channel", default="clicks_per_minute")
    parser.add_argument("--output-topic", default="clicks_per_minute")
    parser.add_argument("--parquet", default="/tmp/clicks/parquet")
    parser.add_argument("--checkpoint", default="/tmp/clicks/checkpoint")
    parser.add_argument("--spool", default="/tmp/clicks/spool")
    parser.add_argument("--watermark", default="1 minute")
    parser.add_argument("--max-messages-per-batch", default="10000")
    args = parser.parse_args(argv)
    spark = SparkSession.builder.appName("clicks_per_minute").getOrCreate()
    source = {
        "nsqd_tcp_addresses": args.nsqd_tcp_address,
        "topic": args.topic,
        "channel": args.channel,
        "spool_path": args.spool,
        "max_messages_per_batch": args.max_messages_per_batch,
    }
    query = start(spark, source, args.output_topic, args.parquet, args.checkpoint, args.watermark)
    query.awaitTermination()


if __name__ == "__main__":
    main()
