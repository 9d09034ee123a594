# -*- test-case-name: tests.test_protocol_metaq -*-
"""
The MetaQ (Metamorphosis) text protocol, sans-IO: what both sides of the
wire say.

Every request is one line, fields split on single spaces and ended by
``\\r\\n``; the last field is the *opaque*, a signed 32-bit number the
server copies into its reply so that a client can match replies to
requests.  ``put`` is followed by a body of the length its line declares::

    put <topic> <partition> <length> <flag> [<checksum>] [<transactionKey>] <opaque>\\r\\n<body>
    get <topic> <group> <partition> <offset> <maxSize> <opaque>\\r\\n
    offset <topic> <group> <partition> <offset> <opaque>\\r\\n
    offset <topic> <group> <partition> @<unixMs> <opaque>\\r\\n   (txnsq's own: by time)
    stats [<item>] <opaque>\\r\\n
    version [<opaque>]\\r\\n
    quit\\r\\n
    auth <secret> <opaque>\\r\\n          (txnsq's own extension)

Replies::

    result <code> <length> <opaque>\\r\\n<body of length bytes>
    value <totalLength> <opaque>\\r\\n<whole records, totalLength bytes>

Codes have their HTTP meanings (:data:`SUCCESS` 200, :data:`MOVED` 301,
:data:`BAD_REQUEST` 400, :data:`FORBIDDEN` 403, :data:`NOT_FOUND` 404,
:data:`INTERNAL_SERVER_ERROR` 500, ...).

Server side, :class:`MetaqRequestParser` turns bytes into requests
(:class:`PutRequest`, :class:`GetRequest`, :class:`OffsetRequest`,
:class:`StatsRequest`, :class:`VersionRequest`, :class:`QuitRequest`,
:class:`AuthRequest`) and bad input into :class:`MetaqError` items that
carry the reply's code and text and say whether the connection can go on;
``feed`` never raises for bad bytes.  The ``encode_*`` functions build the
replies.  Client side, :class:`MetaqResponseParser` reads ``result`` and
``value`` replies and every request class has an ``encode()``.

The record layout ``value`` replies carry is in
:mod:`txnsq.protocol.metaq_record`; the incremental parsers of both sides
are in :mod:`txnsq.protocol.metaq_parser`.  This module holds the codes,
the requests and replies as values, and the reply encoders.

Facts the MetaQ text leaves open follow the Metamorphosis Java broker: the
put forms with a checksum, the ``stats`` and ``version`` defaults, the put
reply body ``"<msgId> <partition> <offset>"``, the 301 and 404 replies to
``get``.
"""


from __future__ import annotations

import re
import zlib
from typing import List, Optional, Tuple, Union

from txnsq.protocol.metaq_record import (
    _INT32_MAX,
    _INT32_MIN,
    _INT64_MAX,
    _INT64_MIN,
    FLAG_ATTRIBUTE,
    Record,
    _attribute_problem,
    checksum,
    iter_records,
    split_attribute,
)

__all__ = [
    "AuthRequest",
    "BAD_REQUEST",
    "DEFAULT_MAX_BODY_SIZE",
    "DEFAULT_MAX_LINE_LENGTH",
    "DEFAULT_OPAQUE",
    "FORBIDDEN",
    "GATEWAY_TIMEOUT",
    "GetRequest",
    "INTERNAL_SERVER_ERROR",
    "MOVED",
    "MetaqError",
    "NOT_FOUND",
    "OffsetRequest",
    "PutRequest",
    "QuitRequest",
    "Request",
    "Response",
    "ResultResponse",
    "SERVICE_UNAVAILABLE",
    "SUCCESS",
    "StatsRequest",
    "UNAUTHORIZED",
    "ValueResponse",
    "VersionRequest",
    "encode_bad_max_size",
    "encode_moved",
    "encode_offset_result",
    "encode_position_not_found",
    "encode_put_result",
    "encode_result",
    "encode_topic_not_found",
    "encode_value",
    "encode_value_header",
    "encode_version_result",
]

# ---------------------------------------------------------------------------
# Codes (MetaQ's HttpStatus)

