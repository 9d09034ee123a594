# -*- test-case-name: tests.test_nsqadmin_pages -*-
"""
nsqadmin's page routes (Go's UI paths: ``/``, ``/topics``,
``/topics/:topic``, ``/topics/:topic/:channel``, ``/nodes``,
``/nodes/:node``, ``/counter``, ``/lookup``) and its static assets.

A topic or channel no node and no lookupd knows, or whose name NSQ would
refuse, gets a 404 page; a cluster of which no node answers gets a 502
page naming each failure.
"""

from __future__ import annotations

import os
from typing import Any, Dict, List

from twisted.internet.defer import Deferred, FirstError, gatherResults, succeed
from twisted.web.iweb import IRequest

from txnsq.http.routes import go_route
from txnsq.nsqadmin.base import ADMIN_APP, ADMIN_ROUTES, AdminBase, PageError
from txnsq.nsqadmin.clusterinfo import ClusterUnavailable, Gathered, http_address
from txnsq.nsqadmin.stats import channel_total, topic_total, topic_totals
from txnsq.nsqadmin import views
from txnsq.nsqadmin.view_parts import Page
from txnsq.protocol.names import is_valid_channel_name, is_valid_topic_name

__all__ = ["ASSETS", "PageHandlers"]

_STATIC = os.path.join(os.path.dirname(__file__), "static")

#: The static assets served under ``/static/``, with their types.
ASSETS = {
    "nsqadmin.css": b"text/css; charset=utf-8",
    "nsqadmin.js": b"text/javascript; charset=utf-8",
}


def _load_assets() -> Dict[str, bytes]:
    # Read once, when the module loads: a few kilobytes shipped with the
    # package, never read again while serving.
    loaded = {}
    for name in ASSETS:
        with open(os.path.join(_STATIC, name), "rb") as f:
            loaded[name] = f.read()
    return loaded


_ASSET_CACHE: Dict[str, bytes] = _load_assets()


