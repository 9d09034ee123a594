# -*- test-case-name: tests.test_client_producer -*-
"""
Publishing over nsqd's HTTP API: :class:`HTTPPublisher`.

``POST /pub?topic=`` (with ``&defer=`` milliseconds for a deferred
message) and ``POST /mpub?topic=`` (the MPUB binary body with
``&binary=true``, or one message per line).  nsqd answers ``200 OK``; any
other status carries Go's ``{"message": "TOPIC_NAME_INVALID"}``-style body,
which becomes an :class:`NSQHTTPError`.  Requests go through
:class:`txnsq.http_client.GoHTTPClient` (connect and request timeouts, no
kept connections).
"""

from __future__ import annotations

import json
from typing import Any, Optional, Sequence, Tuple
from urllib.parse import quote

from twisted.internet.defer import Deferred, fail
from twisted.internet.interfaces import IReactorTime
from twisted.python.failure import Failure
from twisted.web.iweb import IPolicyForHTTPS

from txnsq.addresses import split_host_port
from txnsq.client.connection import NSQConnectionError
from txnsq.http_client import GoHTTPClient, describe_failure, status_error_text
from txnsq.protocol.v2_client import NSQError, check_topic, mpub_body

__all__ = ["HTTPPublisher", "NSQHTTPError"]

_OCTET_STREAM = b"application/octet-stream"


class NSQHTTPError(NSQError):
    """
    nsqd's HTTP API refused a publish.

    :ivar code: nsqd's message (``MSG_TOO_BIG``, ``INVALID_TOPIC`` ...), or
        ``HTTP_<status>`` when the body is not nsqd's JSON.
    :ivar description: Go's ``got response 400 Bad Request "..."`` text.
    :ivar status: the HTTP status code.
    """

    def __init__(self, code: str, description: str, status: int) -> None:
        NSQError.__init__(self, code, description, fatal=False)
        self.status = status


def _error_from_reply(code: int, phrase: bytes, body: bytes) -> NSQHTTPError:
    message: Any = None
    try:
        decoded = json.loads(body)
    except ValueError:
        decoded = None
    if isinstance(decoded, dict):
        message = decoded.get("message")
    if not isinstance(message, str) or not message:
        # Not nsqd's JSON (a proxy's page, say): the status says it all.
        message = "HTTP_%d" % (code,)
    return NSQHTTPError(message, status_error_text(code, phrase, body), code)


class HTTPPublisher:
    """
    Publishes to one nsqd over its HTTP API.

    Each publish returns a Deferred firing with ``None`` on ``200``, or
    failing with :class:`NSQHTTPError` (nsqd's error message as ``code``),
    :class:`NSQError <txnsq.protocol.v2_client.NSQError>` (an invalid topic name, not
    sent) or :class:`NSQConnectionError <txnsq.client.connection.NSQConnectionError>` (no
    answer: refused, timed out, cut short).

    :param nsqd_http_address: ``host:port`` of nsqd's HTTP (or HTTPS) listener.
    :param reactor: makes the connections; the global reactor by default.
    :param https: use HTTPS (nsqd's ``--https-address``).
    :param tls_policy: checks an HTTPS server's certificate.
    :param binary: send :meth:`multi_publish` in the binary format (any
        body allowed) rather than one message per line.
    :raises ValueError: a malformed address.
    """

    def __init__(
        self,
        nsqd_http_address: str,
        reactor: Any = None,
        connect_timeout: float = 2.0,
        request_timeout: float = 5.0,
        clock: Optional[IReactorTime] = None,
        https: bool = False,
        tls_policy: Optional[IPolicyForHTTPS] = None,
        binary: bool = True,
    ) -> None:
        split_host_port(nsqd_http_address)
        if reactor is None:
            from twisted.internet import reactor as global_reactor

            reactor = global_reactor
        self.address = nsqd_http_address
        self.binary = binary
        self._base = ("https://" if https else "http://") + nsqd_http_address
        self._client = GoHTTPClient(
            reactor, connect_timeout, request_timeout, clock=clock, tls_policy=tls_policy
        )

    def publish(self, topic: str, body: bytes) -> "Deferred[None]":
        """``POST /pub``: publish one message."""
        return self._post("PUB", topic, "/pub", "", body)

    def deferred_publish(self, topic: str, delay: float, body: bytes) -> "Deferred[None]":
        """``POST /pub?defer=``: publish one message delivered ``delay`` seconds from now."""
        if delay < 0:
            return fail(ValueError("delay must not be negative, not %r" % (delay,)))
        return self._post("DPUB", topic, "/pub", "&defer=%d" % (int(round(delay * 1000)),), body)

    def multi_publish(self, topic: str, bodies: Sequence[bytes]) -> "Deferred[None]":
        """
        ``POST /mpub``: publish several messages at once.

        :raises ValueError: (as a failed Deferred) no message, or, in line
            mode, a message containing a newline.
        """
        batch = list(bodies)
        if not batch:
            return fail(ValueError("multi_publish needs at least one message"))
        if self.binary:
            return self._post("MPUB", topic, "/mpub", "&binary=true", mpub_body(batch))
        if any(b"\n" in body for body in batch):
            return fail(ValueError("a message contains a newline; use binary=True"))
        return self._post("MPUB", topic, "/mpub", "", b"\n".join(batch))

    def _post(self, verb: str, topic: str, path: str, extra: str, body: bytes) -> "Deferred[None]":
        try:
            check_topic(verb, topic)
        except NSQError as error:
            return fail(error)
        # ``#ephemeral`` must not start a URL fragment.
        url = "%s%s?topic=%s%s" % (self._base, path, quote(topic, safe=""), extra)
        requested = self._client.request("POST", url, body, content_type=_OCTET_STREAM)

        def answered(reply: Tuple[int, bytes, bytes]) -> None:
            code, phrase, content = reply
            if code != 200:
                raise _error_from_reply(code, phrase, content)

        def failed(failure: Failure) -> Failure:
            if failure.check(NSQError):
                return failure
            return Failure(
                NSQConnectionError(
                    "publishing to nsqd %s over HTTP failed: %s" % (self.address, describe_failure(failure.value)),
                    failure,
                )
            )

        return requested.addCallback(answered).addErrback(failed)
