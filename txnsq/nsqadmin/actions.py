# -*- test-case-name: tests.test_nsqadmin_api -*-
"""
Who may act, and the admin actions themselves, as Go nsqadmin does them.

With ``--admin-user`` given, only a request whose ``--acl-http-header``
(``X-Forwarded-User`` by default, set by an authenticating proxy) names one
of them may act; without it everyone may.  Each action sends the POSTs Go's
``clusterinfo`` sends, to every lookupd and every nsqd concerned at once,
and fires with the failures (a warning to the user, not an error), or
fails with :class:`ClusterUnavailable <txnsq.nsqadmin.clusterinfo.ClusterUnavailable>` when the
nsqds could not be found at all.
"""

from __future__ import annotations

from typing import Any, List, Optional, Sequence
from urllib.parse import quote

from twisted.internet.defer import Deferred, gatherResults, succeed
from twisted.web.iweb import IRequest

from txnsq.nsqadmin.clusterinfo import ClusterInfo, Gathered, NodeError, http_address

__all__ = ["ACTIONS", "ClusterActions", "acting_user", "is_admin"]

#: What ``POST /api/topics/:topic[/:channel]`` accepts as ``action``
#: (``rewind``, txnsq's, for a channel of a retained topic only).
ACTIONS = ("pause", "unpause", "empty", "rewind")


def acting_user(request: IRequest, acl_http_header: str) -> str:
    """The user the authenticating proxy named in the ACL header ('' if none)."""
    value = request.getHeader(acl_http_header.encode("latin-1"))
    if value is None:
        return ""
    return value.decode("latin-1") if isinstance(value, bytes) else str(value)


def is_admin(request: IRequest, admin_users: Sequence[str], acl_http_header: str) -> bool:
    """Go's ``isAuthorizedAdminRequest``: no admin users, or the header names one."""
    if not admin_users:
        return True
    return acting_user(request, acl_http_header) in admin_users


def _q(value: str) -> str:
    return quote(value, safe="")


class ClusterActions:
    """
    The admin actions over one cluster.

    :param cluster: asks and tells the nodes.
    :param lookupds: ``--lookupd-http-address`` values.
    :param nsqds: ``--nsqd-http-address`` values.
    """

    def __init__(self, cluster: ClusterInfo, lookupds: Sequence[str], nsqds: Sequence[str]) -> None:
        self.cluster = cluster
        self.lookupds = list(lookupds)
        self.nsqds = list(nsqds)

    def _all(self, waits: List["Deferred[List[NodeError]]"]) -> "Deferred[List[NodeError]]":
        def flatten(results: List[List[NodeError]]) -> List[NodeError]:
            return [error for errors in results for error in errors]

        return gatherResults(waits, consumeErrors=True).addCallback(flatten)

    def _on_producers(
        self, topic: str, path: str, query: str, also_lookupds: bool = False
    ) -> "Deferred[List[NodeError]]":
        """POST to the topic's nsqds (and to the lookupds too, when asked)."""

        def post(found: Gathered) -> "Deferred[List[NodeError]]":
            waits = [self.cluster.post_producers(found.value, path, query)]
            if also_lookupds:
                waits.append(self.cluster.post_lookupds(self.lookupds, path, query))
            done = self._all(waits)
            return done.addCallback(lambda errors: list(found.errors) + errors)

        found = self.cluster.topic_producers(topic, self.lookupds, self.nsqds)
        return found.addCallback(post)

    def create(self, topic: str, channel: str = "") -> "Deferred[List[NodeError]]":
        """Create the topic (and the channel) on the lookupds and the topic's nsqds."""
        waits = [self.cluster.post_lookupds(self.lookupds, "topic/create", "topic=" + _q(topic))]
        if channel:
            query = "topic=%s&channel=%s" % (_q(topic), _q(channel))
            waits.append(self.cluster.post_lookupds(self.lookupds, "channel/create", query))
            waits.append(self._on_producers(topic, "channel/create", query))
        return self._all(waits)

    def delete_topic(self, topic: str) -> "Deferred[List[NodeError]]":
        """Delete the topic from the lookupds and its nsqds."""
        return self._ignore_gone(
            self._on_producers(topic, "topic/delete", "topic=" + _q(topic), also_lookupds=True)
        )

    def delete_channel(self, topic: str, channel: str) -> "Deferred[List[NodeError]]":
        """Delete the channel from the lookupds and the topic's nsqds."""
        query = "topic=%s&channel=%s" % (_q(topic), _q(channel))
        return self._ignore_gone(
            self._on_producers(topic, "channel/delete", query, also_lookupds=True)
        )

    @staticmethod
    def _ignore_gone(done: "Deferred[List[NodeError]]") -> "Deferred[List[NodeError]]":
        # txnsq's nsqlookupd deletes on the producers itself: an nsqd that
        # answers "not found" to nsqadmin's own delete has already done it.
        def keep(errors: List[NodeError]) -> List[NodeError]:
            return [e for e in errors if "_NOT_FOUND" not in e.text]

        return done.addCallback(keep)

    def topic_channel_action(
        self, action: str, topic: str, channel: str = "", start: str = "earliest"
    ) -> "Deferred[List[NodeError]]":
        """
        ``pause``, ``unpause`` or ``empty`` the topic, or its channel; or
        ``rewind`` the channel to ``start`` (``earliest`` or a timestamp).
        """
        if channel:
            path = "channel/%s" % (action,)
            query = "topic=%s&channel=%s" % (_q(topic), _q(channel))
            if action == "rewind":
                query += "&earliest" if start == "earliest" else "&timestamp=" + _q(start)
        else:
            path = "topic/%s" % (action,)
            query = "topic=" + _q(topic)
        return self._on_producers(topic, path, query)

    def tombstone(self, topic: str, node: str) -> "Deferred[List[NodeError]]":
        """Tombstone ``node`` (an nsqd HTTP address) for the topic, then delete it there."""
        query = "topic=%s&node=%s" % (_q(topic), _q(node))
        tombstoned = self.cluster.post_lookupds(self.lookupds, "topic/tombstone", query)

        def delete_on_node(errors: List[NodeError]) -> "Deferred[List[NodeError]]":
            producer: Optional[Any] = None
            host, _, port = node.rpartition(":")
            if port.isdigit():
                producer = {"broadcast_address": host.strip("[]"), "http_port": int(port)}
            if producer is None or http_address(producer) != node:
                return succeed(errors + [NodeError(node, "invalid node %s" % (node,))])
            deleted = self.cluster.post_producers([producer], "topic/delete", "topic=" + _q(topic))
            return deleted.addCallback(lambda more: errors + more)

        return tombstoned.addCallback(delete_on_node)
