"""
Tests for txnsq.nsqd.auth: authorization checks, the auth server's reply,
the query Go nsqd sends, and the HTTP client -- with a memory reactor for
the timeouts and against a real auth server on 127.0.0.1 for the rest.
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

from txnsq.nsqd.auth import (
    AuthClient,
    AuthError,
    AuthState,
    Authorization,
    GoRegexpError,
    auth_query_url,
    auth_response_body,
    compile_go_regexp,
    has_authorizations,
    https_endpoint,
    parse_auth_response,
    unauthorized_description,
)

reactor: Any = _global_reactor

#: The reply in Go nsqd's documentation.
GO_EXAMPLE = json.dumps(
    {
        "ttl": 3600,
        "identity": "user",
        "identity_url": "http://example.com/user",
        "authorizations": [
            {"permissions": ["subscribe", "publish"], "topic": ".*", "channels": [".*"]}
        ],
    }
).encode()

SECRET = b"s3cr3t token/+&="


def reply(ttl: int = 3600, *authorizations: Dict[str, Any]) -> bytes:
    """An auth reply holding ``authorizations``."""
    return json.dumps(
        {"ttl": ttl, "identity": "i", "identity_url": "u", "authorizations": list(authorizations)}
    ).encode()


class GoRegexpTests(SynchronousTestCase):
    """compile_go_regexp matches what Go's regexp matches."""

    def assertMatches(self, pattern: str, matching: List[str], other: List[str]) -> None:
        compiled = compile_go_regexp(pattern)
        for text in matching:
            self.assertIsNotNone(compiled.search(text), (pattern, text))
        for text in other:
            self.assertIsNone(compiled.search(text), (pattern, text))

    def test_unanchoredSearch(self) -> None:
        """A pattern matches anywhere in the name, as Go's MatchString."""
        self.assertMatches("foo", ["foo", "xfoox", "afoo"], ["fo", "bar"])

    def test_anchors(self) -> None:
        """^ and $ (and Go's \\z) anchor the match to the whole name."""
        self.assertMatches("^foo$", ["foo"], ["xfoo", "foox"])
        self.assertMatches("^foo\\z", ["foo"], ["foox"])
        self.assertMatches("\\Afoo", ["foo"], ["xfoo"])

    def test_emptyPatternMatchesEverything(self) -> None:
        """The empty pattern matches every name, the empty one included."""
        self.assertMatches("", ["", "anything"], [])

    def test_flagsMidPattern(self) -> None:
        """A (?i) after the start applies to the rest of its group, across |."""
        self.assertMatches("^a(?i)b$|^c$", ["aB", "ab", "C"], ["AB"])
        self.assertMatches("^(a(?i)b|c)d$", ["aBd", "Cd"], ["CD", "ABd"])
        self.assertMatches("(?i)^TOPIC$", ["topic", "Topic"], ["topics"])

    def test_scopedAndClearedFlags(self) -> None:
        """(?i:...) and (?-i) scope case folding as in Go; U is accepted."""
        self.assertMatches("^(?i:a)b$", ["Ab"], ["AB"])
        self.assertMatches("(?i)^a(?-i)b$", ["Ab"], ["AB"])
        self.assertMatches("(?U)^a+$", ["aaa"], ["b"])
        self.assertMatches("(?)^a$", ["a"], ["b"])

    def test_posixClasses(self) -> None:
        """RE2's [[:name:]] classes are their ASCII sets."""
        self.assertMatches("^[[:alpha:]_]+$", ["ab_C"], ["a1"])
        self.assertMatches("^[^[:digit:]]+$", ["ab"], ["a1"])
        self.assertMatches("^[[:punct:]]$", ["!", "[", "]", "`", "~"], ["a", " "])
        self.assertMatches("^[[:word:]]+$", ["a_1"], ["a-1"])

    def test_escapes(self) -> None:
        """\\Q...\\E, \\x{...}, octal and \\s read as Go reads them."""
        self.assertMatches("^\\Qa.b\\E$", ["a.b"], ["axb"])
        self.assertMatches("^\\x{41}\\x42$", ["AB"], ["ab"])
        self.assertMatches("^\\101$", ["A"], ["a"])
        self.assertMatches("^\\s$", [" ", "\t"], ["\v"])
        self.assertMatches("^\\d+$", ["123"], ["\u0661"])

    def test_literalBrace(self) -> None:
        """A { that starts no repetition is literal ({,5} is not a repeat in Go)."""
        self.assertMatches("^a{,5}$", ["a{,5}"], ["aaa"])
        self.assertMatches("^a{2}$", ["aa"], ["a"])

    def test_namedGroups(self) -> None:
        """Both (?P<name>...) and Go 1.22's (?<name>...) are groups."""
        self.assertMatches("^(?P<t>a)(?<u>b)$", ["ab"], ["a"])

    def test_refusedLikeGo(self) -> None:
        """Python-only syntax is refused with Go's error text."""
        cases = {
            "(a": "missing closing ): `(a`",
            "a)": "unexpected ): `a)`",
            "[a": "missing closing ]: `[a`",
            "\\1": "invalid escape sequence: `\\1`",
            "(?=a)": "invalid or unsupported Perl syntax: `(?=`",
            "(?<!a)b": "invalid or unsupported Perl syntax: `(?<`",
            "(?#x)": "invalid or unsupported Perl syntax: `(?#`",
            "(?x)a": "invalid or unsupported Perl syntax: `(?x`",
            "(?P=n)": "invalid named capture: `(?P=`",
            "a**": "invalid nested repetition operator: `*`",
            "a*+": "invalid nested repetition operator: `+`",
            "a{1001}": "invalid repeat count: `{1001}`",
            "\\Z": "invalid escape sequence: `\\Z`",
            "[\\b]": "invalid escape sequence: `\\b`",
            "[[:foo:]]": "invalid character class range: `[:foo:]`",
            "\\": "trailing backslash at end of expression: ``",
        }
        for pattern, message in cases.items():
            error = self.assertRaises(GoRegexpError, compile_go_regexp, pattern)
            self.assertEqual(str(error), "error parsing regexp: " + message, pattern)

    def test_unsupportedFailsClosed(self) -> None:
        """RE2 syntax Python cannot run is refused rather than guessed at."""
        for pattern in ["\\pL", "\\p{Greek}", "[[:^alpha:]]", "\\C"]:
            self.assertRaises(GoRegexpError, compile_go_regexp, pattern)


