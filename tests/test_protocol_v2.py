"""
Tests for txnsq.protocol.v2: the server-side V2 command parser and the
line-command parameter parsers, checked against Go nsqd's texts and the
recorded conformance cases.
"""

from __future__ import annotations

import json
import random
import struct
from collections import OrderedDict
from typing import Any, Dict, List, Optional, Tuple

from twisted.trial.unittest import SynchronousTestCase

from tests.integration.conformance import load_fixture, send_bytes, unescape
from txnsq.nsqd.options import NSQDOptions
from txnsq.protocol.errors import LineTooLong, ProtocolError, go_quote, protocol_error
from txnsq.protocol.identify import identify_response, negotiate_identify
from txnsq.protocol import v2 as v2_module
from txnsq.protocol.names import is_valid_name
from txnsq.protocol.v2 import (
    BODY_COMMANDS,
    MAX_LINE_LENGTH,
    Command,
    V2CommandParser,
    parse_base10,
    parse_fin,
    parse_rdy,
    parse_req,
    parse_sub,
    parse_touch,
)

MAX_MSG = 1048576
MAX_BODY = 5242880
MAX_REQ_MS = 3600000
ID = b"0123456789abcdef"


def size(n: int) -> bytes:
    """A 4-byte big-endian signed size."""
    return struct.pack(">i", n)


def pub(topic: bytes, body: bytes, verb: bytes = b"PUB") -> bytes:
    """The bytes of a PUB (or another one-body command) of ``body``."""
    return verb + b" " + topic + b"\n" + size(len(body)) + body


def mpub(topic: bytes, bodies: List[bytes]) -> bytes:
    """The bytes of an MPUB of ``bodies`` with a correct body size."""
    payload = size(len(bodies)) + b"".join(size(len(b)) + b for b in bodies)
    return b"MPUB " + topic + b"\n" + size(len(payload)) + payload


def make_parser(
    max_msg_size: int = MAX_MSG,
    max_body_size: int = MAX_BODY,
    max_req_timeout_ms: int = MAX_REQ_MS,
    **hooks: Any,
) -> V2CommandParser:
    """A parser with Go nsqd's default limits."""
    return V2CommandParser(max_msg_size, max_body_size, max_req_timeout_ms, **hooks)


def drain(parser: V2CommandParser) -> List[Command]:
    """Every command the parser can return now."""
    out = []
    while True:
        command = parser.next_command()
        if command is None:
            return out
        out.append(command)


def parse_all(data: bytes, **kwargs: Any) -> List[Command]:
    """The commands in ``data`` fed at once."""
    parser = make_parser(**kwargs)
    parser.feed(data)
    return drain(parser)


def error_of(data: bytes, **kwargs: Any) -> bytes:
    """The error frame data parsing ``data`` ends with."""
    parser = make_parser(**kwargs)
    parser.feed(data)
    try:
        drain(parser)
    except ProtocolError as error:
        assert error.fatal
        return error.frame_data()
    raise AssertionError("no error for %r" % (data,))


def feed_bytewise(parser: V2CommandParser, data: bytes) -> List[Tuple[int, Command]]:
    """Feed ``data`` one byte at a time; (index of the byte, command) pairs."""
    out = []
    for index in range(len(data)):
        parser.feed(data[index : index + 1])
        for command in drain(parser):
            out.append((index, command))
    return out


class CommandTests(SynchronousTestCase):
    """Command is a plain record of one parsed command."""

    def test_fields(self) -> None:
        """name, params, body and defer_ms are kept."""
        command = Command(b"DPUB", [b"t", b"10"], b"x", 10)
        self.assertEqual((command.name, command.params, command.body, command.defer_ms), (b"DPUB", [b"t", b"10"], b"x", 10))
        self.assertEqual(Command(b"NOP", []).body, None)
        self.assertEqual(Command(b"NOP", []).defer_ms, 0)

    def test_equality(self) -> None:
        """Commands with the same fields are equal."""
        self.assertEqual(Command(b"PUB", [b"t"], b"x"), Command(b"PUB", [b"t"], b"x"))
        self.assertNotEqual(Command(b"PUB", [b"t"], b"x"), Command(b"PUB", [b"t"], b"y"))
        self.assertNotEqual(Command(b"NOP", []), "NOP")

    def test_repr(self) -> None:
        """repr() shows the fields, and counts long MPUB body lists."""
        self.assertIn("b'PUB'", repr(Command(b"PUB", [b"t"], b"x")))
        self.assertIn("[10 bodies]", repr(Command(b"MPUB", [b"t"], [b"x"] * 10)))

    def test_body_commands(self) -> None:
        """IDENTIFY, AUTH, PUB, DPUB and MPUB have bodies."""
        self.assertEqual(BODY_COMMANDS, frozenset([b"IDENTIFY", b"AUTH", b"PUB", b"DPUB", b"MPUB"]))


class LineTests(SynchronousTestCase):
    """Command lines are split as Go nsqd splits them."""

    def test_line_command(self) -> None:
        """A line command is its name and space-separated parameters."""
        self.assertEqual(parse_all(b"SUB t c\n"), [Command(b"SUB", [b"t", b"c"])])
        self.assertEqual(parse_all(b"NOP\n"), [Command(b"NOP", [])])

    def test_incomplete_line(self) -> None:
        """Nothing comes out before the newline."""
        parser = make_parser()
        parser.feed(b"NOP")
        self.assertIsNone(parser.next_command())
        parser.feed(b"\n")
        self.assertEqual(parser.next_command(), Command(b"NOP", []))
        self.assertIsNone(parser.next_command())

    def test_crlf(self) -> None:
        """One \\r before the \\n is dropped."""
        self.assertEqual(parse_all(b"NOP\r\n"), [Command(b"NOP", [])])
        self.assertEqual(parse_all(b"PUB t\r\n" + size(2) + b"hi"), [Command(b"PUB", [b"t"], b"hi")])
        self.assertEqual(parse_all(b"NOP\r\r\n"), [Command(b"NOP\r", [])])
        self.assertEqual(parse_all(b"\r\n"), [Command(b"", [])])

    def test_empty_line(self) -> None:
        """An empty line is a command with an empty name."""
        self.assertEqual(parse_all(b"\n"), [Command(b"", [])])

    def test_single_space_split(self) -> None:
        """Parameters are split on every single space: empty parameters exist."""
        self.assertEqual(parse_all(b"SUB t  c\n"), [Command(b"SUB", [b"t", b"", b"c"])])
        self.assertEqual(parse_all(b"RDY \n"), [Command(b"RDY", [b""])])
        self.assertEqual(parse_all(b" NOP\n"), [Command(b"", [b"NOP"])])

    def test_case_sensitive(self) -> None:
        """Lower-case names are other commands (not body commands)."""
        parser = make_parser()
        parser.feed(b"pub t\n" + size(1) + b"x")
        self.assertEqual(parser.next_command(), Command(b"pub", [b"t"]))
        self.assertIsNone(parser.next_command())

    def test_unknown_and_binary_names(self) -> None:
        """Unknown names, also binary ones, are returned for the caller to refuse."""
        self.assertEqual(parse_all(b"FOO bar\n\x00\xff\n"), [Command(b"FOO", [b"bar"]), Command(b"\x00\xff", [])])

    def test_pipelined(self) -> None:
        """Several commands in one read come out in order."""
        data = pub(b"t", b"1") + b"NOP\n" + pub(b"t", b"2") + mpub(b"t", [b"3", b"4"]) + b"RDY 5\n"
        self.assertEqual(
            parse_all(data),
            [
                Command(b"PUB", [b"t"], b"1"),
                Command(b"NOP", []),
                Command(b"PUB", [b"t"], b"2"),
                Command(b"MPUB", [b"t"], [b"3", b"4"]),
                Command(b"RDY", [b"5"]),
            ],
        )

    def test_params_are_bytes(self) -> None:
        """Names and parameters are bytes objects, not bytearrays."""
        command = parse_all(b"SUB t c\n")[0]
        self.assertIs(type(command.name), bytes)
        self.assertIs(type(command.params[0]), bytes)
        body_command = parse_all(pub(b"t", b"x" * 10000))[0]
        self.assertIs(type(body_command.body), bytes)


