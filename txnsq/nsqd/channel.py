# -*- test-case-name: tests.test_channel -*-
"""
A channel: one subscription to a topic, shared by its consumers.

Every message the topic publishes is put in each of its channels.  A
channel hands its messages out to its ready consumers in turn, keeps each
delivered message "in flight" until the consumer finishes it, requeues it,
or lets it time out, and holds deferred messages (``DPUB``, ``REQ`` with a
delay) until they are due.

Time comes from the injected ``IReactorTime``.  A channel has at most one
pending ``callLater``, set no later than the earliest deadline among its
in-flight and deferred messages.  A consumer's in-flight messages are kept
in delivery order, which is also their timeout order (one ``msg_timeout``
per consumer, and time only moves on), so finishing one is a dict deletion
and the next to time out is the first; only a TOUCH capped by
``--max-msg-timeout`` can fall out of that order, and goes to a small heap.
(A wall clock stepped back while messages are in flight delays the
timeouts of those delivered after the step by at most the step.)

Messages are kept as the encoded bytes of :mod:`txnsq.protocol.message`;
delivery only reads the ID and rewrites the attempts count.
"""

from __future__ import annotations

import heapq
import random
from struct import Struct
from collections import OrderedDict
from itertools import count
from typing import (
    TYPE_CHECKING,
    Any,
    Callable,
    Collection,
    Dict,
    List,
    Optional,
    Protocol,
    Set,
    Tuple,
)

from txnsq.nsqd.quantile import Quantile
from txnsq.protocol import message as _message
from txnsq.protocol.message import (
    message_attempts,
    message_id,
    message_timestamp,
    with_attempts,
)
from txnsq.protocol.names import is_ephemeral
from txnsq.storage.interfaces import IBatchQueue, IDeferredStore
from txnsq.storage.queue_scan import read_through, take_out

if TYPE_CHECKING:
    from txnsq.nsqd.topic import Topic

__all__ = [
    "Channel",
    "ChannelFullError",
    "Consumer",
    "InFlightError",
    "SubscribeError",
]

#: Go's texts for FIN/REQ/TOUCH of a message that cannot be acted on.
NOT_IN_FLIGHT = "ID not in flight"
NOT_OWNER = "client does not own message"

# Float seconds near the current epoch are only exact to ~0.25 us, so a
# timer set for a deadline may fire a hair before it; anything due within
# this margin counts as due, so a timer can never spin short of its target.
_EPSILON = 1e-6

_MAX_ATTEMPTS = 0xFFFF
_ATTEMPTS_BYTES = Struct(">H").pack
# The compiled with_attempts (txnsq/protocol/_message.c), or None: one
# allocation per delivery instead of four, where the pure Python inlines
# the slices (a call would cost it more than it saves).
_COMPILED_WITH_ATTEMPTS: Any = _message.compiled.with_attempts if _message.compiled is not None else None


def _deadline_of(entry: "_InFlight") -> float:
    return entry.deadline


class Consumer(Protocol):
    """
    What a channel needs of a consumer (the TCP adapter's connection).

    A consumer is ready for another message iff
    ``ready_count > in_flight_count``.  The channel maintains
    ``in_flight_count``; the consumer sets ``ready_count`` (RDY) and
    ``msg_timeout`` (seconds) and calls :meth:`Channel.consumer_ready`
    whenever ``ready_count`` changes.

    A consumer may also have a ``close()`` method: like Go's
    ``Consumer.Close``, the channel calls it when the channel is deleted or
    closed under the consumer (it should drop the connection).
    """

    ready_count: int
    in_flight_count: int
    msg_timeout: float

    def send_message(self, data: bytes) -> None:
        """
        Deliver one message: the encoded payload of
        :mod:`txnsq.protocol.message`, attempts already incremented.
        """


class InFlightError(Exception):
    """
    FIN, REQ or TOUCH of a message the consumer does not hold.

    ``str()`` is Go's description: ``"ID not in flight"`` or
    ``"client does not own message"``.
    """


class SubscribeError(Exception):
    """A consumer cannot join the channel; ``str()`` is Go's description."""


class ChannelFullError(SubscribeError):
    """
    ``--max-channel-consumers`` reached; ``str()`` is Go's text,
    ``"consumers for TOPIC:CHANNEL exceeds limit of N"``.
    """


