# -*- test-case-name: tests_spark.test_datasource -*-
"""
The ``nsq`` data source for Spark 4's Python Data Source API.

Where each part runs:

- :class:`NSQDataSource` methods, option checks and ``partitions()`` run
  on the driver;
- :class:`NSQStreamReader` lives in the driver's long-lived Python process
  of a streaming query (``latestOffset``, ``partitions``, ``commit`` and
  ``stop`` all run there), so it owns the :class:`StreamConsumer` whose
  connections hold a batch's messages in flight until Spark, done with
  the batch, asks ``latestOffset`` for the next and they are FINed;
  its ``read()`` runs on executors and only turns the spooled messages
  carried by a partition into rows;
- :class:`NSQBatchReader.read` and the writers' ``write`` run on executors,
  each with its own blocking connection.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Dict, Iterator, List, Mapping, Optional, Sequence, Tuple

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

from txnsq.spark.log_rows import ARROW_SCHEMA, LOG_SOURCE_SCHEMA
from txnsq.spark.offsets import (
    OFFSET_OPTIONS,
    LogOptions,
    LogView,
    OffsetSourceError,
    ReadRange,
    discover_metaq_addresses,
    plan_ranges,
    read_range,
    topic_partitions,
)
from txnsq.spark.options import OptionError, SinkOptions, SourceOptions, _get
from txnsq.spark.records import SOURCE_SCHEMA, NSQMessage, to_batch, to_row
from txnsq.spark.spool import Spool, SpoolError, batch_number

# The channel mode's client and consumer and the sink's publisher are
# imported where they are used: Spark starts a new Python process for each
# streaming query, and the offset mode needs none of them (nor the NSQ
# handshake and TLS modules they bring).
if TYPE_CHECKING:  # pragma: no cover
    from txnsq.spark.consumer import StreamConsumer

try:
    from pyspark.sql.streaming.datasource import (
        ReadAllAvailable,
        ReadMaxBytes,
        ReadMaxRows,
        SupportsTriggerAvailableNow,
    )

    #: Spark 4.2+ hands latestOffset a start and a ReadLimit (admission
    #: control) and runs Trigger.AvailableNow on Python sources.
    ADMISSION_CONTROL = True
except ImportError:  # pragma: no cover - pyspark 4.0/4.1
    ADMISSION_CONTROL = False

    class SupportsTriggerAvailableNow:  # type: ignore[no-redef]
        """Stand-in: this pyspark has no Trigger.AvailableNow for Python sources."""

    class ReadAllAvailable:  # type: ignore[no-redef]
        """Stand-in."""

    class ReadMaxRows:  # type: ignore[no-redef]
        """Stand-in."""

        max_rows = 0

    class ReadMaxBytes:  # type: ignore[no-redef]
        """Stand-in."""

        max_bytes = 0

__all__ = [
    "LogBatchReader",
    "LogStreamReader",
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

    def _log_addresses(self) -> Optional[List[str]]:
        """
        The MetaQ addresses to read by offset, or None for the channel mode
        (decided once; see :func:`source_mode`).
        """
        if not hasattr(self, "_metaq"):
            self._metaq = source_mode(self.options)
        return self._metaq

    def schema(self) -> str:
        return SOURCE_SCHEMA if self._log_addresses() is None else LOG_SOURCE_SCHEMA

    def reader(self, schema: StructType) -> "DataSourceReader":
        addresses = self._log_addresses()
        if addresses is not None:
            return LogBatchReader(LogOptions.parse(self.options, addresses, streaming=False), schema)
        return NSQBatchReader(SourceOptions.parse(self.options, streaming=False), schema)

    def streamReader(self, schema: StructType) -> "DataSourceStreamReader":
        addresses = self._log_addresses()
        if addresses is not None:
            options = LogOptions.parse(self.options, addresses, streaming=True)
            if not ADMISSION_CONTROL:
                for name in ("max_offsets_per_trigger", "max_bytes_per_trigger"):
                    if getattr(options, name) is not None:
                        raise OptionError(name, "needs pyspark 4.2 or later (admission control of Python sources)")
            return LogStreamReader(options, schema)
        return NSQStreamReader(SourceOptions.parse(self.options, streaming=True))

    def _sink(self, schema: StructType) -> SinkOptions:
        from txnsq.spark.batching import check_sink_schema

        options = SinkOptions.parse(self.options)
        check_sink_schema([(f.name, f.dataType.typeName()) for f in schema.fields], options.topic)
        if options.idempotent and not options.metaq_addresses:
            options.metaq_addresses = discover_metaq_addresses(self.options)
            if not options.metaq_addresses:
                raise OptionError("nsqd_http_addresses", "lists no nsqd with a MetaQ listener (--metaq-address)")
        return options

    def writer(self, schema: StructType, overwrite: bool) -> "NSQWriter":
        return NSQWriter(self._sink(schema))

    def streamWriter(self, schema: StructType, overwrite: bool) -> "NSQStreamWriter":
        return NSQStreamWriter(self._sink(schema))


def source_mode(options: Mapping[str, str]) -> Optional[List[str]]:
    """
    Which mode a source reads in: the MetaQ addresses of the offset mode,
    or None for the channel mode.

    ``mode=channel`` or ``mode=offsets`` decides.  Otherwise (``auto``)
    any offset option (``starting_offsets``, ``metaq_addresses``, ...)
    means offsets; without one, offsets when the nsqds found (through
    ``lookupd_http_addresses``) serve MetaQ and keep the topic retained,
    else the channel.

    :raises OptionError: a bad ``mode``, offset options with
        ``mode=channel``, or offsets wanted and no MetaQ listener found.
    """
    mode = (_get(options, "mode") or "auto").lower()
    if mode not in ("auto", "offsets", "channel"):
        raise OptionError("mode", "must be auto, offsets or channel, not %r" % (mode,))
    given = [name for name in OFFSET_OPTIONS if _get(options, name)]
    if mode == "channel":
        if given:
            raise OptionError(given[0], "belongs to the offset mode, and mode is channel")
        return None
    wanted = mode == "offsets" or bool(given)
    if not wanted and _get(options, "nsqd_tcp_addresses"):
        # TCP addresses tell nothing of MetaQ: the channel mode, as before.
        return None
    addresses = discover_metaq_addresses(options)
    if not addresses:
        if wanted:
            raise OptionError(
                given[0] if given else "mode",
                "needs the topic's log over MetaQ: give metaq_addresses, or nsqd_http_addresses or "
                "lookupd_http_addresses of nsqds started with --metaq-address",
            )
        return None
    if wanted:
        return addresses
    topic = _get(options, "topic") or ""
    for address in addresses:
        client = LogOptions(topic=topic, metaq_addresses=addresses).connect(address)
        try:
            if topic_partitions(client, topic) is None:
                return None
        finally:
            client.close()
    return addresses


# -- offset mode -------------------------------------------------------------------


class LogPartition(InputPartition):
    """One :class:`ReadRange <txnsq.spark.offsets.ReadRange>`: a Spark task's records."""

    def __init__(self, piece: ReadRange) -> None:
        InputPartition.__init__(self, (piece.key, piece.start, piece.end))
        self.piece = piece