class PageHandlers(AdminBase):
    """The HTML pages."""

    def _page(self, request: IRequest) -> Page:
        return Page(
            self.is_admin(request),
            self.history,
            self.clock.seconds(),
            bool(self.lookupds),
            self.base,
        )

    def _topics(self, request: IRequest) -> "Deferred[str]":
        names = self.cluster.topics(self.lookupds, self.nsqds)
        stats = self.gather()

        def render(results: List[Any]) -> str:
            listed, (_, topics, errors) = results
            totals = topic_totals(topics)
            self.record(list(totals.values()))
            every = sorted(set(listed.value) | set(totals))
            seen = {(e.node, e.text) for e in errors}
            errors = errors + [e for e in listed.errors if (e.node, e.text) not in seen]
            return views.topics_page(self._page(request), every, totals, errors)

        waits: List[Any] = [names, stats]
        return gatherResults(waits, consumeErrors=True).addErrback(_first_error).addCallback(render)

    @go_route(ADMIN_APP, "GET", "/", style="html", routes=ADMIN_ROUTES)
    def index(self, request: IRequest) -> "Deferred[str]":
        """The topics page."""
        return self._topics(request)

    @go_route(ADMIN_APP, "GET", "/topics", style="html", routes=ADMIN_ROUTES)
    def topics(self, request: IRequest) -> "Deferred[str]":
        """Every topic with its totals."""
        return self._topics(request)

    def _known_topic(self, topic: str, found: bool) -> "Deferred[bool]":
        """Whether the cluster knows ``topic`` (asked only when no nsqd has it)."""
        if found:
            return succeed(True)
        return self.cluster.topics(self.lookupds, self.nsqds).addCallbacks(
            lambda g: topic in g.value, lambda f: False
        )

    @go_route(ADMIN_APP, "GET", "/topics/:topic", style="html", routes=ADMIN_ROUTES)
    def topic(self, request: IRequest, topic: str) -> "Deferred[str]":
        """One topic; 404 for a topic nobody knows."""
        if not is_valid_topic_name(topic):
            raise PageError(404, "Topic not found", "No topic is named %r." % (topic,))

        def render(result: Any) -> "Deferred[str]":
            producers, topics, errors = result
            total = topic_total(topic, topics)

            def known(exists: bool) -> str:
                if not exists and not errors:
                    raise PageError(404, "Topic not found", "No node knows topic %r." % (topic,))
                self.record([total])
                return views.topic_page(self._page(request), topic, total, errors)

            return self._known_topic(topic, bool(producers or topics)).addCallback(known)

        return self.gather(topic).addCallback(render)

    @go_route(ADMIN_APP, "GET", "/topics/:topic/:channel", style="html", routes=ADMIN_ROUTES)
    def channel(self, request: IRequest, topic: str, channel: str) -> "Deferred[str]":
        """One channel and its clients; 404 for a channel nobody knows."""
        if not is_valid_topic_name(topic) or not is_valid_channel_name(channel):
            raise PageError(
                404, "Channel not found", "No channel is named %r in topic %r." % (channel, topic)
            )

        def render(result: Any) -> "Deferred[str]":
            _, topics, errors = result
            per_node = [c for t in topics for c in t["channels"] if c["channel_name"] == channel]
            total = channel_total(topic, channel, per_node)

            def known(channels: List[str]) -> str:
                if not per_node and channel not in channels and not errors:
                    raise PageError(
                        404,
                        "Channel not found",
                        "No node knows channel %r of topic %r." % (channel, topic),
                    )
                self.history.record(
                    "%s/%s" % (topic, channel), total["depth"], total["message_count"]
                )
                return views.channel_page(self._page(request), topic, channel, total, errors)

            if per_node or not self.lookupds:
                return succeed([]).addCallback(known)
            listed = self.cluster.lookupd_topic_channels(topic, self.lookupds)
            return listed.addCallbacks(lambda g: g.value, lambda f: []).addCallback(known)

        return self.gather(topic, channel, include_clients=True).addCallback(render)

    @go_route(ADMIN_APP, "GET", "/nodes", style="html", routes=ADMIN_ROUTES)
    def nodes(self, request: IRequest) -> "Deferred[str]":
        """Every nsqd."""
        found = self.cluster.producers(self.lookupds, self.nsqds)
        return found.addCallback(lambda g: views.nodes_page(self._page(request), g.value, g.errors))

    @go_route(ADMIN_APP, "GET", "/nodes/:node", style="html", routes=ADMIN_ROUTES)
    def node(self, request: IRequest, node: str) -> "Deferred[str]":
        """One nsqd's topics and channels; 404 for a node nobody lists."""
        found = self.cluster.producers(self.lookupds, self.nsqds)

        def stats(producers: Gathered) -> "Deferred[str]":
            matching = [p for p in producers.value if http_address(p) == node]
            if not matching:
                raise PageError(404, "Node not found", "No nsqd is known at %r." % (node,))
            asked = self.cluster.nsqd_stats(matching[:1], include_clients=False)

            def render(result: Gathered) -> str:
                return views.node_page(
                    self._page(request), node, result.value, producers.errors + result.errors
                )

            def down(failure: Any) -> str:
                failure.trap(ClusterUnavailable)
                return views.node_page(
                    self._page(request), node, [], producers.errors + failure.value.errors
                )

            return asked.addCallbacks(render, down)

        return found.addCallback(stats)

    @go_route(ADMIN_APP, "GET", "/counter", style="html", routes=ADMIN_ROUTES)
    def counter(self, request: IRequest) -> "Deferred[str]":
        """The message counter."""

        def render(result: Any) -> str:
            _, topics, errors = result
            total = sum(c["message_count"] for t in topics for c in t["channels"])
            return views.counter_page(self._page(request), total, errors)

        return self.gather().addCallback(render)

    @go_route(ADMIN_APP, "GET", "/lookup", style="html", routes=ADMIN_ROUTES)
    def lookup(self, request: IRequest) -> "Deferred[str]":
        """The topics and channels nsqlookupd knows."""
        if not self.lookupds:
            return succeed(views.lookup_page(self._page(request), {}, []))
        listed = self.cluster.lookupd_topics(self.lookupds)

        def channels(topics: Gathered) -> "Deferred[str]":
            def one(name: str) -> "Deferred[Any]":
                asked = self.cluster.lookupd_topic_channels(name, self.lookupds)
                return asked.addCallbacks(lambda g: (name, g.value), lambda f: (name, []))

            def render(pairs: List[Any]) -> str:
                return views.lookup_page(self._page(request), dict(pairs), topics.errors)

            return gatherResults([one(n) for n in topics.value]).addCallback(render)

        return listed.addCallback(channels)

    @go_route(ADMIN_APP, "GET", "/static/:asset", style="raw", routes=ADMIN_ROUTES)
    def static(self, request: IRequest, asset: str) -> bytes:
        """One of :data:`ASSETS`; ``404 NOT_FOUND`` otherwise."""
        kind = ASSETS.get(asset)
        if kind is None:
            return self._respond_text(request, 404, "NOT_FOUND")
        data = _ASSET_CACHE[asset]
        request.setHeader(b"Cache-Control", b"max-age=300")
        return self._reply(request, 200, data, kind)


def _first_error(failure: Any) -> Any:
    """gatherResults wraps the failure; pass on the one that happened."""
    if failure.check(FirstError):
        return failure.value.subFailure
    return failure
