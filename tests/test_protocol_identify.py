"""
Tests for txnsq.protocol.identify: IDENTIFY decoding and negotiation with
Go nsqd's ranges and texts, and the JSON replies.
"""

from __future__ import annotations

import json
from typing import Any, Dict, List

from twisted.trial.unittest import SynchronousTestCase

from tests.integration.conformance import load_fixture, send_bytes
from txnsq.nsqd.options import NSQDOptions
from txnsq.protocol.errors import ProtocolError
from txnsq.protocol.identify import (
    DEFAULT_OUTPUT_BUFFER_SIZE,
    Identity,
    auth_response,
    go_json_string,
    identify_response,
    negotiate_identify,
)

BAD_JSON = b"E_BAD_BODY IDENTIFY failed to decode JSON body"


def body(**fields: Any) -> bytes:
    """An IDENTIFY body with these fields."""
    return json.dumps(fields).encode("utf-8")


class NegotiateTestCase(SynchronousTestCase):
    """Helpers: default options and error assertions."""

    def setUp(self) -> None:
        self.options = NSQDOptions()

    def negotiate(self, data: bytes, **kwargs: Any) -> Identity:
        return negotiate_identify(data, self.options, **kwargs)

    def assertRefused(self, data: bytes, expected: bytes, **kwargs: Any) -> ProtocolError:
        with self.assertRaises(ProtocolError) as caught:
            self.negotiate(data, **kwargs)
        self.assertEqual(caught.exception.frame_data(), expected)
        self.assertTrue(caught.exception.fatal)
        return caught.exception


class DefaultsTests(NegotiateTestCase):
    """Absent fields keep the server's defaults."""

    def test_empty_object(self) -> None:
        """{} gives Go's defaults: heartbeat half the client timeout, 16 KiB buffer."""
        identity = self.negotiate(b"{}")
        self.assertEqual(
            identity,
            Identity(
                client_id="",
                hostname="",
                user_agent="",
                feature_negotiation=False,
                heartbeat_interval=30.0,
                output_buffer_size=DEFAULT_OUTPUT_BUFFER_SIZE,
                output_buffer_timeout=0.25,
                tls_v1=False,
                snappy=False,
                deflate=False,
                deflate_level=6,
                sample_rate=0,
                msg_timeout=60.0,
            ),
        )

    def test_defaults_follow_options(self) -> None:
        """The defaults come from the options."""
        self.options.client_timeout = 10.0
        self.options.output_buffer_timeout = 0.1
        self.options.msg_timeout = 5.0
        identity = self.negotiate(b"{}")
        self.assertEqual((identity.heartbeat_interval, identity.output_buffer_timeout, identity.msg_timeout), (5.0, 0.1, 5.0))

    def test_strings(self) -> None:
        """client_id, hostname and user_agent are taken as sent."""
        identity = self.negotiate(body(client_id="c", hostname="h.example", user_agent="ua/1.0"))
        self.assertEqual((identity.client_id, identity.hostname, identity.user_agent), ("c", "h.example", "ua/1.0"))

    def test_zero_means_default(self) -> None:
        """0 for a number keeps the default."""
        identity = self.negotiate(body(heartbeat_interval=0, output_buffer_size=0, output_buffer_timeout=0, msg_timeout=0))
        self.assertEqual(identity, self.negotiate(b"{}"))