class AuthorizationTests(SynchronousTestCase):
    """Authorization.is_allowed is Go's Authorization.IsAllowed."""

    def test_subscribeNeedsSubscribePermission(self) -> None:
        """A non-empty channel is a subscription: it needs "subscribe"."""
        publish_only = Authorization(".*", [".*"], ["publish"])
        both = Authorization(".*", [".*"], ["subscribe", "publish"])
        self.assertFalse(publish_only.is_allowed("t", "c"))
        self.assertTrue(both.is_allowed("t", "c"))

    def test_publishNeedsPublishPermission(self) -> None:
        """The empty channel is publishing: it needs "publish"."""
        subscribe_only = Authorization(".*", [".*"], ["subscribe"])
        publish = Authorization(".*", [".*"], ["publish"])
        self.assertFalse(subscribe_only.is_allowed("t", ""))
        self.assertTrue(publish.is_allowed("t", ""))

    def test_publishNeedsAChannelPatternMatchingEmpty(self) -> None:
        """Publishing is refused unless some channel pattern matches ""."""
        self.assertFalse(Authorization(".*", ["^c$"], ["publish"]).is_allowed("t", ""))
        self.assertFalse(Authorization(".*", [], ["publish"]).is_allowed("t", ""))
        self.assertTrue(Authorization(".*", ["^c$", "^$"], ["publish"]).is_allowed("t", ""))

    def test_topicPatternIsASearch(self) -> None:
        """The topic pattern may match anywhere in the topic name."""
        authorization = Authorization("foo", [".*"], ["subscribe"])
        self.assertTrue(authorization.is_allowed("xfoox", "c"))
        self.assertFalse(authorization.is_allowed("bar", "c"))
        anchored = Authorization("^foo$", [".*"], ["subscribe"])
        self.assertFalse(anchored.is_allowed("xfoox", "c"))

    def test_anyChannelPattern(self) -> None:
        """One matching channel pattern is enough."""
        authorization = Authorization("^t$", ["^a$", "^b"], ["subscribe"])
        self.assertTrue(authorization.is_allowed("t", "a"))
        self.assertTrue(authorization.is_allowed("t", "bee"))
        self.assertFalse(authorization.is_allowed("t", "c"))

    def test_ephemeralNames(self) -> None:
        """#ephemeral suffixes are ordinary characters to the patterns."""
        authorization = Authorization("#ephemeral$", ["^c#ephemeral$"], ["subscribe"])
        self.assertTrue(authorization.is_allowed("t#ephemeral", "c#ephemeral"))
        self.assertFalse(authorization.is_allowed("t", "c#ephemeral"))

    def test_badPattern(self) -> None:
        """A pattern Go refuses cannot be made into an Authorization."""
        self.assertRaises(GoRegexpError, Authorization, "(", [], [])
        self.assertRaises(GoRegexpError, Authorization, ".*", ["["], [])


