# -*- test-case-name: tests.test_tcp_upgrades -*-
"""
What an nsqd's TCP listener can negotiate in IDENTIFY beyond its options:
the TLS settings, ``--tls-required``, snappy, deflate and the auth client.
"""

from __future__ import annotations

from typing import Any

from txnsq.protocol.identify import IdentifySettings
from txnsq.protocol.handshake.server import ServerHandshake
from txnsq.version import NSQ_VERSION

__all__ = ["ServerFeatures"]


class ServerFeatures:
    """
    What this nsqd can negotiate in IDENTIFY beyond the options, and what
    it needs to do so.

    :ivar tls_options: the server TLS settings (``getContext()``) for the
        ``tls_v1`` upgrade, or ``None`` when no certificate is configured.
    :ivar tls_required: TCP clients must upgrade to TLS before any command
        but IDENTIFY (``--tls-required`` true or ``tcp-https``).
    :ivar snappy: ``--snappy``: clients may ask for snappy compression.
    :ivar deflate: ``--deflate``: clients may ask for deflate compression.
    :ivar auth: the client of the auth servers (``--auth-http-address``),
        or ``None`` when AUTH is disabled.
    """

    __slots__ = ("tls_options", "tls_required", "snappy", "deflate", "auth")

    def __init__(
        self,
        tls_options: Any = None,
        tls_required: bool = False,
        snappy: bool = False,
        deflate: bool = False,
        auth: Any = None,
    ) -> None:
        self.tls_options = tls_options
        self.tls_required = tls_required
        self.snappy = snappy
        self.deflate = deflate
        self.auth = auth

    @property
    def tls_configured(self) -> bool:
        """A certificate is configured: clients may ask for ``tls_v1``."""
        return self.tls_options is not None

    @property
    def auth_required(self) -> bool:
        """AUTH is enabled (``--auth-http-address`` given)."""
        return self.auth is not None

    @classmethod
    def from_options(cls, options: Any, tls_options: Any = None, auth: Any = None) -> "ServerFeatures":
        """The features of an nsqd with these options."""
        return cls(
            tls_options=tls_options,
            tls_required=bool(options.tls_required) and tls_options is not None,
            snappy=bool(options.snappy),
            deflate=bool(options.deflate),
            auth=auth,
        )

    def handshake(self, options: IdentifySettings) -> ServerHandshake:
        """A new connection's handshake machine, with these features."""
        return ServerHandshake(
            options,
            NSQ_VERSION,
            tls_configured=self.tls_configured,
            tls_required=self.tls_required,
            snappy=self.snappy,
            deflate=self.deflate,
            auth_required=self.auth_required,
        )
