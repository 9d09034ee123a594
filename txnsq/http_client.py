# -*- test-case-name: tests.test_http_client -*-
"""
The HTTP client the daemons use to talk to each other and to auth servers,
in the manner of Go NSQ's ``internal/http_api`` client: NSQ's ``Accept``
header, a connect timeout and a whole-request timeout, no kept
connections, and Go's texts for what goes wrong.

nsqd asks auth servers (``--auth-http-address``) and nsqlookupds (a new
topic's channels); nsqlookupd asks nsqd to delete topics.  Each does few
requests, so connections are not reused, and none of them logs Twisted's
per-connection "Starting factory" lines.  Error texts never contain the
request URL, which may carry a secret.

``nsq_to_http`` sends every message it consumes, like a plain Go
``http.Client``: no ``Accept`` header, extra headers per request, kept
connections and followed redirects (the ``accept``, ``persistent`` and
``follow_redirects`` options).  nsqadmin asks its nodes with kept
connections and its own TLS policy.

It is treq over an ``Agent``, public APIs only.  Twisted logs "Starting
factory" and "Stopping factory" for each connection the Agent makes; the
daemons' console logging drops those lines
(:class:`txnsq.logging.FrameworkChatterFilter`).
"""

from __future__ import annotations

from typing import Any, Mapping, Optional, Tuple

from twisted.internet.defer import Deferred
from twisted.internet.interfaces import IReactorTime
from twisted.python.failure import Failure
from twisted.web.client import (
    Agent,
    BrowserLikePolicyForHTTPS,
    BrowserLikeRedirectAgent,
    HTTPConnectionPool,
    ResponseFailed,
)
from twisted.web.http_headers import Headers
from twisted.web.iweb import IPolicyForHTTPS, IResponse

from txnsq import __version__
from txnsq.protocol.errors import go_quote

__all__ = [
    "ACCEPT",
    "GoHTTPClient",
    "RequestTimedOut",
    "describe_failure",
    "status_error_text",
    "with_request_timeout",
]

#: What Go's ``http_api`` client sends with every request.
ACCEPT = b"application/vnd.nsq; version=1.0"

#: ``(status code, reason phrase, body)``.
Reply = Tuple[int, bytes, bytes]


class RequestTimedOut(Exception):
    """The whole request took longer than the request timeout (Go's text)."""


def status_error_text(code: int, phrase: bytes, content: bytes) -> str:
    """Go's ``got response 404 Not Found "body"`` for an unexpected status."""
    return "got response %d %s %s" % (code, phrase.decode("latin-1"), go_quote(content))


def describe_failure(error: Optional[BaseException]) -> str:
    """One line about a failed request, never its URL."""
    if isinstance(error, ResponseFailed):
        return "; ".join(reason.getErrorMessage() for reason in error.reasons)
    if isinstance(error, RequestTimedOut):
        return str(error)
    return "%s: %s" % (type(error).__name__, error)


def _read_reply(response: IResponse) -> "Deferred[Reply]":
    import treq

    def whole(content: bytes) -> Reply:
        return response.code, response.phrase, content

    # treq takes a body ended by the server closing the connection as
    # whole, as Go's io.ReadAll does.
    return treq.content(response).addCallback(whole)


def with_request_timeout(
    requested: "Deferred[Any]", clock: IReactorTime, timeout: float
) -> "Deferred[Any]":
    """
    ``requested``, cancelled and failed with :class:`RequestTimedOut` (Go's
    text) when it has not fired after ``timeout`` seconds of ``clock`` time:
    the whole-request timeout of every HTTP request txnsq makes.
    """
    timed_out = []

    def time_out() -> None:
        timed_out.append(True)
        requested.cancel()

    # Not Deferred.addTimeout: the Agent reports a cancelled connection
    # attempt as ConnectingCancelledError, which addTimeout would not
    # recognise as its own timeout.
    timer = clock.callLater(timeout, time_out)

    def finished(result: Any) -> Any:
        if timer.active():
            timer.cancel()
        if isinstance(result, Failure) and timed_out:
            raise RequestTimedOut("request timed out (Client.Timeout %gs exceeded)" % (timeout,))
        return result

    return requested.addBoth(finished)


