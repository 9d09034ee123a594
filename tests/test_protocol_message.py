"""
Tests for txnsq.protocol.message: the message payload
``i64 timestamp | u16 attempts | 16-byte id | body``.
"""

from __future__ import annotations

import struct

from twisted.trial.unittest import SynchronousTestCase

from txnsq.protocol.message import (
    MESSAGE_HEADER_LENGTH,
    MESSAGE_ID_LENGTH,
    decode_message,
    encode_message,
    message_attempts,
    message_id,
    message_timestamp,
    with_attempts,
)

ID = b"0a1b2c3d4e5f6789"
TIMESTAMP = 1700000000123456789


class EncodeMessageTests(SynchronousTestCase):
    """encode_message lays the fields out as Go's Message.WriteTo."""

    def test_layout(self) -> None:
        """Timestamp (int64 BE), attempts (uint16 BE), id, body."""
        data = encode_message(TIMESTAMP, 1, ID, b"hello")
        self.assertEqual(data, struct.pack(">qH", TIMESTAMP, 1) + ID + b"hello")
        # A message frame of "hello": 4 (type) + 26 + 5 = the recorded size 35.
        self.assertEqual(len(data) + 4, 35)

    def test_constants(self) -> None:
        """Ids are 16 bytes and the header 26."""
        self.assertEqual(MESSAGE_ID_LENGTH, 16)
        self.assertEqual(MESSAGE_HEADER_LENGTH, 26)

    def test_empty_body(self) -> None:
        """A payload may have an empty body."""
        self.assertEqual(len(encode_message(0, 0, ID, b"")), MESSAGE_HEADER_LENGTH)

    def test_bad_id(self) -> None:
        """An id that is not 16 bytes is refused."""
        self.assertRaises(ValueError, encode_message, 0, 1, b"short", b"x")

    def test_attempts_range(self) -> None:
        """Attempts must fit in 16 bits."""
        self.assertRaises(struct.error, encode_message, 0, 65536, ID, b"x")
        self.assertEqual(message_attempts(encode_message(0, 65535, ID, b"x")), 65535)


class DecodeMessageTests(SynchronousTestCase):
    """decode_message and the field accessors read payloads back."""

    def test_round_trip(self) -> None:
        """Decoding gives back what was encoded."""
        body = bytes(range(256))
        data = encode_message(TIMESTAMP, 7, ID, body)
        self.assertEqual(decode_message(data), (TIMESTAMP, 7, ID, body))

    def test_negative_timestamp(self) -> None:
        """The timestamp is signed, as Go's int64."""
        self.assertEqual(decode_message(encode_message(-1, 1, ID, b"b"))[0], -1)

    def test_too_short(self) -> None:
        """Fewer than 26 bytes cannot be a message."""
        self.assertRaises(ValueError, decode_message, b"\x00" * 25)
        self.assertEqual(decode_message(b"\x00" * 10 + ID), (0, 0, ID, b""))

    def test_accessors(self) -> None:
        """message_id, message_attempts and message_timestamp read single fields."""
        data = encode_message(TIMESTAMP, 3, ID, b"body")
        self.assertEqual(message_id(data), ID)
        self.assertEqual(message_attempts(data), 3)
        self.assertEqual(message_timestamp(data), TIMESTAMP)

    def test_with_attempts(self) -> None:
        """with_attempts changes only the attempts counter."""
        data = encode_message(TIMESTAMP, 1, ID, b"body")
        changed = with_attempts(data, 2)
        self.assertEqual(decode_message(changed), (TIMESTAMP, 2, ID, b"body"))
        self.assertEqual(len(changed), len(data))
        self.assertEqual(decode_message(data)[1], 1)
