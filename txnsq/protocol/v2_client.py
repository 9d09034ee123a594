# -*- test-case-name: tests.test_protocol_v2_client -*-
"""
The client side of NSQ's V2 TCP protocol (sans-IO): command encoders, the
error frames' ``E_*`` codes as exceptions, name checks with nsqd's texts,
and a one-frame-at-a-time splitter for the IDENTIFY upgrades.

Frames in the steady state are decoded by
:class:`txnsq.protocol.frames.FrameParser` and message payloads by
:mod:`txnsq.protocol.message`; the compression codecs are those of
:mod:`txnsq.protocol.compression`, shared with nsqd.

Encoders do not validate: call :func:`check_topic` / :func:`check_channel`
first where a name comes from a user, because a name with a space or a
newline would otherwise corrupt the command stream.
"""

from __future__ import annotations

import json
import struct
from typing import Any, Dict, Iterable, Optional, Tuple, Union

from txnsq.protocol.errors import NON_FATAL_CODES, go_quote
from txnsq.protocol.frames import FRAME_TYPE_ERROR, FRAME_TYPE_MESSAGE, FRAME_TYPE_RESPONSE
from txnsq.protocol.names import is_valid_channel_name, is_valid_topic_name

__all__ = [
    "CLOSE_WAIT",
    "HEARTBEAT",
    "MAGIC_V2",
    "MalformedFrame",
    "OK",
    "NSQError",
    "auth",
    "check_channel",
    "check_topic",
    "cls",
    "dpub",
    "fin",
    "identify",
    "mpub",
    "mpub_body",
    "nop",
    "parse_error",
    "pub",
    "rdy",
    "req",
    "split_frame",
    "sub",
    "touch",
]

#: The protocol magic a client sends first.
MAGIC_V2 = b"  V2"
#: Response data of nsqd's heartbeat; the client answers with NOP.
HEARTBEAT = b"_heartbeat_"
#: Response data of a successful SUB, PUB, MPUB, DPUB and upgrade.
OK = b"OK"
#: Response data of CLS.
CLOSE_WAIT = b"CLOSE_WAIT"

Name = Union[str, bytes]

_SIZE = struct.Struct(">I")
_pack_size = _SIZE.pack
_HEADER = struct.Struct(">ii")
_unpack_header = _HEADER.unpack_from
_FRAME_TYPES = (FRAME_TYPE_RESPONSE, FRAME_TYPE_ERROR, FRAME_TYPE_MESSAGE)

_NOP = b"NOP\n"
_CLS = b"CLS\n"


class NSQError(Exception):
    """
    nsqd refused a command with an error frame (``E_BAD_TOPIC ...``).

    :ivar code: the error code, e.g. ``"E_BAD_TOPIC"``.
    :ivar description: the text after the code (may be empty).
    :ivar fatal: whether nsqd closes the connection after it (every code
        but ``E_FIN_FAILED``, ``E_REQ_FAILED`` and ``E_TOUCH_FAILED``).
    """

    def __init__(self, code: str, description: str = "", fatal: Optional[bool] = None) -> None:
        """
        :param fatal: ``None`` to follow nsqd's rule for ``code``.
        """
        self.code = code
        self.description = description
        self.fatal = code not in NON_FATAL_CODES if fatal is None else fatal
        Exception.__init__(self, code, description)

    def __str__(self) -> str:
        if self.description:
            return self.code + " " + self.description
        return self.code

    def __repr__(self) -> str:
        return "NSQError(%r, %r, fatal=%r)" % (self.code, self.description, self.fatal)


def parse_error(data: bytes) -> NSQError:
    """
    The :class:`NSQError` of an error frame's data (``CODE description``);
    bytes that are not UTF-8 are shown as ``\\xNN``.
    """
    text = bytes(data).decode("utf-8", "backslashreplace")
    code, _, description = text.partition(" ")
    return NSQError(code, description)


def _name(name: Name) -> bytes:
    return name.encode("ascii") if isinstance(name, str) else bytes(name)


def check_topic(verb: str, topic: Name) -> None:
    """
    Refuse an invalid topic name before it is sent, as nsqd would.

    :raises NSQError: ``E_BAD_TOPIC`` with nsqd's text (non-fatal: nothing
        was sent, the connection stays usable).
    """
    if not is_valid_topic_name(topic):
        raise NSQError(
            "E_BAD_TOPIC", "%s topic name %s is not valid" % (verb, go_quote(topic)), fatal=False
        )