class FinLineTests(SynchronousTestCase):
    """FIN lines: next_fin_ids takes the plain ones; next_command splits any of them by the general rules."""

    def test_next_fin_ids(self) -> None:
        """A run of plain FIN lines is consumed and their ids returned in order, then the next command follows."""
        parser = make_parser()
        parser.feed(b"FIN 0123456789abcdef\nFIN fedcba9876543210\nNOP\nFIN 0123456789abcdeg\n")
        self.assertEqual(parser.next_fin_ids(), [b"0123456789abcdef", b"fedcba9876543210"])
        self.assertEqual(parser.next_fin_ids(), [])
        self.assertEqual(parser.next_command(), Command(b"NOP", []))
        self.assertEqual(parser.next_fin_ids(), [b"0123456789abcdeg"])
        self.assertEqual(parser.buffered(), 0)
        self.assertTrue(all(type(msg_id) is bytes for msg_id in parser.next_fin_ids()))

    def test_next_fin_ids_stop_at_the_first_other_line(self) -> None:
        """The run ends before a FIN line that is not plain, which is left whole for next_command."""
        parser = make_parser()
        parser.feed(b"FIN 0123456789abcdef\nFIN 01234567 9abcdef\nFIN fedcba9876543210\n")
        self.assertEqual(parser.next_fin_ids(), [b"0123456789abcdef"])
        self.assertEqual(parser.next_command(), Command(b"FIN", [b"01234567", b"9abcdef"]))
        self.assertEqual(parser.next_fin_ids(), [b"fedcba9876543210"])

    def test_next_fin_ids_split_at_every_byte(self) -> None:
        """FIN lines fed a byte at a time come out once each, whole."""
        data = b"".join(b"FIN %016d\n" % (i,) for i in range(5))
        parser = make_parser()
        ids: List[bytes] = []
        for i in range(len(data)):
            parser.feed(data[i:i + 1])
            ids.extend(parser.next_fin_ids())
        self.assertEqual(ids, [b"%016d" % (i,) for i in range(5)])
        self.assertEqual(parser.buffered(), 0)

    def test_next_fin_ids_decline(self) -> None:
        """Anything but a plain, complete FIN line is left whole for next_command."""
        for line in (b"FIN 0123456789abcdef\r\n", b"FIN 01234567 9abcdef\n", b"FIN 0123456789abcde\n",
                     b"FIN 0123456789abcdef0\n", b"FINX0123456789abcdef\n", b"NOP\n", b"FIN 0123456789abcdef"):
            parser = make_parser()
            parser.feed(line)
            self.assertEqual(parser.next_fin_ids(), [], line)
            self.assertEqual(parser.buffered(), len(line), line)

    def test_next_fin_ids_mid_body(self) -> None:
        """Bytes of a body being read are never taken for a FIN."""
        parser = make_parser()
        body = b"FIN 0123456789abcdef\n"
        parser.feed(b"PUB t\n" + size(len(body) + 1) + body)
        self.assertIsNone(parser.next_command())
        self.assertEqual(parser.next_fin_ids(), [])
        parser.feed(b"x")
        self.assertEqual(parser.next_command(), Command(b"PUB", [b"t"], body + b"x"))

    def test_fin(self) -> None:
        """FIN and a 16-byte id is the command with that id, as bytes."""
        [command] = parse_all(b"FIN 0123456789abcdef\n")
        self.assertEqual(command, Command(b"FIN", [b"0123456789abcdef"]))
        self.assertIs(type(command.params[0]), bytes)

    def test_fin_crlf(self) -> None:
        """A CR before the newline is dropped, whatever the id's length."""
        self.assertEqual(parse_all(b"FIN 0123456789abcdef\r\n"), [Command(b"FIN", [b"0123456789abcdef"])])
        self.assertEqual(parse_all(b"FIN 0123456789abcde\r\n"), [Command(b"FIN", [b"0123456789abcde"])])

    def test_fin_spaces(self) -> None:
        """A space inside the 16 bytes splits them into two parameters."""
        self.assertEqual(parse_all(b"FIN 01234567 9abcdef\n"), [Command(b"FIN", [b"01234567", b"9abcdef"])])
        self.assertEqual(parse_all(b"FIN  123456789abcdef\n"), [Command(b"FIN", [b"", b"123456789abcdef"])])

    def test_fin_other_lengths_and_names(self) -> None:
        """Ids of other lengths, and names that only begin like FIN, are split as any line."""
        self.assertEqual(parse_all(b"FIN 0123456789abcdef0\n"), [Command(b"FIN", [b"0123456789abcdef0"])])
        self.assertEqual(parse_all(b"FINX0123456789abcdef\n"), [Command(b"FINX0123456789abcdef", [])])
        self.assertEqual(parse_all(b"FIN\n"), [Command(b"FIN", [])])

    def test_fin_run_split_anywhere(self) -> None:
        """A run of FINs cut at every possible place comes out whole and in order."""
        ids = [b"%016x" % (n,) for n in range(3)]
        data = b"".join(b"FIN " + i + b"\n" for i in ids)
        for cut in range(len(data) + 1):
            parser = make_parser()
            parser.feed(data[:cut])
            out = list(drain(parser))
            parser.feed(data[cut:])
            out.extend(drain(parser))
            self.assertEqual(out, [Command(b"FIN", [i]) for i in ids])


class LineTooLongTests(SynchronousTestCase):
    """Go's 16 KiB bufio buffer: a line with its newline must fit."""

    def test_limit(self) -> None:
        """The limit is 16 KiB."""
        self.assertEqual(MAX_LINE_LENGTH, 16384)

    def test_longest_line(self) -> None:
        """16383 bytes and a newline are one command."""
        line = b"A" * (MAX_LINE_LENGTH - 1)
        self.assertEqual(parse_all(line + b"\n"), [Command(line, [])])

    def test_longest_line_with_cr(self) -> None:
        """The \\r counts towards the limit: 16382 bytes, \\r, \\n fit."""
        line = b"A" * (MAX_LINE_LENGTH - 2)
        self.assertEqual(parse_all(line + b"\r\n"), [Command(line, [])])

    def test_waits_below_limit(self) -> None:
        """16383 bytes without a newline: wait for more."""
        parser = make_parser()
        parser.feed(b"A" * (MAX_LINE_LENGTH - 1))
        self.assertIsNone(parser.next_command())

    def test_full_buffer(self) -> None:
        """16384 bytes without a newline: LineTooLong."""
        parser = make_parser()
        parser.feed(b"A" * (MAX_LINE_LENGTH - 1))
        self.assertIsNone(parser.next_command())
        parser.feed(b"A")
        self.assertRaises(LineTooLong, parser.next_command)

    def test_newline_just_beyond(self) -> None:
        """A newline at byte 16385 is too late, even in the same read."""
        parser = make_parser()
        parser.feed(b"A" * MAX_LINE_LENGTH + b"\n")
        self.assertRaises(LineTooLong, parser.next_command)

    def test_after_other_commands(self) -> None:
        """The limit counts from the start of the line, not of the buffer."""
        line = b"A" * (MAX_LINE_LENGTH - 1)
        commands = parse_all(b"NOP\n" * 1000 + line + b"\n")
        self.assertEqual(len(commands), 1001)
        self.assertEqual(commands[-1], Command(line, []))

    def test_long_body_is_fine(self) -> None:
        """Bodies are not lines: a body longer than 16 KiB is read whole."""
        body = b"\n" * 100 + b"x" * 100000
        self.assertEqual(parse_all(pub(b"t", body)), [Command(b"PUB", [b"t"], body)])

    def test_dead_after(self) -> None:
        """After LineTooLong the parser ignores everything."""
        parser = make_parser()
        parser.feed(b"A" * 17000)
        self.assertRaises(LineTooLong, parser.next_command)
        self.assertTrue(parser.dead)
        parser.feed(b"NOP\n")
        self.assertIsNone(parser.next_command())
        self.assertEqual(parser.buffered(), 0)


class PubTests(SynchronousTestCase):
    """PUB: topic, then a body bounded by --max-msg-size."""

    def test_ok(self) -> None:
        """A PUB returns its topic and body."""
        self.assertEqual(parse_all(pub(b"t", b"hello")), [Command(b"PUB", [b"t"], b"hello")])

    def test_extra_params(self) -> None:
        """Extra parameters are kept (Go ignores them)."""
        self.assertEqual(parse_all(b"PUB t x\n" + size(1) + b"a"), [Command(b"PUB", [b"t", b"x"], b"a")])

    def test_insufficient_params(self) -> None:
        """PUB without a topic is refused."""
        self.assertEqual(error_of(b"PUB\n"), b"E_INVALID PUB insufficient number of parameters")

    def test_bad_topic(self) -> None:
        """An invalid topic is refused with the name Go-quoted, before the body."""
        self.assertEqual(error_of(b"PUB bad!topic\n"), b'E_BAD_TOPIC PUB topic name "bad!topic" is not valid')
        self.assertEqual(error_of(b"PUB \n"), b'E_BAD_TOPIC PUB topic name "" is not valid')
        self.assertEqual(error_of(b"PUB t\xff\x01\n"), b'E_BAD_TOPIC PUB topic name "t\\xff\\x01" is not valid')

    def test_sizes(self) -> None:
        """Sizes of 0 and below are refused, then sizes above --max-msg-size."""
        self.assertEqual(error_of(b"PUB t\n" + size(0)), b"E_BAD_MESSAGE PUB invalid message body size 0")
        self.assertEqual(error_of(b"PUB t\n\xff\xff\xff\xff"), b"E_BAD_MESSAGE PUB invalid message body size -1")
        self.assertEqual(error_of(b"PUB t\n" + size(101), max_msg_size=100), b"E_BAD_MESSAGE PUB message too big 101 > 100")
        self.assertEqual(parse_all(pub(b"t", b"x" * 100), max_msg_size=100), [Command(b"PUB", [b"t"], b"x" * 100)])

    def test_size_above_max_body_size(self) -> None:
        """A size above --max-body-size is still reported against --max-msg-size."""
        self.assertEqual(error_of(b"PUB t\n" + size(5242881)), b"E_BAD_MESSAGE PUB message too big 5242881 > 1048576")

    def test_size_error_before_body(self) -> None:
        """A bad size is reported as soon as the size arrives."""
        parser = make_parser(max_msg_size=100)
        parser.feed(b"PUB t\n" + size(101)[:3])
        self.assertIsNone(parser.next_command())
        parser.feed(size(101)[3:])
        self.assertRaises(ProtocolError, parser.next_command)

    def test_binary_body(self) -> None:
        """Every byte value passes through the body unchanged."""
        body = bytes(range(256)) * 3
        self.assertEqual(parse_all(pub(b"t", body))[0].body, body)

    def test_large_body_chunks(self) -> None:
        """A body larger than a read arrives over many feeds."""
        body = bytes(random.Random(1).getrandbits(8) for _ in range(200000))
        data = pub(b"t", body) + b"NOP\n"
        parser = make_parser()
        out: List[Command] = []
        for start in range(0, len(data), 65536):
            parser.feed(data[start : start + 65536])
            out.extend(drain(parser))
        self.assertEqual(out, [Command(b"PUB", [b"t"], body), Command(b"NOP", [])])


