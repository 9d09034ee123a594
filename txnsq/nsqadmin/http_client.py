# -*- test-case-name: tests.test_nsqadmin_clusterinfo -*-
"""
What nsqadmin adds to :class:`txnsq.http_client.GoHTTPClient`, through which
it asks nsqlookupds, nsqds and the notification endpoint (kept
connections, ``--http-client-*`` timeouts, one timeout path for every
request txnsq makes).

HTTPS is Go ``http_api.Client``'s: a plain ``http://`` request answered
``403`` with an ``https_port`` (an nsqd run with ``--tls-required``) is sent
again to ``https://`` that port (:func:`upgrading_to_https`), checking the
node's certificate as ``--http-client-tls-*`` say (:class:`ClientTLSPolicy`).
"""

from __future__ import annotations

import json
from typing import Any, Callable, Dict, Optional, Tuple
from urllib.parse import urlsplit, urlunsplit

from OpenSSL import SSL
from twisted.internet import ssl
from twisted.internet.defer import Deferred
from twisted.internet.interfaces import IOpenSSLClientConnectionCreator
from twisted.web.iweb import IPolicyForHTTPS
from zope.interface import implementer

__all__ = [
    "ClientTLSPolicy",
    "Reply",
    "Send",
    "https_retry_url",
    "upgrading_to_https",
]

#: ``(status code, reason phrase, body)``.
Reply = Tuple[int, bytes, bytes]

#: Sends one request: ``send(method, url, body)``; cancelling stops it.
Send = Callable[[str, str, Optional[bytes]], "Deferred[Reply]"]


def _read(path: str, what: str) -> bytes:
    try:
        with open(path, "rb") as handle:
            return handle.read()
    except OSError as error:
        raise ValueError("failed to read %s %s - %s" % (what, path, error.strerror or error))


@implementer(IOpenSSLClientConnectionCreator)
class _Unverified:
    """A client TLS connection that checks nothing (Go's ``InsecureSkipVerify``)."""

    def __init__(self, options: ssl.CertificateOptions, hostname: str) -> None:
        self._options = options
        self._hostname = hostname

    def clientConnectionForTLS(self, tlsProtocol: Any) -> SSL.Connection:
        """An OpenSSL client connection that accepts any certificate."""
        connection = SSL.Connection(self._options.getContext(), None)
        connection.set_app_data(tlsProtocol)
        connection.set_connect_state()
        if self._hostname and not _is_ip(self._hostname):
            connection.set_tlsext_host_name(self._hostname.encode("idna"))
        return connection


def _is_ip(host: str) -> bool:
    import ipaddress

    try:
        ipaddress.ip_address(host)
    except ValueError:
        return False
    return True


@implementer(IPolicyForHTTPS)
class ClientTLSPolicy:
    """
    How nsqadmin checks the nodes it reaches over HTTPS, from Go's
    ``--http-client-tls-*`` flags: the roots of ``root_ca_file`` (the
    system's when empty), the certificate matching the host dialled, the
    ``cert``/``key`` pair shown when given, and nothing checked with
    ``insecure_skip_verify``.

    :raises ValueError: a file cannot be read or holds no PEM certificate
        or key (Go's messages where Go has them).
    """

    def __init__(
        self,
        root_ca_file: str = "",
        cert: str = "",
        key: str = "",
        insecure_skip_verify: bool = False,
    ) -> None:
        self._trust: Any = None
        if root_ca_file:
            pem = _read(root_ca_file, "TLS root CA file")
            try:
                self._trust = ssl.trustRootFromCertificates([ssl.Certificate.loadPEM(pem)])
            except Exception:
                raise ValueError("failed to AppendCertsFromPEM %s" % (root_ca_file,))
        self._client: Optional[ssl.PrivateCertificate] = None
        if cert and key:
            pair = _read(cert, "certificate") + b"\n" + _read(key, "key")
            try:
                self._client = ssl.PrivateCertificate.loadPEM(pair)
            except Exception as error:
                raise ValueError(
                    "failed to LoadX509KeyPair %s, %s - %s" % (cert, key, error)
                )
        self._insecure: Optional[ssl.CertificateOptions] = None
        if insecure_skip_verify:
            kwargs: Dict[str, Any] = {}
            if self._client is not None:
                kwargs["privateKey"] = self._client.privateKey.original
                kwargs["certificate"] = self._client.original
            self._insecure = ssl.CertificateOptions(verify=False, **kwargs)
        self._by_host: Dict[str, Any] = {}

    def creatorForNetloc(self, hostname: bytes, port: int) -> Any:
        """The client TLS connection creator for ``hostname`` (one per host, cached)."""
        host = hostname.decode("ascii")
        if self._insecure is not None:
            return _Unverified(self._insecure, host)
        creator = self._by_host.get(host)
        if creator is None:
            creator = ssl.optionsForClientTLS(
                host, trustRoot=self._trust, clientCertificate=self._client
            )
            self._by_host[host] = creator
        return creator


def https_retry_url(url: str, code: int, body: bytes) -> Optional[str]:
    """
    Where Go's ``http_api.Client`` sends a request again: for an
    ``http://`` URL answered ``403`` with ``{"https_port": N}``, the same
    URL over ``https://`` on port N; None otherwise (a 403 that names no
    port is passed on, where Go would retry on port 0 and fail to connect).
    """
    if code != 403 or not url.startswith("http://"):
        return None
    try:
        port = json.loads(body.decode("utf-8")).get("https_port")
    except (ValueError, UnicodeDecodeError, AttributeError):
        return None
    if not isinstance(port, int) or isinstance(port, bool) or not 0 < port < 65536:
        return None
    parts = urlsplit(url)
    host = parts.hostname or ""
    netloc = "[%s]:%d" % (host, port) if ":" in host else "%s:%d" % (host, port)
    return urlunsplit(("https", netloc, parts.path, parts.query, parts.fragment))


def upgrading_to_https(send: Send) -> Send:
    """``send``, sending a request again over HTTPS when :func:`https_retry_url` says so."""

    def retrying(method: str, url: str, body: Optional[bytes]) -> "Deferred[Reply]":
        def maybe_again(reply: Reply) -> Any:
            code, _, content = reply
            again = https_retry_url(url, code, content)
            if again is None:
                return reply
            return send(method, again, body)

        return send(method, url, body).addCallback(maybe_again)

    return retrying
