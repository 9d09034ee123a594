# -*- test-case-name: tests.test_nsqd_service -*-
"""
nsqd as a Twisted service: the broker and its TCP and HTTP listeners, and
what the ``nsqd`` console script (:mod:`txnsq.nsqd.script`) builds from
them.

Any Twisted application can add :class:`NSQDService` to its service tree;
``twistd nsqd`` and the ``nsqd`` console script run the same service.
"""

from __future__ import annotations

import gc
import os
import sys
from typing import TYPE_CHECKING, Any, Dict, List, Optional, Union

from twisted.application.service import MultiService
from twisted.internet.defer import Deferred, maybeDeferred, succeed
from twisted.logger import Logger

from txnsq.cli import version_string
from txnsq.speedups import hot_path
from txnsq.http.site import GoSite
from txnsq.nsqd.broker import Broker
from txnsq.nsqd.http import NSQDHTTPAPI
from txnsq.nsqd.listener import ListeningService, ListenTarget, listen_target, when_all_listening
from txnsq.nsqd.lookup import LookupService
from txnsq.logging import set_log_level
from txnsq.nsqd.memstats import watch_gc
from txnsq.nsqd.stats import collect, to_json
from txnsq.nsqd.data_path_lock import DataPathError, DataPathLock
from txnsq.nsqd.metadata import MetadataStore
from txnsq.nsqd.metadata_format import MetadataError
from txnsq.nsqd.options import NSQDOptions
from txnsq.nsqd.tcp import NSQDFactory, ServerFeatures
from txnsq.nsqd.tls import TLSConfigError, tls_server_options
from txnsq.reactors import ServiceReactor, default_reactor
from txnsq.storage.interfaces import IStorageBackend
from txnsq.storage.plugins import get_storage_backend

if TYPE_CHECKING:
    from txnsq.nsqd.statsd import StatsdService

__all__ = ["NSQDService"]


#: How long a clean shutdown waits at most for the FINs of in-flight
#: messages (it goes on as soon as none is in flight).
SHUTDOWN_GRACE = 2.0


