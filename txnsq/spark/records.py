# -*- test-case-name: tests.test_spark_spool -*-
"""
The messages the ``nsq`` source reads, and the rows they become:
``id string, timestamp timestamp, attempts int, topic string, nsqd string,
body binary``.
"""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from typing import NamedTuple, Tuple

__all__ = ["SOURCE_SCHEMA", "NSQMessage", "to_row"]

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
