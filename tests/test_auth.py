"""
Tests for txnsq.nsqd.auth, the HTTP client that asks auth servers: with a
memory reactor for the timeouts and against a real auth server on
127.0.0.1 for the rest.
"""

from __future__ import annotations

import json
from typing import Any, Dict, List
from urllib.parse import parse_qs, urlsplit

from twisted.internet import reactor as _global_reactor
from twisted.internet.defer import CancelledError, Deferred, DeferredList
from twisted.internet.task import Clock
from twisted.internet.testing import MemoryReactorClock
from twisted.logger import formatEvent, globalLogPublisher
from twisted.trial.unittest import SynchronousTestCase, TestCase
from twisted.web.resource import Resource
from twisted.web.server import NOT_DONE_YET, Request, Site

from tests.test_protocol_auth import GO_EXAMPLE, SECRET, reply
from txnsq.nsqd.auth import AuthClient
from txnsq.protocol.auth import AuthError

reactor: Any = _global_reactor


class AuthClientTimingTests(SynchronousTestCase):
    """AuthClient's timeouts and address order, on a memory reactor."""

    def setUp(self) -> None:
        self.reactor = MemoryReactorClock()

    def client(self, addresses: List[str], start: int = 0) -> AuthClient:
        return AuthClient(addresses, self.reactor, 2.0, 5.0, pick_start=lambda n: start)

    def test_connectTimeout(self) -> None:
        """Connections are attempted with the connect timeout."""
        self.client(["127.0.0.1:4181"]).query("10.0.0.1", False, SECRET, "")
        [(host, port, _, timeout, _)] = self.reactor.tcpClients
        self.assertEqual((host, port, timeout), ("127.0.0.1", 4181, 2.0))

    def test_requestTimeout(self) -> None:
        """A request still unanswered after the request timeout fails the query."""
        query = self.client(["127.0.0.1:4181"]).query("10.0.0.1", False, SECRET, "")
        self.reactor.advance(4.9)
        self.assertNoResult(query)
        self.reactor.advance(0.1)
        error = self.failureResultOf(query, AuthError).value
        self.assertEqual(
            str(error),
            "failed to auth against 127.0.0.1:4181 - request timed out"
            " (Client.Timeout 5s exceeded)",
        )
        self.assertEqual(self.reactor.getDelayedCalls(), [])

    def test_startIndex(self) -> None:
        """Addresses are tried from the picked start, wrapping around."""
        query = self.client(["127.0.0.1:1", "127.0.0.1:2", "127.0.0.1:3"], start=1).query(
            "", False, SECRET, ""
        )
        for _ in range(3):
            self.reactor.advance(5.0)
        self.assertEqual([client[1] for client in self.reactor.tcpClients], [2, 3, 1])
        error = self.failureResultOf(query, AuthError).value
        self.assertEqual(str(error).count("failed to auth against"), 3)
        self.assertTrue(str(error).startswith("failed to auth against 127.0.0.1:2 - "))
        self.assertIn("; failed to auth against 127.0.0.1:3 - ", str(error))

    def test_pickStartGetsCount(self) -> None:
        """The start is picked among as many indices as there are addresses."""
        seen: List[int] = []

        def pick(count: int) -> int:
            seen.append(count)
            return 0

        AuthClient(["h:1", "h:2"], self.reactor, 1.0, 1.0, pick_start=pick).query(
            "", False, b"", ""
        )
        self.assertEqual(seen, [2])

    def test_cancel(self) -> None:
        """Cancelling a query stops it without trying the other addresses."""
        query = self.client(["127.0.0.1:1", "127.0.0.1:2"]).query("", False, SECRET, "")
        query.cancel()
        self.failureResultOf(query, CancelledError)
        self.reactor.advance(10.0)
        self.assertEqual(len(self.reactor.tcpClients), 1)
        self.assertEqual(self.reactor.getDelayedCalls(), [])

    def test_badArguments(self) -> None:
        """No addresses, or a method other than get and post, is refused."""
        self.assertRaises(ValueError, AuthClient, [], self.reactor, 1.0, 1.0)
        self.assertRaises(ValueError, AuthClient, ["h:1"], self.reactor, 1.0, 1.0, "put")


class SeenRequest:
    """What the fake auth server received."""

    def __init__(self, request: Request) -> None:
        self.method = request.method
        self.path = request.path
        self.uri = request.uri
        self.query = parse_qs(urlsplit(request.uri.decode()).query, keep_blank_values=True)
        self.accept = request.getHeader(b"accept")
        self.content_type = request.getHeader(b"content-type")
        assert request.content is not None
        self.body = request.content.read()


