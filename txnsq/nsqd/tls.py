# -*- test-case-name: tests.integration.test_http_process -*-
"""
nsqd's server TLS settings from its flags (Go's ``buildTLSConfig``), shared
by the HTTPS listener and the V2 protocol's TLS upgrade.
"""

from __future__ import annotations

import re
from typing import Any, Dict, List

from txnsq.nsqd.options import NSQDOptions

__all__ = ["TLSConfigError", "tls_server_options"]


class TLSConfigError(Exception):
    """The TLS certificate, key or CA file cannot be used (Go: ``failed to build TLS config``)."""


_PEM_CERTIFICATE = re.compile(
    rb"-----BEGIN CERTIFICATE-----.+?-----END CERTIFICATE-----", re.DOTALL
)


def _read(path: str) -> bytes:
    try:
        with open(path, "rb") as stream:
            return stream.read()
    except OSError as error:
        reason = error.strerror or str(error)
        # Go's words: "open /x/cert.pem: no such file or directory".
        raise TLSConfigError("open %s: %s" % (path, reason[:1].lower() + reason[1:]))


def _certificates(path: str) -> List[Any]:
    """Every certificate of a PEM file, in order (pyOpenSSL ``X509`` objects)."""
    from twisted.internet.ssl import Certificate

    blocks = _PEM_CERTIFICATE.findall(_read(path))
    if not blocks:
        raise TLSConfigError("%s: no PEM certificate found" % (path,))
    try:
        return [Certificate.loadPEM(block).original for block in blocks]
    except Exception as error:
        raise TLSConfigError("%s: %s" % (path, error))


def tls_server_options(options: NSQDOptions) -> Any:
    """
    The server TLS settings of ``--tls-cert``/``--tls-key`` (Go's
    ``buildTLSConfig``): the certificate chain of the cert file,
    ``--tls-min-version``, and client certificates per
    ``--tls-client-auth-policy`` (``require``: any certificate;
    ``require-verify``: one signed by ``--tls-root-ca-file``, else by the
    platform's trusted CAs).  ``None`` when no certificate is configured.

    :return: an object with ``getContext()`` for ``TLSMemoryBIOFactory``.
    :raises TLSConfigError: a file is missing or unusable, or the key does
        not match the certificate.
    """
    if not options.tls_cert and not options.tls_key:
        return None
    from OpenSSL import SSL
    from OpenSSL.crypto import FILETYPE_PEM
    from twisted.internet.ssl import (
        CertificateOptions,
        KeyPair,
        TLSVersion,
        platformTrust,
        trustRootFromCertificates,
    )
    from twisted.internet.ssl import Certificate as TwistedCertificate

    chain = _certificates(options.tls_cert)
    key_data = _read(options.tls_key)
    try:
        key = KeyPair.load(key_data, FILETYPE_PEM).original
    except Exception as error:
        raise TLSConfigError("%s: %s" % (options.tls_key, error))
    versions = {
        "ssl3.0": TLSVersion.SSLv3,
        "tls1.0": TLSVersion.TLSv1_0,
        "tls1.1": TLSVersion.TLSv1_1,
        "tls1.2": TLSVersion.TLSv1_2,
        "tls1.3": TLSVersion.TLSv1_3,
    }
    minimum = versions.get(options.tls_min_version.lower(), TLSVersion.TLSv1_0)
    settings: Dict[str, Any] = dict(
        privateKey=key,
        certificate=chain[0],
        extraCertChain=chain[1:],
        insecurelyLowerMinimumTo=minimum,
    )
    if options.tls_min_version.lower() in ("tls1.2", "tls1.3"):
        del settings["insecurelyLowerMinimumTo"]
        settings["raiseMinimumTo"] = minimum
    policy = options.tls_client_auth_policy
    if policy == "require-verify":
        if options.tls_root_ca_file:
            roots = [
                TwistedCertificate(cert) for cert in _certificates(options.tls_root_ca_file)
            ]
            settings["trustRoot"] = trustRootFromCertificates(roots)
        else:
            settings["trustRoot"] = platformTrust()
    try:
        tls = CertificateOptions(**settings)
        context = tls.getContext()
    except Exception as error:
        raise TLSConfigError(str(error) or repr(error))
    if policy == "require":
        # Go's RequireAnyClientCert: a certificate is required, not verified.
        context.set_verify(
            SSL.VERIFY_PEER | SSL.VERIFY_FAIL_IF_NO_PEER_CERT,
            lambda connection, x509, errno, depth, ok: True,
        )
    return tls
