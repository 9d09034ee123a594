"""
Tests for txnsq.protocol.metaq: the MetaQ text protocol's request and reply
codecs and the record layout, checked against the MetaQ protocol text's
``get`` examples byte for byte.
"""

from __future__ import annotations

import random
import struct
import zlib
from typing import List, Sequence

from twisted.trial.unittest import SynchronousTestCase

from txnsq.protocol import metaq_parser
from txnsq.protocol.metaq import (
    BAD_REQUEST,
    DEFAULT_OPAQUE,
    MOVED,
    NOT_FOUND,
    SUCCESS,
    AuthRequest,
    GetRequest,
    MetaqError,
    OffsetRequest,
    PutRequest,
    QuitRequest,
    ResultResponse,
    StatsRequest,
    ValueResponse,
    VersionRequest,
    encode_bad_max_size,
    encode_moved,
    encode_offset_result,
    encode_position_not_found,
    encode_put_result,
    encode_result,
    encode_topic_not_found,
    encode_value,
    encode_value_header,
    encode_version_result,
)
from txnsq.protocol.metaq_parser import MetaqRequestParser, MetaqResponseParser
from txnsq.protocol.metaq_record import (
    FLAG_ATTRIBUTE,
    HEADER_LENGTH,
    Record,
    checksum,
    encode_record,
    iter_records,
    join_attribute,
    split_attribute,
    split_whole_records,
    validate_records,
)

# The MetaQ protocol text's first get example, a message "FFFF" without an
# attribute:
#   value 24 -214748 \r\n \x00\x00\x00\x04  \x52\xb0\x25\xa9
#   \xb4\x1a\xda\x94\xd0\x00\x00\x00  \x00\x00\x00\x00  FFFF
# (the spaces are the text's layout, not bytes of the reply).
SEED_ONE_ID = struct.unpack(">q", b"\xb4\x1a\xda\x94\xd0\x00\x00\x00")[0]
SEED_ONE_RECORD = (
    b"\x00\x00\x00\x04" + b"\x52\xb0\x25\xa9" + b"\xb4\x1a\xda\x94\xd0\x00\x00\x00" + b"\x00\x00\x00\x00" + b"FFFF"
)

# The second example, attribute "AAA" and message "FFFF", is printed with
# typos: its data length (0x0b = 11) and checksum (0x55179a47) are those of
# int32 3 + "AAA" + "FFFF" (11 bytes), but the text shows the data as
# "AAAFFF" (one F short) and the reply as "value 24" (the right total is
# 20 + 11 = 31).  The data here is the one the checksum was computed from.
SEED_TWO_ID = struct.unpack(">q", b"\xb4\x1a\xdc\x98\x86\xc0\x00\x00")[0]
SEED_TWO_DATA = b"\x00\x00\x00\x03" + b"AAA" + b"FFFF"
SEED_TWO_RECORD = (
    b"\x00\x00\x00\x0b" + b"\x55\x17\x9a\x47" + b"\xb4\x1a\xdc\x98\x86\xc0\x00\x00" + b"\x00\x00\x00\x01" + SEED_TWO_DATA
)
SEED_OPAQUE = -214748


def feed_bytewise(parser: MetaqRequestParser, data: bytes) -> List[object]:
    """Everything ``parser`` returns when fed ``data`` one byte at a time."""
    out: List[object] = []
    for i in range(len(data)):
        out.extend(parser.feed(data[i:i + 1]))
    return out


def parse(data: bytes, **kwargs: object) -> List[object]:
    """Requests and errors in ``data`` fed at once to a new parser."""
    return list(MetaqRequestParser(**kwargs).feed(data))  # type: ignore[arg-type]


def records(payloads: Sequence[bytes], first_id: int = 1) -> bytes:
    """Records of ``payloads`` (flag 0) with ids from ``first_id``."""
    return b"".join(encode_record(first_id + i, 0, p) for i, p in enumerate(payloads))


class SeedVectorTests(SynchronousTestCase):
    """The protocol text's two get replies, byte for byte."""

    def test_first_example_record(self) -> None:
        """A "FFFF" message without attribute encodes as the text's first get reply."""
        self.assertEqual(encode_record(SEED_ONE_ID, 0, b"FFFF"), SEED_ONE_RECORD)
        self.assertEqual(checksum(b"FFFF"), 0x52B025A9)
        self.assertEqual(
            encode_value(SEED_ONE_RECORD, SEED_OPAQUE),
            b"value 24 -214748\r\n" + SEED_ONE_RECORD,
        )

    def test_second_example_record(self) -> None:
        """Attribute "AAA" with message "FFFF" encodes as the second reply (typos corrected)."""
        data = join_attribute(b"AAA", b"FFFF")
        self.assertEqual(data, SEED_TWO_DATA)
        self.assertEqual(checksum(data), 0x55179A47)
        self.assertEqual(encode_record(SEED_TWO_ID, FLAG_ATTRIBUTE, data), SEED_TWO_RECORD)
        self.assertEqual(encode_value(SEED_TWO_RECORD, SEED_OPAQUE)[:18], b"value 31 -214748\r\n")

    def test_second_example_typo(self) -> None:
        """The data as printed ("AAAFFF") does not have the printed checksum; "AAAFFFF" does."""
        self.assertNotEqual(checksum(b"\x00\x00\x00\x03AAAFFF"), 0x55179A47)
        self.assertEqual(checksum(b"\x00\x00\x00\x03AAAFFFF"), 0x55179A47)

    def test_examples_decode(self) -> None:
        """The two replies parse back into their records, attribute and payload."""
        parser = MetaqResponseParser()
        wire = encode_value(SEED_ONE_RECORD + SEED_TWO_RECORD, SEED_OPAQUE)
        (reply,) = parser.feed(wire)
        assert isinstance(reply, ValueResponse)
        self.assertEqual(reply.opaque, SEED_OPAQUE)
        one, two = reply.records()
        self.assertEqual((one.msg_id, one.flag, one.attribute, one.payload), (SEED_ONE_ID, 0, None, b"FFFF"))
        self.assertEqual((two.msg_id, two.flag, two.attribute, two.payload), (SEED_TWO_ID, 1, b"AAA", b"FFFF"))
        self.assertTrue(one.valid and two.valid)
        self.assertEqual(validate_records(reply.data), (len(reply.data), None))

    def test_put_example(self) -> None:
        """The text's put example is topic meta-test, partition 0, body "hello", flag 0, opaque 1."""
        self.assertEqual(
            parse(b"put meta-test 0 5 0 1\r\nhello"),
            [PutRequest("meta-test", 0, b"hello", 0, 1)],
        )


