# -*- test-case-name: tests.test_protocol_lookup_v1 -*-
"""
nsqlookupd's V1 TCP protocol, sans-IO: both ends.

A producer (nsqd) connects, sends the magic :data:`MAGIC_V1` (two spaces and
``V1``), then line commands:

- ``IDENTIFY\\n`` followed by a 4-byte big-endian size and a JSON body
  (``broadcast_address``, ``tcp_port``, ``http_port``, ``version`` required,
  ``hostname`` optional);
- ``REGISTER topic [channel]\\n``, ``UNREGISTER topic [channel]\\n``;
- ``PING\\n``.

Every reply is ``u32 size | data`` with no frame type: ``OK``, the lookupd's
own IDENTIFY JSON, or an error (``E_INVALID ...``) after which Go's
nsqlookupd closes the connection.  Lines are whitespace-trimmed and split on
single spaces, as Go's ``strings.TrimSpace`` / ``strings.Split`` do.

The server side is :class:`V1CommandParser` plus the checks
:func:`topic_and_channel` and :func:`parse_peer_info`; the client side is
:func:`encode_identify`, :func:`encode_register`, :func:`encode_unregister`,
:data:`PING` and :class:`V1ResponseParser`.
"""

from __future__ import annotations

import codecs
import json
import re
import struct
from typing import Any, Dict, List, Mapping, Optional, Tuple

from txnsq.protocol.errors import ProtocolError, protocol_error
from txnsq.protocol.go_json import go_json
from txnsq.protocol.names import is_valid_channel_name, is_valid_topic_name

__all__ = [
    "MAGIC_V1",
    "MAX_IDENTIFY_BODY",
    "MAX_LINE",
    "PING",
    "LookupCommand",
    "PeerInfo",
    "V1CommandParser",
    "V1ResponseParser",
    "encode_identify",
    "encode_register",
    "encode_response",
    "encode_unregister",
    "identify_reply",
    "parse_peer_info",
    "topic_and_channel",
    "trim_space",
]

MAGIC_V1 = b"  V1"
PING = b"PING\n"

#: Longest command line buffered while waiting for its newline.  Go's reader
#: has no limit; a real V1 line is at most ``UNREGISTER`` + two 64-byte
#: names, and a bound keeps one peer from filling memory.
MAX_LINE = 64 * 1024
#: Largest IDENTIFY body accepted.  Go allocates whatever size is sent (and
#: panics on a negative one); a real body is a few hundred bytes.
MAX_IDENTIFY_BODY = 1024 * 1024

_SIZE = struct.Struct(">l")
_USIZE = struct.Struct(">L")
# strings.TrimSpace's ASCII whitespace.
_WHITESPACE = b" \t\n\r\v\f"
# The non-ASCII runes Go's unicode.IsSpace accepts (TrimSpace falls back to
# it as soon as a line holds a non-ASCII byte).  Python's str.isspace also
# counts U+001C..U+001F, which Go does not.
_UNICODE_SPACES = frozenset(
    "\t\n\v\f\r \x85\xa0\u1680\u2000\u2001\u2002\u2003\u2004\u2005"
    "\u2006\u2007\u2008\u2009\u200a\u2028\u2029\u202f\u205f\u3000"
)


def trim_space(line: bytes) -> bytes:
    """
    Go's ``strings.TrimSpace``: strip leading and trailing ASCII white
    space and, where the bytes are valid UTF-8, Unicode white space
    (U+0085, U+00A0, U+2000 ...).  An invalid byte stops the trimming, as
    Go decodes it to U+FFFD, which is not space.
    """
    line = line.strip(_WHITESPACE)
    if line.isascii():
        return line
    start, end = 0, len(line)
    while start < end:
        size = _space_at(line, start)
        if not size:
            break
        start += size
    while end > start:
        size = _space_before(line, end, start)
        if not size:
            break
        end -= size
    return line[start:end]


def _space_at(data: bytes, at: int) -> int:
    """The byte length of the white space rune starting at ``at``, else 0."""
    lead = data[at]
    size = 1 if lead < 0xC0 else 2 if lead < 0xE0 else 3 if lead < 0xF0 else 4
    return size if _is_space_rune(data[at : at + size]) else 0


