"""
Tests for :mod:`txnsq.protocol.nats_route`: the NATS cluster (route)
protocol codec, with the byte forms real nats-server sends.
"""

from __future__ import annotations

from twisted.trial.unittest import SynchronousTestCase

from txnsq.protocol.nats_route import (
    ERR_MAX_CONTROL_LINE,
    ERR_MAX_PAYLOAD,
    ERR_UNKNOWN_OP,
    MAX_CONTROL_LINE_SIZE,
    Connect,
    Err,
    Info,
    Ok,
    Ping,
    Pong,
    RouteMessage,
    RouteMessages,
    RouteParser,
    RouteProtocolError,
    RouteSub,
    RouteUnsub,
    cluster_name_error,
    encode_connect,
    encode_err,
    encode_hmsg_head,
    encode_info,
    encode_rmsg_head,
    encode_rs_minus,
    encode_rs_plus,
    headers_of,
)

# What nats-server 2.10.26 sent on accepting a route (trimmed INFO).
SERVER_INFO = (
    b'INFO {"server_id":"NDHG","server_name":"NDHG","version":"2.10.26","proto":2,'
    b'"host":"127.0.0.1","port":59949,"headers":true,"max_payload":1048576,'
    b'"cluster":"c1","connect_urls":["127.0.0.1:48089"]} \r\n'
)


