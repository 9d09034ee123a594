# -*- test-case-name: tests.test_broker -*-
"""
The broker: one nsqd's topics, each with its channels (Go's ``NSQD``
without the listeners).

It does no IO.  The TCP and HTTP adapters call it; time comes from the
injected ``IReactorTime`` and storage from the chosen backend.
"""

from __future__ import annotations

from typing import Any, Callable, Dict, Optional

from twisted.internet.interfaces import IReactorTime

from txnsq.nsqd.guid import GUIDFactory
from txnsq.nsqd.topic import Topic
from txnsq.protocol.names import is_valid_topic_name
from txnsq.storage.ephemeral import EphemeralStorage
from txnsq.storage.interfaces import IStorageBackend

__all__ = ["Broker"]


class Broker:
    """
    The topics of one nsqd.

    :param options: the daemon's settings (``NSQDOptions``).
    :param clock: where time comes from (the reactor, or a ``Clock``).
    :param storage: the backend for topic and channel queues;
        ``#ephemeral`` ones always use the ephemeral backend.

    :ivar topics: the topics by name.
    :ivar guid: makes message IDs (``--node-id``).
    :ivar exiting: :meth:`close` was called.
    :ivar on_topology_change: called (with no argument) after a topic or
        channel is created, deleted, paused or unpaused; nsqd persists its
        metadata from there.
    """

    def __init__(self, options: Any, clock: IReactorTime, storage: IStorageBackend) -> None:
        self.options = options
        # Interface-typed values are held as Any: calls on zope Interface
        # types only type-check with the mypy-zope plugin.
        self.clock: Any = clock
        self.storage: Any = storage
        self.ephemeral_storage: Any = EphemeralStorage()
        self.guid = GUIDFactory(options.node_id, clock)
        self.topics: Dict[str, Topic] = {}
        self.exiting = False
        self.on_topology_change: Optional[Callable[[], None]] = None

    def __repr__(self) -> str:
        return "<Broker topics=%d>" % (len(self.topics),)

    def get_topic(self, name: str) -> Topic:
        """
        The topic called ``name``, created if need be.

        :raises ValueError: ``name`` is not a valid topic name.
        """
        topic = self.topics.get(name)
        if topic is None:
            if not is_valid_topic_name(name):
                raise ValueError("invalid topic name %r" % (name,))
            topic = self.topics[name] = Topic(self, name)
            self._topology_changed()
        return topic

    def find_topic(self, name: str) -> Optional[Topic]:
        """The topic called ``name``, or ``None``."""
        return self.topics.get(name)

    def delete_topic(self, name: str) -> None:
        """
        Delete a topic, its channels and all their messages.

        :raises KeyError: there is no such topic.
        """
        topic = self.topics.pop(name)
        topic.delete()
        self._topology_changed()

    def storage_error(self) -> Optional[str]:
        """
        Why some queue cannot store messages right now (a failed disk
        write), or ``None``: nsqd is unhealthy while this is set.
        """
        for topic in self.topics.values():
            error = topic._queue.error
            if error is not None:
                return error
            for channel in topic.channels.values():
                error = channel._queue.error
                if error is not None:
                    return error
        return None

    def close(self) -> None:
        """
        Shut down: close every topic and channel, which cancels their timers
        and closes their queues.  The topics stay listed.
        """
        self.exiting = True
        for topic in list(self.topics.values()):
            topic.close()

    def _topology_changed(self) -> None:
        callback = self.on_topology_change
        if callback is not None:
            callback()

    def _ephemeral_topic_empty(self, topic: Topic) -> None:
        """An ephemeral topic lost its last channel: delete it."""
        if self.topics.get(topic.name) is topic:
            self.delete_topic(topic.name)
