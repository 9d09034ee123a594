"""
The states of a client connection (:class:`txnsq.client.connection.NSQConnection`),
in order: a state's number is above those it comes after.
"""

from __future__ import annotations

__all__ = [
    "NEGOTIATING",
    "STATE_AUTH",
    "STATE_CLOSED",
    "STATE_CLOSING",
    "STATE_COMPRESSION",
    "STATE_CONNECTING",
    "STATE_IDENTIFYING",
    "STATE_NAMES",
    "STATE_READY",
    "STATE_TLS",
]

STATE_CONNECTING = 0
STATE_IDENTIFYING = 1
STATE_TLS = 2
STATE_COMPRESSION = 3
STATE_AUTH = 4
STATE_READY = 5
STATE_CLOSING = 6
STATE_CLOSED = 7

STATE_NAMES = {
    STATE_CONNECTING: "connecting",
    STATE_IDENTIFYING: "identifying",
    STATE_TLS: "tls",
    STATE_COMPRESSION: "compression",
    STATE_AUTH: "auth",
    STATE_READY: "ready",
    STATE_CLOSING: "closing",
    STATE_CLOSED: "closed",
}
NEGOTIATING = {name: state for state, name in STATE_NAMES.items() if STATE_IDENTIFYING <= state < STATE_READY}
"""The handshake's states by their name (:attr:`ClientHandshake.state`)."""
