"""
The reactor the daemons' services are given, as a type: what
``IReactorTime`` and ``IReactorTCP`` promise, as a structural
``typing.Protocol`` (a zope interface cannot be intersected in a type).
Twisted's reactors, ``twisted.internet.task.Clock``-based test
reactors such as ``twisted.internet.testing.MemoryReactorClock``,
and any object with these methods fit.
"""

from __future__ import annotations

from typing import Any, Callable, Optional, Protocol, Sequence, Tuple, cast, runtime_checkable

from twisted.internet.interfaces import IDelayedCall

__all__ = ["ServiceReactor", "default_reactor"]


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
