"""
Tests for tests.integration.conformance: the fixture replay engine's pure
parts (escapes, placeholder templates, JSON, shapes, frames, HTTP and peer
matching), with fixed inputs and no sockets.
"""

from __future__ import annotations

import json
import os
import struct
import time
from typing import Any, Dict, List, Optional, Tuple

from twisted.trial.unittest import SynchronousTestCase

from tests.integration import conformance
from tests.integration.conformance import (
    Bindings,
    CaseReplay,
    FixtureError,
    FixtureMissing,
    escape,
    match_frame,
    match_http_response,
    match_json,
    match_peer_items,
    match_shape,
    match_template,
    parse_http_response,
    render_template,
    send_bytes,
    take_frame,
    unescape,
)

NOW_NS = int(time.time() * 1e9)
ID1 = b"0a1b2c3d4e5f6789"
ID2 = b"0a1b2c3d4e5f678a"


def message_payload(attempts: int, msg_id: bytes, body: bytes, timestamp: int = NOW_NS) -> bytes:
    """A V2 message payload built independently of txnsq."""
    return struct.pack(">qH", timestamp, attempts) + msg_id + body


class FakeFrameParser:
    """Stands in for txnsq's FrameParser: decodes whole V2 frames."""

    def __init__(self) -> None:
        self.fed: List[bytes] = []

    def feed(self, data: bytes) -> List[Tuple[int, bytes]]:
        self.fed.append(data)
        size, frame_type = struct.unpack(">Ii", data[:8])
        return [(frame_type, data[8 : 4 + size])]


class EscapeTests(SynchronousTestCase):
    """The fixtures' byte-string notation."""

    def test_unescape(self) -> None:
        """Escapes decode to the bytes they stand for."""
        self.assertEqual(unescape("PUB t\\n\\x00\\x00\\x00\\x05hello\\\\"), b"PUB t\n\x00\x00\x00\x05hello\\")

    def test_escape_round_trip(self) -> None:
        """escape() renders every byte value so that unescape() gives it back."""
        data = bytes(range(256))
        self.assertEqual(unescape(escape(data)), data)

    def test_send_parts(self) -> None:
        """A send list concatenates strings and repeat parts."""
        self.assertEqual(send_bytes(["ab\\n", {"repeat": "A", "count": 3}]), b"ab\nAAA")

    def test_send_template(self) -> None:
        """With a renderer, string parts are rendered."""
        bindings = Bindings({"id:m1": ID1})
        data = send_bytes("FIN <id:m1>\\n", lambda d: render_template(d, bindings))
        self.assertEqual(data, b"FIN " + ID1 + b"\n")

    def test_send_bad_part(self) -> None:
        """An unknown send part is a fixture error."""
        self.assertRaises(FixtureError, send_bytes, [{"nope": 1}])


