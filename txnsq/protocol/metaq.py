# -*- test-case-name: tests.test_protocol_metaq -*-
"""
The MetaQ (Metamorphosis) text protocol, sans-IO: both sides of the wire and
the message record layout that ``get`` serves and the retained log stores.

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

A record (:func:`encode_record`) is a 20-byte header -- int32 data length,
int32 checksum (CRC32 of the data, masked to 31 bits), int64 message id,
int32 flag -- and the data; when ``flag & 1`` the data starts with an
int32 attribute length and the attribute (:func:`join_attribute`,
:func:`split_attribute`).  :func:`split_whole_records` and
:func:`iter_records` walk a buffer of records; :func:`validate_records`
checks one (for recovery after a crash).

Facts the MetaQ text leaves open follow the Metamorphosis Java broker: the
put forms with a checksum, the ``stats`` and ``version`` defaults, the put
reply body ``"<msgId> <partition> <offset>"``, the 301 and 404 replies to
``get``.
"""

from __future__ import annotations

import re
import struct
import zlib
from typing import Iterator, List, Optional, Tuple, Union

__all__ = [
    "AuthRequest",
    "BAD_REQUEST",
    "DEFAULT_MAX_BODY_SIZE",
    "DEFAULT_MAX_LINE_LENGTH",
    "DEFAULT_OPAQUE",
    "FLAG_ATTRIBUTE",
    "FORBIDDEN",
    "GATEWAY_TIMEOUT",
    "GetRequest",
    "HEADER_LENGTH",
    "INTERNAL_SERVER_ERROR",
    "MOVED",
    "MetaqError",
    "MetaqRequestParser",
    "MetaqResponseParser",
    "NOT_FOUND",
    "OffsetRequest",
    "PutRequest",
    "QuitRequest",
    "Record",
    "Request",
    "Response",
    "ResultResponse",
    "SERVICE_UNAVAILABLE",
    "SUCCESS",
    "StatsRequest",
    "UNAUTHORIZED",
    "ValueResponse",
    "VersionRequest",
    "checksum",
    "encode_bad_max_size",
    "encode_moved",
    "encode_offset_result",
    "encode_position_not_found",
    "encode_put_result",
    "encode_record",
    "encode_result",
    "encode_topic_not_found",
    "encode_value",
    "encode_value_header",
    "encode_version_result",
    "iter_records",
    "join_attribute",
    "split_attribute",
    "split_whole_records",
    "validate_records",
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

#: ``flag & FLAG_ATTRIBUTE``: the data starts with an attribute.
FLAG_ATTRIBUTE = 1

#: Bytes of a record's header.
HEADER_LENGTH = 20

_INT32_MIN = -(2**31)
_INT32_MAX = 2**31 - 1
_INT64_MIN = -(2**63)
_INT64_MAX = 2**63 - 1
_UINT64_MASK = 2**64 - 1

_HEADER = struct.Struct(">iiqi")
_pack_header = _HEADER.pack
_unpack_header = _HEADER.unpack_from
_INT32 = struct.Struct(">i")
_pack_int32 = _INT32.pack
_unpack_int32 = _INT32.unpack_from
_unpack_uint32 = struct.Struct(">I").unpack_from

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
# Records


def checksum(data: bytes) -> int:
    """MetaQ's checksum of ``data``: CRC32 masked to 31 bits (never negative)."""
    return zlib.crc32(data) & 0x7FFFFFFF


def encode_record(msg_id: int, flag: int, data: bytes) -> bytes:
    """
    One record: int32 ``len(data)``, int32 :func:`checksum`, int64
    ``msg_id``, int32 ``flag``, then ``data`` (which, when ``flag & 1``,
    must itself start with an attribute: see :func:`join_attribute`).

    ``msg_id`` may be given signed (Java's ``long``) or as its unsigned
    64-bit pattern; it is read back signed.

    :raises ValueError: ``msg_id`` outside 64 bits, ``flag`` outside 32 bits.
    """
    if not _INT64_MIN <= msg_id <= _UINT64_MASK:
        raise ValueError("message id %d does not fit in 64 bits" % (msg_id,))
    if msg_id > _INT64_MAX:
        msg_id -= 1 << 64
    if not _INT32_MIN <= flag <= _INT32_MAX:
        raise ValueError("flag %d does not fit in 32 bits" % (flag,))
    return _pack_header(len(data), zlib.crc32(data) & 0x7FFFFFFF, msg_id, flag) + data


def join_attribute(attribute: Optional[bytes], payload: bytes) -> bytes:
    """
    A record's data for ``payload`` with ``attribute``: int32 attribute
    length, attribute, payload; just ``payload`` when ``attribute`` is None
    (an empty attribute is still written, with its length 0).  The record's
    flag must have :data:`FLAG_ATTRIBUTE` set exactly when ``attribute`` is
    not None.
    """
    if attribute is None:
        return payload
    return _pack_int32(len(attribute)) + attribute + payload


def split_attribute(flag: int, data: bytes) -> Tuple[Optional[bytes], bytes]:
    """
    ``(attribute, payload)`` of a record's data: attribute None when
    ``flag & 1`` is clear.

    :raises ValueError: the flag announces an attribute that the data
        cannot hold (fewer than 4 bytes, or a length that is negative or
        runs past the end).
    """
    if not flag & FLAG_ATTRIBUTE:
        return None, data
    if len(data) < 4:
        raise ValueError("data of %d bytes has no room for an attribute length" % (len(data),))
    length = _unpack_int32(data, 0)[0]
    if length < 0 or 4 + length > len(data):
        raise ValueError("attribute length %d does not fit in data of %d bytes" % (length, len(data)))
    return bytes(data[4:4 + length]), bytes(data[4 + length:])


def _attribute_problem(flag: int, data: Union[bytes, bytearray, memoryview], start: int, size: int) -> Optional[str]:
    """What is wrong with the attribute framing of ``data[start:start+size]``."""
    if not flag & FLAG_ATTRIBUTE:
        return None
    if size < 4:
        return "flag announces an attribute but the data has %d bytes" % (size,)
    length = _unpack_int32(data, start)[0]
    if length < 0 or 4 + length > size:
        return "attribute length %d does not fit in data of %d bytes" % (length, size)
    return None


class Record:
    """
    One record read from a buffer.

    :ivar position: where the record starts in the buffer.
    :ivar length: bytes of the whole record (header included).
    :ivar checksum: the checksum stored in its header.
    :ivar msg_id: the message id (signed, as Java's ``long``).
    :ivar flag: the flag.
    :ivar data: the data (attribute included when ``flag & 1``).
    """

    __slots__ = ("position", "length", "checksum", "msg_id", "flag", "data")

    def __init__(self, position: int, checksum: int, msg_id: int, flag: int, data: bytes) -> None:
        self.position = position
        self.length = HEADER_LENGTH + len(data)
        self.checksum = checksum
        self.msg_id = msg_id
        self.flag = flag
        self.data = data

    @property
    def valid(self) -> bool:
        """Whether the stored checksum is the data's."""
        return self.checksum == zlib.crc32(self.data) & 0x7FFFFFFF

    @property
    def attribute(self) -> Optional[bytes]:
        """The attribute (None without one). :raises ValueError: bad framing."""
        return split_attribute(self.flag, self.data)[0]

    @property
    def payload(self) -> bytes:
        """The data after the attribute. :raises ValueError: bad framing."""
        return split_attribute(self.flag, self.data)[1]

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Record):
            return NotImplemented
        return (
            self.position == other.position
            and self.checksum == other.checksum
            and self.msg_id == other.msg_id
            and self.flag == other.flag
            and self.data == other.data
        )

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return "Record(position=%d, msg_id=%d, flag=%d, checksum=%d, data=%r)" % (
            self.position,
            self.msg_id,
            self.flag,
            self.checksum,
            self.data,
        )


