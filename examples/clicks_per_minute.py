#!/usr/bin/env python3
"""
Structured Streaming over a retained NSQ topic: count page views per page
per minute (event time) from a clickstream topic, and write the counts both
to another NSQ topic (one JSON message per page and minute) and to Parquet;
or replay: recount a past period of the topic (yesterday, say) from a
timestamp, as a batch job, without consuming anything.

    nsqd --data-path=/tmp/nsqd --metaq-address=127.0.0.1:8123 --retain-topics='^clicks$'
    spark-submit examples/clicks_per_minute.py --nsqd-http-address 127.0.0.1:4151 \\
        --topic clicks --output-topic clicks_per_minute \\
        --parquet /tmp/clicks/parquet --checkpoint /tmp/clicks/checkpoint
    spark-submit examples/clicks_per_minute.py --nsqd-http-address 127.0.0.1:4151 \\
        --topic clicks --replay-from 2026-11-25T00:00:00Z --replay-to 2026-11-26T00:00:00Z \\
        --parquet /tmp/clicks/replay

The ``nsq`` source reads the retained topic by offset (the nsqd's MetaQ
listener, found through its ``/info``), with the offsets in the query's
checkpoint: after a failure the same micro-batches are read again, so each
page view is counted once.  A minute is written once the watermark
(``--watermark``, default 1 minute of event time) has passed its end; each
micro-batch's Parquet output goes to its own ``batch_id=N`` directory
(overwritten if the batch is replayed) and its messages to the output topic
through the ``nsq`` sink's idempotent mode when that topic is retained
(``--idempotent``), else plainly (at least once).
"""

from __future__ import annotations

import argparse
import os
from typing import Any, Dict, Optional, Sequence

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

import txnsq.spark

EVENT_SCHEMA = "page string, user string, ts long"


def _events(rows: DataFrame) -> DataFrame:
    """``page`` and event time ``ts`` of the source's rows."""
    parsed = rows.select(F.from_json(F.col("body").cast("string"), EVENT_SCHEMA).alias("event"))
    return parsed.select("event.page", F.timestamp_millis("event.ts").alias("ts"))


def _per_minute(events: DataFrame) -> DataFrame:
    return (
        events.groupBy(F.window("ts", "1 minute"), "page")
        .count()
        .select(F.unix_millis(F.col("window.start")).alias("minute_ms"), "page", "count")
    )


def minute_counts(rows: DataFrame, watermark: str = "1 minute") -> DataFrame:
    """
    Page views per page per event-time minute from the ``nsq`` source's
    rows (streaming): ``minute_ms`` (the minute's start, milliseconds since
    the epoch), ``page``, ``count``.
    """
    return _per_minute(_events(rows).withWatermark("ts", watermark))


def replay(spark: SparkSession, source: Dict[str, str], start: str, end: Optional[str] = None) -> DataFrame:
    """
    The same counts over the messages published from ``start`` to ``end``
    (RFC 3339 or unix ms; None: up to now), read from the retained topic
    as a batch.
    """
    txnsq.spark.register(spark)
    rows = (
        spark.read.format("nsq")
        .options(**source)
        .option("starting_offsets", "timestamp:" + start)
        .option("ending_offsets", "timestamp:" + end if end else "latest")
        .load()
    )
    return _per_minute(_events(rows))


def start(
    spark: SparkSession,
    source: Dict[str, str],
    output_topic: str,
    parquet: str,
    checkpoint: str,
    watermark: str = "1 minute",
    trigger: Optional[str] = None,
    available_now: bool = False,
    idempotent: bool = False,
) -> Any:
    """
    Start the query; ``source`` are the ``nsq`` source's options (topic,
    nsqd_http_addresses or metaq_addresses, starting_offsets, ...).
    Returns the StreamingQuery.
    """
    txnsq.spark.register(spark)
    sink = {key: value for key, value in source.items() if key in ("nsqd_http_addresses", "metaq_addresses")}

    def write_batch(counts: DataFrame, batch_id: int) -> None:
        counts = counts.persist()
        try:
            if counts.isEmpty():
                return
            counts.write.mode("overwrite").parquet(os.path.join(parquet, "batch_id=%d" % (batch_id,)))
            writer = (
                counts.select(F.to_json(F.struct("minute_ms", "page", "count")).alias("body"))
                .coalesce(1)
                .write.format("nsq")
                .option("topic", output_topic)
                .mode("append")
            )
            if idempotent:
                # Batch ids number the writes: a replayed batch is dropped by nsqd.
                writer = writer.options(**sink).option("idempotent", "true")
                writer = writer.option("producer_id", "clicks_per_minute").option("batch_id", str(batch_id))
            else:
                writer = writer.option("nsqd_tcp_addresses", source["nsqd_tcp_addresses"])
            writer.save()
        finally:
            counts.unpersist()

    rows = spark.readStream.format("nsq").options(**{k: v for k, v in source.items() if k != "nsqd_tcp_addresses"}).load()
    writer = (
        minute_counts(rows, watermark)
        .writeStream.outputMode("append")
        .foreachBatch(write_batch)
        .option("checkpointLocation", checkpoint)
    )
    if available_now:
        writer = writer.trigger(availableNow=True)
    elif trigger:
        writer = writer.trigger(processingTime=trigger)
    return writer.start()


def main(argv: Optional[Sequence[str]] = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--nsqd-http-address", default="127.0.0.1:4151")
    parser.add_argument("--nsqd-tcp-address", default="127.0.0.1:4150", help="where counts are published")
    parser.add_argument("--topic", default="clicks")
    parser.add_argument("--output-topic", default="clicks_per_minute")
    parser.add_argument("--parquet", default="/tmp/clicks/parquet")
    parser.add_argument("--checkpoint", default="/tmp/clicks/checkpoint")
    parser.add_argument("--starting-offsets", default="earliest")
    parser.add_argument("--watermark", default="1 minute")
    parser.add_argument("--available-now", action="store_true", help="read what is there, then stop")
    parser.add_argument("--idempotent", action="store_true", help="the output topic is retained: publish once")
    parser.add_argument("--replay-from", help="recount from this time (RFC 3339 or unix ms) as a batch")
    parser.add_argument("--replay-to", help="... to this time")
    args = parser.parse_args(argv)
    spark = SparkSession.builder.appName("clicks_per_minute").getOrCreate()
    source = {"topic": args.topic, "nsqd_http_addresses": args.nsqd_http_address}
    if args.replay_from:
        counts = replay(spark, source, args.replay_from, args.replay_to)
        counts.orderBy("minute_ms", "page").write.mode("overwrite").parquet(args.parquet)
        spark.stop()
        return
    source["starting_offsets"] = args.starting_offsets
    source["nsqd_tcp_addresses"] = args.nsqd_tcp_address
    query = start(
        spark,
        source,
        args.output_topic,
        args.parquet,
        args.checkpoint,
        args.watermark,
        available_now=args.available_now,
        idempotent=args.idempotent,
    )
    query.awaitTermination()
    spark.stop()


if __name__ == "__main__":
    main()