class TemplateTests(SynchronousTestCase):
    """Placeholder templates."""

    def test_literal(self) -> None:
        """Without placeholders a template matches only itself, regex characters included."""
        bindings = Bindings()
        self.assertTrue(match_template(b"a.b(c)*", b"a.b(c)*", bindings))
        self.assertFalse(match_template(b"a.b", b"axb", bindings))

    def test_bound_value(self) -> None:
        """A bound placeholder matches its value only."""
        bindings = Bindings({"nsqd_tcp_port": 4150, "version": "0.1.0"})
        self.assertTrue(match_template(b"v<version> on <nsqd_tcp_port>", b"v0.1.0 on 4150", bindings))
        self.assertFalse(match_template(b"v<version>", b"v0x1x0", bindings))

    def test_free_placeholders(self) -> None:
        """Free placeholders match their kind of value."""
        bindings = Bindings()
        self.assertTrue(match_template(b"<int> <unix_s> <port>", b"-12 1700000000 4150", bindings))
        self.assertTrue(match_template(b"at <rfc3339>", b"at 2026-01-02T03:04:05Z", bindings))
        self.assertTrue(match_template(b"up <duration>", "up 1.234µs".encode("utf-8"), bindings))
        self.assertFalse(match_template(b"<int>", b"x", bindings))

    def test_any_stops_at_line_end(self) -> None:
        """<any> matches up to the end of a line, not across lines."""
        bindings = Bindings()
        self.assertTrue(match_template(b"go<any>\nx", b"go anything\nx", bindings))
        self.assertFalse(match_template(b"go<any>", b"go a\nb", bindings))

    def test_id_binding(self) -> None:
        """The first <id:mN> binds a 16-hex-digit id; later ones must be equal."""
        bindings = Bindings()
        self.assertTrue(match_template(b"FIN <id:m1> failed", b"FIN " + ID1 + b" failed", bindings))
        self.assertEqual(bindings.get("id:m1"), ID1)
        self.assertFalse(match_template(b"<id:m1>", ID2, bindings))
        self.assertTrue(match_template(b"<id:m1>", ID1, bindings))

    def test_id_repeated_in_one_template(self) -> None:
        """An unbound id used twice in one template must be the same both times."""
        bindings = Bindings()
        self.assertFalse(match_template(b"<id:m2> <id:m2>", ID1 + b" " + ID2, bindings))
        self.assertIsNone(bindings.get("id:m2"))
        self.assertTrue(match_template(b"<id:m2> <id:m2>", ID1 + b" " + ID1, bindings))

    def test_id_is_lowercase_hex(self) -> None:
        """Ids are Go's lowercase hex digits."""
        self.assertFalse(match_template(b"<id:m1>", b"0A1B2C3D4E5F6789", Bindings()))

    def test_unbound_environment_placeholder(self) -> None:
        """An environment placeholder that is not bound is a fixture error."""
        self.assertRaises(FixtureError, match_template, b"<auth_http_port>", b"1", Bindings())

    def test_unknown_names_are_literal(self) -> None:
        """Angle brackets that are no placeholder are literal text."""
        self.assertTrue(match_template(b"<b>x</b>", b"<b>x</b>", Bindings()))

    def test_render(self) -> None:
        """Rendering fills bound placeholders and refuses unbound ones."""
        bindings = Bindings({"auth_http_port": 9999})
        self.assertEqual(render_template(b"--a=127.0.0.1:<auth_http_port>", bindings), b"--a=127.0.0.1:9999")
        self.assertRaises(FixtureError, render_template, b"<id:m9>", bindings)


