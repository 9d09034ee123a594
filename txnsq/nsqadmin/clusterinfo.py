# -*- test-case-name: tests.test_nsqadmin_clusterinfo -*-
"""
What nsqadmin asks nsqlookupds and nsqds, as Go's ``internal/clusterinfo``
asks it: every node at once, and a node that fails (refused, timed out,
an error status, not JSON) is named with its error while the others'
answers are used.  Only when every node failed does a question fail, with
:class:`ClusterUnavailable` (Go's ``failed to query any nsqlookupd: ...``).

Producers (nsqds) are dicts in the JSON shape of Go's ``Producer``.
"""

from __future__ import annotations

import json
from typing import Any, Callable, Dict, List, NamedTuple, Optional, Sequence, Tuple
from urllib.parse import quote

from twisted.internet.defer import Deferred, DeferredList, fail, succeed

from txnsq.addresses import join_host_port
from txnsq.http_client import describe_failure, status_error_text
from txnsq.nsqadmin.stats import node_topic

__all__ = [
    "ClusterInfo",
    "ClusterUnavailable",
    "Gathered",
    "NodeError",
    "http_address",
]

#: ``request(method, url, body)`` firing with ``(code, phrase, body)``.
Requester = Callable[[str, str, Optional[bytes]], "Deferred[Tuple[int, bytes, bytes]]"]


class NodeError(NamedTuple):
    """One node's failure: its address and what went wrong."""

    node: str
    text: str

    def __str__(self) -> str:
        return self.text


class Gathered(NamedTuple):
    """An answer and the failures of the nodes that did not contribute."""

    value: Any
    errors: List[NodeError]


class ClusterUnavailable(Exception):
    """No node of those asked answered; ``str()`` lists each failure."""

    def __init__(self, text: str, errors: List[NodeError]) -> None:
        Exception.__init__(self, text)
        self.errors = errors


class _StatusError(Exception):
    """An answer that is not a 200 with JSON."""


def http_address(producer: Dict[str, Any]) -> str:
    """A producer's HTTP address, ``broadcast_address:http_port``."""
    return join_host_port(
        str(producer.get("broadcast_address", "")), int(producer.get("http_port") or 0)
    )


def _unwrap(document: Any) -> Any:
    # nsqd and nsqlookupd before 1.0 wrap answers in {"status_code", "data"}.
    if isinstance(document, dict) and "status_code" in document and "data" in document:
        return document["data"]
    return document


def _version_key(version: str) -> Tuple[int, ...]:
    parts = []
    for piece in version.split("-")[0].split(".")[:3]:
        try:
            parts.append(int(piece))
        except ValueError:
            parts.append(0)
    return tuple(parts + [0] * (3 - len(parts)))


def _q(value: str) -> str:
    return quote(value, safe="")