class FakeAuthd(Resource):
    """An auth server answering every request with one status and body."""

    isLeaf = True

    def __init__(self, code: int = 200, body: bytes = GO_EXAMPLE, hang: bool = False) -> None:
        Resource.__init__(self)
        self.code = code
        self.body = body
        self.hang = hang
        self.requests: List[SeenRequest] = []
        self.received: Deferred[None] = Deferred()

    def render(self, request: Request) -> Any:
        self.requests.append(SeenRequest(request))
        if not self.received.called:
            self.received.callback(None)
        if self.hang:
            return NOT_DONE_YET
        request.setResponseCode(self.code)
        request.setHeader(b"content-type", b"application/json")
        return self.body


class QuietSite(Site):
    """
    A Site that logs no access lines (they hold the secret) and can wait
    for its connections to close.
    """

    def __init__(self, resource: Resource) -> None:
        Site.__init__(self, resource)
        self.closed: List[Deferred[None]] = []

    def log(self, request: Any) -> None:
        pass

    def buildProtocol(self, addr: Any) -> Any:
        channel = Site.buildProtocol(self, addr)
        done: Deferred[None] = Deferred()
        self.closed.append(done)
        connection_lost = channel.connectionLost

        def lost(reason: Any) -> None:
            connection_lost(reason)
            done.callback(None)

        channel.connectionLost = lost
        return channel