class RecordTests(SynchronousTestCase):
    """Record layout, attributes and walking a buffer of records."""

    def test_header(self) -> None:
        """The header is length, checksum, id, flag, big-endian."""
        record = encode_record(7, 0, b"abc")
        self.assertEqual(len(record), HEADER_LENGTH + 3)
        self.assertEqual(struct.unpack(">iiqi", record[:20]), (3, zlib.crc32(b"abc") & 0x7FFFFFFF, 7, 0))

    def test_checksum_masked(self) -> None:
        """The checksum is CRC32 with its top bit cleared, so never negative."""
        for data in (b"", b"a", b"FFFF", bytes(range(256))):
            self.assertEqual(checksum(data), zlib.crc32(data) & 0x7FFFFFFF)
        self.assertTrue(any(zlib.crc32(bytes([i])) >= 1 << 31 for i in range(256)))

    def test_unsigned_id(self) -> None:
        """An id given as its unsigned 64-bit pattern is stored and read back signed."""
        record = encode_record(SEED_ONE_ID + (1 << 64), 0, b"FFFF")
        self.assertEqual(record, SEED_ONE_RECORD)
        self.assertEqual(next(iter_records(record)).msg_id, SEED_ONE_ID)

    def test_out_of_range(self) -> None:
        """Ids beyond 64 bits and flags beyond 32 bits are refused with ValueError."""
        self.assertRaises(ValueError, encode_record, 1 << 64, 0, b"")
        self.assertRaises(ValueError, encode_record, -(1 << 63) - 1, 0, b"")
        self.assertRaises(ValueError, encode_record, 1, 1 << 31, b"")

    def test_attribute_round_trip(self) -> None:
        """join_attribute and split_attribute are inverse, empty attribute included."""
        for attribute in (None, b"", b"k=v"):
            data = join_attribute(attribute, b"body")
            flag = 0 if attribute is None else FLAG_ATTRIBUTE
            self.assertEqual(split_attribute(flag, data), (attribute, b"body"))

    def test_attribute_bad(self) -> None:
        """An attribute length that does not fit its data raises ValueError."""
        self.assertRaises(ValueError, split_attribute, 1, b"\x00\x00")
        self.assertRaises(ValueError, split_attribute, 1, b"\x00\x00\x00\x09abc")
        self.assertRaises(ValueError, split_attribute, 1, b"\xff\xff\xff\xffabc")

    def test_iter_records(self) -> None:
        """iter_records yields each whole record with its position, then stops at a cut one."""
        buf = records([b"a", b"bb", b"ccc"])
        found = list(iter_records(buf + buf[:15]))
        self.assertEqual([r.data for r in found], [b"a", b"bb", b"ccc"])
        self.assertEqual([r.position for r in found], [0, 21, 43])
        self.assertEqual([r.msg_id for r in found], [1, 2, 3])
        self.assertEqual(found[0], Record(0, checksum(b"a"), 1, 0, b"a"))

    def test_repr(self) -> None:
        """Records and parsed items show their fields, long bodies by size."""
        self.assertEqual(
            repr(Record(0, 5, 1, 0, b"a")), "Record(position=0, msg_id=1, flag=0, checksum=5, data=b'a')"
        )
        self.assertEqual(repr(VersionRequest(3)), "VersionRequest(opaque=3)")
        self.assertIn("data=<100 bytes>", repr(PutRequest("t", 0, b"x" * 100, 0, 1)))

    def test_iter_records_window(self) -> None:
        """iter_records reads only between start and end."""
        buf = records([b"a", b"bb", b"ccc"])
        self.assertEqual([r.data for r in iter_records(buf, 21, 43)], [b"bb"])
        self.assertEqual([r.data for r in iter_records(buf, 21, 42)], [])

    def test_split_whole_records(self) -> None:
        """split_whole_records takes whole records up to max_size bytes, never a part."""
        buf = records([b"x" * 80] * 10)
        self.assertEqual(split_whole_records(buf, 1000), 1000)
        self.assertEqual(split_whole_records(buf, 999), 900)
        self.assertEqual(split_whole_records(buf, 100), 100)
        self.assertEqual(split_whole_records(buf, 5000), 1000)
        self.assertEqual(split_whole_records(buf, 300, start=900), 100)
        self.assertEqual(split_whole_records(buf[:950], 5000), 900)

    def test_split_first_too_large(self) -> None:
        """A first record larger than max_size gives 0 bytes."""
        buf = records([b"x" * 80])
        self.assertEqual(split_whole_records(buf, 99), 0)
        self.assertEqual(split_whole_records(buf, 19), 0)
        self.assertEqual(split_whole_records(b"", 100), 0)

    def test_split_negative_length(self) -> None:
        """split_whole_records stops before a record with a negative length."""
        buf = records([b"ok"]) + struct.pack(">iiqi", -5, 0, 0, 0) + b"xxxxx"
        self.assertEqual(split_whole_records(buf, 1000), 22)

    def test_split_accepts_views(self) -> None:
        """bytearray and memoryview buffers are walked the same as bytes."""
        buf = records([b"a", b"bb"])
        self.assertEqual(split_whole_records(bytearray(buf), 100), 43)
        self.assertEqual(split_whole_records(memoryview(buf), 100), 43)

    def test_validate_good(self) -> None:
        """A buffer of good records validates whole, with no problem."""
        buf = records([b"a", b"bb"]) + encode_record(3, 1, join_attribute(b"at", b"p"))
        self.assertEqual(validate_records(buf), (len(buf), None))
        self.assertEqual(validate_records(b""), (0, None))

    def test_validate_cut_header(self) -> None:
        """A header cut short ends the good part."""
        buf = records([b"a"])
        good, problem = validate_records(buf + b"\x00\x00\x00")
        self.assertEqual(good, 21)
        assert problem is not None
        self.assertIn("header cut short at 21", problem)

    def test_validate_cut_data(self) -> None:
        """Data cut short ends the good part."""
        buf = records([b"a", b"bbbb"])
        good, problem = validate_records(buf[:-1])
        self.assertEqual(good, 21)
        assert problem is not None
        self.assertIn("data cut short at 21", problem)

    def test_validate_checksum(self) -> None:
        """A flipped data byte is a checksum mismatch at its record."""
        buf = bytearray(records([b"a", b"bbbb", b"c"]))
        buf[21 + 20] ^= 0xFF
        good, problem = validate_records(buf)
        self.assertEqual(good, 21)
        assert problem is not None
        self.assertIn("checksum mismatch at 21", problem)

    def test_validate_negative_length(self) -> None:
        """A negative data length ends the good part."""
        buf = records([b"a"]) + struct.pack(">iiqi", -1, 0, 0, 0)
        good, problem = validate_records(buf)
        self.assertEqual(good, 21)
        assert problem is not None
        self.assertIn("negative data length -1 at 21", problem)

    def test_validate_attribute(self) -> None:
        """A record whose flag announces an attribute its data cannot hold is a problem."""
        buf = records([b"a"]) + encode_record(2, FLAG_ATTRIBUTE, b"\x00\x00\x00\x10ab")
        good, problem = validate_records(buf)
        self.assertEqual(good, 21)
        assert problem is not None
        self.assertIn("attribute length 16", problem)

    def test_validate_start(self) -> None:
        """validate_records counts good bytes from start."""
        buf = records([b"a", b"bb"])
        self.assertEqual(validate_records(buf, 21), (22, None))