class ValidTopicCacheTests(SynchronousTestCase):
    """The shared cache of valid topic names behind PUB, DPUB and MPUB."""

    def setUp(self) -> None:
        self.cache: "OrderedDict[bytes, bool]" = OrderedDict()
        self.patch(v2_module, "_VALID_TOPICS", self.cache)
        self.patch(v2_module, "_VALID_TOPICS_MAX", 3)

    def test_remembers_valid_names_only(self) -> None:
        """A valid topic is remembered once published; an invalid one never is."""
        self.assertEqual(parse_all(pub(b"t", b"a")), [Command(b"PUB", [b"t"], b"a")])
        self.assertEqual(error_of(b"PUB bad!topic\n"), b'E_BAD_TOPIC PUB topic name "bad!topic" is not valid')
        self.assertEqual(list(self.cache), [b"t"])

    def test_full_drops_oldest_only(self) -> None:
        """A new name in a full cache drops the oldest name, not every name."""
        for name in (b"a", b"b", b"c", b"d"):
            self.assertEqual(parse_all(pub(name, b"x")), [Command(b"PUB", [name], b"x")])
        self.assertEqual(list(self.cache), [b"b", b"c", b"d"])
        self.assertEqual(parse_all(mpub(b"e", [b"x"])), [Command(b"MPUB", [b"e"], [b"x"])])
        self.assertEqual(list(self.cache), [b"c", b"d", b"e"])

    def test_dropped_name_still_checked(self) -> None:
        """A name dropped from the cache is checked again, with the same result."""
        for name in (b"a", b"b", b"c", b"d", b"a"):
            self.assertEqual(parse_all(pub(name, b"x")), [Command(b"PUB", [name], b"x")])
        self.assertEqual(list(self.cache), [b"c", b"d", b"a"])


class DpubTests(SynchronousTestCase):
    """DPUB: topic, defer in ms within --max-req-timeout, then a body."""

    def test_ok(self) -> None:
        """The defer is parsed into defer_ms; params[1] keeps the text."""
        self.assertEqual(parse_all(pub(b"t 1000", b"later", b"DPUB")), [Command(b"DPUB", [b"t", b"1000"], b"later", 1000)])

    def test_range_edges(self) -> None:
        """0 and --max-req-timeout are accepted, one more is not."""
        self.assertEqual(parse_all(pub(b"t 0", b"x", b"DPUB"))[0].defer_ms, 0)
        self.assertEqual(parse_all(pub(b"t 3600000", b"x", b"DPUB"))[0].defer_ms, 3600000)
        self.assertEqual(error_of(b"DPUB t 3600001\n"), b"E_INVALID DPUB timeout 3600001 out of range 0-3600000")
        self.assertEqual(error_of(b"DPUB t 11\n", max_req_timeout_ms=10), b"E_INVALID DPUB timeout 11 out of range 0-10")

    def test_unparsable(self) -> None:
        """Signs and other non-digits do not parse."""
        self.assertEqual(error_of(b"DPUB t -1\n"), b"E_INVALID DPUB could not parse timeout -1")
        self.assertEqual(error_of(b"DPUB t soon\n"), b"E_INVALID DPUB could not parse timeout soon")
        self.assertEqual(error_of(b"DPUB t +1\n"), b"E_INVALID DPUB could not parse timeout +1")

    def test_empty_defer(self) -> None:
        """An empty defer is 0 (Go's ByteToBase10 of nothing)."""
        self.assertEqual(parse_all(pub(b"t ", b"x", b"DPUB")), [Command(b"DPUB", [b"t", b""], b"x", 0)])

    def test_overflow(self) -> None:
        """Go's uint64 parse and int64 duration overflow are reproduced."""
        # -1 ms once converted: out of range, reported as parsed.
        self.assertEqual(
            error_of(b"DPUB t 18446744073709551615\n"),
            b"E_INVALID DPUB timeout 18446744073709551615 out of range 0-3600000",
        )
        # ceil(2**64 / 1e6) ms wraps to 448384 ns: Go accepts it.
        self.assertEqual(parse_all(pub(b"t 18446744073710", b"x", b"DPUB"))[0].defer_ms, 0)

    def test_insufficient_params(self) -> None:
        """DPUB needs a topic and a defer."""
        self.assertEqual(error_of(b"DPUB t\n"), b"E_INVALID DPUB insufficient number of parameters")
        self.assertEqual(error_of(b"DPUB\n"), b"E_INVALID DPUB insufficient number of parameters")

    def test_order(self) -> None:
        """The topic is checked before the defer, the defer before the size."""
        self.assertEqual(error_of(b"DPUB bad! soon\n"), b'E_BAD_TOPIC DPUB topic name "bad!" is not valid')
        self.assertEqual(error_of(b"DPUB t soon\n" + size(0)), b"E_INVALID DPUB could not parse timeout soon")

    def test_sizes(self) -> None:
        """DPUB sizes are checked as PUB's."""
        self.assertEqual(error_of(b"DPUB t 10\n" + size(101), max_msg_size=100), b"E_BAD_MESSAGE DPUB message too big 101 > 100")
        self.assertEqual(error_of(b"DPUB t 10\n" + size(0)), b"E_BAD_MESSAGE DPUB invalid message body size 0")


