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
``follow_redirects`` options).
"""

from __future__ import annotations

from typing import Any, Mapping, Optional, Tuple

from twisted.internet.defer import Deferred, succeed
from twisted.internet.interfaces import IConsumer, IReactorTime
from twisted.python.failure import Failure
from twisted.web.client import (
    Agent,
    BrowserLikePolicyForHTTPS,
    HTTPConnectionPool,
    PartialDownloadError,
    RedirectAgent,
    ResponseFailed,
    _HTTP11ClientFactory,
    readBody,
)
from twisted.web.http_headers import Headers
from twisted.web.iweb import IBodyProducer, IPolicyForHTTPS, IResponse
from zope.interface import implementer

from txnsq import __version__
from txnsq.protocol.errors import go_quote

__all__ = ["ACCEPT", "GoHTTPClient", "RequestTimedOut", "describe_failure", "status_error_text"]

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


@implementer(IBodyProducer)
class _BytesProducer:
    """A request body that is one ``bytes``."""

    def __init__(self, body: bytes) -> None:
        self._body = body
        self.length = len(body)

    def startProducing(self, consumer: IConsumer) -> "Deferred[None]":
        consumer.write(self._body)
        return succeed(None)

    def pauseProducing(self) -> None:
        pass

    def resumeProducing(self) -> None:
        pass

    def stopProducing(self) -> None:
        pass


class _GoRedirectAgent(RedirectAgent):
    """
    Redirects as Go's ``http.Client`` follows them: 301, 302 and 303 turn
    any request into a GET; 307 and 308 repeat a GET or HEAD, and fail
    any other request (Go would send it again with its body).
    """

    _redirectResponses = [307, 308]
    _seeOtherResponses = [301, 302, 303]


class _QuietHTTP11ClientFactory(_HTTP11ClientFactory):
    """The Agent's connection factory, without its start and stop log lines."""

    noisy = False


def _read_reply(response: IResponse) -> "Deferred[Reply]":
    def body_read(content: bytes) -> Reply:
        return response.code, response.phrase, content

    def cut_short(failure: Any) -> Reply:
        # A body ended by the server closing the connection is a whole body
        # to Go's io.ReadAll.
        failure.trap(PartialDownloadError)
        return response.code, response.phrase, failure.value.response or b""

    return readBody(response).addCallbacks(body_read, cut_short)


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
    ) -> None:
        self.connect_timeout = connect_timeout
        self.request_timeout = request_timeout
        self._clock: Any = clock if clock is not None else reactor
        self._user_agent = user_agent
        self._accept = accept
        pool = HTTPConnectionPool(reactor, persistent=persistent)
        # _factory is the pool's (long-standing) hook; without it every
        # request logs "Starting factory" and "Stopping factory".
        pool._factory = _QuietHTTP11ClientFactory
        self._pool = pool
        agent: Any = Agent(
            reactor,
            contextFactory=tls_policy if tls_policy is not None else BrowserLikePolicyForHTTPS(),
            connectTimeout=connect_timeout,
            pool=pool,
        )
        if follow_redirects:
            agent = _GoRedirectAgent(agent, redirectLimit=10)
        self._agent = agent

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
        uri = url.encode("ascii")
        sent = Headers({b"User-Agent": [self._user_agent]})
        if self._accept is not None:
            sent.setRawHeaders(b"Accept", [self._accept])
        producer = None
        if body is not None:
            sent.setRawHeaders(b"Content-Type", [content_type])
            producer = _BytesProducer(body)
        if headers:
            for name, value in headers.items():
                sent.setRawHeaders(name, [value])
        requested = self._agent.request(method.encode("ascii"), uri, sent, producer)
        requested.addCallback(_read_reply)
        timed_out = []

        def time_out() -> None:
            timed_out.append(True)
            requested.cancel()

        # Not Deferred.addTimeout: the Agent reports a cancelled connection
        # attempt as ConnectingCancelledError, which addTimeout would not
        # recognise as its own timeout.
        timer = self._clock.callLater(self.request_timeout, time_out)

        def finished(result: Any) -> Any:
            if timer.active():
                timer.cancel()
            if isinstance(result, Failure) and timed_out:
                raise RequestTimedOut(
                    "request timed out (Client.Timeout %gs exceeded)" % (self.request_timeout,)
                )
            return result

        return requested.addBoth(finished)

    def close(self) -> "Deferred[None]":
        """Close the kept connections (see ``persistent``); fires once they are closed."""
        return self._pool.closeCachedConnections()
