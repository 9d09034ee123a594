# -*- test-case-name: tests.test_http -*-
"""
Go nsqd's HTTP request parameters and bodies, parsed as Go parses them.

- query strings as ``url.ParseQuery`` reads them (``;`` is an error, ``+``
  a space) and Go's ``boolParams``;
- integers as ``strconv.ParseInt`` reads them, wrapped as Go's int64
  arithmetic wraps;
- ``POST /mpub`` bodies, newline-separated and binary (``readMPUB``);
- a JSON ``[]string`` (``PUT /config/nsqlookupd_tcp_addresses``).

A parser that rejects its input raises :class:`APIError` with the status
and text Go answers.  Sans-IO: no Twisted here.
"""

from __future__ import annotations

import json
import re
import struct
from typing import Any, Dict, List, Optional, Tuple

from txnsq.protocol.names import is_valid_channel_name, is_valid_topic_name

__all__ = [
    "APIError",
    "BOOL_PARAMS",
    "decode_string_list",
    "go_parse_int",
    "parse_mpub_binary",
    "parse_mpub_lines",
    "parse_query",
    "topic_channel_args",
    "wrap_int64",
]

#: Go's ``boolParams`` (``/mpub?binary=``, ``/stats?include_clients=``).
BOOL_PARAMS: Dict[str, bool] = {"true": True, "1": True, "false": False, "0": False}

_HEX = b"0123456789abcdefABCDEF"
_INT32 = struct.Struct(">i")


class APIError(Exception):
    """
    Go's ``http_api.Err``: a status and the text of the reply
    (``{"message": TEXT}`` in the ``v1`` style, the bare text in ``text``).
    """

    def __init__(self, code: int, text: str) -> None:
        Exception.__init__(self, code, text)
        self.code = code
        self.text = text


# ---------------------------------------------------------------------------
# Query strings and numbers as Go's net/url and strconv read them


def _query_unescape(text: bytes) -> Optional[bytes]:
    """``url.QueryUnescape``: ``+`` is a space; None for a bad ``%`` escape."""
    if b"%" not in text:
        return text.replace(b"+", b" ")
    parts = text.split(b"%")
    out = bytearray(parts[0].replace(b"+", b" "))
    for part in parts[1:]:
        if len(part) < 2 or part[0] not in _HEX or part[1] not in _HEX:
            return None
        out.append(int(part[:2], 16))
        out += part[2:].replace(b"+", b" ")
    return bytes(out)


def parse_query(raw: bytes) -> Tuple[Dict[str, List[str]], Optional[str]]:
    """
    Go's ``url.ParseQuery``: the values by key, in order, and the first
    error (a ``;`` separator or a bad ``%`` escape), which Go's handlers
    answer with ``400 INVALID_REQUEST``.  Pairs that parse are kept even
    when another one does not.  Keys and values are decoded as Latin-1, so
    any byte survives.
    """
    values: Dict[str, List[str]] = {}
    error: Optional[str] = None
    for pair in raw.split(b"&"):
        if b";" in pair:
            error = error or "invalid semicolon separator in query"
            continue
        if not pair:
            continue
        key, _, value = pair.partition(b"=")
        decoded_key = _query_unescape(key)
        decoded_value = _query_unescape(value)
        if decoded_key is None or decoded_value is None:
            error = error or "invalid URL escape"
            continue
        values.setdefault(decoded_key.decode("latin-1"), []).append(
            decoded_value.decode("latin-1")
        )
    return values, error


def topic_channel_args(values: Dict[str, List[str]]) -> Tuple[str, str]:
    """
    Go's ``http_api.GetTopicChannelArgs``: the first ``topic`` and
    ``channel`` of a parsed query, both present and valid.

    :raises APIError: 400 ``MISSING_ARG_TOPIC``, ``INVALID_ARG_TOPIC``,
        ``MISSING_ARG_CHANNEL`` or ``INVALID_ARG_CHANNEL``, checked in
        that order.
    """
    topics = values.get("topic")
    if topics is None:
        raise APIError(400, "MISSING_ARG_TOPIC")
    if not is_valid_topic_name(topics[0]):
        raise APIError(400, "INVALID_ARG_TOPIC")
    channels = values.get("channel")
    if channels is None:
        raise APIError(400, "MISSING_ARG_CHANNEL")
    if not is_valid_channel_name(channels[0]):
        raise APIError(400, "INVALID_ARG_CHANNEL")
    return topics[0], channels[0]