class MpubTests(SynchronousTestCase):
    """MPUB: topic, a body size, then a stream of sized messages."""

    def test_ok(self) -> None:
        """The bodies come out as a list, in order."""
        self.assertEqual(parse_all(mpub(b"t", [b"a", b"bb", b"ccc"])), [Command(b"MPUB", [b"t"], [b"a", b"bb", b"ccc"])])

    def test_one_message(self) -> None:
        """An MPUB of one message, whole and byte by byte."""
        data = mpub(b"t", [b"only"])
        self.assertEqual(parse_all(data), [Command(b"MPUB", [b"t"], [b"only"])])
        self.assertEqual(feed_bytewise(make_parser(), data), [(len(data) - 1, Command(b"MPUB", [b"t"], [b"only"]))])

    def test_ten_thousand_messages(self) -> None:
        """An MPUB of 10,000 messages, whole and in random-sized reads."""
        rng = random.Random(10000)
        bodies = [bytes([i % 256]) * rng.randint(1, 40) for i in range(10000)]
        data = mpub(b"t", bodies) + b"NOP\n"
        expected = [Command(b"MPUB", [b"t"], bodies), Command(b"NOP", [])]
        self.assertEqual(parse_all(data), expected)
        parser = make_parser()
        out: List[Command] = []
        start = 0
        while start < len(data):
            step = rng.randint(1, 3000)
            parser.feed(data[start : start + step])
            out.extend(drain(parser))
            start += step
        self.assertEqual(out, expected)

    def test_ten_thousand_messages_bytewise(self) -> None:
        """An MPUB of 10,000 messages fed one byte at a time."""
        bodies = [b"m%d" % (i,) for i in range(10000)]
        data = mpub(b"t", bodies)
        self.assertEqual(feed_bytewise(make_parser(), data), [(len(data) - 1, Command(b"MPUB", [b"t"], bodies))])

    def test_large_messages(self) -> None:
        """Messages larger than the copy threshold are extracted whole."""
        bodies = [b"a" * 5000, b"b" * 70000, b"c"]
        self.assertEqual(parse_all(mpub(b"t", bodies))[0].body, bodies)

    def test_count_less_than_body(self) -> None:
        """Only count messages are read; the rest of the body is the next line."""
        data = b"MPUB t\n" + size(18) + size(1) + size(3) + b"one" + size(3) + b"two"
        parser = make_parser()
        parser.feed(data)
        self.assertEqual(parser.next_command(), Command(b"MPUB", [b"t"], [b"one"]))
        self.assertIsNone(parser.next_command())
        parser.feed(b"NOP\n")
        self.assertEqual(parser.next_command(), Command(b"\x00\x00\x00\x03twoNOP", []))

    def test_count_more_than_body(self) -> None:
        """Missing messages are taken from the bytes that follow."""
        data = b"MPUB t\n" + size(18) + size(3) + size(3) + b"one" + size(3) + b"two"
        parser = make_parser()
        parser.feed(data)
        self.assertIsNone(parser.next_command())
        parser.feed(b"NOP\n")
        with self.assertRaises(ProtocolError) as caught:
            parser.next_command()
        self.assertEqual(caught.exception.frame_data(), b"E_BAD_MESSAGE MPUB message too big 1313820682 > 1048576")

    def test_count_more_than_body_satisfied(self) -> None:
        """Bytes sent after a short MPUB complete it; what follows is the next line."""
        data = b"MPUB t\n" + size(9) + size(2) + size(1) + b"a"
        parser = make_parser()
        parser.feed(data)
        self.assertIsNone(parser.next_command())
        parser.feed(size(1) + b"bNOP\n")
        self.assertEqual(drain(parser), [Command(b"MPUB", [b"t"], [b"a", b"b"]), Command(b"NOP", [])])

    def test_count_more_than_body_next_command(self) -> None:
        """A following PUB's first bytes are read as the next message size."""
        data = b"MPUB t\n" + size(9) + size(2) + size(1) + b"a" + pub(b"t", b"z")
        # "PUB " read as an int32.
        self.assertEqual(error_of(data), b"E_BAD_MESSAGE MPUB message too big 1347764768 > 1048576")

    def test_body_sizes(self) -> None:
        """Body size 0 and below, then above --max-body-size, are refused."""
        self.assertEqual(error_of(b"MPUB t\n" + size(0)), b"E_BAD_BODY MPUB invalid body size 0")
        self.assertEqual(error_of(b"MPUB t\n" + size(-5)), b"E_BAD_BODY MPUB invalid body size -5")
        self.assertEqual(error_of(b"MPUB t\n" + size(5242881)), b"E_BAD_BODY MPUB body too big 5242881 > 5242880")

    def test_counts(self) -> None:
        """Counts of 0 and below, or above (max-body-size - 4) / 5, are refused."""
        self.assertEqual(error_of(b"MPUB t\n" + size(4) + size(0)), b"E_BAD_BODY MPUB invalid message count 0")
        self.assertEqual(error_of(b"MPUB t\n" + size(8) + size(-1)), b"E_BAD_BODY MPUB invalid message count -1")
        self.assertEqual(error_of(b"MPUB t\n" + size(8) + size(1048576)), b"E_BAD_BODY MPUB invalid message count 1048576")
        # 1048575 is allowed: the parser waits for the first message.
        parser = make_parser()
        parser.feed(b"MPUB t\n" + size(8) + size(1048575))
        self.assertIsNone(parser.next_command())

    def test_count_limit_small_body(self) -> None:
        """With a tiny --max-body-size no count is valid (Go's truncating division)."""
        self.assertEqual(error_of(b"MPUB t\n" + size(1) + size(1), max_body_size=3), b"E_BAD_BODY MPUB invalid message count 1")

    def test_message_sizes(self) -> None:
        """A message of size 0 (with its index) or above --max-msg-size is refused."""
        data = b"MPUB t\n" + size(14) + size(2) + size(2) + b"ok" + size(0)
        self.assertEqual(error_of(data), b"E_BAD_MESSAGE MPUB invalid message(1) body size 0")
        data = b"MPUB t\n" + size(14) + size(2) + size(-3)
        self.assertEqual(error_of(data), b"E_BAD_MESSAGE MPUB invalid message(0) body size -3")
        data = b"MPUB t\n" + size(115) + size(2) + size(2) + b"ok" + size(101)
        self.assertEqual(error_of(data, max_msg_size=100), b"E_BAD_MESSAGE MPUB message too big 101 > 100")

    def test_message_error_before_rest(self) -> None:
        """A bad message size is reported as soon as it arrives."""
        parser = make_parser()
        parser.feed(b"MPUB t\n" + size(100) + size(5) + size(1) + b"a")
        self.assertIsNone(parser.next_command())
        parser.feed(size(0))
        self.assertRaises(ProtocolError, parser.next_command)

    def test_bad_topic(self) -> None:
        """Go's MPUB repeats E_BAD_TOPIC in its text."""
        self.assertEqual(error_of(b"MPUB bad!topic\n"), b'E_BAD_TOPIC E_BAD_TOPIC MPUB topic name "bad!topic" is not valid')

    def test_insufficient_params(self) -> None:
        """MPUB without a topic is refused."""
        self.assertEqual(error_of(b"MPUB\n"), b"E_INVALID MPUB insufficient number of parameters")


class MpubWindowTests(SynchronousTestCase):
    """MPUB reads through windows sized by its announced body; lies still parse as Go."""

    def test_more_messages_than_announced(self) -> None:
        """Messages beyond the announced body size, in the same read, are read."""
        messages = b"".join(size(3) + b"m%02d" % (i,) for i in range(50))
        data = b"MPUB t\n" + size(11) + size(50) + messages + b"NOP\n"
        self.assertEqual(
            parse_all(data),
            [Command(b"MPUB", [b"t"], [b"m%02d" % (i,) for i in range(50)]), Command(b"NOP", [])],
        )

    def test_message_larger_than_window(self) -> None:
        """A message larger than the announced body is read whole."""
        data = b"MPUB t\n" + size(20) + size(3) + b"".join(size(10000) + bytes([65 + i]) * 10000 for i in range(3))
        self.assertEqual(parse_all(data)[0].body, [b"A" * 10000, b"B" * 10000, b"C" * 10000])

    def test_tiny_announced_body(self) -> None:
        """Announced bodies that leave fewer than 4 bytes after the count still parse."""
        for announced in range(1, 9):
            data = b"MPUB t\n" + size(announced) + size(2) + size(100) + b"x" * 100 + size(1) + b"y" + b"NOP\n"
            self.assertEqual(parse_all(data), [Command(b"MPUB", [b"t"], [b"x" * 100, b"y"]), Command(b"NOP", [])], announced)
            self.assertEqual(
                [c for _, c in feed_bytewise(make_parser(), data)],
                [Command(b"MPUB", [b"t"], [b"x" * 100, b"y"]), Command(b"NOP", [])],
            )

    def test_pipelined_small_mpubs(self) -> None:
        """Many small MPUBs in one read each come out."""
        data = b"".join(mpub(b"t", [b"%d" % (i,), b"x"]) for i in range(3000))
        commands = parse_all(data)
        self.assertEqual([c.body for c in commands], [[b"%d" % (i,), b"x"] for i in range(3000)])


class _Incomplete(Exception):
    pass


def reference_parse(data: bytes, max_msg: int, max_body: int, max_req_ms: int) -> Tuple[List[Command], Optional[bytes]]:
    """
    A direct transcription of Go nsqd's reads over a complete byte string:
    the commands, then the error frame data, b"LineTooLong", or None when
    the data ends inside a command.  The oracle for the incremental parser.
    """
    out: List[Command] = []
    pos = 0

    def read_int32() -> int:
        nonlocal pos
        if pos + 4 > len(data):
            raise _Incomplete()
        value: int = struct.unpack(">i", data[pos : pos + 4])[0]
        pos += 4
        return value

    def read(n: int) -> bytes:
        nonlocal pos
        if pos + n > len(data):
            raise _Incomplete()
        pos += n
        return data[pos - n : pos]

    def fail(code: str, text: Any) -> bytes:
        return protocol_error(code, text).frame_data()

    while True:
        newline = data.find(b"\n", pos)
        if newline < 0 or newline - pos >= MAX_LINE_LENGTH:
            if len(data) - pos >= MAX_LINE_LENGTH:
                return out, b"LineTooLong"
            return out, None
        line = data[pos:newline]
        if line.endswith(b"\r"):
            line = line[:-1]
        pos = newline + 1
        parts = line.split(b" ")
        name, params = parts[0], parts[1:]
        try:
            if name == b"PUB" or name == b"DPUB":
                verb = name.decode()
                if len(params) < (1 if name == b"PUB" else 2):
                    return out, fail("E_INVALID", verb + " insufficient number of parameters")
                if not is_valid_name(params[0]):
                    return out, fail("E_BAD_TOPIC", "%s topic name %s is not valid" % (verb, go_quote(params[0])))
                defer = 0
                if name == b"DPUB":
                    value = parse_base10(params[1])
                    if value is None:
                        return out, fail("E_INVALID", b"DPUB could not parse timeout " + params[1])
                    if value > max_req_ms:
                        return out, fail("E_INVALID", "DPUB timeout %d out of range 0-%d" % (value, max_req_ms))
                    defer = value
                n = read_int32()
                if n <= 0:
                    return out, fail("E_BAD_MESSAGE", "%s invalid message body size %d" % (verb, n))
                if n > max_msg:
                    return out, fail("E_BAD_MESSAGE", "%s message too big %d > %d" % (verb, n, max_msg))
                out.append(Command(name, params, read(n), defer))
            elif name == b"MPUB":
                if not params:
                    return out, fail("E_INVALID", "MPUB insufficient number of parameters")
                if not is_valid_name(params[0]):
                    return out, fail("E_BAD_TOPIC", "E_BAD_TOPIC MPUB topic name %s is not valid" % (go_quote(params[0]),))
                n = read_int32()
                if n <= 0:
                    return out, fail("E_BAD_BODY", "MPUB invalid body size %d" % (n,))
                if n > max_body:
                    return out, fail("E_BAD_BODY", "MPUB body too big %d > %d" % (n, max_body))
                count = read_int32()
                if count <= 0 or count > (max_body - 4) // 5:
                    return out, fail("E_BAD_BODY", "MPUB invalid message count %d" % (count,))
                bodies = []
                for index in range(count):
                    n = read_int32()
                    if n <= 0:
                        return out, fail("E_BAD_MESSAGE", "MPUB invalid message(%d) body size %d" % (index, n))
                    if n > max_msg:
                        return out, fail("E_BAD_MESSAGE", "MPUB message too big %d > %d" % (n, max_msg))
                    bodies.append(read(n))
                out.append(Command(name, params, bodies))
            elif name == b"IDENTIFY" or name == b"AUTH":
                verb = name.decode()
                if name == b"AUTH" and params:
                    return out, fail("E_INVALID", "AUTH invalid number of parameters")
                n = read_int32()
                if n > max_body:
                    return out, fail("E_BAD_BODY", "%s body too big %d > %d" % (verb, n, max_body))
                if n <= 0:
                    return out, fail("E_BAD_BODY", "%s invalid body size %d" % (verb, n))
                out.append(Command(name, params, read(n)))
            else:
                out.append(Command(name, params))
        except _Incomplete:
            return out, None


