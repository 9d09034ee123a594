"""
Tests for txnsq.nsqadmin.http_client's HTTPS handling: Go http_api.Client's
retry over HTTPS when an nsqd requires TLS, and the --http-client-tls-*
policy.
"""

from __future__ import annotations

from typing import Any, List, Optional, Tuple

from twisted.internet.defer import Deferred, succeed
from twisted.internet.task import Clock
from twisted.trial.unittest import SynchronousTestCase

from txnsq.http_client import RequestTimedOut, with_request_timeout
from txnsq.nsqadmin.http_client import (
    ClientTLSPolicy,
    https_retry_url,
    upgrading_to_https,
)

TLS_REQUIRED = b'{"message": "TLS_REQUIRED", "https_port": 4152}'


class HTTPSRetryURLTests(SynchronousTestCase):
    """Tests for https_retry_url."""

    def test_tls_required(self) -> None:
        """An http:// URL answered 403 with an https_port is retried on that port over https."""
        self.assertEqual(
            https_retry_url("http://10.0.0.1:4151/stats?format=json", 403, TLS_REQUIRED),
            "https://10.0.0.1:4152/stats?format=json",
        )
        self.assertEqual(
            https_retry_url("http://[::1]:4151/info", 403, TLS_REQUIRED), "https://[::1]:4152/info"
        )

    def test_no_retry(self) -> None:
        """Other statuses, https URLs and a 403 naming no usable port are not retried."""
        for url, code, body in (
            ("http://a:1/stats", 200, TLS_REQUIRED),
            ("http://a:1/stats", 404, TLS_REQUIRED),
            ("https://a:1/stats", 403, TLS_REQUIRED),
            ("http://a:1/stats", 403, b'{"message": "FORBIDDEN"}'),
            ("http://a:1/stats", 403, b'{"https_port": 0}'),
            ("http://a:1/stats", 403, b'{"https_port": "4152"}'),
            ("http://a:1/stats", 403, b"[4152]"),
            ("http://a:1/stats", 403, b"not json"),
        ):
            self.assertIsNone(https_retry_url(url, code, body), (url, code, body))


class UpgradingSendTests(SynchronousTestCase):
    """Tests for upgrading_to_https."""

    def setUp(self) -> None:
        self.sent: List[Tuple[str, str, Optional[bytes]]] = []
        self.answers: dict = {}

    def send(self, method: str, url: str, body: Optional[bytes]) -> "Deferred[Any]":
        self.sent.append((method, url, body))
        answer = self.answers[url]
        if answer == "hang":
            return Deferred()
        return succeed(answer)

    def test_retried_once_over_https(self) -> None:
        """A TLS_REQUIRED answer sends the same request again to the https port."""
        self.answers = {
            "http://n:4151/channel/pause?topic=t": (403, b"Forbidden", TLS_REQUIRED),
            "https://n:4152/channel/pause?topic=t": (200, b"OK", b""),
        }
        reply = self.successResultOf(
            upgrading_to_https(self.send)("POST", "http://n:4151/channel/pause?topic=t", b"x")
        )
        self.assertEqual(reply, (200, b"OK", b""))
        self.assertEqual(
            self.sent,
            [
                ("POST", "http://n:4151/channel/pause?topic=t", b"x"),
                ("POST", "https://n:4152/channel/pause?topic=t", b"x"),
            ],
        )

    def test_https_403_passed_on(self) -> None:
        """A 403 over https is the answer (no loop)."""
        self.answers = {
            "http://n:4151/stats": (403, b"Forbidden", TLS_REQUIRED),
            "https://n:4152/stats": (403, b"Forbidden", TLS_REQUIRED),
        }
        reply = self.successResultOf(upgrading_to_https(self.send)("GET", "http://n:4151/stats", None))
        self.assertEqual(reply[0], 403)
        self.assertEqual(len(self.sent), 2)

    def test_timeout_covers_retry(self) -> None:
        """The retry is a request with its own timeout, as Go's: a hanging https request times out and is cancelled."""
        self.answers = {
            "http://n:4151/stats": (403, b"Forbidden", TLS_REQUIRED),
            "https://n:4152/stats": "hang",
        }
        clock = Clock()
        request = upgrading_to_https(
            lambda method, url, body: with_request_timeout(self.send(method, url, body), clock, 5.0)
        )
        d = request("GET", "http://n:4151/stats", None)
        self.assertNoResult(d)
        clock.advance(5)
        self.failureResultOf(d, RequestTimedOut)


class ClientTLSPolicyTests(SynchronousTestCase):
    """Tests for ClientTLSPolicy."""

    def files(self) -> Tuple[str, str, str]:
        import os

        from tests.integration.tls_certs import shared_pki

        directory = self.mktemp()
        os.makedirs(directory)
        pki = shared_pki()
        cert, key = pki.client.write(directory, "client")
        return pki.ca.write(directory, "ca"), cert, key

    def test_verifying_creator_per_host(self) -> None:
        """Without insecure-skip-verify each host gets its own verifying creator, cached."""
        ca, cert, key = self.files()
        policy = ClientTLSPolicy(ca, cert, key)
        first = policy.creatorForNetloc(b"127.0.0.1", 4152)
        self.assertIs(policy.creatorForNetloc(b"127.0.0.1", 4153), first)
        self.assertIsNot(policy.creatorForNetloc(b"localhost", 4152), first)
        self.assertEqual(type(first).__name__, "ClientTLSOptions")

    def test_insecure(self) -> None:
        """With insecure-skip-verify the creator checks nothing."""
        from OpenSSL import SSL

        ca, cert, key = self.files()
        creator = ClientTLSPolicy(cert=cert, key=key, insecure_skip_verify=True).creatorForNetloc(
            b"example.com", 443
        )
        connection = creator.clientConnectionForTLS(object())
        self.assertEqual(connection.get_context().get_verify_mode(), SSL.VERIFY_NONE)