class RequestParserTests(SynchronousTestCase):
    """Every request, fed whole and byte by byte."""

    CASES = [
        (b"put meta-test 0 5 0 1\r\nhello", PutRequest("meta-test", 0, b"hello", 0, 1)),
        (b"put t -1 0 0 9\r\n", PutRequest("t", -1, b"", 0, 9)),
        (
            b"put t 2 5 0 %d 3\r\nhello" % (checksum(b"hello"),),
            PutRequest("t", 2, b"hello", 0, 3, checksum=checksum(b"hello")),
        ),
        (b"put t 2 5 0 -1 3\r\nhello", PutRequest("t", 2, b"hello", 0, 3, checksum=-1)),
        (b"put t 2 5 0 TX:1 3\r\nhello", PutRequest("t", 2, b"hello", 0, 3, transaction_key="TX:1")),
        (
            b"put t 2 5 0 %d TX:1 -3\r\nhello" % (checksum(b"hello"),),
            PutRequest("t", 2, b"hello", 0, -3, checksum(b"hello"), "TX:1"),
        ),
        (
            b"put t 0 11 1 4\r\n" + SEED_TWO_DATA,
            PutRequest("t", 0, SEED_TWO_DATA, 1, 4),
        ),
        (b"get meta-test example 0 1024 512 1\r\n", GetRequest("meta-test", "example", 0, 1024, 512, 1)),
        (
            b"get t g 3 9223372036854775807 2147483647 -2147483648\r\n",
            GetRequest("t", "g", 3, 2**63 - 1, 2**31 - 1, -(2**31)),
        ),
        (b"offset meta-test example 0 1024 1\r\n", OffsetRequest("meta-test", "example", 0, 1024, 1)),
        (
            b"offset t g 2 @1795687200000 5\r\n",
            OffsetRequest("t", "g", 2, 0, 5, timestamp_ms=1795687200000),
        ),
        (b"stats 1\r\n", StatsRequest(None, 1)),
        (b"stats  1\r\n", StatsRequest(None, 1)),
        (b"stats realtime 2\r\n", StatsRequest("realtime", 2)),
        (b"stats realtime\r\n", StatsRequest("realtime", DEFAULT_OPAQUE)),
        (b"stats\r\n", StatsRequest(None, DEFAULT_OPAQUE)),
        (b"version 7\r\n", VersionRequest(7)),
        (b"version\r\n", VersionRequest(DEFAULT_OPAQUE)),
        (b"version 7 \r\n", VersionRequest(7)),
        (b"auth s3cret 8\r\n", AuthRequest(b"s3cret", 8)),
        (b"quit\r\n", QuitRequest()),
    ]

    def test_each_whole(self) -> None:
        """Each request line (and body) parses to its request when fed at once."""
        for wire, expected in self.CASES:
            self.assertEqual(parse(wire), [expected], wire)

    def test_each_bytewise(self) -> None:
        """Each request parses the same when fed one byte at a time."""
        for wire, expected in self.CASES:
            self.assertEqual(feed_bytewise(MetaqRequestParser(), wire), [expected], wire)

    def test_pipelined(self) -> None:
        """All requests sent back to back come out in order, whole or byte by byte."""
        wires = [w for w, _ in self.CASES if not w.startswith(b"quit")]
        expected = [e for w, e in self.CASES if not w.startswith(b"quit")]
        stream = b"".join(wires)
        self.assertEqual(parse(stream), expected)
        self.assertEqual(feed_bytewise(MetaqRequestParser(), stream), expected)

    def test_random_chunks(self) -> None:
        """Any split of the stream into reads gives the same requests."""
        stream = b"".join(w for w, _ in self.CASES)
        expected = [e for _, e in self.CASES]
        rng = random.Random(1)
        for _ in range(50):
            parser = MetaqRequestParser()
            out: List[object] = []
            pos = 0
            while pos < len(stream):
                step = rng.randint(1, 40)
                out.extend(parser.feed(stream[pos:pos + step]))
                pos += step
            self.assertEqual(out, expected)

    def test_put_attribute_view(self) -> None:
        """A put with flag & 1 exposes its attribute and payload."""
        (put,) = parse(b"put t 0 11 1 4\r\n" + SEED_TWO_DATA)
        assert isinstance(put, PutRequest)
        self.assertEqual((put.attribute, put.payload), (b"AAA", b"FFFF"))

    def test_body_may_hold_crlf(self) -> None:
        """A put body is taken by length: CRLF and command text inside it are data."""
        body = b"get a b 0 0 1\r\n"
        self.assertEqual(
            parse(b"put t 0 %d 0 1\r\n" % (len(body),) + body + b"version 2\r\n"),
            [PutRequest("t", 0, body, 0, 1), VersionRequest(2)],
        )

    def test_quit_stops(self) -> None:
        """After quit the parser is dead: what follows is ignored."""
        parser = MetaqRequestParser()
        self.assertEqual(parser.feed(b"quit\r\nversion 1\r\n"), [QuitRequest()])
        self.assertTrue(parser.dead)
        self.assertEqual(parser.feed(b"version 2\r\n"), [])

    def test_partial_kept(self) -> None:
        """A partial line or body stays buffered until the rest arrives."""
        parser = MetaqRequestParser()
        self.assertEqual(parser.feed(b"put t 0 5 0 1\r\nhel"), [])
        self.assertEqual(parser.buffered(), 3)
        self.assertEqual(parser.feed(b"lo" + b"vers"), [PutRequest("t", 0, b"hello", 0, 1)])
        self.assertEqual(parser.buffered(), 4)
        self.assertEqual(parser.feed(b"ion 3\r\n"), [VersionRequest(3)])
        self.assertEqual(parser.buffered(), 0)

    def test_utf8_names(self) -> None:
        """Names are UTF-8 text, as Java reads them."""
        topic = "t\u00e9st"
        (get,) = parse(b"get " + topic.encode("utf-8") + b" g 0 0 10 1\r\n")
        assert isinstance(get, GetRequest)
        self.assertEqual(get.topic, topic)


