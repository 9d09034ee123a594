# -*- test-case-name: tests.test_client_consumer -*-
"""
The consumer: subscribes a handler to a topic's channel on every nsqd that
carries it, and keeps the message flow healthy.

It holds one connection per nsqd, found directly (``nsqd_tcp_addresses``,
reconnected with exponential delays when lost) or through nsqlookupd
(:mod:`txnsq.client.discovery`; a lost connection comes back when a later
poll still lists its nsqd). RDY counts are managed by
:class:`RDYController <txnsq.client.rdy.RDYController>` and backoff by
:class:`BackoffState <txnsq.client.backoff.BackoffState>`; this module wires them to the
connections, the handler and the clock.

The handler is called with each :class:`Message <txnsq.client.message.Message>`:

- ``True`` or ``None``: the message is finished (FIN);
- ``False``: it is requeued (REQ) with a delay growing with its attempts,
  and the consumer backs off;
- an exception: logged with its traceback, requeued, backoff;
- a Deferred (or a coroutine): its result, by the same rules;
- after ``message.enable_async()`` the handler answers by itself, later,
  with ``message.finish()`` or ``message.requeue()``.

A message delivered more than ``max_attempts`` times is not given to the
handler: ``giving_up(message)`` is called and the message finished.

Per message the consumer does a few integer operations: no Deferred (unless
the handler returns one), no timer, no log line.
"""

from __future__ import annotations

import dataclasses
import inspect
import random
from dataclasses import dataclass
from typing import (
    Any,
    Callable,
    Dict,
    Iterable,
    List,
    Optional,
    Protocol,
    Union,
)

from twisted.internet.defer import Deferred, maybeDeferred, succeed
from twisted.internet.interfaces import IDelayedCall
from twisted.internet.task import LoopingCall
from twisted.logger import Logger
from twisted.python.failure import Failure

from txnsq.client.backoff import BackoffAction, BackoffSignal, BackoffState, ReconnectDelays
from txnsq.client.discovery import LookupdPoller, Requester
from txnsq.client.message import Message
from txnsq.client.rdy import RDYConnection, RDYController
from txnsq.protocol.names import is_valid_channel_name, is_valid_topic_name

__all__ = ["Consumer", "ConsumerConnection", "ConsumerStats", "RDY_REDISTRIBUTE_INTERVAL"]

_log = Logger(namespace="txnsq.client.consumer")

#: Seconds between RDY redistribution rounds (go-nsq and pynsq: 5 s).
RDY_REDISTRIBUTE_INTERVAL = 5.0

#: Seconds to wait before testing the waters again when backoff ends with
#: no connection to test on (go-nsq).
_NO_CONNECTION_RETRY = 1.0

Handler = Callable[[Message], Any]


class ConsumerConnection(RDYConnection, Protocol):
    """What the consumer needs of a connection (``NSQConnection``)."""

    def subscribe(self, topic: str, channel: str) -> "Deferred[None]":
        """SUB; fires on OK, fails with the nsqd's error."""

    def close(self) -> "Deferred[None]":
        """CLS, then disconnect; fires when the connection is lost."""


#: ``connect(reactor, address, config, delegate)``, as
#: :func:`txnsq.client.connection.connect`.
Connector = Callable[[Any, str, Any, Any], "Deferred[Any]"]


@dataclass
class ConsumerStats:
    """A snapshot of a consumer's counters (go-nsq's ``ConsumerStats``)."""

    messages_received: int
    messages_finished: int
    messages_requeued: int
    connections: int


def _addresses(value: Union[str, Iterable[str], None]) -> List[str]:
    if not value:
        return []
    if isinstance(value, str):
        return [value]
    result: List[str] = []
    for address in value:
        if address not in result:
            result.append(address)
    return result


