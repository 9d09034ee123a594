# -*- test-case-name: tests.test_nsqadmin_api -*-
"""
nsqadmin's JSON API, answering as Go nsqadmin v1.3's ``/api/*`` does: the
same routes, JSON shapes, messages (``WARNING: ...`` when some node
failed) and statuses (``502 UPSTREAM_ERROR: ...`` when none answered,
``403 FORBIDDEN`` for a user who may not act, ``400`` for a bad body),
and Go's ``/config/:opt`` (:mod:`txnsq.nsqadmin.config`).
"""

from __future__ import annotations

import json
from typing import Any, Dict, List

from twisted.internet.defer import Deferred, gatherResults
from twisted.web.iweb import IRequest

from txnsq.http.routes import go_route
from txnsq.logging import set_log_level
from txnsq.nsqadmin.actions import ACTIONS
from txnsq.nsqadmin.base import ADMIN_APP, ADMIN_ROUTES, AdminBase, warning
from txnsq.nsqadmin.clusterinfo import Gathered, NodeError, http_address
from txnsq.nsqadmin.config import MAX_CONFIG_BODY, config_allowed, config_value, set_config_value
from txnsq.nsqadmin.stats import channel_total, topic_total
from txnsq.protocol.http_params import APIError
from txnsq.protocol.names import is_valid_channel_name, is_valid_topic_name

__all__ = ["APIHandlers", "body_json"]


def body_json(request: IRequest) -> Dict[str, Any]:
    """
    The request body as a JSON object.

    :raises APIError: 400 with the decoder's complaint.
    """
    content = request.content
    raw = b""
    if content is not None:
        content.seek(0)
        raw = content.read()
    if not raw.strip():
        raise APIError(400, "EOF")
    try:
        doc = json.loads(raw.decode("utf-8"))
    except (ValueError, UnicodeDecodeError) as error:
        raise APIError(400, str(error))
    if not isinstance(doc, dict):
        raise APIError(400, "json: cannot unmarshal %s into Go value" % (type(doc).__name__,))
    return doc


def _text(doc: Dict[str, Any], name: str) -> str:
    value = doc.get(name, "")
    if value is None:
        return ""
    if not isinstance(value, str):
        raise APIError(
            400, "json: cannot unmarshal into Go struct field .%s of type string" % (name,)
        )
    return value


