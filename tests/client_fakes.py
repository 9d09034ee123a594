"""
Fake nsqd connections for the consumer's unit tests: what
``txnsq.client.connection`` provides, without sockets, on a ``Clock``.
"""

from __future__ import annotations

from typing import Any, Dict, List, Optional, Set, Tuple

from twisted.internet.defer import Deferred, fail, succeed
from twisted.internet.task import Clock
from twisted.python.failure import Failure

from txnsq.client.message import Message


class FakeConnection:
    """
    A subscribed connection as the consumer sees it.

    Records every RDY as ``(time, count)`` in :attr:`rdy_history` and every
    answer in :attr:`answers` (``("FIN", id)``, ``("REQ", id, delay,
    backoff)``, ``("TOUCH", id)``).  ``close()`` waits for the messages in
    flight, as the real connection does, unless :attr:`hang_on_close`.
    """

    def __init__(
        self,
        address: str,
        clock: Clock,
        delegate: Any = None,
        max_rdy_count: int = 2500,
    ) -> None:
        self.address = address
        self.clock = clock
        self.delegate = delegate
        self.max_rdy_count = max_rdy_count
        self.rdy_count = 0
        self.in_flight = 0
        self.last_message_time = 0.0
        self.identify_response: Dict[str, Any] = {}
        self.rdy_history: List[Tuple[float, int]] = []
        self.answers: List[Tuple[Any, ...]] = []
        self.subscribed: Optional[Tuple[str, str]] = None
        self.subscribe_result: Optional[Deferred[None]] = None
        self.closing = False
        self.closed = False
        self.hang_on_close = False
        self._close_waiters: List[Deferred[None]] = []
        self._next_id = 0

    def __repr__(self) -> str:
        return "<FakeConnection %s rdy=%d in_flight=%d>" % (
            self.address,
            self.rdy_count,
            self.in_flight,
        )

    # -- NSQConnection ---------------------------------------------------------

    def subscribe(self, topic: str, channel: str) -> "Deferred[None]":
        self.subscribed = (topic, channel)
        if self.subscribe_result is not None:
            return self.subscribe_result
        return succeed(None)

    def send_rdy(self, count: int) -> None:
        if not 0 <= count <= self.max_rdy_count:
            raise ValueError("RDY %d outside 0..%d" % (count, self.max_rdy_count))
        if self.closed:
            return
        self.rdy_count = count
        self.rdy_history.append((self.clock.seconds(), count))

    def close(self) -> "Deferred[None]":
        d: Deferred[None] = Deferred()
        if self.closed:
            d.callback(None)
            return d
        self._close_waiters.append(d)
        self.closing = True
        self._maybe_closed()
        return d

    def _maybe_closed(self) -> None:
        if self.closing and not self.closed and self.in_flight <= 0 and not self.hang_on_close:
            self.lose()

    def lose(self, reason: Optional[Failure] = None) -> None:
        """The connection is lost: tell the delegate, fire close()."""
        if self.closed:
            return
        self.closed = True
        self.in_flight = 0
        if self.delegate is not None:
            self.delegate.on_close(
                self, reason if reason is not None else Failure(ConnectionError("lost"))
            )
        waiters, self._close_waiters = self._close_waiters, []
        for waiter in waiters:
            waiter.callback(None)

    # -- MessageDelegate -------------------------------------------------------

    def on_finish(self, message: Message) -> None:
        if self.closed:
            return
        self.answers.append(("FIN", message.id))
        self.in_flight -= 1
        self.delegate.on_message_finished(self, message)
        self._maybe_closed()

    def on_requeue(self, message: Message, delay: Optional[float], backoff: bool) -> None:
        if self.closed:
            return
        self.answers.append(("REQ", message.id, delay, backoff))
        self.in_flight -= 1
        self.delegate.on_message_requeued(self, message, backoff)
        self._maybe_closed()

    def on_touch(self, message: Message) -> None:
        self.answers.append(("TOUCH", message.id))

    # -- driving ---------------------------------------------------------------

    def deliver(self, body: bytes = b"body", attempts: int = 1) -> Message:
        """nsqd sends a message on this connection."""
        self._next_id += 1
        message = Message(
            b"%016d" % (self._next_id,),
            body,
            0,
            attempts,
            self.address,
            self,
        )
        self.in_flight += 1
        self.last_message_time = self.clock.seconds()
        self.delegate.on_message(self, message)
        return message

    def rdy_counts(self) -> List[int]:
        """Just the RDY counts sent, in order."""
        return [count for _, count in self.rdy_history]