Buffer = Union[bytes, bytearray, memoryview]


def split_whole_records(buffer: Buffer, max_size: int, start: int = 0) -> int:
    """
    How many bytes from ``start`` hold whole records and at most
    ``max_size`` bytes: what a ``get`` of ``max_size`` sends from there.

    Walks record lengths only (no checksum, no copy).  Stops before a
    record that is cut short, does not fit, or has a negative length.  0
    when the first record alone is larger than ``max_size``.
    """
    end = len(buffer)
    limit = start + max_size
    if limit > end:
        limit = end
    # Read unsigned: a negative length reads as 2**31 or more and stops the
    # walk with the same test as a record that does not fit.
    unpack = _unpack_uint32
    pos = start
    last = limit - 20
    while pos <= last:
        following = pos + 20 + unpack(buffer, pos)[0]
        if following > limit:
            break
        pos = following
    return pos - start


def iter_records(buffer: Buffer, start: int = 0, end: Optional[int] = None) -> Iterator[Record]:
    """
    The whole records in ``buffer[start:end]``, in order; stops silently
    at a record cut short or with a negative length.  Checksums are not
    checked (see :attr:`Record.valid`, :func:`validate_records`).
    """
    stop = len(buffer) if end is None else min(end, len(buffer))
    pos = start
    last = stop - HEADER_LENGTH
    unpack = _unpack_header
    while pos <= last:
        size, stored, msg_id, flag = unpack(buffer, pos)
        data_start = pos + HEADER_LENGTH
        following = data_start + size
        if size < 0 or following > stop:
            return
        yield Record(pos, stored, msg_id, flag, bytes(buffer[data_start:following]))
        pos = following


