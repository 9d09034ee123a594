"""
Tests for txnsq.protocol.lookup_v1: nsqlookupd's V1 codec, both the
server half (commands from producers) and the client half (what nsqd
sends and the replies it reads).
"""

from __future__ import annotations

import json
import struct
from typing import Any, Dict, List, Optional

from twisted.trial.unittest import SynchronousTestCase

from txnsq.protocol.errors import ProtocolError
from txnsq.protocol.lookup_v1 import (
    MAGIC_V1,
    MAX_IDENTIFY_BODY,
    MAX_LINE,
    PING,
    LookupCommand,
    PeerInfo,
    V1CommandParser,
    V1ResponseParser,
    encode_identify,
    encode_register,
    encode_response,
    encode_unregister,
    identify_reply,
    parse_peer_info,
    topic_and_channel,
    trim_space,
)

BODY = (
    b'{"broadcast_address":"127.0.0.1","hostname":"producer-host",'
    b'"tcp_port":14150,"http_port":14151,"version":"1.3.0"}'
)


def sized(body: bytes) -> bytes:
    """A body with its 4-byte big-endian size, built independently."""
    return struct.pack(">l", len(body)) + body


def commands(parser: V1CommandParser) -> List[LookupCommand]:
    """Every complete command the parser holds."""
    found: List[LookupCommand] = []
    while True:
        command = parser.next_command()
        if command is None:
            return found
        found.append(command)


