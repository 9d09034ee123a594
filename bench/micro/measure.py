"""
What the in-process benchmarks share: a broker on a ``task.Clock``, V2
connections to it over transports that only keep what is written, and
the client's side of those connections (its commands from txnsq's own
codec, :mod:`txnsq.protocol.v2_client`; a ``FIN`` for every message sent).

No sockets and no reactor: what these benchmarks time is txnsq's own CPU
per operation, with ``time.process_time``.
"""

from __future__ import annotations

import struct
from typing import Any, List, Tuple

from twisted.internet.address import IPv4Address
from twisted.internet.task import Clock

from txnsq.nsqd.broker import Broker
from txnsq.nsqd.options import NSQDOptions
from txnsq.nsqd.tcp import NSQDFactory, NSQDProtocol
from txnsq.protocol.frames import FRAME_TYPE_MESSAGE
from txnsq.protocol.v2_client import MAGIC_V2, mpub, pub
from txnsq.storage.plugins import get_storage_backend

__all__ = ["CountingTransport", "START", "broker", "connect", "fins_for", "mpub", "pub"]

#: Where the benchmarks' clocks start: a time of this century, so that
#: message timestamps look like nsqd's.
START = 1_700_000_000.0

_FRAME = struct.Struct(">iI")


def broker(storage: str = "memory", **options: Any) -> Tuple[Broker, NSQDFactory, Clock]:
    """
    A broker with ``storage`` (``memory`` or ``disk``) and the given
    :class:`~txnsq.nsqd.options.NSQDOptions` (``mem_queue_size=...``,
    ``data_path=...``), its V2 factory and its clock, started at
    :data:`START`.
    """
    clock = Clock()
    clock.advance(START)
    settings = NSQDOptions(**options)
    found = Broker(settings, clock, get_storage_backend(storage))
    return found, NSQDFactory(found, clock), clock


class CountingTransport:
    """A transport that keeps what was written until :meth:`take` (no copies until then)."""

    disconnecting = False

    def __init__(self, port: int) -> None:
        self._peer = IPv4Address("TCP", "127.0.0.1", port)
        self.chunks: List[bytes] = []
        self.written = 0

    def write(self, data: bytes) -> None:
        self.chunks.append(data)
        self.written += len(data)

    def writeSequence(self, data: List[bytes]) -> None:
        for chunk in data:
            self.write(chunk)

    def take(self) -> bytes:
        """Everything written since the last call, joined."""
        data = b"".join(self.chunks)
        self.chunks = []
        return data

    def getPeer(self) -> IPv4Address:
        return self._peer

    def getHost(self) -> IPv4Address:
        return IPv4Address("TCP", "127.0.0.1", 4150)

    def loseConnection(self) -> None:
        self.disconnecting = True

    def abortConnection(self) -> None:
        self.disconnecting = True

    def pauseProducing(self) -> None:
        pass

    def resumeProducing(self) -> None:
        pass


def connect(factory: NSQDFactory, port: int) -> Tuple[NSQDProtocol, CountingTransport]:
    """A connection from client port ``port`` that sent the magic."""
    transport = CountingTransport(port)
    protocol = factory.buildProtocol(transport.getPeer())
    protocol.makeConnection(transport)  # type: ignore[arg-type]
    protocol.dataReceived(MAGIC_V2)
    return protocol, transport


def fins_for(data: bytes) -> Tuple[bytes, int]:
    """
    A ``FIN`` for every message frame in ``data`` (whole frames, as
    :meth:`CountingTransport.take` gives them), and how many.

    Timed with the drain it answers, so it reads the frame headers in
    place and copies out only each message's ID, rather than splitting
    every frame into ``bytes`` as :class:`~txnsq.protocol.frames.FrameParser`
    does for a client.
    """
    fins = []
    view = memoryview(data)
    pos = 0
    end = len(data)
    while pos < end:
        size, frame_type = _FRAME.unpack_from(view, pos)
        if frame_type == FRAME_TYPE_MESSAGE:
            # The frame's data: timestamp (8), attempts (2), then the ID.
            fins.append(b"FIN " + bytes(view[pos + 18:pos + 34]) + b"\n")
        pos += 4 + size
    return b"".join(fins), len(fins)