class NSQDService(MultiService):
    """
    One nsqd: a broker plus its TCP and HTTP listeners, and an HTTPS
    listener serving the same API when ``--tls-cert`` and ``--tls-key`` are
    given (and ``--https-address`` is not empty), and a MetaQ listener
    over the retained topics when ``--metaq-address`` is given.

    The constructor does no I/O: it builds the broker, the protocols and
    the listeners (which listen once started).  The data path is locked
    and ``nsqd.dat`` read in :meth:`privilegedStartService` (or
    :meth:`startService`, or earlier with :meth:`open_data`); the TLS
    files are read by :meth:`fromOptions`, the flag path's constructor.

    :param options: the daemon's settings (``NSQDOptions``).
    :param reactor: the reactor to listen with and take time from
        (``IReactorTCP`` and ``IReactorTime``:
        :class:`ServiceReactor <txnsq.reactors.ServiceReactor>`); the global reactor when
        omitted.
    :param storage: the storage backend, an ``IStorageBackend`` or the
        name of one; ``options.storage`` when omitted.
    :param tls: the server TLS settings (an object with ``getContext()``,
        such as ``twisted.internet.ssl.CertificateOptions``) for the
        ``tls_v1`` upgrade, HTTPS and ``--tls-required``; ``None`` for none.
    :param cluster_tls: ``(client, server)`` TLS settings of NATS routes
        (``txnsq.cluster.service.cluster_tls_options``); ``None`` for none.
    :param tcp_endpoint: where the V2 protocol listens: an
        ``IStreamServerEndpoint``, or a listen address string (Go's
        ``host:port``, a socket path, an endpoint description);
        ``options.tcp_address`` when omitted.
    :param http_endpoint: the same for the HTTP API
        (``options.http_address``).
    :param https_endpoint: the same for HTTPS (``options.https_address``),
        served only with ``tls``.
    :param metaq_endpoint: the same for the MetaQ listener over the
        retained topics (``options.metaq_address``; none when both are
        unset).
    :raises ValueError: ``options`` name TLS files but no ``tls`` was
        given (use :meth:`fromOptions`), an unknown storage name, or a
        listen address string that cannot be read.
    """

    _log = Logger()

    #: Seconds a clean shutdown waits, once it stopped delivering, for
    #: consumers to FIN the messages they hold.
    shutdown_grace = SHUTDOWN_GRACE

    @classmethod
    def fromOptions(
        cls,
        options: NSQDOptions,
        reactor: Optional[ServiceReactor] = None,
        storage: Optional[Union[str, IStorageBackend]] = None,
        **endpoints: Optional[ListenTarget],
    ) -> "NSQDService":
        """
        The service of ``options`` as the ``nsqd`` command builds it: the
        TLS certificate and key files they name read (Go's
        ``buildTLSConfig``), and those of ``--cluster-tls-*``.
        ``endpoints`` are the constructor's ``tcp_endpoint``,
        ``http_endpoint``, ``https_endpoint`` and ``metaq_endpoint``.

        :raises TLSConfigError: a TLS certificate or key cannot be used.
        """
        cluster_tls = None
        if options.cluster_tls_cert:
            from txnsq.cluster.service import cluster_tls_options

            cluster_tls = cluster_tls_options(options)
        return cls(
            options,
            reactor,
            storage=storage,
            tls=tls_server_options(options),
            cluster_tls=cluster_tls,
            **endpoints,
        )

    def __init__(
        self,
        options: NSQDOptions,
        reactor: Optional[ServiceReactor] = None,
        *,
        storage: Optional[Union[str, IStorageBackend]] = None,
        tls: Optional[Any] = None,
        cluster_tls: Optional[Any] = None,
        tcp_endpoint: Optional[ListenTarget] = None,
        http_endpoint: Optional[ListenTarget] = None,
        https_endpoint: Optional[ListenTarget] = None,
        metaq_endpoint: Optional[ListenTarget] = None,
    ) -> None:
        MultiService.__init__(self)
        if reactor is None:
            reactor = default_reactor()
        if tls is None and (options.tls_cert or options.tls_key):
            raise ValueError(
                "the options name TLS files (--tls-cert, --tls-key): build the "
                "service with NSQDService.fromOptions, which reads them, or pass tls="
            )
        self.options = options
        self.reactor: ServiceReactor = reactor
        # The core's parameters are zope-interface typed (IReactorTime).
        clock: Any = reactor
        self.start_time = reactor.seconds()
        if storage is None:
            storage = options.storage
        if isinstance(storage, str):
            storage = get_storage_backend(storage)
        self.storage: IStorageBackend = storage
        self.broker = Broker(options, clock, storage)
        self._durable = bool(getattr(storage, "durable", False))
        self._lock: Optional[DataPathLock] = None
        self._start_logged = False
        self.metadata: Optional[MetadataStore] = None
        auth = None
        if options.auth_http_address:
            from txnsq.nsqd.auth import AuthClient

            auth = AuthClient(
                list(options.auth_http_address),
                reactor,
                options.http_client_connect_timeout,
                options.http_client_request_timeout,
                options.auth_http_request_method,
            )
        self.tcp_factory = NSQDFactory(
            self.broker, clock, ServerFeatures.from_options(options, tls, auth)
        )
        self.http_api = NSQDHTTPAPI(
            self.broker,
            self.start_time,
            self.bound_ports,
            clients=lambda: self.tcp_factory.clients,
        )
        self.tcp_listener = ListeningService(
            "TCP",
            reactor,
            listen_target(tcp_endpoint if tcp_endpoint is not None else options.tcp_address),
            self.tcp_factory,
        )
        resource = self.http_api.app.resource()
        self.http_listener = ListeningService(
            "HTTP",
            reactor,
            listen_target(http_endpoint if http_endpoint is not None else options.http_address),
            GoSite(resource),
        )
        self.https_listener: Optional[ListeningService] = None
        if https_endpoint is None and options.https_address:
            https_endpoint = options.https_address
        if tls is not None and https_endpoint is not None:
            from twisted.protocols.tls import TLSMemoryBIOFactory

            self.https_listener = ListeningService(
                "HTTPS",
                reactor,
                listen_target(https_endpoint),
                TLSMemoryBIOFactory(tls, False, GoSite(resource)),
            )
        self.metaq_factory: Optional[Any] = None
        self.metaq_listener: Optional[ListeningService] = None
        if metaq_endpoint is None and options.metaq_address:
            metaq_endpoint = options.metaq_address
        if metaq_endpoint is not None:
            self.metaq_listener = self._metaq_listener(options, reactor, tls, auth, listen_target(metaq_endpoint))
        self.tcp_listener.setServiceParent(self)
        self.http_listener.setServiceParent(self)
        if self.https_listener is not None:
            self.https_listener.setServiceParent(self)
        if self.metaq_listener is not None:
            self.metaq_listener.setServiceParent(self)
        self.cluster: Optional[Any] = None
        if options.cluster_address or options.routes:
            from txnsq.cluster.service import ClusterService

            self.cluster = ClusterService(self.broker, options, reactor, cluster_tls)
            self.cluster.setServiceParent(self)
            self.http_api.cluster_stats = self.cluster.stats
            self.http_api.mirror = self.cluster.mirror
        self.http_api.options_changed = self._option_changed
        # Not a child service: it starts once the listeners are bound (the
        # ports it registers are known then), see startService.
        self.lookup = LookupService(self.broker, options, self.bound_ports, reactor)
        self.statsd: Optional["StatsdService"] = None
        if options.statsd_address:
            from txnsq.nsqd.statsd import StatsdService, statsd_prefix

            self.statsd = StatsdService(
                self._statsd_stats,
                options.statsd_address,
                # Completed once the HTTP port is known (see startService).
                statsd_prefix(options.statsd_prefix, options.broadcast_address, 0),
                options.statsd_interval,
                options.statsd_mem_stats,
                options.statsd_udp_packet_size,
                reactor,
                exclude_ephemeral=options.statsd_exclude_ephemeral,
            )
            self.statsd.setServiceParent(self)

    def _metaq_listener(
        self, options: NSQDOptions, reactor: Any, tls: Any, auth: Any, endpoint: ListenTarget
    ) -> ListeningService:
        """
        The MetaQ listener (``--metaq-address``, or ``endpoint``) over the broker's retained
        topics: TLS from the first byte when ``--tls-required`` (MetaQ has
        no upgrade), plain otherwise; auth as on the TCP port.
        """
        from txnsq.metaq.backend import BrokerMetaqBackend
        from txnsq.metaq.server import MetaqFactory
        from txnsq.version import TXNSQ_VERSION

        tls_only = tls is not None and bool(options.tls_required)
        backend = BrokerMetaqBackend(self.broker, "txnsq-%s" % (TXNSQ_VERSION,))
        factory = MetaqFactory(
            backend,
            reactor,
            options.max_msg_size,
            auth=auth,
            tls=tls_only,
            start_time=self.start_time,
            # Puts to mirrored topics wait for the standbys only when asked
            # (--mirror-min-standbys): with 0 they are answered at once.
            mirror_gate=backend.mirror_gate if options.mirror_min_standbys else None,
        )
        self.metaq_factory = factory
        served: Any = factory
        if tls_only:
            from twisted.protocols.tls import TLSMemoryBIOFactory

            served = TLSMemoryBIOFactory(tls, False, factory)
        return ListeningService(
            "MetaQ", reactor, endpoint, served
        )

    def _statsd_stats(self) -> Dict[str, Any]:
        """The snapshot statsd pushes: /stats JSON without clients."""
        return to_json(
            collect(
                self.broker,
                self.tcp_factory.clients,
                self.start_time,
                include_clients=False,
                include_mem=self.options.statsd_mem_stats,
            )
        )

    def _option_changed(self, name: str) -> None:
        """An option was changed at run time (``PUT /config/NAME``)."""
        if name == "log_level":
            set_log_level(self.options.log_level)
        elif name == "nsqlookupd_tcp_addresses":
            self.lookup.set_addresses(list(self.options.lookupd_tcp_address))

    def open_data(self) -> None:
        """
        With a durable storage backend: lock ``--data-path`` and recreate
        the topics and channels of its ``nsqd.dat`` (and their queued
        messages).  :meth:`startService` does it if it was not done; call
        it first to fail early.  Idempotent.

        :raises DataPathError: the data path is locked by another nsqd
            (Go's ``--data-path=... in use``), is missing, or its metadata
            cannot be read or written.
        """
        self._log_start()
        if not self._durable or self._lock is not None:
            return
        data_path = os.path.abspath(self.options.data_path or os.curdir)
        lock = DataPathLock(data_path)
        lock.acquire()
        try:
            store = MetadataStore(self.broker, data_path, self.broker.clock)
            store.load()
            store.persist()
        except (MetadataError, OSError) as error:
            lock.release()
            raise DataPathError(str(error))
        self._lock = lock
        self.metadata = store

    def privilegedStartService(self) -> None:
        """
        Under ``twistd``, before privileges are dropped: log what starts
        and open the data path (the lock, ``nsqd.dat``).

        :raises DataPathError: as :meth:`open_data`.
        """
        self.open_data()
        MultiService.privilegedStartService(self)

    def startService(self) -> None:
        """
        Log what starts, open the data path (unless
        :meth:`privilegedStartService` did), then start listening; once
        listening, register with the nsqlookupds.
        """
        self.open_data()
        watch_gc()
        MultiService.startService(self)
        self.whenListening().addCallback(self._start_lookup).addErrback(lambda failure: None)
        statsd = self.statsd
        if statsd is not None:
            from txnsq.nsqd.statsd import statsd_prefix

            def set_prefix(result: object) -> object:
                port = self.bound_ports().get("HTTP", 0)
                statsd.prefix = statsd_prefix(
                    self.options.statsd_prefix, self.options.broadcast_address, port
                )
                return result

            self.whenListening().addCallback(set_prefix).addErrback(lambda failure: None)

    def _start_lookup(self, result: object) -> None:
        """
        The listeners are bound: start registering with the nsqlookupds.
        Topics restored from the data path exist by now, so only topics
        created by clients from here on look their channels up.
        """
        if self.running and not self.lookup.running:
            self.lookup.startService()

    def _log_start(self) -> None:
        """Log the version, the hot path in use and the node ID, once."""
        if not self._start_logged:
            self._start_logged = True
            self._log.info("{version}", version=version_string("nsqd"))
            self._log.info("hot path: {hot_path}", hot_path=hot_path())
            self._log.info("ID: {node_id}", node_id=self.options.node_id)

    def listeners(self) -> List[ListeningService]:
        """The TCP, HTTP and (when configured) HTTPS and MetaQ listeners."""
        found = [self.tcp_listener, self.http_listener]
        if self.https_listener is not None:
            found.append(self.https_listener)
        if self.metaq_listener is not None:
            found.append(self.metaq_listener)
        if self.cluster is not None:
            found.extend(self.cluster.listeners())
        return found

    def bound_ports(self) -> Dict[str, int]:
        """The ports actually bound, by listener label (``TCP``, ``HTTP``, ``HTTPS``, ``MetaQ``, ``Cluster``)."""
        return {listener.label: listener.bound_port() for listener in self.listeners()}

    def whenListening(self) -> "Deferred[None]":
        """Fires when every listener is up; fails if any could not listen."""
        return when_all_listening(self.listeners())

    def stopService(self) -> "Deferred[None]":
        """
        Stop delivering messages, stop listening and leave the
        nsqlookupds; give consumers up to :attr:`shutdown_grace` seconds
        for the FINs of the messages they hold (those already on their way
        are read); then disconnect every client and close the broker, which
        saves what is queued, in flight and deferred.
        """
        self.broker.stop_delivering()
        left: Deferred[None] = (
            self.lookup.stopService() if self.lookup.running else succeed(None)
        )
        stopped = maybeDeferred(MultiService.stopService, self)
        stopped.addBoth(lambda result: left.addCallback(lambda _: result))

        def drain(result: object) -> object:
            in_flight = self.broker.in_flight_count()
            if in_flight:
                self._log.info(
                    "NSQ: waiting up to {grace}s for the FINs of {count} in-flight messages",
                    grace=self.shutdown_grace,
                    count=in_flight,
                )
            return self.broker.drain(self.shutdown_grace).addCallback(lambda _: result)

        stopped.addBoth(drain)

        def close(result: object) -> object:
            self._log.info("TCP: closing {count} clients", count=len(self.tcp_factory.clients))
            self.tcp_factory.close_all()
            if self.metaq_factory is not None:
                self.metaq_factory.close_all()
            self.broker.close()
            if self.metadata is not None:
                self.metadata.close()
                self.metadata = None
            if self._lock is not None:
                self._lock.release()
                self._lock = None
            return result

        stopped.addBoth(close)
        return stopped


