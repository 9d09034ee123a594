# -*- test-case-name: tests.test_topic -*-
"""
A topic: where producers publish, copying every message into each of its
channels.

A topic keeps its messages in its own queue while it has no channel (or is
paused); the first channel created then receives that backlog, and later
channels only what is published after they exist (Go nsqd's message pump).
The message is encoded once; every channel shares the same bytes object.
"""

from __future__ import annotations

import struct
from typing import TYPE_CHECKING, Any, Collection, Dict, List, Optional, Set, Tuple, Union

from txnsq.nsqd.channel import Channel
from txnsq.protocol.message import encode_message
from txnsq.protocol.names import is_ephemeral, is_valid_channel_name
from txnsq.storage.interfaces import IBatchQueue, IDeferredStore
from txnsq.storage.queue_scan import read_through, take_out

if TYPE_CHECKING:
    from txnsq.nsqd.broker import Broker
    from txnsq.nsqd.retention import RetentionSettings, TopicRetention

__all__ = ["PublishError", "Topic"]

#: Held messages moved to the channels per reactor turn.
HANDOVER_BATCH = 10000

_RAW_ID = struct.Struct(">q").pack


class PublishError(Exception):
    """
    A publish was refused; nothing was published.  ``str()`` is the text
    after ``"PUB failed "`` in E_PUB_FAILED (E_MPUB_FAILED, E_DPUB_FAILED).
    """