class RequestErrorTests(SynchronousTestCase):
    """Bad requests give 400 errors; only unframeable ones are fatal."""

    def assertError(
        self, wire: bytes, fatal: bool, text: str, opaque: int = DEFAULT_OPAQUE, then: bytes = b"version 9\r\n"
    ) -> None:
        """
        ``wire`` gives one 400 error containing ``text``; a non-fatal one is
        followed by the request in ``then``, a fatal one by nothing.
        """
        for feed in ("whole", "bytewise"):
            parser = MetaqRequestParser(max_body_size=100, max_line_length=64)
            if feed == "whole":
                out = parser.feed(wire + then)
            else:
                out = feed_bytewise(parser, wire + then)  # type: ignore[assignment]
            self.assertIsInstance(out[0], MetaqError, wire)
            error = out[0]
            assert isinstance(error, MetaqError)
            self.assertEqual(error.code, BAD_REQUEST, wire)
            self.assertIn(text, error.message, wire)
            self.assertEqual(error.fatal, fatal, wire)
            self.assertEqual(error.opaque, opaque, wire)
            self.assertEqual(parser.dead, fatal, wire)
            if fatal:
                self.assertEqual(out[1:], [], wire)
                self.assertEqual(parser.feed(then), [])
            else:
                self.assertEqual(out[1:], [VersionRequest(9)], wire)

    def test_unknown_command(self) -> None:
        """An unknown command is a 400 with the opaque from its last field."""
        self.assertError(b"bogus a 5\r\n", False, "unknown command: 'bogus a 5'", 5)
        self.assertError(b"PUT t 0 5 0 1\r\n", False, "unknown command", 1)
        self.assertError(b"value 3 1\r\n", False, "unknown command", 1)

    def test_blank_line(self) -> None:
        """An empty line is a 400."""
        self.assertError(b"\r\n", False, "blank command line")

    def test_bare_newline(self) -> None:
        """Lines end with CRLF only: a bare LF stays in the line, which is then bad."""
        self.assertError(b"version 1\nversion 2\r\n", False, "version: expected 1 or 2 fields", 2)

    def test_put_wrong_field_count(self) -> None:
        """A put with a usable length but a wrong field count has its body skipped."""
        self.assertError(b"put t 0 5 0\r\nhello", False, "put: expected 6 to 8 fields, got 5", 0)
        self.assertError(b"put t 0 5 0 1 2 3 4\r\nhello", False, "got 9", 4)
        self.assertError(b"put t 0 0 0\r\n", False, "got 5", 0)

    def test_put_bad_fields(self) -> None:
        """Non-numeric or out-of-range put fields are non-fatal 400s."""
        self.assertError(b"put t x 5 0 1\r\nhello", False, "invalid partition 'x'", 1)
        self.assertError(b"put t 2147483648 5 0 1\r\nhello", False, "invalid partition", 1)
        self.assertError(b"put t 0 5 f 1\r\nhello", False, "invalid flag 'f'", 1)
        self.assertError(b"put t 0 5 0 o\r\nhello", False, "invalid opaque 'o'")
        self.assertError(b"put t 0 5 0 x TX 1\r\nhello", False, "invalid checksum 'x'", 1)
        self.assertError(b"put t 0 5 0 1- 1\r\nhello", False, "invalid checksum '1-'", 1)
        self.assertError(b"put t 0 5 0  1\r\nhello", False, "invalid transaction key", 1)
        self.assertError(b"put  0 5 0 1\r\nhello", False, "invalid topic", 1)
        self.assertError(b"put \xff 0 5 0 1\r\nhello", False, "invalid topic", 1)
        self.assertError(b"put t 0 5 0 0x1\r\nhello", False, "invalid opaque")
        self.assertError(b"put t 0 5 0 1_0\r\nhello", False, "invalid opaque")

    def test_put_unusable_length(self) -> None:
        """A put whose body length is missing, not a number, negative or too large is fatal."""
        self.assertError(b"put t\r\n", True, "put: no body length")
        # A line whose last field is a number is answered with it as the opaque.
        self.assertError(b"put t 0\r\n", True, "put: no body length", 0)
        self.assertError(b"put t 0 five 0 1\r\nhello", True, "put: invalid body length 'five'", 1)
        self.assertError(b"put t 0 +-5 0 1\r\n", True, "invalid body length", 1)
        self.assertError(b"put t 0 -5 0 1\r\n", True, "put: negative body length -5", 1)
        self.assertError(b"put t 0 101 0 1\r\n", True, "put: body length 101 is larger than 100", 1)
        self.assertError(b"put t 0 99999999999 0 1\r\n", True, "invalid body length", 1)

    def test_put_attribute(self) -> None:
        """A put with flag & 1 whose attribute does not fit its body is a 400."""
        self.assertError(b"put t 0 3 1 6\r\nabc", False, "put: flag announces an attribute", 6)
        self.assertError(b"put t 0 6 1 6\r\n\x00\x00\x00\x05ab", False, "attribute length 5 does not fit", 6)

    def test_put_checksum(self) -> None:
        """A put whose checksum is not its body's is a 400; -1 means none."""
        self.assertError(b"put t 0 5 0 12345 6\r\nhello", False, "checksum 12345 does not match", 6)
        self.assertEqual(len(parse(b"put t 0 5 0 -1 6\r\nhello")), 1)
        (put,) = parse(b"put t 0 5 0 12345 6\r\nhello", verify_checksums=False)
        self.assertIsInstance(put, PutRequest)

    def test_get_errors(self) -> None:
        """get: wrong field count, bad numbers and maxSize <= 0 are 400s."""
        self.assertError(b"get t g 0 0 1\r\n", False, "get: expected 7 fields, got 6", 1)
        self.assertError(b"get t g 0 0 1 1 1\r\n", False, "got 8", 1)
        self.assertError(b"get t g p 0 10 1\r\n", False, "invalid partition 'p'", 1)
        self.assertError(b"get t g 0 o 10 1\r\n", False, "invalid offset 'o'", 1)
        self.assertError(b"get t g 0 99999999999999999999 10 1\r\n", False, "invalid offset", 1)
        self.assertError(b"get t g 0 0 m 1\r\n", False, "invalid max size 'm'", 1)
        self.assertError(b"get t g 0 0 10 x\r\n", False, "invalid opaque 'x'")
        self.assertError(b"get t  0 0 10 1\r\n", False, "invalid group", 1)
        self.assertError(b"get t g 0 0 0 3\r\n", False, "Bad request,invalid max size:0", 3)
        self.assertError(b"get t g 0 0 -5 3\r\n", False, "Bad request,invalid max size:-5", 3)

    def test_offset_errors(self) -> None:
        """offset: wrong field count and bad numbers are 400s."""
        self.assertError(b"offset t g 0 1\r\n", False, "offset: expected 6 fields, got 5", 1)
        self.assertError(b"offset t g 0 x 1\r\n", False, "invalid offset 'x'", 1)
        self.assertError(b"offset t g 0 0 y\r\n", False, "invalid opaque 'y'")

    def test_stats_version_auth_errors(self) -> None:
        """stats, version and auth with bad fields are 400s."""
        self.assertError(b"stats a b c\r\n", False, "stats: expected 1 to 3 fields, got 4")
        self.assertError(b"stats a b\r\n", False, "stats: invalid opaque 'b'")
        self.assertError(b"stats \xff\r\n", False, "stats: invalid item")
        self.assertError(b"version x\r\n", False, "version: invalid opaque 'x'")
        self.assertError(b"version 1 2\r\n", False, "version: expected 1 or 2 fields, got 3", 2)
        self.assertError(b"auth s\r\n", False, "auth: expected 3 fields, got 2")
        self.assertError(b"auth  1\r\n", False, "auth: empty secret", 1)
        self.assertError(b"auth s x\r\n", False, "auth: invalid opaque 'x'")

    def test_sync_refused(self) -> None:
        """sync is framed (its body skipped) and refused; an unusable length is fatal."""
        self.assertError(b"sync t 0 5 0 1 2\r\nhello", False, "sync: not supported", 2)
        self.assertError(b"sync t 0 x 0 1 2\r\n", True, "sync: invalid body length", 2)
        self.assertError(b"sync t 0 0 0 1 2\r\n", False, "sync: not supported", 2)

    def test_line_too_long(self) -> None:
        """A line longer than the limit without CRLF is fatal."""
        self.assertError(b"get " + b"t" * 100, True, "line too long")

    def test_line_at_limit(self) -> None:
        """A line of exactly the limit is accepted, even with its CRLF split across reads."""
        line = b"stats " + b"i" * 56 + b" 1"
        self.assertEqual(len(line), 64)
        parser = MetaqRequestParser(max_line_length=64)
        self.assertEqual(parser.feed(line + b"\r"), [])
        self.assertEqual(parser.feed(b"\n"), [StatsRequest("i" * 56, 1)])

    def test_error_encodes(self) -> None:
        """An error replies with result, its code, the text's length and the opaque."""
        (error,) = parse(b"get t g 0 0 0 3\r\n")
        assert isinstance(error, MetaqError)
        self.assertEqual(error.encode(), b"result 400 30 3\r\nBad request,invalid max size:0")


