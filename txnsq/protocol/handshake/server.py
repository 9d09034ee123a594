# -*- test-case-name: tests.test_protocol_handshake -*-
"""
nsqd's side of the V2 handshake (sans-IO): the protocol magic, IDENTIFY
and its upgrades (TLS, then snappy or deflate, each confirmed by an ``OK``
sent through it), ``--tls-required``, and AUTH with the authorizations it
brings, all with Go nsqd's error codes and texts.

The adapter (:class:`txnsq.nsqd.tcp.NSQDProtocol`) feeds it the first bytes
and the IDENTIFY and AUTH bodies and carries out the steps it returns; it
also asks the auth server, an HTTP request, and hands the answer back to
:meth:`ServerHandshake.authenticated` or :meth:`ServerHandshake.reauthorized`.
"""

from __future__ import annotations

from typing import List, Optional, Tuple

from txnsq.protocol.auth import AuthState, auth_response_body, unauthorized_description
from txnsq.protocol.errors import protocol_error
from txnsq.protocol.frames import FRAME_TYPE_ERROR, FRAME_TYPE_RESPONSE, OK_FRAME, encode_frame
from txnsq.protocol.handshake.steps import Send, StartCompression, StartTLS, Step, compression_codecs
from txnsq.protocol.identify import IdentifySettings, Identity, identify_response, negotiate_identify

__all__ = ["BAD_PROTOCOL_FRAME", "MAGIC_V2", "BadMagic", "ServerHandshake"]

#: The magic a V2 client sends first.
MAGIC_V2 = b"  V2"

#: The error frame Go nsqd sends for a wrong magic: the bare code.
BAD_PROTOCOL_FRAME = encode_frame(FRAME_TYPE_ERROR, b"E_BAD_PROTOCOL")


class BadMagic(Exception):
    """
    The client's first four bytes are not :data:`MAGIC_V2`: send
    :data:`BAD_PROTOCOL_FRAME` and close, as Go nsqd does.

    :ivar magic: the four bytes received.
    """

    def __init__(self, magic: bytes) -> None:
        Exception.__init__(self, "bad protocol magic %r" % (magic,))
        self.magic = magic