class RouteParserTests(SynchronousTestCase):
    """RouteParser turns route bytes into operations."""

    def test_info_with_trailing_space(self) -> None:
        """nats-server's INFO (a space before CRLF) parses to its JSON fields."""
        (op,) = RouteParser().feed(SERVER_INFO)
        self.assertIsInstance(op, Info)
        assert isinstance(op, Info)
        self.assertEqual(op.fields["server_id"], "NDHG")
        self.assertEqual(op.fields["port"], 59949)

    def test_connect(self) -> None:
        """CONNECT parses to its fields."""
        (op,) = RouteParser().feed(b'CONNECT {"cluster":"c1","headers":true}\r\n')
        self.assertEqual(op, Connect({"cluster": "c1", "headers": True}))

    def test_interest(self) -> None:
        """RS+ and RS-, plain and queue forms, parse to RouteSub and RouteUnsub."""
        ops = RouteParser().feed(
            b"RS+ $G nsq.orders\r\nRS+ $G nsq.orders qq 3\r\nRS- $G nsq.orders\r\nRS- $G nsq.orders qq\r\n"
        )
        self.assertEqual(
            ops,
            [
                RouteSub("$G", "nsq.orders"),
                RouteSub("$G", "nsq.orders", "qq", 3),
                RouteUnsub("$G", "nsq.orders"),
                RouteUnsub("$G", "nsq.orders", "qq"),
            ],
        )

    def test_case_and_whitespace(self) -> None:
        """Op names are case-insensitive; runs of spaces and tabs separate fields."""
        ops = RouteParser().feed(b"rs+\t$G  foo.bar \t q  2\r\nping\r\nPoNg\r\n+ok\r\n")
        self.assertEqual(ops, [RouteSub("$G", "foo.bar", "q", 2), Ping(), Pong(), Ok()])

    def test_lf_only(self) -> None:
        """A line ended by LF alone is accepted, as nats-server does."""
        self.assertEqual(RouteParser().feed(b"PING\n"), [Ping()])

    def test_rmsg_forms(self) -> None:
        """RMSG: plain, with a reply, with queues (|) and with reply and queues (+)."""
        ops = RouteParser().feed(
            b"RMSG $G a 3\r\nabc\r\n"
            b"RMSG $G a _INBOX.1 2\r\nxy\r\n"
            b"RMSG $G a | q1 q2 1\r\nz\r\n"
            b"RMSG $G a + _INBOX.2 q1 0\r\n\r\n"
        )
        self.assertEqual(
            ops,
            [
                RouteMessage("$G", "a", None, (), None, b"abc"),
                RouteMessage("$G", "a", "_INBOX.1", (), None, b"xy"),
                RouteMessage("$G", "a", None, ("q1", "q2"), None, b"z"),
                RouteMessage("$G", "a", "_INBOX.2", ("q1",), None, b""),
            ],
        )

    def test_hmsg(self) -> None:
        """HMSG splits the header block from the payload (the bytes nats-server 2.10 sent)."""
        (op,) = RouteParser().feed(
            b"HMSG $G nsq.clicks 18 24\r\nNATS/1.0\r\na: b\r\n\r\nhello2\r\n"
        )
        assert isinstance(op, RouteMessage)
        self.assertEqual(op.headers, b"NATS/1.0\r\na: b\r\n\r\n")
        self.assertEqual(op.payload, b"hello2")
        self.assertEqual(headers_of(op.headers), {"a": ["b"]})

    def test_hmsg_queue_form(self) -> None:
        """HMSG with queues and a reply."""
        (op,) = RouteParser().feed(b"HMSG $G s + r q 12 13\r\nNATS/1.0\r\n\r\nX\r\n")
        self.assertEqual(op, RouteMessage("$G", "s", "r", ("q",), b"NATS/1.0\r\n\r\n", b"X"))

    def test_split_anywhere(self) -> None:
        """Bytes fed one at a time give the same operations."""
        data = SERVER_INFO + b"RMSG $G a | q 5\r\nhe\r\no\r\nRS+ $G x\r\nHMSG $G s 12 14\r\nNATS/1.0\r\n\r\nab\r\n"
        whole = RouteParser().feed(data)
        parser = RouteParser()
        pieces = []
        for index in range(len(data)):
            pieces.extend(parser.feed(data[index : index + 1]))
        self.assertEqual(pieces, whole)
        self.assertEqual(len(whole), 4)
        self.assertEqual(parser.buffered(), 0)

    def test_payload_with_crlf(self) -> None:
        """A payload may hold CRLF: its size, not a line end, bounds it."""
        (op,) = RouteParser().feed(b"RMSG $G a 4\r\n\r\n\r\n\r\n")
        assert isinstance(op, RouteMessage)
        self.assertEqual(op.payload, b"\r\n\r\n")

    def test_err(self) -> None:
        """-ERR gives its text without quotes."""
        (op,) = RouteParser().feed(b"-ERR 'Stale Connection'\r\n")
        self.assertEqual(op, Err("Stale Connection"))

    def assertRefused(self, data: bytes, text: str, max_payload: int = 1048576) -> None:
        with self.assertRaises(RouteProtocolError) as caught:
            RouteParser(max_payload).feed(data)
        self.assertEqual(caught.exception.text, text)

    def test_unknown_op(self) -> None:
        """An unknown op is nats-server's Unknown Protocol Operation."""
        self.assertRefused(b"FOO\r\n", ERR_UNKNOWN_OP)
        self.assertRefused(b"SUB foo 1\r\n", ERR_UNKNOWN_OP)

    def test_bad_arguments(self) -> None:
        """Missing or malformed arguments are Unknown Protocol Operation."""
        for data in (
            b"RS+ $G\r\n",
            b"RS+ $G a q x\r\n",
            b"RS- $G a q z\r\n",
            b"RMSG $G a\r\n",
            b"RMSG $G a x\r\n",
            b"RMSG $G a ? q 1\r\nx\r\n",
            b"HMSG $G a 5 3\r\n",
            b"INFO nope\r\n",
            b"INFO []\r\n",
            b"PING x\r\n",
            b"\r\n",
        ):
            self.assertRefused(data, ERR_UNKNOWN_OP)

    def test_size_mismatch(self) -> None:
        """A payload not followed by CRLF where its size says is refused."""
        self.assertRefused(b"RMSG $G a 2\r\nabc\r\n", ERR_UNKNOWN_OP)

    def test_max_payload(self) -> None:
        """A message over max_payload is Maximum Payload Violation."""
        self.assertRefused(b"RMSG $G a 11\r\n", ERR_MAX_PAYLOAD, max_payload=10)
        self.assertEqual(len(RouteParser(10).feed(b"RMSG $G a 10\r\n0123456789\r\n")), 1)

    def test_max_control_line(self) -> None:
        """A line longer than 4096 bytes is Maximum Control Line Exceeded, even unfinished."""
        self.assertRefused(b"RS+ $G " + b"a" * MAX_CONTROL_LINE_SIZE, ERR_MAX_CONTROL_LINE)
        self.assertRefused(b"RS+ $G " + b"a" * MAX_CONTROL_LINE_SIZE + b"\r\n", ERR_MAX_CONTROL_LINE)


def expand(ops: list) -> list:
    """Batches as the single messages they stand for."""
    found = []
    for op in ops:
        if isinstance(op, RouteMessages):
            found.extend(
                RouteMessage(op.account, op.subject, op.reply, op.queues, None, payload)
                for payload in op.payloads
            )
        else:
            found.append(op)
    return found


