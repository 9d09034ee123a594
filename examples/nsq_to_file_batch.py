#!/usr/bin/env python3
"""
A batch job over an archive written by ``nsq_to_file``: the same page views
per page per minute as ``clicks_per_minute.py``, from the newline-delimited
(and possibly gzipped) files instead of the live topic.

    nsq_to_file --nsqd-tcp-address 127.0.0.1:4150 --topic clicks --output-dir /tmp/clicks/archive --gzip
    spark-submit examples/nsq_to_file_batch.py --input /tmp/clicks/archive --output /tmp/clicks/archive_counts

Each line of an ``nsq_to_file`` file is one message body; Spark reads
``.gz`` files transparently.
"""

from __future__ import annotations

import argparse
from typing import Optional, Sequence

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

EVENT_SCHEMA = "page string, user string, ts long"


def minute_counts_from_files(spark: SparkSession, path: str) -> DataFrame:
    """``minute_ms``, ``page``, ``count`` of the page views in the files under ``path``."""
    lines = spark.read.text(path)
    events = lines.select(F.from_json("value", EVENT_SCHEMA).alias("e")).where(F.col("e.page").isNotNull())
    return (
        events.select("e.page", (F.col("e.ts") - F.col("e.ts") % 60000).alias("minute_ms"))
        .groupBy("minute_ms", "page")
        .count()
        .orderBy("minute_ms", "page")
    )


def main(argv: Optional[Sequence[str]] = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--input", required=True, help="nsq_to_file's --output-dir")
    parser.add_argument("--output", default=None, help="write the counts here as Parquet (default: print them)")
    args = parser.parse_args(argv)
    spark = SparkSession.builder.appName("nsq_to_file_batch").getOrCreate()
    counts = minute_counts_from_files(spark, args.input)
    if args.output:
        counts.write.mode("overwrite").parquet(args.output)
    else:
        counts.show(1000, truncate=False)
    spark.stop()


if __name__ == "__main__":
    main()