def validate_records(buffer: Buffer, start: int = 0) -> Tuple[int, Optional[str]]:
    """
    ``(good_length, problem)``: the bytes from ``start`` that are whole,
    well-formed records with correct checksums, and what is wrong with the
    bytes after them (None when every byte is good).  A log recovering
    after a crash keeps ``good_length`` bytes and truncates the rest.

    Problems: a header cut short, a negative data length, data cut short,
    a checksum mismatch, an attribute that does not fit its data.
    """
    end = len(buffer)
    pos = start
    view = memoryview(buffer)
    try:
        while pos < end:
            if end - pos < HEADER_LENGTH:
                return pos - start, "header cut short at %d (%d of %d bytes)" % (pos, end - pos, HEADER_LENGTH)
            size, stored, _msg_id, flag = _unpack_header(buffer, pos)
            if size < 0:
                return pos - start, "negative data length %d at %d" % (size, pos)
            data_start = pos + HEADER_LENGTH
            following = data_start + size
            if following > end:
                return pos - start, "data cut short at %d (%d of %d bytes)" % (pos, end - data_start, size)
            actual = zlib.crc32(view[data_start:following]) & 0x7FFFFFFF
            if actual != stored:
                return pos - start, "checksum mismatch at %d (stored %d, computed %d)" % (pos, stored, actual)
            problem = _attribute_problem(flag, buffer, data_start, size)
            if problem is not None:
                return pos - start, "%s at %d" % (problem, pos)
            pos = following
    finally:
        view.release()
    return pos - start, None


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
        ``stats item opaque\\r\\n``; without an item ``stats  opaque``
        (an empty item field, as the Java client writes it, so that a Java
        broker does not take the opaque for an item).

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


# ---------------------------------------------------------------------------
# The line-and-body stream


