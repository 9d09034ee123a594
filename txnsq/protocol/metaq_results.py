# -*- test-case-name: tests.test_client_metaq -*-
"""
What MetaQ replies mean to a client, shared by the Twisted client
(:mod:`txnsq.client.metaq`) and the blocking one Spark's executors use
(:mod:`txnsq.spark.metaq`): the errors a refusal becomes, the records a
``get`` returns (framed and checksummed in one pass), and the results of
``put``, ``offset``, ``stats``, ``version`` and ``auth``.

Sans-IO: replies come in as the codec's :class:`ResultResponse` and
:class:`ValueResponse` (:mod:`txnsq.protocol.metaq`), requests go out as
its request objects.
"""

from __future__ import annotations

import struct
import zlib
from typing import List, Optional, Tuple, Union

from txnsq.protocol.message_id import id_time, id_time_threshold
from txnsq.protocol.metaq import MOVED, NOT_FOUND, SUCCESS, PutRequest, ResultResponse, ValueResponse
from txnsq.protocol.metaq_record import FLAG_ATTRIBUTE, HEADER_LENGTH, checksum, join_attribute, split_attribute

__all__ = [
    "DEFAULT_GROUP",
    "DEFAULT_MAX_REPLY_SIZE",
    "GetResult",
    "LogRecord",
    "MetaqConnectionError",
    "MetaqEndOfPartition",
    "MetaqMoved",
    "MetaqNotFound",
    "MetaqProtocolError",
    "MetaqRecordTooLarge",
    "MetaqResultError",
    "MetaqTimeoutError",
    "body_text",
    "get_result",
    "offset_result",
    "put_request",
    "put_result",
    "refusal",
    "records_since",
    "text_result",
]

#: The consumer group named in ``get`` and ``offset`` when none is given.
#: A MetaQ broker only uses it for statistics: offsets are the client's.
DEFAULT_GROUP = "txnsq"

#: The largest reply accepted by default (a ``value`` is at most the
#: ``get``'s ``maxSize``): 16 MiB.
DEFAULT_MAX_REPLY_SIZE = 16 * 1024 * 1024

# A record's header (docs/metaq.md): data length, checksum, message id, flag.
_unpack_header = struct.Struct(">iiqi").unpack_from


# ---------------------------------------------------------------------------
# Errors


class MetaqResultError(Exception):
    """
    The broker refused a request: ``result <code>`` other than 200.

    :ivar code: the reply's code (400, 401, 403, 404, 500, ...).
    :ivar message: the reply's body as text.
    """

    def __init__(self, code: int, message: str) -> None:
        Exception.__init__(self, "%d %s" % (code, message))
        self.code = code
        self.message = message


class MetaqMoved(MetaqResultError):
    """
    ``get`` answered 301: the broker cannot serve the offset asked for
    (outside the partition's range, or not a record boundary).

    :ivar offset: the offset to read from instead (the nearest valid one).
    """

    def __init__(self, code: int, message: str, offset: int) -> None:
        MetaqResultError.__init__(self, code, message)
        self.offset = offset


class MetaqNotFound(MetaqResultError):
    """404: no such topic or partition (or, as the subclass, no message yet)."""


class MetaqEndOfPartition(MetaqNotFound):
    """
    404 ``Could not find message at position <offset>``: the partition has
    no message at the offset yet (it is its end); poll again later.

    :ivar offset: the offset asked for.
    """

    def __init__(self, code: int, message: str, offset: int) -> None:
        MetaqNotFound.__init__(self, code, message)
        self.offset = offset


class MetaqRecordTooLarge(Exception):
    """
    ``get`` returned no record while the partition has one at the offset:
    the record is larger than the largest ``maxSize`` allowed.

    :ivar offset: where the record starts.
    :ivar max_size: the largest ``maxSize`` tried.
    """

    def __init__(self, offset: int, max_size: int) -> None:
        Exception.__init__(
            self, "the record at offset %d is larger than %d bytes" % (offset, max_size)
        )
        self.offset = offset
        self.max_size = max_size


