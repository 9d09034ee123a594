"""
Tests for txnsq.nsqd.http, driven in-process through ``treq.testing``
(no sockets): every endpoint's replies and errors, Go's routing answers,
and the parsers behind them.  The shared plumbing's own tests are
tests.test_http_routes and tests.test_http_site; the byte-level comparison
with Go nsqd is tests.integration.test_conformance_http.
"""

from __future__ import annotations

import errno
import json
import marshal
import os
import struct
import sys
from typing import Any, Dict, List, Optional, Tuple

from treq.testing import StubTreq
from twisted.internet.task import Clock
from twisted.trial.unittest import SynchronousTestCase

from tests.core_fakes import START, FakeConsumer, RecordingStorage
from txnsq.version import NSQ_VERSION, TXNSQ_VERSION
from txnsq.nsqd.broker import Broker
from txnsq.http.routes import allowed_methods, clean_path, redirect_path
from txnsq.nsqd.http import ROUTES, NSQDHTTPAPI
from txnsq.nsqd.http_config import CONFIG_OPTIONS, config_value
from txnsq.nsqd.options import (
    TLS_REQUIRED,
    TLS_REQUIRED_EXCEPT_HTTP,
    NSQDOptions,
)
from txnsq.nsqd.flags import nsqd_flags
from txnsq.protocol.go_json import go_json
from txnsq.protocol.http_params import (
    APIError,
    parse_mpub_binary,
    parse_mpub_lines,
    parse_query,
    topic_channel_args,
)
from txnsq.storage.disk import DiskStorage
from txnsq.storage.memory import MemoryStorage

JSON = "application/json; charset=utf-8"
TEXT = "text/plain; charset=utf-8"
NSQ = "nsq; version=1.0"


class Reply:
    """A response as the tests look at it."""

    def __init__(self, code: int, headers: Dict[str, List[str]], body: bytes) -> None:
        self.code = code
        self.headers = headers
        self.body = body

    def header(self, name: str) -> Optional[str]:
        values = self.headers.get(name.lower())
        return values[0] if values else None

    def json(self) -> Any:
        return json.loads(self.body)

    def __repr__(self) -> str:
        return "<Reply %d %r %r>" % (self.code, self.headers, self.body[:200])


def _mpub(*bodies: bytes) -> bytes:
    """The MPUB binary body of ``bodies``."""
    return struct.pack(">I", len(bodies)) + b"".join(
        struct.pack(">I", len(body)) + body for body in bodies
    )


class HTTPTestCase(SynchronousTestCase):
    """An API on a broker with real options, on a Clock, and a stub client."""

    def setUp(self) -> None:
        self.build()

    def build(self, storage: Any = None, **options: Any) -> None:
        self.clock = Clock()
        self.clock.advance(START)
        self.options = NSQDOptions(storage="memory", **options)
        self.storage = storage if storage is not None else MemoryStorage()
        self.broker = Broker(self.options, self.clock, self.storage)
        self.clients: List[Any] = []
        self.changed: List[str] = []
        self.ports = {"TCP": 4150, "HTTP": 4151}
        self.api = NSQDHTTPAPI(
            self.broker,
            START - 10,
            lambda: self.ports,
            clients=lambda: self.clients,
            options_changed=self.changed.append,
        )
        self.client = StubTreq(self.api.app.resource())

    def request(
        self,
        method: str,
        path: str,
        body: Optional[bytes] = None,
        headers: Optional[Dict[str, str]] = None,
        scheme: str = "http",
    ) -> Reply:
        """One request, answered synchronously."""
        answered = self.client.request(
            method,
            "%s://nsqd%s" % (scheme, path),
            data=body,
            headers=headers,
            allow_redirects=False,
        )
        self.client.flush()
        response = self.successResultOf(answered)
        content = self.successResultOf(response.content())
        found = {
            name.decode("latin-1").lower(): [value.decode("latin-1") for value in values]
            for name, values in response.headers.getAllRawHeaders()
        }
        return Reply(response.code, found, content)

    def get(self, path: str) -> Reply:
        return self.request("GET", path)

    def post(self, path: str, body: bytes = b"") -> Reply:
        return self.request("POST", path, body)

    def assertOK(self, reply: Reply) -> None:
        """The v1 ``OK`` text reply of /pub and /mpub."""
        self.assertEqual((reply.code, reply.body), (200, b"OK"), reply)
        self.assertEqual(reply.header("Content-Type"), TEXT)
        self.assertEqual(reply.header("X-NSQ-Content-Type"), NSQ)

    def assertEmpty(self, reply: Reply) -> None:
        """The v1 empty 200 of the topic and channel actions: no Content-Type."""
        self.assertEqual((reply.code, reply.body), (200, b""), reply)
        self.assertIsNone(reply.header("Content-Type"))
        self.assertEqual(reply.header("X-NSQ-Content-Type"), NSQ)

    def assertError(self, reply: Reply, code: int, message: str) -> None:
        """A v1 error: the status and ``{"message": ...}`` as JSON."""
        self.assertEqual(
            (reply.code, reply.body),
            (code, b'{"message":"%s"}' % (message.encode(),)),
            reply,
        )
        self.assertEqual(reply.header("Content-Type"), JSON)
        self.assertEqual(reply.header("X-NSQ-Content-Type"), NSQ)

    def consume(self, topic: str, channel: str = "c") -> FakeConsumer:
        """A consumer ready for plenty on ``topic:channel``."""
        consumer = FakeConsumer(ready_count=100)
        found = self.broker.get_topic(topic).get_channel(channel)
        found.add_consumer(consumer)
        found.consumer_ready(consumer)
        return consumer


class PingTests(HTTPTestCase):
    """GET /ping reports nsqd's health."""

    def setUp(self) -> None:
        self.build(storage=RecordingStorage())

    def get_ping(self, path: str) -> Tuple[int, bytes]:
        reply = self.get(path)
        return reply.code, reply.body

    def test_healthy(self) -> None:
        """A healthy nsqd answers 200 OK."""
        self.assertEqual(self.get_ping("/ping"), (200, b"OK"))

    def test_failing_queue(self) -> None:
        """While a queue cannot write, /ping answers 500 with Go's NOK - reason."""
        self.broker.get_topic("t").get_channel("c")
        self.storage.queues["t:c"].error = "failed to write to diskqueue t:c - disk full"
        self.assertEqual(
            self.get_ping("/ping"),
            (500, b"NOK - failed to write to diskqueue t:c - disk full"),
        )

    def test_plain_text(self) -> None:
        """/ping is plain text without the X-NSQ-Content-Type header, as Go's."""
        reply = self.get("/ping")
        self.assertEqual(reply.header("Content-Type"), TEXT)
        self.assertIsNone(reply.header("X-NSQ-Content-Type"))
        self.assertIsNone(reply.header("Server"))

    def test_head(self) -> None:
        """HEAD /ping is not routed: 405 allowing GET and OPTIONS, no body."""
        reply = self.request("HEAD", "/ping")
        self.assertEqual((reply.code, reply.body), (405, b""))
        self.assertEqual(reply.header("Allow"), "GET, OPTIONS")


