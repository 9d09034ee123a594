# -*- test-case-name: tests.test_tools_nsq_stat -*-
"""
The HTTP questions the tools ask nsqlookupd and nsqd, as Go's
``internal/clusterinfo`` asks them.

- every topic (``GET /topics`` on each lookupd, the union, sorted) for
  ``nsq_to_file --topic-pattern``;
- the nsqds carrying a topic, as HTTP addresses: from lookupds
  (``GET /lookup?topic=``) or by asking nsqds directly
  (``GET /stats?format=json&topic=``);
- those nsqds' ``/stats`` for one topic and channel, for ``nsq_stat``.

Requests go through a ``request(method, url)`` callable returning
``(code, phrase, body)`` (:meth:`txnsq.http_client.GoHTTPClient.request`),
so tests answer them without sockets.
"""

from __future__ import annotations

import json
from typing import Any, Callable, Dict, List, Sequence
from urllib.parse import quote

from twisted.internet.defer import Deferred, DeferredList

from txnsq.addresses import join_host_port
from txnsq.http_client import describe_failure, status_error_text

__all__ = [
    "ClusterError",
    "ClusterHTTP",
]

Requester = Callable[[str, str], "Deferred[Any]"]


class ClusterError(Exception):
    """A question could not be answered; ``str()`` lists each failure."""


def _unwrap(document: Any) -> Any:
    # nsqd and nsqlookupd before 1.0 wrap answers in {"status_code", "data"}.
    if isinstance(document, dict) and "status_code" in document and "data" in document:
        return document["data"]
    return document


class ClusterHTTP:
    """
    Asks lookupds and nsqds.

    :param request: sends one request; ``GoHTTPClient.request``.
    """

    def __init__(self, request: Requester) -> None:
        self._request = request

    def _get_json(self, url: str) -> "Deferred[Any]":
        def parse(reply: Any) -> Any:
            code, phrase, body = reply
            if code != 200:
                raise ClusterError(status_error_text(code, phrase, body))
            try:
                return _unwrap(json.loads(body.decode("utf-8")))
            except ValueError as error:
                raise ClusterError("invalid JSON from %s: %s" % (url.split("?")[0], error))

        return self._request("GET", url).addCallback(parse)

    def _get_all(self, urls: Sequence[str]) -> "Deferred[List[Any]]":
        """Every URL's JSON; fails naming each failure if any failed (Go's ErrList)."""
        requests = [self._get_json(url) for url in urls]

        def gathered(results: List[Any]) -> List[Any]:
            errors = []
            documents = []
            for (ok, value), url in zip(results, urls):
                if ok:
                    documents.append(value)
                else:
                    error = value.value
                    text = str(error) if isinstance(error, ClusterError) else describe_failure(error)
                    errors.append("Get %s: %s" % (url.split("?")[0], text))
            if errors:
                raise ClusterError("\n".join(errors))
            return documents

        return DeferredList(requests, consumeErrors=True).addCallback(gathered)

    def lookupd_topics(self, lookupd_http_addresses: Sequence[str]) -> "Deferred[List[str]]":
        """Every topic any lookupd knows, sorted (Go's ``GetLookupdTopics``)."""
        urls = ["http://%s/topics" % (address,) for address in lookupd_http_addresses]

        def union(documents: List[Any]) -> List[str]:
            topics = set()
            for document in documents:
                for topic in (document or {}).get("topics") or ():
                    if isinstance(topic, str):
                        topics.add(topic)
            return sorted(topics)

        return self._get_all(urls).addCallback(union)

    def lookupd_topic_producers(
        self, topic: str, lookupd_http_addresses: Sequence[str]
    ) -> "Deferred[List[str]]":
        """The HTTP addresses of the nsqds the lookupds list for ``topic``."""
        urls = [
            "http://%s/lookup?topic=%s" % (address, quote(topic, safe=""))
            for address in lookupd_http_addresses
        ]

        def producers(documents: List[Any]) -> List[str]:
            found: Dict[str, None] = {}
            for document in documents:
                for producer in (document or {}).get("producers") or ():
                    if not isinstance(producer, dict):
                        continue
                    host = producer.get("broadcast_address")
                    port = producer.get("http_port")
                    if isinstance(host, str) and isinstance(port, int):
                        found[join_host_port(host, port)] = None
            return list(found)

        return self._get_all(urls).addCallback(producers)

    def nsqd_topic_producers(
        self, topic: str, nsqd_http_addresses: Sequence[str]
    ) -> "Deferred[List[str]]":
        """The nsqds (of ``nsqd_http_addresses``) that have ``topic``."""
        addresses = list(nsqd_http_addresses)
        urls = [
            "http://%s/stats?format=json&topic=%s&include_clients=false"
            % (address, quote(topic, safe=""))
            for address in addresses
        ]

        def having(documents: List[Any]) -> List[str]:
            result = []
            for address, document in zip(addresses, documents):
                for topic_stats in (document or {}).get("topics") or ():
                    if isinstance(topic_stats, dict) and topic_stats.get("topic_name") == topic:
                        result.append(address)
                        break
            return result

        return self._get_all(urls).addCallback(having)

    def nsqd_stats(
        self, producers: Sequence[str], topic: str, channel: str
    ) -> "Deferred[List[Any]]":
        """The ``/stats`` of each producer, for ``topic`` and ``channel``, without clients."""
        urls = [
            "http://%s/stats?format=json&include_clients=false&topic=%s&channel=%s"
            % (address, quote(topic, safe=""), quote(channel, safe=""))
            for address in producers
        ]
        return self._get_all(urls)