class AuthStateTests(SynchronousTestCase):
    """AuthState and the helpers the TCP adapter uses."""

    def state(self, *authorizations: Authorization, expires: float = 100.0) -> AuthState:
        return AuthState("user", "http://example.com/user", authorizations, expires, 60)

    def test_isAllowedByAnyAuthorization(self) -> None:
        """A state allows what any one of its authorizations allows."""
        state = self.state(
            Authorization("^a$", [".*"], ["publish"]),
            Authorization("^b$", [".*"], ["subscribe"]),
        )
        self.assertTrue(state.is_allowed("a", ""))
        self.assertTrue(state.is_allowed("b", "c"))
        self.assertFalse(state.is_allowed("a", "c"))
        self.assertFalse(state.is_allowed("b", ""))

    def test_isExpired(self) -> None:
        """A state expires once its expiry time is strictly in the past."""
        state = self.state(expires=100.0)
        self.assertFalse(state.is_expired(99.0))
        self.assertFalse(state.is_expired(100.0))
        self.assertTrue(state.is_expired(100.5))

    def test_hasAuthorizations(self) -> None:
        """Only a state with at least one authorization has authorizations."""
        self.assertFalse(has_authorizations(None))
        self.assertFalse(has_authorizations(self.state()))
        self.assertTrue(has_authorizations(self.state(Authorization("", [], []))))

    def test_authResponseBody(self) -> None:
        """AUTH is answered with Go's identity/identity_url/permission_count JSON."""
        state = self.state(Authorization("", [], []), Authorization("", [], []))
        self.assertEqual(
            auth_response_body(state),
            b'{"identity":"user","identity_url":"http://example.com/user","permission_count":2}',
        )

    def test_unauthorizedDescription(self) -> None:
        """E_UNAUTHORIZED's text quotes topic and channel as Go's %q."""
        self.assertEqual(
            unauthorized_description("PUB", "t", ""), 'AUTH failed for PUB on "t" ""'
        )
        self.assertEqual(
            unauthorized_description("SUB", "t", "c#ephemeral"),
            'AUTH failed for SUB on "t" "c#ephemeral"',
        )


