# -*- test-case-name: tests.test_client_discovery -*-
"""
Finding the nsqd that carry a topic by polling nsqlookupd.

Every ``poll_interval`` seconds each configured nsqlookupd is asked
``GET /lookup?topic=...``; since lookupds neither share nor coordinate what
they know, the producers of all the answers are joined, keyed by
``broadcast_address:tcp_port`` as the client library guide requires, and
handed to the consumer, which connects to those it is not yet connected to.

The first poll happens at once. The next one waits a random part (up to
``poll_jitter``) of an interval more, as go-nsq and pynsq do, so consumers
restarted together do not all query and connect at the same moment; then
polls follow every interval. A poll still running when the next is due
makes that one wait.
"""

from __future__ import annotations

import json
import random
from typing import Any, Callable, Dict, List, Optional, Sequence, Set, Tuple
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

from twisted.internet.defer import Deferred, DeferredList, succeed
from twisted.internet.interfaces import IDelayedCall, IReactorTime
from twisted.internet.task import LoopingCall
from twisted.logger import Logger
from twisted.python.failure import Failure

from txnsq.addresses import join_host_port
from txnsq.http_client import describe_failure, status_error_text

__all__ = ["LookupdError", "LookupdPoller", "lookup_url", "parse_lookup_response"]

_log = Logger(namespace="txnsq.client.discovery")

#: ``(status code, reason phrase, body)`` as ``GoHTTPClient.request`` fires.
Reply = Tuple[int, bytes, bytes]

#: Sends ``GET url``; ``GoHTTPClient.request`` fits.
Requester = Callable[[str, str], "Deferred[Reply]"]


class LookupdError(Exception):
    """A lookupd's answer could not be used."""


def lookup_url(address: str, topic: str) -> str:
    """
    The ``/lookup`` URL for ``topic`` on the lookupd at ``address``.

    ``address`` is ``host:port`` or a URL; a URL without a path gets
    ``/lookup``, and its own query parameters are kept (go-nsq's
    ``buildLookupAddr``).
    """
    if "://" not in address:
        address = "http://" + address
    scheme, netloc, path, query, fragment = urlsplit(address)
    if not path or path == "/":
        path = "/lookup"
    params = [(k, v) for k, v in parse_qsl(query, keep_blank_values=True) if k != "topic"]
    params.append(("topic", topic))
    return urlunsplit((scheme, netloc, path, urlencode(params), fragment))


def parse_lookup_response(body: bytes) -> List[str]:
    """
    The ``broadcast_address:tcp_port`` of each producer in a ``/lookup``
    answer; accepts the pre-1.0 ``{"status_code", "data"}`` envelope too.

    :raises LookupdError: the body is not such an answer.
    """
    try:
        data = json.loads(body.decode("utf-8"))
    except ValueError as e:
        raise LookupdError("invalid JSON: %s" % (e,)) from None
    if isinstance(data, dict) and "status_code" in data and isinstance(data.get("data"), dict):
        data = data["data"]
    if not isinstance(data, dict) or not isinstance(data.get("producers"), list):
        raise LookupdError("no producers list in the answer")
    addresses = []
    for producer in data["producers"]:
        if not isinstance(producer, dict):
            raise LookupdError("a producer is not an object")
        host = producer.get("broadcast_address") or producer.get("address")
        port = producer.get("tcp_port")
        if not isinstance(host, str) or not host or not isinstance(port, int):
            raise LookupdError("a producer has no broadcast_address or tcp_port")
        addresses.append(join_host_port(host, port))
    return addresses