def go_parse_int(text: str) -> Optional[int]:
    """``strconv.ParseInt(text, 10, 64)``; None when Go fails."""
    if not re.match(r"[+-]?[0-9]+\Z", text):
        return None
    value = int(text)
    if not -(1 << 63) <= value < (1 << 63):
        return None
    return value


def wrap_int64(value: int) -> int:
    """Wrap to a signed 64-bit integer, as Go's arithmetic does."""
    value &= (1 << 64) - 1
    return value - (1 << 64) if value >= 1 << 63 else value


def _go_div(numerator: int, denominator: int) -> int:
    """Go's integer division (truncates toward zero)."""
    quotient = abs(numerator) // abs(denominator)
    return quotient if (numerator >= 0) == (denominator > 0) else -quotient


# ---------------------------------------------------------------------------
# Message bodies


def parse_mpub_binary(body: bytes, max_msg_size: int, max_body_size: int) -> List[bytes]:
    """
    ``POST /mpub?binary=true``: the MPUB body format, ``u32 count`` then
    ``u32 size | data`` per message, read as Go's ``readMPUB`` reads the
    request body (bytes after the last message are ignored).

    :raises APIError: ``413 BAD_BODY`` for a missing, zero, negative or too
        large count; ``413 BAD_MESSAGE`` for a size that is not positive or
        above ``max_msg_size`` or a body cut short.
    """
    if len(body) < 4:
        raise APIError(413, "BAD_BODY")
    count = _INT32.unpack_from(body)[0]
    # 4 bytes for the count, at least 5 (size + 1 byte) per message.
    if count <= 0 or count > _go_div(max_body_size - 4, 5):
        raise APIError(413, "BAD_BODY")
    messages: List[bytes] = []
    position = 4
    end = len(body)
    for _ in range(count):
        if position + 4 > end:
            raise APIError(413, "BAD_MESSAGE")
        size = _INT32.unpack_from(body, position)[0]
        position += 4
        if size <= 0 or size > max_msg_size:
            raise APIError(413, "BAD_MESSAGE")
        if position + size > end:
            raise APIError(413, "BAD_MESSAGE")
        messages.append(body[position : position + size])
        position += size
    return messages


def parse_mpub_lines(body: bytes, max_msg_size: int, max_body_size: int) -> List[bytes]:
    """
    ``POST /mpub`` (text mode): one message per ``\\n``-terminated line,
    empty lines skipped, ``\\r`` kept; the last line needs no newline.

    Go reads at most ``max_body_size + 1`` bytes and checks each line in
    turn, so a line above ``max_msg_size`` before that point wins over the
    body size.

    :raises APIError: ``413 BODY_TOO_BIG`` when the body is larger than
        ``max_body_size``; ``413 MSG_TOO_BIG`` for a line longer than
        ``max_msg_size``.
    """
    read_max = max_body_size + 1
    data = body[:read_max]
    messages: List[bytes] = []
    total = 0
    position = 0
    while True:
        newline = data.find(b"\n", position)
        last = newline < 0
        stop = len(data) if last else newline + 1
        block = data[position:stop]
        position = stop
        total += len(block)
        if total == read_max:
            raise APIError(413, "BODY_TOO_BIG")
        if block.endswith(b"\n"):
            block = block[:-1]
        if block:
            if len(block) > max_msg_size:
                raise APIError(413, "MSG_TOO_BIG")
            messages.append(block)
        if last:
            return messages


def decode_string_list(body: bytes) -> Optional[List[str]]:
    """
    ``json.Unmarshal`` into a ``[]string``: a JSON array of strings
    (``null`` items become ``""``, ``null`` itself an empty list); None
    when Go would fail.
    """
    try:
        value = json.loads(body.decode("utf-8", "replace"), parse_constant=_no_constant)
    except ValueError:
        return None
    if value is None:
        return []
    if not isinstance(value, list):
        return None
    result: List[str] = []
    for item in value:
        if item is None:
            item = ""
        if not isinstance(item, str):
            return None
        result.append(item)
    return result


def _no_constant(name: str) -> Any:
    """Go's JSON has no NaN or Infinity."""
    raise ValueError(name)
