# -*- test-case-name: tests.test_cluster_service -*-
"""
The cluster as a Twisted service inside nsqd: the route listener
(``--cluster-address``), the dialer of ``--routes``, and the NATS bridge.
"""

from __future__ import annotations

import os
from typing import Any, Dict, List, Optional, Tuple

from twisted.application.service import MultiService
from twisted.internet.defer import Deferred, succeed
from twisted.internet.endpoints import TCP4ClientEndpoint, connectProtocol
from twisted.internet.protocol import Factory
from twisted.logger import Logger

from txnsq.addresses import split_host_port
from txnsq.cluster.bridge import NatsBridge
from txnsq.cluster.node import RouteNode
from txnsq.cluster.route import RouteProtocol
from txnsq.nsqd.listener import ListeningService

__all__ = ["ClusterService", "RouteServerFactory", "cluster_tls_options", "route_tls_options"]

#: Seconds a route dial may take.
CONNECT_TIMEOUT = 2.0


class RouteServerFactory(Factory):
    """Accepted route connections, for ``node``."""

    noisy = False

    def __init__(self, node: RouteNode) -> None:
        self.node = node

    def buildProtocol(self, addr: Any) -> RouteProtocol:
        """A route the peer dialed."""
        return self.node.build_protocol(None)


def route_tls_options(cert: str, key: str, ca: str, server: bool) -> Any:
    """
    TLS options for routes: our certificate and key; peers verified
    against ``ca`` when given (both ways: nats-server's ``verify``).

    :raises TLSConfigError: a file cannot be read or used.
    """
    from twisted.internet.ssl import Certificate, CertificateOptions, PrivateCertificate

    from txnsq.nsqd.tls import TLSConfigError

    try:
        with open(cert, "rb") as stream:
            cert_pem = stream.read()
        with open(key, "rb") as stream:
            key_pem = stream.read()
        mine = PrivateCertificate.loadPEM(cert_pem + b"\n" + key_pem)
        kwargs: Dict[str, Any] = {
            "privateKey": mine.privateKey.original,
            "certificate": mine.original,
        }
        if ca:
            with open(ca, "rb") as stream:
                authority = Certificate.loadPEM(stream.read())
            kwargs["verify"] = True
            kwargs["caCerts"] = [authority.original]
            kwargs["requireCertificate"] = server
        return CertificateOptions(**kwargs)
    except TLSConfigError:
        raise
    except Exception as error:
        raise TLSConfigError("cluster TLS: %s" % (error,))


def cluster_tls_options(options: Any) -> Optional[Tuple[Any, Any]]:
    """
    ``(client, server)`` TLS options of ``--cluster-tls-cert/-key/-ca``
    (the files read), or ``None`` when routes are not TLS.

    :raises TLSConfigError: a file cannot be read or used.
    """
    if not options.cluster_tls_cert:
        return None
    cert, key, ca = options.cluster_tls_cert, options.cluster_tls_key, options.cluster_tls_ca
    return route_tls_options(cert, key, ca, False), route_tls_options(cert, key, ca, True)