class _LineStream:
    """
    The framing both parsers share: ``\\r\\n``-ended lines, some followed
    by a body whose length the line gave.  Subclasses say what a line is.
    """

    __slots__ = ("max_line_length", "max_body_size", "_buf", "_pos", "_dead", "_pending", "_need")

    def __init__(self, max_line_length: int, max_body_size: int) -> None:
        self.max_line_length = max_line_length
        self.max_body_size = max_body_size
        self._buf = bytearray()
        self._pos = 0
        self._dead = False
        # The item waiting for its body, and the body's length.
        self._pending: Optional[Union[_Pending, PutRequest]] = None
        self._need = 0

    @property
    def dead(self) -> bool:
        """Whether the parser stopped (fatal error or ``quit``) and ignores input."""
        return self._dead

    def buffered(self) -> int:
        """Bytes received and not yet part of a returned item."""
        return len(self._buf) - self._pos

    def feed(self, data: bytes) -> List[object]:
        """Add bytes; return the items they complete.  Never raises for bad bytes."""
        if self._dead:
            return []
        buf = self._buf
        pos = self._pos
        if pos:
            del buf[:pos]
            self._pos = pos = 0
        buf += data
        out: List[object] = []
        size = len(buf)
        window = self.max_line_length + 2
        while True:
            pending = self._pending
            if pending is not None:
                stop = pos + self._need
                if stop > size:
                    break
                if stop - pos < 4096:
                    body = bytes(buf[pos:stop])
                else:
                    # One copy instead of two for large bodies (a value
                    # reply of many records); the view is released at once
                    # so that the buffer can be resized again.
                    with memoryview(buf) as view, view[pos:stop] as part:
                        body = part.tobytes()
                pos = stop
                self._pending = None
                out.append(pending.complete(body))
                continue
            if pos == size:
                break
            newline = buf.find(b"\r\n", pos, pos + window)
            if newline < 0:
                if size - pos >= window:
                    out.append(
                        MetaqError(
                            BAD_REQUEST,
                            "line too long: no CRLF in %d bytes" % (self.max_line_length + 2,),
                            fatal=True,
                        )
                    )
                    self._die()
                    return out
                break
            line = bytes(buf[pos:newline])
            pos = newline + 2
            item = self._line(line)
            if item is None:
                continue  # waiting for a body
            out.append(item)
            if isinstance(item, MetaqError) and item.fatal or isinstance(item, QuitRequest):
                self._die()
                return out
        self._pos = pos
        return out

    def _die(self) -> None:
        self._dead = True
        self._pending = None
        self._buf = bytearray()
        self._pos = 0

    def _expect(self, pending: _Pending, length: int) -> None:
        self._pending = pending
        self._need = length

    def _line(self, line: bytes) -> Optional[object]:
        raise NotImplementedError()


class _Pending:
    """What to make of a body once it has arrived."""

    __slots__ = ()

    def complete(self, body: bytes) -> object:
        raise NotImplementedError()


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


class _PendingPut(_Pending):
    __slots__ = ("put", "verify")

    def __init__(self, put: PutRequest, verify: bool) -> None:
        self.put = put
        self.verify = verify

    def complete(self, body: bytes) -> object:
        return _complete_put(self.put, body, self.verify)


class _PendingItem(_Pending):
    """An item (an error, a refusal) to return once its body has been skipped."""

    __slots__ = ("item",)

    def __init__(self, item: object) -> None:
        self.item = item

    def complete(self, body: bytes) -> object:
        return self.item


class _PendingResult(_Pending):
    __slots__ = ("code", "opaque")

    def __init__(self, code: int, opaque: int) -> None:
        self.code = code
        self.opaque = opaque

    def complete(self, body: bytes) -> object:
        return ResultResponse(self.code, body, self.opaque)


class _PendingValue(_Pending):
    __slots__ = ("opaque",)

    def __init__(self, opaque: int) -> None:
        self.opaque = opaque

    def complete(self, body: bytes) -> object:
        return ValueResponse(body, self.opaque)


# ---------------------------------------------------------------------------
# Server side


# put topic partition length flag opaque, and get topic group partition offset
# maxSize opaque, with numbers that are int32 (int64 for the offset) whatever
# their digits, and no optional field: the lines clients send all the time.
_PLAIN_PUT = re.compile(rb"put ([^ ]+) (-?[0-9]{1,9}) ([0-9]{1,9}) (-?[0-9]{1,9}) (-?[0-9]{1,9})").fullmatch
_PLAIN_GET = re.compile(
    rb"get ([^ ]+) ([^ ]+) (-?[0-9]{1,9}) (-?[0-9]{1,18}) ([0-9]{1,9}) (-?[0-9]{1,9})"
).fullmatch


