"""
Sans-IO codecs for NSQ's wire protocols: V2 commands and frames, the message
wire format, name validation, IDENTIFY negotiation and error codes.

Nothing in this package imports Twisted; the server, the client, the fuzzers
and the benchmarks share it.

- :mod:`txnsq.protocol.errors`: ``ProtocolError`` (E_* codes, Go's texts),
  ``LineTooLong``, ``go_quote`` (Go's ``%q``)
- :mod:`txnsq.protocol.names`: topic and channel name rules
- :mod:`txnsq.protocol.frames`: V2 frames, ``FrameParser`` (client side)
- :mod:`txnsq.protocol.message`: the message payload
- :mod:`txnsq.protocol.v2`: ``V2CommandParser`` (server side) and the
  line-command parameter parsers
- :mod:`txnsq.protocol.identify`: IDENTIFY negotiation and replies
- :mod:`txnsq.protocol.handshake`: the connection handshake (magic,
  IDENTIFY, TLS, snappy/deflate, AUTH) as state machines, nsqd's side and
  a client's
- :mod:`txnsq.protocol.metaq`: the MetaQ text protocol's requests, replies
  and codes; :mod:`txnsq.protocol.metaq_parser` its parsers (both sides);
  :mod:`txnsq.protocol.metaq_record` MetaQ's message record layout
- :mod:`txnsq.protocol.nats_route`: the NATS cluster (route) protocol

Public API: the MetaQ codec, for clients of one's own: the submodules
:mod:`txnsq.protocol.metaq` and :mod:`txnsq.protocol.metaq_record`.
Every other submodule is private, shared by txnsq's own servers, clients,
fuzzers and benchmarks.
"""

__all__: list = []
