"""
Tests for txnsq.protocol.v2_client: every command the client encodes is
read back by nsqd's own parser (txnsq.protocol.v2), error frames become
NSQError, names are checked with nsqd's texts, and the handshake frame
splitter cuts one frame at a time.
"""

from __future__ import annotations

import json
import struct
from typing import List

from twisted.trial.unittest import SynchronousTestCase

from txnsq.protocol import v2_client as codec
from txnsq.protocol.frames import FRAME_TYPE_ERROR, FRAME_TYPE_MESSAGE, FRAME_TYPE_RESPONSE, encode_frame
from txnsq.protocol.v2 import Command, V2CommandParser
from txnsq.protocol.v2_client import MalformedFrame, NSQError

MSG_ID = b"0123456789abcdef"


def parse(data: bytes) -> List[Command]:
    """What nsqd's command parser reads from ``data``."""
    parser = V2CommandParser(max_msg_size=1 << 20, max_body_size=5 << 20, max_req_timeout_ms=3600000)
    parser.feed(data)
    commands = []
    while True:
        command = parser.next_command()
        if command is None:
            break
        commands.append(command)
    assert parser.buffered() == 0
    return commands


class EncoderTests(SynchronousTestCase):
    """Commands as nsqd's parser reads them."""

    def test_identify(self) -> None:
        """IDENTIFY carries its fields as a size-prefixed JSON body."""
        [command] = parse(codec.identify({"client_id": "a", "heartbeat_interval": 1000}))
        self.assertEqual(command.name, b"IDENTIFY")
        assert isinstance(command.body, bytes)
        self.assertEqual(json.loads(command.body), {"client_id": "a", "heartbeat_interval": 1000})

    def test_auth(self) -> None:
        """AUTH carries the secret, str as UTF-8."""
        [command] = parse(codec.auth("s\u00e9cret"))
        self.assertEqual((command.name, command.body), (b"AUTH", "s\u00e9cret".encode("utf-8")))
        [command] = parse(codec.auth(b"\x00raw"))
        self.assertEqual(command.body, b"\x00raw")

    def test_line_commands(self) -> None:
        """SUB, RDY, FIN, REQ, TOUCH, NOP and CLS are single lines."""
        data = (
            codec.sub("t", "c#ephemeral")
            + codec.rdy(100)
            + codec.fin(MSG_ID)
            + codec.req(MSG_ID, 1500)
            + codec.touch(MSG_ID)
            + codec.nop()
            + codec.cls()
        )
        self.assertEqual(
            [(c.name, c.params) for c in parse(data)],
            [
                (b"SUB", [b"t", b"c#ephemeral"]),
                (b"RDY", [b"100"]),
                (b"FIN", [MSG_ID]),
                (b"REQ", [MSG_ID, b"1500"]),
                (b"TOUCH", [MSG_ID]),
                (b"NOP", []),
                (b"CLS", []),
            ],
        )

    def test_pub(self) -> None:
        """PUB carries one binary body."""
        [command] = parse(codec.pub("t", b"\x00\n body"))
        self.assertEqual((command.name, command.params, command.body), (b"PUB", [b"t"], b"\x00\n body"))

    def test_mpub(self) -> None:
        """MPUB carries the count and each size-prefixed body."""
        bodies = [b"one", b"", b"three\n"]
        data = codec.mpub(b"t", [b"one", b"x" * 70000, b"three\n"])
        [command] = parse(data)
        self.assertEqual((command.name, command.body), (b"MPUB", [b"one", b"x" * 70000, b"three\n"]))
        body = codec.mpub_body(bodies)
        self.assertEqual(body[:4], struct.pack(">I", 3))

    def test_dpub(self) -> None:
        """DPUB carries the delay in milliseconds and one body."""
        [command] = parse(codec.dpub("t", 2500, b"later"))
        self.assertEqual((command.name, command.defer_ms, command.body), (b"DPUB", 2500, b"later"))


