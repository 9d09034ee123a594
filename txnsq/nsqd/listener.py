# -*- test-case-name: tests.test_nsqd_service -*-
"""
A service that listens on one endpoint and says where, as Go nsqd does.

Test harnesses start nsqd on port 0 and read the real port from the line
``TCP: listening on 127.0.0.1:PORT``, so the line names the bound address,
not the requested one.

Every listener asks the kernel for the largest accept queue it allows
(``net.core.somaxconn``), as Go's net package does: with Twisted's default
of 50, a storm of reconnecting clients after a restart waits for SYN
retransmits (seconds per connection) instead of being accepted at once.
"""

from __future__ import annotations

from typing import Any, List, Optional, Sequence, Union

#: Where Linux says how long an accept queue may be.
SOMAXCONN_PATH = "/proc/sys/net/core/somaxconn"

#: The accept queue asked for where the system does not say (Linux's
#: default somaxconn since 5.4).
DEFAULT_BACKLOG = 4096

#: Endpoint types whose description takes a ``backlog`` argument.
_BACKLOG_TYPES = frozenset(["tcp", "tcp6", "unix", "ssl"])

from twisted.application.service import Service
from twisted.internet.defer import Deferred, DeferredList, succeed
from twisted.internet.endpoints import serverFromString
from twisted.internet.interfaces import IListeningPort, IProtocolFactory, IStreamServerEndpoint
from twisted.logger import Logger
from twisted.python.failure import Failure

from txnsq.listen_address import listen_endpoint_description

#: Where a listener listens: an endpoint, or a string
#: :func:`listen_target` reads (Go's ``host:port``, a socket path or a
#: Twisted endpoint description).
ListenTarget = Union[str, IStreamServerEndpoint]


def listen_target(value: ListenTarget) -> ListenTarget:
    """
    What a :class:`ListeningService` is given for a listen setting: an
    endpoint object as it is; a string as its endpoint description
    (:func:`txnsq.listen_address.listen_endpoint_description`).

    :raises ValueError: a string that is no listen address.
    """
    if isinstance(value, str):
        return listen_endpoint_description(value)
    if not IStreamServerEndpoint.providedBy(value):
        raise TypeError("not an IStreamServerEndpoint or a listen address: %r" % (value,))
    return value


def format_address(host: str, port: int) -> str:
    """Render ``host:port`` the way Go does, bracketing IPv6 hosts."""
    if ":" in host:
        return "[%s]:%d" % (host, port)
    return "%s:%d" % (host, port)


def describe_address(address: object) -> str:
    """
    Where a listening port is, for the log: ``host:port`` as Go renders it,
    or a UNIX socket's path.
    """
    host = getattr(address, "host", None)
    if host is None:
        return str(getattr(address, "name", address))
    return format_address(host, getattr(address, "port", 0))


def system_backlog(path: str = SOMAXCONN_PATH) -> int:
    """
    The accept queue length to ask for: the system's maximum (Linux's
    ``net.core.somaxconn``), or :data:`DEFAULT_BACKLOG` where it cannot be
    read.
    """
    try:
        with open(path, "rb") as handle:
            value = int(handle.read().strip())
    except (OSError, ValueError):
        return DEFAULT_BACKLOG
    return value if value > 0 else DEFAULT_BACKLOG


def _unescaped_parts(description: str) -> List[str]:
    """A description split at its unescaped colons, escapes kept."""
    parts = [""]
    escaped = False
    for char in description:
        if escaped:
            parts[-1] += char
            escaped = False
        elif char == "\\":
            parts[-1] += char
            escaped = True
        elif char == ":":
            parts.append("")
        else:
            parts[-1] += char
    return parts


def with_backlog(description: str, backlog: int) -> str:
    """
    ``description`` asking for an accept queue of ``backlog``, unless it
    names one itself or is of an endpoint type that takes none (a
    plugin's, ``systemd``).
    """
    parts = _unescaped_parts(description)
    if parts[0].lower() not in _BACKLOG_TYPES or description.endswith("\\"):
        return description
    if any(part.startswith("backlog=") for part in parts[1:]):
        return description
    return "%s:backlog=%d" % (description, backlog)