class CommandParserTests(SynchronousTestCase):
    """V1CommandParser frames what a producer sends after the magic."""

    def test_magic(self) -> None:
        """The magic is two spaces and V1."""
        self.assertEqual(MAGIC_V1, b"  V1")

    def test_lines(self) -> None:
        """Each line is a command name and its space-separated parameters."""
        parser = V1CommandParser()
        parser.feed(b"PING\nREGISTER t c\nUNREGISTER t\n")
        found = commands(parser)
        self.assertEqual(
            [(c.name, c.params, c.body) for c in found],
            [(b"PING", [], None), (b"REGISTER", [b"t", b"c"], None), (b"UNREGISTER", [b"t"], None)],
        )

    def test_partial_line(self) -> None:
        """A line fed in pieces is a command once its newline arrives."""
        parser = V1CommandParser()
        for piece in (b"REG", b"ISTER t", b" c"):
            parser.feed(piece)
            self.assertIsNone(parser.next_command())
        parser.feed(b"\n")
        command = parser.next_command()
        assert command is not None
        self.assertEqual((command.name, command.params), (b"REGISTER", [b"t", b"c"]))

    def test_byte_by_byte(self) -> None:
        """Commands fed one byte at a time come out whole and in order."""
        parser = V1CommandParser()
        found: List[LookupCommand] = []
        for byte in b"PING\nIDENTIFY\n" + sized(BODY) + b"REGISTER t\n":
            parser.feed(bytes([byte]))
            found.extend(commands(parser))
        self.assertEqual([c.name for c in found], [b"PING", b"IDENTIFY", b"REGISTER"])
        self.assertEqual(found[1].body, BODY)

    def test_whitespace_trimmed(self) -> None:
        """Lines are trimmed as strings.TrimSpace does: '  PING \\r\\n' is PING."""
        parser = V1CommandParser()
        parser.feed(b"  PING \r\nPING\t\n\x0bREGISTER t c\x0c\n")
        self.assertEqual(
            [(c.name, c.params) for c in commands(parser)],
            [(b"PING", []), (b"PING", []), (b"REGISTER", [b"t", b"c"])],
        )

    def test_single_space_split(self) -> None:
        """Parameters are split on single spaces: two spaces make an empty one."""
        parser = V1CommandParser()
        parser.feed(b"REGISTER  t\n")
        command = parser.next_command()
        assert command is not None
        self.assertEqual(command.params, [b"", b"t"])

    def test_empty_line(self) -> None:
        """An empty line is a command with an empty name."""
        parser = V1CommandParser()
        parser.feed(b"\n")
        command = parser.next_command()
        assert command is not None
        self.assertEqual((command.name, command.params), (b"", []))

    def test_identify_body(self) -> None:
        """IDENTIFY carries the size-prefixed body that follows its line."""
        parser = V1CommandParser()
        parser.feed(b"IDENTIFY\n" + sized(BODY) + b"PING\n")
        found = commands(parser)
        self.assertEqual([(c.name, c.body) for c in found], [(b"IDENTIFY", BODY), (b"PING", None)])

    def test_identify_params_ignored(self) -> None:
        """Words after IDENTIFY do not stop its body from being read."""
        parser = V1CommandParser()
        parser.feed(b"IDENTIFY x y\n" + sized(b"{}"))
        command = parser.next_command()
        assert command is not None
        self.assertEqual((command.params, command.body), ([b"x", b"y"], b"{}"))

    def test_identify_body_split(self) -> None:
        """An IDENTIFY body split across feeds is awaited, and expects_body says so."""
        parser = V1CommandParser()
        data = b"IDENTIFY\n" + sized(BODY)
        parser.feed(data[:9])
        self.assertFalse(parser.expects_body())
        self.assertIsNone(parser.next_command())
        self.assertTrue(parser.expects_body())
        parser.feed(data[9:11])
        self.assertIsNone(parser.next_command())
        parser.feed(data[11:40])
        self.assertIsNone(parser.next_command())
        self.assertTrue(parser.expects_body())
        parser.feed(data[40:])
        command = parser.next_command()
        assert command is not None
        self.assertEqual(command.body, BODY)
        self.assertFalse(parser.expects_body())

    def test_empty_identify_body(self) -> None:
        """A zero size gives an empty body (refused later, as JSON)."""
        parser = V1CommandParser()
        parser.feed(b"IDENTIFY\n\x00\x00\x00\x00")
        command = parser.next_command()
        assert command is not None
        self.assertEqual(command.body, b"")

    def test_negative_body_size(self) -> None:
        """A negative IDENTIFY size is a fatal E_BAD_BODY (Go panics instead)."""
        parser = V1CommandParser()
        parser.feed(b"IDENTIFY\n\xff\xff\xff\xff")
        with self.assertRaises(ProtocolError) as caught:
            parser.next_command()
        self.assertEqual(caught.exception.frame_data(), b"E_BAD_BODY IDENTIFY failed to read body size")
        self.assertTrue(caught.exception.fatal)
        self.assertTrue(parser.expects_body())

    def test_body_too_big(self) -> None:
        """A size above MAX_IDENTIFY_BODY is refused before any body is buffered."""
        parser = V1CommandParser()
        parser.feed(b"IDENTIFY\n" + struct.pack(">l", MAX_IDENTIFY_BODY + 1))
        with self.assertRaises(ProtocolError) as caught:
            parser.next_command()
        self.assertEqual(caught.exception.code, "E_BAD_BODY")

    def test_body_at_limit(self) -> None:
        """A body of exactly MAX_IDENTIFY_BODY bytes is read."""
        parser = V1CommandParser()
        parser.feed(b"IDENTIFY\n" + sized(b" " * MAX_IDENTIFY_BODY))
        command = parser.next_command()
        assert command is not None
        self.assertEqual(len(command.body or b""), MAX_IDENTIFY_BODY)

    def test_line_too_long(self) -> None:
        """More than MAX_LINE bytes without a newline is a fatal E_INVALID."""
        parser = V1CommandParser()
        parser.feed(b"x" * MAX_LINE)
        self.assertIsNone(parser.next_command())
        parser.feed(b"x")
        with self.assertRaises(ProtocolError) as caught:
            parser.next_command()
        self.assertEqual(caught.exception.code, "E_INVALID")

    def test_long_line_with_newline(self) -> None:
        """A long line whose newline arrived with it is still a command."""
        parser = V1CommandParser()
        parser.feed(b"REGISTER " + b"t" * (MAX_LINE + 10) + b"\n")
        command = parser.next_command()
        assert command is not None
        self.assertEqual(len(command.params[0]), MAX_LINE + 10)


class TrimSpaceTests(SynchronousTestCase):
    """trim_space is Go's strings.TrimSpace on bytes."""

    def test_ascii(self) -> None:
        """ASCII white space goes from both ends, and only from the ends."""
        self.assertEqual(trim_space(b" \t\r\n\x0b\x0cA B \r\n"), b"A B")

    def test_unicode_spaces(self) -> None:
        """UTF-8 encoded Unicode spaces (NBSP, NEL, U+3000) are trimmed too."""
        self.assertEqual(trim_space(b"\xc2\xa0PING\xc2\x85\xe3\x80\x80"), b"PING")

    def test_invalid_utf8_kept(self) -> None:
        """A lone NBSP byte (invalid UTF-8) is not white space."""
        self.assertEqual(trim_space(b"\xa0PING\xa0"), b"\xa0PING\xa0")

    def test_not_go_space(self) -> None:
        """U+001C..U+001F, white space to Python, are not to Go."""
        self.assertEqual(trim_space(b"\x1cPING\x1f"), b"\x1cPING\x1f")

    def test_all_space(self) -> None:
        """A line of white space trims to nothing."""
        self.assertEqual(trim_space(b" \xc2\xa0 "), b"")