class _InFlight:
    """One message delivered to a consumer and not yet finished."""

    __slots__ = ("msg_id", "data", "consumer", "delivered_at", "deadline", "late")

    def __init__(
        self, msg_id: bytes, data: bytes, consumer: Any, delivered_at: float, deadline: float
    ) -> None:
        self.msg_id = msg_id
        self.data = data
        self.consumer = consumer
        self.delivered_at = delivered_at
        self.deadline = deadline
        # The sequence number of its item in the channel's heap of late
        # entries, or 0 while it is in its consumer's delivery order.
        self.late = 0


class Channel:
    """
    One channel of a topic.  Made by :meth:`Topic.get_channel`.

    :ivar name: the channel name.
    :ivar topic_name: the name of its topic.
    :ivar ephemeral: a ``#ephemeral`` channel (ephemeral storage; deleted
        when its last consumer leaves).
    :ivar consumers: the subscribed consumers, in subscription order (a
        dict used as an ordered set).
    :ivar paused: no message is delivered while paused.
    :ivar exiting: the channel was closed or deleted.
    :ivar message_count: messages put in the channel (published or
        deferred), as Go's ``message_count``.
    :ivar requeue_count: REQs, plus in-flight messages requeued because
        their consumer left.
    :ivar timeout_count: in-flight messages that timed out.
    :ivar e2e_latency: publish-to-FIN latencies over the last
        ``--e2e-processing-latency-window-time``, or ``None`` without
        ``--e2e-processing-latency-percentile``.
    :ivar queue: the storage backend's queue (``IBackendQueue``) of the
        messages waiting for delivery; read it, do not put to it (the
        topic checks its ``error`` and ``limit`` before a publish).
    """

    def __init__(self, topic: Topic, name: str) -> None:
        broker = topic.broker
        self.topic = topic
        self.topic_name = topic.name
        self.name = name
        self.options = broker.options
        self.clock: Any = broker.clock  # IReactorTime
        self.ephemeral = is_ephemeral(name)
        storage = broker.ephemeral_storage if self.ephemeral else broker.storage
        self.queue: Any = storage.open_queue(  # IBackendQueue
            topic.name + ":" + name, broker.options, broker.clock
        )
        # The same queue: this module's name for it, and the mirror's.
        self._queue: Any = self.queue
        self.consumers: Dict[Any, None] = {}
        self.paused = False
        self.exiting = False
        self.message_count = 0
        self.requeue_count = 0
        self.timeout_count = 0
        percentiles = getattr(self.options, "e2e_processing_latency_percentile", None)
        self.e2e_latency: Optional[Quantile] = None
        if percentiles:
            self.e2e_latency = Quantile(
                self.clock,
                self.options.e2e_processing_latency_window_time,
                percentiles,
            )
        # Consumers that may be ready, in round-robin order.  Membership is
        # a hint: readiness is checked again when a consumer comes up.
        self._ready: "OrderedDict[Any, None]" = OrderedDict()
        self._in_flight: Dict[bytes, _InFlight] = {}
        # Per consumer, its in-flight messages in delivery (= timeout) order.
        self._flights: Dict[Any, Dict[bytes, _InFlight]] = {}
        # TOUCHed messages whose capped deadline comes before later
        # deliveries' (rare): a heap with lazy deletion (see _InFlight.late).
        self._late: List[Tuple[float, int, _InFlight]] = []
        self._deferred: List[Tuple[float, int, bytes]] = []
        self._next_seq: Callable[[], int] = count(1).__next__
        self._timer: Any = None  # Optional[IDelayedCall]
        self._timer_at: Optional[float] = None
        self._pumping = False
        # hold()/release() nesting: deliveries wait while held.
        self._held = 0
        # Some consumer asked for sampling: deliveries go through _offer.
        self._sampling = False
        #: Messages dropped because every ready consumer sampled them out.
        self.sampled_out_count = 0
        #: ``randrange``-like source for sampling (a test seam).
        self.random_below: Callable[[int], int] = random.randrange
        queue = self._queue
        # The queue's put_many, when it has one (IBatchQueue).
        self._put_many: Optional[Callable[[List[bytes]], None]] = (
            queue.put_many if IBatchQueue.providedBy(queue) else None
        )
        # A queue keeping a flight log (disk, --mem-queue-size=0): every
        # message taken out of the queue is held in the log until it is
        # finished or back in the queue, so that a killed nsqd keeps it.
        self._flight: Any = queue if getattr(queue, "journaled", False) else None
        # Delivery stopped for good (nsqd is shutting down).
        self._stopped = False
        if IDeferredStore.providedBy(queue):
            # Deferred messages kept across a restart, due at the same
            # time as before (in nanoseconds since the epoch).
            for due_ns, data in queue.load_deferred():
                self._defer_until(due_ns / 1e9, data)
        recover = getattr(queue, "recover_held", None)
        if recover is not None:
            # After a crash: in-flight messages are back in the queue, the
            # deferred ones come here, due when they were.
            for due_ns, data in recover():
                self._defer_until(due_ns / 1e9, data)
        if not broker.delivering:
            self.stop_delivering()

    def __repr__(self) -> str:
        return "<Channel %s:%s depth=%d in_flight=%d deferred=%d>" % (
            self.topic_name,
            self.name,
            self._queue.depth(),
            len(self._in_flight),
            len(self._deferred),
        )

    # -- state -----------------------------------------------------------

    def depth(self) -> int:
        """Messages waiting for delivery (not in flight, not deferred)."""
        return self._queue.depth()

    @property
    def in_flight_count(self) -> int:
        """Messages delivered and not yet finished, requeued or timed out."""
        return len(self._in_flight)

    @property
    def deferred_count(self) -> int:
        """Messages held until a later time (DPUB, REQ with a delay)."""
        return len(self._deferred)

    # -- messages in -----------------------------------------------------

    def put(self, data: bytes) -> None:
        """
        Take one encoded message from the topic: deliver it to the next
        ready consumer, or queue it.
        """
        self.message_count += 1
        ready = self._ready
        if ready and not self.paused and not self._pumping and not self._held:
            if self._queue.depth():
                # Only reached if a consumer's readiness changed unseen;
                # keep FIFO order by going through the queue.
                self._queue.put(data)
                self._pump()
                return
            while ready:
                consumer = ready.popitem(last=False)[0]
                if consumer.ready_count > consumer.in_flight_count:
                    if self._sampling:
                        self._offer(consumer, data)
                    else:
                        self._deliver(consumer, data)
                    return
        self._queue.put(data)

    def put_many(self, messages: List[bytes]) -> None:
        """
        Take several encoded messages from the topic, in order: what
        :meth:`put` of each does, in one call to the queue when none of
        them can be delivered now (no consumer ready, paused, or held)
        and the queue takes runs (``IBatchQueue``).
        """
        put_many = self._put_many
        if put_many is None or (
            self._ready and not self.paused and not self._pumping and not self._held
        ):
            put = self.put
            for data in messages:
                put(data)
            return
        # Nothing put into the queue changes that: none of them is
        # delivered here, as put() would not deliver any.
        self.message_count += len(messages)
        put_many(messages)

    def put_deferred(self, data: bytes, delay: float) -> None:
        """Take one message from the topic to deliver ``delay`` seconds from now."""
        self.message_count += 1
        self._defer(data, delay)

    # -- consumers -------------------------------------------------------

    def add_consumer(self, consumer: Consumer) -> None:
        """
        Subscribe a consumer.  Adding one already subscribed does nothing.

        :raises ChannelFullError: ``--max-channel-consumers`` consumers are
            already subscribed.
        :raises SubscribeError: the channel is closed or deleted
            (``"exiting"``).
        """
        if self.exiting:
            raise SubscribeError("exiting")
        consumers = self.consumers
        if consumer in consumers:
            return
        limit = self.options.max_channel_consumers
        if limit and len(consumers) >= limit:
            raise ChannelFullError(
                "consumers for %s:%s exceeds limit of %d"
                % (self.topic_name, self.name, limit)
            )
        consumers[consumer] = None
        if getattr(consumer, "sample_rate", 0):
            self._sampling = True
        self.consumer_ready(consumer)

    def remove_consumer(self, consumer: Consumer) -> None:
        """
        Unsubscribe a consumer.  Its in-flight messages go back to the end
        of the queue at once.  An ephemeral channel left with no consumer
        is deleted (and with it an ephemeral topic left with no channel).
        Removing a consumer that is not subscribed does nothing.
        """
        if consumer not in self.consumers:
            return
        del self.consumers[consumer]
        if self._sampling:
            self._sampling = any(getattr(c, "sample_rate", 0) for c in self.consumers)
        self._ready.pop(consumer, None)
        self._flights.pop(consumer, None)
        mine = [e for e in self._in_flight.values() if e.consumer is consumer]
        if mine:
            in_flight = self._in_flight
            queue = self._queue
            flight = self._flight
            for entry in mine:
                del in_flight[entry.msg_id]
                entry.late = 0
                queue.put(entry.data)
                if flight is not None:
                    flight.release(entry.msg_id)
            consumer.in_flight_count -= len(mine)
            self.requeue_count += len(mine)
            self._check_idle()
        if not self.consumers and self.ephemeral:
            self.topic.ephemeral_channel_empty(self)
            return
        self._pump()

    def consumer_ready(self, consumer: Consumer) -> None:
        """
        The consumer's readiness may have changed (RDY): deliver what it
        can take now.
        """
        if consumer.ready_count > consumer.in_flight_count:
            if consumer in self.consumers and consumer not in self._ready:
                self._ready[consumer] = None
            self._pump()
        else:
            self._ready.pop(consumer, None)

    def hold(self) -> None:
        """
        Hold deliveries until the matching :meth:`release`: the TCP adapter
        holds its channel while it runs the commands of one read, so that
        the hundred messages a hundred ``FIN`` made room for go out in one
        pass, not one pass per ``FIN``.
        """
        self._held += 1

    def release(self) -> None:
        """End a :meth:`hold`; after the outermost one, deliver what is due."""
        self._held -= 1
        if not self._held:
            self._pump()

    def stop_delivering(self) -> None:
        """
        Deliver nothing more, for good (nsqd is shutting down): published
        messages, requeued ones and timed out ones stay in the queue, while
        FIN, REQ and TOUCH of in-flight messages still work.  A hold that
        is never released.
        """
        if not self._stopped:
            self._stopped = True
            self._held += 1

    # -- in-flight messages ----------------------------------------------

    def finish(self, consumer: Consumer, msg_id: bytes) -> None:
        """
        FIN: the consumer is done with the message.

        :raises InFlightError: the message is not in flight, or is in
            flight to another consumer.
        """
        # One FIN per message delivered: _take, _unschedule and _freed are
        # inlined here, and a held channel (a read's run of FINs) is not
        # asked to pump once per FIN.  Counted by callgrind (wall time is
        # too noisy here): bench/micro/hot_path.py --gc-freeze --count 40000 went
        # from 5.13 to 5.02 billion instructions, ~2,900 fewer per message.
        in_flight = self._in_flight
        entry = in_flight.get(msg_id)
        if entry is None:
            raise InFlightError(NOT_IN_FLIGHT)
        if entry.consumer is not consumer:
            raise InFlightError(NOT_OWNER)
        del in_flight[msg_id]
        flight = self._flight
        if flight is not None:
            flight.release(msg_id)
        mirror = self.topic.mirror
        if mirror is not None:
            mirror.finished(self.topic_name, self.name, msg_id)
        latency = self.e2e_latency
        if latency is not None:
            latency.insert(message_timestamp(entry.data))
        if entry.late:
            # Its late heap item is skipped when it comes up.
            entry.late = 0
        else:
            del self._flights[consumer][msg_id]
        consumer.in_flight_count -= 1
        if not in_flight:
            self._check_idle()
        if consumer.ready_count > consumer.in_flight_count and consumer in self.consumers:
            ready = self._ready
            if consumer not in ready:
                ready[consumer] = None
            if not self._held:
                self._pump()

    def requeue(self, consumer: Consumer, msg_id: bytes, delay: float) -> None:
        """
        REQ: put the message back, at the end of the queue when ``delay``
        is 0, else deferred by ``delay`` seconds (clamped to
        ``--max-req-timeout``).

        :raises InFlightError: the message is not in flight, or is in
            flight to another consumer.
        """
        entry = self._take(consumer, msg_id)
        data = entry.data
        self._unschedule(entry)
        consumer.in_flight_count -= 1
        self.requeue_count += 1
        max_delay = self.options.max_req_timeout
        if delay > max_delay:
            delay = max_delay
        mirror = self.topic.mirror
        if mirror is not None:
            mirror.requeued(self.topic_name, self.name, msg_id, delay)
        if delay > 0:
            self._defer(data, delay)
        else:
            self._queue.put(data)
            flight = self._flight
            if flight is not None:
                flight.release(msg_id)
        self._check_idle()
        self._freed(consumer)

    def touch(self, consumer: Consumer, msg_id: bytes) -> None:
        """
        TOUCH: restart the message's timeout from now with the consumer's
        ``msg_timeout``, but never past its delivery time plus
        ``--max-msg-timeout`` (Go's rule).

        :raises InFlightError: the message is not in flight, or is in
            flight to another consumer.
        """
        entry = self._in_flight.get(msg_id)
        if entry is None:
            raise InFlightError(NOT_IN_FLIGHT)
        if entry.consumer is not consumer:
            raise InFlightError(NOT_OWNER)
        deadline = self.clock.seconds() + consumer.msg_timeout
        max_timeout = self.options.max_msg_timeout
        if deadline - entry.delivered_at >= max_timeout:
            deadline = entry.delivered_at + max_timeout
        self._unschedule(entry)
        entry.deadline = deadline
        flight = self._flights[consumer]
        if flight and deadline < flight[next(reversed(flight))].deadline:
            # Capped below a later delivery's deadline: out of order.
            seq = self._next_seq()
            entry.late = seq
            heapq.heappush(self._late, (deadline, seq, entry))
        else:
            flight[msg_id] = entry
        timer_at = self._timer_at
        if timer_at is None or deadline < timer_at:
            self._arm(deadline)

    # -- pause, empty, close, delete -------------------------------------

    def pause(self) -> None:
        """Stop delivering messages (in-flight ones are unaffected)."""
        self.paused = True
        self.topic.broker.topology_changed()
        self._mirror_change("pause")

    def unpause(self) -> None:
        """Deliver messages again."""
        self.paused = False
        self.topic.broker.topology_changed()
        self._mirror_change("unpause")
        self._pump()

    def empty(self) -> None:
        """
        Drop every message: queued, deferred and in flight (as Go, whose
        consumers' in-flight counts go back to zero).
        """
        for entry in self._in_flight.values():
            entry.consumer.in_flight_count -= 1
        self._clear()
        self._queue.empty()
        for consumer in self.consumers:
            if consumer.ready_count > consumer.in_flight_count:
                self._ready[consumer] = None
        self._mirror_change("empty")

    def _mirror_change(self, change: str) -> None:
        """Tell a mirrored topic's peers of a pause, unpause or empty."""
        mirror = self.topic.mirror
        if mirror is not None:
            from txnsq.mirror.recorder import CHANNEL_OPS

            mirror.channel_changed(CHANNEL_OPS[change], self.topic_name, self.name)

    # -- messages by id (mirrored topics) ---------------------------------

    def unfinished_messages(self, limit: int) -> Tuple[List[bytes], bool]:
        """
        The messages not finished yet, encoded as held: in flight, then
        deferred (in the order they are due), then queued; at most
        ``limit`` of them, and whether that was all.  The queue is read
        through and put back in its order: a pass over it, for a mirrored
        topic's catch-up of a new peer, not for every message.
        """
        found = [entry.data for entry in self._in_flight.values()]
        found.extend(data for _, _, data in sorted(self._deferred, key=lambda item: item[:2]))
        queued, complete = read_through(self._queue, max(0, limit - len(found)))
        found.extend(queued)
        return found, complete and len(found) <= limit

    def drop_messages(self, ids: Collection[bytes]) -> Set[bytes]:
        """
        Take the messages whose id is in ``ids`` out of the channel:
        queued, deferred, or in flight (as if they had timed out there and
        gone: a later FIN of one by its consumer fails as for a timed-out
        message); the ids found.  A mirrored topic's fail-back exchange
        drops here what another node took over and delivers now.
        """
        removed = take_out(self._queue, ids)
        flight_log = self._flight
        deferred = self._deferred
        if deferred:
            kept = [item for item in deferred if item[2][10:26] not in ids]
            if len(kept) != len(deferred):
                for item in deferred:
                    msg_id = item[2][10:26]
                    if msg_id in ids:
                        removed.add(msg_id)
                        if flight_log is not None:
                            flight_log.release(msg_id)
                heapq.heapify(kept)
                self._deferred = kept
        in_flight = self._in_flight
        freed = []
        for msg_id in [msg_id for msg_id in in_flight if msg_id in ids]:
            entry = in_flight.pop(msg_id)
            self._unschedule(entry)
            entry.consumer.in_flight_count -= 1
            if flight_log is not None:
                flight_log.release(msg_id)
            removed.add(msg_id)
            freed.append(entry.consumer)
        if freed:
            self._check_idle()
            for consumer in freed:
                self._freed(consumer)
        return removed

    def close(self) -> None:
        """
        Shut down (nsqd is exiting): stop timers, close the consumers, and
        put in-flight messages back in the queue before closing it, so that
        a persistent backend keeps them.  Deferred messages go to a queue
        that keeps them deferred (``IDeferredStore``), else back in the
        queue as plain ones.
        """
        if self.exiting:
            return
        self.exiting = True
        queue = self._queue
        for entry in self._in_flight.values():
            queue.put(entry.data)
        deferred = sorted(self._deferred, key=lambda item: item[:2])
        if deferred:
            if IDeferredStore.providedBy(queue):
                queue.save_deferred([(int(at * 1e9), data) for at, _, data in deferred])
            else:
                for _, _, data in deferred:
                    queue.put(data)
        self._drop_consumers()
        self._clear()
        queue.close()

    def delete(self) -> None:
        """
        Remove the channel for good (called by :meth:`Topic.delete_channel`):
        close the consumers, drop every message, delete the queue.
        """
        if self.exiting:
            return
        self.exiting = True
        self._drop_consumers()
        self._clear()
        self._queue.delete()

    # -- internals -------------------------------------------------------

    def _deliver(self, consumer: Any, data: bytes) -> None:
        """Send one message to a ready consumer and track it in flight."""
        attempts = message_attempts(data) + 1
        if attempts > _MAX_ATTEMPTS:
            attempts = _MAX_ATTEMPTS
        data = with_attempts(data, attempts)
        msg_id = message_id(data)
        now = self.clock.seconds()
        deadline = now + consumer.msg_timeout
        entry = _InFlight(msg_id, data, consumer, now, deadline)
        self._in_flight[msg_id] = entry
        if self._flight is not None:
            self._flight.hold(0, data)
        flight = self._flights.get(consumer)
        if flight is None:
            flight = self._flights[consumer] = {}
        flight[msg_id] = entry
        consumer.in_flight_count += 1
        if consumer.ready_count > consumer.in_flight_count:
            # Back of the line: this is what spreads messages round-robin.
            self._ready[consumer] = None
        timer_at = self._timer_at
        if timer_at is None or deadline < timer_at:
            self._arm(deadline)
        # Last, so that a consumer reacting at once (FIN inside
        # send_message) finds the channel consistent.
        consumer.send_message(data)

    def _pump(self) -> None:
        """Deliver queued messages while there are ready consumers."""
        if self._pumping or self._held or self.paused or self.exiting or not self._ready:
            return
        # A consumer's send_message may call back into the channel; the
        # flag makes those calls leave the delivering to this loop instead
        # of recursing once per message.
        self._pumping = True
        try:
            if self._sampling:
                self._pump_sampled()
            else:
                self._pump_round_robin()
        finally:
            self._pumping = False

    def _pump_round_robin(self) -> None:
        """
        Hand queued messages out: one at a time in turn while several
        consumers are ready, as many as it can take to a consumer that is
        the only one ready.

        This is the delivery hot path, so _deliver's work is inlined, with
        one clock reading per pass.  With the hold and the batched writes
        it moved drain from 45-76k to 80-132k msg/s (bench/README.md,
        figures of 2026-11-25).
        """
        ready = self._ready
        read = self._queue.read
        consumers = self.consumers
        in_flight = self._in_flight
        flights = self._flights
        log = self._flight
        set_attempts = _COMPILED_WITH_ATTEMPTS
        now = self.clock.seconds()
        while ready:
            consumer = ready.popitem(last=False)[0]
            if consumer.ready_count <= consumer.in_flight_count:
                continue
            send = consumer.send_message
            deadline = now + consumer.msg_timeout
            flight = flights.get(consumer)
            if flight is None:
                flight = flights[consumer] = {}
            while True:
                data = read()
                if data is None:
                    # Nothing left: still ready, and first in line.
                    ready[consumer] = None
                    ready.move_to_end(consumer, last=False)
                    return
                # message_attempts and with_attempts, inlined (callgrind:
                # ~400 fewer instructions per delivery): the attempts
                # counter is bytes 8-9 of the payload, big-endian.
                attempts = (data[8] << 8 | data[9]) + 1
                if attempts > _MAX_ATTEMPTS:
                    attempts = _MAX_ATTEMPTS
                if set_attempts is None:
                    data = data[:8] + _ATTEMPTS_BYTES(attempts) + data[10:]
                else:
                    data = set_attempts(data, attempts)
                msg_id = data[10:26]
                entry = _InFlight(msg_id, data, consumer, now, deadline)
                in_flight[msg_id] = entry
                flight[msg_id] = entry
                if log is not None:
                    log.hold(0, data)
                consumer.in_flight_count += 1
                timer_at = self._timer_at
                if timer_at is None or deadline < timer_at:
                    self._arm(deadline)
                send(data)
                if self.paused or self.exiting:
                    if consumer.ready_count > consumer.in_flight_count and consumer in consumers:
                        ready[consumer] = None
                    return
                if consumer.ready_count <= consumer.in_flight_count or consumer not in consumers:
                    break
                if ready:
                    # Others are waiting: back of the line.
                    ready[consumer] = None
                    break

    def _pump_sampled(self) -> None:
        """Deliver with sampling: every message through :meth:`_offer`."""
        ready = self._ready
        queue = self._queue
        while ready and queue.depth():
            consumer = ready.popitem(last=False)[0]
            if consumer.ready_count <= consumer.in_flight_count:
                continue
            data = queue.read()
            if data is None:  # pragma: no cover - depth() said otherwise
                ready[consumer] = None
                ready.move_to_end(consumer, last=False)
                break
            self._offer(consumer, data)
            if self.paused or self.exiting:
                break

    def _offer(self, consumer: Any, data: bytes) -> None:
        """
        Deliver with sampling (IDENTIFY ``sample_rate``): a consumer takes
        the message with Go's odds (``randrange(100) <= sample_rate``); one
        that declines passes it to the next ready consumer; when every
        ready consumer declines the message is dropped, as Go nsqd drops
        it (``sampled_out_count`` counts those).
        """
        ready = self._ready
        declined = []
        chosen: Any = consumer
        while chosen is not None:
            rate = getattr(chosen, "sample_rate", 0)
            if not rate or self.random_below(100) <= rate:
                break
            declined.append(chosen)
            chosen = None
            while ready:
                candidate = ready.popitem(last=False)[0]
                if candidate.ready_count > candidate.in_flight_count:
                    chosen = candidate
                    break
        for other in declined:
            # Still ready: back of the line for the next message.
            ready[other] = None
        if chosen is None:
            self.sampled_out_count += 1
            return
        self._deliver(chosen, data)

    def _take(self, consumer: Consumer, msg_id: bytes) -> _InFlight:
        """Remove the consumer's in-flight message ``msg_id`` from flight."""
        entry = self._in_flight.get(msg_id)
        if entry is None:
            raise InFlightError(NOT_IN_FLIGHT)
        if entry.consumer is not consumer:
            raise InFlightError(NOT_OWNER)
        del self._in_flight[msg_id]
        return entry

    def _unschedule(self, entry: _InFlight) -> None:
        """An entry left flight: out of its consumer's order (or the late heap)."""
        if entry.late:
            # Its late heap item is skipped when it comes up.
            entry.late = 0
        else:
            del self._flights[entry.consumer][entry.msg_id]

    def _check_idle(self) -> None:
        """With nothing in flight and nothing deferred, no timer is needed."""
        if not self._in_flight:
            self._late = []
            if not self._deferred:
                self._cancel_timer()
            if self._stopped:
                self.topic.broker.channel_idle()

    def _freed(self, consumer: Consumer) -> None:
        """The consumer has one message less in flight: maybe deliver."""
        if (
            consumer.ready_count > consumer.in_flight_count
            and consumer in self.consumers
        ):
            if consumer not in self._ready:
                self._ready[consumer] = None
            self._pump()

    def _defer(self, data: bytes, delay: float) -> None:
        self._defer_until(self.clock.seconds() + delay, data)

    def _defer_until(self, at: float, data: bytes) -> None:
        heapq.heappush(self._deferred, (at, self._next_seq(), data))
        if self._flight is not None:
            self._flight.hold(int(at * 1e9), data)
        timer_at = self._timer_at
        if timer_at is None or at < timer_at:
            self._arm(at)

    def _arm(self, at: float) -> None:
        """Make the channel's one timer fire at ``at`` (which is earlier)."""
        delay = at - self.clock.seconds() - _EPSILON
        if delay < 0:
            delay = 0
        self._timer_at = at
        timer = self._timer
        if timer is not None and timer.active():
            timer.reset(delay)
        else:
            self._timer = self.clock.callLater(delay, self._on_timer)

    def _cancel_timer(self) -> None:
        timer = self._timer
        if timer is not None and timer.active():
            timer.cancel()
        self._timer = None
        self._timer_at = None

    def _on_timer(self) -> None:
        """Requeue timed-out in-flight messages and due deferred ones."""
        target = self._timer_at
        self._timer = None
        self._timer_at = None
        if self.exiting:
            return
        now = self.clock.seconds()
        if target is not None and target > now:
            now = target
        limit = now + _EPSILON
        queue = self._queue
        in_flight = self._in_flight
        consumers = self.consumers
        ready = self._ready
        # What is due, from each consumer's order and from the late heap,
        # goes back to the queue in deadline order.
        due: List[_InFlight] = []
        for flight in self._flights.values():
            while flight:
                entry = flight[next(iter(flight))]
                if entry.deadline > limit:
                    break
                del flight[entry.msg_id]
                due.append(entry)
        late = self._late
        while late and late[0][0] <= limit:
            _, seq, entry = heapq.heappop(late)
            if entry.late == seq:
                entry.late = 0
                due.append(entry)
        due.sort(key=_deadline_of)
        flight_log = self._flight
        for entry in due:
            del in_flight[entry.msg_id]
            consumer = entry.consumer
            consumer.in_flight_count -= 1
            self.timeout_count += 1
            queue.put(entry.data)
            if flight_log is not None:
                flight_log.release(entry.msg_id)
            if consumer in consumers and consumer.ready_count > consumer.in_flight_count:
                if consumer not in ready:
                    ready[consumer] = None
        deferred = self._deferred
        while deferred and deferred[0][0] <= limit:
            data = heapq.heappop(deferred)[2]
            queue.put(data)
            if flight_log is not None:
                flight_log.release(data[10:26])
        self._check_idle()
        self._pump()
        self._rearm()

    def _rearm(self) -> None:
        """
        Set the timer for the earliest deadline, if any: the first of each
        consumer's order, the late heap's first live item, the first
        deferred message.
        """
        at: Optional[float] = None
        for flight in self._flights.values():
            if flight:
                first = flight[next(iter(flight))].deadline
                if at is None or first < at:
                    at = first
        late = self._late
        while late and late[0][2].late != late[0][1]:
            heapq.heappop(late)
        if late and (at is None or late[0][0] < at):
            at = late[0][0]
        deferred = self._deferred
        if deferred and (at is None or deferred[0][0] < at):
            at = deferred[0][0]
        if at is not None:
            timer_at = self._timer_at
            if timer_at is None or at < timer_at:
                self._arm(at)

    def _clear(self) -> None:
        """Forget every in-flight and deferred message; stop the timer."""
        self._in_flight.clear()
        for flight in self._flights.values():
            flight.clear()
        self._late = []
        self._deferred = []
        self._cancel_timer()

    def _drop_consumers(self) -> None:
        """Unsubscribe everyone, asking each consumer to close (as Go)."""
        consumers = list(self.consumers)
        for entry in self._in_flight.values():
            entry.consumer.in_flight_count -= 1
        self.consumers.clear()
        self._ready.clear()
        self._flights.clear()
        for consumer in consumers:
            close = getattr(consumer, "close", None)
            if close is not None:
                close()