class ClusterService(MultiService):
    """
    The route layer and the NATS bridge of one nsqd.

    :param broker: nsqd's broker.
    :param options: nsqd's options (the ``--cluster-*``, ``--routes`` and
        ``--nats-*`` flags).
    :param reactor: the reactor.
    :param tls: ``(client, server)`` TLS options for TLS routes
        (:func:`cluster_tls_options` reads them from the flags' files), or
        ``None``.
    :raises ValueError: the options name TLS files and ``tls`` is ``None``.

    :ivar node: the :class:`RouteNode`.
    :ivar bridge: the :class:`NatsBridge`.
    :ivar listener: the route listener, or ``None``.
    """

    _log = Logger()

    def __init__(
        self, broker: Any, options: Any, reactor: Any, tls: Optional[Tuple[Any, Any]] = None
    ) -> None:
        MultiService.__init__(self)
        if tls is None and options.cluster_tls_cert:
            raise ValueError(
                "the options name cluster TLS files: pass tls=cluster_tls_options(options)"
            )
        self.reactor = reactor
        self.options = options
        self.tls_client: Any = None
        tls_server: Any = None
        if tls is not None:
            self.tls_client, tls_server = tls
        self.node = RouteNode(
            reactor,
            options.cluster_name,
            self._connect,
            server_name="txnsq-%s" % (options.broadcast_address,),
            max_payload=options.max_msg_size,
            ping_interval=options.cluster_ping_interval,
            tls=tls_server is not None,
        )
        self.bridge = NatsBridge(
            broker,
            self.node,
            options.nats_subject_prefix,
            options.nats_account,
            options.nats_topics,
        )
        from txnsq.mirror.files import NAMED_TOPICS_FILE, load_node_id
        from txnsq.mirror.journal import CopyJournal
        from txnsq.mirror.mirror import Mirror

        # Copies survive a restart when the storage does.
        journal = (
            CopyJournal(
                options.data_path or ".",
                reactor,
                options.sync_every,
                options.sync_timeout,
            )
            if getattr(broker.storage, "durable", False)
            else None
        )

        #: Mirrored topics (docs/mirroring.md).
        self.mirror = Mirror(
            broker,
            self.node,
            reactor,
            load_node_id(options.data_path),
            options.mirror_topics,
            options.mirror_ack,
            options.mirror_failover_timeout,
            journal=journal,
            named_file=os.path.join(options.data_path or ".", NAMED_TOPICS_FILE),
            min_standbys=options.mirror_min_standbys,
        )
        self.bridge.exclude = self.mirror.mirrored
        self.listener: Optional[ListeningService] = None
        if options.cluster_address:
            from txnsq.listen_address import listen_endpoint_description

            factory: Any = RouteServerFactory(self.node)
            if tls_server is not None:
                from twisted.protocols.tls import TLSMemoryBIOFactory

                # TLS from the first byte, as nats-server's routes.
                factory = TLSMemoryBIOFactory(tls_server, False, factory)
            self.listener = ListeningService(
                "Cluster",
                reactor,
                listen_endpoint_description(options.cluster_address),
                factory,
            )
            self.listener.setServiceParent(self)

    def _connect(self, host: str, port: int, dialer: Any) -> "Deferred[Any]":
        endpoint: Any = TCP4ClientEndpoint(self.reactor, host, port, timeout=CONNECT_TIMEOUT)
        if self.tls_client is not None:
            from twisted.internet.endpoints import wrapClientTLS

            endpoint = wrapClientTLS(self.tls_client, endpoint)
        return connectProtocol(endpoint, self.node.build_protocol(dialer))

    def startService(self) -> None:
        """Listen, then advertise the bound address and dial the routes."""
        MultiService.startService(self)
        self.mirror.start()
        self.bridge.start()
        if self.listener is None:
            self._advertise_and_dial(None)
        else:
            self.listener.whenListening().addCallbacks(
                self._advertise_and_dial, lambda failure: None
            )

    def _advertise_and_dial(self, port: Any) -> None:
        advertise = self.options.cluster_advertise
        if advertise:
            host, number = split_host_port(advertise)
            self.node.set_advertise(host, number)
        elif port is not None:
            address = port.getHost()
            host = address.host
            if host in ("0.0.0.0", "::", ""):
                host = self.options.broadcast_address
            self.node.set_advertise(host, address.port)
        if self.running:
            self.node.start(list(self.options.routes))

    def stopService(self) -> "Deferred[None]":
        """Close the routes and stop listening."""
        self.bridge.stop()
        self.mirror.stop()
        self.node.stop()
        stopped = MultiService.stopService(self)
        return stopped if stopped is not None else succeed(None)  # type: ignore[return-value]

    def listeners(self) -> List[ListeningService]:
        """The route listener, when there is one."""
        return [self.listener] if self.listener is not None else []

    def stats(self) -> Dict[str, Any]:
        """The ``cluster`` section of /stats."""
        found = self.node.stats()
        found["nats_bridge"] = self.bridge.stats()
        found["mirror"] = self.mirror.stats()
        return found
