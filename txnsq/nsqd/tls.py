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


#: The TLS 1.0-1.2 cipher suites Go's nsqd names in stats, by OpenSSL's name.
#: TLS 1.3 suites already carry their IANA names in OpenSSL.
_IANA_CIPHER_SUITES = {
    "RC4-SHA": "TLS_RSA_WITH_RC4_128_SHA",
    "DES-CBC3-SHA": "TLS_RSA_WITH_3DES_EDE_CBC_SHA",
    "AES128-SHA": "TLS_RSA_WITH_AES_128_CBC_SHA",
    "AES256-SHA": "TLS_RSA_WITH_AES_256_CBC_SHA",
    "AES128-SHA256": "TLS_RSA_WITH_AES_128_CBC_SHA256",
    "AES128-GCM-SHA256": "TLS_RSA_WITH_AES_128_GCM_SHA256",
    "AES256-GCM-SHA384": "TLS_RSA_WITH_AES_256_GCM_SHA384",
    "ECDHE-ECDSA-RC4-SHA": "TLS_ECDHE_ECDSA_WITH_RC4_128_SHA",
    "ECDHE-ECDSA-AES128-SHA": "TLS_ECDHE_ECDSA_WITH_AES_128_CBC_SHA",
    "ECDHE-ECDSA-AES256-SHA": "TLS_ECDHE_ECDSA_WITH_AES_256_CBC_SHA",
    "ECDHE-RSA-RC4-SHA": "TLS_ECDHE_RSA_WITH_RC4_128_SHA",
    "ECDHE-RSA-DES-CBC3-SHA": "TLS_ECDHE_RSA_WITH_3DES_EDE_CBC_SHA",
    "ECDHE-RSA-AES128-SHA": "TLS_ECDHE_RSA_WITH_AES_128_CBC_SHA",
    "ECDHE-RSA-AES256-SHA": "TLS_ECDHE_RSA_WITH_AES_256_CBC_SHA",
    "ECDHE-ECDSA-AES128-SHA256": "TLS_ECDHE_ECDSA_WITH_AES_128_CBC_SHA256",
    "ECDHE-RSA-AES128-SHA256": "TLS_ECDHE_RSA_WITH_AES_128_CBC_SHA256",
    "ECDHE-RSA-AES128-GCM-SHA256": "TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256",
    "ECDHE-ECDSA-AES128-GCM-SHA256": "TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256",
    "ECDHE-RSA-AES256-GCM-SHA384": "TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384",
    "ECDHE-ECDSA-AES256-GCM-SHA384": "TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384",
    "ECDHE-RSA-CHACHA20-POLY1305": "TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256",
    "ECDHE-ECDSA-CHACHA20-POLY1305": "TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256",
}


def cipher_suite_name(openssl_name: str) -> str:
    """
    The IANA name of a cipher suite, as Go's nsqd reports it in stats
    (``TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256``), from OpenSSL's name
    (``ECDHE-RSA-AES128-GCM-SHA256``); a suite Go does not know keeps
    OpenSSL's name.
    """
    return _IANA_CIPHER_SUITES.get(openssl_name, openssl_name)


def tls_version_name(openssl_name: str) -> str:
    """
    A TLS version in Go's nsqd spelling (``TLS1.2``, ``SSL30``) from
    OpenSSL's (``TLSv1.2``, ``SSLv3``).  Go's nsqd has no name for TLS 1.3
    and reports ``Unknown 772``; txnsq says ``TLS1.3``.
    """
    if openssl_name == "SSLv3":
        return "SSL30"
    if openssl_name == "TLSv1":
        return "TLS1.0"
    return openssl_name.replace("TLSv", "TLS")