class InfoTests(HTTPTestCase):
    """GET /info describes the daemon."""

    def test_info(self) -> None:
        """Version, addresses, bound ports, start time and client limits, in Go's order."""
        reply = self.get("/info")
        self.assertEqual(reply.header("Content-Type"), JSON)
        self.assertEqual(reply.header("X-NSQ-Content-Type"), NSQ)
        info = reply.json()
        self.assertEqual(
            list(info),
            [
                "version",
                "broadcast_address",
                "hostname",
                "http_port",
                "tcp_port",
                "start_time",
                "max_heartbeat_interval",
                "max_output_buffer_size",
                "max_output_buffer_timeout",
                "max_deflate_level",
                "txnsq_version",
            ],
        )
        self.assertEqual(info["version"], "1.3.0")
        self.assertEqual(info["txnsq_version"], TXNSQ_VERSION)
        self.assertEqual((info["tcp_port"], info["http_port"]), (4150, 4151))
        self.assertEqual(info["start_time"], int(START) - 10)
        self.assertEqual(info["max_heartbeat_interval"], 60000000000)
        self.assertEqual(info["max_output_buffer_timeout"], 30000000000)

    def test_info_metaq_port(self) -> None:
        """With a MetaQ listener, /info ends with its port as metaq_port."""
        self.ports["MetaQ"] = 8123
        info = self.get("/info").json()
        self.assertEqual(list(info)[-2:], ["txnsq_version", "metaq_port"])
        self.assertEqual(info["metaq_port"], 8123)


