# -*- test-case-name: tests.test_client_producer -*-
"""
Publishing over nsqd's TCP protocol: :class:`Producer`.

A producer keeps at most one :class:`NSQConnection <txnsq.client.connection.NSQConnection>`
per nsqd address, opened on the first publish that needs it (not at
construction) and opened again on the next publish after it is lost.
Publishes go round-robin over the addresses.  An address whose connection
attempt failed is skipped for a backoff period (doubling with each failure
in a row, up to ``max_backoff``); a publish whose connection attempt fails
moves on to the next address that is not backing off, because its message
was never sent.  A publish that was sent is never retried: if the
connection is lost before nsqd answered, nsqd may or may not have the
message, and only the caller can decide to send it again.
"""

from __future__ import annotations

from typing import Any, Callable, List, Optional, Sequence, Set, Union

from twisted.internet.defer import Deferred, fail, gatherResults, succeed
from twisted.internet.interfaces import IReactorTime
from twisted.logger import Logger
from twisted.python.failure import Failure

from txnsq.client.connection import (
    ConnectionConfig,
    NSQConnection,
    NSQConnectionError,
)
from txnsq.client.connection import connect as connect_to_nsqd
from txnsq.addresses import split_host_port
from txnsq.client.message import Message
from txnsq.protocol.v2_client import NSQError, check_topic

__all__ = ["Producer"]

#: Seconds an address is skipped after its first failed connection attempt.
INITIAL_BACKOFF = 1.0
#: The longest an address is skipped after failed attempts in a row.
MAX_BACKOFF = 60.0

Send = Callable[[NSQConnection], "Deferred[None]"]


class _Node:
    """One nsqd address of a producer and its connection, if any."""

    __slots__ = ("address", "conn", "connecting", "waiters", "failures", "retry_at", "last_error")

    def __init__(self, address: str) -> None:
        self.address = address
        self.conn: Optional[NSQConnection] = None
        self.connecting: Optional["Deferred[NSQConnection]"] = None
        self.waiters: List["Deferred[NSQConnection]"] = []
        self.failures = 0
        self.retry_at = 0.0
        self.last_error: Optional[Failure] = None

    def usable(self) -> bool:
        return self.conn is not None and self.conn.is_ready()