class RangeTests(NegotiateTestCase):
    """Go's ranges and texts for each number."""

    def test_heartbeat(self) -> None:
        """-1 disables, 1000 ms to --max-heartbeat-interval are accepted."""
        self.assertEqual(self.negotiate(body(heartbeat_interval=-1)).heartbeat_interval, 0.0)
        self.assertEqual(self.negotiate(body(heartbeat_interval=1000)).heartbeat_interval, 1.0)
        self.assertEqual(self.negotiate(body(heartbeat_interval=60000)).heartbeat_interval, 60.0)
        for value in [999, 100, 1, 60001, -2]:
            self.assertRefused(body(heartbeat_interval=value), b"E_BAD_BODY IDENTIFY heartbeat interval (%d) is invalid" % (value,))
        self.options.max_heartbeat_interval = 5.0
        self.assertRefused(body(heartbeat_interval=5001), b"E_BAD_BODY IDENTIFY heartbeat interval (5001) is invalid")

    def test_output_buffer_timeout(self) -> None:
        """-1 disables, --min- to --max-output-buffer-timeout are accepted."""
        self.assertEqual(self.negotiate(body(output_buffer_timeout=-1)).output_buffer_timeout, 0.0)
        self.assertEqual(self.negotiate(body(output_buffer_timeout=25)).output_buffer_timeout, 0.025)
        self.assertEqual(self.negotiate(body(output_buffer_timeout=30000)).output_buffer_timeout, 30.0)
        for value in [1, 24, 30001, -2]:
            self.assertRefused(body(output_buffer_timeout=value), b"E_BAD_BODY IDENTIFY output buffer timeout (%d) is invalid" % (value,))
        self.options.min_output_buffer_timeout = 0.001
        self.assertEqual(self.negotiate(body(output_buffer_timeout=1)).output_buffer_timeout, 0.001)

    def test_output_buffer_size(self) -> None:
        """-1 means size 1 and no timeout; 64 to --max-output-buffer-size are accepted."""
        identity = self.negotiate(body(output_buffer_size=-1, output_buffer_timeout=100))
        self.assertEqual((identity.output_buffer_size, identity.output_buffer_timeout), (1, 0.0))
        self.assertEqual(self.negotiate(body(output_buffer_size=64)).output_buffer_size, 64)
        self.assertEqual(self.negotiate(body(output_buffer_size=65536)).output_buffer_size, 65536)
        for value in [10, 63, 65537, -2]:
            self.assertRefused(body(output_buffer_size=value), b"E_BAD_BODY IDENTIFY output buffer size (%d) is invalid" % (value,))

    def test_timeout_checked_before_size(self) -> None:
        """With both output buffer values bad, the timeout is reported."""
        self.assertRefused(
            body(output_buffer_timeout=1, output_buffer_size=10),
            b"E_BAD_BODY IDENTIFY output buffer timeout (1) is invalid",
        )

    def test_sample_rate(self) -> None:
        """0 to 99 are accepted."""
        self.assertEqual(self.negotiate(body(sample_rate=99)).sample_rate, 99)
        for value in [-1, 100]:
            self.assertRefused(body(sample_rate=value), b"E_BAD_BODY IDENTIFY sample rate (%d) is invalid" % (value,))

    def test_msg_timeout(self) -> None:
        """1000 ms to --max-msg-timeout are accepted; -1 is not special."""
        self.assertEqual(self.negotiate(body(msg_timeout=1000)).msg_timeout, 1.0)
        self.assertEqual(self.negotiate(body(msg_timeout=900000)).msg_timeout, 900.0)
        for value in [500, 999, 900001, -1]:
            self.assertRefused(body(msg_timeout=value), b"E_BAD_BODY IDENTIFY msg timeout (%d) is invalid" % (value,))

    def test_check_order(self) -> None:
        """Heartbeat, output buffer, sample rate, msg timeout: the first bad one is reported."""
        self.assertRefused(
            body(msg_timeout=1, sample_rate=100, output_buffer_size=1, heartbeat_interval=1),
            b"E_BAD_BODY IDENTIFY heartbeat interval (1) is invalid",
        )
        self.assertRefused(body(msg_timeout=1, sample_rate=100, output_buffer_size=1), b"E_BAD_BODY IDENTIFY output buffer size (1) is invalid")
        self.assertRefused(body(msg_timeout=1, sample_rate=100), b"E_BAD_BODY IDENTIFY sample rate (100) is invalid")

    def test_huge_values(self) -> None:
        """Values that fit Go's int are range-checked; larger ones fail to decode."""
        self.assertRefused(
            b'{"heartbeat_interval":9223372036854775807}',
            b"E_BAD_BODY IDENTIFY heartbeat interval (9223372036854775807) is invalid",
        )
        self.assertRefused(b'{"heartbeat_interval":9223372036854775808}', BAD_JSON)
        self.assertRefused(b'{"sample_rate":2147483648}', BAD_JSON)
        self.assertRefused(b'{"sample_rate":-2147483648}', b"E_BAD_BODY IDENTIFY sample rate (-2147483648) is invalid")


