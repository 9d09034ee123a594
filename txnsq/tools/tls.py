# -*- test-case-name: tests.test_tools_config_opts -*-
"""
Client TLS for the tools from go-nsq's ``tls_*`` options.

go-nsq checks each nsqd's certificate against the host of the address it
dialled, with the roots of ``tls_root_ca_file`` (or the system's), shows
the ``tls_cert``/``tls_key`` pair when given, refuses protocol versions
below ``tls_min_version``, and checks nothing with
``tls_insecure_skip_verify``.  :class:`ToolClientTLS` does the same as one
``IOpenSSLClientConnectionCreator`` given to
:class:`txnsq.client.ConnectionConfig`: the host is read from the
connection being upgraded.
"""

from __future__ import annotations

from typing import Any, Dict, Optional

from OpenSSL import SSL
from twisted.internet import ssl
from twisted.internet.interfaces import IOpenSSLClientConnectionCreator
from zope.interface import implementer

from txnsq.tools.config_opts import TLSSettings

__all__ = ["ToolClientTLS", "client_tls_options"]

_VERSIONS = {
    "ssl3.0": ssl.TLSVersion.SSLv3,
    "tls1.0": ssl.TLSVersion.TLSv1_0,
    "tls1.1": ssl.TLSVersion.TLSv1_1,
    "tls1.2": ssl.TLSVersion.TLSv1_2,
    "tls1.3": ssl.TLSVersion.TLSv1_3,
}


def _read(path: str) -> bytes:
    with open(path, "rb") as handle:
        return handle.read()


def _host_of(address: str) -> str:
    host, _, _ = address.rpartition(":")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    return host or address


@implementer(IOpenSSLClientConnectionCreator)
class ToolClientTLS:
    """
    Per-connection client TLS from :class:`TLSSettings`.

    :raises OSError: a certificate or key file cannot be read.
    :raises OpenSSL.crypto.Error: a file holds no valid PEM.
    """

    def __init__(self, settings: TLSSettings) -> None:
        self.settings = settings
        extra: Dict[str, Any] = {}
        if settings.min_version:
            extra["raiseMinimumTo"] = _VERSIONS[settings.min_version]
        self._extra = extra
        self._trust: Any = None
        if settings.root_ca_file:
            self._trust = ssl.trustRootFromCertificates(
                [ssl.Certificate.loadPEM(_read(settings.root_ca_file))]
            )
        self._client_cert: Optional[ssl.PrivateCertificate] = None
        if settings.cert and settings.key:
            self._client_cert = ssl.PrivateCertificate.loadPEM(
                _read(settings.cert) + b"\n" + _read(settings.key)
            )
        self._by_host: Dict[str, Any] = {}
        self._insecure: Optional[ssl.CertificateOptions] = None
        if settings.insecure_skip_verify:
            kwargs: Dict[str, Any] = dict(extra)
            if self._client_cert is not None:
                kwargs["privateKey"] = self._client_cert.privateKey.original
                kwargs["certificate"] = self._client_cert.original
            self._insecure = ssl.CertificateOptions(verify=False, **kwargs)

    def options_for(self, host: str) -> Any:
        """The verifying connection creator for ``host`` (cached)."""
        options = self._by_host.get(host)
        if options is None:
            options = ssl.optionsForClientTLS(
                host,
                trustRoot=self._trust,
                clientCertificate=self._client_cert,
                extraCertificateOptions=self._extra or None,
            )
            self._by_host[host] = options
        return options

    def clientConnectionForTLS(self, tlsProtocol: Any) -> SSL.Connection:
        """An OpenSSL connection for the nsqd the wrapped connection dialled."""
        if self._insecure is not None:
            connection = SSL.Connection(self._insecure.getContext(), None)
            connection.set_app_data(tlsProtocol)
            connection.set_connect_state()
            return connection
        wrapped = getattr(tlsProtocol, "wrappedProtocol", None)
        address = getattr(wrapped, "address", "") or ""
        if not address:
            peer = tlsProtocol.transport.getPeer()
            address = "%s:%s" % (getattr(peer, "host", ""), getattr(peer, "port", ""))
        return self.options_for(_host_of(address)).clientConnectionForTLS(tlsProtocol)


def client_tls_options(settings: TLSSettings) -> Optional[ToolClientTLS]:
    """A :class:`ToolClientTLS` when any ``tls_*`` option was given, else None."""
    if not settings.configured:
        return None
    return ToolClientTLS(settings)