class FakeConnector:
    """
    ``connect(reactor, address, config, delegate)`` for the consumer.

    Connections succeed at once unless the address is in :attr:`refused`
    or :attr:`manual` (then :meth:`complete` or :meth:`refuse` decides).

    :ivar attempts: ``(time, address)`` of every connection attempt.
    :ivar made: address -> every :class:`FakeConnection` made for it.
    """

    def __init__(self, clock: Clock, max_rdy_count: int = 2500) -> None:
        self.clock = clock
        self.max_rdy_count = max_rdy_count
        self.refused: Set[str] = set()
        self.manual: Set[str] = set()
        self.waiting: Dict[str, Tuple[Deferred[FakeConnection], FakeConnection]] = {}
        self.attempts: List[Tuple[float, str]] = []
        self.made: Dict[str, List[FakeConnection]] = {}
        self.configs: List[Any] = []

    def __call__(self, reactor: Any, address: str, config: Any, delegate: Any) -> "Deferred[FakeConnection]":
        self.attempts.append((self.clock.seconds(), address))
        self.configs.append(config)
        if address in self.refused:
            return fail(ConnectionRefusedError("refused: " + address))
        conn = FakeConnection(address, self.clock, delegate, self.max_rdy_count)
        self.made.setdefault(address, []).append(conn)
        if address in self.manual:
            d: Deferred[FakeConnection] = Deferred()
            self.waiting[address] = (d, conn)
            return d
        return succeed(conn)

    def complete(self, address: str) -> FakeConnection:
        d, conn = self.waiting.pop(address)
        d.callback(conn)
        return conn

    def refuse(self, address: str) -> None:
        d, _ = self.waiting.pop(address)
        d.errback(ConnectionRefusedError("refused: " + address))

    def current(self, address: str) -> FakeConnection:
        """The latest connection made to ``address``."""
        return self.made[address][-1]

    def attempt_times(self, address: str) -> List[float]:
        return [t for t, a in self.attempts if a == address]


class FakeLookupd:
    """
    ``request(method, url)`` for discovery: answers each lookupd URL from
    :attr:`producers` (``{netloc: [(host, port), ...]}``).

    :ivar requests: ``(time, url)`` of each request.
    """

    def __init__(self, clock: Clock) -> None:
        self.clock = clock
        self.producers: Dict[str, List[Tuple[str, int]]] = {}
        self.down: Set[str] = set()
        self.hold = False
        self.held: List[Deferred[Tuple[int, bytes, bytes]]] = []
        self.requests: List[Tuple[float, str]] = []

    def __call__(self, method: str, url: str) -> "Deferred[Tuple[int, bytes, bytes]]":
        import json
        from urllib.parse import urlsplit

        self.requests.append((self.clock.seconds(), url))
        netloc = urlsplit(url).netloc
        if self.hold:
            d: Deferred[Tuple[int, bytes, bytes]] = Deferred()
            self.held.append(d)
            return d
        if netloc in self.down:
            return fail(ConnectionRefusedError("lookupd down"))
        body = json.dumps(
            {
                "channels": [],
                "producers": [
                    {
                        "broadcast_address": host,
                        "hostname": host,
                        "remote_address": "%s:1" % (host,),
                        "tcp_port": port,
                        "http_port": port + 1,
                        "version": "1.3.0",
                    }
                    for host, port in self.producers.get(netloc, [])
                ],
            }
        ).encode()
        return succeed((200, b"OK", body))

    def request_times(self) -> List[float]:
        return sorted({t for t, _ in self.requests})