class MetaqConnectionError(ConnectionError):
    """The connection could not be made, or was lost or closed before the reply."""


class MetaqProtocolError(MetaqConnectionError):
    """The broker sent what the protocol does not allow; the connection is closed."""


class MetaqTimeoutError(Exception):
    """No reply within the request timeout (the connection stays open)."""


# ---------------------------------------------------------------------------
# Results, shared with the blocking client


class LogRecord:
    """
    One message read by ``get``.

    :ivar id: the message id (unsigned 64-bit, as nsqd's ids are).
    :ivar flag: the record's flag (bit 0: it has an attribute).
    :ivar attribute: the attribute, None without one.
    :ivar payload: the message body.
    :ivar offset: where the record starts in the partition.
    :ivar size: bytes of the record (20-byte header included); the next
        record starts at ``offset + size``.
    """

    __slots__ = ("id", "flag", "attribute", "payload", "offset", "size")

    def __init__(
        self, id: int, flag: int, attribute: Optional[bytes], payload: bytes, offset: int, size: int
    ) -> None:
        self.id = id
        self.flag = flag
        self.attribute = attribute
        self.payload = payload
        self.offset = offset
        self.size = size

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, LogRecord):
            return NotImplemented
        return all(getattr(self, name) == getattr(other, name) for name in self.__slots__)

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return "LogRecord(id=%d, offset=%d, flag=%d, attribute=%r, payload=%r)" % (
            self.id,
            self.offset,
            self.flag,
            self.attribute,
            self.payload if len(self.payload) <= 64 else self.payload[:64] + b"...",
        )


class GetResult:
    """
    What a ``get`` read.

    :ivar offset: the offset the records were read from (the one asked
        for, or the one a followed 301 gave).
    :ivar records: the records, in order.
    :ivar next_offset: where the next ``get`` starts: after the last record.
    """

    __slots__ = ("offset", "records", "next_offset")

    def __init__(self, offset: int, records: List[LogRecord], next_offset: int) -> None:
        self.offset = offset
        self.records = records
        self.next_offset = next_offset

    def __repr__(self) -> str:
        return "GetResult(offset=%d, records=<%d>, next_offset=%d)" % (
            self.offset,
            len(self.records),
            self.next_offset,
        )


def body_text(body: bytes) -> str:
    """A reply body as text (bytes that are not UTF-8 replaced)."""
    return body.decode("utf-8", "replace")


def refusal(reply: ResultResponse, offset: Optional[int] = None) -> MetaqResultError:
    """The exception for a ``result`` other than 200."""
    message = body_text(reply.body)
    if reply.code == MOVED:
        try:
            moved = int(reply.body)
        except ValueError:
            raise MetaqProtocolError("301 without an offset: %r" % (reply.body[:64],)) from None
        return MetaqMoved(reply.code, message, moved)
    if reply.code == NOT_FOUND:
        if offset is not None and message.startswith("Could not find message at position"):
            return MetaqEndOfPartition(reply.code, message, offset)
        return MetaqNotFound(reply.code, message)
    return MetaqResultError(reply.code, message)


def _result(reply: Union[ResultResponse, ValueResponse], command: str) -> ResultResponse:
    if not isinstance(reply, ResultResponse):
        raise MetaqProtocolError("a value reply to %s" % (command,))
    if reply.code != SUCCESS:
        raise refusal(reply)
    return reply


def put_request(
    topic: str, partition: int, body: bytes, flag: int = 0, attribute: Optional[bytes] = None, opaque: int = 0
) -> PutRequest:
    """
    The ``put`` of ``body`` (with ``attribute`` when given: the flag's bit
    0 is then set) carrying its checksum, as Java clients since 1.4.4 do.
    """
    if attribute is not None:
        flag |= FLAG_ATTRIBUTE
    elif flag & FLAG_ATTRIBUTE:
        raise ValueError("flag %d announces an attribute but none is given" % (flag,))
    data = join_attribute(attribute, body)
    return PutRequest(topic, partition, data, flag, opaque, checksum(data))