def _arrow_schema(schema: StructType) -> Any:
    """The Arrow schema Spark expects of ``read()``'s batches for ``schema``."""
    try:
        from pyspark.sql.pandas.types import to_arrow_schema

        return to_arrow_schema(schema, timezone="UTC")
    except Exception:  # pragma: no cover - older pyspark
        return ARROW_SCHEMA


class _LogReading:
    """What the offset mode's batch and stream readers share."""

    def __init__(self, options: LogOptions, schema: StructType) -> None:
        self.options = options
        self.arrow_schema: Any = _arrow_schema(schema)
        self._view: Optional[LogView] = None

    def view(self) -> LogView:
        if self._view is None:
            self._view = LogView(self.options)
        return self._view

    def __getstate__(self) -> dict:
        # Sockets stay on the driver; executors only read().
        state = dict(self.__dict__)
        state["_view"] = None
        return state

    def read(self, partition: InputPartition) -> Iterator[Any]:
        if not isinstance(partition, LogPartition):
            # Spark plans an empty read (nothing between the offsets) as
            # one InputPartition(None).
            return iter(())
        return read_range(self.options, partition.piece, self.arrow_schema)


class LogBatchReader(_LogReading, DataSourceReader):
    """
    ``spark.read.format("nsq")`` of a retained topic: the records from
    ``starting_offsets`` (default earliest) to ``ending_offsets`` (default
    latest), read by executors; nothing is consumed.
    """

    def partitions(self) -> List[InputPartition]:  # type: ignore[override]
        view = self.view()
        try:
            spans = view.ranges()
            start = view.resolve(self.options.starting_offsets, spans, "starting_offsets")
            end = view.resolve(self.options.ending_offsets, spans, "ending_offsets")
            for key, offset in end.items():
                if offset < start[key]:
                    raise OffsetSourceError(
                        "nsq source: topic %s partition %s: ending offset %d is before the starting offset %d"
                        % (self.options.topic, key, offset, start[key])
                    )
            return [LogPartition(piece) for piece in plan_ranges(view, start, end)]
        finally:
            view.close()
            self._view = None


