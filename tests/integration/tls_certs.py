"""
Throw-away certificates for the TLS tests, made with ``cryptography``: a
certificate authority, server certificates for ``127.0.0.1`` (an IP
subjectAltName, which Twisted's client checks) and client certificates, as
PEM bytes, PEM files, and the Twisted objects a TLS client is built from.

Keys are P-256, which takes about a millisecond to make (RSA 2048 takes a
hundred); :func:`shared_pki` makes one set per test run.
"""

from __future__ import annotations

import datetime
import ipaddress
import os
from typing import Any, List, NamedTuple, Optional, Sequence, Tuple

__all__ = [
    "CertificateAuthority",
    "Issued",
    "PKI",
    "ServerFiles",
    "client_tls_options",
    "shared_pki",
    "write_server_files",
]

_VALIDITY = datetime.timedelta(days=7)


def _now() -> datetime.datetime:
    return datetime.datetime.now(datetime.timezone.utc)


def _key_usage(cert_sign: bool) -> Any:
    from cryptography import x509

    return x509.KeyUsage(
        digital_signature=True,
        content_commitment=False,
        key_encipherment=False,
        data_encipherment=False,
        key_agreement=False,
        key_cert_sign=cert_sign,
        crl_sign=cert_sign,
        encipher_only=False,
        decipher_only=False,
    )


def _key_pem(key: Any) -> bytes:
    from cryptography.hazmat.primitives import serialization

    return key.private_bytes(  # type: ignore[no-any-return]
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )


def _cert_pem(certificate: Any) -> bytes:
    from cryptography.hazmat.primitives import serialization

    return certificate.public_bytes(serialization.Encoding.PEM)  # type: ignore[no-any-return]


class Issued(NamedTuple):
    """A certificate and its private key, both PEM."""

    cert_pem: bytes
    key_pem: bytes

    def write(self, directory: str, stem: str) -> Tuple[str, str]:
        """
        Write ``<stem>.pem`` and ``<stem>.key`` in ``directory`` (created
        if missing); their paths.
        """
        os.makedirs(directory, exist_ok=True)
        cert_path = os.path.join(directory, stem + ".pem")
        key_path = os.path.join(directory, stem + ".key")
        with open(cert_path, "wb") as stream:
            stream.write(self.cert_pem)
        with open(key_path, "wb") as stream:
            stream.write(self.key_pem)
        return cert_path, key_path

    def private_certificate(self) -> Any:
        """The pair as a Twisted ``PrivateCertificate`` (a TLS client's certificate)."""
        from twisted.internet.ssl import PrivateCertificate

        return PrivateCertificate.loadPEM(self.cert_pem + self.key_pem)

    def certificate(self) -> Any:
        """The certificate as a Twisted ``Certificate``."""
        from twisted.internet.ssl import Certificate

        return Certificate.loadPEM(self.cert_pem)


class CertificateAuthority:
    """
    A self-signed CA that issues server and client certificates.

    :ivar cert_pem: the CA certificate, PEM.
    """

    def __init__(self, name: str = "txnsq test CA") -> None:
        from cryptography import x509
        from cryptography.hazmat.primitives import hashes
        from cryptography.hazmat.primitives.asymmetric import ec
        from cryptography.x509.oid import NameOID

        self._key = ec.generate_private_key(ec.SECP256R1())
        self._name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
        now = _now()
        public = self._key.public_key()
        self._certificate = (
            x509.CertificateBuilder()
            .subject_name(self._name)
            .issuer_name(self._name)
            .public_key(public)
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(days=1))
            .not_valid_after(now + _VALIDITY)
            .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
            .add_extension(_key_usage(cert_sign=True), critical=True)
            .add_extension(x509.SubjectKeyIdentifier.from_public_key(public), critical=False)
            .sign(self._key, hashes.SHA256())
        )
        self.cert_pem = _cert_pem(self._certificate)

    def issue(
        self,
        common_name: str,
        ip_addresses: Sequence[str] = (),
        dns_names: Sequence[str] = (),
        server: bool = False,
        client: bool = False,
    ) -> Issued:
        """
        A leaf certificate signed by this CA.

        :param ip_addresses: IP subjectAltNames (``"127.0.0.1"``).
        :param dns_names: DNS subjectAltNames.
        :param server: usable for TLS server authentication.
        :param client: usable for TLS client authentication.
        """
        from cryptography import x509
        from cryptography.hazmat.primitives import hashes
        from cryptography.hazmat.primitives.asymmetric import ec
        from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

        key = ec.generate_private_key(ec.SECP256R1())
        public = key.public_key()
        now = _now()
        builder = (
            x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)]))
            .issuer_name(self._name)
            .public_key(public)
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(days=1))
            .not_valid_after(now + _VALIDITY)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(_key_usage(cert_sign=False), critical=True)
            .add_extension(x509.SubjectKeyIdentifier.from_public_key(public), critical=False)
            .add_extension(
                x509.AuthorityKeyIdentifier.from_issuer_public_key(self._key.public_key()),
                critical=False,
            )
        )
        usages = []
        if server:
            usages.append(ExtendedKeyUsageOID.SERVER_AUTH)
        if client:
            usages.append(ExtendedKeyUsageOID.CLIENT_AUTH)
        if usages:
            builder = builder.add_extension(x509.ExtendedKeyUsage(usages), critical=False)
        names: List[Any] = [x509.IPAddress(ipaddress.ip_address(ip)) for ip in ip_addresses]
        names += [x509.DNSName(name) for name in dns_names]
        if names:
            builder = builder.add_extension(x509.SubjectAlternativeName(names), critical=False)
        certificate = builder.sign(self._key, hashes.SHA256())
        return Issued(_cert_pem(certificate), _key_pem(key))

    def write(self, directory: str, stem: str = "ca") -> str:
        """Write the CA certificate as ``<stem>.pem`` in ``directory``; its path."""
        os.makedirs(directory, exist_ok=True)
        path = os.path.join(directory, stem + ".pem")
        with open(path, "wb") as stream:
            stream.write(self.cert_pem)
        return path

    def certificate(self) -> Any:
        """The CA certificate as a Twisted ``Certificate`` (a client's trust root)."""
        from twisted.internet.ssl import Certificate

        return Certificate.loadPEM(self.cert_pem)