class FuzzTests(SynchronousTestCase):
    """feed() never raises, whatever the bytes."""

    def _pieces(self, rng: random.Random) -> bytes:
        pieces = [w for w, _ in RequestParserTests.CASES] + [
            b"put t 0 5 0 1\r\nhello",
            b"put t 0 -1 0 1\r\n",
            b"\r\n",
            b"get t g 0 0 0 1\r\n",
            b"result 200 0 1\r\n",
            b"value 4 1\r\nabcd",
            b"stats a b c\r\n",
        ]
        out = []
        for _ in range(rng.randint(1, 8)):
            piece = bytearray(rng.choice(pieces))
            for _ in range(rng.randint(0, 3)):
                if piece:
                    piece[rng.randrange(len(piece))] = rng.randrange(256)
            out.append(bytes(piece))
        return b"".join(out)

    def _chunks(self, rng: random.Random, data: bytes) -> List[bytes]:
        chunks = []
        pos = 0
        while pos < len(data):
            step = rng.randint(1, 64)
            chunks.append(data[pos:pos + step])
            pos += step
        return chunks

    def test_random_bytes(self) -> None:
        """Random bytes in random reads never make either parser raise."""
        rng = random.Random(20240601)
        alphabet = b"put get offset stats version quit auth result value 0123456789-\r\n \xff"
        for _ in range(400):
            if rng.random() < 0.5:
                data = bytes(rng.randrange(256) for _ in range(rng.randint(0, 300)))
            else:
                data = bytes(rng.choice(alphabet) for _ in range(rng.randint(0, 300)))
            request = MetaqRequestParser(max_body_size=64, max_line_length=128)
            response = MetaqResponseParser(max_body_size=64, max_line_length=128)
            for chunk in self._chunks(rng, data):
                for item in request.feed(chunk):
                    self.assertIsInstance(
                        item,
                        (PutRequest, GetRequest, OffsetRequest, StatsRequest, VersionRequest, QuitRequest, AuthRequest,
                         MetaqError),
                    )
                for reply in response.feed(chunk):
                    self.assertIsInstance(reply, (ResultResponse, ValueResponse, MetaqError))

    def test_mutated_requests(self) -> None:
        """Valid streams with random bytes changed never make the parsers raise, and errors encode."""
        rng = random.Random(7)
        for _ in range(400):
            data = self._pieces(rng)
            request = MetaqRequestParser(max_body_size=64, max_line_length=128)
            response = MetaqResponseParser(max_body_size=64, max_line_length=128)
            for chunk in self._chunks(rng, data):
                for item in request.feed(chunk) + response.feed(chunk):  # type: ignore[operator]
                    if isinstance(item, MetaqError):
                        self.assertTrue(item.encode().startswith(b"result 400 "))
            self.assertTrue(request.buffered() <= len(data))

    def test_record_walkers(self) -> None:
        """Random buffers never make the record walkers raise, and their answers agree."""
        rng = random.Random(3)
        good = records([b"a" * rng.randint(0, 30) for _ in range(10)])
        for _ in range(300):
            buf = bytearray(good[: rng.randint(0, len(good))])
            for _ in range(rng.randint(0, 2)):
                if buf:
                    buf[rng.randrange(len(buf))] = rng.randrange(256)
            length, problem = validate_records(buf)
            self.assertTrue(0 <= length <= len(buf))
            self.assertEqual(problem is None, length == len(buf))
            whole = split_whole_records(buf, len(buf))
            self.assertTrue(length <= whole <= len(buf))
            self.assertEqual(sum(r.length for r in iter_records(buf)), whole)