class ParseAuthResponseTests(SynchronousTestCase):
    """parse_auth_response decodes and checks a reply as Go's QueryAuthd."""

    def assertRefused(self, body: bytes, message: str) -> None:
        error = self.assertRaises(AuthError, parse_auth_response, body, 0.0)
        self.assertEqual(str(error), message)

    def test_goExample(self) -> None:
        """The documented reply gives one authorization expiring after the TTL."""
        state = parse_auth_response(GO_EXAMPLE, 1000.0)
        self.assertEqual(state.identity, "user")
        self.assertEqual(state.identity_url, "http://example.com/user")
        self.assertEqual(state.expires, 4600.0)
        self.assertEqual(state.ttl, 3600)
        [authorization] = state.authorizations
        self.assertEqual(authorization.topic, ".*")
        self.assertEqual(authorization.channels, (".*",))
        self.assertEqual(authorization.permissions, ("subscribe", "publish"))
        self.assertTrue(state.is_allowed("t", ""))
        self.assertTrue(state.is_allowed("t", "c"))

    def test_noAuthorizations(self) -> None:
        """A reply granting nothing is valid; the adapter refuses it."""
        state = parse_auth_response(reply(60), 0.0)
        self.assertEqual(state.authorizations, ())
        self.assertFalse(has_authorizations(state))

    def test_unknownPermission(self) -> None:
        """A permission other than subscribe and publish is refused."""
        self.assertRefused(
            reply(60, {"permissions": ["publish", "admin"], "topic": ".*", "channels": []}),
            "unknown permission admin",
        )

    def test_badTopicPattern(self) -> None:
        """A topic pattern that does not compile is refused with Go's text."""
        self.assertRefused(
            reply(60, {"permissions": ["publish"], "topic": "(", "channels": []}),
            'unable to compile topic "(" error parsing regexp: missing closing ): `(`',
        )

    def test_badChannelPattern(self) -> None:
        """A channel pattern that does not compile is refused with Go's text."""
        self.assertRefused(
            reply(60, {"permissions": ["subscribe"], "topic": ".*", "channels": [".*", "[a"]}),
            'unable to compile channel "[a" error parsing regexp: missing closing ]: `[a`',
        )

    def test_ttlMustBePositive(self) -> None:
        """A TTL of zero or less, or none at all, is refused."""
        self.assertRefused(reply(0), "invalid TTL 0 (must be >0)")
        self.assertRefused(reply(-5), "invalid TTL -5 (must be >0)")
        self.assertRefused(b"{}", "invalid TTL 0 (must be >0)")
        self.assertRefused(b"null", "invalid TTL 0 (must be >0)")

    def test_checkedInGoOrder(self) -> None:
        """Authorizations are checked before the TTL, permissions before patterns."""
        self.assertRefused(
            reply(0, {"permissions": ["x"], "topic": "(", "channels": []}),
            "unknown permission x",
        )
        self.assertRefused(
            reply(0, {"permissions": ["publish"], "topic": "(", "channels": ["["]}),
            'unable to compile topic "(" error parsing regexp: missing closing ): `(`',
        )

    def test_wrongTypes(self) -> None:
        """Values of the wrong JSON type are refused as Go's decoder refuses them."""
        self.assertRefused(
            b'{"ttl": "60"}',
            "json: cannot unmarshal string into Go struct field State.ttl of type int",
        )
        self.assertRefused(
            b'{"ttl": 60.5}',
            "json: cannot unmarshal number 60.5 into Go struct field State.ttl of type int",
        )
        self.assertRefused(
            b'{"ttl": 60, "identity": 5}',
            "json: cannot unmarshal number 5 into Go struct field State.identity of type string",
        )
        self.assertRefused(
            b'{"ttl": 60, "authorizations": [{"channels": "c"}]}',
            "json: cannot unmarshal string into Go struct field "
            "State.authorizations.channels of type []string",
        )
        self.assertRefused(b"[]", "json: cannot unmarshal array into Go value of type auth.State")

    def test_garbage(self) -> None:
        """A body that is not JSON is refused."""
        for body in [b"", b"garbage", b"{", b'{"ttl": NaN}', b'{"ttl": 1} x']:
            self.assertRaises(AuthError, parse_auth_response, body, 0.0)

    def test_keysIgnoreCase(self) -> None:
        """Keys match Go's field names ignoring case; unknown keys are ignored."""
        state = parse_auth_response(
            b'{"TTL": 5, "Identity": "x", "extra": [1], "AUTHORIZATIONS":'
            b' [{"Topic": "t", "CHANNELS": ["c"], "Permissions": ["subscribe"]}]}',
            0.0,
        )
        self.assertEqual((state.ttl, state.identity), (5, "x"))
        self.assertTrue(state.is_allowed("t", "c"))

    def test_nulls(self) -> None:
        """null leaves a field at its zero value, as in Go."""
        state = parse_auth_response(
            b'{"ttl": 5, "identity": null, "authorizations": [null]}', 0.0
        )
        self.assertEqual(state.identity, "")
        [authorization] = state.authorizations
        self.assertEqual((authorization.topic, authorization.channels), ("", ()))

    def test_expiresKey(self) -> None:
        """Go's untagged Expires field refuses a non-time "expires" value."""
        self.assertRaises(AuthError, parse_auth_response, b'{"ttl": 5, "expires": 1}', 0.0)
        state = parse_auth_response(b'{"ttl": 5, "expires": "2020-01-01T00:00:00Z"}', 0.0)
        self.assertEqual(state.expires, 5.0)

    def test_hugeTTLWrapsAsInGo(self) -> None:
        """A TTL overflowing Go's int64 nanoseconds expires in the past, as in Go."""
        state = parse_auth_response(reply(10**10), 1000.0)
        self.assertTrue(state.is_expired(1000.0))