def random_stream(rng: random.Random) -> bytes:
    """Commands, mostly valid, some with lies in their sizes and counts."""
    pieces = []
    for _ in range(rng.randint(1, 40)):
        kind = rng.random()
        if kind < 0.2:
            pieces.append(rng.choice([b"NOP\n", b"RDY 5\r\n", b"FIN " + ID + b"\n", b"SUB t c\n", b"\n", b"X  y\n"]))
        elif kind < 0.45:
            body = rng.choice([b"x", b"hello", b"\n" * 7, b"b" * rng.randint(1, 8000)])
            topic = rng.choice([b"t2", b"bad!"]) if rng.random() < 0.03 else b"t"
            pieces.append(pub(topic, body))
        elif kind < 0.55:
            defer = rng.choice([b"0", b"100", b"3600000", b"", b"3600001", b"-1"] if rng.random() < 0.1 else [b"0", b"100"])
            pieces.append(pub(b"t " + defer, b"d", b"DPUB"))
        elif kind < 0.9:
            lengths = [1, 2, 50, 4095, 4096, 5000, 8000]
            bodies = [bytes([97 + rng.randint(0, 25)]) * rng.choice(lengths) for _ in range(rng.randint(1, 30))]
            payload = b"".join(size(len(b)) + b for b in bodies)
            count = len(bodies)
            if rng.random() < 0.1:
                count += rng.choice([-1, 1, 2])
            announced = len(payload) + 4
            if rng.random() < 0.3:
                announced = rng.choice([1, 5, 7, 9, announced - 7, announced + 13, announced // 2])
            pieces.append(b"MPUB t\n" + size(announced) + size(count) + payload)
        elif kind < 0.97:
            pieces.append(b"IDENTIFY\n" + size(2) + b"{}")
        else:
            pieces.append(
                rng.choice(
                    [
                        b"PUB t\n" + size(0),
                        b"PUB t\n" + size(8001),
                        b"MPUB t\n" + size(8) + size(1) + size(0),
                        b"MPUB t\n" + size(8) + size(1) + size(8001),
                        b"A" * 17000,
                    ]
                )
            )
    return b"".join(pieces)


class ReferenceTests(SynchronousTestCase):
    """The incremental parser agrees with a direct transcription of Go's reads."""

    def test_random_streams(self) -> None:
        """Random streams, fed in random pieces, give the oracle's commands and error."""
        rng = random.Random(20260101)
        for _ in range(300):
            data = random_stream(rng)
            expected, outcome = reference_parse(data, 8000, 200000, MAX_REQ_MS)
            parser = make_parser(max_msg_size=8000, max_body_size=200000)
            got: List[Command] = []
            error: Optional[bytes] = None
            start = 0
            try:
                while start < len(data):
                    step = rng.choice([1, 3, 17, 100, 4096, 70000])
                    parser.feed(data[start : start + step])
                    command = parser.next_command()
                    while command is not None:
                        got.append(command)
                        command = parser.next_command()
                    start += step
            except ProtocolError as caught:
                error = caught.frame_data()
            except LineTooLong:
                error = b"LineTooLong"
            self.assertEqual(got, expected)
            self.assertEqual(error, outcome)


class IdentifyAuthTests(SynchronousTestCase):
    """IDENTIFY and AUTH bodies are bounded by --max-body-size."""

    def test_identify(self) -> None:
        """IDENTIFY returns its raw body (decoding is negotiate_identify's)."""
        self.assertEqual(parse_all(b"IDENTIFY\n" + size(2) + b"{}"), [Command(b"IDENTIFY", [], b"{}")])

    def test_identify_params_ignored(self) -> None:
        """IDENTIFY has no parameter check."""
        self.assertEqual(parse_all(b"IDENTIFY x y\n" + size(2) + b"{}"), [Command(b"IDENTIFY", [b"x", b"y"], b"{}")])

    def test_identify_sizes(self) -> None:
        """Too big is checked before 0 and below."""
        self.assertEqual(error_of(b"IDENTIFY\n" + size(5242881)), b"E_BAD_BODY IDENTIFY body too big 5242881 > 5242880")
        self.assertEqual(error_of(b"IDENTIFY\n" + size(0)), b"E_BAD_BODY IDENTIFY invalid body size 0")
        self.assertEqual(error_of(b"IDENTIFY\n\xff\xff\xff\xff"), b"E_BAD_BODY IDENTIFY invalid body size -1")
        self.assertEqual(error_of(b"IDENTIFY\n" + size(11), max_body_size=10), b"E_BAD_BODY IDENTIFY body too big 11 > 10")

    def test_auth(self) -> None:
        """AUTH returns its secret."""
        self.assertEqual(parse_all(b"AUTH\n" + size(6) + b"secret"), [Command(b"AUTH", [], b"secret")])

    def test_auth_params(self) -> None:
        """AUTH takes no parameters, not even an empty one."""
        self.assertEqual(error_of(b"AUTH x\n"), b"E_INVALID AUTH invalid number of parameters")
        self.assertEqual(error_of(b"AUTH \n"), b"E_INVALID AUTH invalid number of parameters")

    def test_auth_sizes(self) -> None:
        """AUTH sizes are checked as IDENTIFY's."""
        self.assertEqual(error_of(b"AUTH\n" + size(0)), b"E_BAD_BODY AUTH invalid body size 0")
        self.assertEqual(error_of(b"AUTH\n" + size(5242881)), b"E_BAD_BODY AUTH body too big 5242881 > 5242880")


class HookTests(SynchronousTestCase):
    """early_check and precheck run once per body command, where Go checks state."""

    def setUp(self) -> None:
        self.calls: List[Tuple[str, bytes, List[bytes]]] = []

    def hook(self, label: str, refuse: Optional[bytes] = None) -> Any:
        def check(name: bytes, params: List[bytes]) -> None:
            self.calls.append((label, name, list(params)))
            if name == refuse:
                raise protocol_error("E_INVALID", "cannot %s in current state" % (name.decode(),))

        return check

    def test_called_once_per_body_command(self) -> None:
        """Both hooks run once for each body command, none for line commands."""
        parser = make_parser(precheck=self.hook("pre"), early_check=self.hook("early"))
        data = (
            b"NOP\n"
            + b"IDENTIFY\n"
            + size(2)
            + b"{}"
            + b"SUB t c\n"
            + pub(b"t", b"x")
            + pub(b"t 5", b"y", b"DPUB")
            + mpub(b"t", [b"a", b"b"])
            + b"AUTH\n"
            + size(1)
            + b"s"
        )
        feed_bytewise(parser, data)
        self.assertEqual(
            self.calls,
            [
                ("early", b"IDENTIFY", []),
                ("pre", b"IDENTIFY", []),
                ("early", b"PUB", [b"t"]),
                ("pre", b"PUB", [b"t"]),
                ("early", b"DPUB", [b"t", b"5"]),
                ("pre", b"DPUB", [b"t", b"5"]),
                ("early", b"MPUB", [b"t"]),
                ("pre", b"MPUB", [b"t"]),
                ("early", b"AUTH", []),
                ("pre", b"AUTH", []),
            ],
        )

    def test_whole_pubs(self) -> None:
        """Complete PUBs in one read (the fast path) run each hook once."""
        parser = make_parser(precheck=self.hook("pre"))
        parser.feed(pub(b"t", b"1") + pub(b"t", b"2") + pub(b"t", b"x" * 5000))
        self.assertEqual([c.body for c in drain(parser)], [b"1", b"2", b"x" * 5000])
        self.assertEqual(self.calls, [("pre", b"PUB", [b"t"])] * 3)

    def test_whole_pub_refused(self) -> None:
        """A precheck error on a complete PUB stops the parser."""
        parser = make_parser(precheck=self.hook("pre", refuse=b"PUB"))
        parser.feed(pub(b"t", b"1") + b"NOP\n")
        self.assertRaises(ProtocolError, parser.next_command)
        self.assertTrue(parser.dead)
        self.assertIsNone(parser.next_command())

    def test_whole_pub_bad_size_after_precheck(self) -> None:
        """For a complete PUB with a bad size, precheck still comes first."""
        parser = make_parser(precheck=self.hook("pre", refuse=b"PUB"))
        parser.feed(pub(b"t", b"1") + pub(b"t", b""))
        self.assertRaises(ProtocolError, parser.next_command)
        parser = make_parser(precheck=self.hook("pre"))
        parser.feed(pub(b"t", b"1") + b"PUB t\n" + size(0))
        self.assertEqual(parser.next_command(), Command(b"PUB", [b"t"], b"1"))
        with self.assertRaises(ProtocolError) as caught:
            parser.next_command()
        self.assertEqual(caught.exception.frame_data(), b"E_BAD_MESSAGE PUB invalid message body size 0")
        self.assertEqual(len(self.calls), 3)

    def test_precheck_before_size(self) -> None:
        """precheck's error comes as soon as the line is complete."""
        parser = make_parser(precheck=self.hook("pre", refuse=b"IDENTIFY"))
        parser.feed(b"IDENTIFY\n")
        with self.assertRaises(ProtocolError) as caught:
            parser.next_command()
        self.assertEqual(caught.exception.frame_data(), b"E_INVALID cannot IDENTIFY in current state")
        self.assertTrue(parser.dead)

    def test_precheck_after_line_checks(self) -> None:
        """Line errors win over precheck (MPUB: topic before auth)."""
        parser = make_parser(precheck=self.hook("pre", refuse=b"MPUB"))
        parser.feed(b"MPUB bad!\n")
        with self.assertRaises(ProtocolError) as caught:
            parser.next_command()
        self.assertEqual(caught.exception.code, "E_BAD_TOPIC")
        self.assertEqual(self.calls, [])

    def test_precheck_before_body_size_check(self) -> None:
        """precheck's error wins over a bad size that follows."""
        parser = make_parser(precheck=self.hook("pre", refuse=b"MPUB"))
        parser.feed(b"MPUB t\n" + size(0))
        with self.assertRaises(ProtocolError) as caught:
            parser.next_command()
        self.assertEqual(caught.exception.frame_data(), b"E_INVALID cannot MPUB in current state")

    def test_early_check_first(self) -> None:
        """early_check's error wins over the line checks (AUTH's state check)."""
        parser = make_parser(early_check=self.hook("early", refuse=b"AUTH"))
        parser.feed(b"AUTH x\n")
        with self.assertRaises(ProtocolError) as caught:
            parser.next_command()
        self.assertEqual(caught.exception.frame_data(), b"E_INVALID cannot AUTH in current state")

    def test_auth_precheck_before_params(self) -> None:
        """AUTH's precheck (Go's state check) comes before AUTH's parameter check."""
        parser = make_parser(precheck=self.hook("pre", refuse=b"AUTH"))
        parser.feed(b"AUTH x\n")
        with self.assertRaises(ProtocolError) as caught:
            parser.next_command()
        self.assertEqual(caught.exception.frame_data(), b"E_INVALID cannot AUTH in current state")
        self.assertEqual(self.calls, [("pre", b"AUTH", [b"x"])])
        self.assertTrue(parser.dead)

    def test_auth_params_after_passing_precheck(self) -> None:
        """An AUTH whose precheck passes still gets its parameter error."""
        parser = make_parser(precheck=self.hook("pre"))
        parser.feed(b"AUTH x\n")
        with self.assertRaises(ProtocolError) as caught:
            parser.next_command()
        self.assertEqual(caught.exception.frame_data(), b"E_INVALID AUTH invalid number of parameters")

    def holding_hook(self, held: bytes) -> Any:
        """A precheck that holds ``held`` commands."""

        def check(name: bytes, params: List[bytes]) -> Optional[bool]:
            self.calls.append(("pre", name, list(params)))
            if name == held:
                return False
            return None

        return check

    def test_precheck_holds_body(self) -> None:
        """A precheck returning False holds the command before its body; the next call reads on, without the hooks."""
        parser = make_parser(precheck=self.holding_hook(b"MPUB"))
        data = mpub(b"t", [b"a", b"b"]) + b"NOP\n"
        parser.feed(data)
        self.assertIsNone(parser.next_command())
        self.assertEqual(parser.buffered(), len(data) - len(b"MPUB t\n"))
        self.assertEqual(drain(parser), [Command(b"MPUB", [b"t"], [b"a", b"b"]), Command(b"NOP", [])])
        self.assertEqual(self.calls, [("pre", b"MPUB", [b"t"])])

    def test_held_body_errors_later(self) -> None:
        """A bad size after a held command is reported only when reading goes on."""
        parser = make_parser(precheck=self.holding_hook(b"MPUB"))
        parser.feed(b"MPUB t\n" + size(0))
        self.assertIsNone(parser.next_command())
        self.assertFalse(parser.dead)
        with self.assertRaises(ProtocolError) as caught:
            parser.next_command()
        self.assertEqual(caught.exception.frame_data(), b"E_BAD_BODY MPUB invalid body size 0")

    def test_precheck_holds_whole_pub(self) -> None:
        """A complete PUB (the fast path) can be held too, and comes out whole afterwards."""
        parser = make_parser(precheck=self.holding_hook(b"PUB"))
        parser.feed(pub(b"t", b"1") + pub(b"t", b"2"))
        self.assertIsNone(parser.next_command())
        self.assertEqual(parser.next_command(), Command(b"PUB", [b"t"], b"1"))
        self.assertIsNone(parser.next_command())
        self.assertEqual(parser.next_command(), Command(b"PUB", [b"t"], b"2"))
        self.assertEqual(len(self.calls), 2)

    def test_held_command_blocks_fin_run(self) -> None:
        """While a body command is held, FIN lines after it are not taken by next_fin_ids."""
        parser = make_parser(precheck=self.holding_hook(b"MPUB"))
        parser.feed(b"MPUB t\n")
        self.assertIsNone(parser.next_command())
        parser.feed(size(9) + size(1) + size(1) + b"a" + b"FIN " + ID + b"\n")
        self.assertEqual(parser.next_fin_ids(), [])
        self.assertEqual(parser.next_command(), Command(b"MPUB", [b"t"], [b"a"]))
        self.assertEqual(parser.next_fin_ids(), [ID])

    def test_hooks_see_state_changes(self) -> None:
        """Commands come one at a time, so a hook sees state set by the previous one."""
        state = {"subscribed": False}

        def precheck(name: bytes, params: List[bytes]) -> None:
            if name == b"IDENTIFY" and state["subscribed"]:
                raise protocol_error("E_INVALID", "cannot IDENTIFY in current state")

        parser = make_parser(precheck=precheck)
        parser.feed(b"SUB t c\nIDENTIFY\n" + size(2) + b"{}")
        command = parser.next_command()
        assert command is not None
        self.assertEqual(command.name, b"SUB")
        state["subscribed"] = True
        self.assertRaises(ProtocolError, parser.next_command)


class BytewiseTests(SynchronousTestCase):
    """Every command type fed one byte at a time comes out at its last byte."""

    COMMANDS = [
        (b"NOP\n", Command(b"NOP", [])),
        (b"SUB topic channel\n", Command(b"SUB", [b"topic", b"channel"])),
        (b"RDY 100\n", Command(b"RDY", [b"100"])),
        (b"FIN " + ID + b"\n", Command(b"FIN", [ID])),
        (b"REQ " + ID + b" 1000\r\n", Command(b"REQ", [ID, b"1000"])),
        (b"TOUCH " + ID + b"\n", Command(b"TOUCH", [ID])),
        (b"CLS\n", Command(b"CLS", [])),
        (b"IDENTIFY\n" + size(17) + b'{"client_id":"x"}', Command(b"IDENTIFY", [], b'{"client_id":"x"}')),
        (b"AUTH\n" + size(6) + b"secret", Command(b"AUTH", [], b"secret")),
        (pub(b"t", b"hello\nworld"), Command(b"PUB", [b"t"], b"hello\nworld")),
        (pub(b"t 250", b"later", b"DPUB"), Command(b"DPUB", [b"t", b"250"], b"later", 250)),
        (mpub(b"t", [b"a", b"bb\n", b"ccc"]), Command(b"MPUB", [b"t"], [b"a", b"bb\n", b"ccc"])),
        (b"FOO bar\n", Command(b"FOO", [b"bar"])),
    ]

    def test_each_command(self) -> None:
        """Each command alone, byte by byte."""
        for data, expected in self.COMMANDS:
            self.assertEqual(feed_bytewise(make_parser(), data), [(len(data) - 1, expected)], data)

    def test_all_commands_in_a_row(self) -> None:
        """All commands back to back, byte by byte."""
        data = b"".join(item[0] for item in self.COMMANDS)
        out = feed_bytewise(make_parser(), data)
        ends = []
        total = 0
        for item in self.COMMANDS:
            total += len(item[0])
            ends.append(total - 1)
        self.assertEqual(out, list(zip(ends, [item[1] for item in self.COMMANDS])))

    def test_same_as_whole(self) -> None:
        """Random read sizes give the same commands as one read."""
        data = b"".join(item[0] for item in self.COMMANDS) * 50
        whole = parse_all(data)
        rng = random.Random(5)
        for _ in range(20):
            parser = make_parser()
            out: List[Command] = []
            start = 0
            while start < len(data):
                step = rng.randint(1, 64)
                parser.feed(data[start : start + step])
                out.extend(drain(parser))
                start += step
            self.assertEqual(out, whole)


class StreamTests(SynchronousTestCase):
    """Long streams, buffer reuse and the dead state."""

    def test_many_commands(self) -> None:
        """A long stream (beyond the compaction threshold) parses fully."""
        data = b"".join(pub(b"t", b"%06d" % (i,)) + b"FIN " + ID + b"\n" for i in range(20000))
        parser = make_parser()
        count = 0
        for start in range(0, len(data), 8191):
            parser.feed(data[start : start + 8191])
            for command in drain(parser):
                if command.name == b"PUB":
                    self.assertEqual(command.body, b"%06d" % (count,))
                    count += 1
        self.assertEqual(count, 20000)
        self.assertEqual(parser.buffered(), 0)

    def test_buffered(self) -> None:
        """buffered() counts the bytes not yet returned as commands."""
        parser = make_parser()
        parser.feed(b"NOP\nPUB t\n" + size(5) + b"he")
        self.assertEqual(parser.buffered(), 16)
        parser.next_command()
        self.assertEqual(parser.buffered(), 12)
        self.assertIsNone(parser.next_command())
        # The line and size of the pending PUB are consumed already.
        self.assertEqual(parser.buffered(), 2)

    def test_dead_after_error(self) -> None:
        """After a ProtocolError the parser returns nothing more."""
        parser = make_parser()
        parser.feed(b"PUB\nNOP\n")
        self.assertRaises(ProtocolError, parser.next_command)
        self.assertTrue(parser.dead)
        self.assertIsNone(parser.next_command())
        parser.feed(b"NOP\n")
        self.assertIsNone(parser.next_command())
        self.assertEqual(parser.buffered(), 0)

    def test_not_dead(self) -> None:
        """A working parser is not dead."""
        parser = make_parser()
        parser.feed(b"NOP\n")
        drain(parser)
        self.assertFalse(parser.dead)


class EofErrorTests(SynchronousTestCase):
    """eof_error gives Go's text for a body command cut short."""

    def eof(self, data: bytes) -> Optional[bytes]:
        parser = make_parser()
        parser.feed(data)
        drain(parser)
        error = parser.eof_error()
        self.assertTrue(parser.dead)
        return None if error is None else error.frame_data()

    def test_nothing_pending(self) -> None:
        """No pending command, or a partial line: nothing to report."""
        self.assertIsNone(self.eof(b""))
        self.assertIsNone(self.eof(b"NOP\n"))
        self.assertIsNone(self.eof(b"PUB t"))

    def test_pub(self) -> None:
        """PUB and DPUB cut in the size or in the body."""
        self.assertEqual(self.eof(b"PUB t\n\x00\x00"), b"E_BAD_MESSAGE PUB failed to read message body size")
        self.assertEqual(self.eof(b"PUB t\n" + size(5) + b"he"), b"E_BAD_MESSAGE PUB failed to read message body")
        self.assertEqual(self.eof(b"DPUB t 1\n"), b"E_BAD_MESSAGE DPUB failed to read message body size")
        self.assertEqual(self.eof(b"DPUB t 1\n" + size(5)), b"E_BAD_MESSAGE DPUB failed to read message body")

    def test_identify_auth(self) -> None:
        """IDENTIFY and AUTH cut in the size or in the body."""
        self.assertEqual(self.eof(b"IDENTIFY\n"), b"E_BAD_BODY IDENTIFY failed to read body size")
        self.assertEqual(self.eof(b"IDENTIFY\n" + size(2) + b"{"), b"E_BAD_BODY IDENTIFY failed to read body")
        self.assertEqual(self.eof(b"AUTH\n\x00"), b"E_BAD_BODY AUTH failed to read body size")
        self.assertEqual(self.eof(b"AUTH\n" + size(2)), b"E_BAD_BODY AUTH failed to read body")

    def test_mpub(self) -> None:
        """MPUB cut at each of its reads."""
        self.assertEqual(self.eof(b"MPUB t\n"), b"E_BAD_BODY MPUB failed to read body size")
        self.assertEqual(self.eof(b"MPUB t\n" + size(20)), b"E_BAD_BODY MPUB failed to read message count")
        self.assertEqual(
            self.eof(b"MPUB t\n" + size(20) + size(2) + size(1) + b"a"),
            b"E_BAD_MESSAGE MPUB failed to read message(1) body size",
        )
        self.assertEqual(
            self.eof(b"MPUB t\n" + size(20) + size(2) + size(3) + b"a"),
            b"E_BAD_MESSAGE MPUB failed to read message body",
        )


class ParseBase10Tests(SynchronousTestCase):
    """parse_base10 is Go nsqd's ByteToBase10."""

    def test_digits(self) -> None:
        """Decimal digits parse; the empty string is 0."""
        self.assertEqual(parse_base10(b"0"), 0)
        self.assertEqual(parse_base10(b"0042"), 42)
        self.assertEqual(parse_base10(b""), 0)

    def test_non_digits(self) -> None:
        """Signs, spaces, letters and non-ASCII digits are refused."""
        for text in [b"-1", b"+1", b" 1", b"1 ", b"1a", b"abc", "\u0661".encode("utf-8"), b"\xb2"]:
            self.assertIsNone(parse_base10(text), text)

    def test_wraps(self) -> None:
        """Overflow wraps at 64 bits."""
        self.assertEqual(parse_base10(b"18446744073709551615"), 2**64 - 1)
        self.assertEqual(parse_base10(b"18446744073709551616"), 0)


class ParseSubTests(SynchronousTestCase):
    """parse_sub validates SUB's topic and channel."""

    def test_ok(self) -> None:
        """Valid names come back as str; extra parameters are ignored."""
        self.assertEqual(parse_sub([b"t", b"c"]), ("t", "c"))
        self.assertEqual(parse_sub([b"t#ephemeral", b"c#ephemeral", b"extra"]), ("t#ephemeral", "c#ephemeral"))

    def test_errors(self) -> None:
        """Go's texts, with the names Go-quoted."""
        cases = [
            ([b"t"], b"E_INVALID SUB insufficient number of parameters"),
            ([], b"E_INVALID SUB insufficient number of parameters"),
            ([b"bad!topic", b"c"], b'E_BAD_TOPIC SUB topic name "bad!topic" is not valid'),
            ([b"t", b"bad/channel"], b'E_BAD_CHANNEL SUB channel name "bad/channel" is not valid'),
            ([b"t", b"", b"c"], b'E_BAD_CHANNEL SUB channel name "" is not valid'),
            ([b"bad!", b"bad/"], b'E_BAD_TOPIC SUB topic name "bad!" is not valid'),
            ([b"t\x00", b"c"], b'E_BAD_TOPIC SUB topic name "t\\x00" is not valid'),
        ]
        for params, expected in cases:
            with self.assertRaises(ProtocolError) as caught:
                parse_sub(params)
            self.assertEqual(caught.exception.frame_data(), expected)
            self.assertTrue(caught.exception.fatal)


class ParseRdyTests(SynchronousTestCase):
    """parse_rdy reads RDY's count within 0..--max-rdy-count."""

    def assertRdyError(self, params: List[bytes], expected: bytes, max_rdy: int = 2500) -> None:
        with self.assertRaises(ProtocolError) as caught:
            parse_rdy(params, max_rdy)
        self.assertEqual(caught.exception.frame_data(), expected)

    def test_counts(self) -> None:
        """0 to the maximum are accepted; no count means 1; empty means 0."""
        self.assertEqual(parse_rdy([b"0"], 2500), 0)
        self.assertEqual(parse_rdy([b"2500"], 2500), 2500)
        self.assertEqual(parse_rdy([], 2500), 1)
        self.assertEqual(parse_rdy([b""], 2500), 0)
        self.assertEqual(parse_rdy([b"5", b"extra"], 2500), 5)

    def test_errors(self) -> None:
        """Go's texts for unparsable and out-of-range counts."""
        self.assertRdyError([b"2501"], b"E_INVALID RDY count 2501 out of range 0-2500")
        self.assertRdyError([b"11"], b"E_INVALID RDY count 11 out of range 0-10", 10)
        self.assertRdyError([b"abc"], b"E_INVALID RDY could not parse count abc")
        self.assertRdyError([b"-1"], b"E_INVALID RDY could not parse count -1")

    def test_overflow(self) -> None:
        """Go's uint64-to-int64 conversion: 2**64-1 is -1, 2**64 wraps to 0."""
        self.assertRdyError([b"18446744073709551615"], b"E_INVALID RDY count -1 out of range 0-2500")
        self.assertEqual(parse_rdy([b"18446744073709551616"], 2500), 0)


class ParseIdTests(SynchronousTestCase):
    """parse_fin, parse_touch and parse_req read 16-byte message ids."""

    def assertIdError(self, call: Any, expected: bytes) -> None:
        with self.assertRaises(ProtocolError) as caught:
            call()
        self.assertEqual(caught.exception.frame_data(), expected)
        self.assertTrue(caught.exception.fatal)

    def test_fin_touch(self) -> None:
        """FIN and TOUCH return the id."""
        self.assertEqual(parse_fin([ID]), ID)
        self.assertEqual(parse_touch([ID, b"extra"]), ID)

    def test_fin_touch_errors(self) -> None:
        """A missing id or one that is not 16 bytes is refused."""
        self.assertIdError(lambda: parse_fin([]), b"E_INVALID FIN insufficient number of params")
        self.assertIdError(lambda: parse_touch([]), b"E_INVALID TOUCH insufficient number of params")
        self.assertIdError(lambda: parse_fin([b"1234"]), b"E_INVALID invalid message ID")
        self.assertIdError(lambda: parse_touch([ID + b"0"]), b"E_INVALID invalid message ID")

    def test_req(self) -> None:
        """REQ returns the id and the timeout in ms."""
        self.assertEqual(parse_req([ID, b"0"], 3600000), (ID, 0))
        self.assertEqual(parse_req([ID, b"1500"], 3600000), (ID, 1500))
        self.assertEqual(parse_req([ID, b""], 3600000), (ID, 0))

    def test_req_clamped(self) -> None:
        """Timeouts above the maximum are clamped silently (also after overflow)."""
        self.assertEqual(parse_req([ID, b"3600001"], 3600000), (ID, 3600000))
        self.assertEqual(parse_req([ID, b"99999999"], 3600000), (ID, 3600000))
        self.assertEqual(parse_req([ID, b"18446744073709551615"], 3600000), (ID, 0))

    def test_req_errors(self) -> None:
        """Go's texts, in Go's order: params, id, timeout."""
        self.assertIdError(lambda: parse_req([ID], 3600000), b"E_INVALID REQ insufficient number of params")
        self.assertIdError(lambda: parse_req([b"12", b"soon"], 3600000), b"E_INVALID invalid message ID")
        self.assertIdError(lambda: parse_req([ID, b"soon"], 3600000), b"E_INVALID REQ could not parse timeout soon")
        self.assertIdError(lambda: parse_req([ID, b"-1"], 3600000), b"E_INVALID REQ could not parse timeout -1")


# ---------------------------------------------------------------------------
# The recorded cases


class CodecServer:
    """
    The codec's half of an nsqd connection, every state check passing:
    what a V2 server built on this package answers, for the recorded cases
    whose replies depend only on parsing.
    """

    def __init__(self, options: NSQDOptions) -> None:
        self.options = options
        self.parser = V2CommandParser(
            options.max_msg_size,
            options.max_body_size,
            int(options.max_req_timeout * 1000),
        )
        self.magic = b""
        self.frames: List[Tuple[int, bytes]] = []
        self.closed = False

    def receive(self, data: bytes) -> None:
        if self.closed:
            return
        if len(self.magic) < 4:
            needed = 4 - len(self.magic)
            self.magic += data[:needed]
            data = data[needed:]
            assert self.magic[: len(self.magic)] == b"  V2"[: len(self.magic)]
        self.parser.feed(data)
        while not self.closed:
            try:
                command = self.parser.next_command()
                if command is None:
                    return
                self.handle(command)
            except ProtocolError as error:
                self.frames.append((1, error.frame_data()))
                self.closed = error.fatal
            except LineTooLong:
                self.closed = True

    def handle(self, command: Command) -> None:
        name = command.name
        options = self.options
        if name in (b"PUB", b"MPUB", b"DPUB"):
            self.frames.append((0, b"OK"))
        elif name == b"IDENTIFY":
            assert isinstance(command.body, bytes)
            identity = negotiate_identify(command.body, options)
            if identity.feature_negotiation:
                self.frames.append((0, identify_response(identity, options, "1.3.0")))
            else:
                self.frames.append((0, b"OK"))
        elif name == b"SUB":
            parse_sub(command.params)
            self.frames.append((0, b"OK"))
        elif name == b"RDY":
            parse_rdy(command.params, options.max_rdy_count)
        elif name == b"FIN":
            parse_fin(command.params)
        elif name == b"REQ":
            parse_req(command.params, int(options.max_req_timeout * 1000))
        elif name == b"TOUCH":
            parse_touch(command.params)
        elif name != b"NOP":
            raise protocol_error("E_INVALID", b"invalid command " + name)


#: Recorded cases of one connection whose every reply comes from parsing
#: (and IDENTIFY negotiation), not from broker state.
PARSE_CASES = [
    "magic_then_silence",
    "identify_feature_negotiation",
    "identify_feature_negotiation_custom_values",
    "identify_output_buffer_disabled",
    "identify_output_buffer_timeout_disabled",
    "identify_no_feature_negotiation",
    "identify_empty_object",
    "identify_unknown_fields_ignored",
    "identify_twice",
    "identify_heartbeat_100",
    "identify_heartbeat_999",
    "identify_heartbeat_60000",
    "identify_heartbeat_60001",
    "identify_heartbeat_minus2",
    "identify_output_buffer_size_10",
    "identify_output_buffer_size_65537",
    "identify_output_buffer_timeout_1",
    "identify_output_buffer_timeout_and_size_both_bad",
    "identify_sample_rate_100",
    "identify_sample_rate_minus1",
    "identify_msg_timeout_500",
    "identify_msg_timeout_900001",
    "identify_invalid_json",
    "identify_wrong_type",
    "identify_body_too_big",
    "identify_body_size_zero",
    "identify_body_size_negative",
    "identify_snappy_and_deflate",
    "identify_snappy_and_deflate_without_negotiation",
    "identify_tls_v1_without_tls_configured",
    "auth_with_params",
    "sub_ok",
    "sub_bad_topic",
    "sub_bad_channel",
    "sub_topic_name_65_chars",
    "sub_topic_name_64_chars",
    "sub_double_space",
    "sub_ephemeral",
    "sub_ephemeral_suffix_only_at_end",
    "sub_insufficient_params",
    "sub_extra_params",
    "pub_ok",
    "pub_bad_topic",
    "pub_empty_body",
    "pub_negative_size",
    "pub_too_big",
    "pub_exactly_max_msg_size",
    "pub_size_above_max_body_size",
    "pub_insufficient_params",
    "mpub_ok_3",
    "mpub_zero_messages",
    "mpub_count_less_than_body",
    "mpub_count_more_than_body",
    "mpub_message_too_big",
    "mpub_message_size_zero",
    "mpub_bad_topic",
    "mpub_body_too_big",
    "mpub_body_size_zero",
    "mpub_count_too_large",
    "mpub_insufficient_params",
    "dpub_negative",
    "dpub_too_large",
    "dpub_max",
    "dpub_zero",
    "dpub_non_numeric",
    "dpub_insufficient_params",
    "dpub_too_big",
    "rdy_0",
    "rdy_2500",
    "rdy_2501",
    "rdy_non_numeric",
    "rdy_negative",
    "rdy_custom_max",
    "fin_invalid_id",
    "fin_insufficient_params",
    "req_non_numeric_timeout",
    "req_negative_timeout",
    "req_insufficient_params",
    "invalid_command",
    "lowercase_command",
    "empty_line",
    "trailing_crlf",
    "nop",
    "pipelined_commands",
    "long_line_without_newline",
]

_FLAG_ATTRIBUTES = {"--max-msg-size": "max_msg_size", "--max-rdy-count": "max_rdy_count"}


def _pairs_to_keys(pairs: List[Tuple[str, Any]]) -> List[str]:
    return [key for key, _ in pairs]


class RecordedCaseTests(SynchronousTestCase):
    """The recorded Go nsqd replies that parsing alone decides come out byte for byte."""

    def options_for(self, case: Dict[str, Any]) -> NSQDOptions:
        options = NSQDOptions()
        for flag in case.get("nsqd_flags", []):
            name, value = flag.split("=", 1)
            setattr(options, _FLAG_ATTRIBUTES[name], int(value))
        return options

    def check_frame(self, case: str, got: Tuple[int, bytes], expected: Dict[str, Any]) -> None:
        self.assertEqual(got[0], expected["type"], case)
        if "json" in expected:
            document = json.loads(got[1])
            want = dict(expected["json"])
            want["version"] = "1.3.0"
            self.assertEqual(document, want, case)
            self.assertEqual(_pairs_to_keys(json.loads(got[1], object_pairs_hook=list)), list(expected["json"]), case)
            for key, kind in expected["shape"].items():
                value = document[key]
                actual = {bool: "bool", int: "int", str: "string"}[type(value)]
                self.assertEqual(actual, kind, (case, key))
        else:
            self.assertEqual(got[1], unescape(expected["data"]), case)
            self.assertEqual(len(got[1]) + 4, expected["size"], case)

    def replay(self, case: Dict[str, Any]) -> None:
        server = CodecServer(self.options_for(case))
        name = case["name"]
        for step in case["steps"]:
            if "connect" in step:
                self.assertEqual(step["connect"], "c1", name)
                continue
            self.assertEqual(step.get("conn"), "c1", name)
            if "send" in step:
                server.receive(send_bytes(step["send"]))
            elif "expect_frames" in step:
                for expected in step["expect_frames"]:
                    self.assertTrue(server.frames, "%s: missing %r" % (name, expected))
                    self.check_frame(name, server.frames.pop(0), expected)
                self.assertEqual(server.frames, [], name)
            elif step.get("expect_close"):
                self.assertTrue(server.closed, name)
                self.assertEqual(server.frames, [], name)
            elif "expect_nothing_ms" in step:
                self.assertEqual(server.frames, [], name)
                self.assertFalse(server.closed, name)
            else:
                raise AssertionError("%s: unexpected step %r" % (name, step))

    def test_cases(self) -> None:
        """Every listed case replays with the recorded frames and closes."""
        cases = {case["name"]: case for case in load_fixture("tcp_v2.json")["cases"]}
        for name in PARSE_CASES:
            self.replay(cases[name])

    def test_cases_bytewise(self) -> None:
        """The same cases with each send split into single bytes."""
        cases = {case["name"]: case for case in load_fixture("tcp_v2.json")["cases"]}
        for name in PARSE_CASES:
            case = dict(cases[name])
            steps = []
            for step in case["steps"]:
                if "send" in step:
                    data = send_bytes(step["send"])
                    for index in range(len(data)):
                        steps.append({"conn": step["conn"], "send": "\\x%02x" % (data[index],)})
                else:
                    steps.append(step)
            case["steps"] = steps
            self.replay(case)
