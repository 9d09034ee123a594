# -*- test-case-name: tests.test_client_rdy -*-
"""
How a consumer spreads its ``max_in_flight`` over its nsqd connections as
RDY counts (NSQ's flow control), after go-nsq's ``updateRDY`` /
``redistributeRDY`` and pynsq's ``_redistribute_rdy_state``.

The rules, from the client library guide:

1. a new connection starts at ``RDY 1``, so the first connections are not
   favoured while the final number of connections is still unknown; its
   first message raises it to its share;
2. each connection's share is ``max(1, max_in_flight // connections)``;
3. the sum of all RDY counts never exceeds ``max_in_flight``, and no count
   exceeds the connection's ``max_rdy_count``;
4. when ``max_in_flight`` is below the number of connections (or the
   consumer backs off with several connections), RDY 1 is moved every few
   seconds from connections idle for ``low_rdy_idle_timeout`` to randomly
   chosen others, so producers with messages are eventually found.

nsqd treats RDY as a window (it sends while ``in_flight < RDY``), not as a
counter that each message uses up, so a count needs sending again only
when the connection's share changes; the guide's "re-send below 25 %"
dates from counting RDY and neither reference client does it any more.

This module sends nothing itself: it calls ``send_rdy`` on the connections
it is given. Its only timers are go-nsq's RDY retries, on an injected clock.
"""

from __future__ import annotations

import random
from typing import Dict, List, Optional, Protocol

from twisted.internet.interfaces import IDelayedCall, IReactorTime

__all__ = ["RDYConnection", "RDYController", "RDY_RETRY_DELAY", "STARVED_RATIO"]

#: Seconds before retrying a RDY that ``max_in_flight`` refused (go-nsq).
RDY_RETRY_DELAY = 5.0

#: In-flight share of the last RDY above which a connection counts as
#: starved: a little below 1 so that a batching handler acts before the
#: flow actually stops (the guide's constant).
STARVED_RATIO = 0.85


class RDYConnection(Protocol):
    """What RDY management needs of a connection (a subset of ``NSQConnection``)."""

    address: str
    rdy_count: int
    max_rdy_count: int
    in_flight: int
    last_message_time: float

    def send_rdy(self, count: int) -> None:
        """Send ``RDY count`` and remember it as ``rdy_count``."""