class Topic:
    """
    One topic.  Made by :meth:`Broker.get_topic`.

    :ivar name: the topic name.
    :ivar ephemeral: a ``#ephemeral`` topic (ephemeral storage; deleted
        when its last channel is deleted).
    :ivar channels: its channels by name.
    :ivar paused: messages stay in the topic's queue while paused.
    :ivar held: messages stay in the topic's queue until :meth:`start`:
        the topic waits for the channels it has elsewhere to be created
        (Go starts a new topic's message pump only after asking nsqlookupd
        for them).  A topic is started when made.
    :ivar exiting: the topic was closed or deleted.
    :ivar message_count: messages published to the topic.
    :ivar message_bytes: the total size of their bodies.
    :ivar retention: the topic's retained log and settings, or ``None``
        (see :meth:`set_retention` and :mod:`txnsq.nsqd.retention`).
    :ivar queue: the storage backend's queue (``IBackendQueue``) holding
        the topic's own messages; read it, do not put to it.
    """

    def __init__(self, broker: Broker, name: str) -> None:
        self.broker = broker
        self.name = name
        self.options = broker.options
        self.clock: Any = broker.clock  # IReactorTime
        self._guid = broker.guid
        self.ephemeral = is_ephemeral(name)
        storage = broker.ephemeral_storage if self.ephemeral else broker.storage
        self.queue: Any = storage.open_queue(  # IBackendQueue
            name, broker.options, broker.clock
        )
        # The same queue: this module's name for it, and the mirror's.
        self._queue: Any = self.queue
        # The queue's put_many, when it has one (IBatchQueue).
        self._put_many: Any = self._queue.put_many if IBatchQueue.providedBy(self._queue) else None
        self.channels: Dict[str, Channel] = {}
        self.paused = False
        self.held = False
        self.exiting = False
        self.message_count = 0
        self.message_bytes = 0
        # The channels a publish goes to right now: empty while there is
        # no channel, while paused and once exiting, in which cases
        # messages stay in the topic (or are refused).
        self._targets: Tuple[Channel, ...] = ()
        # Deferred publishes waiting for a channel, with their delays (Go
        # starts the delay when a channel takes the message).
        self._backlog: List[Tuple[bytes, float]] = []
        # A queue keeping a flight log (disk, --mem-queue-size=0) holds the
        # backlog's messages there until a channel has them.
        self._flight: Any = self._queue if getattr(self._queue, "journaled", False) else None
        if IDeferredStore.providedBy(self._queue):
            for delay_ns, data in self._queue.load_deferred():
                self._backlog.append((data, delay_ns / 1e9))
                if self._flight is not None:
                    self._flight.hold(delay_ns, data)
        recover = getattr(self._queue, "recover_held", None)
        if recover is not None:
            # After a crash: the deferred publishes that were waiting.
            for delay_ns, data in recover():
                self._backlog.append((data, delay_ns / 1e9))
        # A pending call handing held messages over to the channels.
        self._handover: Any = None
        self.retention: Optional[TopicRetention] = None
        # The broker's publish taps (shared list): told of every publish.
        self._taps = broker.publish_taps
        #: A mirrored topic's recorder (txnsq.mirror.recorder), else ``None``.
        self.mirror: Any = None

    def __repr__(self) -> str:
        return "<Topic %s depth=%d channels=%d>" % (
            self.name,
            self.depth(),
            len(self.channels),
        )

    # -- publishing ------------------------------------------------------

    def publish(self, body: bytes) -> None:
        """
        Publish one message.

        :raises PublishError: the topic is exiting, or a queue the message
            would go to is at its limit; ``StandbysUnavailable``: a
            mirrored topic lacks the live standbys it needs.
        """
        mirror = self.mirror
        if mirror is not None and mirror.refusing is not None:
            mirror.refuse()
        targets = self._targets
        if targets:
            for channel in targets:
                queue = channel.queue
                if queue.error is not None:
                    raise PublishError(queue.error)
                limit = queue.limit
                if limit is not None and queue.depth() >= limit:
                    raise PublishError(_full(channel, limit))
            now = self.clock.seconds()
            if self.retention is None:
                msg_id = self._guid.new_id(now)
            else:
                msg_id = self._retain(body, now)
            data = encode_message(int(now * 1e9), 0, msg_id, body)
            self.message_count += 1
            self.message_bytes += len(body)
            for channel in targets:
                channel.put(data)
            if mirror is not None:
                mirror.published(self.name, data)
            if self._taps:
                self._tap([body])
            return
        self._check_held(1)
        now = self.clock.seconds()
        if self.retention is None:
            msg_id = self._guid.new_id(now)
        else:
            msg_id = self._retain(body, now)
        data = encode_message(int(now * 1e9), 0, msg_id, body)
        self._queue.put(data)
        self.message_count += 1
        self.message_bytes += len(body)
        if mirror is not None:
            mirror.published(self.name, data)
        if self._taps:
            self._tap([body])

    def _tap(self, bodies: List[bytes]) -> None:
        """Tell the broker's publish taps (the NATS bridge) what was published."""
        for tap in self._taps:
            tap(self, bodies)

    def _check_mirror(self) -> None:
        """
        That a mirrored topic may take a publish now (:meth:`publish`
        makes the same check inline: its hot path).

        :raises StandbysUnavailable: fewer live standbys than
            ``--mirror-min-standbys`` (nothing was stored).
        """
        mirror = self.mirror
        if mirror is not None and mirror.refusing is not None:
            mirror.refuse()

    def _check_room(self, count: int) -> None:
        """
        That ``count`` more messages can be published: every channel's
        queue (or, with no channel, the topic's own) has room and no error.
        (:meth:`publish` makes the same checks inline: its hot path.)

        :raises PublishError: a queue is failing or would pass its limit.
        """
        targets = self._targets
        if not targets:
            self._check_held(count)
            return
        for channel in targets:
            queue = channel.queue
            if queue.error is not None:
                raise PublishError(queue.error)
            limit = queue.limit
            if limit is not None and queue.depth() + count > limit:
                raise PublishError(_full(channel, limit))

    def _retain(self, body: bytes, now: float) -> bytes:
        """
        Append one message to the retained log (the next partition in
        turn); its NSQ message id.

        :raises RetainedWriteError: the log could not be written.
        """
        guid = self._guid.new_guid(now)
        retention = self.retention
        assert retention is not None
        retention.append_one(_RAW_ID(guid), body, int(now * 1e9))
        return b"%016x" % (guid,)

    def publish_record(self, partition: int, flag: int, data: bytes) -> Tuple[bytes, int, int]:
        """
        Publish a MetaQ record to ``partition`` of this retained topic: it
        is appended there as it is, and its payload (``data`` after the
        attribute when ``flag & 1``) goes to the channels as an NSQ message.
        Returns ``(8-byte id, partition, offset)``.

        :raises NotRetained: the topic keeps no log.
        :raises NoSuchPartition: not one of the topic's partitions.
        :raises ValueError: ``flag & 1`` and the attribute does not fit.
        :raises PublishError: as :meth:`publish` (``RetainedWriteError``
            when the log could not be written).
        """
        from txnsq.nsqd.retention import NotRetained, payload_of

        retention = self.retention
        if retention is None:
            raise NotRetained("topic %s is not retained" % (self.name,))
        body = payload_of(flag, data)
        self._check_mirror()
        targets = self._targets
        self._check_room(1)
        now = self.clock.seconds()
        guid = self._guid.new_guid(now)
        raw = _RAW_ID(guid)
        offset = retention.append_to(partition, [(raw, flag, data)], int(now * 1e9))
        message = encode_message(int(now * 1e9), 0, b"%016x" % (guid,), body)
        self.message_count += 1
        self.message_bytes += len(body)
        if targets:
            for channel in targets:
                channel.put(message)
        else:
            self._queue.put(message)
        if self.mirror is not None:
            self.mirror.published(self.name, message)
        if self._taps:
            self._tap([body])
        return raw, partition, offset

    def publish_many(self, bodies: List[bytes]) -> None:
        """
        Publish several messages, in order: all of them or, when one cannot
        be taken, none.

        :raises PublishError: as :meth:`publish`, checked for all the
            messages before any is published.
        """
        count = len(bodies)
        self._check_mirror()
        targets = self._targets
        self._check_room(count)
        now = self.clock.seconds()
        timestamp = int(now * 1e9)
        retention = self.retention
        if retention is None:
            new_id = self._guid.new_id
            messages = [encode_message(timestamp, 0, new_id(now), body) for body in bodies]
        else:
            new_guid = self._guid.new_guid
            guids = [new_guid(now) for _ in bodies]
            retention.append_id_batch(guids, bodies, timestamp)
            messages = [
                encode_message(timestamp, 0, b"%016x" % (guid,), body)
                for guid, body in zip(guids, bodies)
            ]
        self.message_count += count
        self.message_bytes += sum(map(len, bodies))
        if len(targets) == 1:
            targets[0].put_many(messages)
        elif targets:
            for data in messages:
                for channel in targets:
                    channel.put(data)
        else:
            put_many = self._put_many
            if put_many is not None:
                put_many(messages)
            else:
                put = self._queue.put
                for data in messages:
                    put(data)
        if self.mirror is not None:
            self.mirror.published_many(self.name, messages)
        if self._taps:
            self._tap(bodies)

    def publish_deferred(self, body: bytes, delay: float) -> None:
        """
        Publish a message that each channel delivers ``delay`` seconds
        later (DPUB).  ``delay`` is clamped to 0..``--max-req-timeout``; 0
        publishes it at once.

        :raises PublishError: as :meth:`publish`.
        """
        if delay <= 0:
            self.publish(body)
            return
        max_delay = self.options.max_req_timeout
        if delay > max_delay:
            delay = max_delay
        self._check_mirror()
        targets = self._targets
        if targets:
            for channel in targets:
                error = channel.queue.error
                if error is not None:
                    raise PublishError(error)
        else:
            self._check_held(1)
        now = self.clock.seconds()
        if self.retention is None:
            msg_id = self._guid.new_id(now)
        else:
            msg_id = self._retain(body, now)
        data = encode_message(int(now * 1e9), 0, msg_id, body)
        self.message_count += 1
        self.message_bytes += len(body)
        if targets:
            for channel in targets:
                channel.put_deferred(data, delay)
        else:
            self._backlog.append((data, delay))
            if self._flight is not None:
                self._flight.hold(int(delay * 1e9), data)
        if self.mirror is not None:
            self.mirror.published_deferred(self.name, data, delay)
        if self._taps:
            self._tap([body])

    def put_encoded(self, data: bytes, delay: float = 0.0) -> None:
        """
        Take an encoded message kept elsewhere (a mirrored topic's copy,
        handed over on failover) as it is: same id, timestamp and attempts.
        Not counted as a publish, not mirrored, not tapped.
        """
        targets = self._targets
        if targets:
            for channel in targets:
                if delay > 0:
                    channel.put_deferred(data, delay)
                else:
                    channel.put(data)
        elif delay > 0:
            self._backlog.append((data, delay))
        else:
            self._queue.put(data)

    # -- channels --------------------------------------------------------

    def get_channel(self, name: str) -> Channel:
        """
        The channel called ``name``, created if need be.  The first channel
        of a topic takes the messages the topic held.

        :raises ValueError: ``name`` is not a valid channel name.
        """
        channel = self.channels.get(name)
        if channel is None:
            if not is_valid_channel_name(name):
                raise ValueError("invalid channel name %r" % (name,))
            channel = Channel(self, name)
            self.channels[name] = channel
            self._update_targets()
            self.broker.channel_created(self, channel)
        return channel

    def find_channel(self, name: str) -> Optional[Channel]:
        """The channel called ``name``, or ``None``."""
        return self.channels.get(name)

    def delete_channel(self, name: str) -> None:
        """
        Delete a channel and its messages (its consumers are closed).  An
        ephemeral topic left with no channel is deleted too.

        :raises KeyError: there is no such channel.
        """
        channel = self.channels.pop(name)
        self._update_targets()
        if self.retention is not None:
            rewind = self.retention.rewinds.get(name)
            if rewind is not None:
                rewind.stop()
        channel.delete()
        self.broker.channel_deleted(self, channel)
        if not self.channels and self.ephemeral and not self.exiting:
            self.broker.ephemeral_topic_empty(self)

    def ephemeral_channel_empty(self, channel: Channel) -> None:
        """Called by an ephemeral channel that lost its last consumer: delete it."""
        if self.channels.get(channel.name) is channel:
            self.delete_channel(channel.name)

    # -- state -----------------------------------------------------------

    def depth(self) -> int:
        """Messages held by the topic itself (no channel yet, or paused)."""
        return self._queue.depth() + len(self._backlog)

    def pause(self) -> None:
        """Hold published messages in the topic until :meth:`unpause`."""
        self.paused = True
        self._update_targets()
        self.broker.topology_changed()
        if self.mirror is not None:
            self._mirror_change("pause")

    def unpause(self) -> None:
        """Resume copying messages to the channels, the held ones first."""
        self.paused = False
        self._update_targets()
        self.broker.topology_changed()
        if self.mirror is not None:
            self._mirror_change("unpause")

    def _mirror_change(self, change: str) -> None:
        """Tell a mirrored topic's peers (channel ``""``: the topic itself)."""
        from txnsq.mirror.recorder import CHANNEL_OPS

        self.mirror.channel_changed(CHANNEL_OPS[change], self.name, "")

    def hold(self) -> None:
        """
        Keep published messages in the topic, whatever its channels, until
        :meth:`start`: channels created meanwhile all get them.
        """
        self.held = True
        self._update_targets()

    def start(self) -> None:
        """Copy messages to the channels from now on, the held ones first."""
        if self.held:
            self.held = False
            self._update_targets()

    def empty(self) -> None:
        """Drop the messages held by the topic (channels keep theirs)."""
        self._queue.empty()
        self._backlog = []
        if self.mirror is not None:
            from txnsq.mirror.recorder import CHANNEL_OPS

            # Channel "": the topic's own messages, in the peers' copies.
            self.mirror.channel_changed(CHANNEL_OPS["empty"], self.name, "")

    def held_messages(self, limit: int) -> Tuple[List[bytes], bool]:
        """
        The messages the topic holds itself (no channel yet, or paused),
        encoded as held: the deferred ones waiting for a channel, then the
        queued ones; at most ``limit`` of them, and whether that was all.
        The queue is read through and put back in its order (a mirrored
        topic's catch-up of a new peer).
        """
        found = [data for data, _ in self._backlog]
        queued, complete = read_through(self._queue, max(0, limit - len(found)))
        found.extend(queued)
        return found, complete and len(found) <= limit

    def drop_messages(self, ids: Collection[bytes]) -> Set[bytes]:
        """
        Take the messages whose id is in ``ids`` out of what the topic
        holds itself (its channels keep theirs: see
        :meth:`Channel.drop_messages <txnsq.nsqd.channel.Channel.drop_messages>`);
        the ids found.  A mirrored topic's fail-back exchange drops here
        what another node took over and delivers now.
        """
        removed = take_out(self._queue, ids)
        backlog = self._backlog
        if backlog:
            kept = [item for item in backlog if item[0][10:26] not in ids]
            if len(kept) != len(backlog):
                flight_log = self._flight
                for data, _ in backlog:
                    msg_id = data[10:26]
                    if msg_id in ids:
                        removed.add(msg_id)
                        if flight_log is not None:
                            flight_log.release(msg_id)
                self._backlog = kept
        return removed

    def close(self) -> None:
        """
        Shut down (nsqd is exiting): close every channel, then the topic's
        queue.  Held deferred messages are given to a queue that can keep
        them deferred (``IDeferredStore``), else kept as plain ones, as Go
        does when it writes them to disk.
        """
        if self.exiting:
            return
        self.exiting = True
        self._targets = ()
        self._cancel_handover()
        for channel in list(self.channels.values()):
            channel.close()
        backlog, self._backlog = self._backlog, []
        queue = self._queue
        if backlog:
            if IDeferredStore.providedBy(queue):
                queue.save_deferred([(int(delay * 1e9), data) for data, delay in backlog])
            else:
                for data, _ in backlog:
                    queue.put(data)
        queue.close()
        if self.retention is not None:
            self.retention.close()

    def delete(self) -> None:
        """
        Remove the topic for good (called by :meth:`Broker.delete_topic`):
        delete every channel and the topic's queue.
        """
        if self.exiting:
            return
        self.exiting = True
        self._targets = ()
        self._cancel_handover()
        channels = list(self.channels.values())
        self.channels.clear()
        for channel in channels:
            channel.delete()
        self._backlog = []
        self._queue.delete()
        retention, self.retention = self.retention, None
        if retention is not None:
            retention.delete()

    # -- retention -------------------------------------------------------

    def set_retention(self, settings: Optional[RetentionSettings]) -> None:
        """
        Keep a retained log with ``settings`` (turning retention on, or
        changing it: the log is reopened with them), or, with ``None``,
        stop retaining and remove the log.  The broker persists it.

        :raises ValueError: an ``#ephemeral`` topic, or fewer partitions
            than the log has (partitions cannot be removed).
        :raises OSError: the log cannot be opened.
        """
        from txnsq.nsqd.retention import TopicRetention

        current = self.retention
        if settings is None:
            if current is not None:
                self.retention = None
                current.delete()
                self.broker.topology_changed()
            return
        if self.ephemeral:
            raise ValueError("an ephemeral topic cannot be retained")
        if current is not None:
            if settings == current.settings:
                return
            if settings.partitions < current.settings.partitions:
                raise ValueError(
                    "partitions cannot go from %d to %d"
                    % (current.settings.partitions, settings.partitions)
                )
            current.close()
            self.retention = None
        self.retention = TopicRetention(self, settings)
        self.broker.topology_changed()

    def write_error(self) -> Optional[str]:
        """
        After the storage barrier (``--mem-queue-size=0``): why the
        messages just published may not be on disk, or ``None``.  A
        publish is refused while a queue it goes to has an
        :attr:`error <txnsq.storage.disk.DiskQueue.error>`, so one found
        here was set by a write made since: the records of this turn went
        back to memory (the queue writes them when writing works again),
        and the publish must be answered with an error, never ``OK``.
        Checks the queues :meth:`publish` checks: the channels' when the
        topic hands messages to channels, else its own.
        """
        targets = self._targets
        if targets:
            for channel in targets:
                error = channel.queue.error
                if error is not None:
                    return str(error)
            return None
        error = self._queue.error
        return None if error is None else str(error)

    # -- internals -------------------------------------------------------

    def _check_held(self, count: int) -> None:
        """Refuse ``count`` messages the topic cannot hold itself."""
        if self.exiting:
            raise PublishError("exiting")
        queue = self._queue
        if queue.error is not None:
            raise PublishError(queue.error)
        limit = queue.limit
        if limit is not None and self.depth() + count > limit:
            raise PublishError(_full(self, limit))

    def _update_targets(self) -> None:
        """Recompute where publishes go; hand held messages over."""
        if self.paused or self.held or self.exiting or not self.channels:
            self._targets = ()
            self._cancel_handover()
            return
        self._targets = tuple(self.channels.values())
        if self._backlog:
            targets = self._targets
            backlog, self._backlog = self._backlog, []
            flight = self._flight
            for data, delay in backlog:
                for channel in targets:
                    channel.put_deferred(data, delay)
                if flight is not None:
                    flight.release(data[10:26])
        if self._handover is None:
            self._hand_over()

    def _hand_over(self) -> None:
        """
        Move held messages to the channels, ``HANDOVER_BATCH`` at a time: a
        large backlog on disk moves over several reactor turns instead of
        stalling every connection for one long turn.
        """
        self._handover = None
        targets = self._targets
        if not targets:
            return
        read = self._queue.read
        for _ in range(HANDOVER_BATCH):
            data = read()
            if data is None:
                return
            for channel in targets:
                channel.put(data)
        if self._queue.depth():
            self._handover = self.clock.callLater(0, self._hand_over)

    def _cancel_handover(self) -> None:
        call = self._handover
        if call is not None:
            self._handover = None
            if call.active():
                call.cancel()


def _full(where: Union[Topic, Channel], limit: int) -> str:
    """The PublishError text for a topic's or channel's queue at its limit."""
    if isinstance(where, Channel):
        name = "%s:%s" % (where.topic_name, where.name)
    else:
        name = where.name
    return "queue %s is full (--mem-queue-size=%d)" % (name, limit)