class Producer:
    """
    Publishes to one or more nsqd over TCP.

    Every publish returns a Deferred that fires with ``None`` once nsqd
    answered OK, or fails with :class:`NSQError <txnsq.protocol.v2_client.NSQError>`
    (nsqd's ``E_*`` answer, or an invalid topic name found before sending)
    or :class:`NSQConnectionError <txnsq.client.connection.NSQConnectionError>` (no nsqd could
    be reached, or the connection was lost before the answer).

    :param nsqd_tcp_addresses: ``host:port`` of one nsqd, or several.
    :param config: the connections' settings.
    :param reactor: makes the connections; the global reactor by default.
    :param clock: times backoffs and deadlines; the reactor by default.
    :param initial_backoff: seconds an address is skipped after a failed
        connection attempt; doubles with each failure in a row ...
    :param max_backoff: ... up to this.
    :param connect: makes connections, as
        :func:`txnsq.client.connection.connect` (the default) does; tests
        pass :meth:`txnsq.testing.MemoryNSQD.connect`.
    :raises ValueError: no address, or a malformed one.
    """

    _log = Logger()

    def __init__(
        self,
        nsqd_tcp_addresses: Union[str, Sequence[str]],
        config: Optional[ConnectionConfig] = None,
        reactor: Any = None,
        clock: Optional[IReactorTime] = None,
        initial_backoff: float = INITIAL_BACKOFF,
        max_backoff: float = MAX_BACKOFF,
        connect: Optional[Callable[..., "Deferred[NSQConnection]"]] = None,
    ) -> None:
        if isinstance(nsqd_tcp_addresses, str):
            nsqd_tcp_addresses = [nsqd_tcp_addresses]
        addresses = list(nsqd_tcp_addresses)
        if not addresses:
            raise ValueError("a Producer needs at least one nsqd address")
        for address in addresses:
            split_host_port(address)
        if reactor is None:
            from twisted.internet import reactor as global_reactor

            reactor = global_reactor
        self.reactor = reactor
        self.clock: IReactorTime = clock if clock is not None else reactor
        self.config = config if config is not None else ConnectionConfig()
        self.initial_backoff = initial_backoff
        self.max_backoff = max_backoff
        self._connect = connect if connect is not None else connect_to_nsqd
        self._nodes = [_Node(address) for address in addresses]
        self._next = 0
        self._closed = False

    @property
    def addresses(self) -> List[str]:
        """The nsqd addresses, in round-robin order."""
        return [node.address for node in self._nodes]

    @property
    def connections(self) -> List[NSQConnection]:
        """The connections that are open and ready."""
        return [node.conn for node in self._nodes if node.conn is not None and node.conn.is_ready()]

    # -- publishing ----------------------------------------------------------

    def publish(self, topic: str, body: bytes) -> "Deferred[None]":
        """PUB ``body`` to ``topic``."""
        return self._send("PUB", topic, lambda conn: conn.publish(topic, body))

    def multi_publish(self, topic: str, bodies: Sequence[bytes]) -> "Deferred[None]":
        """MPUB ``bodies`` to ``topic``, atomically."""
        batch = list(bodies)
        return self._send("MPUB", topic, lambda conn: conn.multi_publish(topic, batch))

    def deferred_publish(self, topic: str, delay: float, body: bytes) -> "Deferred[None]":
        """DPUB ``body`` to ``topic``, delivered ``delay`` seconds from now."""
        return self._send("DPUB", topic, lambda conn: conn.deferred_publish(topic, delay, body))

    def _send(self, verb: str, topic: str, send: Send) -> "Deferred[None]":
        if self._closed:
            return fail(NSQConnectionError("the producer is closed"))
        try:
            check_topic(verb, topic)
        except NSQError as error:
            return fail(error)
        return self._attempt(send, set(), None)

    def _attempt(self, send: Send, tried: Set[_Node], last: Optional[Failure]) -> "Deferred[None]":
        """
        Send through the next available address; on a connection failure,
        the one after.  When none is left, an nsqd's refusal (``E_*`` to
        IDENTIFY or AUTH) is the error, else every address's state.
        """
        node = self._pick(tried)
        if node is None:
            if last is not None and last.check(NSQError):
                return fail(last)
            return fail(self._unavailable())
        tried.add(node)
        if node.usable():
            assert node.conn is not None
            return send(node.conn)

        def not_connected(failure: Failure) -> "Deferred[None]":
            failure.trap(NSQError, NSQConnectionError)
            if self._closed:
                return fail(failure)
            return self._attempt(send, tried, failure)

        return self._connection(node).addCallbacks(send, not_connected)

    def _pick(self, tried: Set[_Node]) -> Optional[_Node]:
        """The next address round-robin that is not backing off (or ``None``)."""
        nodes = self._nodes
        count = len(nodes)
        now = self.clock.seconds()
        for step in range(count):
            index = (self._next + step) % count
            node = nodes[index]
            if node in tried:
                continue
            if node.usable() or node.connecting is not None or node.retry_at <= now:
                self._next = (index + 1) % count
                return node
        return None

    def _unavailable(self) -> NSQConnectionError:
        now = self.clock.seconds()
        states = []
        last: Optional[Failure] = None
        for node in self._nodes:
            if node.last_error is not None:
                last = node.last_error
                states.append(
                    "%s: %s (next attempt in %.1fs)"
                    % (node.address, node.last_error.getErrorMessage(), max(0.0, node.retry_at - now))
                )
            else:
                states.append("%s: unavailable" % (node.address,))
        return NSQConnectionError("no nsqd available; " + "; ".join(states), last)

    # -- connections -----------------------------------------------------------

    def _connection(self, node: _Node) -> "Deferred[NSQConnection]":
        """The node's connection, opened if need be; publishes share an attempt."""
        waiter: "Deferred[NSQConnection]" = Deferred()
        node.waiters.append(waiter)
        if node.connecting is None:
            attempt = self._connect(self.reactor, node.address, self.config, self, self.clock)
            node.connecting = attempt
            attempt.addCallbacks(
                lambda conn: self._connected(node, conn),
                lambda failure: self._connect_failed(node, failure),
            )
        return waiter

    def _connected(self, node: _Node, conn: NSQConnection) -> None:
        node.connecting = None
        node.failures = 0
        node.retry_at = 0.0
        node.last_error = None
        waiters, node.waiters = node.waiters, []
        if self._closed:
            conn.close()
            for waiter in waiters:
                waiter.errback(Failure(NSQConnectionError("the producer is closed")))
            return
        node.conn = conn
        for waiter in waiters:
            waiter.callback(conn)

    def _connect_failed(self, node: _Node, failure: Failure) -> None:
        node.connecting = None
        if self._closed:
            failure = Failure(NSQConnectionError("the producer is closed"))
        else:
            node.failures += 1
            delay = min(self.initial_backoff * 2 ** (node.failures - 1), self.max_backoff)
            node.retry_at = self.clock.seconds() + delay
            node.last_error = failure
            self._log.info(
                "connecting to nsqd {address} failed: {error}; next attempt in {delay}s at the earliest",
                address=node.address,
                error=failure.getErrorMessage(),
                delay=delay,
            )
        waiters, node.waiters = node.waiters, []
        for waiter in waiters:
            waiter.errback(failure)

    # -- ConnectionDelegate ------------------------------------------------------

    def on_message(self, conn: NSQConnection, message: Message) -> None:
        """A producer never subscribes: a message is nsqd's mistake, left to time out."""
        self._log.warn("nsqd {address} sent a message to a producer", address=conn.address)

    def on_message_finished(self, conn: NSQConnection, message: Message) -> None:
        """Not used by a producer."""

    def on_message_requeued(self, conn: NSQConnection, message: Message, backoff: bool) -> None:
        """Not used by a producer."""

    def on_error(self, conn: NSQConnection, error: NSQError) -> None:
        """An error frame no publish waited for."""
        self._log.warn("nsqd {address}: {error}", address=conn.address, error=str(error))

    def on_close(self, conn: NSQConnection, reason: Failure) -> None:
        """Forget a lost connection; the next publish to its address reconnects."""
        for node in self._nodes:
            if node.conn is conn:
                node.conn = None
        if not self._closed:
            self._log.info(
                "connection to nsqd {address} closed: {reason}",
                address=conn.address,
                reason=reason.getErrorMessage(),
            )

    # -- closing -------------------------------------------------------------

    def close(self) -> "Deferred[None]":
        """
        Stop publishing: later publishes fail, connection attempts are
        cancelled, and each connection closes once the publishes already
        sent are answered (bounded by the config's ``close_timeout``).
        Fires when every connection is closed.
        """
        self._closed = True
        closing: List["Deferred[None]"] = []
        for node in self._nodes:
            if node.connecting is not None:
                node.connecting.cancel()
            if node.conn is not None:
                closing.append(node.conn.close())
        if not closing:
            return succeed(None)
        return gatherResults(closing).addCallback(lambda _: None)
