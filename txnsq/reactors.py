# -*- test-case-name: tests.test_reactors -*-
"""
The reactor the daemons' services are given, as a type: what
``IReactorTime`` and ``IReactorTCP`` promise, as a structural
``typing.Protocol`` (a zope interface cannot be intersected in a type).
Twisted's reactors, ``twisted.internet.task.Clock``-based test
reactors such as ``twisted.internet.testing.MemoryReactorClock``,
and any object with these methods fit.

And the clock the daemons' processes give their reactor
(:func:`install_steady_clock`): Twisted's reactors take time from the
wall clock (``time.time``), so a step of the system clock (an NTP step,
``date -s``) holds every timer already scheduled for the length of a
backward step and fires them all at once after a forward one.  A
:class:`SteadyClock` reads the wall clock once, at its start, and counts
on from there with ``time.monotonic``, which never steps.
"""

from __future__ import annotations

import time
from typing import Any, Callable, Optional, Protocol, Sequence, Tuple, cast, runtime_checkable

from twisted.internet.interfaces import IDelayedCall

__all__ = ["ServiceReactor", "SteadyClock", "default_reactor", "install_steady_clock"]


@runtime_checkable
class ServiceReactor(Protocol):
    """
    ``IReactorTime`` and ``IReactorTCP``: what every daemon service uses.
    ``isinstance(reactor, ServiceReactor)`` checks the methods are there.
    """

    def seconds(self) -> float:
        """The current time, in seconds (``IReactorTime.seconds``)."""

    def callLater(
        self, delay: float, callable: Callable[..., Any], /, *args: Any, **kwargs: Any
    ) -> IDelayedCall:
        """Call ``callable`` after ``delay`` seconds (``IReactorTime.callLater``)."""

    def getDelayedCalls(self) -> Sequence[IDelayedCall]:
        """The calls still scheduled (``IReactorTime.getDelayedCalls``)."""

    def listenTCP(self, port: int, factory: Any, backlog: int = ..., interface: str = ...) -> Any:
        """Listen on a TCP port (``IReactorTCP.listenTCP``)."""

    def connectTCP(
        self,
        host: str,
        port: int,
        factory: Any,
        timeout: float = ...,
        bindAddress: Optional[Tuple[str, int]] = ...,
    ) -> Any:
        """Connect to a TCP address (``IReactorTCP.connectTCP``)."""


def default_reactor() -> ServiceReactor:
    """The global reactor, for a service given none (imported only then)."""
    from twisted.internet import reactor

    return cast(ServiceReactor, reactor)


class SteadyClock:
    """
    Seconds since the epoch that never step: the wall clock's time when
    the clock was made plus the monotonic time elapsed since.

    Durations and timers measured on it are immune to steps of the wall
    clock; the times it gives follow the wall clock's rate (NTP slews
    ``CLOCK_MONOTONIC`` as it slews the wall clock) but not its steps: a
    step taken while the clock runs shows up only in a clock made after
    it (the daemon's next start).

    :param wall: the wall clock (``time.time``).
    :param monotonic: the monotonic clock (``time.monotonic``).
    """

    def __init__(
        self,
        wall: Callable[[], float] = time.time,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self.offset = wall() - monotonic()
        self._monotonic = monotonic

    def seconds(self) -> float:
        """The time, in seconds since the epoch (``IReactorTime.seconds``)."""
        return self.offset + self._monotonic()


def install_steady_clock(
    reactor: Any,
    wall: Callable[[], float] = time.time,
    monotonic: Callable[[], float] = time.monotonic,
) -> SteadyClock:
    """
    Make ``reactor`` take its time from a :class:`SteadyClock`: its
    ``seconds()``, with which it schedules and runs every ``callLater``,
    becomes the clock's.  A reactor that already has one keeps it.

    Call it before anything is scheduled: a call scheduled earlier still
    runs on time, but only the steady clock's own calls are immune to a
    step.  The daemons' console scripts and ``twistd`` plugins call it on
    the global reactor; an application embedding a daemon's service
    calls it on its own reactor, or leaves its reactor as it is.

    :param reactor: a Twisted reactor (``ReactorBase``) or any object
        whose ``seconds`` attribute its timers read.
    :return: the clock ``reactor`` now runs on.
    """
    current = getattr(reactor, "seconds", None)
    owner = getattr(current, "__self__", None)
    if isinstance(owner, SteadyClock):
        return owner
    clock = SteadyClock(wall, monotonic)
    reactor.seconds = clock.seconds
    return clock
