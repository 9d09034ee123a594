# -*- test-case-name: tests.test_protocol_message -*-
"""
The message payload of a V2 message frame (and of every queued message):

``i64 timestamp (ns) | u16 attempts | 16-byte id | body``, big endian.

The id is 16 ASCII hex digits.  Messages are kept encoded; these helpers
read and rewrite fields without decoding the whole payload.
"""

from __future__ import annotations

import struct
from typing import Any, Tuple

from txnsq.speedups import load as load_compiled

__all__ = [
    "MESSAGE_HEADER_LENGTH",
    "MESSAGE_ID_LENGTH",
    "compiled",
    "decode_message",
    "encode_message",
    "message_attempts",
    "message_frame",
    "message_id",
    "message_timestamp",
    "pure_encode_message",
    "pure_message_frame",
    "pure_with_attempts",
    "with_attempts",
]

MESSAGE_ID_LENGTH = 16
MESSAGE_HEADER_LENGTH = 26

_PREFIX = struct.Struct(">qH")
_pack_prefix = _PREFIX.pack
_unpack_prefix = _PREFIX.unpack_from
_ATTEMPTS = struct.Struct(">H")
_pack_attempts = _ATTEMPTS.pack
_unpack_attempts = _ATTEMPTS.unpack_from


def encode_message(timestamp_ns: int, attempts: int, msg_id: bytes, body: bytes) -> bytes:
    """
    The payload for one message.

    :raises ValueError: ``msg_id`` is not 16 bytes.
    :raises struct.error: ``attempts`` outside 0..65535 or the timestamp
        outside int64.
    """
    if len(msg_id) != MESSAGE_ID_LENGTH:
        raise ValueError("message id must be %d bytes, not %d" % (MESSAGE_ID_LENGTH, len(msg_id)))
    return _pack_prefix(timestamp_ns, attempts) + msg_id + body


def decode_message(data: bytes) -> Tuple[int, int, bytes, bytes]:
    """
    ``(timestamp_ns, attempts, msg_id, body)`` of a payload.

    :raises ValueError: fewer than 26 bytes (Go: "not enough data to decode
        valid message").
    """
    if len(data) < MESSAGE_HEADER_LENGTH:
        raise ValueError("not enough data to decode valid message")
    timestamp, attempts = _unpack_prefix(data, 0)
    return timestamp, attempts, bytes(data[10:26]), bytes(data[26:])


def message_id(data: bytes) -> bytes:
    """The 16-byte id of a payload."""
    return data[10:26]


def message_attempts(data: bytes) -> int:
    """The attempts counter of a payload."""
    attempts: int = _unpack_attempts(data, 8)[0]
    return attempts


def message_timestamp(data: bytes) -> int:
    """The timestamp (ns since the epoch) of a payload."""
    timestamp: int = _unpack_prefix(data, 0)[0]
    return timestamp


def with_attempts(data: bytes, attempts: int) -> bytes:
    """A copy of the payload with its attempts counter set to ``attempts``."""
    return data[:8] + _pack_attempts(attempts) + data[10:]


_pack_frame_header = struct.Struct(">ii").pack


def message_frame(data: bytes) -> bytes:
    """
    The V2 frame of a message payload (``size | FRAME_TYPE_MESSAGE |
    payload``), header and payload in one ``bytes``.
    """
    return _pack_frame_header(len(data) + 4, 2) + data


#: The pure-Python encoders: the reference the compiled ones
#: (``txnsq/protocol/_message.c``) are tested against byte for byte, and
#: what those call for any input outside their fast case.
pure_encode_message = encode_message
pure_with_attempts = with_attempts
pure_message_frame = message_frame

#: The compiled module in use, or ``None`` (pure Python).
compiled: Any = load_compiled("txnsq.protocol._message")
if compiled is not None:
    encode_message = compiled.encode_message  # noqa: F811
    with_attempts = compiled.with_attempts  # noqa: F811
    message_frame = compiled.message_frame  # noqa: F811
