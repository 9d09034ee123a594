"""
Tests for txnsq.protocol.auth: authorization checks, the auth server's
reply as Go's json.Unmarshal reads it, and the query Go nsqd sends.
"""

from __future__ import annotations

import json
from typing import Any, Dict

from twisted.trial.unittest import SynchronousTestCase

from txnsq.protocol.auth import (
    AuthError,
    AuthState,
    Authorization,
    auth_query_url,
    auth_response_body,
    has_authorizations,
    https_endpoint,
    parse_auth_response,
    unauthorized_description,
)
from txnsq.protocol.go_regexp import GoRegexpError

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