class RDYController:
    """
    The RDY counts of one consumer's connections.

    :param max_in_flight: most messages in flight over all connections.
    :param clock: times RDY retries and idle connections.
    :param low_rdy_idle_timeout: seconds a connection may hold RDY without a
        message before redistribution takes it away.
    :param rng: chooses connections when redistributing.

    :ivar total_rdy: sum of the RDY counts last sent.
    :ivar need_redistribute: a redistribution is due even if the usual
        conditions do not call for one (a connection holding RDY closed).
    :ivar connections: address -> connection, in the order they were added.
    """

    def __init__(
        self,
        max_in_flight: int,
        clock: IReactorTime,
        low_rdy_idle_timeout: float = 10.0,
        rng: Optional[random.Random] = None,
    ) -> None:
        if max_in_flight < 0:
            raise ValueError("max_in_flight must not be negative")
        self.max_in_flight = max_in_flight
        self.low_rdy_idle_timeout = low_rdy_idle_timeout
        self.connections: Dict[str, RDYConnection] = {}
        self.total_rdy = 0
        self.need_redistribute = False
        self._clock = clock
        self._rng = rng if rng is not None else random.Random()
        self._retries: Dict[str, IDelayedCall] = {}
        # When each connection last went from RDY 0 to RDY > 0: a connection
        # only counts as idle once it has held RDY that long without a message.
        self._rdy_since: Dict[str, float] = {}
        self._target = self._share()

    # -- shares --------------------------------------------------------------

    def _share(self) -> int:
        mif = self.max_in_flight
        return min(max(1, mif // max(1, len(self.connections))), mif)

    @property
    def per_connection(self) -> int:
        """Each connection's share of ``max_in_flight`` (go-nsq's perConnMaxInFlight)."""
        return self._target

    # -- sending ---------------------------------------------------------------

    def update(self, conn: RDYConnection, count: int) -> bool:
        """
        Ask for ``RDY count`` on ``conn``, within the limits (go-nsq's updateRDY).

        The count is cut to the connection's ``max_rdy_count``; a raise is
        cut to what ``max_in_flight`` leaves, and when nothing is left for a
        connection at 0 the same request is retried after
        :data:`RDY_RETRY_DELAY` unless another update for it comes first.
        Lowering is always allowed (go-nsq refuses it while the total is
        above a just lowered ``max_in_flight``).

        :return: whether the count asked for, or part of a raise, was set.
        """
        if count > conn.max_rdy_count:
            count = conn.max_rdy_count
        self._cancel_retry(conn.address)
        rdy = conn.rdy_count
        if count > rdy:
            possible = self.max_in_flight - self.total_rdy + rdy
            if possible < count:
                if possible <= rdy:
                    if rdy == 0 and self.max_in_flight > 0:
                        # Without a retry this connection could wait at 0
                        # for ever.
                        self._retries[conn.address] = self._clock.callLater(
                            RDY_RETRY_DELAY, self._retry, conn, count
                        )
                    return False
                count = possible
        self._send(conn, count)
        return True

    def _retry(self, conn: RDYConnection, count: int) -> None:
        self._retries.pop(conn.address, None)
        if self.connections.get(conn.address) is conn:
            self.update(conn, count)

    def _cancel_retry(self, address: str) -> bool:
        call = self._retries.pop(address, None)
        if call is None:
            return False
        if call.active():
            call.cancel()
        return True

    def _send(self, conn: RDYConnection, count: int) -> None:
        rdy = conn.rdy_count
        if count == rdy:
            return
        conn.send_rdy(count)
        # A connection that is no longer ready ignores RDY: count what it
        # kept, not what was asked.
        sent = conn.rdy_count
        self.total_rdy += sent - rdy
        if rdy == 0 and sent > 0:
            self._rdy_since[conn.address] = self._clock.seconds()

    def on_message(self, conn: RDYConnection) -> None:
        """
        A message arrived on ``conn`` (not backing off): bring its RDY to its
        share if it differs (the first message after ``RDY 1``, or after the
        number of connections changed).

        Connections at 0 are left to redistribution and retries. Called for
        every message, so it is a comparison in the usual case.
        """
        rdy = conn.rdy_count
        if rdy != self._target and rdy > 0:
            self.update(conn, self._target)

    def zero_all(self) -> None:
        """Set RDY 0 on every connection (backoff, pause, close)."""
        for conn in list(self.connections.values()):
            self.update(conn, 0)

    # -- connections -----------------------------------------------------------

    def add(self, conn: RDYConnection, bootstrap: bool = True) -> None:
        """
        Count a newly subscribed connection: lower the others to the new
        share, then give it ``RDY 1`` if ``bootstrap`` and ``max_in_flight``
        allows (not while backing off: another connection tests the waters).
        """
        self.connections[conn.address] = conn
        self._target = self._share()
        for other in list(self.connections.values()):
            if other is not conn and other.rdy_count > self._target:
                self.update(other, self._target)
        if bootstrap and self.total_rdy < self.max_in_flight:
            self.update(conn, 1)

    def remove(self, conn: RDYConnection, backing_off: bool = False) -> None:
        """
        Forget a closed connection and its RDY; ask for a redistribution if
        its RDY would otherwise be lost (the consumer is leaving the
        redistributing regime, or backs off and this was the tester).
        """
        if self.connections.get(conn.address) is not conn:
            return
        del self.connections[conn.address]
        self._rdy_since.pop(conn.address, None)
        had_retry = self._cancel_retry(conn.address)
        rdy = conn.rdy_count
        self.total_rdy = max(0, self.total_rdy - rdy)
        self._target = self._share()
        if (had_retry or rdy > 0) and (
            len(self.connections) == self.max_in_flight or backing_off
        ):
            self.need_redistribute = True

    # -- distribution ----------------------------------------------------------

    def restore(self) -> None:
        """
        Return to the normal distribution (leaving backoff): everyone at its
        share, or redistribution when there are more connections than
        ``max_in_flight``.
        """
        if self.max_in_flight < len(self.connections):
            self.need_redistribute = True
            self.redistribute()
            return
        self._distribute()

    def _distribute(self) -> None:
        # Lower first, so that the raises find room under max_in_flight.
        conns = sorted(self.connections.values(), key=lambda c: -c.rdy_count)
        for conn in conns:
            self.update(conn, self._target)

    def set_max_in_flight(self, max_in_flight: int, backing_off: bool = False) -> None:
        """
        Change ``max_in_flight``; 0 pauses every connection at once. While
        backing off only the limit changes; leaving backoff applies it.
        """
        if max_in_flight < 0:
            raise ValueError("max_in_flight must not be negative")
        for address in list(self._retries):
            self._cancel_retry(address)
        self.max_in_flight = max_in_flight
        self._target = self._share()
        if max_in_flight == 0:
            self.zero_all()
            return
        if backing_off:
            return
        if max_in_flight < len(self.connections):
            self.need_redistribute = True
            self.redistribute()
            return
        self._distribute()

    def redistribute(self, backing_off: bool = False, in_backoff_timeout: bool = False) -> None:
        """
        Move RDY from idle connections to random others when not everyone
        can have RDY 1 (pynsq's ``_redistribute_rdy_state``); run every few
        seconds by the consumer.

        While backing off at most one connection holds RDY 1; during a
        backoff interval nothing moves.
        """
        conns = list(self.connections.values())
        if not conns or in_backoff_timeout or self.max_in_flight == 0:
            return
        if len(conns) > self.max_in_flight:
            self.need_redistribute = True
        if backing_off and len(conns) > 1:
            self.need_redistribute = True
        if not self.need_redistribute:
            return
        self.need_redistribute = False

        if self.total_rdy > self.max_in_flight:
            # max_in_flight was lowered: RDY 1 on as many random connections
            # as it allows, 0 elsewhere (zeros first, to make room).
            chosen = self._rng.sample(conns, min(self.max_in_flight, len(conns)))
            for conn in conns:
                if conn not in chosen:
                    self.update(conn, 0)
            for conn in chosen:
                self.update(conn, 1)

        now = self._clock.seconds()
        for conn in conns:
            if conn.rdy_count > 0:
                since = max(conn.last_message_time, self._rdy_since.get(conn.address, 0.0))
                if now - since > self.low_rdy_idle_timeout:
                    self.update(conn, 0)

        busy = sum(1 for c in conns if c.in_flight or c.rdy_count)
        limit = 1 if backing_off else self.max_in_flight
        available = max(0, limit - busy)
        in_flight = [c for c in conns if c.in_flight]
        if in_flight and not available:
            # Give up RDY on a connection with messages in flight so that a
            # later round can move it, instead of staying pinned.
            self.update(self._rng.choice(in_flight), 0)

        possible: List[RDYConnection] = [c for c in conns if not (c.in_flight or c.rdy_count)]
        while possible and available:
            available -= 1
            conn = possible.pop(self._rng.randrange(len(possible)))
            self.update(conn, 1)

    # -- state -----------------------------------------------------------------

    def is_starved(self) -> bool:
        """
        Whether some connection has nearly as many messages in flight as its
        RDY allows (go-nsq's IsStarved): no more will come until some are
        answered, so a batching handler should process its batch now.
        """
        for conn in self.connections.values():
            in_flight = conn.in_flight
            if in_flight > 0 and in_flight >= int(conn.rdy_count * STARVED_RATIO):
                return True
        return False

    def stop(self) -> None:
        """Cancel every pending RDY retry."""
        for address in list(self._retries):
            self._cancel_retry(address)