def _space_before(data: bytes, end: int, floor: int) -> int:
    """The byte length of the white space rune ending at ``end``, else 0."""
    for size in (1, 2, 3, 4):
        if end - size < floor:
            return 0
        if data[end - size] & 0xC0 != 0x80:  # a rune's first byte (Go's RuneStart)
            return size if _is_space_rune(data[end - size : end]) else 0
    return 0


def _is_space_rune(encoded: bytes) -> bool:
    try:
        rune = encoded.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return rune in _UNICODE_SPACES


class LookupCommand:
    """
    One V1 command: its name, its space-separated parameters and, for
    ``IDENTIFY``, its body.
    """

    __slots__ = ("name", "params", "body")

    def __init__(self, name: bytes, params: List[bytes], body: Optional[bytes] = None) -> None:
        self.name = name
        self.params = params
        self.body = body

    def __repr__(self) -> str:
        return "LookupCommand(%r, %r, %r)" % (self.name, self.params, self.body)


class V1CommandParser:
    """
    Incremental parser of what a producer sends after the magic.

    :meth:`feed` bytes, then call :meth:`next_command` until it returns
    ``None``.  It raises :class:`ProtocolError` for input that cannot be
    framed (an over-long line, a bad IDENTIFY body size); every such error
    is fatal.
    """

    def __init__(self) -> None:
        self._buf = bytearray()
        # The IDENTIFY line whose body is still being read.
        self._pending: Optional[LookupCommand] = None

    def feed(self, data: bytes) -> None:
        """Add received bytes."""
        self._buf += data

    def next_command(self) -> Optional[LookupCommand]:
        """The next complete command, or ``None`` until more bytes come."""
        buf = self._buf
        if self._pending is None:
            end = buf.find(b"\n")
            if end < 0:
                if len(buf) > MAX_LINE:
                    raise protocol_error("E_INVALID", "command line too long")
                return None
            line = trim_space(bytes(buf[:end]))
            del buf[: end + 1]
            parts = line.split(b" ")
            command = LookupCommand(parts[0], parts[1:])
            if command.name != b"IDENTIFY":
                return command
            self._pending = command
        if len(buf) < 4:
            return None
        (size,) = _SIZE.unpack_from(buf)
        if size < 0 or size > MAX_IDENTIFY_BODY:
            raise protocol_error("E_BAD_BODY", "IDENTIFY failed to read body size")
        if len(buf) < 4 + size:
            return None
        command = self._pending
        command.body = bytes(buf[4 : 4 + size])
        del buf[: 4 + size]
        self._pending = None
        return command

    def expects_body(self) -> bool:
        """Whether an IDENTIFY line was read and its body is awaited."""
        return self._pending is not None


def encode_response(data: bytes) -> bytes:
    """A V1 reply: ``u32 size | data``."""
    return _USIZE.pack(len(data)) + data


def topic_and_channel(verb: str, params: List[bytes]) -> Tuple[str, str]:
    """
    The topic and (possibly empty) channel of ``REGISTER``/``UNREGISTER``,
    checked as Go's ``getTopicChan``: fatal ``E_INVALID`` without a topic,
    ``E_BAD_TOPIC``/``E_BAD_CHANNEL`` for invalid names (quoted with single
    quotes, not Go's ``%q``).
    """
    if not params:
        raise protocol_error("E_INVALID", "%s insufficient number of params" % (verb,))
    topic = params[0]
    channel = params[1] if len(params) >= 2 else b""
    if not is_valid_topic_name(topic):
        raise protocol_error(
            "E_BAD_TOPIC",
            verb.encode() + b" topic name '" + topic + b"' is not valid",
        )
    if channel and not is_valid_channel_name(channel):
        raise protocol_error(
            "E_BAD_CHANNEL",
            verb.encode() + b" channel name '" + channel + b"' is not valid",
        )
    return topic.decode("ascii"), channel.decode("ascii")