class APIHandlers(AdminBase):
    """The ``/api/*`` routes and ``/ping``."""

    @go_route(ADMIN_APP, "GET", "/ping", style="text", routes=ADMIN_ROUTES)
    def ping(self, request: IRequest) -> str:
        """Always ``OK``."""
        return "OK"

    @go_route(ADMIN_APP, "GET", "/api/topics", routes=ADMIN_ROUTES)
    def api_topics(self, request: IRequest) -> "Deferred[Any]":
        """Every topic; with ``?inactive=true``, the topics no nsqd has, with their channels."""
        inactive = self._query(request).get("inactive", [""])[0] == "true"
        found = self.cluster.topics(self.lookupds, self.nsqds)

        def answer(topics: Gathered) -> Any:
            if not inactive:
                return {"topics": topics.value, "message": warning(topics.errors)}
            if not self.lookupds:
                return {"topics": {}, "message": warning(topics.errors)}
            return self._inactive(topics)

        return found.addCallback(answer)

    def _inactive(self, topics: Gathered) -> "Deferred[Any]":
        def one(name: str) -> "Deferred[Any]":
            producers = self.cluster.lookupd_topic_producers(name, self.lookupds)

            def channels(found: Gathered) -> Any:
                if found.value:
                    return None
                listed = self.cluster.lookupd_topic_channels(name, self.lookupds)
                return listed.addCallbacks(lambda g: (name, g.value), lambda f: (name, []))

            return producers.addCallbacks(channels, lambda f: None)

        def answer(results: List[Any]) -> Any:
            mapping = {r[0]: r[1] for r in results if r is not None}
            return {"topics": mapping, "message": warning(topics.errors)}

        return gatherResults([one(name) for name in topics.value]).addCallback(answer)

    @go_route(ADMIN_APP, "GET", "/api/topics/:topic", routes=ADMIN_ROUTES)
    def api_topic(self, request: IRequest, topic: str) -> "Deferred[Any]":
        """The topic summed over its nsqds, each node under ``nodes``."""

        def answer(result: Any) -> Any:
            _, topics, errors = result
            total = topic_total(topic, topics)
            self.record([total])
            total["message"] = warning(errors)
            return total

        return self.gather(topic, strict=True).addCallback(answer)

    @go_route(ADMIN_APP, "GET", "/api/topics/:topic/:channel", routes=ADMIN_ROUTES)
    def api_channel(self, request: IRequest, topic: str, channel: str) -> "Deferred[Any]":
        """The channel summed over the topic's nsqds, with every client."""

        def answer(result: Any) -> Any:
            _, topics, errors = result
            per_node = [c for t in topics for c in t["channels"] if c["channel_name"] == channel]
            if not per_node:
                # Go embeds a nil *ChannelStats: only the message is left.
                return {"message": warning(errors)}
            total = channel_total(topic, channel, per_node)
            total["message"] = warning(errors)
            return total

        return self.gather(topic, channel, include_clients=True, strict=True).addCallback(answer)

    @go_route(ADMIN_APP, "GET", "/api/nodes", routes=ADMIN_ROUTES)
    def api_nodes(self, request: IRequest) -> "Deferred[Any]":
        """Every nsqd, as Go's ``Producer``."""
        found = self.cluster.producers(self.lookupds, self.nsqds)
        return found.addCallback(lambda g: {"nodes": g.value, "message": warning(g.errors)})

    @go_route(ADMIN_APP, "GET", "/api/nodes/:node", routes=ADMIN_ROUTES)
    def api_node(self, request: IRequest, node: str) -> "Deferred[Any]":
        """One nsqd's topics; ``404 NODE_NOT_FOUND`` for an address no lookupd lists."""
        found = self.cluster.producers(self.lookupds, self.nsqds)

        def stats(producers: Gathered) -> "Deferred[Any]":
            matching = [p for p in producers.value if http_address(p) == node]
            if not matching:
                raise APIError(404, "NODE_NOT_FOUND")

            def answer(result: Gathered) -> Any:
                clients = sum(len(c["clients"]) for t in result.value for c in t["channels"])
                messages = sum(t["message_count"] for t in result.value)
                return {
                    "node": node,
                    "topics": result.value,
                    "total_messages": messages,
                    "total_clients": clients,
                    "message": warning(producers.errors),
                }

            return self.cluster.nsqd_stats(matching[:1]).addCallback(answer)

        return found.addCallback(stats)

    @go_route(ADMIN_APP, "GET", "/api/counter", routes=ADMIN_ROUTES)
    def api_counter(self, request: IRequest) -> "Deferred[Any]":
        """Messages per ``topic:channel:node``."""

        def answer(result: Any) -> Any:
            _, topics, errors = result
            stats: Dict[str, Any] = {}
            for topic in topics:
                for channel in topic["channels"]:
                    key = "%s:%s:%s" % (
                        topic["topic_name"],
                        channel["channel_name"],
                        channel["node"],
                    )
                    entry = stats.setdefault(
                        key,
                        {
                            "node": channel["node"],
                            "topic_name": topic["topic_name"],
                            "channel_name": channel["channel_name"],
                            "message_count": 0,
                        },
                    )
                    entry["message_count"] += channel["message_count"]
            return {"stats": {k: stats[k] for k in sorted(stats)}, "message": warning(errors)}

        return self.gather(strict=True).addCallback(answer)

    # -- actions ------------------------------------------------------------------

    @staticmethod
    def _warned(errors: List[NodeError]) -> Any:
        return {"message": warning(errors)}

    @go_route(ADMIN_APP, "POST", "/api/topics", routes=ADMIN_ROUTES)
    def api_create(self, request: IRequest) -> "Deferred[Any]":
        """Create a topic, and a channel when one is named."""
        self.require_admin(request)
        doc = body_json(request)
        topic, channel = _text(doc, "topic"), _text(doc, "channel")
        if not is_valid_topic_name(topic):
            raise APIError(400, "INVALID_TOPIC")
        if channel and not is_valid_channel_name(channel):
            raise APIError(400, "INVALID_CHANNEL")
        done = self.actions.create(topic, channel)

        def notify(errors: List[NodeError]) -> Any:
            self.notify("create_topic", topic, "", "", request)
            if channel:
                self.notify("create_channel", topic, channel, "", request)
            return self._warned(errors)

        return done.addCallback(notify)

    def _act(self, request: IRequest, topic: str, channel: str) -> "Deferred[Any]":
        self.require_admin(request)
        action = _text(body_json(request), "action")
        if action not in ACTIONS:
            raise APIError(400, "INVALID_ACTION")
        done = self.actions.topic_channel_action(action, topic, channel)
        kind = "channel" if channel else "topic"

        def notify(errors: List[NodeError]) -> Any:
            self.notify("%s_%s" % (action, kind), topic, channel, "", request)
            return self._warned(errors)

        return done.addCallback(notify)

    @go_route(ADMIN_APP, "POST", "/api/topics/:topic", routes=ADMIN_ROUTES)
    def api_topic_action(self, request: IRequest, topic: str) -> "Deferred[Any]":
        """``{"action": "pause"|"unpause"|"empty"}`` for the topic."""
        return self._act(request, topic, "")

    @go_route(ADMIN_APP, "POST", "/api/topics/:topic/:channel", routes=ADMIN_ROUTES)
    def api_channel_action(self, request: IRequest, topic: str, channel: str) -> "Deferred[Any]":
        """``{"action": "pause"|"unpause"|"empty"}`` for the channel."""
        return self._act(request, topic, channel)

    @go_route(ADMIN_APP, "DELETE", "/api/nodes/:node", routes=ADMIN_ROUTES)
    def api_tombstone(self, request: IRequest, node: str) -> "Deferred[Any]":
        """Tombstone the node for ``{"topic": ...}`` and delete the topic there."""
        self.require_admin(request)
        try:
            topic = _text(body_json(request), "topic")
        except APIError:
            raise APIError(400, "INVALID_BODY")
        if not is_valid_topic_name(topic):
            raise APIError(400, "INVALID_TOPIC")
        done = self.actions.tombstone(topic, node)

        def notify(errors: List[NodeError]) -> Any:
            self.notify("tombstone_topic_producer", topic, "", node, request)
            return self._warned(errors)

        return done.addCallback(notify)

    @go_route(ADMIN_APP, "DELETE", "/api/topics/:topic", routes=ADMIN_ROUTES)
    def api_delete_topic(self, request: IRequest, topic: str) -> "Deferred[Any]":
        """Delete the topic everywhere."""
        self.require_admin(request)
        done = self.actions.delete_topic(topic)

        def notify(errors: List[NodeError]) -> Any:
            self.history.forget(topic)
            self.notify("delete_topic", topic, "", "", request)
            return self._warned(errors)

        return done.addCallback(notify)

    @go_route(ADMIN_APP, "DELETE", "/api/topics/:topic/:channel", routes=ADMIN_ROUTES)
    def api_delete_channel(self, request: IRequest, topic: str, channel: str) -> "Deferred[Any]":
        """Delete the channel everywhere."""
        self.require_admin(request)
        done = self.actions.delete_channel(topic, channel)

        def notify(errors: List[NodeError]) -> Any:
            self.history.forget("%s/%s" % (topic, channel))
            self.notify("delete_channel", topic, channel, "", request)
            return self._warned(errors)

        return done.addCallback(notify)

    # -- /config ----------------------------------------------------------------

    def _config(self, request: IRequest, opt: str, put: bool) -> Any:
        address = request.getClientAddress()
        config_allowed(self.options.allow_config_from_cidr, getattr(address, "host", None))
        if put:
            content = request.content
            body = b""
            if content is not None:
                content.seek(0)
                body = content.read(MAX_CONFIG_BODY + 1)
            set_config_value(self.options, opt, body)
            if opt == "nsqlookupd_http_addresses":
                # Every question from now on asks these lookupds.
                self.lookupds[:] = self.options.nsqlookupd_http_addresses
                self.actions.lookupds[:] = self.options.nsqlookupd_http_addresses
            elif opt == "log_level":
                set_log_level(self.options.log_level)
        return config_value(self.options, opt)

    @go_route(ADMIN_APP, "GET", "/config/:opt", routes=ADMIN_ROUTES)
    def config_get(self, request: IRequest, opt: str) -> Any:
        """An option's value by Go's config name (clients in --allow-config-from-cidr)."""
        return self._config(request, opt, False)

    @go_route(ADMIN_APP, "PUT", "/config/:opt", routes=ADMIN_ROUTES)
    def config_put(self, request: IRequest, opt: str) -> Any:
        """Change ``nsqlookupd_http_addresses`` (a JSON list) or ``log_level``."""
        return self._config(request, opt, True)
