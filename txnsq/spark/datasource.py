# -*- test-case-name: tests_spark.test_datasource -*-
"""
The ``nsq`` data source for Spark 4's Python Data Source API.

Where each part runs:

- :class:`NSQDataSource` methods, option checks and ``partitions()`` run
  on the driver;
- :class:`NSQStreamReader` lives in the driver's long-lived Python process
  of a streaming query (``latestOffset``, ``partitions``, ``commit`` and
  ``stop`` all run there), so it owns the :class:`StreamConsumer` whose
  connections hold the messages in flight until ``commit()`` FINs them;
  its ``read()`` runs on executors and only turns the spooled messages
  carried by a partition into rows;
- :class:`NSQBatchReader.read` and the writers' ``write`` run on executors,
  each with its own blocking connection.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any, Iterator, List, Optional, Sequence, Tuple

from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    DataSourceStreamWriter,
    DataSourceWriter,
    InputPartition,
    WriterCommitMessage,
)
from pyspark.sql.types import StructType

from txnsq.spark.batching import check_sink_schema
from txnsq.spark.blocking import BlockingConnection
from txnsq.spark.consumer import DEFAULT_MAX_RDY, StreamConsumer, drain, nsqd_addresses
from txnsq.spark.options import OptionError, SinkOptions, SourceOptions
from txnsq.spark.publisher import publish_rows
from txnsq.spark.records import SOURCE_SCHEMA, NSQMessage, to_row
from txnsq.spark.spool import Spool, SpoolError, batch_number

__all__ = [
    "NSQBatchReader",
    "NSQCommitMessage",
    "NSQDataSource",
    "NSQStreamReader",
    "NSQStreamWriter",
    "NSQWriter",
]

_log = logging.getLogger("txnsq.spark")

#: A streaming partition carries at most this many body bytes (they travel
#: inside the task, pickled).
_PARTITION_BYTES = 8 * 1024 * 1024


class NSQDataSource(DataSource):
    """
    ``format("nsq")``: read a topic's channel as a stream or a batch, write
    rows to topics.  Register it with :func:`txnsq.spark.register`.
    """

    @classmethod
    def name(cls) -> str:
        return "nsq"

    def schema(self) -> str:
        return SOURCE_SCHEMA

    def reader(self, schema: StructType) -> "NSQBatchReader":
        return NSQBatchReader(SourceOptions.parse(self.options, streaming=False))

    def streamReader(self, schema: StructType) -> "NSQStreamReader":
        return NSQStreamReader(SourceOptions.parse(self.options, streaming=True))

    def _sink(self, schema: StructType) -> SinkOptions:
        options = SinkOptions.parse(self.options)
        check_sink_schema([(f.name, f.dataType.typeName()) for f in schema.fields], options.topic)
        return options

    def writer(self, schema: StructType, overwrite: bool) -> "NSQWriter":
        return NSQWriter(self._sink(schema))

    def streamWriter(self, schema: StructType, overwrite: bool) -> "NSQStreamWriter":
        return NSQStreamWriter(self._sink(schema))


# -- batch source --------------------------------------------------------------


class _DrainPartition(InputPartition):
    """Drain up to ``count`` messages from the nsqd at ``address``."""

    def __init__(self, address: str, count: int) -> None:
        InputPartition.__init__(self, (address, count))
        self.address = address
        self.count = count


class NSQBatchReader(DataSourceReader):
    """
    ``spark.read.format("nsq")``: each partition drains one nsqd (up to its
    share of ``max_messages``, or until ``drain_timeout`` passes without a
    message) and FINs what it read once Spark has taken every row.
    """

    def __init__(self, options: SourceOptions) -> None:
        self.options = options

    def partitions(self) -> Sequence[InputPartition]:
        options = self.options
        addresses = nsqd_addresses(options)
        if not addresses:
            raise OptionError(
                "lookupd_http_addresses", "lists no nsqd for topic %s" % (options.topic,)
            )
        for address in addresses:
            # Unreachable nsqds are reported here, by address, before any task.
            BlockingConnection(address, options.settings).close()
        share = -(-options.max_messages // len(addresses))
        parts: List[InputPartition] = []
        for address in addresses:
            left = share
            while left > 0:
                # One connection holds at most max_rdy_count in flight.
                count = min(left, DEFAULT_MAX_RDY)
                parts.append(_DrainPartition(address, count))
                left -= count
        return parts

    def read(self, partition: InputPartition) -> Iterator[Tuple[Any, ...]]:
        assert isinstance(partition, _DrainPartition)
        topic = self.options.topic
        for message in drain(partition.address, self.options, partition.count):
            yield to_row(message, topic)


# -- streaming source ------------------------------------------------------------


class _SpooledPartition(InputPartition):
    """Messages of a micro-batch, read from the spool on the driver."""

    def __init__(self, messages: List[NSQMessage]) -> None:
        InputPartition.__init__(self, len(messages))
        self.messages = messages


class NSQStreamReader(DataSourceStreamReader):
    """
    ``spark.readStream.format("nsq")``, at least once.

    Offsets are ``{"batch": n}``.  ``latestOffset`` takes up to
    ``max_messages_per_batch`` messages, spools them as batch ``n`` and
    keeps them in flight; ``partitions`` reads batches from the spool (the
    same rows when Spark asks again); ``commit`` FINs them and deletes
    their files.
    """

    def __init__(self, options: SourceOptions) -> None:
        self.options = options
        assert options.spool_path is not None
        self.spool = Spool(options.spool_path)
        self._consumer: Optional[StreamConsumer] = None
        self._last: Optional[int] = None

    def _started(self) -> StreamConsumer:
        if self._consumer is None:
            consumer = StreamConsumer(self.options)
            consumer.start()
            self._consumer = consumer
        return self._consumer

    def initialOffset(self) -> dict:
        return {"batch": 0}

    def latestOffset(self, start: Optional[dict] = None, limit: Any = None) -> dict:
        """
        The end offset of the next micro-batch, or ``start`` if no message came
        within ``batch_timeout``.  (Spark before 4.2 passes no ``start``;
        the last number handed out, kept in the spool, stands for it.)
        """
        consumer = self._started()
        if start is not None:
            base = batch_number(start)
        elif self._last is not None:
            base = self._last
        else:
            base = self.spool.last_batch()
        count = self.options.max_messages_per_batch
        max_rows = getattr(limit, "maxRows", None)
        if isinstance(max_rows, int) and max_rows > 0:
            count = min(count, max_rows)
        messages = consumer.take(count, self.options.batch_timeout)
        if not messages:
            return {"batch": base}
        number = base + 1
        self.spool.write(number, messages)
        self.spool.set_last_batch(number)
        consumer.hold(number)
        self._last = number
        return {"batch": number}

    def partitions(self, start: dict, end: dict) -> Sequence[InputPartition]:
        first, last = batch_number(start), batch_number(end)
        messages: List[NSQMessage] = []
        for number in range(first + 1, last + 1):
            try:
                messages.extend(self.spool.read(number))
            except SpoolError:
                if number == last:
                    raise SpoolError(
                        "nsq source: batch %d is not in spool_path %s; was the spool removed or "
                        "another spool_path given to this checkpoint?" % (number, self.spool.path)
                    ) from None
                _log.warning("nsq source: no spool file for batch %d", number)
        parts: List[InputPartition] = []
        chunk: List[NSQMessage] = []
        size = 0
        for message in messages:
            chunk.append(message)
            size += len(message.body) + 64
            if size >= _PARTITION_BYTES:
                parts.append(_SpooledPartition(chunk))
                chunk, size = [], 0
        if chunk:
            parts.append(_SpooledPartition(chunk))
        return parts

    def read(self, partition: InputPartition) -> Iterator[Tuple[Any, ...]]:
        assert isinstance(partition, _SpooledPartition)
        topic = self.options.topic
        for message in partition.messages:
            yield to_row(message, topic)

    def commit(self, end: dict) -> None:
        number = batch_number(end)
        if self._consumer is not None:
            self._consumer.commit(number)
        self.spool.delete_through(number)

    def stop(self) -> None:
        if self._consumer is not None:
            self._consumer.stop()
            self._consumer = None


# -- sink ---------------------------------------------------------------------------


@dataclass
class NSQCommitMessage(WriterCommitMessage):
    """What one task published: ``count`` messages, from partition ``partition``."""

    count: int
    partition: int


def _partition_id() -> int:
    from pyspark import TaskContext

    context = TaskContext.get()
    return context.partitionId() if context is not None else 0


def _total(messages: Sequence[Optional[WriterCommitMessage]]) -> int:
    return sum(m.count for m in messages if isinstance(m, NSQCommitMessage))


class NSQWriter(DataSourceWriter):
    """``df.write.format("nsq")``: each task MPUBs its rows to one nsqd."""

    def __init__(self, options: SinkOptions) -> None:
        self.options = options
        #: Set by :meth:`commit`: how many messages the job published.
        self.published = 0

    def write(self, iterator: Iterator[Any]) -> NSQCommitMessage:
        partition = _partition_id()
        return NSQCommitMessage(publish_rows(iterator, self.options, partition), partition)

    def commit(self, messages: List[Optional[WriterCommitMessage]]) -> None:
        self.published = _total(messages)
        _log.info("nsq sink: published %d messages", self.published)

    def abort(self, messages: List[Optional[WriterCommitMessage]]) -> None:
        _log.warning("nsq sink: job failed after %d messages were published", _total(messages))


class NSQStreamWriter(DataSourceStreamWriter):
    """``df.writeStream.format("nsq")``: each micro-batch's tasks MPUB their rows (at least once)."""

    def __init__(self, options: SinkOptions) -> None:
        self.options = options
        self.published = 0

    def write(self, iterator: Iterator[Any]) -> NSQCommitMessage:
        partition = _partition_id()
        return NSQCommitMessage(publish_rows(iterator, self.options, partition), partition)

    def commit(self, messages: List[Optional[WriterCommitMessage]], batchId: int) -> None:
        count = _total(messages)
        self.published += count
        _log.info("nsq sink: batch %d published %d messages", batchId, count)

    def abort(self, messages: List[Optional[WriterCommitMessage]], batchId: int) -> None:
        _log.warning("nsq sink: batch %d failed after %d messages were published", batchId, _total(messages))