class TopicAndChannelTests(SynchronousTestCase):
    """topic_and_channel checks REGISTER/UNREGISTER parameters as Go's getTopicChan."""

    def test_topic(self) -> None:
        """A topic alone gives an empty channel."""
        self.assertEqual(topic_and_channel("REGISTER", [b"t"]), ("t", ""))

    def test_topic_channel(self) -> None:
        """Topic and channel; further parameters are ignored."""
        self.assertEqual(
            topic_and_channel("REGISTER", [b"t", b"c#ephemeral", b"extra"]), ("t", "c#ephemeral")
        )

    def test_no_params(self) -> None:
        """No parameter: fatal E_INVALID naming the command."""
        with self.assertRaises(ProtocolError) as caught:
            topic_and_channel("UNREGISTER", [])
        self.assertEqual(
            caught.exception.frame_data(), b"E_INVALID UNREGISTER insufficient number of params"
        )

    def test_bad_topic(self) -> None:
        """An invalid topic is E_BAD_TOPIC, quoted with single quotes."""
        with self.assertRaises(ProtocolError) as caught:
            topic_and_channel("REGISTER", [b"bad!topic"])
        self.assertEqual(
            caught.exception.frame_data(),
            b"E_BAD_TOPIC REGISTER topic name 'bad!topic' is not valid",
        )

    def test_empty_topic(self) -> None:
        """An empty topic (two spaces) is invalid."""
        with self.assertRaises(ProtocolError) as caught:
            topic_and_channel("REGISTER", [b"", b"t"])
        self.assertEqual(
            caught.exception.frame_data(), b"E_BAD_TOPIC REGISTER topic name '' is not valid"
        )

    def test_bad_channel(self) -> None:
        """An invalid channel is E_BAD_CHANNEL."""
        with self.assertRaises(ProtocolError) as caught:
            topic_and_channel("UNREGISTER", [b"t", b"bad!chan"])
        self.assertEqual(
            caught.exception.frame_data(),
            b"E_BAD_CHANNEL UNREGISTER channel name 'bad!chan' is not valid",
        )

    def test_raw_bytes_kept(self) -> None:
        """A name that is not UTF-8 is echoed byte for byte."""
        with self.assertRaises(ProtocolError) as caught:
            topic_and_channel("REGISTER", [b"\xff"])
        self.assertEqual(
            caught.exception.frame_data(), b"E_BAD_TOPIC REGISTER topic name '\xff' is not valid"
        )

    def test_name_length(self) -> None:
        """64 characters are a valid name, 65 are not."""
        self.assertEqual(topic_and_channel("REGISTER", [b"t" * 64]), ("t" * 64, ""))
        self.assertRaises(ProtocolError, topic_and_channel, "REGISTER", [b"t" * 65])