class AuthClientIntegrationTests(TestCase):
    """AuthClient against a real HTTP auth server on 127.0.0.1."""

    def setUp(self) -> None:
        self.clock = Clock()
        self.clock.advance(1000.0)

    def serve(self, resource: Resource) -> str:
        """Run ``resource`` on a free port; its address."""
        site = QuietSite(resource)
        port = reactor.listenTCP(0, site, interface="127.0.0.1")

        def shut_down() -> Deferred[Any]:
            # Wait for the server's side of every connection to close, so
            # no socket outlives the test.
            waiting = DeferredList(list(site.closed))
            return waiting.addCallback(lambda _: port.stopListening())

        self.addCleanup(shut_down)
        return "127.0.0.1:%d" % (port.getHost().port,)

    def closed_address(self) -> Deferred[str]:
        """An address where nothing listens (a port just closed)."""
        port = reactor.listenTCP(0, Site(Resource()), interface="127.0.0.1")
        address = "127.0.0.1:%d" % (port.getHost().port,)
        return Deferred.fromCoroutine(self._stop(port, address))

    async def _stop(self, port: Any, address: str) -> str:
        await port.stopListening()
        return address

    def client(self, addresses: List[str], method: str = "get") -> AuthClient:
        return AuthClient(
            addresses, reactor, 2.0, 5.0, method, clock=self.clock, pick_start=lambda n: 0
        )

    async def test_success(self) -> None:
        """The server's reply becomes the state; it was asked with Go's parameters."""
        authd = FakeAuthd()
        address = self.serve(authd)
        state = await self.client([address]).query("10.1.2.3", True, SECRET, "client.example")
        self.assertEqual((state.identity, state.expires), ("user", 4600.0))
        self.assertTrue(state.is_allowed("t", "c"))
        [seen] = authd.requests
        self.assertEqual((seen.method, seen.path), (b"GET", b"/auth"))
        self.assertEqual(
            seen.query,
            {
                "remote_ip": ["10.1.2.3"],
                "tls": ["true"],
                "secret": [SECRET.decode()],
                "common_name": ["client.example"],
            },
        )
        self.assertEqual(seen.accept, b"application/vnd.nsq; version=1.0")

    async def test_fullURL(self) -> None:
        """An address with a scheme is requested at its own path."""
        authd = FakeAuthd()
        address = "http://%s/v1/check" % (self.serve(authd),)
        await self.client([address]).query("", False, b"x", "")
        self.assertEqual(authd.requests[0].path, b"/v1/check")
        self.assertEqual(authd.requests[0].query["remote_ip"], [""])
        self.assertEqual(authd.requests[0].query["tls"], ["false"])

    async def test_post(self) -> None:
        """With method post the parameters are a JSON body, not a query."""
        authd = FakeAuthd()
        address = self.serve(authd)
        await self.client([address], method="post").query("10.1.2.3", False, SECRET, "")
        [seen] = authd.requests
        self.assertEqual((seen.method, seen.uri), (b"POST", b"/auth"))
        self.assertEqual(seen.content_type, b"application/json")
        self.assertEqual(
            json.loads(seen.body),
            {
                "common_name": [""],
                "remote_ip": ["10.1.2.3"],
                "secret": [SECRET.decode()],
                "tls": ["false"],
            },
        )

    async def test_denied403(self) -> None:
        """A 403 whose body names no HTTPS port fails the query."""
        address = self.serve(FakeAuthd(403, b""))
        error = await self.assertFailure(
            self.client([address]).query("", False, SECRET, ""), AuthError
        )
        self.assertTrue(str(error).startswith("failed to auth against %s - " % (address,)))

    async def test_non200(self) -> None:
        """Any other status fails with Go's "got response" text."""
        address = self.serve(FakeAuthd(500, b"no"))
        error = await self.assertFailure(
            self.client([address]).query("", False, SECRET, ""), AuthError
        )
        self.assertEqual(
            str(error),
            'failed to auth against %s - got response 500 Internal Server Error "no"'
            % (address,),
        )

    async def test_garbage(self) -> None:
        """A 200 whose body is not an auth reply fails the query."""
        address = self.serve(FakeAuthd(200, b"<html>"))
        error = await self.assertFailure(
            self.client([address]).query("", False, SECRET, ""), AuthError
        )
        self.assertIn("invalid JSON in auth response", str(error))

    async def test_invalidReply(self) -> None:
        """A 200 reply Go would refuse fails with Go's validation text."""
        address = self.serve(FakeAuthd(200, reply(0)))
        error = await self.assertFailure(
            self.client([address]).query("", False, SECRET, ""), AuthError
        )
        self.assertEqual(
            str(error), "failed to auth against %s - invalid TTL 0 (must be >0)" % (address,)
        )

    async def test_unreachable(self) -> None:
        """A refused connection fails the query."""
        address = await self.closed_address()
        error = await self.assertFailure(
            self.client([address]).query("", False, SECRET, ""), AuthError
        )
        self.assertTrue(str(error).startswith("failed to auth against %s - " % (address,)))
        self.assertIn("refused", str(error))

    async def test_hangingServer(self) -> None:
        """A server that never answers fails the query after the request timeout."""
        authd = FakeAuthd(hang=True)
        address = self.serve(authd)
        query = self.client([address]).query("", False, SECRET, "")
        await authd.received
        self.assertNoResult(query)
        self.clock.advance(5.0)
        error = self.failureResultOf(query, AuthError).value
        self.assertEqual(
            str(error),
            "failed to auth against %s - request timed out (Client.Timeout 5s exceeded)"
            % (address,),
        )

    async def test_firstAddressDown(self) -> None:
        """When the first address is down the next one answers."""
        down = await self.closed_address()
        authd = FakeAuthd()
        up = self.serve(authd)
        state = await self.client([down, up]).query("10.1.2.3", False, SECRET, "")
        self.assertEqual(state.identity, "user")
        self.assertEqual(len(authd.requests), 1)

    async def test_allDown(self) -> None:
        """When every address fails, each failure is in the error, in order."""
        down = await self.closed_address()
        bad = self.serve(FakeAuthd(500, b""))
        error = await self.assertFailure(
            self.client([bad, down]).query("", False, SECRET, ""), AuthError
        )
        first, second = str(error).split("; ")
        self.assertEqual(
            first, 'failed to auth against %s - got response 500 Internal Server Error ""' % (bad,)
        )
        self.assertTrue(second.startswith("failed to auth against %s - " % (down,)))

    async def test_secretNeverLogged(self) -> None:
        """
        A failed query's error and log never hold the secret; the client's
        own connections' framework lines ("Starting factory") are not on
        the daemons' console (FrameworkChatterFilter).
        """
        events: List[Dict[str, Any]] = []
        globalLogPublisher.addObserver(events.append)
        self.addCleanup(globalLogPublisher.removeObserver, events.append)
        secret = b"TOPSECRET-7f3a"
        down = await self.closed_address()
        garbage = self.serve(FakeAuthd(200, b"nope"))
        error = await self.assertFailure(
            self.client([down, garbage]).query("", False, secret, ""), AuthError
        )
        self.assertNotIn("TOPSECRET", str(error))
        from twisted.logger import LogLevel, LogLevelFilterPredicate, PredicateResult

        from txnsq.logging import FrameworkChatterFilter

        console = FrameworkChatterFilter(LogLevelFilterPredicate(defaultLogLevel=LogLevel.info))
        shown = [e for e in events if console(e) is not PredicateResult.no]
        self.assertEqual([formatEvent(e) for e in shown if "ClientFactory" in formatEvent(e)], [])
        for event in events:
            self.assertNotIn("TOPSECRET", formatEvent(event))
            self.assertNotIn("TOPSECRET", repr(event))