class GoHTTPClient:
    """
    Requests with Go ``http_api``'s manners.

    Each request may take ``request_timeout`` seconds from sending to the
    end of the body, connecting at most ``connect_timeout`` of those (Go's
    ``--http-client-request-timeout`` and ``--http-client-connect-timeout``).

    :param reactor: makes the connections (``IReactorTCP``, name resolution).
    :param clock: times the requests; the reactor when not given.
    :param tls_policy: checks ``https`` servers' certificates (the system's
        roots by default).
    :param user_agent: the ``User-Agent`` header.
    :param accept: the ``Accept`` header; None sends none (a plain Go
        ``http.Client``).
    :param persistent: keep connections open for later requests, two idle
        ones per host at most (Go's ``http.Transport`` default).
    :param follow_redirects: follow up to 10 redirects, as Go's
        ``http.Client`` does (a POST answered 301, 302 or 303 is followed
        with a GET; one answered 307 or 308 fails, with
        ``ResponseFailed``, where Go would send the POST again).
    :param max_idle_per_host: with ``persistent``, the idle connections
        kept per host.
    """

    def __init__(
        self,
        reactor: Any,
        connect_timeout: float,
        request_timeout: float,
        clock: Optional[IReactorTime] = None,
        tls_policy: Optional[IPolicyForHTTPS] = None,
        user_agent: bytes = b"txnsq/" + __version__.encode("ascii"),
        accept: Optional[bytes] = ACCEPT,
        persistent: bool = False,
        follow_redirects: bool = False,
        max_idle_per_host: int = 2,
    ) -> None:
        from treq.client import HTTPClient

        self.connect_timeout = connect_timeout
        self.request_timeout = request_timeout
        self._clock: Any = clock if clock is not None else reactor
        self._user_agent = user_agent
        self._accept = accept
        pool = HTTPConnectionPool(reactor, persistent=persistent)
        pool.maxPersistentPerHost = max_idle_per_host
        self._pool = pool
        agent: Any = Agent(
            reactor,
            contextFactory=tls_policy if tls_policy is not None else BrowserLikePolicyForHTTPS(),
            connectTimeout=connect_timeout,
            pool=pool,
        )
        if follow_redirects:
            # 301-303 turn any request into a GET; 307 and 308 repeat a GET
            # or HEAD and fail any other request.
            agent = BrowserLikeRedirectAgent(agent, redirectLimit=10)
        self._client = HTTPClient(agent)

    def request(
        self,
        method: str,
        url: str,
        body: Optional[bytes] = None,
        content_type: bytes = b"application/json",
        headers: Optional[Mapping[bytes, bytes]] = None,
    ) -> "Deferred[Reply]":
        """
        Send one request; a Deferred firing with ``(code, phrase, body)``
        whatever the status.  Cancelling it stops the request.

        :param headers: more headers; each replaces any header of its
            name set by the client (Go's ``Header.Set``).
        :raises UnicodeEncodeError: ``url`` is not ASCII.
        :return: fails with :class:`RequestTimedOut` after the request
            timeout, or with the transport's error.
        """
        url.encode("ascii")
        sent = Headers({b"User-Agent": [self._user_agent]})
        if self._accept is not None:
            sent.setRawHeaders(b"Accept", [self._accept])
        if body is not None:
            sent.setRawHeaders(b"Content-Type", [content_type])
        if headers:
            for name, value in headers.items():
                sent.setRawHeaders(name, [value])
        requested = self._client.request(
            method, url, headers=sent, data=body, allow_redirects=False
        )
        requested.addCallback(_read_reply)
        return with_request_timeout(requested, self._clock, self.request_timeout)

    def close(self) -> "Deferred[None]":
        """Close the kept connections (see ``persistent``); fires once they are closed."""
        return self._pool.closeCachedConnections()