class BatchModeTests(SynchronousTestCase):
    """A batching parser gives runs of identical RMSG lines as one RouteMessages."""

    def test_run(self) -> None:
        """Identical lines make one batch; another line starts another; HMSG is single."""
        data = (
            b"RMSG $G a 1\r\nx\r\nRMSG $G a 1\r\ny\r\nRMSG $G a 1\r\nz\r\n"
            b"RMSG $G a 2\r\nzz\r\nPING\r\nHMSG $G a 12 12\r\nNATS/1.0\r\n\r\n\r\n"
        )
        ops = RouteParser(batch=True).feed(data)
        self.assertEqual(
            ops,
            [
                RouteMessages("$G", "a", None, (), [b"x", b"y", b"z"]),
                RouteMessages("$G", "a", None, (), [b"zz"]),
                Ping(),
                RouteMessage("$G", "a", None, (), b"NATS/1.0\r\n\r\n", b""),
            ],
        )

    def test_split_anywhere(self) -> None:
        """Fed in any pieces, a batching parser gives the same messages in order."""
        frame = b"RMSG $G s | q 3\r\nabc\r\n"
        data = frame * 5 + b"RS+ $G t\r\n" + frame * 3
        whole = expand(RouteParser().feed(data))
        for size in (1, 2, 7, 23, len(data)):
            parser = RouteParser(batch=True)
            found = []
            for start in range(0, len(data), size):
                found.extend(parser.feed(data[start : start + size]))
            self.assertEqual(expand(found), whole, size)

    def test_bad_payload_end_in_run(self) -> None:
        """A wrong size inside a run is refused as outside one."""
        with self.assertRaises(RouteProtocolError):
            RouteParser(batch=True).feed(b"RMSG $G a 1\r\nx\r\nRMSG $G a 1\r\nxy\r\n")


class EncoderTests(SynchronousTestCase):
    """The encode_* functions give the parser's input back."""

    def test_round_trip(self) -> None:
        """Every encoder's output parses to what was encoded."""
        data = (
            encode_info({"server_id": "X", "port": 1})
            + encode_connect({"cluster": "c"})
            + encode_rs_plus("$G", "a.>")
            + encode_rs_plus("$G", "a.*", "q", 4)
            + encode_rs_minus("$G", "a.>")
            + encode_rs_minus("$G", "a.*", "q")
            + encode_rmsg_head("$G", "a.b", 2) + b"hi\r\n"
            + encode_rmsg_head("$G", "a.b", 2, "r", ("q1", "q2")) + b"hi\r\n"
            + encode_rmsg_head("$G", "a.b", 2, None, ("q1",)) + b"hi\r\n"
            + encode_hmsg_head("$G", "a.b", 12, 14, None, ("q",)) + b"NATS/1.0\r\n\r\nhi\r\n"
            + encode_err("Stale Connection")
        )
        self.assertEqual(
            RouteParser().feed(data),
            [
                Info({"server_id": "X", "port": 1}),
                Connect({"cluster": "c"}),
                RouteSub("$G", "a.>"),
                RouteSub("$G", "a.*", "q", 4),
                RouteUnsub("$G", "a.>"),
                RouteUnsub("$G", "a.*", "q"),
                RouteMessage("$G", "a.b", None, (), None, b"hi"),
                RouteMessage("$G", "a.b", "r", ("q1", "q2"), None, b"hi"),
                RouteMessage("$G", "a.b", None, ("q1",), None, b"hi"),
                RouteMessage("$G", "a.b", None, ("q",), b"NATS/1.0\r\n\r\n", b"hi"),
                Err("Stale Connection"),
            ],
        )

    def test_wire_forms(self) -> None:
        """The queue forms are written as nats-server writes them."""
        self.assertEqual(encode_rmsg_head("$G", "s", 3, None, ("a", "b")), b"RMSG $G s | a b 3\r\n")
        self.assertEqual(encode_rmsg_head("$G", "s", 3, "r", ("a",)), b"RMSG $G s + r a 3\r\n")
        self.assertEqual(encode_info({"a": 1}), b'INFO {"a":1} \r\n')
        self.assertEqual(encode_err("Authorization Violation"), b"-ERR 'Authorization Violation'\r\n")

    def test_cluster_name_error(self) -> None:
        """The cluster name refusal quotes both names as nats-server does."""
        self.assertEqual(
            cluster_name_error("x", "c1"),
            'Rejecting connection, cluster name "x" does not match "c1"',
        )
