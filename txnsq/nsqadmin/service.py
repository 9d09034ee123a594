# -*- test-case-name: tests.test_nsqadmin_service -*-
"""
nsqadmin as a Twisted service, and the ``nsqadmin`` console script.

Any Twisted application can add :class:`NSQAdminService` to its service
tree; ``twistd nsqadmin`` and the ``nsqadmin`` console script run the
same service.  It listens on ``--http-address`` and logs
``HTTP: listening on HOST:PORT`` once bound.
"""

from __future__ import annotations

from typing import Any, Optional, Sequence

from twisted.application.service import MultiService
from twisted.internet.defer import Deferred, maybeDeferred
from twisted.internet.task import LoopingCall
from twisted.logger import Logger

from txnsq import __version__
from txnsq.cli import version_string
from txnsq.daemon import run_console_script
from txnsq.http.site import GoSite
from txnsq.nsqadmin.options import NSQAdminOptions
from txnsq.nsqd.listener import ListeningService, ListenTarget, listen_target
from txnsq.reactors import ServiceReactor, default_reactor

__all__ = ["NSQAdminService", "main"]


class NSQAdminService(MultiService):
    """
    One nsqadmin: its HTTP listener serving the UI and the JSON API.

    The constructor does no I/O: the ``--http-client-tls-*`` files are
    read by :meth:`fromOptions`, the flag path's constructor.

    :param options: the settings (validated by the caller).
    :param reactor: listens, connects to the nodes and gives the time
        (``IReactorTCP`` and ``IReactorTime``:
        :class:`ServiceReactor <txnsq.reactors.ServiceReactor>`); the global reactor when
        omitted.
    :param tls_policy: how the nodes reached over HTTPS are checked, a
        :class:`ClientTLSPolicy <txnsq.nsqadmin.http_client.ClientTLSPolicy>` or any
        ``IPolicyForHTTPS``; one from ``options`` when omitted, which
        must then name no TLS files.
    :param http_endpoint: where the UI and API listen: an
        ``IStreamServerEndpoint``, or a listen address string (Go's
        ``host:port``, a socket path, an endpoint description);
        ``options.http_address`` when omitted.
    :raises ValueError: ``options`` name TLS files but no ``tls_policy``
        was given (use :meth:`fromOptions`), or a listen address string
        that cannot be read.
    :ivar app: the :class:`NSQAdminApp <txnsq.nsqadmin.app.NSQAdminApp>`.
    :ivar sampler: samples the cluster every ``--sample-interval`` for the
        rates and charts (None when it is 0).
    """

    _log = Logger()

    @classmethod
    def fromOptions(
        cls,
        options: NSQAdminOptions,
        reactor: Optional[ServiceReactor] = None,
        *,
        http_endpoint: Optional[ListenTarget] = None,
    ) -> "NSQAdminService":
        """
        The service of ``options`` as the ``nsqadmin`` command builds it:
        the ``--http-client-tls-*`` files read, as Go's ``nsqadmin.New``
        reads them.

        :raises ValueError: a file cannot be read or holds no PEM
            certificate or key (Go's messages).
        """
        from txnsq.nsqadmin.http_client import ClientTLSPolicy

        tls_policy = ClientTLSPolicy(
            options.http_client_tls_root_ca_file,
            options.http_client_tls_cert,
            options.http_client_tls_key,
            options.http_client_tls_insecure_skip_verify,
        )
        return cls(options, reactor, tls_policy=tls_policy, http_endpoint=http_endpoint)

    def __init__(
        self,
        options: NSQAdminOptions,
        reactor: Optional[ServiceReactor] = None,
        *,
        tls_policy: Optional[Any] = None,
        http_endpoint: Optional[ListenTarget] = None,
    ) -> None:
        MultiService.__init__(self)
        if reactor is None:
            reactor = default_reactor()
        from txnsq.nsqadmin.app import NSQAdminApp
        from txnsq.nsqadmin.clusterinfo import ClusterInfo
        from txnsq.http_client import ACCEPT, GoHTTPClient
        from txnsq.nsqadmin.http_client import ClientTLSPolicy, upgrading_to_https
        from txnsq.nsqadmin.notify import Notifier

        self.options = options
        self.reactor: ServiceReactor = reactor
        if tls_policy is None:
            if (
                options.http_client_tls_root_ca_file
                or options.http_client_tls_cert
                or options.http_client_tls_key
            ):
                raise ValueError(
                    "the options name TLS files (--http-client-tls-*): build the "
                    "service with NSQAdminService.fromOptions, which reads them, "
                    "or pass tls_policy="
                )
            tls_policy = ClientTLSPolicy(
                insecure_skip_verify=options.http_client_tls_insecure_skip_verify
            )
        #: nsqadmin's HTTP client: a few idle connections kept per node (the
        #: UI polls the same nodes every few seconds), closed at stop.
        self.http = GoHTTPClient(
            reactor,
            options.http_client_connect_timeout,
            options.http_client_request_timeout,
            tls_policy=tls_policy,
            user_agent=b"nsqadmin/txnsq-" + __version__.encode("ascii"),
            accept=ACCEPT,
            persistent=True,
        )
        request = upgrading_to_https(self.http.request)
        # The parts' clock parameters are zope-interface typed (IReactorTime).
        clock: Any = reactor
        notifier = None
        if options.notification_http_endpoint:
            notifier = Notifier(
                request,
                options.notification_http_endpoint,
                clock,
                options.acl_http_header,
            )
        self.app = NSQAdminApp(options, ClusterInfo(request), clock, notifier)
        self.http_listener = ListeningService(
            "HTTP",
            reactor,
            listen_target(http_endpoint if http_endpoint is not None else options.http_address),
            GoSite(self.app.app.resource()),
        )
        self.http_listener.setServiceParent(self)
        self.sampler: Optional[LoopingCall] = None
        if options.sample_interval > 0:
            self.sampler = LoopingCall(self.app.sample)
            self.sampler.clock = clock

    def startService(self) -> None:
        """Log the version and the nodes asked, then listen."""
        self._log.info("{version}", version=version_string("nsqadmin"))
        if self.options.nsqlookupd_http_addresses:
            self._log.info(
                "using --lookupd-http-address {addresses}",
                addresses=", ".join(self.options.nsqlookupd_http_addresses),
            )
        else:
            self._log.info(
                "using --nsqd-http-address {addresses}",
                addresses=", ".join(self.options.nsqd_http_addresses),
            )
        MultiService.startService(self)
        if self.sampler is not None:
            # A round that outlasts the interval delays the next one
            # rather than overlapping it (LoopingCall waits on its Deferred).
            self.sampler.start(self.options.sample_interval, now=True)

    def bound_port(self) -> int:
        """The HTTP port actually bound (0 until listening)."""
        return self.http_listener.bound_port()

    def whenListening(self) -> "Deferred[Any]":
        """Fires once listening; fails if it could not listen."""
        return self.http_listener.whenListening()

    def stopService(self) -> "Deferred[None]":
        """Stop sampling and listening, and close the idle connections to the nodes."""
        if self.sampler is not None and self.sampler.running:
            self.sampler.stop()
        stopped: Deferred[Any] = maybeDeferred(MultiService.stopService, self)
        closed = stopped.addCallback(lambda _: self.http.close())
        return closed


def main(argv: Optional[Sequence[str]] = None) -> None:
    """The ``nsqadmin`` console script: Go nsqadmin's flags, the same service."""
    from txnsq.nsqadmin.options import parse_nsqadmin_args_or_exit

    run_console_script(
        "nsqadmin", argv, parse_nsqadmin_args_or_exit, NSQAdminService.fromOptions
    )