SUCCESS = 200
MOVED = 301
BAD_REQUEST = 400
UNAUTHORIZED = 401
FORBIDDEN = 403
NOT_FOUND = 404
INTERNAL_SERVER_ERROR = 500
SERVICE_UNAVAILABLE = 503
GATEWAY_TIMEOUT = 504

#: The opaque of a request that carries none (``quit``, ``version`` and
#: ``stats`` without one), and of an error about a line whose opaque could
#: not be read: Java's ``Integer.MAX_VALUE``, as the Java broker uses.
DEFAULT_OPAQUE = 2**31 - 1

#: Longest request or reply line, ``\\r\\n`` excluded.  Topic and group
#: names are at most 64 bytes; the room left is for transaction keys.
DEFAULT_MAX_LINE_LENGTH = 4096

#: Largest ``put`` body (attribute included) and ``value``/``result`` body.
DEFAULT_MAX_BODY_SIZE = 1024 * 1024

# Java's Integer.parseInt / Long.parseLong: an optional sign and ASCII
# digits, nothing else (Python's int() would also take spaces, "_" and
# non-ASCII digits).
_NUMBER = re.compile(rb"[+-]?[0-9]+").fullmatch


def _number(field: bytes, low: int, high: int) -> Optional[int]:
    """``field`` as a decimal number within ``low..high``, else None."""
    if _NUMBER(field) is None:
        return None
    value = int(field)
    if value < low or value > high:
        return None
    return value


def _int32(field: bytes) -> Optional[int]:
    # Up to 9 plain digits is always an int32 (bytes.isdigit is ASCII-only).
    if field.isdigit() and len(field) < 10:
        return int(field)
    return _number(field, _INT32_MIN, _INT32_MAX)


def _int64(field: bytes) -> Optional[int]:
    if field.isdigit() and len(field) < 19:
        return int(field)
    return _number(field, _INT64_MIN, _INT64_MAX)


def _fields(line: bytes) -> List[bytes]:
    """
    ``line`` split on single spaces as Java's ``Pattern.split``: empty
    fields inside stay, trailing empty fields go.
    """
    fields = line.split(b" ")
    while len(fields) > 1 and not fields[-1]:
        fields.pop()
    return fields


def _text(field: bytes) -> Optional[str]:
    """A name field as text (UTF-8, as Java decodes it), None if invalid."""
    try:
        return field.decode("utf-8")
    except UnicodeDecodeError:
        return None


def _show(line: bytes, limit: int = 80) -> str:
    """A line quoted for an error text, cut to ``limit`` bytes."""
    shown = line[:limit].decode("utf-8", "replace")
    if len(line) > limit:
        shown += "..."
    return repr(shown)


# ---------------------------------------------------------------------------
# Parsed items


class _Item:
    """Equality and repr over ``__slots__`` for the small value classes."""

    __slots__ = ()

    def _slot_names(self) -> Tuple[str, ...]:
        return self.__slots__

    def encode(self) -> bytes:
        """The item's bytes on the wire."""
        raise NotImplementedError()

    def __eq__(self, other: object) -> bool:
        if type(other) is not type(self):
            return NotImplemented
        return all(getattr(self, name) == getattr(other, name) for name in self._slot_names())

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        shown = []
        for name in self._slot_names():
            value = getattr(self, name)
            if isinstance(value, bytes) and len(value) > 64:
                shown.append("%s=<%d bytes>" % (name, len(value)))
            else:
                shown.append("%s=%r" % (name, value))
        return "%s(%s)" % (type(self).__name__, ", ".join(shown))


_SEPARATORS = re.compile(rb"[ \r\n]").search


def _line(*fields: Union[str, bytes, int]) -> bytes:
    """
    A request line of ``fields`` (text as UTF-8, numbers in decimal).

    :raises ValueError: a text field that is empty or holds a space, CR or
        LF (it would change the line's fields).
    """
    parts = []
    for field in fields:
        if isinstance(field, int):
            parts.append(b"%d" % (field,))
            continue
        part = field if isinstance(field, bytes) else field.encode("utf-8")
        if not part or _SEPARATORS(part) is not None:
            raise ValueError("%r cannot be a field of a request line" % (field,))
        parts.append(part)
    return b" ".join(parts) + b"\r\n"