class AuthQueryURLTests(SynchronousTestCase):
    """auth_query_url builds the request Go's QueryAuthd sends."""

    def test_getHostPort(self) -> None:
        """A host:port address is queried at /auth with sorted, escaped parameters."""
        self.assertEqual(
            auth_query_url("127.0.0.1:4181", "10.0.0.1", False, b"s e+c/r&t", ""),
            (
                "GET",
                "http://127.0.0.1:4181/auth?common_name=&remote_ip=10.0.0.1"
                "&secret=s+e%2Bc%2Fr%26t&tls=false",
                None,
            ),
        )

    def test_getFullURL(self) -> None:
        """An address with :// is used as it is, with the query appended."""
        method, url, body = auth_query_url(
            "https://auth.example.com/check", "::1", True, "tok", "client.example"
        )
        self.assertEqual(
            url,
            "https://auth.example.com/check?common_name=client.example"
            "&remote_ip=%3A%3A1&secret=tok&tls=true",
        )

    def test_secretBytes(self) -> None:
        """Secret bytes that are not UTF-8 are escaped byte by byte."""
        _, url, _ = auth_query_url("h:1", "", False, b"\xff\x00~-._", "")
        self.assertIn("&secret=%FF%00~-._&", url)

    def test_post(self) -> None:
        """POST sends Go's json.Marshal of url.Values to the bare endpoint."""
        self.assertEqual(
            auth_query_url("127.0.0.1:4181", "10.0.0.1", True, b"a<b", "cn", method="post"),
            (
                "POST",
                "http://127.0.0.1:4181/auth",
                b'{"common_name":["cn"],"remote_ip":["10.0.0.1"],'
                b'"secret":["a\\u003cb"],"tls":["true"]}',
            ),
        )
        _, url, _ = auth_query_url("http://a:1/x", "", False, "", "", method="post")
        self.assertEqual(url, "http://a:1/x")

    def test_postInvalidUTF8(self) -> None:
        """Each byte of invalid UTF-8 in the secret is \\ufffd in the JSON, as Go."""
        _, _, body = auth_query_url("h:1", "", False, b"a\xe2\x82", "", method="post")
        assert body is not None
        self.assertIn(b'"secret":["a\\ufffd\\ufffd"]', body)

    def test_badMethod(self) -> None:
        """Only get and post are methods, with Go's flag error."""
        error = self.assertRaises(
            ValueError, auth_query_url, "h:1", "", False, "", "", method="put"
        )
        self.assertEqual(str(error), "--auth-http-request-method must be post or get")


class HTTPSEndpointTests(SynchronousTestCase):
    """https_endpoint follows Go http_api's 403 upgrade."""

    def test_port(self) -> None:
        """The scheme becomes https and the port the body's https_port."""
        self.assertEqual(
            https_endpoint("http://127.0.0.1:4181/auth?a=b", b'{"https_port": 4443}'),
            "https://127.0.0.1:4443/auth?a=b",
        )
        self.assertEqual(https_endpoint("http://[::1]:1/auth", b"{}"), "https://[::1]:0/auth")

    def test_refused(self) -> None:
        """A body that is not JSON, or a URL without a port, is an error."""
        self.assertRaises(AuthError, https_endpoint, "http://h:1/auth", b"")
        self.assertRaises(AuthError, https_endpoint, "http://h/auth", b"{}")
        self.assertRaises(AuthError, https_endpoint, "http://h:1/auth", b'{"https_port": "1"}')


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
        """A failed query's error and log never hold the secret; the client logs nothing."""
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
        self.assertEqual([formatEvent(e) for e in events if "ClientFactory" in formatEvent(e)], [])
        for event in events:
            self.assertNotIn("TOPSECRET", formatEvent(event))
            self.assertNotIn("TOPSECRET", repr(event))