class ClusterInfo:
    """
    Questions and actions over nsqlookupds and nsqds.

    :param request: sends one request
        (:meth:`txnsq.http_client.GoHTTPClient.request`).
    """

    def __init__(self, request: Requester) -> None:
        self._request = request

    # -- plumbing -----------------------------------------------------------

    def _call(self, method: str, node: str, url: str) -> "Deferred[Any]":
        def parse(reply: Tuple[int, bytes, bytes]) -> Any:
            code, phrase, body = reply
            if code != 200:
                raise _StatusError(status_error_text(code, phrase, body))
            if method != "GET":
                return None
            try:
                return _unwrap(json.loads(body.decode("utf-8")))
            except ValueError as error:
                raise _StatusError("invalid JSON: %s" % (error,))

        try:
            requested = self._request(method, url, None)
        except Exception as error:  # a URL that cannot be sent (not ASCII)
            return fail(error)
        return requested.addCallback(parse)

    def _each(
        self, method: str, calls: Sequence[Tuple[str, str]], what: str
    ) -> "Deferred[Tuple[List[Tuple[str, Any]], List[NodeError]]]":
        """
        Ask every ``(node, url)`` at once; fires with the answers by node and
        the failures, or fails with :class:`ClusterUnavailable` if all failed.
        """
        if not calls:
            return succeed(([], []))
        waits = [self._call(method, node, url) for node, url in calls]

        def gathered(
            results: List[Tuple[bool, Any]],
        ) -> Tuple[List[Tuple[str, Any]], List[NodeError]]:
            answers: List[Tuple[str, Any]] = []
            errors: List[NodeError] = []
            for (ok, value), (node, url) in zip(results, calls):
                if ok:
                    answers.append((node, value))
                else:
                    error = value.value
                    text = (
                        str(error) if isinstance(error, _StatusError) else describe_failure(error)
                    )
                    errors.append(NodeError(node, "%s %s: %s" % (method, url, text)))
            if errors and not answers and method == "GET":
                raise ClusterUnavailable(
                    "failed to query any %s: %s" % (what, "\n".join(e.text for e in errors)),
                    errors,
                )
            return answers, errors

        return DeferredList(waits, consumeErrors=True).addCallback(gathered)

    # -- topics and channels --------------------------------------------------

    def lookupd_topics(self, lookupds: Sequence[str]) -> "Deferred[Gathered]":
        """Every topic the lookupds know, sorted."""
        calls = [(a, "http://%s/topics" % (a,)) for a in lookupds]

        def union(result: Any) -> Gathered:
            answers, errors = result
            topics = set()
            for _, doc in answers:
                for topic in (doc or {}).get("topics") or ():
                    if isinstance(topic, str):
                        topics.add(topic)
            return Gathered(sorted(topics), errors)

        return self._each("GET", calls, "nsqlookupd").addCallback(union)

    def nsqd_topics(self, nsqds: Sequence[str]) -> "Deferred[Gathered]":
        """Every topic the nsqds have, sorted."""
        calls = [(a, "http://%s/stats?format=json&include_clients=false" % (a,)) for a in nsqds]

        def union(result: Any) -> Gathered:
            answers, errors = result
            topics = set()
            for _, doc in answers:
                for topic in (doc or {}).get("topics") or ():
                    if isinstance(topic, dict) and isinstance(topic.get("topic_name"), str):
                        topics.add(topic["topic_name"])
            return Gathered(sorted(topics), errors)

        return self._each("GET", calls, "nsqd").addCallback(union)

    def topics(self, lookupds: Sequence[str], nsqds: Sequence[str]) -> "Deferred[Gathered]":
        """Every topic: the lookupds' when there are lookupds, else the nsqds'."""
        if lookupds:
            return self.lookupd_topics(lookupds)
        return self.nsqd_topics(nsqds)

    def lookupd_topic_channels(self, topic: str, lookupds: Sequence[str]) -> "Deferred[Gathered]":
        """The channels the lookupds know for ``topic``, sorted."""
        calls = [(a, "http://%s/channels?topic=%s" % (a, _q(topic))) for a in lookupds]

        def union(result: Any) -> Gathered:
            answers, errors = result
            channels = set()
            for _, doc in answers:
                for channel in (doc or {}).get("channels") or ():
                    if isinstance(channel, str):
                        channels.add(channel)
            return Gathered(sorted(channels), errors)

        return self._each("GET", calls, "nsqlookupd").addCallback(union)

    # -- producers --------------------------------------------------------------

    @staticmethod
    def _lookupd_producer(raw: Dict[str, Any]) -> Dict[str, Any]:
        topics = raw.get("topics") or []
        tombstones = raw.get("tombstones") or []
        return {
            "remote_addresses": [],
            "remote_address": str(raw.get("remote_address", "")),
            "hostname": str(raw.get("hostname", "")),
            "broadcast_address": str(raw.get("broadcast_address", "")),
            "tcp_port": int(raw.get("tcp_port") or 0),
            "http_port": int(raw.get("http_port") or 0),
            "version": str(raw.get("version", "")),
            "topics": sorted(
                (
                    {
                        "topic": t,
                        "tombstoned": bool(tombstones[i]) if i < len(tombstones) else False,
                    }
                    for i, t in enumerate(topics)
                    if isinstance(t, str)
                ),
                key=lambda entry: entry["topic"],
            ),
            "out_of_date": False,
        }

    def lookupd_producers(self, lookupds: Sequence[str]) -> "Deferred[Gathered]":
        """Every nsqd the lookupds list (``/nodes``), once each, by hostname."""
        calls = [(a, "http://%s/nodes" % (a,)) for a in lookupds]

        def merge(result: Any) -> Gathered:
            answers, errors = result
            by_tcp: Dict[str, Dict[str, Any]] = {}
            for lookupd, doc in answers:
                for raw in (doc or {}).get("producers") or ():
                    if not isinstance(raw, dict):
                        continue
                    producer = self._lookupd_producer(raw)
                    key = join_host_port(producer["broadcast_address"], producer["tcp_port"])
                    kept = by_tcp.setdefault(key, producer)
                    kept["remote_addresses"].append(
                        "%s/%s" % (lookupd, producer["remote_address"] or "N/A")
                    )
            producers = list(by_tcp.values())
            if producers:
                newest = max(_version_key(p["version"]) for p in producers)
                for producer in producers:
                    producer["out_of_date"] = _version_key(producer["version"]) < newest
            producers.sort(key=lambda p: p["hostname"])
            return Gathered(producers, errors)

        return self._each("GET", calls, "nsqlookupd").addCallback(merge)

    def lookupd_topic_producers(self, topic: str, lookupds: Sequence[str]) -> "Deferred[Gathered]":
        """The nsqds the lookupds list for ``topic`` (``/lookup``)."""
        calls = [(a, "http://%s/lookup?topic=%s" % (a, _q(topic))) for a in lookupds]

        def merge(result: Any) -> Gathered:
            answers, errors = result
            found: Dict[str, Dict[str, Any]] = {}
            for _, doc in answers:
                for raw in (doc or {}).get("producers") or ():
                    if isinstance(raw, dict):
                        producer = self._lookupd_producer(raw)
                        found.setdefault(http_address(producer), producer)
            # A lookupd that does not know the topic answers 404: not a failure.
            errors = [e for e in errors if "got response 404" not in e.text]
            return Gathered(list(found.values()), errors)

        def unknown_everywhere(failure: Any) -> Gathered:
            failure.trap(ClusterUnavailable)
            errors = [e for e in failure.value.errors if "got response 404" not in e.text]
            if errors:
                return failure
            return Gathered([], [])

        return self._each("GET", calls, "nsqlookupd").addCallbacks(merge, unknown_everywhere)

    def _nsqd_infos(self, nsqds: Sequence[str], topic: Optional[str]) -> "Deferred[Gathered]":
        """
        The nsqds (of those given) as producers, from ``/stats`` then
        ``/info``; with ``topic``, only those that have it.
        """
        query = "format=json&include_clients=false"
        if topic is not None:
            query += "&topic=" + _q(topic)
        stats_calls = [(a, "http://%s/stats?%s" % (a, query)) for a in nsqds]

        def with_info(result: Any) -> "Deferred[Gathered]":
            answers, errors = result
            wanted: Dict[str, List[str]] = {}
            for address, doc in answers:
                names = [
                    t["topic_name"]
                    for t in (doc or {}).get("topics") or ()
                    if isinstance(t, dict) and isinstance(t.get("topic_name"), str)
                ]
                if topic is None or topic in names:
                    wanted[address] = names
            info_calls = [(a, "http://%s/info" % (a,)) for a in wanted]

            def build(info_result: Any) -> Gathered:
                infos, info_errors = info_result
                producers = []
                for address, info in infos:
                    info = info or {}
                    host, _, port = address.rpartition(":")
                    broadcast = str(info.get("broadcast_address") or host.strip("[]"))
                    http_port = int(info.get("http_port") or (port if port.isdigit() else 0))
                    producers.append(
                        {
                            "remote_addresses": [],
                            "remote_address": "",
                            "hostname": str(info.get("hostname") or host.strip("[]")),
                            "broadcast_address": broadcast,
                            "tcp_port": int(info.get("tcp_port") or 0),
                            "http_port": http_port,
                            "version": str(info.get("version", "")),
                            "topics": [
                                {"topic": name, "tombstoned": False}
                                for name in sorted(wanted[address])
                            ],
                            "out_of_date": False,
                        }
                    )
                return Gathered(producers, errors + info_errors)

            return self._each("GET", info_calls, "nsqd").addCallback(build)

        return self._each("GET", stats_calls, "nsqd").addCallback(with_info)

    def producers(self, lookupds: Sequence[str], nsqds: Sequence[str]) -> "Deferred[Gathered]":
        """Every nsqd: the lookupds' ``/nodes``, else the given nsqds."""
        if lookupds:
            return self.lookupd_producers(lookupds)
        return self._nsqd_infos(nsqds, None)

    def topic_producers(
        self, topic: str, lookupds: Sequence[str], nsqds: Sequence[str]
    ) -> "Deferred[Gathered]":
        """The nsqds that have ``topic``."""
        if lookupds:
            return self.lookupd_topic_producers(topic, lookupds)
        return self._nsqd_infos(nsqds, topic)

    # -- stats -----------------------------------------------------------------

    def nsqd_stats(
        self,
        producers: Sequence[Dict[str, Any]],
        topic: str = "",
        channel: str = "",
        include_clients: bool = True,
    ) -> "Deferred[Gathered]":
        """
        The producers' ``/stats``: a :class:`Gathered` whose value is the
        list of per-node topic stats (:func:`node_topic <txnsq.nsqadmin.stats.node_topic>`),
        only ``topic``'s when one is given.
        """
        calls = []
        hostnames = {}
        for producer in producers:
            address = http_address(producer)
            hostnames[address] = producer.get("hostname", "")
            url = "http://%s/stats?format=json" % (address,)
            if topic:
                url += "&topic=" + _q(topic)
                if channel:
                    url += "&channel=" + _q(channel)
            if not include_clients:
                url += "&include_clients=false"
            calls.append((address, url))

        def collect(result: Any) -> Gathered:
            answers, errors = result
            topics = []
            for address, doc in answers:
                for raw in (doc or {}).get("topics") or ():
                    if not isinstance(raw, dict):
                        continue
                    stats = node_topic(raw, address, str(hostnames[address]), include_clients)
                    if topic and stats["topic_name"] != topic:
                        continue
                    topics.append(stats)
            topics.sort(key=lambda t: (t["topic_name"], t["hostname"], t["node"]))
            return Gathered(topics, errors)

        return self._each("GET", calls, "nsqd").addCallback(collect)

    # -- actions ----------------------------------------------------------------

    def _post(
        self, nodes: Sequence[str], path: str, query: str, what: str
    ) -> "Deferred[List[NodeError]]":
        calls = [(node, "http://%s/%s?%s" % (node, path, query)) for node in nodes]
        return self._each("POST", calls, what).addCallback(lambda result: result[1])

    def post_lookupds(
        self, lookupds: Sequence[str], path: str, query: str
    ) -> "Deferred[List[NodeError]]":
        """POST ``/path?query`` to every lookupd; fires with the failures."""
        return self._post(lookupds, path, query, "nsqlookupd")

    def post_producers(
        self, producers: Sequence[Dict[str, Any]], path: str, query: str
    ) -> "Deferred[List[NodeError]]":
        """POST ``/path?query`` to every producer; fires with the failures."""
        return self._post([http_address(p) for p in producers], path, query, "nsqd")