class FastPathTests(SynchronousTestCase):
    """The one-regex path for plain put and get lines agrees with the general path."""

    LINES = [
        b"put t 0 5 0 1",
        b"put t -1 5 -7 -2147483648",
        b"put t 0 0 0 1",
        b"put t 0 5 1 1",
        b"put t\xff 0 5 0 1",
        b"put t 0 200 0 1",
        b"put t 0 5 0 2147483647",
        b"put t 0 5 0 999999999",
        b"put t 00 05 00 01",
        b"put t -0 5 0 -0",
        b"get t g 0 0 1 1",
        b"get t g -1 -5 1 -1",
        b"get t g 0 999999999999999999 999999999 999999999",
        b"get t g 0 0 0 1",
        b"get t g 0 0 000 1",
        b"get t g 0 0 007 1",
        b"get t \xff 0 0 1 1",
        b"get \xfe g 0 0 1 1",
    ]

    def _parse(self, general: bool) -> List[object]:
        if general:
            self.patch(metaq_parser, "_PLAIN_PUT", lambda line: None)
            self.patch(metaq_parser, "_PLAIN_GET", lambda line: None)
        out: List[object] = []
        rng = random.Random(5)
        for line in self.LINES:
            parser = MetaqRequestParser(max_body_size=100)
            out.append(parser.feed(line + b"\r\n" + bytes(rng.randrange(256) for _ in range(5)) + b"version 1\r\n"))
            out.append(parser.dead)
        return out

    def test_same_results(self) -> None:
        """Each plain line parses to the same items and state either way."""
        fast = self._parse(general=False)
        general = self._parse(general=True)
        self.assertEqual(fast, general)
        # The corpus reaches both outcomes.
        self.assertIn(True, fast)
        self.assertTrue(any(isinstance(i, PutRequest) for items in fast if isinstance(items, list) for i in items))
        self.assertTrue(any(isinstance(i, MetaqError) for items in fast if isinstance(items, list) for i in items))