class LookupdPoller:
    """
    Polls nsqlookupds for a topic and reports the union of their producers.

    :param clock: schedules the polls.
    :param request: sends ``GET url`` (``GoHTTPClient(...).request``).
    :param lookupd_http_addresses: ``host:port`` or URLs of the lookupds.
    :param topic: the topic to look up.
    :param on_producers: called after each poll with the addresses of the
        producers found (``host:port``), if any lookupd answered.
    :param poll_interval: seconds between polls.
    :param poll_jitter: the share of ``poll_interval`` (0..1) the second
        poll is randomly delayed by.
    :param rng: draws the jitter.

    :ivar polls: how many polls have started.
    """

    def __init__(
        self,
        clock: IReactorTime,
        request: Requester,
        lookupd_http_addresses: Sequence[str],
        topic: str,
        on_producers: Callable[[List[str]], None],
        poll_interval: float = 60.0,
        poll_jitter: float = 0.3,
        rng: Optional[random.Random] = None,
    ) -> None:
        if not 0 <= poll_jitter <= 1:
            raise ValueError("poll_jitter must be within 0 and 1")
        if poll_interval <= 0:
            raise ValueError("poll_interval must be positive")
        self._clock = clock
        self._request = request
        self._urls = [lookup_url(a, topic) for a in lookupd_http_addresses]
        self._on_producers = on_producers
        self.poll_interval = poll_interval
        self.poll_jitter = poll_jitter
        self._rng = rng if rng is not None else random.Random()
        self._loop: Optional[LoopingCall] = None
        self._delayed: Optional[IDelayedCall] = None
        self._running: Dict[int, "Deferred[Any]"] = {}
        self._stopped = False
        self.polls = 0

    @property
    def running(self) -> bool:
        """Whether polling has started and not stopped."""
        return self._delayed is not None or self._loop is not None

    def start(self) -> None:
        """Poll now, then after the jitter and every interval."""
        if self.running:
            return
        self._stopped = False
        jitter = self._rng.random() * self.poll_jitter * self.poll_interval
        self._delayed = self._clock.callLater(self.poll_interval + jitter, self._start_loop)
        self.poll()

    def _start_loop(self) -> None:
        self._delayed = None
        loop = LoopingCall(self.poll)
        loop.clock = self._clock
        self._loop = loop
        loop.start(self.poll_interval, now=True).addErrback(
            lambda f: _log.failure("lookupd polling stopped", failure=f)
        )

    def stop(self) -> None:
        """Stop polling; requests under way are cancelled."""
        self._stopped = True
        if self._delayed is not None:
            if self._delayed.active():
                self._delayed.cancel()
            self._delayed = None
        if self._loop is not None:
            loop, self._loop = self._loop, None
            if loop.running:
                loop.stop()
        for d in list(self._running.values()):
            d.cancel()

    def poll(self) -> "Deferred[None]":
        """
        Ask every lookupd once and report the union of the producers.

        :return: fires when every lookupd has answered or failed; never fails.
        """
        self.polls += 1
        queries = [self._query(url) for url in self._urls]
        if not queries:
            return succeed(None)

        def report(results: List[Tuple[bool, Any]]) -> None:
            answered = [value for ok, value in results if ok and value is not None]
            if not answered:
                return
            seen: Set[str] = set()
            union: List[str] = []
            for addresses in answered:
                for address in addresses:
                    if address not in seen:
                        seen.add(address)
                        union.append(address)
            self._on_producers(union)

        done: Deferred[Any] = DeferredList(queries, consumeErrors=True)
        done.addCallback(report)
        done.addErrback(lambda f: _log.failure("handling lookupd answers failed", failure=f))
        return done

    def _query(self, url: str) -> "Deferred[Optional[List[str]]]":
        _log.debug("querying nsqlookupd {url}", url=url)
        d: Deferred[Any] = self._request("GET", url)
        key = id(d)
        self._running[key] = d

        def answered(reply: Reply) -> List[str]:
            code, phrase, body = reply
            if code != 200:
                raise LookupdError(status_error_text(code, phrase, body))
            return parse_lookup_response(body)

        def failed(failure: Failure) -> None:
            if self._stopped:
                return None
            _log.warn(
                "error querying nsqlookupd ({url}) - {error}",
                url=_without_query(url),
                error=describe_failure(failure.value),
            )
            return None

        def forget(result: Any) -> Any:
            self._running.pop(key, None)
            return result

        d.addBoth(forget)
        d.addCallback(answered)
        d.addErrback(failed)
        return d


def _without_query(url: str) -> str:
    # The query of a lookupd URL may carry a secret the user put there.
    scheme, netloc, path, _, _ = urlsplit(url)
    return urlunsplit((scheme, netloc, path, "", ""))
