# -*- test-case-name: tests.test_protocol_frames -*-
"""
V2 frames, server to client: ``u32 size | i32 frame type | data`` (big
endian), where ``size = 4 + len(data)``.

Encoding is used by the server; :class:`FrameParser` is the sans-IO decoder
for clients and tests.
"""

from __future__ import annotations

import struct
from typing import Any, List, Optional, Tuple

__all__ = [
    "CLOSE_WAIT_FRAME",
    "FRAME_TYPE_ERROR",
    "FRAME_TYPE_MESSAGE",
    "FRAME_TYPE_RESPONSE",
    "FrameError",
    "FrameParser",
    "HEARTBEAT_FRAME",
    "OK_FRAME",
    "encode_frame",
    "encode_message_frame_header",
]

FRAME_TYPE_RESPONSE = 0
FRAME_TYPE_ERROR = 1
FRAME_TYPE_MESSAGE = 2

_HEADER = struct.Struct(">ii")
_pack_header = _HEADER.pack
_unpack_header = _HEADER.unpack_from


def encode_frame(frame_type: int, data: bytes) -> bytes:
    """One complete frame of ``frame_type`` carrying ``data``."""
    return _pack_header(len(data) + 4, frame_type) + data


def encode_message_frame_header(payload_len: int) -> bytes:
    """
    The 8-byte header of a message frame whose payload (see
    :mod:`txnsq.protocol.message`) is ``payload_len`` bytes long; write the
    payload right after it (no concatenation needed with ``writeSequence``).
    """
    return _pack_header(payload_len + 4, FRAME_TYPE_MESSAGE)


OK_FRAME = encode_frame(FRAME_TYPE_RESPONSE, b"OK")
HEARTBEAT_FRAME = encode_frame(FRAME_TYPE_RESPONSE, b"_heartbeat_")
CLOSE_WAIT_FRAME = encode_frame(FRAME_TYPE_RESPONSE, b"CLOSE_WAIT")


class FrameError(ValueError):
    """The byte stream is not a sequence of valid V2 frames."""


class FrameParser:
    """
    Incremental decoder of V2 frames (sans-IO).

    ``feed(data)`` returns every frame completed by ``data`` as
    ``(frame_type, data)`` pairs; an incomplete frame is kept for later.
    """

    __slots__ = ("max_frame_size", "_buf", "_pos", "_error")

    def __init__(self, max_frame_size: Optional[int] = None) -> None:
        """
        :param max_frame_size: refuse frames whose ``size`` field exceeds
            this (``None``: no limit).
        """
        self.max_frame_size = max_frame_size
        self._buf = bytearray()
        self._pos = 0
        self._error: Optional[FrameError] = None

    def feed(self, data: bytes) -> List[Tuple[int, bytes]]:
        """
        Add received bytes; return the frames now complete, in order.

        :raises FrameError: a size field below 4 (Go clients' "length of
            response is too small") or above ``max_frame_size``; the parser
            then refuses all further input.
        """
        if self._error is not None:
            raise self._error
        buf = self._buf
        if self._pos == len(buf):
            if buf:
                buf.clear()
            if type(data) is bytes:
                # Nothing held back (the usual case): frames are sliced
                # straight out of the bytes received, one copy each.
                return self._parse(data, data, 0)
        buf += data
        return self._parse(buf, memoryview(buf), self._pos)

    def _parse(self, source: Any, view: Any, pos: int) -> List[Tuple[int, bytes]]:
        """
        The complete frames of ``source`` from ``pos``; what follows them
        is kept in the buffer.  ``view`` slices ``source`` into ``bytes``
        (``source`` itself when it is ``bytes``, else a memoryview of it).
        """
        end = len(source)
        frames: List[Tuple[int, bytes]] = []
        limit = self.max_frame_size
        try:
            while end - pos >= 8:
                size, frame_type = _unpack_header(source, pos)
                if size < 4 or (limit is not None and size > limit):
                    if size < 4:
                        self._error = FrameError("invalid frame size %d" % (size,))
                    else:
                        self._error = FrameError("frame size %d exceeds %s" % (size, limit))
                    self._buf = bytearray()
                    self._pos = 0
                    raise self._error
                stop = pos + 4 + size
                if stop > end:
                    break
                frames.append((frame_type, bytes(view[pos + 8 : stop])))
                pos = stop
        finally:
            if view is not source:
                view.release()
        buf = self._buf
        if source is not buf:
            # Parsed from the received bytes: keep the incomplete rest.
            buf += source[pos:]
            self._pos = 0
        elif pos == end:
            buf.clear()
            self._pos = 0
        elif pos > 65536:
            del buf[:pos]
            self._pos = 0
        else:
            self._pos = pos
        return frames

    def buffered(self) -> int:
        """How many bytes of an incomplete frame are held."""
        return len(self._buf) - self._pos
