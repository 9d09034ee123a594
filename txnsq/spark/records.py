# -*- test-case-name: tests.test_spark_spool -*-
"""
The messages the ``nsq`` source reads, and the rows they become:
``id string, timestamp timestamp, attempts int, topic string, nsqd string,
body binary``.
"""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from typing import Any, NamedTuple, Sequence, Tuple

__all__ = ["SOURCE_SCHEMA", "NSQMessage", "to_batch", "to_row"]

#: The source's schema (a DDL string, as ``DataSource.schema`` may return).
SOURCE_SCHEMA = "id string, timestamp timestamp, attempts int, topic string, nsqd string, body binary"

_EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)

Row = Tuple[str, datetime, int, str, str, bytes]


class NSQMessage(NamedTuple):
    """
    One message as delivered.

    :ivar id: the 16-byte message id (the deduplication key).
    :ivar timestamp: nanoseconds since the epoch, set by nsqd at publication.
    :ivar attempts: how many times nsqd has delivered it (1 at first).
    :ivar body: the payload.
    :ivar nsqd: the ``host:port`` it came from.
    """

    id: bytes
    timestamp: int
    attempts: int
    body: bytes
    nsqd: str


def to_row(message: NSQMessage, topic: str) -> Row:
    """The source row of ``message`` (the timestamp in UTC, to the microsecond)."""
    return (
        message.id.decode("ascii", "replace"),
        _EPOCH + timedelta(microseconds=message.timestamp // 1000),
        message.attempts,
        topic,
        message.nsqd,
        message.body,
    )


def to_batch(messages: Sequence[NSQMessage], topic: str, schema: Any) -> Any:
    """
    The source rows of ``messages`` as one ``pyarrow.RecordBatch`` of
    ``schema`` (the Arrow form of :data:`SOURCE_SCHEMA`; timestamps in
    microseconds, UTC): what Spark writes on as soon as ``read()`` yields
    it, unlike rows, which it gathers into batches of its own.
    """
    import pyarrow as pa

    fields = schema.names
    columns = {
        "id": pa.array([m.id.decode("ascii", "replace") for m in messages], pa.string()),
        "timestamp": pa.array([m.timestamp // 1000 for m in messages], pa.int64()).cast(schema.field("timestamp").type),
        "attempts": pa.array([m.attempts for m in messages], pa.int32()),
        "topic": pa.array([topic] * len(messages), pa.string()),
        "nsqd": pa.array([m.nsqd for m in messages], pa.string()),
        "body": pa.array([m.body for m in messages], pa.binary()),
    }
    return pa.RecordBatch.from_arrays([columns[name].cast(schema.field(name).type) for name in fields], schema=schema)