class PeerInfo:
    """
    What a producer told nsqlookupd about itself in IDENTIFY.

    :ivar id: the producer's remote address; registrations are keyed by it.
    :ivar last_update: when it last IDENTIFYed or PINGed (seconds).
    """

    __slots__ = (
        "id",
        "remote_address",
        "hostname",
        "broadcast_address",
        "tcp_port",
        "http_port",
        "version",
        "last_update",
    )

    def __init__(
        self,
        id: str,
        remote_address: str = "",
        hostname: str = "",
        broadcast_address: str = "",
        tcp_port: int = 0,
        http_port: int = 0,
        version: str = "",
        last_update: float = 0.0,
    ) -> None:
        self.id = id
        self.remote_address = remote_address
        self.hostname = hostname
        self.broadcast_address = broadcast_address
        self.tcp_port = tcp_port
        self.http_port = http_port
        self.version = version
        self.last_update = last_update

    def to_json(self) -> Dict[str, Any]:
        """The fields in Go's ``PeerInfo`` order, as ``/lookup`` and ``/nodes`` show them."""
        return {
            "remote_address": self.remote_address,
            "hostname": self.hostname,
            "broadcast_address": self.broadcast_address,
            "tcp_port": self.tcp_port,
            "http_port": self.http_port,
            "version": self.version,
        }

    def __repr__(self) -> str:
        return "PeerInfo(%r, %s:%d/%d)" % (
            self.id,
            self.broadcast_address,
            self.tcp_port,
            self.http_port,
        )


# PeerInfo's JSON fields and their Go types, for json.Unmarshal's checks.
_PEER_FIELDS: Tuple[Tuple[str, type], ...] = (
    ("remote_address", str),
    ("hostname", str),
    ("broadcast_address", str),
    ("tcp_port", int),
    ("http_port", int),
    ("version", str),
)

_BAD_JSON = "IDENTIFY failed to decode JSON body"

_FIELD_TYPES: Dict[str, type] = dict(_PEER_FIELDS)


class _NotGoJSON(ValueError):
    """Input Python's decoder takes but Go's refuses (NaN, Infinity)."""


class _Pairs(list):  # type: ignore[type-arg]
    """A JSON object's ``(key, value)`` pairs, in order, repeats kept."""


def _refuse_constant(name: str) -> Any:
    raise _NotGoJSON(name)


def _go_fold(key: str) -> str:
    """
    A key folded as encoding/json matches object keys to fields: ASCII
    case-insensitively, plus the two non-ASCII runes that fold onto ASCII
    letters (U+017F LONG S onto ``s``, U+212A KELVIN SIGN onto ``k``).
    Python's ``lower``/``casefold`` would also fold ``ß`` onto ``ss``.
    """
    folded = []
    for char in key:
        if char == "\u017f":
            char = "s"
        elif char == "\u212a":
            char = "k"
        elif "A" <= char <= "Z":
            char = chr(ord(char) + 32)
        folded.append(char)
    return "".join(folded)


def _go_int(value: Any) -> int:
    # A Go int field takes a JSON integer only (no 1.0, no "1"), in int64.
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(value)
    if not -(1 << 63) <= value < (1 << 63):
        raise ValueError(value)
    return value


def _go_str(value: Any) -> str:
    if not isinstance(value, str):
        raise ValueError(value)
    # Go decodes an escaped lone surrogate (\ud800) to U+FFFD.
    return _LONE_SURROGATE.sub("\ufffd", value)


_LONE_SURROGATE = re.compile("[\ud800-\udfff]")


def _per_byte_replace(error: UnicodeError) -> Tuple[str, int]:
    # Go's decoder turns every invalid byte into its own U+FFFD.
    assert isinstance(error, UnicodeDecodeError)
    return "\ufffd" * (error.end - error.start), error.end


codecs.register_error("txnsq-go-replace", _per_byte_replace)


