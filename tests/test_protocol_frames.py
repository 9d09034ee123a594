"""
Tests for txnsq.protocol.frames: V2 frame encoding and the client-side
FrameParser.
"""

from __future__ import annotations

import struct
from typing import Any, Dict, Iterator, List, Tuple

from twisted.trial.unittest import SynchronousTestCase

from tests.integration.conformance import load_fixture, unescape
from txnsq.protocol.frames import (
    CLOSE_WAIT_FRAME,
    FRAME_TYPE_ERROR,
    FRAME_TYPE_MESSAGE,
    FRAME_TYPE_RESPONSE,
    HEARTBEAT_FRAME,
    OK_FRAME,
    FrameError,
    FrameParser,
    encode_frame,
    encode_message_frame_header,
)


def recorded_frames() -> Iterator[Dict[str, Any]]:
    """Every literal (non-template, non-JSON) frame Go nsqd sent in tcp_v2.json."""
    for case in load_fixture("tcp_v2.json")["cases"]:
        for step in case["steps"]:
            for frame in step.get("expect_frames", []):
                if "data" in frame and not frame.get("template"):
                    yield frame


class EncodeFrameTests(SynchronousTestCase):
    """Frames are u32 size | i32 type | data, size counting the type."""

    def test_frame_types(self) -> None:
        """Response 0, error 1, message 2."""
        self.assertEqual((FRAME_TYPE_RESPONSE, FRAME_TYPE_ERROR, FRAME_TYPE_MESSAGE), (0, 1, 2))

    def test_encode(self) -> None:
        """encode_frame writes size = 4 + len(data), the type and the data."""
        self.assertEqual(encode_frame(FRAME_TYPE_ERROR, b"E_BAD_PROTOCOL"), b"\x00\x00\x00\x12\x00\x00\x00\x01E_BAD_PROTOCOL")
        self.assertEqual(encode_frame(0, b""), b"\x00\x00\x00\x04\x00\x00\x00\x00")

    def test_constants(self) -> None:
        """OK, heartbeat and CLOSE_WAIT frames are Go's exact bytes."""
        self.assertEqual(OK_FRAME, b"\x00\x00\x00\x06\x00\x00\x00\x00OK")
        self.assertEqual(HEARTBEAT_FRAME, b"\x00\x00\x00\x0f\x00\x00\x00\x00_heartbeat_")
        self.assertEqual(CLOSE_WAIT_FRAME, b"\x00\x00\x00\x0e\x00\x00\x00\x00CLOSE_WAIT")

    def test_message_header(self) -> None:
        """A message frame header announces the payload plus the type field."""
        payload = b"p" * 31
        header = encode_message_frame_header(len(payload))
        self.assertEqual(header, struct.pack(">ii", 35, 2))
        self.assertEqual(header + payload, encode_frame(FRAME_TYPE_MESSAGE, payload))

    def test_recorded_sizes(self) -> None:
        """Every recorded frame's size is reproduced by encode_frame."""
        count = 0
        for frame in recorded_frames():
            encoded = encode_frame(frame["type"], unescape(frame["data"]))
            self.assertEqual(struct.unpack(">I", encoded[:4])[0], frame["size"], frame)
            count += 1
        self.assertTrue(count > 50)