def set_no_delay(transport: object) -> None:
    """
    Turn Nagle's algorithm off on an accepted TCP connection, as Go's net
    package does on every TCP connection: with it on, a frame written right
    after another (a message after a response, the tail of a large reply)
    waits for the peer's delayed ACK, 40 ms on Linux. Nothing for a
    transport that is not TCP (a UNIX socket).
    """
    set_tcp_no_delay = getattr(transport, "setTcpNoDelay", None)
    if set_tcp_no_delay is None:
        return
    try:
        set_tcp_no_delay(True)
    except OSError:
        pass  # not a TCP socket


def when_all_listening(listeners: Sequence["ListeningService"]) -> "Deferred[None]":
    """
    Fires with ``None`` once every listener is up; fails with the first
    listener's failure if any could not listen.
    """
    waits = [listener.whenListening() for listener in listeners]
    done = DeferredList(waits, fireOnOneErrback=True, consumeErrors=True)

    def unwrap(result: object) -> None:
        return None

    def first_failure(failure: Any) -> Any:
        return failure.value.subFailure

    done.addCallbacks(unwrap, first_failure)
    return done  # type: ignore[return-value]


class ListeningService(Service):
    """
    Listen on a server endpoint, or a Twisted endpoint description, while
    running.

    A TCP, TCP6, SSL or UNIX description without a ``backlog`` of its own
    listens with the system's largest accept queue (:func:`system_backlog`);
    an endpoint object listens as it was made.

    :ivar label: what the log line calls this listener (``TCP``, ``HTTP``).
    :ivar description: the endpoint description asked for, or the
        endpoint's ``repr`` (the log says this one); :func:`with_backlog`
        adds the backlog when listening.
    :ivar endpoint: the endpoint object given, or ``None`` for a description.
    """

    _log = Logger()

    def __init__(
        self,
        label: str,
        reactor: object,
        description: ListenTarget,
        factory: IProtocolFactory,
    ) -> None:
        self.label = label
        self.reactor = reactor
        self.endpoint: Optional[IStreamServerEndpoint] = None
        if isinstance(description, str):
            self.description = description
        else:
            self.endpoint = description
            self.description = repr(description)
        self.factory = factory
        self.port: Optional[IListeningPort] = None
        self.failure: Optional[Failure] = None
        self._listening: Optional[Deferred[IListeningPort]] = None
        self._waiters: List[Deferred[IListeningPort]] = []

    def startService(self) -> None:
        """Start listening; the outcome is delivered by :meth:`whenListening`."""
        Service.startService(self)
        endpoint: Any = self.endpoint
        if endpoint is None:
            endpoint = serverFromString(
                self.reactor, with_backlog(self.description, system_backlog())
            )
        self._listening = endpoint.listen(self.factory)
        self._listening.addCallbacks(self._listened, self._failed)

    def _listened(self, port: IListeningPort) -> None:
        self.port = port
        self._log.info(
            "{label}: listening on {where}",
            label=self.label,
            where=describe_address(port.getHost()),
        )
        waiters, self._waiters = self._waiters, []
        for waiter in waiters:
            waiter.callback(port)

    def _failed(self, failure: Failure) -> None:
        self.failure = failure
        self._log.error(
            "{label}: listen ({description}) failed - {error}",
            label=self.label,
            description=self.description,
            error=failure.getErrorMessage(),
        )
        waiters, self._waiters = self._waiters, []
        for waiter in waiters:
            waiter.errback(failure)

    def whenListening(self) -> "Deferred[IListeningPort]":
        """A Deferred that fires with the listening port, or fails."""
        if self.port is not None:
            return succeed(self.port)
        waiter: Deferred[IListeningPort] = Deferred()
        if self.failure is not None:
            waiter.errback(self.failure)
        else:
            self._waiters.append(waiter)
        return waiter

    def bound_port(self) -> int:
        """The bound TCP port number, or 0 when not listening (or not TCP)."""
        if self.port is None:
            return 0
        return int(getattr(self.port.getHost(), "port", 0))

    def stopService(self) -> "Deferred[None]":
        """Stop listening."""
        Service.stopService(self)
        if self._listening is not None and self.port is None:
            self._listening.cancel()
        port, self.port = self.port, None
        if port is None:
            return succeed(None)
        return port.stopListening()  # type: ignore[return-value]