class JSONTests(SynchronousTestCase):
    """JSON and shape comparison."""

    def test_equal(self) -> None:
        """Equal values in the same key order match."""
        self.assertIsNone(match_json({"a": 1, "b": [True, None]}, {"a": 1, "b": [True, None]}, Bindings()))

    def test_key_order(self) -> None:
        """Keys must come in the recorded order."""
        self.assertIsNotNone(match_json({"a": 1, "b": 2}, {"b": 2, "a": 1}, Bindings()))

    def test_missing_key(self) -> None:
        """A missing or extra key is a difference."""
        self.assertIsNotNone(match_json({"a": 1, "b": 2}, {"a": 1}, Bindings()))
        self.assertIsNotNone(match_json({"a": 1}, {"a": 1, "c": 3}, Bindings()))

    def test_extension_keys_after_go_keys(self) -> None:
        """txnsq's own keys (``txnsq_version``) may follow Go's keys, but not stand among them."""
        self.assertIsNone(match_json({"version": "1"}, {"version": "1", "txnsq_version": "0.1.0"}, Bindings()))
        self.assertIsNotNone(match_json({"a": 1, "b": 2}, {"a": 1, "txnsq_version": "0", "b": 2}, Bindings()))
        self.assertIsNotNone(match_json({"version": "1"}, {"version": "1", "other": "0"}, Bindings()))
        self.assertIsNone(match_shape({"version": "string"}, {"version": "1", "txnsq_version": "0"}))
        self.assertIsNotNone(match_shape({"version": "string"}, {"version": "1", "other": "0"}))

    def test_int_bool_distinct(self) -> None:
        """1 and true, 0 and false, 0 and null differ."""
        bindings = Bindings()
        self.assertIsNotNone(match_json(1, True, bindings))
        self.assertIsNotNone(match_json(False, 0, bindings))
        self.assertIsNotNone(match_json(None, 0, bindings))

    def test_placeholder_string(self) -> None:
        """A string with placeholders is a template."""
        bindings = Bindings({"port:p1": 50123})
        self.assertIsNone(match_json({"r": "127.0.0.1:<port:p1>"}, {"r": "127.0.0.1:50123"}, bindings))
        self.assertIsNotNone(match_json({"r": "127.0.0.1:<port:p1>"}, {"r": "127.0.0.1:1"}, bindings))

    def test_whole_placeholder_int(self) -> None:
        """A whole-value placeholder stands for the int Go sent."""
        bindings = Bindings({"nsqd_tcp_port": 4150})
        self.assertIsNone(match_json({"tcp_port": "<nsqd_tcp_port>"}, {"tcp_port": 4150}, bindings))
        self.assertIsNotNone(match_json({"tcp_port": "<nsqd_tcp_port>"}, {"tcp_port": 4151}, bindings))
        self.assertIsNone(match_json("<int>", -3, bindings))
        self.assertIsNotNone(match_json("<int>", True, bindings))

    def test_time_plausibility(self) -> None:
        """A whole-value <unix_s> in milliseconds is refused."""
        bindings = Bindings()
        self.assertIsNone(match_json("<unix_s>", int(time.time()), bindings))
        self.assertIsNotNone(match_json("<unix_s>", int(time.time() * 1000), bindings))

    def test_unordered(self) -> None:
        """Arrays at unordered paths match in any order."""
        expected = {"producers": [{"topics": ["t1", "t2"]}]}
        actual = {"producers": [{"topics": ["t2", "t1"]}]}
        self.assertIsNotNone(match_json(expected, actual, Bindings()))
        self.assertIsNone(match_json(expected, actual, Bindings(), ["producers.*.topics"]))
        self.assertIsNotNone(
            match_json(expected, {"producers": [{"topics": ["t2", "t2"]}]}, Bindings(), ["producers.*.topics"])
        )

    def test_failed_match_binds_nothing(self) -> None:
        """A failing comparison leaves no new bindings behind."""
        bindings = Bindings()
        self.assertIsNotNone(match_json(["<id:m1>", "x"], [ID1.decode(), "y"], bindings))
        self.assertIsNone(bindings.get("id:m1"))

    def test_shape(self) -> None:
        """Shapes check value types, recursively."""
        shape = {"a": "int", "b": "float", "c": ["string"], "d": "null", "e": [], "f": {"g": "bool"}}
        good = {"a": 1, "b": 1, "c": ["x"], "d": None, "e": [], "f": {"g": False}}
        self.assertIsNone(match_shape(shape, good))
        self.assertIsNone(match_shape(shape, dict(good, b=0.5)))
        self.assertIsNotNone(match_shape(shape, dict(good, a=1.0)))
        self.assertIsNotNone(match_shape(shape, dict(good, a=True)))
        self.assertIsNotNone(match_shape(shape, dict(good, c=[1])))
        self.assertIsNotNone(match_shape(shape, dict(good, f={"g": False, "h": 1})))
        self.assertRaises(FixtureError, match_shape, "integer", 1)


