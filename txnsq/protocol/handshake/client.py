# -*- test-case-name: tests.test_protocol_handshake_client -*-
"""
A client's side of the V2 handshake (sans-IO), in NSQ's order:

1. *identifying*: the magic and IDENTIFY go out at once
   (:meth:`ClientHandshake.initiate`); the reply is the negotiated
   features as JSON, or a bare ``OK`` from a server without feature
   negotiation;
2. *tls*: if TLS was granted, the adapter starts it and an ``OK`` comes
   inside it;
3. *compression*: if snappy or deflate was granted, both directions go
   through the codec and an ``OK`` comes compressed;
4. *auth*: if the reply says ``auth_required``, AUTH with the secret; its
   JSON reply is kept as :attr:`ClientHandshake.auth_response`;
5. *ready*: :class:`Ready <txnsq.protocol.handshake.steps.Ready>`.

Frames are cut one at a time meanwhile, because the bytes after each
upgrade's frame belong to the next codec. Heartbeats are answered with
NOP. An error frame is raised as :class:`NSQError <txnsq.protocol.v2_client.NSQError>`;
anything else unexpected as :class:`HandshakeError`.
"""

from __future__ import annotations

import json
from typing import Any, Dict, List, Mapping, Optional, Union

from txnsq.protocol import v2_client as codec
from txnsq.protocol.frames import FRAME_TYPE_ERROR, FRAME_TYPE_MESSAGE, FRAME_TYPE_RESPONSE
from txnsq.protocol.handshake.steps import Ready, Send, StartCompression, StartTLS, Step, compression_codecs
from txnsq.protocol.v2_client import HEARTBEAT, OK, MalformedFrame

__all__ = ["MAX_HANDSHAKE_FRAME", "ClientHandshake", "HandshakeError"]

#: The longest frame accepted while negotiating: an IDENTIFY or AUTH reply
#: is a few hundred bytes, and a small bound refuses garbage (an HTTP
#: server's reply read as a frame size) at once.
MAX_HANDSHAKE_FRAME = 1024 * 1024

_IDENTIFYING = 0
_TLS = 1
_COMPRESSION = 2
_AUTH = 3
_READY = 4

_NAMES = {_IDENTIFYING: "identifying", _TLS: "tls", _COMPRESSION: "compression", _AUTH: "auth", _READY: "ready"}


class HandshakeError(Exception):
    """
    nsqd said something the handshake does not allow (or did not grant
    what the client requires). The text reads after ``nsqd ADDRESS:``.
    """


