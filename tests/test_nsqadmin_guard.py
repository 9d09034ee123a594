"""Tests for txnsq.nsqadmin.guard: which state-changing requests are refused as possible forgeries."""

from __future__ import annotations

from typing import Optional, Sequence

from twisted.trial.unittest import SynchronousTestCase

from txnsq.nsqadmin.guard import (
    CSRF_CROSS_ORIGIN,
    CSRF_HEADER_REQUIRED,
    csrf_refusal,
    host_port,
)


def refusal(
    method: str = "POST",
    origin: Optional[str] = None,
    referer: Optional[str] = None,
    site: Optional[str] = None,
    header: Optional[str] = None,
    hosts: Sequence[str] = ("admin.example:4171",),
) -> Optional[str]:
    return csrf_refusal(method, origin, referer, site, header, hosts)


class CSRFRefusalTests(SynchronousTestCase):
    """Tests for csrf_refusal."""

    def test_reads_pass(self) -> None:
        """GET, HEAD and OPTIONS are never refused, whatever their origin."""
        for method in ("GET", "HEAD", "OPTIONS"):
            self.assertIsNone(refusal(method, origin="https://evil.example", site="cross-site"))

    def test_non_browser_passes(self) -> None:
        """A request with no Origin, Referer or Sec-Fetch-Site (curl, scripts) passes without the header."""
        for method in ("POST", "PUT", "DELETE", "PATCH"):
            self.assertIsNone(refusal(method))

    def test_same_origin_with_header(self) -> None:
        """The UI's own request (same origin, X-Requested-With) passes."""
        self.assertIsNone(
            refusal(origin="http://admin.example:4171", site="same-origin", header="nsqadmin")
        )
        self.assertIsNone(refusal(referer="http://admin.example:4171/topics/a", header="x"))

    def test_cross_site_refused(self) -> None:
        """Another site's Origin, Referer or Sec-Fetch-Site is refused, even with the header."""
        for kwargs in (
            {"origin": "http://evil.example"},
            {"origin": "http://admin.example:4172"},
            {"origin": "http://admin.example"},
            {"origin": "null"},
            {"origin": "file://"},
            {"referer": "http://evil.example/page"},
            {"site": "cross-site"},
            {"site": "same-site"},
            {"site": "same-origin", "origin": "http://evil.example"},
        ):
            self.assertEqual(refusal(header="x", **kwargs), CSRF_CROSS_ORIGIN, kwargs)  # type: ignore[arg-type]

    def test_origin_wins_over_referer(self) -> None:
        """With an Origin the Referer is not looked at (a same-origin Referer does not excuse a foreign Origin)."""
        self.assertEqual(
            refusal(origin="http://evil.example", referer="http://admin.example:4171/", header="x"),
            CSRF_CROSS_ORIGIN,
        )

    def test_browser_needs_header(self) -> None:
        """A same-origin browser request without X-Requested-With (a plain form) is refused."""
        for kwargs in (
            {"origin": "http://admin.example:4171"},
            {"referer": "http://admin.example:4171/"},
            {"site": "same-origin"},
            {"site": "none"},
        ):
            self.assertEqual(refusal(**kwargs), CSRF_HEADER_REQUIRED, kwargs)  # type: ignore[arg-type]
            self.assertEqual(refusal(header="  ", **kwargs), CSRF_HEADER_REQUIRED)  # type: ignore[arg-type]

    def test_default_ports_and_scheme(self) -> None:
        """A Host without a port is the Origin scheme's default port; the scheme itself is not compared."""
        hosts = ["admin.example"]
        self.assertIsNone(refusal(origin="https://admin.example", header="x", hosts=hosts))
        self.assertIsNone(refusal(origin="http://ADMIN.example:80", header="x", hosts=hosts))
        self.assertEqual(
            refusal(origin="https://admin.example:8443", header="x", hosts=hosts),
            CSRF_CROSS_ORIGIN,
        )
        self.assertIsNone(
            refusal(origin="https://admin.example:443", header="x", hosts=["admin.example:443"])
        )

    def test_forwarded_host(self) -> None:
        """Any of the names given (Host, a proxy's X-Forwarded-Host) is nsqadmin's own."""
        hosts = ["127.0.0.1:4171", "nsq.example.com"]
        self.assertIsNone(refusal(origin="https://nsq.example.com", header="x", hosts=hosts))
        self.assertIsNone(refusal(origin="http://[::1]:4171", header="x", hosts=["[::1]:4171"]))
        self.assertEqual(refusal(origin="https://nsq.example.com", header="x", hosts=[]), CSRF_CROSS_ORIGIN)

    def test_host_port(self) -> None:
        """host_port splits host[:port], lower-cases the host and refuses junk."""
        self.assertEqual(host_port("Admin.Example:81", 80), ("admin.example", 81))
        self.assertEqual(host_port("[::1]", 443), ("::1", 443))
        for junk in ("", "a:b", "u@host", "host/path", "h:99999"):
            self.assertIsNone(host_port(junk, 80), junk)
