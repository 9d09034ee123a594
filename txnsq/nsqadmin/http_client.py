# -*- test-case-name: tests.test_nsqadmin_clusterinfo -*-
"""
The requests nsqadmin sends to nsqlookupds, nsqds and the notification
endpoint, with treq.

A request may take ``--http-client-request-timeout`` from sending to the
end of its body, connecting within ``--http-client-connect-timeout``; it
fires with ``(code, phrase, body)`` whatever the status.  The timing is
:class:`TimedRequester`'s, on an injected clock, so tests drive it with
:class:`~twisted.internet.task.Clock` and a ``send`` that never answers.
"""

from __future__ import annotations

from typing import Any, Callable, Optional, Tuple

from twisted.internet.defer import Deferred
from twisted.internet.interfaces import IReactorTime
from twisted.python.failure import Failure
from twisted.web.client import Agent, HTTPConnectionPool

from txnsq import __version__
from txnsq.http_client import ACCEPT, RequestTimedOut

__all__ = ["Reply", "Send", "TimedRequester", "treq_send"]

#: ``(status code, reason phrase, body)``.
Reply = Tuple[int, bytes, bytes]

#: Sends one request: ``send(method, url, body)``; cancelling stops it.
Send = Callable[[str, str, Optional[bytes]], "Deferred[Reply]"]


def treq_send(reactor: Any, connect_timeout: float) -> Send:
    """
    A :data:`Send` made of treq over an Agent that gives up connecting after
    ``connect_timeout`` seconds and keeps a few idle connections per node
    (the UI polls the same nodes every few seconds).
    """
    import treq
    from treq.client import HTTPClient

    pool = HTTPConnectionPool(reactor, persistent=True)
    pool.maxPersistentPerHost = 2
    client = HTTPClient(Agent(reactor, connectTimeout=connect_timeout, pool=pool))
    headers: Any = {
        b"User-Agent": [b"nsqadmin/txnsq-" + __version__.encode("ascii")],
        b"Accept": [ACCEPT],
    }

    def send(method: str, url: str, body: Optional[bytes]) -> "Deferred[Reply]":
        sent: Any = dict(headers)
        if body is not None:
            sent[b"Content-Type"] = [b"application/json"]
        requested = client.request(method, url, headers=sent, data=body)

        def read(response: Any) -> "Deferred[Reply]":
            def whole(content: bytes) -> Reply:
                return response.code, response.phrase, content

            return treq.content(response).addCallback(whole)

        return requested.addCallback(read)

    return send


class TimedRequester:
    """
    Sends requests through ``send``, each failing with
    :class:`~txnsq.http_client.RequestTimedOut` after ``timeout`` seconds
    of ``clock`` time.
    """

    def __init__(self, send: Send, clock: IReactorTime, timeout: float) -> None:
        self._send = send
        self._clock = clock
        self.timeout = timeout

    def request(self, method: str, url: str, body: Optional[bytes] = None) -> "Deferred[Reply]":
        """One request; fires with ``(code, phrase, body)`` or fails."""
        requested = self._send(method, url, body)
        timed_out = []

        def time_out() -> None:
            timed_out.append(True)
            requested.cancel()

        timer = self._clock.callLater(self.timeout, time_out)

        def finished(result: Any) -> Any:
            if timer.active():
                timer.cancel()
            if isinstance(result, Failure) and timed_out:
                raise RequestTimedOut(
                    "request timed out (Client.Timeout %gs exceeded)" % (self.timeout,)
                )
            return result

        return requested.addBoth(finished)