class DecodeTests(NegotiateTestCase):
    """The body is decoded as Go's encoding/json fills nsqd's struct."""

    def test_not_json(self) -> None:
        """Bodies that are not JSON are refused."""
        for data in [b"{not json", b"", b"{", b"{}x", b"{}{}", b"\xef\xbb\xbf{}", b"{'a':1}", b'{"a":NaN}', b'{"a":Infinity}']:
            self.assertRefused(data, BAD_JSON)

    def test_not_object(self) -> None:
        """Arrays, strings, numbers and booleans are refused."""
        for data in [b"[]", b'"x"', b"1", b"true"]:
            self.assertRefused(data, BAD_JSON)

    def test_null_document(self) -> None:
        """null leaves everything at its default, as Go's Unmarshal into a struct."""
        self.assertEqual(self.negotiate(b"null"), self.negotiate(b"{}"))
        self.assertEqual(self.negotiate(b" \n{ } "), self.negotiate(b"{}"))

    def test_unknown_keys(self) -> None:
        """Unknown keys, of any type, are ignored."""
        identity = self.negotiate(b'{"long_id":"x","short_id":"y","no_such_field":[1,2,{"a":1.5e300}],"z":null}')
        self.assertEqual(identity, self.negotiate(b"{}"))

    def test_wrong_types(self) -> None:
        """A known key with a value of the wrong type fails decoding."""
        for data in [
            b'{"heartbeat_interval":"1000"}',
            b'{"heartbeat_interval":1000.0}',
            b'{"heartbeat_interval":1e3}',
            b'{"heartbeat_interval":true}',
            b'{"feature_negotiation":1}',
            b'{"feature_negotiation":"true"}',
            b'{"client_id":1}',
            b'{"client_id":{}}',
            b'{"hostname":["h"]}',
            b'{"sample_rate":1.5}',
        ]:
            self.assertRefused(data, BAD_JSON)

    def test_null_values(self) -> None:
        """null for a known key leaves its default."""
        identity = self.negotiate(b'{"client_id":null,"heartbeat_interval":null,"feature_negotiation":null}')
        self.assertEqual(identity, self.negotiate(b"{}"))

    def test_negative_zero(self) -> None:
        """-0 is the integer 0."""
        self.assertEqual(self.negotiate(b'{"heartbeat_interval":-0}').heartbeat_interval, 30.0)

    def test_case_insensitive_keys(self) -> None:
        """Keys match field names case-insensitively, with Go's Unicode folding."""
        identity = self.negotiate(b'{"CLIENT_ID":"c","Heartbeat_Interval":2000,"feature_negotiation":true,"\xc5\xbfnappy":true}')
        self.assertEqual((identity.client_id, identity.heartbeat_interval, identity.snappy), ("c", 2.0, True))

    def test_duplicate_keys(self) -> None:
        """The last of duplicate keys wins."""
        self.assertEqual(self.negotiate(b'{"client_id":"a","client_id":"b"}').client_id, "b")
        self.assertEqual(self.negotiate(b'{"client_id":"a","CLIENT_ID":"b"}').client_id, "b")

    def test_invalid_utf8_in_string(self) -> None:
        """Invalid UTF-8 and lone surrogate escapes in strings become U+FFFD."""
        self.assertEqual(self.negotiate(b'{"client_id":"a\xffb"}').client_id, "a\ufffdb")
        self.assertEqual(self.negotiate(b'{"client_id":"a\\ud800b"}').client_id, "a\ufffdb")
        self.assertEqual(self.negotiate(b'{"client_id":"\\ud83d\\ude00"}').client_id, "\U0001f600")

    def test_control_character_in_string(self) -> None:
        """A raw control character inside a string is invalid JSON."""
        self.assertRefused(b'{"client_id":"a\nb"}', BAD_JSON)

    def test_deep_nesting(self) -> None:
        """Deeply nested unknown values do not crash the decoder."""
        self.assertEqual(self.negotiate(b'{"x":' + b"[" * 50 + b"]" * 50 + b"}").client_id, "")
        self.assertRefused(b'{"x":' + b"[" * 100000 + b"]" * 100000 + b"}", BAD_JSON)