class ErrorTests(SynchronousTestCase):
    """Error frames and name checks."""

    def test_parse_fatal(self) -> None:
        """An error frame's code and text; every code but three is fatal."""
        error = codec.parse_error(b'E_BAD_TOPIC PUB topic name "a b" is not valid')
        self.assertEqual(
            (error.code, error.description, error.fatal),
            ("E_BAD_TOPIC", 'PUB topic name "a b" is not valid', True),
        )
        self.assertEqual(str(error), 'E_BAD_TOPIC PUB topic name "a b" is not valid')

    def test_parse_non_fatal(self) -> None:
        """E_FIN_FAILED, E_REQ_FAILED and E_TOUCH_FAILED are not fatal."""
        for code in ("E_FIN_FAILED", "E_REQ_FAILED", "E_TOUCH_FAILED"):
            self.assertFalse(codec.parse_error(code.encode() + b" x").fatal)

    def test_parse_bare_code(self) -> None:
        """A code alone (E_BAD_PROTOCOL) has an empty description."""
        error = codec.parse_error(b"E_BAD_PROTOCOL")
        self.assertEqual((error.code, error.description, str(error)), ("E_BAD_PROTOCOL", "", "E_BAD_PROTOCOL"))

    def test_parse_binary(self) -> None:
        """Bytes that are not UTF-8 are shown escaped."""
        self.assertEqual(codec.parse_error(b"E_INVALID \xff").description, "\\xff")

    def test_nsq_error_constructor(self) -> None:
        """NSQError('E_BAD_TOPIC') is enough; fatal follows nsqd's rule unless given."""
        self.assertTrue(NSQError("E_BAD_TOPIC").fatal)
        self.assertFalse(NSQError("E_BAD_TOPIC", fatal=False).fatal)

    def test_check_topic(self) -> None:
        """An invalid topic is E_BAD_TOPIC with nsqd's text, non-fatal; a valid one passes."""
        codec.check_topic("PUB", "t.1_x-y#ephemeral")
        error = self.assertRaises(NSQError, codec.check_topic, "PUB", "a b")
        self.assertEqual((error.code, error.description, error.fatal), ("E_BAD_TOPIC", 'PUB topic name "a b" is not valid', False))
        self.assertRaises(NSQError, codec.check_topic, "PUB", "x" * 65)
        self.assertRaises(NSQError, codec.check_topic, "PUB", "")

    def test_check_channel(self) -> None:
        """An invalid channel is E_BAD_CHANNEL."""
        error = self.assertRaises(NSQError, codec.check_channel, "SUB", "c\n")
        self.assertEqual(error.description, 'SUB channel name "c\\n" is not valid')


class SplitFrameTests(SynchronousTestCase):
    """split_frame cuts exactly one frame, or waits, or refuses garbage."""

    def test_one_frame(self) -> None:
        """The first frame and its length; the rest is left alone."""
        data = encode_frame(FRAME_TYPE_RESPONSE, b"OK") + b"compressed..."
        self.assertEqual(codec.split_frame(data, 1000), (FRAME_TYPE_RESPONSE, b"OK", 10))

    def test_incomplete(self) -> None:
        """Every prefix of a frame is incomplete."""
        data = encode_frame(FRAME_TYPE_MESSAGE, b"x" * 30)
        for end in range(len(data)):
            self.assertIsNone(codec.split_frame(data[:end], 1000))
        self.assertEqual(codec.split_frame(bytearray(data), 1000), (FRAME_TYPE_MESSAGE, b"x" * 30, len(data)))

    def test_garbage(self) -> None:
        """An HTTP reply is refused at its header, without waiting for its 'size'."""
        self.assertRaises(MalformedFrame, codec.split_frame, b"HTTP/1.1 400 Bad Request\r\n", 1 << 20)

    def test_bad_type(self) -> None:
        """An unknown frame type is refused."""
        self.assertRaises(MalformedFrame, codec.split_frame, struct.pack(">ii", 6, 7) + b"xx", 1000)

    def test_bad_size(self) -> None:
        """A size below 4 or above the limit is refused."""
        self.assertRaises(MalformedFrame, codec.split_frame, struct.pack(">ii", 3, FRAME_TYPE_ERROR), 1000)
        self.assertRaises(MalformedFrame, codec.split_frame, struct.pack(">ii", 1001, FRAME_TYPE_ERROR), 1000)
