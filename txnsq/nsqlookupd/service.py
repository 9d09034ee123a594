# -*- test-case-name: tests.test_nsqlookupd_service -*-
"""
nsqlookupd as a Twisted service: the shared state, its V1 TCP and HTTP
listeners, and the ``nsqlookupd`` console script that runs them.

Any Twisted application can add :class:`NSQLookupdService` to its service
tree; ``twistd nsqlookupd`` and the ``nsqlookupd`` console script run the
same service.
"""

from __future__ import annotations

from typing import Any, Dict, List, Optional, Sequence

from twisted.application.service import MultiService
from twisted.internet.defer import Deferred, maybeDeferred
from twisted.internet.interfaces import IListeningPort
from twisted.logger import Logger

from txnsq.nsqd.listener import (
    ListeningService,
    ListenTarget,
    describe_address,
    listen_target,
    when_all_listening,
)
from txnsq.cli import version_string
from txnsq.daemon import run_console_script
from txnsq.http.site import GoSite
from txnsq.nsqlookupd.core import NSQLookupd
from txnsq.nsqlookupd.options import NSQLookupdOptions
from txnsq.nsqlookupd.tcp import LookupFactory
from txnsq.reactors import ServiceReactor, default_reactor

__all__ = ["NSQLookupdService", "main"]


class NSQLookupdService(MultiService):
    """
    One nsqlookupd: its registration database and its TCP (V1 protocol)
    and HTTP listeners.

    The constructor does no I/O: it builds the database, the protocols and
    the listeners, which listen once started.

    :param options: the daemon's settings.
    :param reactor: the reactor to listen with and take time from
        (``IReactorTCP`` and ``IReactorTime``:
        :class:`ServiceReactor <txnsq.reactors.ServiceReactor>`); the global reactor when
        omitted.
    :param tcp_endpoint: where the V1 protocol listens: an
        ``IStreamServerEndpoint``, or a listen address string (Go's
        ``host:port``, a socket path, an endpoint description);
        ``options.tcp_address`` when omitted.
    :param http_endpoint: the same for the HTTP API (``options.http_address``).
    :raises ValueError: a listen address string that cannot be read.
    :ivar lookupd: the shared state both protocols work on; its
        ``tcp_port`` and ``http_port`` are the bound ports once listening.
    """

    _log = Logger()

    @classmethod
    def fromOptions(
        cls,
        options: NSQLookupdOptions,
        reactor: Optional[ServiceReactor] = None,
        **endpoints: Optional[ListenTarget],
    ) -> "NSQLookupdService":
        """
        The service of ``options`` as the ``nsqlookupd`` command builds it
        (nsqlookupd has no files to read: the constructor's own work);
        ``endpoints`` are the constructor's ``tcp_endpoint`` and
        ``http_endpoint``.
        """
        return cls(options, reactor, **endpoints)

    def __init__(
        self,
        options: NSQLookupdOptions,
        reactor: Optional[ServiceReactor] = None,
        *,
        tcp_endpoint: Optional[ListenTarget] = None,
        http_endpoint: Optional[ListenTarget] = None,
    ) -> None:
        MultiService.__init__(self)
        if reactor is None:
            reactor = default_reactor()
        # Imported here: the HTTP API is a separate module with its own
        # dependencies (Klein), and the TCP side must not need them to load.
        from txnsq.nsqlookupd.http import http_resource

        self.options = options
        self.reactor: ServiceReactor = reactor
        self.lookupd = NSQLookupd(options, reactor)
        self.tcp_factory = LookupFactory(self.lookupd)
        self.tcp_listener = ListeningService(
            "TCP",
            reactor,
            listen_target(tcp_endpoint if tcp_endpoint is not None else options.tcp_address),
            self.tcp_factory,
        )
        # Go's nsqlookupd logs API requests itself; the site keeps no access
        # log and answers non-HTTP bytes as Go's net/http does.
        self.http_listener = ListeningService(
            "HTTP",
            reactor,
            listen_target(http_endpoint if http_endpoint is not None else options.http_address),
            GoSite(http_resource(self.lookupd)),
        )
        self.tcp_listener.setServiceParent(self)
        self.http_listener.setServiceParent(self)
        self._start_logged = False

    def startService(self) -> None:
        """Log the version, then listen; the bound ports go to :attr:`lookupd`."""
        if not self._start_logged:
            self._start_logged = True
            self._log.info("{version}", version=version_string("nsqlookupd"))
        MultiService.startService(self)

        def tcp_bound(port: IListeningPort) -> IListeningPort:
            self.lookupd.tcp_port = self.tcp_listener.bound_port()
            return port

        def http_bound(port: IListeningPort) -> IListeningPort:
            self.lookupd.http_port = self.http_listener.bound_port()
            return port

        # whenListening reports failures to whoever asks; these only record.
        self.tcp_listener.whenListening().addCallbacks(tcp_bound, lambda failure: None)
        self.http_listener.whenListening().addCallbacks(http_bound, lambda failure: None)

    def listeners(self) -> List[ListeningService]:
        """The TCP and HTTP listeners."""
        return [self.tcp_listener, self.http_listener]

    def bound_ports(self) -> Dict[str, int]:
        """The ports actually bound, by listener label (``TCP``, ``HTTP``)."""
        return {listener.label: listener.bound_port() for listener in self.listeners()}

    def whenListening(self) -> "Deferred[None]":
        """Fires when both listeners are up; fails if either could not listen."""
        return when_all_listening(self.listeners())

    def stopService(self) -> "Deferred[None]":
        """Stop listening and disconnect every producer (they unregister)."""
        for listener in self.listeners():
            port = listener.port
            if port is not None:
                self._log.info(
                    "{label}: closing {where}",
                    label=listener.label,
                    where=describe_address(port.getHost()),
                )
        stopped = maybeDeferred(MultiService.stopService, self)

        def close(result: object) -> object:
            self.tcp_factory.close_all()
            self.lookupd.tcp_port = self.lookupd.http_port = 0
            return result

        stopped.addBoth(close)
        return stopped


def main(argv: Optional[Sequence[str]] = None) -> None:
    """The ``nsqlookupd`` console script: Go nsqlookupd's flags, the same service."""
    from txnsq.nsqlookupd.options import parse_nsqlookupd_args_or_exit

    run_console_script(
        "nsqlookupd", argv, parse_nsqlookupd_args_or_exit, NSQLookupdService.fromOptions
    )
