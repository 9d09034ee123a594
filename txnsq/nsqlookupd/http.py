# -*- test-case-name: tests.test_nsqlookupd_http -*-
"""
nsqlookupd's HTTP API, served with Klein, answering as Go nsqlookupd v1.3
does: the same routes, replies, JSON and errors.

The routing and reply machinery is shared with nsqd (:mod:`txnsq.http`):
Go's ``internal/http_api`` styles (:mod:`txnsq.http.api`),
julienschmidt/httprouter's answers to a miss (:mod:`txnsq.http.routes`,
with nsqlookupd's own route table :data:`LOOKUPD_ROUTES`) and the
``/debug/pprof`` handlers (:mod:`txnsq.http.pprof`).

Beyond Go: ``POST /topic/delete`` and ``POST /channel/delete`` also delete
the topic or channel on the nsqd producers registered for it, as nsqadmin
does (:mod:`txnsq.nsqlookupd.producer_client`); the reply does not wait
for them.
"""

from __future__ import annotations

from typing import Any, Dict, List, Optional, Tuple

from klein import Klein
from twisted.logger import Logger
from twisted.python.failure import Failure
from twisted.web.iweb import IRequest
from twisted.web.resource import IResource
from werkzeug.exceptions import HTTPException

from txnsq.http.api import raw_query
from txnsq.http.pprof import PprofHandlers, add_pprof_routes
from txnsq.http.routes import GoRouter, Route, go_route
from txnsq.nsqlookupd.core import NSQLookupd
from txnsq.nsqlookupd.producer_client import (
    AgentProducerClient,
    IProducerHTTPClient,
    ProducerDeletions,
)
from txnsq.nsqlookupd.registration_db import (
    ANY,
    CHANNEL,
    CLIENT,
    TOPIC,
    Producer,
    Registration,
    active,
)
from txnsq.protocol.http_params import APIError, parse_query, topic_channel_args
from txnsq.protocol.names import is_valid_topic_name
from txnsq.version import TXNSQ_VERSION

__all__ = ["GO_ZERO_TIME_UNIX_NANO", "LOOKUPD_ROUTES", "NSQLookupdHTTPAPI", "http_resource"]

#: Go's ``time.Time{}.UnixNano()`` (it overflows int64): the
#: ``tombstoned_at`` ``/debug`` shows for a producer never tombstoned.
GO_ZERO_TIME_UNIX_NANO = -6795364578871345152

_NS = 1000000000

#: Every route of Go nsqlookupd v1.3's HTTP server.
LOOKUPD_ROUTES: List[Route] = []


def _nanoseconds(seconds: float) -> int:
    """
    Unix seconds as Go's UnixNano.  The whole seconds are scaled apart from
    the fraction, so float rounding does not show (``.25`` s is 250000000 ns).
    """
    whole = int(seconds)
    return whole * _NS + int(round((seconds - whole) * _NS))