class Consumer:
    """
    Consumes ``topic``/``channel`` from nsqd, calling ``handler`` per message.

    :param topic: the topic to subscribe to.
    :param channel: the channel to subscribe as.
    :param handler: called with each :class:`Message` (see the module).
    :param nsqd_tcp_addresses: ``host:port`` of nsqd to connect to directly.
    :param lookupd_http_addresses: nsqlookupd HTTP addresses to discover
        nsqd from.
    :param max_in_flight: most messages in flight at once over all
        connections; 0 starts paused.
    :param lookupd_poll_interval: seconds between lookupd polls.
    :param lookupd_poll_jitter: share of an interval (0..1) the polls are
        randomly delayed by.
    :param low_rdy_idle_timeout: seconds without a message after which a
        connection's RDY may go elsewhere (when there are more connections
        than ``max_in_flight``).
    :param max_attempts: deliveries after which a message is given up; 0
        for no limit.
    :param max_backoff_duration: longest backoff in seconds; 0 disables
        backoff.
    :param backoff_multiplier: seconds; backoff level ``n`` lasts
        ``backoff_multiplier * 2 ** n``.
    :param default_requeue_delay: seconds; a failed message is requeued
        with ``default_requeue_delay * attempts``...
    :param max_requeue_delay: ...but no more than this.
    :param config: the connections' ``ConnectionConfig`` (defaults when
        omitted).
    :param reactor: the reactor (connections, time); the global one when
        omitted.
    :param giving_up: called with a message before it is given up; logs a
        warning when omitted.
    :param connect: makes connections (tests pass a fake);
        :func:`txnsq.client.connection.connect` when omitted.
    :param lookupd_request: sends ``GET url`` to lookupds; a
        :class:`GoHTTPClient <txnsq.http_client.GoHTTPClient>`'s when omitted.
    :param rng: random choices (RDY redistribution, jitter).
    :param reconnect_delay: seconds before the first reconnection to a
        direct nsqd; doubled at each failure...
    :param max_reconnect_delay: ...up to this.
    :param close_timeout: seconds :meth:`close` waits for in-flight
        messages to be answered before closing anyway.
    :param lookupd_connect_timeout: seconds to connect to a lookupd.
    :param lookupd_request_timeout: seconds for a whole lookupd request.
    :param rdy_redistribute_interval: seconds between RDY redistributions.

    :ivar messages_received: messages delivered to this consumer.
    :ivar messages_finished: FINs sent.
    :ivar messages_requeued: REQs sent.

    :raises ValueError: an invalid topic or channel name, or argument.
    """

    def __init__(
        self,
        topic: str,
        channel: str,
        handler: Handler,
        nsqd_tcp_addresses: Union[str, Iterable[str]] = (),
        lookupd_http_addresses: Union[str, Iterable[str]] = (),
        max_in_flight: int = 1,
        lookupd_poll_interval: float = 60.0,
        lookupd_poll_jitter: float = 0.3,
        low_rdy_idle_timeout: float = 10.0,
        max_attempts: int = 5,
        max_backoff_duration: float = 128.0,
        backoff_multiplier: float = 1.0,
        default_requeue_delay: float = 90.0,
        max_requeue_delay: float = 15 * 60.0,
        config: Any = None,
        reactor: Any = None,
        giving_up: Optional[Callable[[Message], Any]] = None,
        *,
        connect: Optional[Connector] = None,
        lookupd_request: Optional[Requester] = None,
        rng: Optional[random.Random] = None,
        reconnect_delay: float = 1.0,
        max_reconnect_delay: float = 60.0,
        close_timeout: float = 30.0,
        lookupd_connect_timeout: float = 1.0,
        lookupd_request_timeout: float = 2.0,
        rdy_redistribute_interval: float = RDY_REDISTRIBUTE_INTERVAL,
    ) -> None:
        if not is_valid_topic_name(topic):
            raise ValueError("invalid topic name %r" % (topic,))
        if not is_valid_channel_name(channel):
            raise ValueError("invalid channel name %r" % (channel,))
        if not callable(handler):
            raise ValueError("handler must be callable")
        if max_in_flight < 0:
            raise ValueError("max_in_flight must not be negative")
        if max_attempts < 0:
            raise ValueError("max_attempts must not be negative")
        if reactor is None:
            from twisted.internet import reactor as global_reactor

            reactor = global_reactor
        self.topic = topic
        self.channel = channel
        self._handler = handler
        self._giving_up = giving_up
        self.max_attempts = max_attempts
        self.default_requeue_delay = default_requeue_delay
        self.max_requeue_delay = max_requeue_delay
        self.close_timeout = close_timeout
        self._reactor = reactor
        self._config = config
        self._connect_fn = connect
        self._rng = rng if rng is not None else random.Random()

        self.messages_received = 0
        self.messages_finished = 0
        self.messages_requeued = 0

        self._rdy = RDYController(max_in_flight, reactor, low_rdy_idle_timeout, self._rng)
        self._backoff = BackoffState(backoff_multiplier, max_backoff_duration)
        self._backoff_timer: Optional[IDelayedCall] = None
        self._reconnect_delays = ReconnectDelays(
            reconnect_delay, max(reconnect_delay, max_reconnect_delay), rng=self._rng
        )
        self._redistribute_interval = rdy_redistribute_interval
        self._redistribute_loop: Optional[LoopingCall] = None

        # address -> subscribed connection
        self._connections: Dict[str, ConsumerConnection] = {}
        # address -> the connection being set up (None while dialling)
        self._pending: Dict[str, Optional[ConsumerConnection]] = {}
        # addresses to reconnect to whenever lost
        self._direct: List[str] = _addresses(nsqd_tcp_addresses)
        self._reconnects: Dict[str, IDelayedCall] = {}
        self._reconnect_attempts: Dict[str, int] = {}

        lookupds = _addresses(lookupd_http_addresses)
        self._poller: Optional[LookupdPoller] = None
        if lookupds:
            if lookupd_request is None:
                from txnsq.http_client import GoHTTPClient

                lookupd_request = GoHTTPClient(
                    reactor, lookupd_connect_timeout, lookupd_request_timeout
                ).request
            self._poller = LookupdPoller(
                reactor,
                lookupd_request,
                lookupds,
                topic,
                self._discovered,
                lookupd_poll_interval,
                lookupd_poll_jitter,
                self._rng,
            )

        self._started = False
        self._closing = False
        self._closed = False
        self._close_waiters: List[Deferred[None]] = []
        self._close_timer: Optional[IDelayedCall] = None
        self._closing_conns: Dict[int, "Deferred[Any]"] = {}

    # -- public API ------------------------------------------------------------

    def start(self) -> None:
        """Connect to the direct nsqd, start lookupd polling and RDY upkeep."""
        if self._started or self._closing:
            return
        self._started = True
        if self._config is None:
            from txnsq.client.connection import ConnectionConfig

            self._config = ConnectionConfig()
        if dataclasses.is_dataclass(self._config) and hasattr(self._config, "default_requeue_delay"):
            # A handler's own message.requeue() gets the same delays as the
            # consumer's automatic requeues.
            self._config = dataclasses.replace(
                self._config,  # type: ignore[type-var]
                default_requeue_delay=self.default_requeue_delay,
                max_requeue_delay=self.max_requeue_delay,
            )
        if self._connect_fn is None:
            from txnsq.client.connection import connect

            self._connect_fn = connect
        _log.info("[{topic}/{channel}] starting consumer", topic=self.topic, channel=self.channel)
        for address in list(self._direct):
            self._connect(address)
        loop = LoopingCall(self._redistribute)
        loop.clock = self._reactor
        self._redistribute_loop = loop
        loop.start(self._redistribute_interval, now=False).addErrback(
            lambda f: _log.failure("RDY redistribution stopped", failure=f)
        )
        if self._poller is not None:
            self._poller.start()

    def connect_to_nsqd(self, address: str) -> None:
        """
        Consume from the nsqd at ``address`` (``host:port``) too, reconnecting
        whenever the connection is lost.
        """
        if self._closing:
            raise RuntimeError("consumer closed")
        if address not in self._direct:
            self._direct.append(address)
        if self._started:
            self._connect(address)

    def is_starved(self) -> bool:
        """
        Whether some connection is about to stop receiving until messages
        are answered (go-nsq's IsStarved): a handler that batches messages
        should process its batch when this is true.
        """
        return self._rdy.is_starved()

    @property
    def max_in_flight(self) -> int:
        """Most messages in flight at once over all connections."""
        return self._rdy.max_in_flight

    def set_max_in_flight(self, max_in_flight: int) -> None:
        """Change ``max_in_flight`` and the RDY counts; 0 pauses the consumer."""
        self._rdy.set_max_in_flight(max_in_flight, backing_off=self._backoff.backing_off)

    @property
    def connections(self) -> int:
        """How many subscribed connections the consumer has."""
        return len(self._connections)

    @property
    def finished(self) -> int:
        """FINs sent (as :attr:`messages_finished`)."""
        return self.messages_finished

    @property
    def requeued(self) -> int:
        """REQs sent (as :attr:`messages_requeued`)."""
        return self.messages_requeued

    @property
    def backoff_level(self) -> int:
        """The backoff counter: 0 when the consumer is not backing off."""
        return self._backoff.counter

    def connected_addresses(self) -> List[str]:
        """The addresses of the subscribed connections."""
        return list(self._connections)

    def stats(self) -> ConsumerStats:
        """A snapshot of the counters."""
        return ConsumerStats(
            self.messages_received,
            self.messages_finished,
            self.messages_requeued,
            len(self._connections),
        )

    def close(self) -> "Deferred[None]":
        """
        Stop consuming: no more polls, reconnections or RDY changes; every
        connection sends CLS and closes once its in-flight messages are
        answered.

        :return: fires when every connection is closed, or after
            ``close_timeout`` seconds whatever remains; never fails.
        """
        if self._closed:
            return succeed(None)
        waiter: Deferred[None] = Deferred()
        self._close_waiters.append(waiter)
        if self._closing:
            return waiter
        self._closing = True
        _log.info("[{topic}/{channel}] stopping consumer", topic=self.topic, channel=self.channel)
        if self._poller is not None:
            self._poller.stop()
        if self._redistribute_loop is not None and self._redistribute_loop.running:
            self._redistribute_loop.stop()
        self._cancel_backoff_timer()
        for call in self._reconnects.values():
            if call.active():
                call.cancel()
        self._reconnects.clear()
        self._backoff.reset()
        self._rdy.stop()
        self._close_timer = self._reactor.callLater(self.close_timeout, self._close_timed_out)
        # Each connection sends CLS, waits for CLOSE_WAIT and for its
        # messages in flight to be answered, then disconnects.
        for conn in list(self._connections.values()):
            self._close_connection(conn)
        self._maybe_closed()
        return waiter

    # -- connections -----------------------------------------------------------

    def _connect(self, address: str) -> "Deferred[None]":
        """Dial, identify and subscribe to ``address``; never fails."""
        if self._closing or address in self._connections or address in self._pending:
            return succeed(None)
        self._reconnects.pop(address, None)
        self._pending[address] = None
        _log.info(
            "[{topic}/{channel}] ({address}) connecting to nsqd",
            topic=self.topic,
            channel=self.channel,
            address=address,
        )
        assert self._connect_fn is not None
        d: Deferred[Any] = maybeDeferred(
            self._connect_fn, self._reactor, address, self._config, self
        )

        def connected(conn: ConsumerConnection) -> "Deferred[Any]":
            if self._pending.get(address, False) is not None:
                # Dropped meanwhile (close() or a lost connection).
                self._close_connection(conn)
                return succeed(None)
            self._pending[address] = conn
            if self._closing:
                del self._pending[address]
                self._close_connection(conn)
                self._maybe_closed()
                return succeed(None)
            sub = conn.subscribe(self.topic, self.channel)
            sub.addCallback(lambda _: self._subscribed(conn, address))
            sub.addErrback(failed, conn)
            return sub

        def failed(failure: Failure, conn: Optional[ConsumerConnection] = None) -> None:
            if self._pending.get(address, False) is not conn:
                # on_close already dealt with it.
                return
            del self._pending[address]
            _log.warn(
                "[{topic}/{channel}] ({address}) error connecting to nsqd - {error}",
                topic=self.topic,
                channel=self.channel,
                address=address,
                error=failure.getErrorMessage() or repr(failure.value),
            )
            if conn is not None:
                self._close_connection(conn)
            if self._closing:
                self._maybe_closed()
            else:
                self._maybe_reconnect(address)

        d.addCallbacks(connected, failed)
        d.addErrback(lambda f: _log.failure("connecting to {address}", failure=f, address=address))
        return d

    def _subscribed(self, conn: ConsumerConnection, address: str) -> None:
        if self._pending.get(address) is not conn:
            self._close_connection(conn)
            return
        del self._pending[address]
        if self._closing:
            self._close_connection(conn)
            self._maybe_closed()
            return
        self._connections[address] = conn
        self._reconnect_attempts.pop(address, None)
        if conn.max_rdy_count < self._rdy.max_in_flight:
            _log.warn(
                "[{topic}/{channel}] ({address}) max RDY count {max_rdy} < consumer max in flight"
                " {max_in_flight}, truncation possible",
                topic=self.topic,
                channel=self.channel,
                address=address,
                max_rdy=conn.max_rdy_count,
                max_in_flight=self._rdy.max_in_flight,
            )
        self._rdy.add(conn, bootstrap=not self._backoff.backing_off)
        _log.info(
            "[{topic}/{channel}] ({address}) subscribed ({count} connections)",
            topic=self.topic,
            channel=self.channel,
            address=address,
            count=len(self._connections),
        )

    def _discovered(self, addresses: List[str]) -> None:
        for address in addresses:
            self._connect(address)

    def _maybe_reconnect(self, address: str) -> None:
        # Not twisted.application.internet.ClientService, which nsqd's
        # lookupd peers use: a consumer's connections are not one endpoint
        # kept up forever.  Only the nsqd given directly are
        # redialed (as go-nsq does); those found through nsqlookupd are
        # dropped and found again by the next poll, and the set of either
        # changes at run time (connect_to_nsqd, discovery).  A connection
        # is only "up" once IDENTIFY, AUTH and SUB succeeded, and a refusal
        # there (E_UNAUTHORIZED, a bad channel) must not be retried at
        # ClientService's pace.  What ClientService would add, the
        # backoff, is the same policy here (self._reconnect_delays).
        if self._closing or address not in self._direct or address in self._reconnects:
            return
        attempt = self._reconnect_attempts.get(address, 0)
        self._reconnect_attempts[address] = attempt + 1
        delay = self._reconnect_delays.delay(attempt)
        _log.info(
            "[{topic}/{channel}] ({address}) reconnecting in {delay:.1f}s",
            topic=self.topic,
            channel=self.channel,
            address=address,
            delay=delay,
        )
        self._reconnects[address] = self._reactor.callLater(delay, self._connect, address)

    def _close_connection(self, conn: ConsumerConnection) -> None:
        key = id(conn)
        if key in self._closing_conns:
            return
        d = maybeDeferred(conn.close)
        self._closing_conns[key] = d

        def closed(result: Any) -> None:
            self._closing_conns.pop(key, None)
            if isinstance(result, Failure):
                _log.failure("closing {address}", failure=result, address=conn.address)
            self._maybe_closed()

        d.addBoth(closed)

    def _close_timed_out(self) -> None:
        self._close_timer = None
        # close() is bounded: the connections still draining finish on
        # their own (nsqd requeues what they never answer).
        _log.warn(
            "[{topic}/{channel}] stopped with {count} connections still closing",
            topic=self.topic,
            channel=self.channel,
            count=len(self._closing_conns) + len(self._pending),
        )
        self._finish_close()

    def _maybe_closed(self) -> None:
        if (
            self._closing
            and not self._closed
            and not self._connections
            and not self._pending
            and not self._closing_conns
        ):
            self._finish_close()

    def _finish_close(self) -> None:
        if self._closed:
            return
        self._closed = True
        if self._close_timer is not None and self._close_timer.active():
            self._close_timer.cancel()
        self._close_timer = None
        _log.info("[{topic}/{channel}] consumer stopped", topic=self.topic, channel=self.channel)
        waiters, self._close_waiters = self._close_waiters, []
        for waiter in waiters:
            waiter.callback(None)

    # -- ConnectionDelegate ----------------------------------------------------

    def on_message(self, conn: Any, message: Message) -> None:
        """A message arrived: adjust RDY, then run the handler and answer."""
        self.messages_received += 1
        backoff = self._backoff
        if not (backoff.counter or backoff.in_timeout or self._closing):
            self._rdy.on_message(conn)
        if 0 < self.max_attempts < message.attempts:
            self._give_up(message)
            return
        try:
            result = self._handler(message)
        except Exception:
            self._handler_failed(Failure(), message)
            return
        if result is True or result is None:
            if not (message.is_async() or message.has_responded()):
                message.finish()
            return
        self._handle_result(result, message)

    def _handle_result(self, result: Any, message: Message) -> None:
        if inspect.iscoroutine(result):
            result = Deferred.fromCoroutine(result)
        if isinstance(result, Deferred):
            result.addCallbacks(
                self._deferred_result,
                self._handler_failed,
                callbackArgs=(message,),
                errbackArgs=(message,),
            )
            return
        if message.is_async() or message.has_responded():
            return
        if result:
            message.finish()
        else:
            message.requeue(self._requeue_delay(message), True)

    def _deferred_result(self, result: Any, message: Message) -> None:
        if result is True or result is None:
            if not (message.is_async() or message.has_responded()):
                message.finish()
            return
        self._handle_result(result, message)

    def _handler_failed(self, failure: Failure, message: Message) -> None:
        _log.failure(
            "[{topic}/{channel}] handler failed on message {id} (attempt {attempts}) from {address}",
            failure=failure,
            topic=self.topic,
            channel=self.channel,
            id=message.id.decode("ascii", "replace"),
            attempts=message.attempts,
            address=message.nsqd_address,
        )
        if not (message.is_async() or message.has_responded()):
            message.requeue(self._requeue_delay(message), True)

    def _requeue_delay(self, message: Message) -> float:
        return min(self.default_requeue_delay * message.attempts, self.max_requeue_delay)

    def _give_up(self, message: Message) -> None:
        try:
            if self._giving_up is not None:
                self._giving_up(message)
            else:
                _log.warn(
                    "[{topic}/{channel}] giving up on message {id} after {attempts} attempts"
                    " (max {max}): {body!r}",
                    topic=self.topic,
                    channel=self.channel,
                    id=message.id.decode("ascii", "replace"),
                    attempts=message.attempts,
                    max=self.max_attempts,
                    body=message.body[:200],
                )
        except Exception:
            _log.failure("giving_up failed on message {id}", id=message.id)
        if not message.has_responded():
            message.finish()

    def on_message_finished(self, conn: Any, message: Message) -> None:
        """FIN sent: count it; a success for backoff."""
        self.messages_finished += 1
        if self._backoff.counter and not (self._backoff.in_timeout or self._closing):
            self._backoff_signal(BackoffSignal.RESUME)

    def on_message_requeued(self, conn: Any, message: Message, backoff: bool) -> None:
        """REQ sent: count it; a failure for backoff when ``backoff``."""
        self.messages_requeued += 1
        if not (self._backoff.in_timeout or self._closing):
            self._backoff_signal(BackoffSignal.BACKOFF if backoff else BackoffSignal.CONTINUE)

    def on_error(self, conn: Any, error: Exception) -> None:
        """An error from nsqd not tied to a command: log it."""
        _log.warn(
            "[{topic}/{channel}] ({address}) error from nsqd: {error}",
            topic=self.topic,
            channel=self.channel,
            address=getattr(conn, "address", "?"),
            error=error,
        )

    def on_close(self, conn: Any, reason: Failure) -> None:
        """A connection was lost: forget it; reconnect to a direct nsqd."""
        address = conn.address
        if self._pending.get(address, False) is conn:
            # Lost while subscribing.
            del self._pending[address]
            if self._closing:
                self._maybe_closed()
            else:
                self._maybe_reconnect(address)
            return
        known = self._connections.get(address)
        if known is None or known is not conn:
            return
        del self._connections[address]
        self._rdy.remove(known, backing_off=self._backoff.counter > 0)
        if self._closing:
            self._maybe_closed()
            return
        _log.warn(
            "[{topic}/{channel}] ({address}) connection closed: {reason}; {left} left",
            topic=self.topic,
            channel=self.channel,
            address=address,
            reason=reason.getErrorMessage(),
            left=len(self._connections),
        )
        self._maybe_reconnect(address)

    # -- backoff and RDY upkeep ------------------------------------------------

    def _backoff_signal(self, signal: BackoffSignal) -> None:
        action = self._backoff.signal(signal)
        if action is BackoffAction.NONE:
            return
        if action is BackoffAction.EXIT:
            _log.warn(
                "[{topic}/{channel}] exiting backoff, returning all to RDY {count}",
                topic=self.topic,
                channel=self.channel,
                count=self._rdy.per_connection,
            )
            self._rdy.restore()
            return
        _log.warn(
            "[{topic}/{channel}] backing off for {duration}s (backoff level {backoff_level}),"
            " setting all to RDY 0",
            topic=self.topic,
            channel=self.channel,
            duration=self._backoff.duration,
            backoff_level=self._backoff.counter,
        )
        self._rdy.zero_all()
        self._start_backoff_timer(self._backoff.duration)

    def _start_backoff_timer(self, duration: float) -> None:
        self._cancel_backoff_timer()
        self._backoff_timer = self._reactor.callLater(duration, self._backoff_expired)

    def _cancel_backoff_timer(self) -> None:
        if self._backoff_timer is not None and self._backoff_timer.active():
            self._backoff_timer.cancel()
        self._backoff_timer = None

    def _backoff_expired(self) -> None:
        self._backoff_timer = None
        if self._closing:
            return
        if self._backoff.counter == 0:
            self._backoff.timeout_ended()
            self._rdy.restore()
            return
        conns = list(self._connections.values())
        if not conns:
            _log.warn(
                "[{topic}/{channel}] no connection available to resume, backing off for 1s",
                topic=self.topic,
                channel=self.channel,
            )
            self._start_backoff_timer(_NO_CONNECTION_RETRY)
            return
        choice = conns[self._rng.randrange(len(conns))]
        if not self._rdy.update(choice, 1):
            self._start_backoff_timer(_NO_CONNECTION_RETRY)
            return
        self._backoff.timeout_ended()
        _log.info(
            "[{topic}/{channel}] ({address}) backoff timeout expired, sending RDY 1",
            topic=self.topic,
            channel=self.channel,
            address=choice.address,
        )

    def _redistribute(self) -> None:
        if self._closing:
            return
        self._rdy.redistribute(
            backing_off=self._backoff.counter > 0,
            in_backoff_timeout=self._backoff.in_timeout,
        )