def check_channel(verb: str, channel: Name) -> None:
    """
    Refuse an invalid channel name before it is sent, as nsqd would.

    :raises NSQError: ``E_BAD_CHANNEL`` with nsqd's text (non-fatal).
    """
    if not is_valid_channel_name(channel):
        raise NSQError(
            "E_BAD_CHANNEL",
            "%s channel name %s is not valid" % (verb, go_quote(channel)),
            fatal=False,
        )


# -- commands --------------------------------------------------------------


def identify(data: Dict[str, Any]) -> bytes:
    """``IDENTIFY`` with ``data`` as its JSON body."""
    body = json.dumps(data, separators=(",", ":")).encode("utf-8")
    return b"IDENTIFY\n" + _pack_size(len(body)) + body


def auth(secret: Union[str, bytes]) -> bytes:
    """``AUTH`` carrying ``secret`` (a ``str`` is sent as UTF-8)."""
    data = secret.encode("utf-8") if isinstance(secret, str) else bytes(secret)
    return b"AUTH\n" + _pack_size(len(data)) + data


def sub(topic: Name, channel: Name) -> bytes:
    """``SUB topic channel``."""
    return b"SUB " + _name(topic) + b" " + _name(channel) + b"\n"


def rdy(count: int) -> bytes:
    """``RDY count``."""
    return b"RDY %d\n" % (count,)


def fin(msg_id: bytes) -> bytes:
    """``FIN id``."""
    return b"FIN " + msg_id + b"\n"


def req(msg_id: bytes, delay_ms: int) -> bytes:
    """``REQ id delay`` (milliseconds; 0 requeues at once)."""
    return b"REQ " + msg_id + b" %d\n" % (delay_ms,)


def touch(msg_id: bytes) -> bytes:
    """``TOUCH id``."""
    return b"TOUCH " + msg_id + b"\n"


def pub(topic: Name, body: bytes) -> bytes:
    """``PUB topic`` with one message body."""
    return b"PUB " + _name(topic) + b"\n" + _pack_size(len(body)) + body


def mpub_body(bodies: Iterable[bytes]) -> bytes:
    """
    The MPUB body (also nsqd's ``POST /mpub?binary=true`` body): the message
    count, then each message's size and bytes.
    """
    parts = [b""]
    for body in bodies:
        parts.append(_pack_size(len(body)))
        parts.append(body)
    parts[0] = _pack_size((len(parts) - 1) // 2)
    return b"".join(parts)


def mpub(topic: Name, bodies: Iterable[bytes]) -> bytes:
    """``MPUB topic`` with the size-prefixed :func:`mpub_body`."""
    payload = mpub_body(bodies)
    return b"MPUB " + _name(topic) + b"\n" + _pack_size(len(payload)) + payload


def dpub(topic: Name, delay_ms: int, body: bytes) -> bytes:
    """``DPUB topic delay`` (milliseconds) with one message body."""
    return b"DPUB " + _name(topic) + b" %d\n" % (delay_ms,) + _pack_size(len(body)) + body


def nop() -> bytes:
    """``NOP`` (the answer to a heartbeat)."""
    return _NOP


def cls() -> bytes:
    """``CLS``: ask nsqd to stop sending messages (answered ``CLOSE_WAIT``)."""
    return _CLS


# -- frames during the upgrades ----------------------------------------------


class MalformedFrame(ValueError):
    """The server's bytes are not a V2 frame."""


def split_frame(buf: Union[bytes, bytearray], max_size: int) -> Optional[Tuple[int, bytes, int]]:
    """
    Cut the first frame off ``buf``: ``(frame_type, data, length)`` where
    ``length`` is how many bytes of ``buf`` it took, or ``None`` while it is
    incomplete.

    Used while IDENTIFY's upgrades are made, because the bytes after each
    upgrade's frame belong to a different codec (TLS, compression) and
    must not be read as frames yet.  The frame type is checked as soon as
    the header is in, so that garbage is refused without waiting for the
    length it seems to declare.

    :raises MalformedFrame: a size below 4 or above ``max_size``, or an
        unknown frame type.
    """
    if len(buf) < 8:
        return None
    size, frame_type = _unpack_header(buf, 0)
    if size < 4 or size > max_size:
        raise MalformedFrame("invalid frame size %d" % (size,))
    if frame_type not in _FRAME_TYPES:
        raise MalformedFrame("invalid frame type %d" % (frame_type,))
    stop = 4 + size
    if len(buf) < stop:
        return None
    return frame_type, bytes(buf[8:stop]), stop