def freeze_startup_objects() -> None:
    """
    Move every object made so far (modules, classes, the service) out of
    the garbage collector's sight: its full collections, which the
    in-flight bookkeeping of a busy channel triggers every few thousand
    messages, then walk only what came later.  Done by the nsqd process
    (console script, twistd), never by a library user's embedding: best of
    five runs of ``bench/micro/hot_path.py --count 100000``, 8.4 -> 6.0 µs of
    CPU per message drained.  PyPy's collector has no such pass, nor
    ``gc.freeze``.
    """
    freeze = getattr(gc, "freeze", None)
    if freeze is not None:
        freeze()


#: Where the console script logs why nsqd cannot start.
_console_log = Logger()


def _console_service(options: NSQDOptions, reactor: Any) -> NSQDService:
    """
    The console script's :class:`NSQDService`, its data directory open.

    :raises SystemExit: 1, after logging Go's message, when the TLS
        settings or the data path cannot be used.
    """
    try:
        service = NSQDService.fromOptions(options, reactor)
    except TLSConfigError as error:
        _console_log.critical(
            "failed to instantiate nsqd - failed to build TLS config - {error}", error=error
        )
        sys.exit(1)
    try:
        service.open_data()
    except DataPathError as error:
        _console_log.critical("failed to instantiate nsqd - {error}", error=error)
        sys.exit(1)
    return service