class LogStreamReader(_LogReading, DataSourceStreamReader, SupportsTriggerAvailableNow):
    """
    ``spark.readStream.format("nsq")`` of a retained topic, exactly once
    with an idempotent sink.

    Offsets ``{partition: byte offset}`` live in Spark's checkpoint;
    ``latestOffset`` asks nsqd for each partition's next offset (capped by
    the read limit, and by the target of Trigger.AvailableNow);
    ``partitions`` turns a batch's offsets into byte ranges; executors
    read them with MetaQ ``get``.  Nothing is held on the broker, and
    ``commit`` has nothing to do: a replayed batch reads the same records.
    """

    def __init__(self, options: LogOptions, schema: StructType) -> None:
        super().__init__(options, schema)
        self._target: Optional[Dict[str, int]] = None

    def initialOffset(self) -> dict:
        view = self.view()
        return view.resolve(self.options.starting_offsets, view.ranges(), "starting_offsets")

    def getDefaultReadLimit(self) -> Any:
        if self.options.max_offsets_per_trigger is not None:
            return ReadMaxRows(self.options.max_offsets_per_trigger)
        if self.options.max_bytes_per_trigger is not None:
            return ReadMaxBytes(self.options.max_bytes_per_trigger)
        return ReadAllAvailable()

    def prepareForTriggerAvailableNow(self) -> None:
        self._target = {key: span[1] for key, span in self.view().ranges().items()}

    def reportLatestOffset(self) -> Optional[dict]:
        return {key: span[1] for key, span in self.view().ranges().items()}

    def latestOffset(self, start: Optional[dict] = None, limit: Any = None) -> dict:
        view = self.view()
        spans = view.ranges()
        start = dict(start or {})
        begin = {key: max(start.get(key, span[0]), span[0]) for key, span in spans.items()}
        ends: Dict[str, int] = {}
        for key, span in spans.items():
            end = span[1]
            if self._target is not None:
                end = min(end, self._target.get(key, begin[key]))
            ends[key] = max(end, start.get(key, end) if key in start else begin[key])
        pending = [key for key in ends if ends[key] > begin[key]]
        max_rows = getattr(limit, "max_rows", None)
        max_bytes = getattr(limit, "max_bytes", None)
        if isinstance(limit, ReadAllAvailable) or limit is None:
            max_rows = max_bytes = None
        elif self.options.max_bytes_per_trigger is not None and max_bytes is None:
            max_bytes = self.options.max_bytes_per_trigger
        if pending and max_bytes:
            share = max(1, max_bytes // len(pending))
            for key in pending:
                ends[key] = view.after_bytes(key, begin[key], ends[key], share)
        if pending and max_rows:
            share = max(1, -(-max_rows // len(pending)))
            for key in pending:
                ends[key] = view.after_records(key, begin[key], ends[key], share)
        for key, offset in start.items():
            ends.setdefault(key, offset)
        return ends

    def partitions(self, start: dict, end: dict) -> Sequence[InputPartition]:
        view = self.view()
        spans = view.ranges()
        begin: Dict[str, int] = {}
        for key, offset in end.items():
            first = start.get(key, spans[key][0] if key in spans else 0)
            if key in spans and first < spans[key][0] < offset + 1:
                first = view.lost(key, first, min(spans[key][0], offset), "starting")
            begin[key] = first
        return [LogPartition(piece) for piece in plan_ranges(view, begin, end)]

    def commit(self, end: dict) -> None:
        pass

    def stop(self) -> None:
        if self._view is not None:
            self._view.close()
            self._view = None


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
    message) and FINs what it read only once Spark has taken every row.

    ``read()`` yields Arrow record batches of :data:`_DRAIN_CHUNK` rows,
    each of which Spark writes on before it asks for the next; the FINs
    go out when Spark asks for more after the last.  A task that fails or
    is killed before then (an error in the read or in the operators
    consuming its rows, a cancelled job, a dead worker) leaves its
    messages unfinished, and nsqd delivers them again.
    """

    def __init__(self, options: SourceOptions, schema: Optional[StructType] = None) -> None:
        self.options = options
        self.arrow_schema = _arrow_schema(schema) if schema is not None else None

    def partitions(self) -> Sequence[InputPartition]:
        from txnsq.spark.blocking import BlockingConnection
        from txnsq.spark.consumer import DEFAULT_MAX_RDY, nsqd_addresses

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

    def read(self, partition: InputPartition) -> Iterator[Any]:
        from txnsq.spark.consumer import drain_chunks

        assert isinstance(partition, _DrainPartition)
        topic = self.options.topic
        chunks = drain_chunks(partition.address, self.options, partition.count, _DRAIN_CHUNK)
        try:
            for chunk in chunks:
                if self.arrow_schema is None:
                    for message in chunk:
                        yield to_row(message, topic)
                else:
                    yield to_batch(chunk, topic, self.arrow_schema)
        finally:
            # Stopped early: no FIN, the connection closes, nsqd requeues.
            chunks.close()


#: Rows per Arrow batch of a batch read (Spark writes each batch on before
#: asking for the next, so the FINs wait for the last).
_DRAIN_CHUNK = 256


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
    same rows when Spark asks again).  The next ``latestOffset`` call,
    which Spark makes only once batch ``n`` is committed, FINs its
    messages and deletes its file (``commit``, which comes a batch later,
    does the same for anything left).
    """

    def __init__(self, options: SourceOptions) -> None:
        self.options = options
        assert options.spool_path is not None
        self.spool = Spool(options.spool_path)
        self._consumer: Optional[StreamConsumer] = None
        self._last: Optional[int] = None

    def _started(self) -> StreamConsumer:
        from txnsq.spark.consumer import StreamConsumer

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
        # Spark runs micro-batches one after the other and asks for the
        # next end only once the last batch's commit log entry is written:
        # batch ``base`` is done.  FIN it now, rather than in commit(),
        # which Spark calls only when it plans the batch after the next
        # (an idle stream would otherwise keep its last batch in flight
        # until nsqd timed it out and delivered it again).
        if consumer.held():
            consumer.commit(base)
            self.spool.delete_through(base)
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


def _stream_batch_id() -> int:
    """The micro-batch a streaming write task belongs to (Spark's local property)."""
    from pyspark import TaskContext

    context = TaskContext.get()
    value = context.getLocalProperty("streaming.sql.batchId") if context is not None else None
    if value is None:
        raise RuntimeError("nsq sink: idempotent=true found no micro-batch id in the task")
    return int(value)


def _publish(iterator: Iterator[Any], options: SinkOptions, batch_id: Optional[int]) -> NSQCommitMessage:
    from txnsq.spark.publisher import publish_rows, publish_rows_idempotent

    partition = _partition_id()
    if options.idempotent:
        number = options.batch_id if batch_id is None else batch_id
        return NSQCommitMessage(publish_rows_idempotent(iterator, options, partition, number), partition)
    return NSQCommitMessage(publish_rows(iterator, options, partition), partition)


def _total(messages: Sequence[Optional[WriterCommitMessage]]) -> int:
    return sum(m.count for m in messages if isinstance(m, NSQCommitMessage))


class NSQWriter(DataSourceWriter):
    """``df.write.format("nsq")``: each task MPUBs its rows to one nsqd."""

    def __init__(self, options: SinkOptions) -> None:
        self.options = options
        #: Set by :meth:`commit`: how many messages the job published.
        self.published = 0

    def write(self, iterator: Iterator[Any]) -> NSQCommitMessage:
        return _publish(iterator, self.options, None)

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
        return _publish(iterator, self.options, _stream_batch_id() if self.options.idempotent else None)

    def commit(self, messages: List[Optional[WriterCommitMessage]], batchId: int) -> None:
        count = _total(messages)
        self.published += count
        _log.info("nsq sink: batch %d published %d messages", batchId, count)

    def abort(self, messages: List[Optional[WriterCommitMessage]], batchId: int) -> None:
        _log.warning("nsq sink: batch %d failed after %d messages were published", batchId, _total(messages))