def put_result(reply: Union[ResultResponse, ValueResponse]) -> Tuple[int, int, int]:
    """
    ``(msg_id, partition, offset)`` of a ``put``'s reply; ``msg_id`` as
    its unsigned 64-bit pattern.

    :raises MetaqResultError: the put was refused.
    :raises MetaqProtocolError: the reply is not a put's.
    """
    reply = _result(reply, "put")
    try:
        msg_id, partition, offset = reply.put_result()
    except ValueError as error:
        raise MetaqProtocolError(str(error)) from None
    return msg_id & 0xFFFFFFFFFFFFFFFF, partition, offset


def get_result(reply: Union[ResultResponse, ValueResponse], offset: int) -> GetResult:
    """
    The records of a reply to ``get`` at ``offset``; each record's offset
    is ``offset`` plus its position in the reply.

    :raises MetaqMoved: 301, with the offset to use.
    :raises MetaqEndOfPartition: 404, no message at ``offset`` yet.
    :raises MetaqNotFound: 404, no such topic or partition.
    :raises MetaqResultError: any other refusal (400 bad max size, 401, 403).
    :raises MetaqProtocolError: records that are cut, corrupt (checksum)
        or with a bad attribute.
    """
    if isinstance(reply, ResultResponse):
        raise refusal(reply, offset) if reply.code != SUCCESS else MetaqProtocolError(
            "result 200 instead of value to get"
        )
    data = reply.data
    records: List[LogRecord] = []
    append = records.append
    unpack = _unpack_header
    crc32 = zlib.crc32
    end = len(data)
    pos = 0
    # One pass: frame, checksum and split each record (the codec's
    # validate_records and iter_records would walk the data twice).
    while pos < end:
        if end - pos < HEADER_LENGTH:
            raise MetaqProtocolError("record header cut short at offset %d" % (offset + pos,))
        size, stored, msg_id, flag = unpack(data, pos)
        start = pos + HEADER_LENGTH
        following = start + size
        if size < 0 or following > end:
            raise MetaqProtocolError("record cut short at offset %d" % (offset + pos,))
        body = data[start:following]
        if crc32(body) & 0x7FFFFFFF != stored:
            raise MetaqProtocolError("checksum mismatch in the record at offset %d" % (offset + pos,))
        if flag & FLAG_ATTRIBUTE:
            try:
                attribute, body = split_attribute(flag, body)
            except ValueError as error:
                raise MetaqProtocolError("record at offset %d: %s" % (offset + pos, error)) from None
        else:
            attribute = None
        append(LogRecord(msg_id & 0xFFFFFFFFFFFFFFFF, flag, attribute, body, offset + pos, following - pos))
        pos = following
    return GetResult(offset, records, offset + end)


def offset_result(reply: Union[ResultResponse, ValueResponse]) -> int:
    """
    The offset in a reply to ``offset``.

    :raises MetaqResultError: refused (404 no such partition, ...).
    :raises MetaqProtocolError: the body is not a number.
    """
    reply = _result(reply, "offset")
    try:
        return int(reply.body)
    except ValueError:
        raise MetaqProtocolError("offset reply is not a number: %r" % (reply.body[:64],)) from None


def records_since(records: List["LogRecord"], timestamp_ms: int) -> List["LogRecord"]:
    """
    The records published at or after unix milliseconds ``timestamp_ms``,
    by the time in their nsqd message ids (at the ids' resolution: one
    published less than ~1.05 ms before can be kept), in order.  An
    ``offset`` by time (:meth:`MetaqClient.offset_for_time`) gives a start
    at or before the first of them; this drops the older ones read after it.
    """
    threshold = id_time_threshold(timestamp_ms * 1000000)
    return [record for record in records if id_time(record.id) >= threshold]


def text_result(reply: Union[ResultResponse, ValueResponse], command: str) -> str:
    """
    The text body of a successful ``stats``, ``version`` or ``auth`` reply.

    :raises MetaqResultError: refused (403 for a wrong secret, ...).
    """
    return body_text(_result(reply, command).body)
