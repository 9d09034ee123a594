# -*- test-case-name: tests.integration.test_spark_blocking -*-
"""
How the blocking NSQ client connects (:class:`ClientSettings`) and Go
nsqd's message size defaults.

Apart from :mod:`txnsq.spark.blocking` so that :mod:`txnsq.spark.options`
needs neither the client nor its handshake: the offset mode never opens an
NSQ TCP connection, and Spark starts a new Python process for each
streaming query, which imports the source's modules before its first batch.
"""

from __future__ import annotations

import socket
import ssl
from dataclasses import dataclass
from typing import Any, Dict, Optional

from txnsq import __version__

__all__ = ["DEFAULT_MAX_BODY_SIZE", "DEFAULT_MAX_MSG_SIZE", "ClientSettings"]

#: Go nsqd's ``--max-msg-size`` default (IDENTIFY does not report it).
DEFAULT_MAX_MSG_SIZE = 1024 * 1024
#: Go nsqd's ``--max-body-size`` default (IDENTIFY does not report it).
DEFAULT_MAX_BODY_SIZE = 5 * 1024 * 1024


@dataclass
class ClientSettings:
    """
    How a blocking connection identifies itself and upgrades.

    :ivar tls: ask for TLS (``tls_v1``) and wrap the socket when granted.
    :ivar tls_ca_file: PEM roots to verify nsqd with (default: the system's).
    :ivar tls_cert_file: client certificate (PEM) for nsqd's
        ``--tls-client-auth-policy``.
    :ivar tls_key_file: its key (PEM).
    :ivar tls_server_name: the name to verify (default: the address's host).
    :ivar tls_insecure: skip certificate verification (tests only).
    :ivar auth_secret: sent with AUTH when nsqd requires it.
    :ivar compression: ``"none"``, ``"snappy"`` or ``"deflate"``.
    :ivar msg_timeout: nsqd's in-flight timeout for this client's messages in
        seconds (``None``: nsqd's default).
    :ivar heartbeat_interval: seconds between nsqd's heartbeats.
    :ivar connect_timeout: seconds to connect and finish the handshake.
    :ivar client_id: IDENTIFY's ``client_id``.
    """

    tls: bool = False
    tls_ca_file: Optional[str] = None
    tls_cert_file: Optional[str] = None
    tls_key_file: Optional[str] = None
    tls_server_name: Optional[str] = None
    tls_insecure: bool = False
    auth_secret: Optional[str] = None
    compression: str = "none"
    msg_timeout: Optional[float] = None
    heartbeat_interval: float = 30.0
    connect_timeout: float = 5.0
    client_id: str = "txnsq-spark"

    def identify_body(self) -> Dict[str, Any]:
        """The IDENTIFY JSON for these settings (durations in milliseconds)."""
        return {
            "client_id": self.client_id,
            "hostname": socket.gethostname(),
            "user_agent": "txnsq-spark/" + __version__,
            "feature_negotiation": True,
            "heartbeat_interval": int(self.heartbeat_interval * 1000),
            "tls_v1": self.tls,
            "snappy": self.compression == "snappy",
            "deflate": self.compression == "deflate",
            "deflate_level": 6,
            "msg_timeout": 0 if self.msg_timeout is None else int(self.msg_timeout * 1000),
        }

    def ssl_context(self) -> ssl.SSLContext:
        """The client TLS context these settings describe."""
        context = ssl.create_default_context(cafile=self.tls_ca_file)
        if self.tls_cert_file:
            context.load_cert_chain(self.tls_cert_file, self.tls_key_file)
        if self.tls_insecure:
            context.check_hostname = False
            context.verify_mode = ssl.CERT_NONE
        return context
