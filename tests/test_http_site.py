"""
Tests for txnsq.http.site: the listener's channel reads request heads as Go's
net/http does and answers bytes that are not HTTP with Go's bytes, whatever
API it serves (here the smallest one, tests.test_http_routes.PingAPI).
"""

from __future__ import annotations

from typing import Any, Tuple

from twisted.internet.task import Clock
from twisted.internet.testing import StringTransport
from twisted.trial.unittest import SynchronousTestCase

from tests.test_http_routes import PingAPI
from txnsq.http.site import GoHTTPChannel, GoSite


class ChannelTransportTests(SynchronousTestCase):
    """The HTTP channel reads request heads as Go does."""

    def connect(self) -> Tuple[Any, StringTransport]:
        site = GoSite(PingAPI(Clock()).app.resource(), reactor=Clock())
        protocol = site.buildProtocol(None)
        transport = StringTransport()
        protocol.makeConnection(transport)
        return protocol, transport

    def test_v2_client(self) -> None:
        """A V2 client's first line gets Go's plain 400 and the connection closes."""
        protocol, transport = self.connect()
        protocol.dataReceived(b"  V2")
        self.assertEqual(transport.value(), b"")
        protocol.dataReceived(b'IDENTIFY\n\x00\x00\x00\x02{}')
        self.assertEqual(transport.value(), GoHTTPChannel.BAD_REQUEST)
        self.assertTrue(transport.disconnecting)

    def test_bare_newlines(self) -> None:
        """Head lines may end in a bare '\\n'."""
        protocol, transport = self.connect()
        protocol.dataReceived(b"GET /ping HTTP/1.1\nHost: x\n\n")
        self.assertTrue(transport.value().startswith(b"HTTP/1.1 200 OK\r\n"), transport.value())
        self.assertTrue(transport.value().endswith(b"\r\n\r\nOK"))
        self.assertIn(b"Content-Length: 2\r\n", transport.value())

    def test_absolute_form(self) -> None:
        """An absolute-form request target is routed by its path, as Go does."""
        protocol, transport = self.connect()
        protocol.dataReceived(b"GET http://nsqd:4151/ping HTTP/1.1\r\nHost: x\r\n\r\n")
        self.assertTrue(transport.value().endswith(b"\r\n\r\nOK"), transport.value())

    def test_head(self) -> None:
        """A 405 to HEAD has Go's headers, Content-Length included, and no body."""
        protocol, transport = self.connect()
        protocol.dataReceived(b"HEAD /ping HTTP/1.1\r\nHost: x\r\n\r\n")
        head = transport.value()
        self.assertTrue(head.startswith(b"HTTP/1.1 405 Method Not Allowed\r\n"), head)
        self.assertIn(b"\r\nAllow: GET, OPTIONS\r\n", head)
        self.assertIn(b"\r\nContent-Length: 32\r\n", head)
        self.assertTrue(head.endswith(b"\r\n\r\n"))
        self.assertNotIn(b"Server:", head)

    def test_head_too_large(self) -> None:
        """A head line past Go's limit is answered 431."""
        protocol, transport = self.connect()
        protocol.dataReceived(b"GET /" + b"x" * ((1 << 20) + 5000))
        self.assertEqual(transport.value(), GoHTTPChannel.HEADERS_TOO_LARGE)

    def test_quiet(self) -> None:
        """The site writes no access log (Go's APIs log requests themselves) and is not noisy."""
        site = GoSite(PingAPI(Clock()).app.resource(), reactor=Clock())
        self.assertFalse(site.noisy)
        self.assertIsNone(site.log(object()))
