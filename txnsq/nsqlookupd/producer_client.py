# -*- test-case-name: tests.test_nsqlookupd_http -*-
"""
nsqlookupd asking its producers (nsqd) to delete a topic or a channel.

Go nsqlookupd only forgets a deleted topic; nsqadmin then deletes it on
every nsqd that serves it.  txnsq's nsqlookupd does both, so a delete sent
to it alone is complete: :class:`ProducerDeletions` sends each producer
``POST /topic/delete?topic=T`` (or ``/channel/delete?topic=T&channel=C``),
as nsqadmin does, and the nsqd then UNREGISTERs itself.

The requests are fire-and-forget: nothing waits for them and a failure is
one log line.  They go through an :class:`IProducerHTTPClient`, which tests
replace with a recorder; :class:`AgentProducerClient` is the real one.
"""

from __future__ import annotations

from typing import Any, Iterable, List, Optional, Tuple
from urllib.parse import urlencode

from twisted.internet.defer import Deferred, maybeDeferred
from twisted.internet.interfaces import IReactorTime
from twisted.logger import Logger
from twisted.python.failure import Failure
from zope.interface import Interface, implementer

from txnsq import __version__
from txnsq.http_client import GoHTTPClient, RequestTimedOut, describe_failure, status_error_text
from txnsq.protocol.lookup_v1 import PeerInfo
from txnsq.protocol.names import is_valid_channel_name, is_valid_topic_name

__all__ = [
    "AgentProducerClient",
    "IProducerHTTPClient",
    "ProducerDeletions",
    "ProducerRequestError",
    "producer_http_address",
]

#: nsqadmin's ``--http-client-connect-timeout`` and ``--http-client-request-timeout``.
DEFAULT_CONNECT_TIMEOUT = 2.0
DEFAULT_REQUEST_TIMEOUT = 5.0

class ProducerRequestError(Exception):
    """A producer did not answer 200 (Go's ``got response ...``), or timed out."""


class IProducerHTTPClient(Interface):
    """Sends one POST to an nsqd's HTTP API."""

    def post(url: str) -> "Deferred[None]":
        """
        POST to ``url`` with an empty body.

        :return: a Deferred firing with None on a 200 reply, or failing
            (:class:`ProducerRequestError` for another status or a timeout,
            the transport's error otherwise).
        """


@implementer(IProducerHTTPClient)
class AgentProducerClient:
    """
    :class:`IProducerHTTPClient` with Twisted's ``Agent``: each request may
    take ``request_timeout`` seconds, connecting at most ``connect_timeout``
    of them.  Connections are not kept: deletes are rare.
    """

    def __init__(
        self,
        reactor: Any,
        connect_timeout: float = DEFAULT_CONNECT_TIMEOUT,
        request_timeout: float = DEFAULT_REQUEST_TIMEOUT,
        clock: Optional[IReactorTime] = None,
    ) -> None:
        """
        :param reactor: makes the connections (``IReactorTCP``, name
            resolution) and, unless ``clock`` is given, times them.
        """
        self._http = GoHTTPClient(
            reactor,
            connect_timeout,
            request_timeout,
            clock=clock,
            user_agent=b"txnsq-nsqlookupd/" + __version__.encode("ascii"),
        )

    def post(self, url: str) -> "Deferred[None]":
        """POST to ``url``; see :meth:`IProducerHTTPClient.post`."""

        def check(reply: Tuple[int, bytes, bytes]) -> None:
            code, phrase, content = reply
            if code != 200:
                raise ProducerRequestError(status_error_text(code, phrase, content))

        def timed_out(failure: Failure) -> None:
            failure.trap(RequestTimedOut)
            raise ProducerRequestError(failure.getErrorMessage())

        return self._http.request("POST", url).addCallbacks(check, timed_out)


def producer_http_address(peer: PeerInfo) -> str:
    """``broadcast_address:http_port`` (Go's ``net.JoinHostPort``: IPv6 in brackets)."""
    host = peer.broadcast_address
    if ":" in host:
        host = "[%s]" % (host,)
    return "%s:%d" % (host, peer.http_port)


def _describe(failure: Failure) -> str:
    """One line about a failed request."""
    error = failure.value
    if isinstance(error, ProducerRequestError):
        return str(error)
    return describe_failure(error)


class ProducerDeletions:
    """
    Deletes topics and channels on the producers that serve them, through
    ``client``; never raises and never waits.
    """

    _log = Logger()

    def __init__(self, client: IProducerHTTPClient) -> None:
        self.client = client

    def delete_topic(self, peers: Iterable[PeerInfo], topic: str) -> List["Deferred[None]"]:
        """
        ``POST /topic/delete?topic=TOPIC`` to each producer in ``peers``
        (one request per HTTP address).  A name nsqd could not hold (a
        ``*`` pattern) is sent nowhere.

        :return: one Deferred per request, firing with None once it is
            answered or its failure logged (for tests; callers need not wait).
        """
        if not is_valid_topic_name(topic):
            return []
        return self._send(peers, "/topic/delete", [("topic", topic)], "topic(%s)" % (topic,))

    def delete_channel(
        self, peers: Iterable[PeerInfo], topic: str, channel: str
    ) -> List["Deferred[None]"]:
        """
        ``POST /channel/delete?topic=TOPIC&channel=CHANNEL`` to each
        producer in ``peers``; as :meth:`delete_topic`.
        """
        if not (is_valid_topic_name(topic) and is_valid_channel_name(channel)):
            return []
        return self._send(
            peers,
            "/channel/delete",
            [("topic", topic), ("channel", channel)],
            "channel(%s) of topic(%s)" % (channel, topic),
        )

    def _send(
        self, peers: Iterable[PeerInfo], path: str, query: List[Any], what: str
    ) -> List["Deferred[None]"]:
        sent: List["Deferred[None]"] = []
        addresses: List[str] = []
        for peer in peers:
            address = producer_http_address(peer)
            # One nsqd may be registered twice (a reconnect not yet noticed).
            if address in addresses:
                continue
            addresses.append(address)
            url = "http://%s%s?%s" % (address, path, urlencode(query))
            self._log.info("deleting {what} on nsqd {address}", what=what, address=address)
            sending = maybeDeferred(self.client.post, url)
            sending.addErrback(self._failed, what, address)
            sent.append(sending)
        return sent

    def _failed(self, failure: Failure, what: str, address: str) -> None:
        self._log.error(
            "failed to delete {what} on nsqd {address} - {reason}",
            what=what,
            address=address,
            reason=_describe(failure),
        )