class ResponseParserTests(SynchronousTestCase):
    """The client side: result and value replies."""

    def test_result(self) -> None:
        """result with and without a body."""
        parser = MetaqResponseParser()
        self.assertEqual(
            parser.feed(b"result 200 0 1\r\nresult 404 3 -2\r\nabc"),
            [ResultResponse(200, b"", 1), ResultResponse(404, b"abc", -2)],
        )

    def test_value_bytewise(self) -> None:
        """A value reply fed byte by byte gives its records."""
        wire = encode_value(SEED_ONE_RECORD, 5) + b"result 200 0 6\r\n"
        parser = MetaqResponseParser()
        out = []
        for i in range(len(wire)):
            out.extend(parser.feed(wire[i:i + 1]))
        self.assertEqual(out, [ValueResponse(SEED_ONE_RECORD, 5), ResultResponse(200, b"", 6)])

    def test_large_value_in_reads(self) -> None:
        """A value reply larger than one read is assembled whole, and parsing goes on after it."""
        log = records([b"x" * 80] * 500)
        wire = encode_value(log, 1) + b"result 200 0 2\r\n"
        parser = MetaqResponseParser()
        out: List[object] = []
        for i in range(0, len(wire), 4000):
            out.extend(parser.feed(wire[i:i + 4000]))
        self.assertEqual(out, [ValueResponse(log, 1), ResultResponse(200, b"", 2)])

    def test_trailing_space(self) -> None:
        """A trailing space on the line is ignored, as Java's split does."""
        self.assertEqual(MetaqResponseParser().feed(b"value 0 -214748 \r\n"), [ValueResponse(b"", -214748)])

    def test_put_result(self) -> None:
        """A put's reply body reads as (msg_id, partition, offset)."""
        (reply,) = MetaqResponseParser().feed(encode_put_result(SEED_ONE_ID, 3, 1024, 9))
        assert isinstance(reply, ResultResponse)
        self.assertTrue(reply.ok)
        self.assertEqual(reply.put_result(), (SEED_ONE_ID, 3, 1024))
        self.assertRaises(ValueError, ResultResponse(200, b"1 2", 1).put_result)

    def test_errors(self) -> None:
        """Unframeable replies are fatal; a bad line with a usable length is skipped."""
        cases = [
            (b"result 200 x 1\r\n", True, "result: invalid length 'x'"),
            (b"result 200\r\n", True, "result: invalid length (none)"),
            (b"value -1 1\r\n", True, "value: invalid length '-1'"),
            (b"value 65 1\r\n", True, "value: length 65 is larger than 64"),
            (b"result x 3 1\r\nabc", False, "result: bad line"),
            (b"value 3 1 2\r\nabc", False, "value: bad line"),
            (b"hello 1\r\n", False, "unknown reply"),
            (b"\r\n", False, "blank reply line"),
            (b"x" * 200, True, "line too long"),
        ]
        for wire, fatal, text in cases:
            parser = MetaqResponseParser(max_body_size=64, max_line_length=128)
            out = parser.feed(wire + b"result 200 0 7\r\n")
            error = out[0]
            assert isinstance(error, MetaqError)
            self.assertIn(text, error.message, wire)
            self.assertEqual(error.fatal, fatal, wire)
            self.assertEqual(out[1:], [] if fatal else [ResultResponse(200, b"", 7)], wire)