def parse_peer_info(body: bytes, remote_address: str, now: float) -> PeerInfo:
    """
    Decode an IDENTIFY body as Go's nsqlookupd does: ``json.Unmarshal``
    into ``PeerInfo`` (keys matched case-insensitively, a later key
    overriding an earlier one, unknown keys and ``null`` ignored, wrong
    types refused, invalid UTF-8 in strings replaced by U+FFFD), then all of
    ``broadcast_address``, ``tcp_port``, ``http_port`` and ``version``
    required.  ``remote_address`` always comes from the connection.

    :raises ProtocolError: fatal ``E_BAD_BODY``.
    """
    try:
        document = json.loads(
            body.decode("utf-8", "txnsq-go-replace"),
            # Pairs, not a dict: with a repeated key Go keeps the last
            # non-null value, while a dict would keep a trailing null.
            object_pairs_hook=_Pairs,
            parse_constant=_refuse_constant,
        )
    except ValueError:
        raise protocol_error("E_BAD_BODY", _BAD_JSON)
    if document is None:
        # Unmarshalling null into a struct is a no-op.
        document = _Pairs()
    if not isinstance(document, _Pairs):
        raise protocol_error("E_BAD_BODY", _BAD_JSON)
    values: Dict[str, Any] = {}
    for key, value in document:
        name = key if key in _FIELD_TYPES else _go_fold(key)
        kind = _FIELD_TYPES.get(name)
        if kind is None or value is None:
            continue
        try:
            values[name] = _go_int(value) if kind is int else _go_str(value)
        except ValueError:
            # Go reports the type error once the whole body is decoded.
            raise protocol_error("E_BAD_BODY", _BAD_JSON)
    peer = PeerInfo(
        id=remote_address,
        remote_address=remote_address,
        hostname=values.get("hostname", ""),
        broadcast_address=values.get("broadcast_address", ""),
        tcp_port=values.get("tcp_port", 0),
        http_port=values.get("http_port", 0),
        version=values.get("version", ""),
        last_update=now,
    )
    if not (peer.broadcast_address and peer.tcp_port and peer.http_port and peer.version):
        raise protocol_error("E_BAD_BODY", "IDENTIFY missing fields")
    return peer


def identify_reply(
    broadcast_address: str, hostname: str, tcp_port: int, http_port: int, version: str
) -> bytes:
    """
    nsqlookupd's answer to IDENTIFY: its own address, ports and version, as
    Go marshals its ``map[string]interface{}`` (keys sorted).
    """
    return go_json(
        {
            "broadcast_address": broadcast_address,
            "hostname": hostname,
            "http_port": http_port,
            "tcp_port": tcp_port,
            "version": version,
        }
    )


# -- the producer's side -----------------------------------------------------


def encode_identify(info: Mapping[str, Any]) -> bytes:
    """
    ``IDENTIFY`` with its size-prefixed JSON body.  Go's nsqd sends a map,
    so the keys go out sorted.
    """
    body = go_json(dict(sorted(info.items())))
    return b"IDENTIFY\n" + _USIZE.pack(len(body)) + body


def _names(topic: str, channel: str) -> bytes:
    if channel:
        return (topic + " " + channel).encode("ascii")
    return topic.encode("ascii")


def encode_register(topic: str, channel: str = "") -> bytes:
    """``REGISTER topic [channel]\\n``."""
    return b"REGISTER " + _names(topic, channel) + b"\n"


def encode_unregister(topic: str, channel: str = "") -> bytes:
    """``UNREGISTER topic [channel]\\n``."""
    return b"UNREGISTER " + _names(topic, channel) + b"\n"


class V1ResponseParser:
    """
    Splits what nsqlookupd sends back into replies (``u32 size | data``).

    :param max_size: refuse a reply claiming more than this many bytes.
    """

    def __init__(self, max_size: int = MAX_IDENTIFY_BODY) -> None:
        self._buf = bytearray()
        self._max_size = max_size

    def feed(self, data: bytes) -> None:
        """Add received bytes."""
        self._buf += data

    def next_response(self) -> Optional[bytes]:
        """The next complete reply's data, or ``None`` until more bytes come."""
        buf = self._buf
        if len(buf) < 4:
            return None
        (size,) = _USIZE.unpack_from(buf)
        if size > self._max_size:
            raise ProtocolError("E_BAD_RESPONSE", "reply of %d bytes" % (size,))
        if len(buf) < 4 + size:
            return None
        data = bytes(buf[4 : 4 + size])
        del buf[: 4 + size]
        return data
