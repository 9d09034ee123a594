"""
Data sources for ``bench/system/spark_query_cost.py`` (a module of its own so that
Spark's Python workers import it by name):

- ``nsq_costed``: the ``nsq`` source, whose stream reader writes the CPU
  time of its process (Spark's driver-side source process, which exits
  with the query) to ``$SPARK_COST_LOG`` after each call;
- ``ready_made``: a stream of one micro-batch of ready-made Arrow batches
  with the offset mode's schema (no nsqd, no reads): Spark's own cost of
  taking rows of this schema from Python.
"""

from __future__ import annotations

import os
import struct
import zlib
from typing import Any, Dict, Iterator, List, Optional, Tuple

from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition

from txnsq.spark.datasource import LogStreamReader, NSQDataSource, _arrow_schema
from txnsq.spark.log_rows import LOG_SOURCE_SCHEMA, frame_records, records_to_batch


def _log_cpu(what: str) -> None:
    path = os.environ.get("SPARK_COST_LOG")
    if path:
        times = os.times()
        with open(path, "a") as log:
            log.write("%d %s %.3f\n" % (os.getpid(), what, times.user + times.system))


class CostedStreamReader(LogStreamReader):
    """The offset mode's stream reader, logging its process's CPU time after each call."""

    def initialOffset(self) -> dict:
        try:
            return LogStreamReader.initialOffset(self)
        finally:
            _log_cpu("initialOffset")

    def latestOffset(self, start: Optional[dict] = None, limit: Any = None) -> dict:
        try:
            return LogStreamReader.latestOffset(self, start, limit)
        finally:
            _log_cpu("latestOffset")

    def partitions(self, start: dict, end: dict) -> Any:
        try:
            return LogStreamReader.partitions(self, start, end)
        finally:
            _log_cpu("partitions")


class CostedSource(NSQDataSource):
    """``format("nsq_costed")``: the offset mode with :class:`CostedStreamReader`."""

    @classmethod
    def name(cls) -> str:
        return "nsq_costed"

    def streamReader(self, schema: Any) -> DataSourceStreamReader:
        reader = NSQDataSource.streamReader(self, schema)
        assert isinstance(reader, LogStreamReader)
        costed = CostedStreamReader(reader.options, schema)
        return costed


_BATCHES: Dict[Tuple[int, int], List[Any]] = {}


def _ready_made(rows: int, per_batch: int, schema: Any) -> List[Any]:
    """``rows // per_batch`` copies of one Arrow batch of ``per_batch`` 100-byte records (built once per process)."""
    key = (rows, per_batch)
    if key not in _BATCHES:
        body = b"x" * 100
        record = struct.pack(">iiqi", len(body), zlib.crc32(body) & 0x7FFFFFFF, 0x0123456789ABCDEF, 0) + body
        data = record * per_batch
        starts, lengths = frame_records(data, 0, "bulk", 0)
        batch = records_to_batch(data, starts, lengths, 0, "bulk", 0, "127.0.0.1:4160", schema)
        _BATCHES[key] = [batch] * (rows // per_batch)
    return _BATCHES[key]


class ReadyMadeReader(DataSourceStreamReader):
    """One micro-batch of ``rows`` rows in ``tasks`` partitions, from ready-made batches."""

    def __init__(self, options: Dict[str, str], schema: Any) -> None:
        self.arrow_schema = _arrow_schema(schema)
        self.rows = int(options.get("rows", "1000000"))
        self.tasks = int(options.get("tasks", "4"))
        self.per_batch = int(options.get("per_batch", "31250"))

    def initialOffset(self) -> dict:
        return {"batch": 0}

    def latestOffset(self, start: Optional[dict] = None, limit: Any = None) -> dict:
        return {"batch": 1}

    def partitions(self, start: dict, end: dict) -> List[InputPartition]:
        if start["batch"] >= end["batch"]:
            return []
        return [InputPartition(task) for task in range(self.tasks)]

    def read(self, partition: InputPartition) -> Iterator[Any]:
        return iter(_ready_made(self.rows // self.tasks, self.per_batch, self.arrow_schema))

    def commit(self, end: dict) -> None:
        pass


class ReadyMadeSource(DataSource):
    """``format("ready_made")``: see :class:`ReadyMadeReader`."""

    @classmethod
    def name(cls) -> str:
        return "ready_made"

    def schema(self) -> str:
        return LOG_SOURCE_SCHEMA

    def streamReader(self, schema: Any) -> DataSourceStreamReader:
        return ReadyMadeReader(dict(self.options), schema)
