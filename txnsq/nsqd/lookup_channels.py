# -*- test-case-name: tests.test_lookup -*-
"""
Asks nsqlookupds which channels a topic has (Go's
``clusterinfo.GetLookupdTopicChannels``): ``GET /channels?topic=T`` on
every lookupd at once, with Twisted's ``Agent``; the answer is the sorted
union of the channels of those that replied.
"""

from __future__ import annotations

import json
from typing import Any, List, Optional, Sequence, Tuple
from urllib.parse import quote_plus

from twisted.internet.defer import Deferred, DeferredList
from twisted.internet.interfaces import IReactorTime
from twisted.logger import Logger
from twisted.python.failure import Failure

from txnsq.http_client import GoHTTPClient, RequestTimedOut, describe_failure, status_error_text

__all__ = ["ChannelLookupError", "TopicChannelsClient"]

class ChannelLookupError(Exception):
    """No lookupd could be asked, or one of them gave no usable answer."""


class TopicChannelsClient:
    """
    Fetches a topic's channels from nsqlookupds' HTTP APIs.

    Each request may take ``request_timeout`` seconds from sending to the
    end of the body, connecting at most ``connect_timeout`` of those (Go's
    ``--http-client-request-timeout`` and ``--http-client-connect-timeout``).
    Connections are not kept: topics are created seldom.

    :param reactor: makes the connections.
    :param clock: times the requests; the reactor when not given.
    """

    _log = Logger()

    def __init__(
        self,
        reactor: Any,
        connect_timeout: float,
        request_timeout: float,
        clock: Optional[IReactorTime] = None,
    ) -> None:
        self.request_timeout = request_timeout
        self._http = GoHTTPClient(reactor, connect_timeout, request_timeout, clock=clock)

    def topic_channels(
        self, topic: str, addresses: Sequence[str]
    ) -> "Deferred[Tuple[List[str], List[str]]]":
        """
        Ask every lookupd in ``addresses`` (HTTP ``host:port``) for the
        channels of ``topic``.  Cancelling the result cancels every request.

        :return: a Deferred firing with ``(channels, errors)``: the sorted
            union of the channels of the lookupds that answered, and one
            line per lookupd that did not; failing with
            :class:`ChannelLookupError` when none answered.
        """
        requests = [
            Deferred.fromCoroutine(self._query(address, topic)) for address in addresses
        ]
        gathered: Deferred[Any] = DeferredList(requests, consumeErrors=True)

        def combine(results: List[Tuple[bool, Any]]) -> Tuple[List[str], List[str]]:
            channels = set()
            errors = []
            for address, (ok, value) in zip(addresses, results):
                if ok:
                    channels.update(value)
                else:
                    errors.append("%s - %s" % (address, _describe(value)))
            if len(errors) == len(results):
                raise ChannelLookupError("failed to query any nsqlookupd: " + "; ".join(errors))
            return sorted(channels), errors

        return gathered.addCallback(combine)

    async def _query(self, address: str, topic: str) -> List[str]:
        url = "http://%s/channels?topic=%s" % (address, quote_plus(topic))
        self._log.info("CI: querying nsqlookupd {url}", url=url)
        try:
            code, phrase, content = await self._http.request("GET", url)
        except RequestTimedOut as error:
            raise ChannelLookupError(str(error))
        if code != 200:
            raise ChannelLookupError(status_error_text(code, phrase, content))
        return _parse_channels(content)


def _parse_channels(content: bytes) -> List[str]:
    """
    The ``channels`` of a ``/channels`` reply, read as Go's
    ``json.Unmarshal`` into ``{Channels []string}``.

    :raises ChannelLookupError: not such a JSON document.
    """
    try:
        document = json.loads(content.decode("utf-8", "surrogateescape"))
    except ValueError as error:
        raise ChannelLookupError("invalid JSON reply - %s" % (error,))
    if document is None:
        return []
    if not isinstance(document, dict):
        raise ChannelLookupError("invalid JSON reply - not an object")
    channels = None
    for key, value in document.items():
        if key == "channels" or (key.lower() == "channels" and channels is None):
            channels = value
    if channels is None:
        return []
    if not isinstance(channels, list) or not all(isinstance(c, str) for c in channels):
        raise ChannelLookupError("invalid JSON reply - channels is not a list of strings")
    return channels


def _describe(failure: Failure) -> str:
    """One line about a failed request."""
    error = failure.value
    if isinstance(error, ChannelLookupError):
        return str(error)
    return describe_failure(error)