def _last_opaque(fields: List[bytes]) -> int:
    """The opaque of a line (its last field) when it is one, for error replies."""
    if len(fields) > 1:
        value = _int32(fields[-1])
        if value is not None:
            return value
    return DEFAULT_OPAQUE


ServerItem = Union[Request, MetaqError]


class MetaqRequestParser(_LineStream):
    """
    Incremental parser of what a MetaQ client sends.

    :meth:`feed` returns the requests and errors the new bytes complete,
    in order.  A :class:`MetaqError` with ``fatal`` False is answered and
    the connection goes on (the bad line, and its body when one was
    announced in a usable way, have been consumed); with ``fatal`` True
    the stream cannot be framed any more: the parser is dead, answer and
    close.  Fatal: a line longer than ``max_line_length``; a ``put`` (or
    ``sync``) whose body length is missing, not a number, negative or
    larger than ``max_body_size``.  After a :class:`QuitRequest` the parser
    stops too (the connection is closing).

    Checks made here, all 400 and not fatal: an unknown or blank command,
    a wrong field count, a field that is not a number or out of range
    (partition, flag, opaque and maxSize: int32; offset: int64), a name
    that is not UTF-8, ``maxSize <= 0`` (the Java broker's text), a put
    body whose attribute does not fit, a put checksum that is not the
    body's.  Topic and group names, partitions and offsets are the
    broker's to judge (404, 301, 403).
    """

    __slots__ = ("verify_checksums",)

    def __init__(
        self,
        max_body_size: int = DEFAULT_MAX_BODY_SIZE,
        max_line_length: int = DEFAULT_MAX_LINE_LENGTH,
        verify_checksums: bool = True,
    ) -> None:
        """
        :param max_body_size: the largest ``put`` body accepted.
        :param max_line_length: the longest line, CRLF excluded.
        :param verify_checksums: check a put's checksum field against its body.
        """
        _LineStream.__init__(self, max_line_length, max_body_size)
        self.verify_checksums = verify_checksums

    def feed(self, data: bytes) -> List[ServerItem]:  # type: ignore[override]
        """
        Add received bytes; return the requests and errors they complete.
        Never raises for bad bytes; returns nothing once the parser is dead.
        """
        return _LineStream.feed(self, data)  # type: ignore[return-value]

    def _line(self, line: bytes) -> Optional[object]:
        # The usual put and get lines in one regex call each; anything else
        # (and any line these do not match) takes the general path below,
        # which makes every check.
        match = _PLAIN_PUT(line)
        if match is not None:
            topic_field, partition, length, flag, opaque = match.groups()
            size = int(length)
            if size <= self.max_body_size:
                topic = _text(topic_field)
                if topic is not None:
                    put = PutRequest(topic, int(partition), b"", int(flag), int(opaque))
                    if size == 0:
                        return _complete_put(put, b"", False)
                    # The put completes itself (no checksum to verify).
                    self._pending = put
                    self._need = size
                    return None
        else:
            match = _PLAIN_GET(line)
            if match is not None:
                topic_field, group_field, partition, offset, max_size, opaque = match.groups()
                topic = _text(topic_field)
                group = _text(group_field)
                if topic is not None and group is not None and max_size.strip(b"0"):
                    return GetRequest(topic, group, int(partition), int(offset), int(max_size), int(opaque))
        fields = _fields(line)
        name = fields[0]
        if name == b"put":
            return self._put(fields)
        if name == b"get":
            return self._get(fields)
        if name == b"offset":
            return self._offset(fields)
        if name == b"version":
            return self._version(fields)
        if name == b"stats":
            return self._stats(fields)
        if name == b"quit":
            return QuitRequest()
        if name == b"auth":
            return self._auth(fields)
        if name == b"sync":
            return self._sync(fields)
        if not line:
            return MetaqError(BAD_REQUEST, "blank command line")
        return MetaqError(BAD_REQUEST, "unknown command: %s" % (_show(line),), _last_opaque(fields))

    def _bad(self, command: str, fields: List[bytes], why: str) -> MetaqError:
        return MetaqError(BAD_REQUEST, "%s: %s" % (command, why), _last_opaque(fields), command=command)

    def _body_length(self, command: str, fields: List[bytes], index: int) -> Union[int, MetaqError]:
        """The body length field, or the fatal error when it is unusable."""
        if len(fields) > index:
            length = _int32(fields[index])
            if length is not None and 0 <= length <= self.max_body_size:
                return length
        opaque = _last_opaque(fields)
        if len(fields) <= index:
            return MetaqError(BAD_REQUEST, "%s: no body length" % (command,), opaque, True, command)
        length = _int32(fields[index])
        if length is None:
            return MetaqError(
                BAD_REQUEST, "%s: invalid body length %s" % (command, _show(fields[index])), opaque, True, command
            )
        if length < 0:
            return MetaqError(BAD_REQUEST, "%s: negative body length %d" % (command, length), opaque, True, command)
        if length > self.max_body_size:
            return MetaqError(
                BAD_REQUEST,
                "%s: body length %d is larger than %d" % (command, length, self.max_body_size),
                opaque,
                True,
                command,
            )
        return length

    def _put(self, fields: List[bytes]) -> Optional[object]:
        # put topic partition length flag [checksum] [transactionKey] opaque
        length = self._body_length("put", fields, 3)
        if isinstance(length, MetaqError):
            return length
        count = len(fields)
        error: Optional[MetaqError] = None
        checksum_field: Optional[bytes] = None
        key_field: Optional[bytes] = None
        if count == 7:
            # One optional field: a checksum when it looks like a number (as
            # the Java broker decides), else a transaction key.
            slot = fields[5]
            if slot[:1].isdigit() or slot[:1] == b"-":
                checksum_field = slot
            else:
                key_field = slot
        elif count == 8:
            checksum_field, key_field = fields[5], fields[6]
        elif count != 6:
            error = self._bad("put", fields, "expected 6 to 8 fields, got %d" % (count,))
        if error is None:
            topic = _text(fields[1])
            partition = _int32(fields[2])
            flag = _int32(fields[4])
            opaque = _int32(fields[-1])
            checksum: Optional[int] = None
            key: Optional[str] = None
            if checksum_field is not None:
                checksum = _int32(checksum_field)
            if key_field is not None:
                key = _text(key_field)
            if topic is None or not topic:
                error = self._bad("put", fields, "invalid topic %s" % (_show(fields[1]),))
            elif partition is None:
                error = self._bad("put", fields, "invalid partition %s" % (_show(fields[2]),))
            elif flag is None:
                error = self._bad("put", fields, "invalid flag %s" % (_show(fields[4]),))
            elif checksum_field is not None and checksum is None:
                error = self._bad("put", fields, "invalid checksum %s" % (_show(checksum_field),))
            elif key_field is not None and not key:
                error = self._bad("put", fields, "invalid transaction key %s" % (_show(key_field),))
            elif opaque is None:
                error = self._bad("put", fields, "invalid opaque %s" % (_show(fields[-1]),))
            else:
                put = PutRequest(topic, partition, b"", flag, opaque, checksum, key)
                if length == 0:
                    return _complete_put(put, b"", self.verify_checksums)
                self._expect(_PendingPut(put, self.verify_checksums), length)
                return None
        if length == 0:
            return error
        self._expect(_PendingItem(error), length)
        return None

    def _sync(self, fields: List[bytes]) -> Optional[object]:
        # Broker-to-broker replication: framed (its body skipped) so that the
        # connection survives, and refused.
        length = self._body_length("sync", fields, 3)
        if isinstance(length, MetaqError):
            return length
        error = MetaqError(BAD_REQUEST, "sync: not supported", _last_opaque(fields), command="sync")
        if length == 0:
            return error
        self._expect(_PendingItem(error), length)
        return None

    def _names(self, command: str, fields: List[bytes]) -> Union[Tuple[str, str, int, int], MetaqError]:
        """``topic group partition offset`` of get and offset."""
        topic = _text(fields[1])
        group = _text(fields[2])
        partition = _int32(fields[3])
        offset = _int64(fields[4])
        if not topic:
            return self._bad(command, fields, "invalid topic %s" % (_show(fields[1]),))
        if not group:
            return self._bad(command, fields, "invalid group %s" % (_show(fields[2]),))
        if partition is None:
            return self._bad(command, fields, "invalid partition %s" % (_show(fields[3]),))
        if offset is None:
            return self._bad(command, fields, "invalid offset %s" % (_show(fields[4]),))
        return topic, group, partition, offset

    def _get(self, fields: List[bytes]) -> object:
        # get topic group partition offset maxSize opaque
        if len(fields) != 7:
            return self._bad("get", fields, "expected 7 fields, got %d" % (len(fields),))
        names = self._names("get", fields)
        if isinstance(names, MetaqError):
            return names
        max_size = _int32(fields[5])
        opaque = _int32(fields[6])
        if max_size is None:
            return self._bad("get", fields, "invalid max size %s" % (_show(fields[5]),))
        if opaque is None:
            return self._bad("get", fields, "invalid opaque %s" % (_show(fields[6]),))
        if max_size <= 0:
            return MetaqError(BAD_REQUEST, "Bad request,invalid max size:%d" % (max_size,), opaque, command="get")
        topic, group, partition, offset = names
        return GetRequest(topic, group, partition, offset, max_size, opaque)

    def _offset(self, fields: List[bytes]) -> object:
        # offset topic group partition offset opaque
        if len(fields) != 6:
            return self._bad("offset", fields, "expected 6 fields, got %d" % (len(fields),))
        # offset topic group partition @unixMs opaque (txnsq's extension)
        timestamp_ms: Optional[int] = None
        if fields[4][:1] == b"@":
            digits = fields[4][1:]
            timestamp_ms = _int64(digits) if digits.isdigit() else None
            if timestamp_ms is None:
                return self._bad("offset", fields, "invalid timestamp %s" % (_show(fields[4]),))
            fields = fields[:4] + [b"0"] + fields[5:]
        names = self._names("offset", fields)
        if isinstance(names, MetaqError):
            return names
        opaque = _int32(fields[5])
        if opaque is None:
            return self._bad("offset", fields, "invalid opaque %s" % (_show(fields[5]),))
        topic, group, partition, offset = names
        return OffsetRequest(topic, group, partition, offset, opaque, timestamp_ms)

    def _version(self, fields: List[bytes]) -> object:
        # version [opaque]
        if len(fields) > 2:
            return self._bad("version", fields, "expected 1 or 2 fields, got %d" % (len(fields),))
        if len(fields) == 1:
            return VersionRequest()
        opaque = _int32(fields[1])
        if opaque is None:
            return self._bad("version", fields, "invalid opaque %s" % (_show(fields[1]),))
        return VersionRequest(opaque)

    def _stats(self, fields: List[bytes]) -> object:
        # stats [item] [opaque]: "stats N" is the opaque N with no item (the
        # MetaQ text's example), "stats  N" too (an empty item, as the Java
        # client writes it), "stats ITEM" an item with the default opaque.
        count = len(fields)
        if count == 1:
            return StatsRequest()
        if count == 2:
            opaque = _int32(fields[1])
            if opaque is not None:
                return StatsRequest(None, opaque)
            item = _text(fields[1])
            if item is None:
                return self._bad("stats", fields, "invalid item %s" % (_show(fields[1]),))
            return StatsRequest(item)
        if count == 3:
            item = _text(fields[1])
            opaque = _int32(fields[2])
            if item is None:
                return self._bad("stats", fields, "invalid item %s" % (_show(fields[1]),))
            if opaque is None:
                return self._bad("stats", fields, "invalid opaque %s" % (_show(fields[2]),))
            return StatsRequest(item or None, opaque)
        return self._bad("stats", fields, "expected 1 to 3 fields, got %d" % (count,))

    def _auth(self, fields: List[bytes]) -> object:
        # auth secret opaque (txnsq's extension)
        if len(fields) != 3:
            return self._bad("auth", fields, "expected 3 fields, got %d" % (len(fields),))
        opaque = _int32(fields[2])
        if not fields[1]:
            return self._bad("auth", fields, "empty secret")
        if opaque is None:
            return self._bad("auth", fields, "invalid opaque %s" % (_show(fields[2]),))
        return AuthRequest(fields[1], opaque)


