"""
The V2 connection handshake as sans-IO state machines, one per side:
magic, IDENTIFY, the TLS upgrade, snappy or deflate compression, AUTH.

Each machine takes bytes or commands and answers with *steps* for its
adapter to carry out, in order (:mod:`txnsq.protocol.handshake.steps`):
send these bytes, start TLS, install this compression codec, the handshake
is over. The adapters (nsqd's Twisted protocol, the Twisted client, the
blocking Spark client) own the sockets, the timers and the auth server's
HTTP query; the order and the rules of the upgrades live here only.

- :mod:`txnsq.protocol.handshake.server`: :class:`ServerHandshake`, nsqd's side
- :mod:`txnsq.protocol.handshake.client`: :class:`ClientHandshake`, a client's side
- :mod:`txnsq.protocol.handshake.steps`: the steps and the codec pairs

Public API: none.  This package is private to txnsq.
"""

from txnsq.protocol.handshake.client import ClientHandshake, HandshakeError
from txnsq.protocol.handshake.server import BadMagic, ServerHandshake
from txnsq.protocol.handshake.steps import Ready, Send, StartCompression, StartTLS, Step

__all__ = [
    "BadMagic",
    "ClientHandshake",
    "HandshakeError",
    "Ready",
    "Send",
    "ServerHandshake",
    "StartCompression",
    "StartTLS",
    "Step",
]