class NSQLookupdHTTPAPI(GoRouter, PprofHandlers):
    """
    The HTTP endpoints of one nsqlookupd.

    :param lookupd: the daemon whose registrations are listed and changed.
    :param producer_client: sends the deletes to producers; an
        :class:`AgentProducerClient <txnsq.nsqlookupd.producer_client.AgentProducerClient>` on
        ``lookupd.clock`` (the reactor) when not given.
    """

    app = Klein()
    routes = LOOKUPD_ROUTES
    _log = Logger()

    def __init__(
        self, lookupd: NSQLookupd, producer_client: Optional[IProducerHTTPClient] = None
    ) -> None:
        self.lookupd = lookupd
        if producer_client is None:
            producer_client = AgentProducerClient(lookupd.clock)
        self.deletions = ProducerDeletions(producer_client)
        self._profiler_clock = lookupd.clock

    def _seconds(self) -> float:
        """Requests are timed by nsqlookupd's clock."""
        return self.lookupd.now()

    @app.handle_errors(HTTPException)
    def _unrouted(self, request: IRequest, failure: Failure) -> Any:
        """Klein found no handler: usually Go's redirect, 405 or 404."""
        return self._serve(request, None)

    # -- request readers ---------------------------------------------------

    def _params(self, request: IRequest) -> Dict[str, List[str]]:
        """Go's ``NewReqParams``: the query, or ``400 INVALID_REQUEST``."""
        values, error = parse_query(raw_query(request)[0])
        if error is not None:
            raise APIError(400, "INVALID_REQUEST")
        return values

    def _topic(self, request: IRequest) -> str:
        """The ``topic`` argument (not checked, as Go's lookups do not)."""
        return self._required(self._params(request), "topic", "MISSING_ARG_TOPIC")

    @staticmethod
    def _required(values: Dict[str, List[str]], name: str, missing: str) -> str:
        """The first value of ``name``, or ``400 missing``."""
        found = values.get(name)
        if found is None:
            raise APIError(400, missing)
        return found[0]

    def _topic_and_channel(self, request: IRequest) -> Tuple[str, str]:
        """Go's ``GetTopicChannelArgs``: both present and valid, in that order."""
        return topic_channel_args(self._params(request))

    # -- status --------------------------------------------------------------

    @go_route(app, "GET", "/ping", style="text", routes=LOOKUPD_ROUTES)
    def ping(self, request: IRequest) -> str:
        """Always ``OK``."""
        return "OK"

    @go_route(app, "GET", "/info", routes=LOOKUPD_ROUTES)
    def info(self, request: IRequest) -> Any:
        """The NSQ version implemented, and txnsq's own (an extra field)."""
        return {"version": self.lookupd.version, "txnsq_version": TXNSQ_VERSION}

    @go_route(app, "GET", "/debug", routes=LOOKUPD_ROUTES)
    def debug(self, request: IRequest) -> Any:
        """
        The raw registration database: ``category:key:subkey`` to its
        producers (a registration without producers is not listed), keys
        sorted as Go marshals a map.
        """
        data: Dict[str, List[Dict[str, Any]]] = {}
        for registration, producers in self.lookupd.db.registrations().items():
            if producers:
                key = "%s:%s:%s" % registration
                data.setdefault(key, []).extend(_debug_producer(p) for p in producers)
        return {key: data[key] for key in sorted(data)}

    # -- lookups -------------------------------------------------------------

    @go_route(app, "GET", "/lookup", routes=LOOKUPD_ROUTES)
    def lookup(self, request: IRequest) -> Any:
        """A topic's channels and active producers; ``404 TOPIC_NOT_FOUND``."""
        topic = self._topic(request)
        db = self.lookupd.db
        if not db.find_registrations(TOPIC, topic, ""):
            raise APIError(404, "TOPIC_NOT_FOUND")
        channels = [r.subkey for r in db.find_registrations(CHANNEL, topic, ANY)]
        producers = self.lookupd.active(db.find_producers(TOPIC, topic, ""))
        return {
            "channels": channels,
            "producers": [p.peer.to_json() for p in producers],
        }

    @go_route(app, "GET", "/topics", routes=LOOKUPD_ROUTES)
    def topics(self, request: IRequest) -> Any:
        """Every topic registered."""
        return {"topics": [r.key for r in self.lookupd.db.find_registrations(TOPIC, ANY, "")]}

    @go_route(app, "GET", "/channels", routes=LOOKUPD_ROUTES)
    def channels(self, request: IRequest) -> Any:
        """The channels registered for ``?topic=`` (none for an unknown topic)."""
        topic = self._topic(request)
        registrations = self.lookupd.db.find_registrations(CHANNEL, topic, ANY)
        return {"channels": [r.subkey for r in registrations]}

    @go_route(app, "GET", "/nodes", routes=LOOKUPD_ROUTES)
    def nodes(self, request: IRequest) -> Any:
        """
        The producers heard from recently, tombstoned ones included, each
        with its topics and whether it is tombstoned for each of them.
        """
        lookupd = self.lookupd
        db = lookupd.db
        now = lookupd.now()
        lifetime = lookupd.options.tombstone_lifetime
        # As Go, a tombstone lifetime of 0: tombstoned producers stay listed.
        listed = active(
            db.find_producers(CLIENT, "", ""), lookupd.options.inactive_producer_timeout, 0.0, now
        )
        nodes = []
        for producer in listed:
            peer = producer.peer
            topics = [r.key for r in db.lookup_registrations(peer.id) if r.category == TOPIC]
            tombstones = []
            for topic in topics:
                entry = db.producer(Registration(TOPIC, topic, ""), peer.id)
                tombstones.append(entry is not None and entry.is_tombstoned(lifetime, now))
            node = peer.to_json()
            node["tombstones"] = tombstones
            node["topics"] = topics
            nodes.append(node)
        return {"producers": nodes}

    # -- changes -------------------------------------------------------------

    @go_route(app, "POST", "/topic/create", routes=LOOKUPD_ROUTES)
    def topic_create(self, request: IRequest) -> None:
        """Register ``?topic=`` with no producer."""
        topic = self._topic(request)
        if not is_valid_topic_name(topic):
            raise APIError(400, "INVALID_ARG_TOPIC")
        self._log.info("DB: adding topic({topic})", topic=topic)
        self.lookupd.db.add_registration(Registration(TOPIC, topic, ""))

    @go_route(app, "POST", "/topic/delete", routes=LOOKUPD_ROUTES)
    def topic_delete(self, request: IRequest) -> None:
        """
        Forget ``?topic=`` and its channels (200 even if unknown), and ask
        the producers registered for it to delete it.
        """
        topic = self._topic(request)
        db = self.lookupd.db
        peers = [p.peer for p in db.find_producers(TOPIC, topic, "")]
        for registration in db.find_registrations(CHANNEL, topic, ANY):
            self._log.info(
                "DB: removing channel({channel}) from topic({topic})",
                channel=registration.subkey,
                topic=topic,
            )
            db.remove_registration(registration)
        for registration in db.find_registrations(TOPIC, topic, ""):
            self._log.info("DB: removing topic({topic})", topic=topic)
            db.remove_registration(registration)
        self.deletions.delete_topic(peers, topic)

    @go_route(app, "POST", "/channel/create", routes=LOOKUPD_ROUTES)
    def channel_create(self, request: IRequest) -> None:
        """Register ``?channel=`` of ``?topic=``, and the topic, with no producer."""
        topic, channel = self._topic_and_channel(request)
        db = self.lookupd.db
        self._log.info(
            "DB: adding channel({channel}) in topic({topic})", channel=channel, topic=topic
        )
        db.add_registration(Registration(CHANNEL, topic, channel))
        self._log.info("DB: adding topic({topic})", topic=topic)
        db.add_registration(Registration(TOPIC, topic, ""))

    @go_route(app, "POST", "/channel/delete", routes=LOOKUPD_ROUTES)
    def channel_delete(self, request: IRequest) -> None:
        """
        Forget a channel (``404 CHANNEL_NOT_FOUND`` if unknown; its topic
        stays), and ask the producers registered for it to delete it.
        """
        topic, channel = self._topic_and_channel(request)
        db = self.lookupd.db
        registrations = db.find_registrations(CHANNEL, topic, channel)
        if not registrations:
            raise APIError(404, "CHANNEL_NOT_FOUND")
        peers = [p.peer for p in db.find_producers(CHANNEL, topic, channel)]
        self._log.info(
            "DB: removing channel({channel}) from topic({topic})", channel=channel, topic=topic
        )
        for registration in registrations:
            db.remove_registration(registration)
        self.deletions.delete_channel(peers, topic, channel)

    @go_route(app, "POST", "/topic/tombstone", routes=LOOKUPD_ROUTES)
    def topic_tombstone(self, request: IRequest) -> None:
        """
        Hide the producer at ``?node=BROADCAST_ADDRESS:HTTP_PORT`` from
        ``/lookup?topic=`` for ``--tombstone-lifetime`` (200 even if no
        producer matches).
        """
        values = self._params(request)
        topic = self._required(values, "topic", "MISSING_ARG_TOPIC")
        node = self._required(values, "node", "MISSING_ARG_NODE")
        self._log.info(
            "DB: setting tombstone for producer@{node} of topic({topic})", node=node, topic=topic
        )
        now = self.lookupd.now()
        for producer in self.lookupd.db.find_producers(TOPIC, topic, ""):
            peer = producer.peer
            # Go formats with %s:%d: no brackets around an IPv6 address.
            if "%s:%d" % (peer.broadcast_address, peer.http_port) == node:
                producer.tombstone(now)

    add_pprof_routes(app, LOOKUPD_ROUTES, "/debug/pprof")


def _debug_producer(producer: Producer) -> Dict[str, Any]:
    """One producer as ``/debug`` shows it: Go's map, so keys sorted."""
    peer = producer.peer
    return {
        "broadcast_address": peer.broadcast_address,
        "hostname": peer.hostname,
        "http_port": peer.http_port,
        "id": peer.id,
        "last_update": _nanoseconds(peer.last_update),
        "tcp_port": peer.tcp_port,
        "tombstoned": producer.tombstoned,
        "tombstoned_at": (
            _nanoseconds(producer.tombstoned_at) if producer.tombstoned else GO_ZERO_TIME_UNIX_NANO
        ),
        "version": peer.version,
    }


def http_resource(
    lookupd: NSQLookupd, producer_client: Optional[IProducerHTTPClient] = None
) -> IResource:
    """
    The resource serving ``lookupd``'s HTTP API.

    :param producer_client: sends topic and channel deletes to producers
        (Twisted's Agent on ``lookupd.clock`` when not given).
    """
    resource: IResource = NSQLookupdHTTPAPI(lookupd, producer_client).app.resource()
    return resource