class PutRequest(_Item):
    """
    ``put``: store ``data`` in ``topic``'s ``partition`` (-1: the broker
    picks one).

    :ivar data: the body; when ``flag & 1`` it starts with an attribute
        (checked by the parser), and it is a record's data as it stands.
    :ivar checksum: the client's :func:`checksum` of ``data`` (None when
        the line has none; the parser has checked it).
    :ivar transaction_key: the transaction the put belongs to, or None.
    """

    __slots__ = ("topic", "partition", "data", "flag", "checksum", "transaction_key", "opaque")

    command = "put"

    def __init__(
        self,
        topic: str,
        partition: int,
        data: bytes,
        flag: int = 0,
        opaque: int = 0,
        checksum: Optional[int] = None,
        transaction_key: Optional[str] = None,
    ) -> None:
        self.topic = topic
        self.partition = partition
        self.data = data
        self.flag = flag
        self.checksum = checksum
        self.transaction_key = transaction_key
        self.opaque = opaque

    def complete(self, body: bytes) -> object:
        """This put with ``body`` as its data, or the error the body makes (the parser's step)."""
        return _complete_put(self, body, True)

    @property
    def attribute(self) -> Optional[bytes]:
        """The message attribute, None without one."""
        return split_attribute(self.flag, self.data)[0]

    @property
    def payload(self) -> bytes:
        """The message body after the attribute."""
        return split_attribute(self.flag, self.data)[1]

    def encode(self) -> bytes:
        """
        The request's bytes: ``put topic partition length flag [checksum]
        [transactionKey] opaque\\r\\n`` and the data (the checksum field
        only when :attr:`checksum` is set, as Java clients since 1.4.4 send).

        :raises ValueError: a topic or transaction key that is empty or
            holds a space, CR or LF.
        """
        fields: List[Union[str, bytes, int]] = [b"put", self.topic, self.partition, len(self.data), self.flag]
        if self.checksum is not None:
            fields.append(self.checksum)
        if self.transaction_key is not None:
            fields.append(self.transaction_key)
        fields.append(self.opaque)
        return _line(*fields) + self.data


def _complete_put(put: PutRequest, body: bytes, verify: bool) -> object:
    """``put`` with its body, or the error its body makes."""
    put.data = body
    if put.flag & FLAG_ATTRIBUTE:
        problem = _attribute_problem(put.flag, body, 0, len(body))
        if problem is not None:
            return MetaqError(BAD_REQUEST, "put: " + problem, put.opaque, command="put")
    if verify and put.checksum is not None and put.checksum != -1:
        actual = zlib.crc32(body) & 0x7FFFFFFF
        if actual != put.checksum:
            return MetaqError(
                BAD_REQUEST,
                "put: checksum %d does not match the body's %d" % (put.checksum, actual),
                put.opaque,
                command="put",
            )
    return put



class GetRequest(_Item):
    """``get``: at most ``max_size`` bytes of whole records from ``offset``."""

    __slots__ = ("topic", "group", "partition", "offset", "max_size", "opaque")

    command = "get"

    def __init__(self, topic: str, group: str, partition: int, offset: int, max_size: int, opaque: int = 0) -> None:
        self.topic = topic
        self.group = group
        self.partition = partition
        self.offset = offset
        self.max_size = max_size
        self.opaque = opaque

    def encode(self) -> bytes:
        """``get topic group partition offset maxSize opaque\\r\\n``."""
        return _line(b"get", self.topic, self.group, self.partition, self.offset, self.max_size, self.opaque)