class ServerHandshake:
    """
    One client connection's handshake, as nsqd sees it.

    :ivar has_magic: the magic has been read (and was right).
    :ivar needs_tls: ``--tls-required`` and TLS not yet started: nothing
        but IDENTIFY may run.
    :ivar identity: the client's settings after IDENTIFY, else ``None``.
    :ivar tls: TLS was started (``tls_v1`` granted).
    :ivar snappy: snappy compression was granted.
    :ivar deflate: deflate compression was granted.
    :ivar auth_state: the authorizations of the last AUTH, else ``None``.
    :ivar auth_secret: the secret sent with AUTH (asked again when the
        authorizations expire).
    """

    __slots__ = (
        "settings",
        "version",
        "tls_configured",
        "snappy_enabled",
        "deflate_enabled",
        "auth_required",
        "has_magic",
        "needs_tls",
        "identity",
        "tls",
        "snappy",
        "deflate",
        "auth_state",
        "auth_secret",
        "_magic",
    )

    def __init__(
        self,
        settings: IdentifySettings,
        version: str,
        *,
        tls_configured: bool = False,
        tls_required: bool = False,
        snappy: bool = False,
        deflate: bool = False,
        auth_required: bool = False,
    ) -> None:
        """
        :param settings: the nsqd's options IDENTIFY negotiates against.
        :param version: the version IDENTIFY's reply reports.
        :param tls_configured: a certificate is configured: ``tls_v1`` may
            be granted.
        :param tls_required: nothing but IDENTIFY before TLS.
        :param snappy: ``--snappy``; ``deflate``: ``--deflate``.
        :param auth_required: ``--auth-http-address`` is set.
        """
        self.settings = settings
        self.version = version
        self.tls_configured = tls_configured
        self.snappy_enabled = snappy
        self.deflate_enabled = deflate
        self.auth_required = auth_required
        self.has_magic = False
        self.needs_tls = tls_required
        self.identity: Optional[Identity] = None
        self.tls = False
        self.snappy = False
        self.deflate = False
        self.auth_state: Optional[AuthState] = None
        self.auth_secret = ""
        self._magic = b""

    # -- magic -------------------------------------------------------------

    def receive_magic(self, data: bytes) -> bytes:
        """
        Read the magic from the first bytes; return what follows it
        (``b""`` while it is incomplete, after which :attr:`has_magic` is
        still false).

        :raises BadMagic: the four bytes are not :data:`MAGIC_V2`.
        """
        needed = 4 - len(self._magic)
        self._magic += data[:needed]
        if len(self._magic) < 4:
            return b""
        if self._magic != MAGIC_V2:
            raise BadMagic(self._magic)
        self.has_magic = True
        return data[needed:]

    # -- state checks --------------------------------------------------------

    def check_tls(self, name: bytes) -> None:
        """
        ``--tls-required``: a command other than IDENTIFY before TLS is
        refused (Go checks this before the command's own checks).

        :raises ProtocolError: E_INVALID ``cannot NAME in current state
            (TLS required)`` (fatal).
        """
        if self.needs_tls and name != b"IDENTIFY":
            raise protocol_error("E_INVALID", b"cannot " + name + b" in current state (TLS required)")

    @staticmethod
    def check_initial(name: bytes, initial: bool) -> None:
        """
        IDENTIFY and AUTH run only before SUB (``initial``); Go checks this
        before reading their body.

        :raises ProtocolError: E_INVALID ``cannot NAME in current state``.
        """
        if not initial:
            raise protocol_error("E_INVALID", b"cannot " + name + b" in current state")

    # -- IDENTIFY --------------------------------------------------------------

    def identify(self, body: bytes) -> Tuple[Identity, List[Step]]:
        """
        Negotiate an IDENTIFY body: the client's settings, and the steps
        that answer it in Go's order: the reply (a bare ``OK`` without
        ``feature_negotiation``, else the negotiated JSON); then, if
        granted, TLS and an ``OK`` inside it; then snappy or deflate and an
        ``OK`` through it.

        :raises ProtocolError: E_BAD_BODY (a body that does not decode, a
            value out of range), E_IDENTIFY_FAILED (snappy and deflate both),
            all fatal.
        """
        identity = negotiate_identify(
            body,
            self.settings,
            tls_configured=self.tls_configured,
            snappy_enabled=self.snappy_enabled,
            deflate_enabled=self.deflate_enabled,
        )
        self.identity = identity
        if not identity.feature_negotiation:
            return identity, [Send(OK_FRAME)]
        reply = identify_response(identity, self.settings, self.version, auth_required=self.auth_required)
        steps: List[Step] = [Send(encode_frame(FRAME_TYPE_RESPONSE, reply))]
        if identity.tls_v1:
            self.tls = True
            self.needs_tls = False
            steps.append(StartTLS())
            steps.append(Send(OK_FRAME))
        if identity.snappy:
            self.snappy = True
            steps.append(StartCompression("snappy", *compression_codecs("snappy")))
            steps.append(Send(OK_FRAME))
        elif identity.deflate:
            self.deflate = True
            steps.append(StartCompression("deflate", *compression_codecs("deflate", identity.deflate_level)))
            steps.append(Send(OK_FRAME))
        return identity, steps

    # -- AUTH ------------------------------------------------------------------

    def auth(self, body: bytes) -> str:
        """
        Take AUTH's body: the secret to ask the auth server about.

        :raises ProtocolError: E_INVALID ``AUTH already set`` (a second
            AUTH), E_AUTH_DISABLED (no auth server configured); fatal.
        """
        if self.auth_state is not None:
            raise protocol_error("E_INVALID", "AUTH already set")
        if not self.auth_required:
            raise protocol_error("E_AUTH_DISABLED", "AUTH disabled")
        self.auth_secret = body.decode("utf-8", "replace")
        return self.auth_secret

    def authenticated(self, state: AuthState) -> bytes:
        """
        The auth server answered AUTH: keep its authorizations; return
        the reply frame (identity, identity URL, permission count).

        :raises ProtocolError: E_UNAUTHORIZED ``AUTH no authorizations
            found`` (fatal).
        """
        self.auth_state = state
        if not state.authorizations:
            raise protocol_error("E_UNAUTHORIZED", "AUTH no authorizations found")
        return encode_frame(FRAME_TYPE_RESPONSE, auth_response_body(state))

    def check_auth(self, verb: str, topic: str, channel: str, now: float) -> bool:
        """
        Go's ``CheckAuth`` before SUB, PUB, MPUB and DPUB: ``True`` when
        the command may run (or AUTH is disabled); ``False`` when the
        authorizations expired at ``now`` and must be asked for again with
        :attr:`auth_secret`, then given to :meth:`reauthorized`.

        :raises ProtocolError: E_AUTH_FIRST (no AUTH yet), E_UNAUTHORIZED
            (not allowed); fatal.
        """
        if not self.auth_required:
            return True
        state = self.auth_state
        if state is None:
            raise protocol_error("E_AUTH_FIRST", "AUTH required before %s" % (verb,))
        if state.is_expired(now):
            return False
        if not state.is_allowed(topic, channel):
            raise protocol_error("E_UNAUTHORIZED", unauthorized_description(verb, topic, channel))
        return True

    def reauthorized(self, state: AuthState, verb: str, topic: str, channel: str) -> None:
        """
        The authorizations asked for again (after :meth:`check_auth` said
        ``False``) arrived: keep them and check the command again.

        :raises ProtocolError: E_UNAUTHORIZED (fatal).
        """
        self.auth_state = state
        if not state.is_allowed(topic, channel):
            raise protocol_error("E_UNAUTHORIZED", unauthorized_description(verb, topic, channel))
