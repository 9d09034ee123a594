# -*- test-case-name: tests.test_broker -*-
"""
The broker: one nsqd's topics, each with its channels (Go's ``NSQD``
without the listeners).

It does no IO.  The TCP and HTTP adapters call it; time comes from the
injected ``IReactorTime`` and storage from the chosen backend.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable, Dict, List, Optional, Tuple

from twisted.internet.defer import Deferred
from twisted.internet.interfaces import IReactorTime
from twisted.logger import Logger

from txnsq.nsqd.channel import Channel
from txnsq.nsqd.guid import GUIDFactory
from txnsq.nsqd.topic import Topic
from txnsq.protocol.names import is_valid_topic_name
from txnsq.storage.ephemeral import EphemeralStorage
from txnsq.storage.interfaces import IStorageBackend

if TYPE_CHECKING:
    from txnsq.storage.topic_log import TopicLog

__all__ = ["Broker", "TopologyListener"]


class TopologyListener:
    """
    Told when topics and channels come and go (Go nsqd's ``Notify``, which
    feeds the lookupd registrations).  Subclass it and override what you
    need; register with :meth:`Broker.add_listener`.

    Every method is called after the change, synchronously.  An exception
    raised by a listener is logged and does not undo the change.
    """

    def topic_created(self, topic: Topic) -> None:
        """``topic`` was created."""

    def topic_deleted(self, topic: Topic) -> None:
        """
        ``topic`` was deleted; :meth:`channel_deleted` follows for each of
        the channels it had.
        """

    def channel_created(self, topic: Topic, channel: Channel) -> None:
        """``channel`` was created in ``topic``."""

    def channel_deleted(self, topic: Topic, channel: Channel) -> None:
        """``channel`` was deleted from ``topic`` (also ephemeral ones left empty)."""


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
    :ivar delivering: messages go out to consumers; cleared for good by
        :meth:`stop_delivering` when nsqd starts shutting down.
    :ivar barrier: with storage that must write before nsqd answers
        (``--mem-queue-size=0``), the call that writes it; the adapters
        call it before any answer or message leaves.  ``None`` otherwise.
    :ivar on_topology_change: called (with no argument) after a topic or
        channel is created, deleted, paused or unpaused; nsqd persists its
        metadata from there.  Which topic or channel changed is told to the
        listeners of :meth:`add_listener`.
    :ivar prepare_topic: when set, called with every topic
        :meth:`get_topic` creates (after the listeners), before any message
        goes to its channels: it may :meth:`Topic.hold` the topic while it
        creates the channels the topic has elsewhere (Go's channel lookup
        from nsqlookupd), then :meth:`Topic.start` it.
    """

    _log = Logger()

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
        self.delivering = True
        barrier = getattr(storage, "barrier", None)
        self.barrier: Optional[Callable[[], None]] = (
            barrier(options, clock) if barrier is not None else None
        )
        self._drained: Optional[Deferred[None]] = None
        self._drain_timer: Any = None
        self.on_topology_change: Optional[Callable[[], None]] = None
        self.prepare_topic: Optional[Callable[[Topic], None]] = None
        self._listeners: List[TopologyListener] = []
        #: Called as ``tap(topic, bodies)`` after every publish to any topic
        #: (the NATS bridge); a tap must not raise.
        self.publish_taps: List[Callable[[Topic, List[bytes]], None]] = []
        #: Mirrored topics (txnsq.mirror.mirror): ``gate(connection)`` is
        #: asked before a V2 connection's OKs for publishes to a mirrored
        #: topic leave; True holds them until ``connection.mirror_release()``.
        self.mirror_gate: Optional[Callable[[Any], bool]] = None
        from txnsq.nsqd.retention import Retention

        #: ``--retention-*`` defaults and ``--retain-topics``.
        self.retention = Retention(options)

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
            if not topic.ephemeral and self.retention.retained_on_creation(name):
                topic.set_retention(self.retention.defaults())
            self.topology_changed()
            for listener in list(self._listeners):
                self._tell(listener.topic_created, topic)
            prepare = self.prepare_topic
            if prepare is not None:
                prepare(topic)
        return topic

    # -- retained topics (the MetaQ listener's interface) ---------------------

    def retained_log(self, topic_name: str) -> Optional[TopicLog]:
        """
        The retained log of the topic called ``topic_name``, or ``None``
        when there is no such topic or it is not retained.  For reads: the
        caller uses :class:`TopicLog <txnsq.storage.topic_log.TopicLog>` and its
        ``partitions`` (``read``, ``nearest_offset``) itself.
        """
        topic = self.topics.get(topic_name)
        if topic is None or topic.retention is None:
            return None
        return topic.retention.log

    def put_retained(
        self, topic_name: str, partition: int, flag: int, data: bytes
    ) -> Tuple[bytes, int, int]:
        """
        Publish one record to ``partition`` of a retained topic (a MetaQ
        ``put``): appended to that partition before this returns (synced
        with ``--sync-every=1``; the caller still runs :attr:`barrier`, as
        for any publish, before it answers), and its payload given to the
        topic's channels as an NSQ message.  A topic that does not exist
        is created retained, with ``--log-partitions`` partitions (and the
        other ``--retention-*`` defaults).  Returns ``(8-byte message id,
        partition, offset)``; the id is the NSQ message id as 8 bytes.

        :raises ValueError: ``topic_name`` is not a valid topic name, or
            is ``#ephemeral``, or ``flag & 1`` and the data's attribute
            length does not fit (MetaQ: 400).
        :raises txnsq.nsqd.retention.NoSuchPartition: the topic has no
            such partition (MetaQ: 400).
        :raises txnsq.nsqd.retention.NotRetained: the topic exists and is
            not retained; retention is only turned on by
            ``POST /topic/retention`` or ``--retain-topics`` (MetaQ: 403).
        :raises txnsq.nsqd.retention.RetainedWriteError: the log could not
            be written, a full disk say (MetaQ: 500); nothing was published.
        :raises txnsq.nsqd.topic.PublishError: the topic is exiting or a
            channel's queue is full (MetaQ: 500).
        """
        topic = self.topics.get(topic_name)
        if topic is None:
            if not is_valid_topic_name(topic_name):
                raise ValueError("invalid topic name %r" % (topic_name,))
            if topic_name.endswith("#ephemeral"):
                raise ValueError("an ephemeral topic cannot be retained: %r" % (topic_name,))
            topic = self.get_topic(topic_name)
            if topic.retention is None:
                topic.set_retention(self.retention.defaults())
        return topic.publish_record(partition, flag, data)

    def find_topic(self, name: str) -> Optional[Topic]:
        """The topic called ``name``, or ``None``."""
        return self.topics.get(name)

    def delete_topic(self, name: str) -> None:
        """
        Delete a topic, its channels and all their messages.

        :raises KeyError: there is no such topic.
        """
        topic = self.topics.pop(name)
        channels = list(topic.channels.values())
        topic.delete()
        self.topology_changed()
        # Channels first, then the topic: a lookupd that sees the topic go
        # while it still lists channels of it warns of an "unexpected
        # UNREGISTER" (Go's nsqd sends them in no fixed order).
        for listener in list(self._listeners):
            for channel in channels:
                self._tell(listener.channel_deleted, topic, channel)
            self._tell(listener.topic_deleted, topic)

    def add_listener(self, listener: TopologyListener) -> None:
        """Tell ``listener`` about topics and channels from now on."""
        if listener not in self._listeners:
            self._listeners.append(listener)

    def remove_listener(self, listener: TopologyListener) -> None:
        """Stop telling ``listener``; unknown listeners are ignored."""
        if listener in self._listeners:
            self._listeners.remove(listener)

    def storage_error(self) -> Optional[str]:
        """
        Why some queue cannot store messages right now (a failed disk
        write), or ``None``: nsqd is unhealthy while this is set.
        """
        for topic in self.topics.values():
            error = topic.queue.error
            if error is not None:
                return error
            for channel in topic.channels.values():
                error = channel.queue.error
                if error is not None:
                    return error
        return None

    def stop_delivering(self) -> None:
        """
        Send no message to any consumer from now on (the first step of a
        clean shutdown): every channel, and any channel created later,
        keeps what it is given, while FIN, REQ and TOUCH still work.
        """
        self.delivering = False
        for topic in self.topics.values():
            for channel in topic.channels.values():
                channel.stop_delivering()

    def in_flight_count(self) -> int:
        """Messages in flight in every channel."""
        return sum(
            channel.in_flight_count
            for topic in self.topics.values()
            for channel in topic.channels.values()
        )

    def drain(self, grace: float) -> "Deferred[None]":
        """
        After :meth:`stop_delivering`: fires once no message is in flight
        (their FINs came in, or they were requeued), or after ``grace``
        seconds, whichever comes first.  So the FINs consumers already sent
        are taken before the in-flight messages are saved for the next
        start (which would deliver them again).
        """
        done: Deferred[None] = Deferred()
        if self._drained is not None:
            self._drained.chainDeferred(done)
            return done
        if not self.in_flight_count():
            done.callback(None)
            return done
        self._drained = Deferred()
        self._drained.chainDeferred(done)
        self._drain_timer = self.clock.callLater(grace, self._drain_over)
        return done

    def channel_idle(self) -> None:
        """
        Called by a channel that stopped delivering once it has nothing
        left in flight: :meth:`drain` may be over.
        """
        if self._drained is not None and not self.in_flight_count():
            self._drain_over()

    def _drain_over(self) -> None:
        timer, self._drain_timer = self._drain_timer, None
        if timer is not None and timer.active():
            timer.cancel()
        drained, self._drained = self._drained, None
        if drained is not None:
            drained.callback(None)

    def close(self) -> None:
        """
        Shut down: close every topic and channel, which cancels their timers
        and closes their queues.  The topics stay listed.
        """
        self.exiting = True
        self._drain_over()
        for topic in list(self.topics.values()):
            topic.close()

    def topology_changed(self) -> None:
        """
        Called by the topics and channels after a change the metadata
        keeps (a pause, retention turned on): tells
        :attr:`on_topology_change`.
        """
        callback = self.on_topology_change
        if callback is not None:
            callback()

    def channel_created(self, topic: Topic, channel: Channel) -> None:
        """Called by ``topic`` once it made ``channel``: tells the listeners."""
        self.topology_changed()
        for listener in list(self._listeners):
            self._tell(listener.channel_created, topic, channel)

    def channel_deleted(self, topic: Topic, channel: Channel) -> None:
        """Called by ``topic`` once it deleted ``channel``: tells the listeners."""
        self.topology_changed()
        for listener in list(self._listeners):
            self._tell(listener.channel_deleted, topic, channel)

    def _tell(self, event: Callable[..., None], *args: Any) -> None:
        # A broken listener must not leave the topology half changed.
        try:
            event(*args)
        except Exception:
            self._log.failure("topology listener {event!r} failed", event=event)

    def ephemeral_topic_empty(self, topic: Topic) -> None:
        """Called by an ephemeral topic that lost its last channel: delete it."""
        if self.topics.get(topic.name) is topic:
            self.delete_topic(topic.name)