class FeatureNegotiationTests(NegotiateTestCase):
    """TLS, snappy and deflate are granted only with feature_negotiation."""

    def test_without_negotiation(self) -> None:
        """Without feature_negotiation nothing is granted, and no conflict is seen."""
        identity = self.negotiate(body(snappy=True, deflate=True, tls_v1=True), tls_configured=True)
        self.assertEqual((identity.snappy, identity.deflate, identity.tls_v1), (False, False, False))

    def test_tls(self) -> None:
        """tls_v1 is granted only when TLS is configured."""
        self.assertFalse(self.negotiate(body(feature_negotiation=True, tls_v1=True)).tls_v1)
        self.assertTrue(self.negotiate(body(feature_negotiation=True, tls_v1=True), tls_configured=True).tls_v1)
        self.assertFalse(self.negotiate(body(feature_negotiation=True), tls_configured=True).tls_v1)

    def test_snappy(self) -> None:
        """snappy needs --snappy and an implementation."""
        self.assertTrue(self.negotiate(body(feature_negotiation=True, snappy=True)).snappy)
        self.assertFalse(self.negotiate(body(feature_negotiation=True, snappy=True), snappy_enabled=False).snappy)
        self.options.snappy = False
        self.assertFalse(self.negotiate(body(feature_negotiation=True, snappy=True)).snappy)

    def test_deflate(self) -> None:
        """deflate needs --deflate and an implementation; its level is clamped."""
        identity = self.negotiate(body(feature_negotiation=True, deflate=True, deflate_level=9))
        self.assertEqual((identity.deflate, identity.deflate_level), (True, 6))
        identity = self.negotiate(body(feature_negotiation=True, deflate=True, deflate_level=3))
        self.assertEqual((identity.deflate, identity.deflate_level), (True, 3))
        for level in [0, -1]:
            self.assertEqual(self.negotiate(body(feature_negotiation=True, deflate=True, deflate_level=level)).deflate_level, 6)
        self.assertFalse(self.negotiate(body(feature_negotiation=True, deflate=True), deflate_enabled=False).deflate)
        self.options.deflate = False
        self.assertFalse(self.negotiate(body(feature_negotiation=True, deflate=True)).deflate)

    def test_deflate_level_without_deflate(self) -> None:
        """Without deflate the level is the default, clamped (Go reports it)."""
        self.assertEqual(self.negotiate(body(feature_negotiation=True, deflate_level=3)).deflate_level, 6)
        self.options.max_deflate_level = 4
        self.assertEqual(self.negotiate(body(feature_negotiation=True)).deflate_level, 4)

    def test_snappy_and_deflate(self) -> None:
        """Both compressions at once is E_IDENTIFY_FAILED, fatal."""
        error = self.assertRefused(
            body(feature_negotiation=True, snappy=True, deflate=True),
            b"E_IDENTIFY_FAILED cannot enable both deflate and snappy compression",
        )
        self.assertEqual(error.code, "E_IDENTIFY_FAILED")

    def test_snappy_and_deflate_one_unavailable(self) -> None:
        """No conflict when the server cannot grant one of them."""
        identity = self.negotiate(body(feature_negotiation=True, snappy=True, deflate=True), snappy_enabled=False)
        self.assertEqual((identity.snappy, identity.deflate), (False, True))

    def test_range_errors_before_conflict(self) -> None:
        """Range errors are reported before the compression conflict."""
        self.assertRefused(
            body(feature_negotiation=True, snappy=True, deflate=True, sample_rate=100),
            b"E_BAD_BODY IDENTIFY sample rate (100) is invalid",
        )


DEFAULT_REPLY = (
    b'{"max_rdy_count":2500,"version":"1.3.0","max_msg_timeout":900000,"msg_timeout":60000,'
    b'"tls_v1":false,"deflate":false,"deflate_level":6,"max_deflate_level":6,"snappy":false,'
    b'"sample_rate":0,"auth_required":false,"output_buffer_size":16384,"output_buffer_timeout":250}'
)


