"""
One local SparkSession (``local[2]``) for the whole test run: the JVM takes
many seconds to start.  The ``nsq`` data source is registered on it.
"""

from __future__ import annotations

import atexit
import os
import sys
from typing import Any, Optional

__all__ = ["spark_session"]

_session: Optional[Any] = None


def spark_session() -> Any:
    """The shared SparkSession (started on first use, stopped at exit)."""
    global _session
    if _session is None:
        # Spark's Python workers must be this interpreter, which has txnsq
        # and its dependencies (Spark would otherwise run "python3").
        os.environ["PYSPARK_PYTHON"] = sys.executable
        os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
        from pyspark.sql import SparkSession

        import txnsq.spark

        session = (
            SparkSession.builder.master("local[2]")
            .appName("txnsq-spark-tests")
            .config("spark.ui.enabled", "false")
            .config("spark.ui.showConsoleProgress", "false")
            .config("spark.sql.shuffle.partitions", "2")
            .config("spark.default.parallelism", "2")
            .config("spark.sql.session.timeZone", "UTC")
            .config("spark.driver.bindAddress", "127.0.0.1")
            .config("spark.driver.host", "127.0.0.1")
            .config("spark.sql.streaming.forceDeleteTempCheckpointLocation", "true")
            .getOrCreate()
        )
        session.sparkContext.setLogLevel("ERROR")
        txnsq.spark.register(session)
        _session = session
        atexit.register(session.stop)
    return _session