class PKI(NamedTuple):
    """
    Everything the TLS tests need, from two unrelated CAs.

    :ivar ca: the CA nsqd's certificate comes from, and ``--tls-root-ca-file``.
    :ivar other_ca: a CA nsqd does not trust.
    :ivar server: nsqd's certificate: ``127.0.0.1`` and ``localhost``, by ``ca``.
    :ivar client: a client certificate (CN ``alice``) by ``ca``.
    :ivar stranger: a client certificate (CN ``mallory``) by ``other_ca``.
    """

    ca: CertificateAuthority
    other_ca: CertificateAuthority
    server: Issued
    client: Issued
    stranger: Issued


_shared: Optional[PKI] = None


def shared_pki() -> PKI:
    """The :class:`PKI` of this test run (made on first use)."""
    global _shared
    if _shared is None:
        ca = CertificateAuthority("txnsq test CA")
        other_ca = CertificateAuthority("some other CA")
        _shared = PKI(
            ca=ca,
            other_ca=other_ca,
            server=ca.issue("127.0.0.1", ["127.0.0.1"], ["localhost"], server=True),
            client=ca.issue("alice", client=True),
            stranger=other_ca.issue("mallory", client=True),
        )
    return _shared


class ServerFiles(NamedTuple):
    """Paths for nsqd's ``--tls-cert``, ``--tls-key`` and ``--tls-root-ca-file``."""

    cert: str
    key: str
    ca: str

    def args(self, *extra: str) -> List[str]:
        """``--tls-cert`` and ``--tls-key`` naming these files, then ``extra``."""
        return ["--tls-cert=" + self.cert, "--tls-key=" + self.key] + list(extra)


def write_server_files(directory: str, pki: Optional[PKI] = None) -> ServerFiles:
    """Write the server certificate, its key and the CA certificate to ``directory``."""
    pki = pki or shared_pki()
    cert, key = pki.server.write(directory, "server")
    return ServerFiles(cert, key, pki.ca.write(directory, "ca"))


def client_tls_options(
    trust: Optional[CertificateAuthority] = None,
    client: Optional[Issued] = None,
    hostname: str = "127.0.0.1",
    **extra: Any,
) -> Any:
    """
    A TLS client's settings for ``transport.startTLS``: trust ``trust``
    (the shared CA by default), check the server is ``hostname``, and
    present ``client``'s certificate if given.

    :param extra: ``CertificateOptions`` arguments (``lowerMaximumSecurityTo``).
    """
    from twisted.internet.ssl import optionsForClientTLS

    trust = trust or shared_pki().ca
    maximum = extra.get("lowerMaximumSecurityTo")
    if maximum is not None:
        extra["lowerMaximumSecurityTo"] = _twisted_maximum_argument(maximum)
    return optionsForClientTLS(
        hostname,
        trustRoot=trust.certificate(),
        clientCertificate=client.private_certificate() if client is not None else None,
        extraCertificateOptions=extra or None,
    )


def _twisted_maximum_argument(maximum: Any) -> Any:
    """
    What to pass as ``lowerMaximumSecurityTo`` for connections that go no
    higher than ``maximum``.  Twisted 25.5 (the last release for Python
    3.9, hence PyPy's) also excludes the version it is given, leaving no
    protocol at all for TLS 1.2: there the next version up is passed.
    """
    from OpenSSL import SSL
    from twisted.internet.ssl import CertificateOptions, TLSVersion

    context = CertificateOptions(lowerMaximumSecurityTo=maximum).getContext()
    connection = SSL.Connection(context, None)
    connection.set_connect_state()
    try:
        connection.do_handshake()
    except SSL.WantReadError:
        return maximum
    except SSL.Error:
        pass
    following = {TLSVersion.TLSv1_1: TLSVersion.TLSv1_2, TLSVersion.TLSv1_2: TLSVersion.TLSv1_3}
    return following[maximum]
