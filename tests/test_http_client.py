"""
Tests for txnsq.http_client: Go http_api's manners (headers, timeouts,
error texts), against a real HTTP server on 127.0.0.1; the request timeout
runs on a ``task.Clock`` so nothing waits.
"""

from __future__ import annotations

from typing import Any, Generator, List

from twisted.internet.defer import Deferred, inlineCallbacks
from twisted.internet.error import ConnectionRefusedError
from twisted.internet.task import Clock
from twisted.trial.unittest import SynchronousTestCase, TestCase
from twisted.web.client import ResponseFailed
from twisted.web.resource import Resource
from twisted.web.server import NOT_DONE_YET, Request, Site

from txnsq.http_client import (
    ACCEPT,
    GoHTTPClient,
    RequestTimedOut,
    describe_failure,
    status_error_text,
)


class Recorder(Resource):
    """Answers every request with its own method, headers and body echoed; ``/hang`` never answers."""

    isLeaf = True

    def __init__(self) -> None:
        Resource.__init__(self)
        self.hanging: List[Request] = []

    def render(self, request: Request) -> Any:
        if request.path == b"/hang":
            self.hanging.append(request)
            return NOT_DONE_YET
        if request.path == b"/missing":
            request.setResponseCode(404)
            return b'{"message":"TOPIC_NOT_FOUND"}'
        assert request.content is not None
        return b"|".join(
            [
                request.method,
                request.getHeader(b"accept") or b"",
                request.getHeader(b"user-agent") or b"",
                request.getHeader(b"content-type") or b"",
                request.content.read(),
            ]
        )


class GoHTTPClientTests(TestCase):
    """Requests to a real server on 127.0.0.1."""

    def setUp(self) -> None:
        from twisted.internet import reactor

        self.reactor = reactor
        self.resource = Recorder()
        site = Site(self.resource)
        site.noisy = False
        self.port = reactor.listenTCP(0, site, interface="127.0.0.1")
        self.addCleanup(self.port.stopListening)
        self.clock = Clock()
        self.client = GoHTTPClient(reactor, 2.0, 5.0, clock=self.clock, user_agent=b"test-agent")
        self.base = "http://127.0.0.1:%d" % (self.port.getHost().port,)

    @inlineCallbacks
    def test_get_headers(self) -> Generator[Any, Any, None]:
        """A GET carries NSQ's Accept header and the User-Agent, and no body."""
        code, phrase, content = yield self.client.request("GET", self.base + "/x")
        self.assertEqual((code, phrase), (200, b"OK"))
        self.assertEqual(content, b"GET|" + ACCEPT + b"|test-agent||")

    @inlineCallbacks
    def test_post_body(self) -> Generator[Any, Any, None]:
        """A POST body goes out with its content type."""
        code, _, content = yield self.client.request("POST", self.base + "/x", b'{"a":1}')
        self.assertEqual(code, 200)
        self.assertEqual(content, b"POST|" + ACCEPT + b'|test-agent|application/json|{"a":1}')

    @inlineCallbacks
    def test_status_passed_through(self) -> Generator[Any, Any, None]:
        """Any status is a reply, not a failure; the caller decides."""
        code, phrase, content = yield self.client.request("GET", self.base + "/missing")
        self.assertEqual((code, phrase, content), (404, b"Not Found", b'{"message":"TOPIC_NOT_FOUND"}'))

    @inlineCallbacks
    def test_timeout(self) -> Generator[Any, Any, None]:
        """A server that never answers: RequestTimedOut with Go's text once the request timeout passes."""
        requested = self.client.request("GET", self.base + "/hang")
        while not self.resource.hanging:
            yield _turn(self.reactor)
        self.clock.advance(5.0)
        error = yield self.assertFailure(requested, RequestTimedOut)
        self.assertEqual(str(error), "request timed out (Client.Timeout 5s exceeded)")
        self.assertEqual(self.clock.getDelayedCalls(), [])

    @inlineCallbacks
    def test_answer_cancels_timer(self) -> Generator[Any, Any, None]:
        """No timer is left once the reply arrived."""
        yield self.client.request("GET", self.base + "/x")
        self.assertEqual(self.clock.getDelayedCalls(), [])

    @inlineCallbacks
    def test_refused(self) -> Generator[Any, Any, None]:
        """A refused connection fails with the transport's error, not a timeout."""
        yield self.port.stopListening()
        yield self.assertFailure(
            self.client.request("GET", self.base + "/x"), ConnectionRefusedError
        )

    def test_not_ascii(self) -> None:
        """A URL that is not ASCII is refused before anything is sent."""
        self.assertRaises(UnicodeEncodeError, self.client.request, "GET", self.base + "/é")


