"""
``nsq_to_http`` as a real process: it consumes from an nsqd running in the
test's reactor and sends to a small HTTP server of the test, both on
127.0.0.1.  GET templates, POST bodies with their content type and custom
headers, a 500 answer requeueing the message, a clean exit on SIGTERM and
SIGINT.  Waits poll a condition under a deadline; nothing sleeps.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Dict, Generator, List, Optional

from twisted.internet import reactor
from twisted.internet.defer import inlineCallbacks
from twisted.trial.unittest import TestCase
from twisted.web.resource import Resource
from twisted.web.server import Request, Site

from tests.integration.test_tools_process import ToolProcess, ended_within, spawn, wait_for
from txnsq.version import NSQ_VERSION
from txnsq.http_client import GoHTTPClient
from txnsq.testing import start_nsqd


@dataclass
class Seen:
    """One request the endpoint received."""

    method: bytes
    uri: bytes
    args: Dict[bytes, List[bytes]]
    headers: Dict[bytes, bytes]
    body: bytes


class Endpoint(Resource):
    """
    Records every request; answers 200 ``ok``, except that a path in
    :attr:`failures` is answered 500 that many times first.
    """

    isLeaf = True

    def __init__(self) -> None:
        Resource.__init__(self)
        self.seen: List[Seen] = []
        self.failures: Dict[bytes, int] = {}

    def render(self, request: Request) -> bytes:
        assert request.content is not None
        self.seen.append(
            Seen(
                request.method,
                request.uri,
                dict(request.args),
                {
                    name.lower(): values[-1]
                    for name, values in request.requestHeaders.getAllRawHeaders()
                },
                request.content.read(),
            )
        )
        remaining = self.failures.get(request.path, 0)
        if remaining:
            self.failures[request.path] = remaining - 1
            request.setResponseCode(500)
            return b"try again"
        return b"ok"


class NSQToHTTPProcessTests(TestCase):
    """nsq_to_http between a live nsqd and a live HTTP endpoint."""

    timeout = 120

    @inlineCallbacks
    def setUp(self) -> Generator[Any, Any, None]:  # type: ignore[override]
        self.nsqd = yield start_nsqd()
        self.addCleanup(self.nsqd.stop)
        self.http = GoHTTPClient(reactor, 2.0, 5.0)
        self.endpoint = Endpoint()
        site = Site(self.endpoint)
        site.noisy = False
        port = reactor.listenTCP(0, site, interface="127.0.0.1")  # type: ignore[attr-defined]
        self.addCleanup(port.stopListening)
        self.base = "http://127.0.0.1:%d" % (port.getHost().port,)

    @inlineCallbacks
    def publish(self, topic: str, body: bytes) -> Generator[Any, Any, None]:
        code, _, content = yield self.http.request(
            "POST", "http://%s/pub?topic=%s" % (self.nsqd.http_address, topic), body
        )
        self.assertEqual(code, 200, content)

    @inlineCallbacks
    def channel_stats(self, topic: str) -> Generator[Any, Any, Dict[str, Any]]:
        _, _, content = yield self.http.request(
            "GET", "http://%s/stats?format=json&topic=%s" % (self.nsqd.http_address, topic)
        )
        for topic_stats in json.loads(content)["topics"]:
            for channel in topic_stats["channels"]:
                if channel["channel_name"] == "nsq_to_http":
                    return channel
        return {}

    def start(self, topic: str, *args: str) -> ToolProcess:
        process = spawn(
            "nsq_to_http",
            ["--topic=" + topic, "--nsqd-tcp-address=" + self.nsqd.tcp_address] + list(args),
        )
        self.addCleanup(self.stop, process)
        return process

    def stop(self, process: ToolProcess) -> Any:
        if process.ended.called:
            return None
        try:
            process.signal("KILL")
        except Exception:
            pass
        return process.ended

    @inlineCallbacks
    def finished(self, topic: str, count: int, requeued: int = 0) -> Generator[Any, Any, None]:
        """Wait until ``count`` messages went through the channel and were all FINished."""

        @inlineCallbacks
        def done() -> Generator[Any, Any, bool]:
            stats = yield self.channel_stats(topic)
            return (
                stats.get("message_count") == count
                and stats.get("depth") == 0
                and stats.get("in_flight_count") == 0
                and stats.get("requeue_count") == requeued
            )

        yield wait_for(done, "%d messages FINished" % (count,))

    @inlineCallbacks
    def stopped(self, process: ToolProcess, signal: str = "TERM") -> Generator[Any, Any, None]:
        process.signal(signal)
        code: Optional[int] = yield ended_within(process)
        self.assertEqual(code, 0, process.err)

    @inlineCallbacks
    def test_get_template(self) -> Generator[Any, Any, None]:
        """Each message is sent once as a GET with the body query-escaped into the template."""
        yield self.publish("gets", b"hello world")
        yield self.publish("gets", b"a&b=c/d")
        process = self.start("gets", "--get=" + self.base + "/hook?msg=%s&source=nsq")
        yield wait_for(lambda: len(self.endpoint.seen) >= 2, "two GETs")
        yield self.finished("gets", 2)
        # The two requests run concurrently (-n 100): their arrival order is not promised.
        seen = sorted(self.endpoint.seen, key=lambda request: request.uri)
        self.assertEqual([request.method for request in seen], [b"GET", b"GET"])
        self.assertEqual(
            [request.uri for request in seen],
            [b"/hook?msg=a%26b%3Dc%2Fd&source=nsq", b"/hook?msg=hello+world&source=nsq"],
        )
        self.assertEqual([request.args[b"msg"] for request in seen], [[b"a&b=c/d"], [b"hello world"]])
        self.assertEqual(seen[0].headers[b"user-agent"], ("nsq_to_http v%s" % (NSQ_VERSION,)).encode())
        self.assertNotIn(b"accept", seen[0].headers)
        yield self.stopped(process)

    @inlineCallbacks
    def test_post_with_headers(self) -> Generator[Any, Any, None]:
        """A POST carries the message as its body, --content-type and every --header."""
        yield self.publish("posts", b'{"event":"signup"}')
        process = self.start(
            "posts",
            "--post=" + self.base + "/events",
            "--content-type=application/json",
            "--header=X-Api-Key: secret",
            "--header=X-Source:nsq",
        )
        yield wait_for(lambda: self.endpoint.seen, "a POST")
        yield self.finished("posts", 1)
        (request,) = self.endpoint.seen
        self.assertEqual((request.method, request.uri), (b"POST", b"/events"))
        self.assertEqual(request.body, b'{"event":"signup"}')
        self.assertEqual(request.headers[b"content-type"], b"application/json")
        self.assertEqual(request.headers[b"x-api-key"], b"secret")
        self.assertEqual(request.headers[b"x-source"], b"nsq")
        yield self.stopped(process, "INT")

    @inlineCallbacks
    def test_server_error_requeues(self) -> Generator[Any, Any, None]:
        """A 500 answer requeues the message; it comes again and is FINished on 200."""
        self.endpoint.failures[b"/flaky"] = 1
        yield self.publish("flaky", b"important")
        process = self.start(
            "flaky",
            "--post=" + self.base + "/flaky",
            "--consumer-opt=default_requeue_delay,0",
            "--consumer-opt=max_backoff_duration,0",
        )
        yield wait_for(lambda: len(self.endpoint.seen) >= 2, "the message a second time")
        yield self.finished("flaky", 1, requeued=1)
        self.assertEqual([request.body for request in self.endpoint.seen], [b"important", b"important"])
        yield self.stopped(process)
        self.assertIn(b"Handler returned error (got status code 500) for msg", process.err)
