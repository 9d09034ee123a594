"""
Throw-away TLS files for the interop tests: a CA and a server certificate
for ``127.0.0.1`` (an IP subjectAltName, so clients that check the host name
accept it) signed by that CA, written as PEM files to a directory.
"""

from __future__ import annotations

import datetime
import ipaddress
import os
from typing import NamedTuple

__all__ = ["TLSFiles", "write_tls_files"]


class TLSFiles(NamedTuple):
    """Paths of the PEM files :func:`write_tls_files` wrote."""

    ca_cert: str
    server_cert: str
    server_key: str


def write_tls_files(directory: str, host: str = "127.0.0.1") -> TLSFiles:
    """
    Write ``ca.pem``, ``server.pem`` and ``server.key`` (unencrypted,
    PKCS#8) to ``directory`` (created if missing).

    The keys are P-256 (fast to make); the certificates are valid from a
    day ago for a week.

    :raises ImportError: ``cryptography`` is not installed.
    """
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

    os.makedirs(directory, exist_ok=True)
    now = datetime.datetime.now(datetime.timezone.utc)
    not_before = now - datetime.timedelta(days=1)
    not_after = now + datetime.timedelta(days=7)

    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "txnsq interop test CA")])
    ca_cert = (
        x509.CertificateBuilder()
        .subject_name(ca_name)
        .issuer_name(ca_name)
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(not_before)
        .not_valid_after(not_after)
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True, content_commitment=False, key_encipherment=False,
                data_encipherment=False, key_agreement=False, key_cert_sign=True,
                crl_sign=True, encipher_only=False, decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key()), critical=False)
        .sign(ca_key, hashes.SHA256())
    )

    key = ec.generate_private_key(ec.SECP256R1())
    try:
        alt_name: x509.GeneralName = x509.IPAddress(ipaddress.ip_address(host))
    except ValueError:
        alt_name = x509.DNSName(host)
    cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, host)]))
        .issuer_name(ca_name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(not_before)
        .not_valid_after(not_after)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True, content_commitment=False, key_encipherment=False,
                data_encipherment=False, key_agreement=False, key_cert_sign=False,
                crl_sign=False, encipher_only=False, decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .add_extension(x509.SubjectAlternativeName([alt_name]), critical=False)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), critical=False
        )
        .sign(ca_key, hashes.SHA256())
    )

    files = TLSFiles(
        os.path.join(directory, "ca.pem"),
        os.path.join(directory, "server.pem"),
        os.path.join(directory, "server.key"),
    )
    with open(files.ca_cert, "wb") as stream:
        stream.write(ca_cert.public_bytes(serialization.Encoding.PEM))
    with open(files.server_cert, "wb") as stream:
        stream.write(cert.public_bytes(serialization.Encoding.PEM))
    with open(files.server_key, "wb") as stream:
        stream.write(
            key.private_bytes(
                serialization.Encoding.PEM,
                serialization.PrivateFormat.PKCS8,
                serialization.NoEncryption(),
            )
        )
    return files