class OffsetRequest(_Item):
    """
    ``offset``: the valid offset nearest ``offset``; or, with
    ``timestamp_ms`` set (txnsq's extension, the field ``@<unix ms>``),
    where to start reading to get every record published at or after that
    time (``offset`` is then 0 and unused).
    """

    __slots__ = ("topic", "group", "partition", "offset", "opaque", "timestamp_ms")

    command = "offset"

    def __init__(
        self,
        topic: str,
        group: str,
        partition: int,
        offset: int,
        opaque: int = 0,
        timestamp_ms: Optional[int] = None,
    ) -> None:
        self.topic = topic
        self.group = group
        self.partition = partition
        self.offset = offset
        self.opaque = opaque
        self.timestamp_ms = timestamp_ms

    def encode(self) -> bytes:
        """
        ``offset topic group partition offset opaque\\r\\n``, or with
        ``timestamp_ms`` ``offset topic group partition @unixMs opaque\\r\\n``.
        """
        if self.timestamp_ms is not None:
            return _line(b"offset", self.topic, self.group, self.partition, b"@%d" % (self.timestamp_ms,), self.opaque)
        return _line(b"offset", self.topic, self.group, self.partition, self.offset, self.opaque)


class StatsRequest(_Item):
    """``stats``: the broker's statistics, all or one ``item`` (None: all)."""

    __slots__ = ("item", "opaque")

    command = "stats"

    def __init__(self, item: Optional[str] = None, opaque: int = DEFAULT_OPAQUE) -> None:
        self.item = item
        self.opaque = opaque

    def encode(self) -> bytes:
        """
        ``stats item opaque\\r\\n``; without an item, ``stats``, an empty
        item field and the opaque (two spaces before the opaque, as the Java
        client writes it, so that a Java broker does not take the opaque for
        an item).

        :raises ValueError: an item that holds a space, CR or LF.
        """
        if not self.item:
            return b"stats  %d\r\n" % (self.opaque,)
        return _line(b"stats", self.item, self.opaque)


class VersionRequest(_Item):
    """``version``: the broker's version; clients also send it as a heartbeat."""

    __slots__ = ("opaque",)

    command = "version"

    def __init__(self, opaque: int = DEFAULT_OPAQUE) -> None:
        self.opaque = opaque

    def encode(self) -> bytes:
        """``version opaque\\r\\n``."""
        return _line(b"version", self.opaque)


class QuitRequest(_Item):
    """``quit``: the broker closes the connection (no reply)."""

    __slots__ = ("opaque",)

    command = "quit"

    def __init__(self, opaque: int = DEFAULT_OPAQUE) -> None:
        self.opaque = opaque

    def encode(self) -> bytes:
        """``quit\\r\\n``."""
        return b"quit\r\n"


class AuthRequest(_Item):
    """
    ``auth secret opaque``: txnsq's own extension, not MetaQ's.  The secret
    is one field (no spaces, no CR/LF); the broker replies ``result 200``
    or ``result 403`` and, when auth is required, refuses other commands
    with 401 until it has succeeded.
    """

    __slots__ = ("secret", "opaque")

    command = "auth"

    def __init__(self, secret: bytes, opaque: int = 0) -> None:
        self.secret = secret
        self.opaque = opaque

    def encode(self) -> bytes:
        """
        ``auth secret opaque\\r\\n``.

        :raises ValueError: a secret that is empty or holds a space, CR or LF.
        """
        return _line(b"auth", self.secret, self.opaque)


class MetaqError(_Item):
    """
    Bad input, reported as MetaQ reports errors: ``result <code> <len>
    <opaque>\\r\\n<message>``.

    :ivar code: the reply's code (400 for everything the parsers find).
    :ivar message: what was wrong.
    :ivar opaque: the request's opaque when it could be read, else
        :data:`DEFAULT_OPAQUE`.
    :ivar fatal: True when the stream can no longer be framed (the parser
        is dead and ignores further bytes): reply, then close.
    :ivar command: the command the line named, when it was a known one.
    """

    __slots__ = ("code", "message", "opaque", "fatal", "command")

    def __init__(
        self,
        code: int,
        message: str,
        opaque: int = DEFAULT_OPAQUE,
        fatal: bool = False,
        command: Optional[str] = None,
    ) -> None:
        self.code = code
        self.message = message
        self.opaque = opaque
        self.fatal = fatal
        self.command = command

    def encode(self) -> bytes:
        """The ``result`` reply for this error."""
        return encode_result(self.code, self.message, self.opaque)


Request = Union[PutRequest, GetRequest, OffsetRequest, StatsRequest, VersionRequest, QuitRequest, AuthRequest]


