# -*- test-case-name: tests.test_protocol_metaq -*-
"""
The MetaQ text protocol's incremental parsers, sans-IO: bytes in, items
out, for both sides of the wire.

:class:`MetaqRequestParser` (the broker's side) turns bytes into the
requests of :mod:`txnsq.protocol.metaq` and bad input into
:class:`MetaqError <txnsq.protocol.metaq.MetaqError>` items that carry the reply's
code and text and say whether the connection can go on; ``feed`` never
raises for bad bytes.  :class:`MetaqResponseParser` (the client's side)
reads ``result`` and ``value`` replies.
"""

from __future__ import annotations

import re
from typing import List, Optional, Tuple, Union

from txnsq.protocol.metaq import (
    BAD_REQUEST,
    DEFAULT_MAX_BODY_SIZE,
    DEFAULT_MAX_LINE_LENGTH,
    DEFAULT_OPAQUE,
    AuthRequest,
    GetRequest,
    MetaqError,
    OffsetRequest,
    PutRequest,
    QuitRequest,
    Request,
    ResultResponse,
    StatsRequest,
    ValueResponse,
    VersionRequest,
    _complete_put,
    _fields,
    _int32,
    _int64,
    _show,
    _text,
)

__all__ = [
    "MetaqRequestParser",
    "MetaqResponseParser",
]


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
