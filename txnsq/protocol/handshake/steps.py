# -*- test-case-name: tests.test_protocol_handshake,tests.test_protocol_handshake_client -*-
"""
What a handshake machine asks its adapter to do, in order.

- :class:`Send`: write these bytes through the compression codec in place
  (none before :class:`StartCompression`);
- :class:`StartTLS`: everything written so far goes out in clear, then the
  TLS handshake starts (Twisted's ``startTLS``, ``ssl``'s ``wrap_socket``);
- :class:`StartCompression`: everything written so far goes out as it is,
  then both directions go through ``encoder`` and ``decoder``;
- :class:`Ready` (client side): the handshake is over; ``rest`` is the
  plain bytes received after it, the first frames of the ready connection.
"""

from __future__ import annotations

from typing import Tuple, Union

from txnsq.protocol.compression import (
    Decoder,
    DeflateDecoder,
    DeflateEncoder,
    Encoder,
    SnappyDecoder,
    SnappyEncoder,
)

__all__ = ["Ready", "Send", "StartCompression", "StartTLS", "Step", "compression_codecs"]


class Send:
    """Write ``data`` (a frame from nsqd, a command from a client)."""

    __slots__ = ("data",)

    def __init__(self, data: bytes) -> None:
        self.data = data

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Send) and other.data == self.data

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return "Send(%r)" % (self.data,)


class StartTLS:
    """Flush what was written, then start TLS on the connection."""

    __slots__ = ()

    def __eq__(self, other: object) -> bool:
        return isinstance(other, StartTLS)

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return "StartTLS()"


class StartCompression:
    """
    Flush what was written, then compress both directions.

    :ivar name: ``"snappy"`` or ``"deflate"``.
    :ivar encoder: compresses what the adapter writes from now on.
    :ivar decoder: decompresses what it reads from now on.
    """

    __slots__ = ("name", "encoder", "decoder")

    def __init__(self, name: str, encoder: Encoder, decoder: Decoder) -> None:
        self.name = name
        self.encoder = encoder
        self.decoder = decoder

    def __eq__(self, other: object) -> bool:
        return isinstance(other, StartCompression) and other.name == self.name

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return "StartCompression(%r)" % (self.name,)


class Ready:
    """The client's handshake is over; ``rest`` is the plain bytes after it."""

    __slots__ = ("rest",)

    def __init__(self, rest: bytes) -> None:
        self.rest = rest

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Ready) and other.rest == self.rest

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return "Ready(%r)" % (self.rest,)


Step = Union[Send, StartTLS, StartCompression, Ready]


def compression_codecs(name: str, deflate_level: int = 6) -> Tuple[Encoder, Decoder]:
    """
    A fresh encoder and decoder for one connection's ``name`` compression
    (``"snappy"`` or ``"deflate"`` at ``deflate_level``).

    :raises ValueError: another name.
    """
    if name == "snappy":
        return SnappyEncoder(), SnappyDecoder()
    if name == "deflate":
        return DeflateEncoder(deflate_level), DeflateDecoder()
    raise ValueError("no compression named %r" % (name,))