class IdentifyResponseTests(NegotiateTestCase):
    """identify_response is Go's json.Marshal of its reply struct."""

    def reply(self, data: bytes, auth_required: bool = False, **kwargs: Any) -> bytes:
        return identify_response(self.negotiate(data, **kwargs), self.options, "1.3.0", auth_required=auth_required)

    def test_defaults(self) -> None:
        """The default reply, byte for byte."""
        self.assertEqual(self.reply(body(feature_negotiation=True)), DEFAULT_REPLY)

    def test_auth_required(self) -> None:
        """auth_required is reported as given."""
        self.assertIn(b'"auth_required":true', self.reply(b"{}", auth_required=True))

    def test_negotiated_values(self) -> None:
        """Negotiated values are echoed back in milliseconds."""
        document = json.loads(self.reply(body(msg_timeout=2000, sample_rate=50, output_buffer_size=64, output_buffer_timeout=100)))
        self.assertEqual(
            (document["msg_timeout"], document["sample_rate"], document["output_buffer_size"], document["output_buffer_timeout"]),
            (2000, 50, 64, 100),
        )

    def test_disabled_output_buffer(self) -> None:
        """output_buffer_size -1 is reported as 1 with timeout 0."""
        document = json.loads(self.reply(body(output_buffer_size=-1)))
        self.assertEqual((document["output_buffer_size"], document["output_buffer_timeout"]), (1, 0))

    def test_millisecond_rounding(self) -> None:
        """Durations convert to whole milliseconds without float drift."""
        self.options.max_msg_timeout = 1.001
        self.options.msg_timeout = 0.0295
        document = json.loads(self.reply(b"{}"))
        self.assertEqual((document["max_msg_timeout"], document["msg_timeout"]), (1001, 29))

    def test_version_escaped(self) -> None:
        """The version is a Go JSON string."""
        reply = identify_response(Identity(), self.options, '1.3.0-"<dev>"')
        self.assertIn(b'"version":"1.3.0-\\"\\u003cdev\\u003e\\""', reply)

    def test_recorded_replies(self) -> None:
        """Every recorded IDENTIFY reply is reproduced, keys and types included."""
        checked = 0
        for case in load_fixture("tcp_v2.json")["cases"]:
            flags = case.get("nsqd_flags", [])
            auth_required = any(flag.startswith("--auth-http-address") for flag in flags)
            sends: List[bytes] = []
            for step in case["steps"]:
                if step.get("conn") == "c1" and "send" in step:
                    sends.append(send_bytes(step["send"]))
                frames: List[Dict[str, Any]] = step.get("expect_frames", [])
                if not frames or "json" not in frames[0] or not sends or not sends[-1].startswith(b"IDENTIFY\n"):
                    continue
                expected = frames[0]
                reply = identify_response(
                    negotiate_identify(sends[-1][13:], self.options),
                    self.options,
                    "1.3.0",
                    auth_required=auth_required,
                )
                pairs = json.loads(reply, object_pairs_hook=list)
                want = dict(expected["json"], version="1.3.0")
                self.assertEqual(dict(pairs), want, case["name"])
                self.assertEqual([key for key, _ in pairs], list(expected["json"]), case["name"])
                kinds = {bool: "bool", int: "int", str: "string"}
                self.assertEqual({key: kinds[type(value)] for key, value in pairs}, expected["shape"], case["name"])
                checked += 1
        self.assertTrue(checked >= 8)


class GoJSONStringTests(SynchronousTestCase):
    """go_json_string escapes as Go's encoding/json."""

    def test_plain(self) -> None:
        """Plain text is quoted."""
        self.assertEqual(go_json_string("1.3.0"), '"1.3.0"')
        self.assertEqual(go_json_string(""), '""')

    def test_escapes(self) -> None:
        """Quotes, backslashes, control characters and HTML characters are escaped."""
        self.assertEqual(go_json_string('a"b\\c'), '"a\\"b\\\\c"')
        self.assertEqual(go_json_string("\n\r\t\x00\x1f"), '"\\n\\r\\t\\u0000\\u001f"')
        self.assertEqual(go_json_string("<a&b>"), '"\\u003ca\\u0026b\\u003e"')
        self.assertEqual(go_json_string("\u2028\u2029"), '"\\u2028\\u2029"')

    def test_unicode(self) -> None:
        """Other characters are written as UTF-8; lone surrogates become U+FFFD."""
        self.assertEqual(go_json_string("caf\u00e9 \U0001f600 \x7f"), '"caf\u00e9 \U0001f600 \x7f"')
        self.assertEqual(go_json_string("a\udc80"), '"a\\ufffd"')


class AuthResponseTests(SynchronousTestCase):
    """auth_response is Go's AUTH reply."""

    def test_reply(self) -> None:
        """Keys in Go's order, compact."""
        self.assertEqual(
            auth_response("conformance-user", "http://auth.example/u", 1),
            b'{"identity":"conformance-user","identity_url":"http://auth.example/u","permission_count":1}',
        )


class IdentityTests(SynchronousTestCase):
    """Identity is a plain record."""

    def test_repr_and_equality(self) -> None:
        """Identities with the same fields are equal; repr names the fields."""
        self.assertEqual(Identity(client_id="a"), Identity(client_id="a"))
        self.assertNotEqual(Identity(client_id="a"), Identity(client_id="b"))
        self.assertNotEqual(Identity(), "x")
        self.assertIn("client_id='a'", repr(Identity(client_id="a")))