class PeerInfoTests(SynchronousTestCase):
    """parse_peer_info decodes IDENTIFY bodies as Go's json.Unmarshal into PeerInfo."""

    def parse(self, body: bytes) -> PeerInfo:
        return parse_peer_info(body, "127.0.0.1:5000", 12.5)

    def assertBadBody(self, body: bytes, text: str = "IDENTIFY failed to decode JSON body") -> None:
        with self.assertRaises(ProtocolError) as caught:
            self.parse(body)
        self.assertEqual(caught.exception.frame_data(), b"E_BAD_BODY " + text.encode())
        self.assertTrue(caught.exception.fatal)

    def body(self, **fields: object) -> bytes:
        document = {
            "broadcast_address": "127.0.0.1",
            "tcp_port": 14150,
            "http_port": 14151,
            "version": "1.3.0",
        }
        document.update(fields)
        return json.dumps({k: v for k, v in document.items() if v is not Ellipsis}).encode()

    def test_fields(self) -> None:
        """Every field is read; id and remote address come from the connection."""
        peer = self.parse(BODY)
        self.assertEqual(
            (peer.id, peer.remote_address, peer.hostname, peer.broadcast_address),
            ("127.0.0.1:5000", "127.0.0.1:5000", "producer-host", "127.0.0.1"),
        )
        self.assertEqual((peer.tcp_port, peer.http_port, peer.version), (14150, 14151, "1.3.0"))
        self.assertEqual(peer.last_update, 12.5)

    def test_remote_address_not_from_body(self) -> None:
        """A remote_address in the body is overridden by the connection's."""
        peer = self.parse(self.body(remote_address="10.0.0.1:1"))
        self.assertEqual(peer.remote_address, "127.0.0.1:5000")

    def test_hostname_optional(self) -> None:
        """hostname may be missing."""
        self.assertEqual(self.parse(self.body()).hostname, "")

    def test_missing_fields(self) -> None:
        """Each of broadcast_address, tcp_port, http_port, version is required."""
        for name in ("broadcast_address", "tcp_port", "http_port", "version"):
            self.assertBadBody(self.body(**{name: ...}), "IDENTIFY missing fields")

    def test_zero_values_missing(self) -> None:
        """Zero ports and empty strings count as missing, as in Go."""
        self.assertBadBody(self.body(tcp_port=0), "IDENTIFY missing fields")
        self.assertBadBody(self.body(version=""), "IDENTIFY missing fields")

    def test_null_document(self) -> None:
        """A null body decodes to nothing, then misses fields."""
        self.assertBadBody(b"null", "IDENTIFY missing fields")

    def test_not_json(self) -> None:
        """Bodies that are not JSON are refused."""
        for body in (b"{nope", b"", b"{} x", b"NaN", b'{"tcp_port":Infinity}', b"\xef\xbb\xbf{}"):
            self.assertBadBody(body)

    def test_not_an_object(self) -> None:
        """Arrays, strings and numbers cannot be decoded into PeerInfo."""
        for body in (b"[]", b'[["broadcast_address","x"]]', b'"x"', b"1", b"true"):
            self.assertBadBody(body)

    def test_type_errors(self) -> None:
        """A field of the wrong JSON type is refused."""
        cases: List[Dict[str, Any]] = [
            {"tcp_port": "14150"},
            {"tcp_port": 1.0},
            {"tcp_port": 1e3},
            {"tcp_port": True},
            {"tcp_port": 1 << 63},
            {"version": 1},
            {"hostname": ["h"]},
            {"broadcast_address": {}},
        ]
        for fields in cases:
            self.assertBadBody(self.body(**fields))

    def test_int64_range(self) -> None:
        """Ports are Go ints: any int64 is taken, negative ones too."""
        self.assertEqual(self.parse(self.body(tcp_port=-1)).tcp_port, -1)
        self.assertEqual(self.parse(self.body(http_port=(1 << 63) - 1)).http_port, (1 << 63) - 1)

    def test_null_ignored(self) -> None:
        """null leaves a field as it was, even after a value."""
        body = BODY[:-1] + b',"tcp_port":null,"hostname":null}'
        peer = self.parse(body)
        self.assertEqual((peer.tcp_port, peer.hostname), (14150, "producer-host"))

    def test_unknown_keys_ignored(self) -> None:
        """Unknown keys, whatever their value, are ignored."""
        peer = self.parse(self.body(extra={"a": [1, None]}, other=None))
        self.assertEqual(peer.tcp_port, 14150)

    def test_case_insensitive_keys(self) -> None:
        """Keys match fields case-insensitively."""
        body = b'{"Broadcast_Address":"a","TCP_PORT":1,"Http_Port":2,"VERSION":"v","hostName":"h"}'
        peer = self.parse(body)
        self.assertEqual(
            (peer.broadcast_address, peer.tcp_port, peer.http_port, peer.version, peer.hostname),
            ("a", 1, 2, "v", "h"),
        )

    def test_go_unicode_folding(self) -> None:
        """LONG S folds onto s (as in Go); sharp s does not fold onto ss."""
        body = self.body(broadcast_address=...)
        document = json.loads(body)
        document["broadcaſt_address"] = "folded"
        self.assertEqual(self.parse(json.dumps(document).encode()).broadcast_address, "folded")
        document = json.loads(body)
        document["broadcaßt_address"] = "x"
        self.assertBadBody(json.dumps(document).encode(), "IDENTIFY missing fields")

    def test_last_key_wins(self) -> None:
        """Of repeated keys (in any case) the last value is kept."""
        peer = self.parse(BODY[:-1] + b',"TCP_PORT":2,"tcp_port":3,"Tcp_Port":4}')
        self.assertEqual(peer.tcp_port, 4)

    def test_invalid_utf8_replaced(self) -> None:
        """Invalid UTF-8 in a string becomes U+FFFD, one per bad byte."""
        peer = self.parse(BODY.replace(b"producer-host", b"h\xff\xe2\x82x"))
        self.assertEqual(peer.hostname, "h\ufffd\ufffd\ufffdx")

    def test_lone_surrogate_escape(self) -> None:
        """An escaped lone surrogate decodes to U+FFFD, a pair to its character."""
        peer = self.parse(BODY.replace(b"producer-host", b"\\ud800-\\ud83d\\ude00"))
        self.assertEqual(peer.hostname, "\ufffd-\U0001f600")

    def test_to_json(self) -> None:
        """to_json gives Go's PeerInfo fields in order."""
        self.assertEqual(
            list(self.parse(BODY).to_json()),
            ["remote_address", "hostname", "broadcast_address", "tcp_port", "http_port", "version"],
        )


