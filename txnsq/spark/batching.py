# -*- test-case-name: tests.test_spark_batching -*-
"""
The sink's side without Spark: turning rows into (topic, body) pairs with
errors that name the row, and grouping bodies into MPUB commands no larger
than nsqd accepts (``--max-msg-size`` per message, ``--max-body-size`` per
MPUB body).
"""

from __future__ import annotations

from typing import Any, Dict, List, Optional, Sequence, Tuple

from txnsq.protocol.names import is_valid_topic_name

__all__ = ["MPubBatcher", "RowError", "check_sink_schema", "row_message"]

#: MPUB's body: a 4-byte count, then a 4-byte size before each message.
_COUNT_SIZE = 4
_SIZE_SIZE = 4


class RowError(ValueError):
    """A row cannot be published; the message says which row and why."""


def check_sink_schema(fields: Sequence[Tuple[str, str]], topic_option: Optional[str]) -> None:
    """
    Refuse, before anything is written, a DataFrame the sink cannot publish.

    :param fields: ``(name, Spark type name)`` of each column, e.g.
        ``("body", "binary")``.
    :raises ValueError: no ``body`` column, a ``body`` neither binary nor
        string, or neither a ``topic`` option nor a string ``topic`` column.
    """
    types = {name.lower(): kind for name, kind in fields}
    columns = ", ".join(name for name, _ in fields) or "none"
    if "body" not in types:
        raise ValueError(
            "nsq sink: the DataFrame needs a 'body' column (binary or string); its columns are: %s" % (columns,)
        )
    if types["body"] not in ("binary", "string"):
        raise ValueError(
            "nsq sink: column 'body' must be binary or string, not %s (cast it, e.g. to_json(...) or "
            "col('body').cast('binary'))" % (types["body"],)
        )
    if topic_option is None:
        if "topic" not in types:
            raise ValueError("nsq sink: set the 'topic' option or give the DataFrame a 'topic' column")
        if types["topic"] != "string":
            raise ValueError("nsq sink: column 'topic' must be a string, not %s" % (types["topic"],))


def row_message(row: Any, index: int, topic_option: Optional[str], max_msg_size: int) -> Tuple[str, bytes]:
    """
    The topic and body to publish for ``row`` (a pyspark ``Row`` or any
    mapping with ``body`` and maybe ``topic``).

    :param index: the row's position in its task, for error messages.
    :raises RowError: a null or empty body, a body larger than
        ``max_msg_size``, or a missing or invalid per-row topic.
    """
    body = row["body"]
    if body is None:
        raise RowError("nsq sink: row %d has a null body" % (index,))
    if isinstance(body, str):
        body = body.encode("utf-8")
    elif isinstance(body, (bytearray, memoryview)):
        body = bytes(body)
    elif not isinstance(body, bytes):
        raise RowError("nsq sink: row %d has a body of type %s, not binary or string" % (index, type(body).__name__))
    if topic_option is not None:
        topic = topic_option
    else:
        topic = row["topic"]
        if not topic or not isinstance(topic, str) or not is_valid_topic_name(topic):
            raise RowError("nsq sink: row %d has an invalid topic %r" % (index, topic))
    if not body:
        raise RowError("nsq sink: row %d (topic %s) has an empty body, which nsqd refuses" % (index, topic))
    if len(body) > max_msg_size:
        raise RowError(
            "nsq sink: row %d (topic %s) has a body of %d bytes, more than the server's max_msg_size %d"
            % (index, topic, len(body), max_msg_size)
        )
    return topic, body


class MPubBatcher:
    """
    Groups bodies by topic into MPUB batches whose body fits ``max_body_size``.

    :meth:`add` returns the batches that became full; :meth:`flush` the rest.
    """

    def __init__(self, max_body_size: int, max_count: int = 10000) -> None:
        """
        :param max_body_size: the largest MPUB body nsqd accepts.
        :param max_count: also close a batch at this many messages.
        """
        self.max_body_size = max_body_size
        self.max_count = max_count
        self._pending: Dict[str, Tuple[List[bytes], List[int]]] = {}

    def add(self, topic: str, body: bytes) -> List[Tuple[str, List[bytes]]]:
        """
        Queue ``body`` for ``topic``; the batches (``(topic, bodies)``) that
        must be sent first so that the new body fits.

        :raises RowError: the body alone exceeds ``max_body_size``.
        """
        cost = _SIZE_SIZE + len(body)
        if _COUNT_SIZE + cost > self.max_body_size:
            raise RowError(
                "nsq sink: a body of %d bytes does not fit in max_body_size %d" % (len(body), self.max_body_size)
            )
        ready: List[Tuple[str, List[bytes]]] = []
        entry = self._pending.get(topic)
        if entry is None:
            entry = self._pending[topic] = ([], [_COUNT_SIZE])
        bodies, size = entry
        if bodies and (size[0] + cost > self.max_body_size or len(bodies) >= self.max_count):
            ready.append((topic, list(bodies)))
            bodies.clear()
            size[0] = _COUNT_SIZE
        bodies.append(body)
        size[0] += cost
        return ready

    def flush(self) -> List[Tuple[str, List[bytes]]]:
        """Every batch still queued (and forget them)."""
        ready = [(topic, bodies) for topic, (bodies, _) in self._pending.items() if bodies]
        self._pending = {}
        return ready