class ClientHandshake:
    """
    One connection's handshake, as a client sees it.

    :ivar identify_response: the negotiated features (empty after a bare
        ``OK``).
    :ivar auth_response: AUTH's JSON reply, when AUTH was required.
    :ivar tls: TLS was granted (and :class:`StartTLS` asked for).
    :ivar compression: ``"snappy"``, ``"deflate"`` or ``None``.
    """

    def __init__(
        self,
        identify_body: Mapping[str, Any],
        auth_secret: Optional[Union[str, bytes]] = None,
        *,
        require_tls: bool = False,
        deflate_level: int = 6,
        max_frame_size: int = MAX_HANDSHAKE_FRAME,
    ) -> None:
        """
        :param identify_body: the IDENTIFY JSON (see
            :meth:`txnsq.client.config.ConnectionConfig.identify_body`).
        :param auth_secret: sent with AUTH when nsqd requires it.
        :param require_tls: an nsqd that does not grant TLS is refused.
        :param deflate_level: used when nsqd grants deflate without a valid
            level.
        :param max_frame_size: the longest handshake frame accepted.
        """
        self.identify_body = dict(identify_body)
        self.auth_secret = auth_secret
        self.require_tls = require_tls
        self.deflate_level = deflate_level
        self.max_frame_size = max_frame_size
        self.identify_response: Dict[str, Any] = {}
        self.auth_response: Optional[Dict[str, Any]] = None
        self.tls = False
        self.compression: Optional[str] = None
        self._state = _IDENTIFYING
        self._buf = bytearray()

    @property
    def state(self) -> str:
        """``identifying``, ``tls``, ``compression``, ``auth`` or ``ready``."""
        return _NAMES[self._state]

    @property
    def done(self) -> bool:
        """Whether the handshake is over (:class:`Ready` was returned)."""
        return self._state == _READY

    def initiate(self) -> bytes:
        """The first bytes to send: the magic and IDENTIFY."""
        return codec.MAGIC_V2 + codec.identify(self.identify_body)

    def receive(self, data: bytes) -> List[Step]:
        """
        Take plain bytes received (decrypted, and decompressed once a
        :class:`StartCompression` step was carried out); return the steps
        to carry out, in order. The last one is :class:`Ready` once the
        handshake is over; nothing may be received after it.

        :raises NSQError: nsqd answered with an error frame.
        :raises HandshakeError: a malformed or unexpected frame, a reply
            that is not JSON, data in clear after TLS was granted, TLS
            required but not granted, AUTH required but no secret.
        :raises txnsq.protocol.compression.CompressionError: the bytes
            after the upgrade to compression do not decode.
        :raises RuntimeError: called after :class:`Ready`.
        """
        if self._state == _READY:
            raise RuntimeError("the handshake is over: its bytes go to the ready connection")
        buf = self._buf
        buf += data
        steps: List[Step] = []
        while self._state != _READY:
            try:
                cut = codec.split_frame(buf, self.max_frame_size)
            except MalformedFrame as error:
                raise HandshakeError("malformed frame: %s" % (error,)) from None
            if cut is None:
                return steps
            frame_type, frame, length = cut
            del buf[:length]
            if frame_type == FRAME_TYPE_ERROR:
                raise codec.parse_error(frame)
            if frame_type == FRAME_TYPE_MESSAGE:
                raise HandshakeError("sent a message during the handshake")
            assert frame_type == FRAME_TYPE_RESPONSE
            if frame == HEARTBEAT:
                steps.append(Send(codec.nop()))
            elif self._state == _IDENTIFYING:
                self._identified(frame, steps)
            elif self._state == _AUTH:
                self._authenticated(frame, steps)
            elif frame != OK:
                raise HandshakeError("sent %r instead of OK after %s" % (frame[:64], self.state))
            elif self._state == _TLS:
                self._start_compression(steps)
            else:
                self._after_compression(steps)
        return steps

    # -- transitions ---------------------------------------------------------

    def _identified(self, frame: bytes, steps: List[Step]) -> None:
        """IDENTIFY's reply: keep the features, start the upgrades granted."""
        if frame == OK:
            response: Any = {}
        else:
            try:
                response = json.loads(frame)
            except ValueError:
                response = None
            if not isinstance(response, dict):
                raise HandshakeError("sent an IDENTIFY reply that is not a JSON object: %r" % (frame[:64],))
        self.identify_response = response
        if self.require_tls and not response.get("tls_v1"):
            raise HandshakeError("did not grant TLS (is --tls-cert set?)")
        if response.get("tls_v1"):
            if self._buf:
                raise HandshakeError("sent data in clear after the IDENTIFY reply granting TLS")
            self._state = _TLS
            self.tls = True
            steps.append(StartTLS())
            return
        self._start_compression(steps)

    def _start_compression(self, steps: List[Step]) -> None:
        """After TLS (if any): install the compression granted, or go on."""
        response = self.identify_response
        if response.get("snappy"):
            name = "snappy"
            encoder, decoder = compression_codecs(name)
        elif response.get("deflate"):
            name = "deflate"
            level = response.get("deflate_level") or self.deflate_level
            if not isinstance(level, int) or not 1 <= level <= 9:
                level = self.deflate_level
            encoder, decoder = compression_codecs(name, level)
        else:
            self._after_compression(steps)
            return
        self._state = _COMPRESSION
        self.compression = name
        steps.append(StartCompression(name, encoder, decoder))
        # What followed the upgrade's frame in this read is compressed.
        rest = bytes(self._buf)
        self._buf.clear()
        if rest:
            for piece in decoder.decode_iter(rest):
                self._buf += piece

    def _after_compression(self, steps: List[Step]) -> None:
        """After the upgrades: AUTH if nsqd requires it, else ready."""
        if not self.identify_response.get("auth_required"):
            self._ready(steps)
            return
        if not self.auth_secret:
            raise HandshakeError("requires AUTH but no auth_secret is configured")
        self._state = _AUTH
        steps.append(Send(codec.auth(self.auth_secret)))

    def _authenticated(self, frame: bytes, steps: List[Step]) -> None:
        """AUTH's reply: keep it; the handshake is over."""
        try:
            response = json.loads(frame)
        except ValueError:
            response = None
        if not isinstance(response, dict):
            raise HandshakeError("sent an AUTH reply that is not a JSON object: %r" % (frame[:64],))
        self.auth_response = response
        self._ready(steps)

    def _ready(self, steps: List[Step]) -> None:
        self._state = _READY
        rest = bytes(self._buf)
        self._buf.clear()
        steps.append(Ready(rest))
