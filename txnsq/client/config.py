# -*- test-case-name: tests.test_client_connection -*-
"""
A client connection's settings: :class:`ConnectionConfig`, go-nsq's
``Config`` by another name, and the IDENTIFY body it makes.
"""

from __future__ import annotations

import socket
from dataclasses import dataclass, field
from typing import Any, Dict, Optional, Union

from txnsq import __version__

__all__ = ["ConnectionConfig"]


def _short_hostname() -> str:
    return socket.gethostname().split(".")[0]


def _ms(seconds: float) -> int:
    """Seconds as the milliseconds IDENTIFY carries; negative means -1 (off)."""
    if seconds < 0:
        return -1
    return int(round(seconds * 1000))


@dataclass
class ConnectionConfig:
    """
    A connection's settings, go-nsq's ``Config`` by another name (durations
    in seconds).

    :ivar client_id: shown by nsqd and nsqadmin (default: the short host name).
    :ivar hostname: shown by nsqd and nsqadmin (default: the host name).
    :ivar user_agent: ``txnsq/<version>`` by default.
    :ivar heartbeat_interval: seconds between nsqd's heartbeats; negative
        disables them (and then the read deadline once connected).
    :ivar read_timeout: a connection that receives nothing for this long is
        dropped (nsqd's heartbeats keep a healthy one alive); 0 disables.
    :ivar write_timeout: kept for go-nsq parity; Twisted's writes never
        block, so it bounds nothing.
    :ivar output_buffer_size: bytes nsqd buffers for this client (-1: none).
    :ivar output_buffer_timeout: seconds nsqd may hold buffered output
        (-1: no timeout).
    :ivar tls_v1: ask for TLS.
    :ivar tls_options: Twisted client TLS settings for ``startTLS`` (e.g.
        ``optionsForClientTLS(...)``); by default the system's roots and the
        address's host name.
    :ivar snappy: ask for snappy compression.
    :ivar deflate: ask for deflate compression, at ``deflate_level`` (1-9).
    :ivar sample_rate: deliver only this percentage of messages (0: all).
    :ivar msg_timeout: nsqd's in-flight timeout for this client's messages
        (``None``: nsqd's default).
    :ivar auth_secret: sent with AUTH when nsqd requires it.
    :ivar feature_negotiation: ask nsqd for its JSON IDENTIFY reply; without
        it no upgrade can be negotiated.
    :ivar dial_timeout: seconds the TCP connection may take.
    :ivar default_requeue_delay: a requeue without a delay waits this much
        per attempt (go-nsq's linear delay) ...
    :ivar max_requeue_delay: ... but no more than this.
    :ivar close_timeout: how long :meth:`NSQConnection.close` waits for
        answers to commands already sent (and for CLOSE_WAIT), and how long
        a TLS connection waits for the server's close_notify.
    :ivar max_frame_size: refuse frames larger than this (``None``: no
        limit; nsqd's ``--max-msg-size`` bounds them already).
    """

    client_id: str = field(default_factory=_short_hostname)
    hostname: str = field(default_factory=socket.gethostname)
    user_agent: str = "txnsq/" + __version__
    heartbeat_interval: float = 30.0
    read_timeout: float = 60.0
    write_timeout: float = 1.0
    output_buffer_size: int = 16384
    output_buffer_timeout: float = 0.25
    tls_v1: bool = False
    tls_options: Any = None
    snappy: bool = False
    deflate: bool = False
    deflate_level: int = 6
    sample_rate: int = 0
    msg_timeout: Optional[float] = None
    auth_secret: Optional[Union[bytes, str]] = None
    feature_negotiation: bool = True
    dial_timeout: float = 1.0
    default_requeue_delay: float = 90.0
    max_requeue_delay: float = 15 * 60.0
    close_timeout: float = 1.0
    max_frame_size: Optional[int] = None

    def __post_init__(self) -> None:
        """
        :raises ValueError: snappy and deflate both, a deflate level outside
            1-9, a sample rate outside 0-99, or heartbeats not more frequent
            than the read deadline (the connection would time out).
        """
        if self.snappy and self.deflate:
            raise ValueError("snappy and deflate are mutually exclusive")
        if not 1 <= self.deflate_level <= 9:
            raise ValueError("deflate_level must be 1 to 9, not %r" % (self.deflate_level,))
        if not 0 <= self.sample_rate <= 99:
            raise ValueError("sample_rate must be 0 to 99, not %r" % (self.sample_rate,))
        if 0 < self.read_timeout <= self.heartbeat_interval:
            raise ValueError(
                "heartbeat_interval (%gs) must be less than read_timeout (%gs)"
                % (self.heartbeat_interval, self.read_timeout)
            )

    def identify_body(self) -> Dict[str, Any]:
        """The IDENTIFY JSON for these settings (durations in milliseconds)."""
        return {
            "client_id": self.client_id,
            "hostname": self.hostname,
            "user_agent": self.user_agent,
            "feature_negotiation": self.feature_negotiation,
            "heartbeat_interval": _ms(self.heartbeat_interval),
            "output_buffer_size": self.output_buffer_size,
            "output_buffer_timeout": _ms(self.output_buffer_timeout),
            "tls_v1": self.tls_v1,
            "snappy": self.snappy,
            "deflate": self.deflate,
            "deflate_level": self.deflate_level,
            "sample_rate": self.sample_rate,
            # 0 asks for nsqd's default.
            "msg_timeout": 0 if self.msg_timeout is None else _ms(self.msg_timeout),
        }

    def requeue_delay(self, attempts: int) -> float:
        """go-nsq's delay for a requeue without one: linear in the attempts, capped."""
        return min(self.default_requeue_delay * attempts, self.max_requeue_delay)