class HeadersEcho(Resource):
    """
    Echoes the Accept, User-Agent, Content-Type and X-Extra headers;
    ``/moved`` redirects to ``/x`` with 302, ``/temporary`` with 307.
    """

    isLeaf = True

    def render(self, request: Request) -> Any:
        if request.path == b"/moved":
            request.redirect(b"/x")
            return b""
        if request.path == b"/temporary":
            request.setResponseCode(307)
            request.setHeader(b"location", b"/x")
            return b""
        return b"|".join(
            [request.method]
            + [
                request.getHeader(name) or b"-"
                for name in (b"accept", b"user-agent", b"content-type", b"x-extra")
            ]
        )


class PlainClientTests(TestCase):
    """The manners of a plain Go ``http.Client`` (nsq_to_http): no Accept, more headers, redirects, kept connections."""

    def setUp(self) -> None:
        from twisted.internet import reactor

        site = Site(HeadersEcho())
        site.noisy = False
        self.port = reactor.listenTCP(0, site, interface="127.0.0.1")
        self.addCleanup(self.port.stopListening)
        self.client = GoHTTPClient(
            reactor, 2.0, 5.0, user_agent=b"agent", accept=None, persistent=True, follow_redirects=True
        )
        self.addCleanup(self.client.close)
        self.base = "http://127.0.0.1:%d" % (self.port.getHost().port,)

    @inlineCallbacks
    def test_headers_replace(self) -> Generator[Any, Any, None]:
        """No Accept header; extra headers are added and replace the client's own."""
        _, _, content = yield self.client.request(
            "POST",
            self.base + "/x",
            b"body",
            content_type=b"text/plain",
            headers={b"User-Agent": b"mine", b"Content-Type": b"text/csv", b"X-Extra": b"1"},
        )
        self.assertEqual(content, b"POST|-|mine|text/csv|1")

    @inlineCallbacks
    def test_redirect_followed(self) -> Generator[Any, Any, None]:
        """A redirect is followed; a redirected POST becomes a GET, as in Go."""
        code, _, content = yield self.client.request("POST", self.base + "/moved", b"body")
        self.assertEqual(code, 200)
        self.assertTrue(content.startswith(b"GET|-|agent|"), content)

    @inlineCallbacks
    def test_temporary_redirect(self) -> Generator[Any, Any, None]:
        """A 307 is followed for a GET; a POST answered 307 fails rather than lose its body."""
        code, _, content = yield self.client.request("GET", self.base + "/temporary")
        self.assertEqual((code, content), (200, b"GET|-|agent|-|-"))
        yield self.assertFailure(
            self.client.request("POST", self.base + "/temporary", b"body"), ResponseFailed
        )

    @inlineCallbacks
    def test_connections_kept(self) -> Generator[Any, Any, None]:
        """Requests reuse a kept connection; close() closes it."""
        yield self.client.request("GET", self.base + "/x")
        yield self.client.request("GET", self.base + "/x")
        self.assertEqual(sum(len(v) for v in self.client._pool._connections.values()), 1)
        yield self.client.close()
        self.assertEqual(sum(len(v) for v in self.client._pool._connections.values()), 0)


class TextTests(SynchronousTestCase):
    def test_status_error_text(self) -> None:
        """Go's ``got response CODE PHRASE "body"``."""
        self.assertEqual(
            status_error_text(500, b"Internal Server Error", b'{"message":"x"}'),
            'got response 500 Internal Server Error "{\\"message\\":\\"x\\"}"',
        )

    def test_describe(self) -> None:
        """Timeouts keep their text; other errors say their type."""
        self.assertEqual(describe_failure(RequestTimedOut("request timed out")), "request timed out")
        self.assertEqual(describe_failure(ValueError("bad")), "ValueError: bad")
        self.assertEqual(describe_failure(ResponseFailed([])), "")


def _turn(reactor: Any) -> "Deferred[None]":
    """One reactor turn."""
    waiting: Deferred[None] = Deferred()
    reactor.callLater(0, waiting.callback, None)
    return waiting