# ---------------------------------------------------------------------------
# Client side


ClientItem = Union[ResultResponse, ValueResponse, MetaqError]


class MetaqResponseParser(_LineStream):
    """
    Incremental parser of what a MetaQ broker sends: ``result`` and
    ``value`` replies.

    Anything else is a :class:`MetaqError` (code 400): fatal when the
    stream cannot be framed any more (an over-long line, a missing,
    non-numeric, negative or too large body length), not fatal for an
    unknown line without a body.  A client should close on any error.
    """

    __slots__ = ()

    def __init__(
        self,
        max_body_size: int = DEFAULT_MAX_BODY_SIZE,
        max_line_length: int = DEFAULT_MAX_LINE_LENGTH,
    ) -> None:
        """
        :param max_body_size: the largest reply body accepted (a ``value``
            is at most the ``get``'s ``maxSize``).
        :param max_line_length: the longest line, CRLF excluded.
        """
        _LineStream.__init__(self, max_line_length, max_body_size)

    def feed(self, data: bytes) -> List[ClientItem]:  # type: ignore[override]
        """
        Add received bytes; return the replies and errors they complete.
        Never raises for bad bytes; returns nothing once the parser is dead.
        """
        return _LineStream.feed(self, data)  # type: ignore[return-value]

    def _length(self, reply: str, fields: List[bytes], index: int) -> Union[int, MetaqError]:
        opaque = _last_opaque(fields)
        length = _int32(fields[index]) if len(fields) > index else None
        if length is None or length < 0:
            shown = _show(fields[index]) if len(fields) > index else "(none)"
            return MetaqError(BAD_REQUEST, "%s: invalid length %s" % (reply, shown), opaque, True, reply)
        if length > self.max_body_size:
            return MetaqError(
                BAD_REQUEST,
                "%s: length %d is larger than %d" % (reply, length, self.max_body_size),
                opaque,
                True,
                reply,
            )
        return length

    def _line(self, line: bytes) -> Optional[object]:
        fields = _fields(line)
        name = fields[0]
        if name == b"value":
            # value totalLength opaque
            length = self._length("value", fields, 1)
            if isinstance(length, MetaqError):
                return length
            opaque = _int32(fields[2]) if len(fields) == 3 else None
            pending: _Pending
            if opaque is None:
                error = MetaqError(BAD_REQUEST, "value: bad line %s" % (_show(line),), command="value")
                pending = _PendingItem(error)
            else:
                pending = _PendingValue(opaque)
            if length == 0:
                return pending.complete(b"")
            self._expect(pending, length)
            return None
        if name == b"result":
            # result code length opaque
            length = self._length("result", fields, 2)
            if isinstance(length, MetaqError):
                return length
            code = _int32(fields[1])
            opaque = _int32(fields[3]) if len(fields) == 4 else None
            if code is None or opaque is None:
                error = MetaqError(BAD_REQUEST, "result: bad line %s" % (_show(line),), command="result")
                pending = _PendingItem(error)
            else:
                pending = _PendingResult(code, opaque)
            if length == 0:
                return pending.complete(b"")
            self._expect(pending, length)
            return None
        if not line:
            return MetaqError(BAD_REQUEST, "blank reply line")
        return MetaqError(BAD_REQUEST, "unknown reply: %s" % (_show(line),), _last_opaque(fields))