class ServerEncodingTests(SynchronousTestCase):
    """Replies from nsqlookupd: size-prefixed data without a frame type."""

    def test_encode_response(self) -> None:
        """A reply is a 4-byte big-endian size and the data."""
        self.assertEqual(encode_response(b"OK"), b"\x00\x00\x00\x02OK")
        self.assertEqual(encode_response(b""), b"\x00\x00\x00\x00")

    def test_identify_reply(self) -> None:
        """The IDENTIFY reply is Go's map: keys sorted, compact."""
        self.assertEqual(
            identify_reply("lookup-host", "os-host", 4160, 4161, "1.3.0"),
            b'{"broadcast_address":"lookup-host","hostname":"os-host",'
            b'"http_port":4161,"tcp_port":4160,"version":"1.3.0"}',
        )


class ClientEncodingTests(SynchronousTestCase):
    """What nsqd sends to nsqlookupd."""

    def test_ping(self) -> None:
        """PING is one line."""
        self.assertEqual(PING, b"PING\n")

    def test_register(self) -> None:
        """REGISTER with a topic, and with a topic and channel."""
        self.assertEqual(encode_register("t"), b"REGISTER t\n")
        self.assertEqual(encode_register("t", "c"), b"REGISTER t c\n")

    def test_unregister(self) -> None:
        """UNREGISTER with a topic, and with a topic and channel."""
        self.assertEqual(encode_unregister("t"), b"UNREGISTER t\n")
        self.assertEqual(encode_unregister("t", "c#ephemeral"), b"UNREGISTER t c#ephemeral\n")

    def test_identify(self) -> None:
        """IDENTIFY carries a size-prefixed JSON body with sorted keys."""
        data = encode_identify({"version": "1.3.0", "tcp_port": 4150, "broadcast_address": "h"})
        body = b'{"broadcast_address":"h","tcp_port":4150,"version":"1.3.0"}'
        self.assertEqual(data, b"IDENTIFY\n" + sized(body))

    def test_round_trip(self) -> None:
        """What the client half encodes, the server half parses."""
        parser = V1CommandParser()
        info = {
            "broadcast_address": "h",
            "hostname": "h",
            "tcp_port": 4150,
            "http_port": 4151,
            "version": "1.3.0",
        }
        parser.feed(encode_identify(info) + encode_register("t", "c") + PING)
        found = commands(parser)
        self.assertEqual([c.name for c in found], [b"IDENTIFY", b"REGISTER", b"PING"])
        peer = parse_peer_info(found[0].body or b"", "1.2.3.4:5", 0.0)
        self.assertEqual((peer.tcp_port, peer.version), (4150, "1.3.0"))


class ResponseParserTests(SynchronousTestCase):
    """V1ResponseParser splits nsqlookupd's replies."""

    def responses(self, parser: V1ResponseParser) -> List[bytes]:
        found: List[bytes] = []
        while True:
            response: Optional[bytes] = parser.next_response()
            if response is None:
                return found
            found.append(response)

    def test_replies(self) -> None:
        """Several replies in one feed come out in order."""
        parser = V1ResponseParser()
        parser.feed(encode_response(b"OK") + encode_response(b"{}") + encode_response(b""))
        self.assertEqual(self.responses(parser), [b"OK", b"{}", b""])

    def test_partial(self) -> None:
        """A reply fed byte by byte comes out once complete."""
        parser = V1ResponseParser()
        data = encode_response(b"E_INVALID client must IDENTIFY")
        for byte in data[:-1]:
            parser.feed(bytes([byte]))
            self.assertIsNone(parser.next_response())
        parser.feed(data[-1:])
        self.assertEqual(parser.next_response(), b"E_INVALID client must IDENTIFY")

    def test_too_big(self) -> None:
        """A reply claiming more than max_size bytes is refused."""
        parser = V1ResponseParser(max_size=10)
        parser.feed(struct.pack(">L", 11))
        self.assertRaises(ProtocolError, parser.next_response)

    def test_huge_size_unsigned(self) -> None:
        """The size is unsigned: 0xffffffff is a (too) big reply, not -1."""
        parser = V1ResponseParser()
        parser.feed(b"\xff\xff\xff\xff")
        self.assertRaises(ProtocolError, parser.next_response)