class FrameParserTests(SynchronousTestCase):
    """FrameParser cuts a byte stream into (type, data) frames."""

    def test_one_frame(self) -> None:
        """A whole frame comes out at once."""
        self.assertEqual(FrameParser().feed(OK_FRAME), [(0, b"OK")])

    def test_several_frames(self) -> None:
        """Several frames in one read come out in order."""
        data = OK_FRAME + encode_frame(1, b"E_INVALID x") + encode_frame(2, b"m" * 30)
        self.assertEqual(FrameParser().feed(data), [(0, b"OK"), (1, b"E_INVALID x"), (2, b"m" * 30)])

    def test_byte_at_a_time(self) -> None:
        """Frames fed one byte at a time come out when their last byte arrives."""
        data = HEARTBEAT_FRAME + encode_frame(1, b"E_INVALID x") + encode_frame(0, b"")
        parser = FrameParser()
        out: List[Tuple[int, bytes]] = []
        ends = []
        for index in range(len(data)):
            frames = parser.feed(data[index : index + 1])
            if frames:
                ends.append(index)
            out.extend(frames)
        self.assertEqual(out, [(0, b"_heartbeat_"), (1, b"E_INVALID x"), (0, b"")])
        self.assertEqual(ends, [18, 18 + 19, 18 + 19 + 8])
        self.assertEqual(parser.buffered(), 0)

    def test_partial_kept(self) -> None:
        """An incomplete frame is held until the rest arrives."""
        parser = FrameParser()
        self.assertEqual(parser.feed(OK_FRAME + OK_FRAME[:5]), [(0, b"OK")])
        self.assertEqual(parser.buffered(), 5)
        self.assertEqual(parser.feed(OK_FRAME[5:]), [(0, b"OK")])

    def test_large_stream(self) -> None:
        """Many frames across many reads are all decoded (buffer compaction)."""
        frames = [encode_frame(2, bytes([i % 256]) * (i % 300)) for i in range(2000)]
        data = b"".join(frames)
        parser = FrameParser()
        out: List[Tuple[int, bytes]] = []
        for start in range(0, len(data), 7777):
            out.extend(parser.feed(data[start : start + 7777]))
        self.assertEqual(out, [(2, bytes([i % 256]) * (i % 300)) for i in range(2000)])

    def test_every_split_and_input_type(self) -> None:
        """A stream cut at any point, given as bytes, bytearray or memoryview, gives the same frames as bytes."""
        data = OK_FRAME + encode_frame(2, b"m" * 30) + encode_frame(1, b"E_INVALID x")
        expected = [(0, b"OK"), (2, b"m" * 30), (1, b"E_INVALID x")]
        for kind in (bytes, bytearray, memoryview):
            for cut in range(len(data) + 1):
                parser = FrameParser()
                out = parser.feed(kind(data[:cut])) + parser.feed(kind(data[cut:]))
                self.assertEqual(out, expected, (kind, cut))
                self.assertEqual({type(frame) for _, frame in out}, {bytes})
                self.assertEqual(parser.buffered(), 0)

    def test_error_after_held_bytes(self) -> None:
        """A bad size found after held-back bytes is an error, and the parser holds nothing more."""
        parser = FrameParser()
        self.assertEqual(parser.feed(OK_FRAME + b"\x00\x00"), [(0, b"OK")])
        self.assertRaises(FrameError, parser.feed, b"\x00\x01\x00\x00\x00\x00")
        self.assertEqual(parser.buffered(), 0)
        self.assertRaises(FrameError, parser.feed, OK_FRAME)

    def test_size_too_small(self) -> None:
        """A size below 4 (no room for the type) is an error, and stays one."""
        parser = FrameParser()
        self.assertRaises(FrameError, parser.feed, b"\x00\x00\x00\x03\x00\x00\x00\x00")
        self.assertRaises(FrameError, parser.feed, OK_FRAME)

    def test_negative_size(self) -> None:
        """A size with the high bit set is an error."""
        self.assertRaises(FrameError, FrameParser().feed, b"\xff\xff\xff\xff\x00\x00\x00\x00")

    def test_max_frame_size(self) -> None:
        """A frame above max_frame_size is refused before its data arrives."""
        parser = FrameParser(max_frame_size=10)
        self.assertEqual(parser.feed(encode_frame(0, b"123456")), [(0, b"123456")])
        self.assertRaises(FrameError, parser.feed, struct.pack(">ii", 11, 0))

    def test_recorded_frames(self) -> None:
        """Every recorded frame decodes to its type and data."""
        parser = FrameParser()
        for frame in recorded_frames():
            data = unescape(frame["data"])
            self.assertEqual(parser.feed(encode_frame(frame["type"], data)), [(frame["type"], data)])