class RoundTripTests(SynchronousTestCase):
    """Encoders and parsers agree both ways."""

    def test_requests(self) -> None:
        """Every request's encode() parses back to an equal request."""
        requests = [
            PutRequest("t", 0, b"hello", 0, 1),
            PutRequest("t", -1, b"", 0, 2),
            PutRequest("t", 3, join_attribute(b"a", b"p"), FLAG_ATTRIBUTE, 3, checksum(join_attribute(b"a", b"p"))),
            PutRequest("t", 3, b"x", 0, 4, transaction_key="TX-1"),
            PutRequest("t", 3, b"x", 0, 5, checksum(b"x"), "TX-1"),
            GetRequest("t", "g", 1, 2**40, 512, 6),
            OffsetRequest("t", "g", 1, 0, -7),
            OffsetRequest("t", "g", 1, 0, -7, timestamp_ms=0),
            OffsetRequest("t", "g", 1, 0, -7, timestamp_ms=1795687200123),
            StatsRequest(None, 8),
            StatsRequest("realtime", 9),
            VersionRequest(10),
            AuthRequest(b"secret", 11),
            QuitRequest(),
        ]
        stream = b"".join(r.encode() for r in requests)
        self.assertEqual(parse(stream), requests)

    def test_stats_without_item_is_java_form(self) -> None:
        """stats without an item is written with an empty item field, as the Java client does."""
        self.assertEqual(StatsRequest(None, 8).encode(), b"stats  8\r\n")

    def test_put_encoding(self) -> None:
        """put is written in the MetaQ text's form, with the checksum field only when set."""
        self.assertEqual(PutRequest("meta-test", 0, b"hello", 0, 1).encode(), b"put meta-test 0 5 0 1\r\nhello")
        self.assertEqual(
            PutRequest("t", 0, b"hello", 0, 1, checksum(b"hello")).encode(),
            b"put t 0 5 0 %d 1\r\nhello" % (checksum(b"hello"),),
        )

    def test_auth_secret_checked(self) -> None:
        """An auth secret that is not one field cannot be encoded."""
        self.assertRaises(ValueError, AuthRequest(b"a b", 1).encode)
        self.assertRaises(ValueError, AuthRequest(b"", 1).encode)

    def test_fields_checked(self) -> None:
        """A name that would change the request line's fields cannot be encoded."""
        for bad in ("", "a b", "a\r", "a\nb"):
            self.assertRaises(ValueError, PutRequest(bad, 0, b"x", 0, 1).encode)
            self.assertRaises(ValueError, GetRequest("t", bad, 0, 0, 1, 1).encode)
            self.assertRaises(ValueError, OffsetRequest(bad, "g", 0, 0, 1).encode)
        self.assertRaises(ValueError, PutRequest("t", 0, b"x", 0, 1, transaction_key="a b").encode)
        self.assertRaises(ValueError, StatsRequest("a b", 1).encode)
        self.assertEqual(StatsRequest("", 1).encode(), b"stats  1\r\n")

    def test_replies(self) -> None:
        """Every reply encoder parses back on the client side."""
        wire = b"".join(
            [
                encode_put_result(123, 0, 1024, 1),
                encode_value(SEED_ONE_RECORD, 2),
                encode_value_header(len(SEED_TWO_RECORD), 3) + SEED_TWO_RECORD,
                encode_moved(2048, 4),
                encode_position_not_found(4096, 5),
                encode_topic_not_found("t", 2, 6),
                encode_bad_max_size(0, 7),
                encode_offset_result(512, 8),
                encode_version_result("1.4.6.2", 9),
                encode_result(500, "\u00e9", 10),
            ]
        )
        self.assertEqual(
            MetaqResponseParser().feed(wire),
            [
                ResultResponse(SUCCESS, b"123 0 1024", 1),
                ValueResponse(SEED_ONE_RECORD, 2),
                ValueResponse(SEED_TWO_RECORD, 3),
                ResultResponse(MOVED, b"2048", 4),
                ResultResponse(NOT_FOUND, b"Could not find message at position 4096", 5),
                ResultResponse(NOT_FOUND, b"The topic `t` in partition `2` is not exists", 6),
                ResultResponse(BAD_REQUEST, b"Bad request,invalid max size:0", 7),
                ResultResponse(SUCCESS, b"512", 8),
                ResultResponse(SUCCESS, b"1.4.6.2", 9),
                ResultResponse(500, "\u00e9".encode("utf-8"), 10),
            ],
        )

    def test_result_length_is_bytes(self) -> None:
        """result's length counts the body's UTF-8 bytes, not characters."""
        self.assertEqual(encode_result(500, "\u00e9", 1), b"result 500 2 1\r\n\xc3\xa9")

    def test_replies_reencode(self) -> None:
        """Parsed replies encode back to the same bytes."""
        wire = encode_put_result(1, 2, 3, 4) + encode_value(SEED_TWO_RECORD, 5)
        self.assertEqual(b"".join(r.encode() for r in MetaqResponseParser().feed(wire)), wire)

    def test_put_to_record_to_get(self) -> None:
        """A parsed put's data stored as a record is served back by a get with the same attribute and payload."""
        data = join_attribute(b"AAA", b"FFFF")
        (put,) = parse(PutRequest("t", 0, data, FLAG_ATTRIBUTE, 1).encode())
        assert isinstance(put, PutRequest)
        log = encode_record(SEED_TWO_ID, put.flag, put.data) * 3
        size = split_whole_records(log, 70)
        (reply,) = MetaqResponseParser().feed(encode_value_header(size, 2) + log[:size])
        assert isinstance(reply, ValueResponse)
        got = reply.records()
        self.assertEqual(len(got), 2)
        self.assertEqual((got[1].attribute, got[1].payload, got[1].msg_id), (b"AAA", b"FFFF", SEED_TWO_ID))


class OffsetByTimeTests(SynchronousTestCase):
    """txnsq's ``offset ... @<unix ms>`` form of the offset request."""

    def test_encoding(self) -> None:
        """An offset request with a timestamp writes ``@`` and the milliseconds in place of the offset."""
        self.assertEqual(
            OffsetRequest("t", "g", 3, 0, 9, timestamp_ms=1795687200000).encode(),
            b"offset t g 3 @1795687200000 9\r\n",
        )

    def test_bad_timestamps(self) -> None:
        """A timestamp that is empty, signed, not decimal or beyond int64 is a 400 naming it, and the connection goes on."""
        for field in (b"@", b"@-1", b"@+5", b"@1.5", b"@x", b"@99999999999999999999"):
            [error, after] = parse(b"offset t g 0 " + field + b" 4\r\nversion 5\r\n")
            self.assertIsInstance(error, MetaqError, field)
            self.assertEqual((error.code, error.opaque, error.fatal), (BAD_REQUEST, 4, False), field)
            self.assertIn("invalid timestamp", error.message, field)
            self.assertEqual(after, VersionRequest(5))
