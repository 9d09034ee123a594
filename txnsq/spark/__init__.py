"""
NSQ topics in Spark: ``spark.readStream.format("nsq")``,
``spark.read.format("nsq")`` and ``df.write[Stream].format("nsq")``, with
Spark 4's Python Data Source API (install ``txnsq[spark]``).

Call :func:`register` once per SparkSession.  Only :mod:`txnsq.spark.datasource`
imports pyspark (and :mod:`txnsq.spark.log_rows` numpy and pyarrow); the
blocking clients, the options, the offsets, the spool and the MPUB batching
are plain Python.

- :mod:`txnsq.spark.blocking`: a blocking NSQ client over the shared codecs
- :mod:`txnsq.spark.metaq`: a blocking MetaQ client (retained topics by offset)
- :mod:`txnsq.spark.offsets`: the offset mode over retained topics (options,
  discovery, offsets, planning, executors' reads)
- :mod:`txnsq.spark.log_rows`: MetaQ ``get`` answers to Arrow record batches
- :mod:`txnsq.spark.options`: the data source's options
- :mod:`txnsq.spark.consumer`: the streaming consumer and the batch drain
- :mod:`txnsq.spark.spool`: spooled micro-batches
- :mod:`txnsq.spark.batching`, :mod:`txnsq.spark.publisher`: the sink
- :mod:`txnsq.spark.datasource`: the ``nsq`` DataSource

Public API: :func:`register`, and the blocking clients
:mod:`txnsq.spark.blocking` and :mod:`txnsq.spark.metaq`, for plain
scripts too.  Every other submodule is private.
"""

from __future__ import annotations

from typing import Any

__all__ = ["register"]


def register(spark: Any) -> None:
    """Register the ``nsq`` data source with the SparkSession ``spark``."""
    from txnsq.spark.datasource import NSQDataSource

    spark.dataSource.register(NSQDataSource)