class ResultResponse(_Item):
    """A ``result`` reply: ``code``, ``body`` (bytes), ``opaque``."""

    __slots__ = ("code", "body", "opaque")

    def __init__(self, code: int, body: bytes, opaque: int) -> None:
        self.code = code
        self.body = body
        self.opaque = opaque

    @property
    def ok(self) -> bool:
        """Whether the code is 200."""
        return self.code == SUCCESS

    def put_result(self) -> Tuple[int, int, int]:
        """
        ``(msg_id, partition, offset)`` of a successful ``put``'s body.

        :raises ValueError: the body is not three numbers.
        """
        fields = self.body.split(b" ")
        values = [_int64(f) for f in fields]
        if len(values) != 3 or None in values:
            raise ValueError("not a put result: %r" % (self.body,))
        msg_id, partition, offset = values
        assert msg_id is not None and partition is not None and offset is not None
        return msg_id, partition, offset

    def encode(self) -> bytes:
        """The reply's bytes."""
        return encode_result(self.code, self.body, self.opaque)


class ValueResponse(_Item):
    """A ``value`` reply: ``data`` (whole records) and ``opaque``."""

    __slots__ = ("data", "opaque")

    def __init__(self, data: bytes, opaque: int) -> None:
        self.data = data
        self.opaque = opaque

    def records(self) -> List[Record]:
        """The records in :attr:`data`."""
        return list(iter_records(self.data))

    def encode(self) -> bytes:
        """The reply's bytes."""
        return encode_value(self.data, self.opaque)


Response = Union[ResultResponse, ValueResponse]


# ---------------------------------------------------------------------------
# Reply encoders


def encode_result(code: int, body: Union[bytes, str], opaque: int) -> bytes:
    """``result code length opaque\\r\\n`` and ``body`` (text as UTF-8)."""
    if isinstance(body, str):
        body = body.encode("utf-8")
    return b"result %d %d %d\r\n" % (code, len(body), opaque) + body


def encode_put_result(msg_id: int, partition: int, offset: int, opaque: int) -> bytes:
    """A stored ``put``: ``result 200`` with the body ``"msgId partition offset"``."""
    return encode_result(SUCCESS, b"%d %d %d" % (msg_id, partition, offset), opaque)


def encode_value_header(total_length: int, opaque: int) -> bytes:
    """
    ``value totalLength opaque\\r\\n``: write it, then ``total_length``
    bytes of records (e.g. a slice of the log, no copy).
    """
    return b"value %d %d\r\n" % (total_length, opaque)


def encode_value(records: bytes, opaque: int) -> bytes:
    """A whole ``value`` reply for ``records``."""
    return b"value %d %d\r\n" % (len(records), opaque) + records


def encode_moved(offset: int, opaque: int) -> bytes:
    """
    ``get`` at an offset that is not a record boundary or is past the end
    the broker announces: ``result 301`` whose body is the offset to use.
    """
    return encode_result(MOVED, b"%d" % (offset,), opaque)


def encode_position_not_found(offset: int, opaque: int) -> bytes:
    """``get`` at or past the end of the log: ``result 404`` (the Java broker's text)."""
    return encode_result(NOT_FOUND, "Could not find message at position %d" % (offset,), opaque)


def encode_topic_not_found(topic: str, partition: int, opaque: int) -> bytes:
    """``get`` or ``offset`` on a partition the broker does not have: ``result 404``."""
    return encode_result(NOT_FOUND, "The topic `%s` in partition `%d` is not exists" % (topic, partition), opaque)


def encode_bad_max_size(max_size: int, opaque: int) -> bytes:
    """``get`` with ``maxSize <= 0``: ``result 400`` (the Java broker's text)."""
    return encode_result(BAD_REQUEST, "Bad request,invalid max size:%d" % (max_size,), opaque)


def encode_offset_result(offset: int, opaque: int) -> bytes:
    """The answer to ``offset``: ``result 200`` whose body is the nearest valid offset."""
    return encode_result(SUCCESS, b"%d" % (offset,), opaque)


def encode_version_result(version: str, opaque: int) -> bytes:
    """The answer to ``version``: ``result 200`` whose body is the version."""
    return encode_result(SUCCESS, version, opaque)
