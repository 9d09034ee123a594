# -*- test-case-name: tests.test_output -*-
"""
Writes coalesced per reactor turn.

A consumer that sends a hundred ``FIN`` in one TCP segment gets a hundred
messages back; written one ``transport.write`` each, they cost nsqd more
than the rest of their delivery.  Connections therefore append frames to
their own output list and register here as having output.  The lists are
written (one joined ``transport.write`` per connection) when the
``dataReceived`` that produced them ends, or, for output made outside any
read (a timer: heartbeats, timeouts, deferred messages), at the next
reactor turn through one ``callLater(0)`` shared by every connection of
the reactor.

Nothing waits longer than it would have with direct writes: Twisted's own
``write`` only buffers until the reactor next polls for writability.
"""

from __future__ import annotations

import weakref
from typing import Any, List, Optional, Protocol

from twisted.internet.interfaces import IDelayedCall, IReactorTime

__all__ = ["FlushScheduler", "HasOutput", "scheduler_for"]


class HasOutput(Protocol):
    """A connection with buffered output."""

    def flush_output(self) -> None:
        """Write everything buffered to the transport."""


class FlushScheduler:
    """
    Flushes the output of connections that have some: at the end of the
    outermost read in progress, else at the next reactor turn.

    :param clock: the reactor whose turns are meant.
    """

    __slots__ = ("_clock", "_pending", "_reading", "_call", "__weakref__")

    def __init__(self, clock: IReactorTime) -> None:
        self._clock = clock
        self._pending: List[HasOutput] = []
        self._reading = 0
        self._call: Optional[IDelayedCall] = None

    def has_output(self, connection: HasOutput) -> None:
        """
        ``connection`` buffered output (call it once until it is flushed:
        the connection keeps its own flag).
        """
        self._pending.append(connection)
        if not self._reading and self._call is None:
            self._call = self._clock.callLater(0, self._turn)

    def reading(self) -> None:
        """A read began: hold the flushes until it ends."""
        self._reading += 1

    def done_reading(self) -> None:
        """A read ended: after the outermost one, flush every connection."""
        self._reading -= 1
        if not self._reading and self._pending:
            self.flush()

    def flush(self) -> None:
        """Flush every connection with output now."""
        call, self._call = self._call, None
        if call is not None and call.active():
            call.cancel()
        pending = self._pending
        while pending:
            self._pending = []
            for connection in pending:
                connection.flush_output()
            pending = self._pending

    def _turn(self) -> None:
        self._call = None
        self.flush()


_schedulers: "weakref.WeakKeyDictionary[Any, FlushScheduler]" = weakref.WeakKeyDictionary()


def scheduler_for(clock: IReactorTime) -> FlushScheduler:
    """The one scheduler of a reactor (or test clock), made on first use."""
    scheduler = _schedulers.get(clock)
    if scheduler is None:
        scheduler = _schedulers[clock] = FlushScheduler(clock)
    return scheduler