class FrameTests(SynchronousTestCase):
    """Frame matching."""

    def test_data_frame(self) -> None:
        """Type, size and data are compared exactly."""
        expected = {"type": 0, "size": 6, "data": "OK"}
        self.assertIsNone(match_frame(expected, (0, b"OK"), Bindings()))
        self.assertIsNotNone(match_frame(expected, (1, b"OK"), Bindings()))
        self.assertIsNotNone(match_frame(expected, (0, b"OK "), Bindings()))
        self.assertIsNotNone(match_frame(dict(expected, size=7), (0, b"OK"), Bindings()))

    def test_template_frame(self) -> None:
        """A template frame's data may use bound ids."""
        bindings = Bindings({"id:m1": ID1})
        expected = {"type": 1, "size": 44, "data": "E_FIN_FAILED FIN <id:m1> failed", "template": True}
        data = b"E_FIN_FAILED FIN " + ID1 + b" failed"
        self.assertEqual(len(data) + 4, 44)
        self.assertIsNone(match_frame(expected, (1, data), bindings))
        self.assertIsNotNone(match_frame(expected, (1, data.replace(ID1, ID2)), bindings))

    def test_json_frame(self) -> None:
        """A JSON frame is decoded and compared with json and shape."""
        bindings = Bindings({"version": "0.1.0"})
        expected = {"type": 0, "json": {"v": "<version>", "n": 1}, "shape": {"v": "string", "n": "int"}}
        self.assertIsNone(match_frame(expected, (0, b'{"v":"0.1.0","n":1}'), bindings))
        self.assertIsNotNone(match_frame(expected, (0, b'{"v":"0.1.0","n":1.5}'), bindings))
        self.assertIsNotNone(match_frame(expected, (0, b"not json"), bindings))

    def test_message_frame(self) -> None:
        """A message frame is decoded; its id binds and its attempts count."""
        bindings = Bindings()
        expected = {"type": 2, "size": 35,
                    "message": {"timestamp": "<timestamp_ns>", "attempts": 1, "id": "<id:m1>", "body": "hello"}}
        self.assertIsNone(match_frame(expected, (2, message_payload(1, ID1, b"hello")), bindings))
        self.assertEqual(bindings.get("id:m1"), ID1)
        again: Dict[str, Any] = dict(expected, message=dict(expected["message"], attempts=2))  # type: ignore[call-overload]
        self.assertIsNone(match_frame(again, (2, message_payload(2, ID1, b"hello")), bindings))
        self.assertIsNotNone(match_frame(again, (2, message_payload(2, ID2, b"hello")), bindings))
        self.assertIsNotNone(match_frame(again, (2, message_payload(1, ID1, b"hello")), bindings))
        self.assertIsNotNone(match_frame(again, (2, message_payload(2, ID1, b"hellO")), bindings))

    def test_message_timestamp_unit(self) -> None:
        """A message timestamp in milliseconds is refused."""
        expected = {"type": 2, "message": {"timestamp": "<timestamp_ns>", "attempts": 1, "id": "<id:m1>", "body": ""}}
        payload = message_payload(1, ID1, b"", timestamp=NOW_NS // 1000000)
        self.assertIsNotNone(match_frame(expected, (2, payload), Bindings()))

    def test_v1_frame(self) -> None:
        """A V1 frame has no type and its size is the data length."""
        self.assertIsNone(match_frame({"size": 2, "data": "OK"}, (None, b"OK"), Bindings()))
        self.assertIsNotNone(match_frame({"type": 0, "size": 6, "data": "OK"}, (None, b"OK"), Bindings()))

    def test_take_frame_is_lazy(self) -> None:
        """Frames are cut one at a time and the bytes after them stay raw."""
        parser = FakeFrameParser()
        pending = bytearray(struct.pack(">Ii", 6, 0) + b"OK" + b"\x01\x02rest")
        self.assertEqual(take_frame(pending, "v2", parser), (0, b"OK"))
        self.assertEqual(bytes(pending), b"\x01\x02rest")
        self.assertEqual(parser.fed, [struct.pack(">Ii", 6, 0) + b"OK"])
        self.assertIsNone(take_frame(pending, "v2", parser))

    def test_take_v1_frame(self) -> None:
        """V1 frames are a size and data."""
        pending = bytearray(struct.pack(">I", 2) + b"OK" + struct.pack(">I", 5) + b"ab")
        self.assertEqual(take_frame(pending, "v1"), (None, b"OK"))
        self.assertIsNone(take_frame(pending, "v1"))


def http_raw(status: str, headers: List[str], body: bytes) -> bytes:
    """A raw HTTP response."""
    return ("HTTP/1.1 " + status + "\r\n" + "".join(h + "\r\n" for h in headers) + "\r\n").encode() + body


class HTTPTests(SynchronousTestCase):
    """HTTP response parsing and matching."""

    def test_content_length(self) -> None:
        """The body is Content-Length bytes."""
        response = parse_http_response(http_raw("200 OK", ["Content-Length: 2"], b"OK"))
        self.assertEqual((response.status, response.reason, response.body), (200, "OK", b"OK"))

    def test_chunked(self) -> None:
        """A chunked body is decoded."""
        raw = http_raw("200 OK", ["Transfer-Encoding: chunked"], b"2\r\nOK\r\n3\r\n!!!\r\n0\r\n\r\n")
        self.assertEqual(parse_http_response(raw).body, b"OK!!!")

    def test_head(self) -> None:
        """A response to HEAD has no body even with a Content-Length."""
        raw = http_raw("405 Method Not Allowed", ["Content-Length: 27"], b"")
        self.assertEqual(parse_http_response(raw, head_request=True).body, b"")
        self.assertRaises(conformance.ConformanceFailure, parse_http_response, raw + b"x", head_request=True)

    def test_match(self) -> None:
        """Status, listed headers, and body are compared."""
        expected = {"status": 200, "headers": {"X-Nsq-Content-Type": "nsq; version=1.0"}, "body": "OK"}
        good = parse_http_response(http_raw("200 OK", ["X-Nsq-Content-Type: nsq; version=1.0", "Content-Length: 2"], b"OK"))
        self.assertIsNone(match_http_response(expected, good, Bindings()))
        bad_status = parse_http_response(http_raw("404 Not Found", ["Content-Length: 2"], b"OK"))
        self.assertIsNotNone(match_http_response(expected, bad_status, Bindings()))

    def test_unlisted_content_type_absent(self) -> None:
        """Content-Type must be absent when the fixture does not list it."""
        expected = {"status": 200, "headers": {"X-Nsq-Content-Type": "nsq; version=1.0"}, "body": ""}
        response = parse_http_response(http_raw(
            "200 OK", ["X-Nsq-Content-Type: nsq; version=1.0", "Content-Type: text/plain", "Content-Length: 0"], b""))
        self.assertIsNotNone(match_http_response(expected, response, Bindings()))

    def test_json_body(self) -> None:
        """A JSON body is compared with json, shape and unordered."""
        expected = {"status": 200, "headers": {}, "json": {"topics": ["a", "b"]},
                    "shape": {"topics": ["string"]}, "unordered": ["topics"]}
        response = parse_http_response(http_raw("200 OK", [], b'{"topics":["b","a"]}'))
        self.assertIsNone(match_http_response(expected, response, Bindings()))

    def test_body_template(self) -> None:
        """A text body template matches as a whole."""
        expected = {"status": 200, "headers": {}, "body_template": "nsqd v<version> (built w/<any>)\\nuptime <duration>\\n"}
        bindings = Bindings({"version": "0.1.0"})
        response = parse_http_response(http_raw("200 OK", [], b"nsqd v0.1.0 (built w/CPython 3.11)\nuptime 3s\n"))
        self.assertIsNone(match_http_response(expected, response, bindings))

    def test_request_bytes(self) -> None:
        """A POST without a body still sends Content-Length: 0; the path goes as is."""
        data = conformance.http_request_bytes({"method": "POST", "path": "/topic/create?topic=bad!"}, "127.0.0.1", 4151, Bindings())
        self.assertTrue(data.startswith(b"POST /topic/create?topic=bad! HTTP/1.1\r\n"))
        self.assertIn(b"\r\nContent-Length: 0\r\n", data)
        get = conformance.http_request_bytes({"method": "GET", "path": "/ping"}, "127.0.0.1", 4151, Bindings())
        self.assertNotIn(b"Content-Length", get)


class PeerTests(SynchronousTestCase):
    """What nsqd writes to a stand-in lookupd."""

    ITEMS: List[Dict[str, Any]] = [
        {"magic": "  V1"},
        {"line": "IDENTIFY\\n", "body_size_prefix": True, "json": {"tcp_port": "<nsqd_tcp_port>"}},
        {"line": "REGISTER t\\n"},
    ]

    def stream(self, port: int = 4150) -> bytes:
        body = json.dumps({"tcp_port": port}).encode()
        return b"  V1IDENTIFY\n" + struct.pack(">i", len(body)) + body + b"REGISTER t\n"

    def test_complete(self) -> None:
        """The whole expected stream is consumed."""
        data = self.stream()
        self.assertEqual(match_peer_items(self.ITEMS, data, Bindings({"nsqd_tcp_port": 4150})), ("ok", len(data)))

    def test_prefix_needs_more(self) -> None:
        """A prefix of the expected stream waits for more."""
        for cut in (2, 6, 14, 20):
            self.assertEqual(match_peer_items(self.ITEMS, self.stream()[:cut], Bindings({"nsqd_tcp_port": 4150}))[0], "more")

    def test_wrong(self) -> None:
        """A wrong body or line is reported."""
        self.assertEqual(match_peer_items(self.ITEMS, self.stream(1), Bindings({"nsqd_tcp_port": 4150}))[0], "bad")
        self.assertEqual(match_peer_items([{"line": "PING\\n"}], b"PONG\n", Bindings())[0], "bad")


class AuthServerTests(SynchronousTestCase):
    """The stand-in auth server's resource, without sockets."""

    def test_answers_by_secret(self) -> None:
        """It records the request target and answers with the secret's status and JSON."""
        from twisted.web.test.requesthelper import DummyRequest

        resource = conformance._AuthResource({"good": [200, {"ttl": 1}], "bad": [401, {"message": "denied"}]})
        request = DummyRequest([b"auth"])
        request.uri = b"/auth?common_name=&remote_ip=127.0.0.1&secret=bad&tls=false"
        request.args = {b"secret": [b"bad"]}
        body = resource.render(request)  # type: ignore[arg-type]
        self.assertEqual((request.responseCode, json.loads(body)), (401, {"message": "denied"}))
        self.assertEqual(resource.seen, [request.uri])
        unknown = DummyRequest([b"auth"])
        unknown.args = {b"secret": [b"nope"]}
        resource.render(unknown)  # type: ignore[arg-type]
        self.assertEqual(unknown.responseCode, 404)


class ReplayPlanTests(SynchronousTestCase):
    """Decisions the replay makes before touching a socket."""

    def test_quiet_window(self) -> None:
        """The quiet window is skipped only before a step that reads the same connection."""
        case = {"name": "x", "steps": [
            {"conn": "c1", "expect_frames": []},
            {"conn": "c1", "upgrade": "deflate"},
            {"conn": "c1", "expect_frames": []},
            {"conn": "c1", "send": "NOP\\n"},
            {"conn": "c1", "expect_frames": []},
            {"conn": "c2", "expect_close": True},
            {"conn": "c2", "expect_frames": []},
        ]}
        replay = CaseReplay(case, reactor=object())
        steps: List[Dict[str, Any]] = case["steps"]  # type: ignore[assignment]
        decisions = [replay._needs_quiet_window(i, steps[i]) for i in (0, 2, 4, 6)]
        self.assertEqual(decisions, [False, True, True, True])

    def test_flags_rendered(self) -> None:
        """nsqd flags get the stand-in ports."""
        replay = CaseReplay({"name": "x", "steps": [], "nsqd_flags": ["--auth-http-address=127.0.0.1:<auth_http_port>"]},
                            reactor=object())
        replay.bindings.set("auth_http_port", 8123)
        self.assertEqual(replay.nsqd_flags(), ["--auth-http-address=127.0.0.1:8123"])

    def test_tls_server_files(self) -> None:
        """tls_server_files writes a certificate and a key, binds their paths, and close_stand_ins removes them."""
        replay = CaseReplay(
            {"name": "x", "steps": [], "tls_server_files": True,
             "nsqd_flags": ["--tls-cert=<tls_cert_file>", "--tls-key=<tls_key_file>"]},
            reactor=object(),
        )
        self.successResultOf(replay.start_stand_ins())
        cert, key = (flag.split("=", 1)[1] for flag in replay.nsqd_flags())
        for path, marker in ((cert, b"CERTIFICATE"), (key, b"PRIVATE KEY")):
            with open(path, "rb") as handle:
                self.assertIn(marker, handle.read())
        self.successResultOf(replay.close_stand_ins())
        self.assertFalse(os.path.exists(cert))
        self.assertFalse(os.path.exists(key))

    def test_deflate_codec_round_trip(self) -> None:
        """The deflate codec is raw deflate, sync-flushed per write."""
        codec = conformance.make_codec("deflate")
        wire = codec.encode(b"PUB t\n")
        self.assertTrue(wire.endswith(b"\x00\x00\xff\xff"))
        self.assertEqual(codec.decode(wire), b"PUB t\n")

    def test_snappy_codec_round_trip(self) -> None:
        """The snappy codec writes the framed format, stream identifier first."""
        codec = conformance.make_codec("snappy")
        wire = codec.encode(b"hello")
        self.assertTrue(wire.startswith(b"\xff\x06\x00\x00sNaPpY"))
        self.assertEqual(codec.decode(wire[:5]) + codec.decode(wire[5:]), b"hello")


class FixtureFilesTests(SynchronousTestCase):
    """The fixtures (recorded and derived) are present and use only what the engine knows."""

    FILES = (
        "tcp_v2.json",
        "http_nsqd.json",
        "lookupd_v1.json",
        "lookupd_http.json",
        "nsqd_lookup_peer.json",
        "tcp_v2_check_order.json",
    )
    STEP_KINDS = ("connect", "send", "expect_frames", "expect_close", "expect_nothing_ms", "expect_raw",
                  "upgrade", "close", "sleep_ms", "http", "auth_server_saw", "peer_expect", "peer_send")

    def test_every_step_known(self) -> None:
        """Every step of every fixture is of a kind the engine implements."""
        for filename in self.FILES:
            for case in conformance.load_fixture(filename)["cases"]:
                for step in case["steps"]:
                    kinds = [kind for kind in self.STEP_KINDS if kind in step]
                    self.assertEqual(len(kinds), 1, "%s %s: %r" % (filename, case["name"], step))

    def test_missing_directory_fails(self) -> None:
        """A missing fixture directory is an assertion failure naming where the files belong."""
        self.patch(conformance, "FIXTURE_DIR", "/nonexistent/conformance")
        error = self.assertRaises(FixtureMissing, conformance.load_fixture, "tcp_v2.json")
        self.assertIsInstance(error, AssertionError)
        self.assertIn("tests/fixtures/conformance", str(error))

    def test_templates_parse(self) -> None:
        """Every frame and body template in the fixtures uses known placeholders only."""
        names: Optional[set] = set()
        for filename in self.FILES:
            text = json.dumps(conformance.load_fixture(filename))
            for found in conformance._PLACEHOLDER.finditer(text.encode()):
                assert names is not None
                names.add(found.group(1).decode())
        assert names is not None
        unknown = {name for name in names if not conformance._is_placeholder_name(name)}
        self.assertEqual(unknown, set())