class PubTests(HTTPTestCase):
    """POST /pub publishes one message."""

    def test_publish(self) -> None:
        """The body is published to the topic; the reply is OK."""
        consumer = self.consume("t")
        self.assertOK(self.post("/pub?topic=t", b"hello"))
        self.assertEqual(consumer.bodies(), [b"hello"])

    def test_creates_topic(self) -> None:
        """Publishing creates the topic, which holds the message until a channel exists."""
        self.assertOK(self.post("/pub?topic=new", b"x"))
        self.assertEqual(self.broker.topics["new"].depth(), 1)

    def test_missing_topic(self) -> None:
        """Without ?topic= it is 400 MISSING_ARG_TOPIC."""
        self.assertError(self.post("/pub", b"x"), 400, "MISSING_ARG_TOPIC")

    def test_topic_in_body_ignored(self) -> None:
        """A form body is the message, not the arguments."""
        reply = self.request(
            "POST",
            "/pub",
            b"topic=t",
            {"Content-Type": "application/x-www-form-urlencoded"},
        )
        self.assertError(reply, 400, "MISSING_ARG_TOPIC")

    def test_invalid_topic(self) -> None:
        """An invalid name is 400 INVALID_TOPIC and creates nothing."""
        self.assertError(self.post("/pub?topic=bad!", b"x"), 400, "INVALID_TOPIC")
        self.assertError(self.post("/pub?topic=", b"x"), 400, "INVALID_TOPIC")
        self.assertEqual(self.broker.topics, {})

    def test_empty_body(self) -> None:
        """An empty body is 400 MSG_EMPTY, checked before the topic."""
        self.assertError(self.post("/pub?topic=t"), 400, "MSG_EMPTY")
        self.assertError(self.post("/pub"), 400, "MSG_EMPTY")

    def test_too_big(self) -> None:
        """Above --max-msg-size it is 413 MSG_TOO_BIG; exactly the limit is fine."""
        self.build(max_msg_size=10)
        self.assertError(self.post("/pub?topic=t", b"x" * 11), 413, "MSG_TOO_BIG")
        self.assertOK(self.post("/pub?topic=t", b"x" * 10))

    def test_ephemeral_topic(self) -> None:
        """A percent-encoded '#' names an #ephemeral topic."""
        self.assertOK(self.post("/pub?topic=e%23ephemeral", b"x"))
        self.assertTrue(self.broker.topics["e#ephemeral"].ephemeral)

    def test_query_syntax(self) -> None:
        """'+' is a space (so an invalid name) and the first of repeated values wins."""
        self.assertError(self.post("/pub?topic=a+b", b"x"), 400, "INVALID_TOPIC")
        self.assertOK(self.post("/pub?topic=first&topic=second", b"x"))
        self.assertEqual(sorted(self.broker.topics), ["first"])

    def test_bad_query(self) -> None:
        """A query Go cannot parse (';', bad escape) is 400 INVALID_REQUEST."""
        self.assertError(self.post("/pub?topic=t;x=1", b"x"), 400, "INVALID_REQUEST")
        self.assertError(self.post("/pub?topic=t&x=%zz", b"x"), 400, "INVALID_REQUEST")

    def test_defer(self) -> None:
        """?defer= milliseconds holds the message back that long."""
        consumer = self.consume("t")
        self.assertOK(self.post("/pub?topic=t&defer=1500", b"later"))
        self.assertEqual(consumer.bodies(), [])
        self.assertEqual(self.broker.topics["t"].channels["c"].deferred_count, 1)
        self.clock.advance(1.4)
        self.assertEqual(consumer.bodies(), [])
        self.clock.advance(0.1)
        self.assertEqual(consumer.bodies(), [b"later"])

    def test_defer_zero(self) -> None:
        """defer=0 publishes at once."""
        consumer = self.consume("t")
        self.assertOK(self.post("/pub?topic=t&defer=0", b"now"))
        self.assertEqual(consumer.bodies(), [b"now"])

    def test_defer_limits(self) -> None:
        """defer up to --max-req-timeout is fine; beyond it, negative or not a number is 400 INVALID_DEFER."""
        for value in ("abc", "-1", "3600001", "1.5", "0x10", "99999999999999999999", ""):
            self.assertError(
                self.post("/pub?topic=t&defer=" + value, b"x"), 400, "INVALID_DEFER"
            )
        self.assertOK(self.post("/pub?topic=t&defer=3600000", b"x"))
        self.assertOK(self.post("/pub?topic=t&defer=%2B5", b"x"))

    def test_defer_overflow_wraps(self) -> None:
        """Go multiplies defer by a millisecond in int64: a wrapped negative is INVALID_DEFER."""
        # 2**63 // 10**6 + 1 ms wraps past int64's maximum to a negative duration.
        value = str(2**63 // 10**6 + 1)
        self.assertError(self.post("/pub?topic=t&defer=" + value, b"x"), 400, "INVALID_DEFER")

    def test_invalid_defer_still_creates_topic(self) -> None:
        """Go creates the topic before it checks defer."""
        self.post("/pub?topic=made&defer=x", b"x")
        self.assertIn("made", self.broker.topics)

    def test_refused(self) -> None:
        """A publish the topic refuses (nsqd exiting, a failed queue) is 503 EXITING."""
        self.broker.get_topic("t")
        self.broker.close()
        self.assertError(self.post("/pub?topic=t", b"x"), 503, "EXITING")

    def test_get(self) -> None:
        """GET /pub is 405 allowing OPTIONS and POST."""
        reply = self.get("/pub?topic=t")
        self.assertError(reply, 405, "METHOD_NOT_ALLOWED")
        self.assertEqual(reply.header("Allow"), "OPTIONS, POST")


class MPubTests(HTTPTestCase):
    """POST /mpub publishes several messages at once."""

    def test_lines(self) -> None:
        """One message per line; empty lines skipped, '\\r' kept, no final newline needed."""
        consumer = self.consume("t")
        self.assertOK(self.post("/mpub?topic=t", b"a\n\nbb\r\n\nccc"))
        self.assertEqual(consumer.bodies(), [b"a", b"bb\r", b"ccc"])

    def test_only_newlines(self) -> None:
        """Only empty lines: OK, nothing published, the topic exists."""
        self.assertOK(self.post("/mpub?topic=t", b"\n\n"))
        self.assertEqual(self.broker.topics["t"].message_count, 0)

    def test_binary(self) -> None:
        """binary=true reads the MPUB body format; newlines are part of messages."""
        consumer = self.consume("t")
        self.assertOK(self.post("/mpub?topic=t&binary=true", _mpub(b"a", b"b\nc")))
        self.assertEqual(consumer.bodies(), [b"a", b"b\nc"])

    def test_binary_values(self) -> None:
        """binary=1 and any unrecognised value are binary; false and 0 are text."""
        consumer = self.consume("t")
        for value in ("1", "yes", ""):
            self.assertOK(self.post("/mpub?topic=t&binary=" + value, _mpub(b"m")))
        for value in ("false", "0"):
            self.assertOK(self.post("/mpub?topic=t&binary=" + value, b"x\ny"))
        self.assertEqual(consumer.bodies(), [b"m", b"m", b"m", b"x", b"y", b"x", b"y"])

    def test_binary_malformed(self) -> None:
        """Malformed binary bodies are 413 BAD_BODY (count) or BAD_MESSAGE (a message)."""
        self.build(max_msg_size=100)
        cases = [
            (b"", "BAD_BODY"),
            (b"\x00\x00\x00", "BAD_BODY"),
            (b"\x00\x00\x00\x00", "BAD_BODY"),
            (b"\xff\xff\xff\xff", "BAD_BODY"),
            (b"\x00\x00\x00\x01\x00\x00\x00\x00", "BAD_MESSAGE"),
            (b"\x00\x00\x00\x02\x00\x00\x00\x01a", "BAD_MESSAGE"),
            (b"\x00\x00\x00\x01\x00\x00\x00\x65" + b"x" * 101, "BAD_MESSAGE"),
            (b"\x00\x00\x00\x01\x00\x00\x00\x05abc", "BAD_MESSAGE"),
        ]
        for body, message in cases:
            self.assertError(self.post("/mpub?topic=t&binary=true", body), 413, message)
        self.assertEqual(self.broker.topics["t"].message_count, 0)

    def test_line_too_big(self) -> None:
        """A line above --max-msg-size is 413 MSG_TOO_BIG and nothing is published."""
        self.build(max_msg_size=10)
        self.assertError(
            self.post("/mpub?topic=t", b"short\n" + b"x" * 11 + b"\n"), 413, "MSG_TOO_BIG"
        )
        self.assertEqual(self.broker.topics["t"].message_count, 0)

    def test_body_too_big(self) -> None:
        """A Content-Length above --max-body-size is 413 BODY_TOO_BIG, before the topic."""
        self.build(max_body_size=100)
        self.assertError(self.post("/mpub?topic=t", b"x\n" * 51), 413, "BODY_TOO_BIG")
        self.assertEqual(self.broker.topics, {})

    def test_missing_topic(self) -> None:
        """MISSING_ARG_TOPIC and INVALID_TOPIC as for /pub."""
        self.assertError(self.post("/mpub", b"a\n"), 400, "MISSING_ARG_TOPIC")
        self.assertError(self.post("/mpub?topic=bad!", b"a\n"), 400, "INVALID_TOPIC")

    def test_all_or_nothing(self) -> None:
        """When the queue cannot take them all, none is published: 503 EXITING."""
        self.build(storage=RecordingStorage(), mem_queue_size=3)
        self.broker.get_topic("t").get_channel("c")
        self.assertError(self.post("/mpub?topic=t", b"a\nb\nc\nd"), 503, "EXITING")
        self.assertEqual(self.broker.topics["t"].channels["c"].depth(), 0)
        self.assertOK(self.post("/mpub?topic=t", b"a\nb\nc"))
        self.assertEqual(self.broker.topics["t"].channels["c"].depth(), 3)


class TopicTests(HTTPTestCase):
    """POST /topic/{create,delete,empty,pause,unpause}."""

    def test_create(self) -> None:
        """Create answers an empty 200, twice; invalid and missing names are 400."""
        self.assertEmpty(self.post("/topic/create?topic=t"))
        self.assertEmpty(self.post("/topic/create?topic=t"))
        self.assertIn("t", self.broker.topics)
        self.assertError(self.post("/topic/create?topic=bad!"), 400, "INVALID_TOPIC")
        self.assertError(self.post("/topic/create"), 400, "MISSING_ARG_TOPIC")

    def test_create_get(self) -> None:
        """GET /topic/create is 405."""
        reply = self.get("/topic/create?topic=t")
        self.assertError(reply, 405, "METHOD_NOT_ALLOWED")
        self.assertEqual(reply.header("Allow"), "OPTIONS, POST")

    def test_delete(self) -> None:
        """Delete removes the topic; a missing one (even an invalid name) is 404."""
        self.assertError(self.post("/topic/delete?topic=t"), 404, "TOPIC_NOT_FOUND")
        consumer = self.consume("t")
        self.assertEmpty(self.post("/topic/delete?topic=t"))
        self.assertEqual(self.broker.topics, {})
        self.assertTrue(consumer.closed)
        self.assertError(self.post("/topic/delete?topic=bad!"), 404, "TOPIC_NOT_FOUND")
        self.assertError(self.post("/topic/delete"), 400, "MISSING_ARG_TOPIC")

    def test_empty(self) -> None:
        """Empty drops what the topic holds; its counters stay."""
        self.assertError(self.post("/topic/empty?topic=t"), 404, "TOPIC_NOT_FOUND")
        self.post("/pub?topic=t", b"x")
        self.assertEmpty(self.post("/topic/empty?topic=t"))
        self.assertEqual(self.broker.topics["t"].depth(), 0)
        self.assertEqual(self.broker.topics["t"].message_count, 1)
        self.assertError(self.post("/topic/empty?topic=bad!"), 400, "INVALID_TOPIC")
        self.assertError(self.post("/topic/empty"), 400, "MISSING_ARG_TOPIC")

    def test_pause_unpause(self) -> None:
        """Pause holds messages in the topic, unpause hands them over."""
        self.assertError(self.post("/topic/pause?topic=t"), 404, "TOPIC_NOT_FOUND")
        consumer = self.consume("t")
        self.assertEmpty(self.post("/topic/pause?topic=t"))
        self.assertTrue(self.broker.topics["t"].paused)
        self.post("/pub?topic=t", b"held")
        self.assertEqual(consumer.bodies(), [])
        self.assertEmpty(self.post("/topic/unpause?topic=t"))
        self.clock.advance(0)
        self.assertEqual(consumer.bodies(), [b"held"])
        self.assertError(self.post("/topic/pause"), 400, "MISSING_ARG_TOPIC")
        self.assertError(self.post("/topic/unpause?topic=x"), 404, "TOPIC_NOT_FOUND")


    def test_mirror(self) -> None:
        """POST /topic/mirror mirrors the named topic (created); without routes it is 403 MIRROR_DISABLED."""
        self.assertError(self.post("/topic/mirror?topic=t"), 403, "MIRROR_DISABLED")
        named: List[str] = []

        class FakeMirror:
            def mirror_topic(self, name: str) -> None:
                named.append(name)

        self.api.mirror = FakeMirror()
        self.assertEmpty(self.post("/topic/mirror?topic=t"))
        self.assertEqual(named, ["t"])
        self.assertError(self.post("/topic/mirror?topic=bad!"), 400, "INVALID_TOPIC")
        self.assertError(self.post("/topic/mirror"), 400, "MISSING_ARG_TOPIC")


    def test_pub_waits_for_mirror(self) -> None:
        """/pub and /mpub to a mirrored topic answer OK once the mirror gate releases them."""
        from txnsq.mirror.recorder import MirrorRecorder

        held: List[Any] = []
        self.broker.mirror_gate = lambda waiter: held.append(waiter) or True
        self.broker.get_topic("m").mirror = MirrorRecorder(lambda: None, lambda: None)
        for path in ("/pub?topic=m", "/mpub?topic=m"):
            answered = self.client.request("POST", "http://nsqd" + path, data=b"x")
            self.client.flush()
            self.assertNoResult(answered)
            held.pop().mirror_release()
            self.client.flush()
            response = self.successResultOf(answered)
            self.assertEqual(self.successResultOf(response.content()), b"OK")
        self.assertOK(self.post("/pub?topic=plain", b"x"))

    def test_pub_refused_without_standbys(self) -> None:
        """/pub and /mpub to a mirrored topic short of --mirror-min-standbys are 503 MIRROR_STANDBYS_UNAVAILABLE, nothing stored."""
        from txnsq.mirror.recorder import MirrorRecorder

        recorder = MirrorRecorder(lambda: None, lambda: None)
        recorder.refusing = "mirror: 0 of 1 required standbys live"
        topic = self.broker.get_topic("m")
        topic.mirror = recorder
        for path in ("/pub?topic=m", "/pub?topic=m&defer=100", "/mpub?topic=m"):
            self.assertError(self.post(path, b"x"), 503, "MIRROR_STANDBYS_UNAVAILABLE")
        self.assertEqual(topic.message_count, 0)
        self.assertEqual(recorder.refused, 3)

    def test_pub_fails_when_standbys_lost(self) -> None:
        """A /pub or /mpub waiting at the mirror gate that the mirror fails is 503 MIRROR_STANDBYS_LOST_OUTCOME_UNKNOWN; the message stays stored."""
        from txnsq.mirror.recorder import MirrorRecorder

        held: List[Any] = []

        def gate(waiter: Any) -> bool:
            held.append(waiter)
            return True

        self.broker.mirror_gate = gate
        topic = self.broker.get_topic("m")
        topic.mirror = MirrorRecorder(lambda: None, lambda: None)
        for path in ("/pub?topic=m", "/mpub?topic=m"):
            answered = self.client.request("POST", "http://nsqd" + path, data=b"x")
            self.client.flush()
            self.assertNoResult(answered)
            held.pop().mirror_fail("mirror: gone")
            self.client.flush()
            response = self.successResultOf(answered)
            self.assertEqual(response.code, 503)
            self.assertEqual(
                self.successResultOf(response.content()),
                b'{"message":"MIRROR_STANDBYS_LOST_OUTCOME_UNKNOWN"}',
            )
        self.assertEqual(topic.message_count, 2)

    def test_pub_fails_at_once_at_gate(self) -> None:
        """A gate that fails the publish as it is asked answers 503 at once."""
        from txnsq.mirror.recorder import MirrorRecorder

        def gate(waiter: Any) -> bool:
            waiter.mirror_fail("mirror: gone")
            return True

        self.broker.mirror_gate = gate
        self.broker.get_topic("m").mirror = MirrorRecorder(lambda: None, lambda: None)
        self.assertError(self.post("/pub?topic=m", b"x"), 503, "MIRROR_STANDBYS_LOST_OUTCOME_UNKNOWN")


class ChannelTests(HTTPTestCase):
    """POST /channel/{create,delete,empty,pause,unpause}."""

    def test_arguments(self) -> None:
        """Both names are checked, topic first, before the topic must exist."""
        for path, code, message in [
            ("/channel/create?channel=c", 400, "MISSING_ARG_TOPIC"),
            ("/channel/create?topic=bad!&channel=c", 400, "INVALID_ARG_TOPIC"),
            ("/channel/create?topic=t", 400, "MISSING_ARG_CHANNEL"),
            ("/channel/create?topic=t&channel=bad!", 400, "INVALID_ARG_CHANNEL"),
            ("/channel/create?topic=t&channel=c", 404, "TOPIC_NOT_FOUND"),
            ("/channel/delete?topic=t&channel=c", 404, "TOPIC_NOT_FOUND"),
            ("/channel/empty?topic=t&channel=c", 404, "TOPIC_NOT_FOUND"),
            ("/channel/pause?topic=t&channel=c", 404, "TOPIC_NOT_FOUND"),
            ("/channel/unpause?topic=t&channel=c", 404, "TOPIC_NOT_FOUND"),
        ]:
            self.assertError(self.post(path), code, message)
        self.assertEqual(self.broker.topics, {})

    def test_missing_channel(self) -> None:
        """On an existing topic, acting on a missing channel is 404 CHANNEL_NOT_FOUND."""
        self.post("/topic/create?topic=t")
        for action in ("delete", "empty", "pause", "unpause"):
            self.assertError(
                self.post("/channel/%s?topic=t&channel=c" % (action,)),
                404,
                "CHANNEL_NOT_FOUND",
            )

    def test_create(self) -> None:
        """Create makes the channel, which then takes the topic's messages."""
        self.post("/pub?topic=t", b"x")
        self.assertEmpty(self.post("/channel/create?topic=t&channel=c"))
        self.assertEmpty(self.post("/channel/create?topic=t&channel=c"))
        self.clock.advance(0)
        self.assertEqual(self.broker.topics["t"].channels["c"].depth(), 1)

    def test_delete(self) -> None:
        """Delete removes the channel and closes its consumers."""
        consumer = self.consume("t")
        self.assertEmpty(self.post("/channel/delete?topic=t&channel=c"))
        self.assertEqual(self.broker.topics["t"].channels, {})
        self.assertTrue(consumer.closed)

    def test_empty(self) -> None:
        """Empty drops the channel's messages."""
        self.post("/topic/create?topic=t")
        self.post("/channel/create?topic=t&channel=c")
        self.post("/mpub?topic=t", b"a\nb")
        self.assertEmpty(self.post("/channel/empty?topic=t&channel=c"))
        self.assertEqual(self.broker.topics["t"].channels["c"].depth(), 0)

    def test_pause_unpause(self) -> None:
        """A paused channel delivers nothing until unpaused."""
        consumer = self.consume("t")
        self.assertEmpty(self.post("/channel/pause?topic=t&channel=c"))
        self.post("/pub?topic=t", b"held")
        self.assertEqual(consumer.bodies(), [])
        self.assertEmpty(self.post("/channel/unpause?topic=t&channel=c"))
        self.assertEqual(consumer.bodies(), [b"held"])


class StatsTests(HTTPTestCase):
    """GET /stats, as text or JSON, whole or narrowed."""

    def test_json(self) -> None:
        """format=json gives Go's document, topics sorted, memory included."""
        self.post("/topic/create?topic=b")
        self.post("/pub?topic=a", b"xy")
        reply = self.get("/stats?format=json")
        self.assertEqual(reply.header("Content-Type"), JSON)
        self.assertEqual(reply.header("X-NSQ-Content-Type"), NSQ)
        stats = reply.json()
        self.assertEqual(
            list(stats), ["version", "health", "start_time", "topics", "memory", "producers"]
        )
        self.assertEqual([t["topic_name"] for t in stats["topics"]], ["a", "b"])
        self.assertEqual(stats["topics"][0]["message_bytes"], 2)
        self.assertEqual(stats["start_time"], int(START) - 10)

    def test_json_options(self) -> None:
        """include_mem=false drops memory; include_clients=false makes clients null."""
        self.broker.get_topic("t").get_channel("c")
        stats = self.get("/stats?format=json&include_mem=false&include_clients=false").json()
        self.assertNotIn("memory", stats)
        self.assertIsNone(stats["topics"][0]["channels"][0]["clients"])
        stats = self.get("/stats?format=json&include_mem=no").json()
        self.assertIn("memory", stats)
        self.assertEqual(stats["topics"][0]["channels"][0]["clients"], [])

    def test_filters(self) -> None:
        """topic= and channel= narrow the topics; an unknown topic gives null."""
        self.broker.get_topic("t1").get_channel("c1")
        self.broker.get_topic("t1").get_channel("c2")
        self.broker.get_topic("t2")
        stats = self.get("/stats?format=json&topic=t1&channel=c2&include_mem=false").json()
        self.assertEqual(
            [(t["topic_name"], [c["channel_name"] for c in t["channels"]]) for t in stats["topics"]],
            [("t1", ["c2"])],
        )
        self.assertIsNone(self.get("/stats?format=json&topic=nope").json()["topics"])

    def test_text(self) -> None:
        """Without format=json the page is Go's text layout."""
        self.broker.get_topic("t").get_channel("c")
        reply = self.get("/stats?include_mem=false")
        self.assertEqual(reply.header("Content-Type"), TEXT)
        self.assertEqual(reply.header("X-NSQ-Content-Type"), NSQ)
        self.assertTrue(reply.body.startswith(b"nsqd v%s (built w/" % (NSQ_VERSION.encode(),)))
        self.assertIn(b"uptime 10s\n", reply.body)
        self.assertIn(b"\n   [t              ] depth: 0 ", reply.body)
        self.assertTrue(reply.body.endswith(b"\nProducers: None\n"))

    def test_unhealthy(self) -> None:
        """The health shown is /ping's."""
        self.build(storage=RecordingStorage())
        self.broker.get_topic("t")
        self.storage.queues["t"].error = "disk full"
        self.assertEqual(self.get("/stats?format=json").json()["health"], "NOK - disk full")

    def test_bad_query(self) -> None:
        """An unparseable query is 400 INVALID_REQUEST."""
        self.assertError(self.get("/stats?format=json;"), 400, "INVALID_REQUEST")


class MetricsTests(HTTPTestCase):
    """GET /metrics: the stats for Prometheus."""

    def test_metrics(self) -> None:
        """The exposition format, parseable by prometheus_client, with the topics."""
        from prometheus_client.parser import text_string_to_metric_families

        self.post("/mpub?topic=t", b"a\nb")
        reply = self.get("/metrics")
        self.assertEqual(reply.code, 200)
        self.assertEqual(reply.header("Content-Type"), "text/plain; version=0.0.4; charset=utf-8")
        self.assertIsNone(reply.header("X-NSQ-Content-Type"))
        samples = {
            (sample.name, tuple(sorted(sample.labels.items()))): sample.value
            for family in text_string_to_metric_families(reply.body.decode("utf-8"))
            for sample in family.samples
        }
        self.assertEqual(samples[("nsqd_topic_depth", (("topic", "t"),))], 2)


class ConfigTests(HTTPTestCase):
    """GET and PUT /config/OPTION."""

    def get_config(self, name: str) -> Reply:
        return self.get("/config/" + name)

    def put(self, name: str, body: bytes) -> Reply:
        return self.request("PUT", "/config/" + name, body)

    def test_values(self) -> None:
        """Options come as Go types them: ints, durations in ns, bools, lists, numbered levels."""
        self.build(e2e_processing_latency_percentile=[0.99, 1.0])
        for name, value in [
            ("max_msg_size", 1048576),
            ("msg_timeout", 60000000000),
            ("min_output_buffer_timeout", 25000000),
            ("snappy", True),
            ("nsqlookupd_tcp_addresses", []),
            ("log_level", 2),
            ("tls_min_version", 0x0301),
            ("tls_required", 0),
            ("e2e_processing_latency_percentiles", [0.99, 1]),
            ("id", self.options.node_id),
        ]:
            reply = self.get_config(name)
            self.assertEqual((reply.code, reply.json()), (200, value), name)
            self.assertEqual(reply.header("Content-Type"), JSON)
        self.assertEqual(self.get_config("e2e_processing_latency_percentiles").body, b"[0.99,1]")

    def test_strings(self) -> None:
        """A string option comes as text, as Go's handler returns it; an empty one as an empty 200."""
        reply = self.get_config("log_prefix")
        self.assertEqual((reply.code, reply.body), (200, b"[nsqd] "))
        self.assertEqual(reply.header("Content-Type"), TEXT)
        self.assertEmpty(self.get_config("tls_cert"))

    def test_every_flag(self) -> None:
        """Every nsqd flag but the deprecated and one-shot ones has a config name."""
        skipped = {"version", "config", "verbose", "worker-id"}
        attributes = {attribute for attribute, _ in CONFIG_OPTIONS.values()}
        for flag in nsqd_flags():
            if flag.name not in skipped:
                self.assertIn(flag.name.replace("-", "_"), attributes, flag.name)
        for name in CONFIG_OPTIONS:
            self.assertEqual(self.get_config(name).code, 200, name)

    def test_mirror_settings(self) -> None:
        """The mirror's settings come by their flag names: mirror_ack as text, mirror_min_standbys as an integer."""
        self.assertEqual(self.get_config("mirror_ack").body, b"sync")
        self.assertEqual(self.get_config("mirror_min_standbys").json(), 0)
        self.build(mirror_min_standbys=2)
        reply = self.get_config("mirror_min_standbys")
        self.assertEqual((reply.code, reply.json()), (200, 2))
        self.assertEqual(reply.header("Content-Type"), JSON)
        self.assertError(self.put("mirror_min_standbys", b"1"), 400, "INVALID_OPTION")

    def test_unknown(self) -> None:
        """Unknown names, and flag names where Go's config name differs, are 400 INVALID_OPTION."""
        for name in ("no_such_option", "node_id", "lookupd_tcp_address", "verbose"):
            self.assertError(self.get_config(name), 400, "INVALID_OPTION")

    def test_put_lookupd_addresses(self) -> None:
        """A JSON list of addresses replaces the option; listeners are told."""
        reply = self.put("nsqlookupd_tcp_addresses", b'["127.0.0.1:4160", "h:4160"]')
        self.assertEqual((reply.code, reply.json()), (200, ["127.0.0.1:4160", "h:4160"]))
        self.assertEqual(self.options.lookupd_tcp_address, ["127.0.0.1:4160", "h:4160"])
        self.assertEqual(self.changed, ["nsqlookupd_tcp_addresses"])
        self.assertEqual(self.get_config("nsqlookupd_tcp_addresses").json(), ["127.0.0.1:4160", "h:4160"])
        self.assertEqual(self.put("nsqlookupd_tcp_addresses", b"[]").body, b"[]")
        self.assertEqual(self.put("nsqlookupd_tcp_addresses", b'[null, "a"]').json(), ["", "a"])

    def test_put_lookupd_invalid(self) -> None:
        """Not a JSON list of strings is 400 INVALID_VALUE; nothing changes."""
        for body in (b"not json", b'"a"', b"[1]", b"{}", b"[NaN]", b'["a"] x'):
            self.assertError(self.put("nsqlookupd_tcp_addresses", body), 400, "INVALID_VALUE")
        self.assertEqual(self.options.lookupd_tcp_address, [])
        self.assertEqual(self.changed, [])

    def test_put_sizes(self) -> None:
        """An empty body, or one above --max-msg-size, is 413 INVALID_VALUE."""
        self.build(max_msg_size=10)
        self.assertError(self.put("nsqlookupd_tcp_addresses", b""), 413, "INVALID_VALUE")
        self.assertError(self.put("log_level", b"x" * 11), 413, "INVALID_VALUE")
        self.assertError(self.put("max_msg_size", b""), 413, "INVALID_VALUE")

    def test_put_log_level(self) -> None:
        """A level name in any case sets the level; Go's number comes back."""
        reply = self.put("log_level", b"warn")
        self.assertEqual((reply.code, reply.body), (200, b"3"))
        self.assertEqual(self.options.log_level, "warn")
        self.assertEqual(self.put("log_level", b"DEBUG").body, b"1")
        self.assertEqual(self.changed, ["log_level", "log_level"])
        for body in (b"loud", b"warn\n", b" info"):
            self.assertError(self.put("log_level", body), 400, "INVALID_VALUE")
        self.assertEqual(self.options.log_level, "debug")

    def test_put_other(self) -> None:
        """Other options cannot be changed at run time: 400 INVALID_OPTION."""
        self.assertError(self.put("max_msg_size", b"5"), 400, "INVALID_OPTION")
        self.assertError(self.put("nope", b"5"), 400, "INVALID_OPTION")
        self.assertEqual(self.options.max_msg_size, 1048576)

    def test_post(self) -> None:
        """POST is 405 allowing GET, OPTIONS and PUT."""
        reply = self.post("/config/max_msg_size", b"5")
        self.assertError(reply, 405, "METHOD_NOT_ALLOWED")
        self.assertEqual(reply.header("Allow"), "GET, OPTIONS, PUT")

    def test_config_value(self) -> None:
        """config_value raises KeyError for an unknown name."""
        self.assertRaises(KeyError, config_value, self.options, "nope")


class RoutingTests(HTTPTestCase):
    """What Go's httprouter answers when no route matches exactly."""

    def test_not_found(self) -> None:
        """An unknown path is 404 NOT_FOUND JSON, whatever the method."""
        for method in ("GET", "POST", "PUT", "DELETE", "HEAD"):
            reply = self.request(method, "/nope")
            self.assertEqual(reply.code, 404, method)
        self.assertError(self.get("/nope"), 404, "NOT_FOUND")
        self.assertError(self.get("/"), 404, "NOT_FOUND")

    def test_trailing_slash_get(self) -> None:
        """GET with a trailing slash too many redirects 301, with Go's little HTML body."""
        reply = self.get("/ping/")
        self.assertEqual(reply.code, 301)
        self.assertEqual(reply.header("Location"), "/ping")
        self.assertEqual(reply.header("Content-Type"), "text/html; charset=utf-8")
        self.assertEqual(reply.body, b'<a href="/ping">Moved Permanently</a>.\n\n')

    def test_trailing_slash_post(self) -> None:
        """Other methods redirect 307, keeping the query, with no body or type."""
        reply = self.post("/pub/?topic=t&x=%23", b"x")
        self.assertEqual((reply.code, reply.body), (307, b""))
        self.assertEqual(reply.header("Location"), "/pub?topic=t&x=%23")
        self.assertIsNone(reply.header("Content-Type"))
        self.assertEqual(self.broker.topics, {})

    def test_missing_trailing_slash(self) -> None:
        """/debug/pprof redirects to the index at /debug/pprof/."""
        reply = self.get("/debug/pprof")
        self.assertEqual((reply.code, reply.header("Location")), (301, "/debug/pprof/"))

    def test_fixed_path(self) -> None:
        """Case and dot segments are fixed by a redirect, as httprouter's RedirectFixedPath."""
        for path, location in [
            ("/PING", "/ping"),
            ("/Stats?format=json", "/stats?format=json"),
            ("/./info", "/info"),
            ("/x/../ping/", "/ping"),
            ("/CONFIG/Max_Msg_Size", "/config/Max_Msg_Size"),
        ]:
            reply = self.get(path)
            self.assertEqual((reply.code, reply.header("Location")), (301, location), path)
        reply = self.post("/TOPIC/create?topic=t")
        self.assertEqual((reply.code, reply.header("Location")), (307, "/topic/create?topic=t"))

    def test_no_redirect_across_methods(self) -> None:
        """A method without routes (DELETE) never redirects; a path without any is 404."""
        self.assertEqual(self.request("DELETE", "/ping/").code, 404)
        self.assertEqual(self.post("/ping/").code, 404)

    def test_options(self) -> None:
        """OPTIONS answers an empty 200 with the Allow list, or 404."""
        reply = self.request("OPTIONS", "/debug/pprof/symbol")
        self.assertEqual((reply.code, reply.body), (200, b""))
        self.assertEqual(reply.header("Allow"), "GET, OPTIONS, POST")
        self.assertIsNone(reply.header("Content-Type"))
        self.assertEqual(self.request("OPTIONS", "/nope").code, 404)

    def test_method_not_allowed(self) -> None:
        """Any other method on a routed path is 405 with the methods allowed."""
        reply = self.request("DELETE", "/stats")
        self.assertError(reply, 405, "METHOD_NOT_ALLOWED")
        self.assertEqual(reply.header("Allow"), "GET, OPTIONS")

    def test_tls_required(self) -> None:
        """With --tls-required=true plain HTTP answers 403 TLS_REQUIRED with the HTTPS port; HTTPS works."""
        self.build(tls_required=TLS_REQUIRED)
        self.ports["HTTPS"] = 4152
        for path in ("/ping", "/nope"):
            reply = self.get(path)
            self.assertEqual(
                (reply.code, reply.body),
                (403, b'{"message": "TLS_REQUIRED", "https_port": 4152}'),
            )
            self.assertEqual(reply.header("Content-Type"), JSON)
        self.assertEqual(self.request("GET", "/ping", scheme="https").body, b"OK")

    def test_tls_required_except_http(self) -> None:
        """--tls-required=tcp-https leaves plain HTTP open."""
        self.build(tls_required=TLS_REQUIRED_EXCEPT_HTTP)
        self.assertEqual(self.get("/ping").body, b"OK")

    def test_route_helpers(self) -> None:
        """The route table answers as httprouter would."""
        self.assertEqual(allowed_methods("/config/x", "POST", ROUTES), "GET, OPTIONS, PUT")
        self.assertEqual(allowed_methods("/nope", "GET", ROUTES), "")
        self.assertEqual(redirect_path("GET", "/", ROUTES), None)
        self.assertEqual(redirect_path("CONNECT", "/ping/", ROUTES), None)
        self.assertEqual(redirect_path("GET", "/config/", ROUTES), None)
        self.assertEqual(clean_path("//a/./b/../c/"), "/a/c/")
        self.assertEqual(clean_path(""), "/")
        self.assertEqual(len({(r.method, r.pattern) for r in ROUTES}), len(ROUTES))

    def test_handler_failure(self) -> None:
        """An exception in a handler is Go's panic answer, 500 INTERNAL_ERROR, and is logged."""

        def broken(name: str) -> None:
            raise RuntimeError("boom")

        self.broker.find_topic = broken  # type: ignore[assignment]
        self.assertError(self.post("/topic/empty?topic=t"), 500, "INTERNAL_ERROR")
        self.assertEqual(len(self.flushLoggedErrors(RuntimeError)), 1)


class DebugTests(HTTPTestCase):
    """/debug/pprof/...: Python's equivalents of Go's profiles."""

    def text(self, path: str) -> str:
        reply = self.get(path)
        self.assertEqual(reply.code, 200, reply)
        self.assertEqual(reply.header("Content-Type"), TEXT)
        self.assertIsNone(reply.header("X-NSQ-Content-Type"))
        return reply.body.decode("utf-8")

    def test_index(self) -> None:
        """The index page links every profile."""
        reply = self.get("/debug/pprof/")
        self.assertEqual(reply.header("Content-Type"), "text/html; charset=utf-8")
        for name in ("goroutine", "heap", "profile", "threadcreate", "cmdline", "block"):
            self.assertIn(b">%s</a>" % (name.encode(),), reply.body)

    def test_cmdline(self) -> None:
        """The command line, NUL separated."""
        self.assertEqual(self.text("/debug/pprof/cmdline"), "\x00".join(sys.argv))

    def test_goroutine(self) -> None:
        """Thread stacks, grouped, or each thread with debug=2 (this test is on one)."""
        grouped = self.text("/debug/pprof/goroutine?debug=1")
        self.assertTrue(grouped.startswith("thread profile: total "), grouped)
        self.assertIn("test_goroutine", grouped)
        full = self.text("/debug/pprof/goroutine?debug=2")
        self.assertIn("[MainThread]:\n", full)
        self.assertIn("test_goroutine()\n\t%s:" % (__file__.rstrip("c"),), full)

    def test_heap(self) -> None:
        """A memory summary: gc counters and objects by type; gc=1 collects first."""
        heap = self.text("/debug/pprof/heap?gc=1")
        self.assertIn("\n# gc\n", heap)
        self.assertIn("# objects tracked by the collector: ", heap)
        self.assertIn(" dict\n", heap)
        self.assertIn("\n# tracemalloc\n", heap)

    def test_threadcreate(self) -> None:
        """The live threads."""
        self.assertIn("MainThread ident=", self.text("/debug/pprof/threadcreate"))

    def test_symbol_and_block(self) -> None:
        """Go-only profiles answer in text that they have nothing."""
        self.assertEqual(self.text("/debug/pprof/symbol"), "num_symbols: 0\n")
        self.assertEqual(self.post("/debug/pprof/symbol", b"0x1").body, b"num_symbols: 0\n")
        self.assertIn("not available in Python", self.text("/debug/pprof/block"))

    def profile(self, path: str) -> Any:
        answered = self.client.request("GET", "http://nsqd" + path)
        self.client.flush()
        return answered

    def test_profile(self) -> None:
        """cProfile of the reactor thread for ?seconds=, as pstats text."""
        answered = self.profile("/debug/pprof/profile?seconds=2")
        self.assertNoResult(answered)
        self.post("/pub?topic=t", b"x")
        busy = self.get("/debug/pprof/profile")
        self.assertEqual(busy.code, 500)
        self.assertIn(b"already in use", busy.body)
        self.clock.advance(2)
        self.client.flush()
        response = self.successResultOf(answered)
        body = self.successResultOf(response.content())
        self.assertEqual(response.code, 200)
        self.assertIn(b"function calls", body)
        self.assertIn(b"Ordered by: cumulative time", body)

    def test_profile_pstats(self) -> None:
        """format=pstats gives the marshalled stats pstats loads; seconds defaults to 30."""
        answered = self.profile("/debug/pprof/profile?format=pstats&seconds=x")
        self.post("/pub?topic=t", b"x")
        self.clock.advance(29)
        self.client.flush()
        self.assertNoResult(answered)
        self.clock.advance(1)
        self.client.flush()
        response = self.successResultOf(answered)
        self.assertEqual(response.headers.getRawHeaders(b"content-type"), [b"application/octet-stream"])
        stats = marshal.loads(self.successResultOf(response.content()))
        self.assertIsInstance(stats, dict)
        # The request served in the window was profiled: (file, line, name) keys.
        self.assertIn("_serve", {name for (_, _, name) in stats})

    def test_setblockrate(self) -> None:
        """The rate is checked as Go does; a valid one is accepted (and has no effect)."""
        reply = self.request("PUT", "/debug/setblockrate?rate=x")
        self.assertEqual(reply.code, 400)
        self.assertEqual(reply.body, b'invalid block rate : strconv.Atoi: parsing "x": invalid syntax')
        self.assertEqual(self.request("PUT", "/debug/setblockrate?rate=1").code, 200)

    def test_freememory(self) -> None:
        """POST /debug/freememory collects garbage."""
        self.assertEqual(self.post("/debug/freememory").code, 200)


class QueryTests(SynchronousTestCase):
    """parse_query is Go's url.ParseQuery."""

    def test_values(self) -> None:
        """Pairs in order, '+' a space, escapes decoded, bare keys empty, empty pairs skipped."""
        values, error = parse_query(b"a=1&a=2&b=x+y%21&c&&d=%23e#f")
        self.assertIsNone(error)
        self.assertEqual(values, {"a": ["1", "2"], "b": ["x y!"], "c": [""], "d": ["#e#f"]})

    def test_errors(self) -> None:
        """';' and bad escapes are errors; the other pairs still parse."""
        self.assertEqual(
            parse_query(b"a=1;b=2&c=3"), ({"c": ["3"]}, "invalid semicolon separator in query")
        )
        self.assertEqual(parse_query(b"a=%2&c=%zz&d=1"), ({"d": ["1"]}, "invalid URL escape"))

    def test_bytes(self) -> None:
        """Any byte survives (as Latin-1)."""
        self.assertEqual(parse_query(b"t=%ff")[0], {"t": ["\xff"]})


class TopicChannelArgsTests(SynchronousTestCase):
    """topic_channel_args is Go's http_api.GetTopicChannelArgs."""

    def test_both(self) -> None:
        """The first topic and channel, in that order."""
        self.assertEqual(
            topic_channel_args({"topic": ["t", "u"], "channel": ["c"]}), ("t", "c")
        )

    def test_errors(self) -> None:
        """A missing or invalid topic is reported before anything about the channel."""
        cases = [
            ({"channel": ["bad name"]}, "MISSING_ARG_TOPIC"),
            ({"topic": ["bad name"]}, "INVALID_ARG_TOPIC"),
            ({"topic": ["t"]}, "MISSING_ARG_CHANNEL"),
            ({"topic": ["t"], "channel": ["bad name"]}, "INVALID_ARG_CHANNEL"),
        ]
        for values, text in cases:
            error = self.assertRaises(APIError, topic_channel_args, values)
            self.assertEqual((error.code, error.text), (400, text))


class BodyParserTests(SynchronousTestCase):
    """The /mpub body parsers."""

    def test_binary(self) -> None:
        """Messages in order; bytes after the last one are ignored."""
        self.assertEqual(parse_mpub_binary(_mpub(b"a", b"bc") + b"junk", 10, 100), [b"a", b"bc"])

    def test_binary_count_limit(self) -> None:
        """The count may not exceed what --max-body-size could hold ((size - 4) / 5)."""
        body = _mpub(*[b"x"] * 4)
        self.assertEqual(len(parse_mpub_binary(body, 10, 24)), 4)
        self.assertRaises(APIError, parse_mpub_binary, body, 10, 23)
        self.assertRaises(APIError, parse_mpub_binary, _mpub(b"x"), 10, 3)

    def test_lines_body_limit(self) -> None:
        """A body one byte over the limit is BODY_TOO_BIG unless a long line comes first."""
        self.assertEqual(parse_mpub_lines(b"ab\ncd", 10, 5), [b"ab", b"cd"])
        with self.assertRaises(APIError) as raised:
            parse_mpub_lines(b"ab\ncde", 10, 5)
        self.assertEqual(raised.exception.text, "BODY_TOO_BIG")
        with self.assertRaises(APIError) as raised:
            parse_mpub_lines(b"abc\ncd", 2, 5)
        self.assertEqual(raised.exception.text, "MSG_TOO_BIG")
        self.assertEqual(parse_mpub_lines(b"", 10, 5), [])


class GoJSONTests(SynchronousTestCase):
    """go_json writes what Go's json.Marshal writes."""

    def test_compact_ordered(self) -> None:
        """No spaces; keys in the mapping's order; null, booleans, ints."""
        self.assertEqual(
            go_json({"b": [1, True, None], "a": {"x": False}}),
            b'{"b":[1,true,null],"a":{"x":false}}',
        )

    def test_floats(self) -> None:
        """Integral floats without '.0', no exponent below 1e21, Go's short exponents."""
        for value, text in [
            (1.0, b"1"),
            (0.99, b"0.99"),
            (1e20, b"100000000000000000000"),
            (1e21, b"1e+21"),
            (1e-7, b"1e-7"),
            (1.5e-7, b"1.5e-7"),
            (0.000001, b"0.000001"),
            (-2.5, b"-2.5"),
            (0.0, b"0"),
        ]:
            self.assertEqual(go_json(value), text, value)

    def test_html_escapes(self) -> None:
        """<, > and & are escaped as Go does; other text is UTF-8."""
        self.assertEqual(go_json("<a&b>é\u2028"), '"\\u003ca\\u0026b\\u003eé\\u2028"'.encode("utf-8"))

    def test_surrogates(self) -> None:
        """A lone surrogate is written as U+FFFD."""
        self.assertEqual(go_json("a\ud800"), '"a\ufffd"'.encode("utf-8"))

    def test_unsupported(self) -> None:
        """Other types are refused."""
        self.assertRaises(TypeError, go_json, object())


class HTTPSOptionsTests(SynchronousTestCase):
    """tls_server_options builds the HTTPS listener's TLS settings."""

    def setUp(self) -> None:
        from tests.integration.test_http_process import write_self_signed

        self.directory = self.mktemp()
        import os

        os.makedirs(self.directory)
        self.cert, self.key = write_self_signed(self.directory)

    def options(self, **overrides: Any) -> NSQDOptions:
        values: Dict[str, Any] = dict(tls_cert=self.cert, tls_key=self.key, storage="memory")
        values.update(overrides)
        return NSQDOptions(**values)

    def test_none(self) -> None:
        """Without a certificate there is no HTTPS."""
        from txnsq.nsqd.tls import tls_server_options

        self.assertIsNone(tls_server_options(NSQDOptions()))

    def test_context(self) -> None:
        """A usable context; client certificates only with a policy."""
        from OpenSSL import SSL

        from txnsq.nsqd.tls import tls_server_options

        context = tls_server_options(self.options()).getContext()
        self.assertEqual(context.get_verify_mode(), SSL.VERIFY_NONE)
        required = tls_server_options(self.options(tls_client_auth_policy="require")).getContext()
        self.assertEqual(
            required.get_verify_mode(), SSL.VERIFY_PEER | SSL.VERIFY_FAIL_IF_NO_PEER_CERT
        )
        verified = tls_server_options(
            self.options(tls_client_auth_policy="require-verify", tls_root_ca_file=self.cert)
        ).getContext()
        self.assertTrue(verified.get_verify_mode() & SSL.VERIFY_PEER)

    def test_min_version(self) -> None:
        """--tls-min-version sets the lowest protocol offered."""
        from OpenSSL import SSL

        from txnsq.nsqd.tls import tls_server_options

        strict = tls_server_options(self.options(tls_min_version="tls1.3"))
        self.assertTrue(strict._options & SSL.OP_NO_TLSv1_2)
        lenient = tls_server_options(self.options(tls_min_version="tls1.0"))
        self.assertFalse(lenient._options & SSL.OP_NO_TLSv1)

    def test_errors(self) -> None:
        """A missing file, a file without a certificate, or a key that does not match fail."""
        from tests.integration.test_http_process import write_self_signed
        from txnsq.nsqd.service import TLSConfigError, tls_server_options

        self.assertRaises(TLSConfigError, tls_server_options, self.options(tls_cert="/no/such/file"))
        self.assertRaises(TLSConfigError, tls_server_options, self.options(tls_cert=self.key))
        self.assertRaises(TLSConfigError, tls_server_options, self.options(tls_key=self.cert))
        other = self.mktemp()
        import os

        os.makedirs(other)
        _, other_key = write_self_signed(other)
        self.assertRaises(TLSConfigError, tls_server_options, self.options(tls_key=other_key))


class BarrierTests(HTTPTestCase):
    """With --mem-queue-size=0 /pub and /mpub run the broker's barrier before answering OK."""

    def test_pub_and_mpub(self) -> None:
        """Each publish runs the barrier once, after publishing."""
        depths: List[int] = []
        self.broker.barrier = lambda: depths.append(self.broker.get_topic("t").depth())
        self.assertOK(self.post("/pub?topic=t", b"one"))
        self.assertOK(self.post("/pub?topic=t&defer=1000", b"two"))
        self.assertOK(self.post("/mpub?topic=t", b"three\nfour"))
        self.assertEqual(depths, [1, 2, 4])

    def disk_full(self, sync_every: int) -> Any:
        """A broker on disk storage with --mem-queue-size=0 whose topic ``t`` cannot write."""
        directory = self.mktemp()
        os.makedirs(directory)
        self.build(DiskStorage(), data_path=directory, mem_queue_size=0, sync_every=sync_every)
        self.addCleanup(self.broker.close)
        queue = self.broker.get_topic("t")._queue

        def full(fd: int, data: Any) -> int:
            raise OSError(errno.ENOSPC, "No space left on device")

        queue.os_write = full
        return queue

    def test_failed_write_not_ok(self) -> None:
        """A /pub whose write hits ENOSPC is answered 503 EXITING (Go's failed put), not OK; the queue keeps it in memory."""
        for sync_every in (2500, 1):
            queue = self.disk_full(sync_every)
            self.assertError(self.post("/pub?topic=t", b"one"), 503, "EXITING")
            self.assertEqual(queue.depth(), 1)
            self.assertIsNotNone(queue.error)

    def test_failed_mpub_write_not_ok(self) -> None:
        """An /mpub whose write hits ENOSPC is answered 503 EXITING, not OK."""
        queue = self.disk_full(1)
        self.assertError(self.post("/mpub?topic=t", b"a\nb"), 503, "EXITING")
        self.assertEqual(queue.depth(), 2)

    def test_refused_publish_skips_barrier(self) -> None:
        """A refused publish does not run it."""
        called: List[None] = []
        self.broker.barrier = lambda: called.append(None)
        self.assertError(self.post("/pub?topic=t", b""), 400, "MSG_EMPTY")
        self.assertEqual(called, [])
