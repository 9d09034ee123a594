# -*- test-case-name: tests.test_client_connection -*-
"""
One client connection to one nsqd: :class:`NSQConnection` (a Twisted
``Protocol``), its settings (:class:`ConnectionConfig`), what it reports to
its owner (:class:`ConnectionDelegate`) and :func:`connect`.

A connection goes through these states, in NSQ's order:

1. *identifying*: the magic and IDENTIFY (every :class:`ConnectionConfig`
   option, as JSON) are sent at once; the reply is the negotiated features
   (or a bare ``OK`` from a server without feature negotiation);
2. *tls*: if TLS was granted, ``transport.startTLS`` and an ``OK`` inside it;
3. *compression*: if snappy or deflate was granted, both directions go
   through the codec and an ``OK`` comes compressed;
4. *auth*: if the reply says ``auth_required``, AUTH with the configured
   secret, whose JSON reply is kept as :attr:`NSQConnection.auth_response`;
5. *ready*: :func:`connect`'s Deferred fires; SUB, PUB, MPUB, DPUB, RDY,
   FIN, REQ and TOUCH may be sent;
6. *closing* (:meth:`NSQConnection.close`) and *closed*.

While an upgrade is pending frames are cut one at a time, because the bytes
after each upgrade's frame belong to the next codec; once ready, frames go
through :class:`txnsq.protocol.frames.FrameParser` in bulk.

Responses (``OK``, ``CLOSE_WAIT``, ``E_*``) answer commands in the order
they were sent, so they are matched to a queue of waiting Deferreds.  The
three non-fatal errors (``E_FIN_FAILED``, ``E_REQ_FAILED``,
``E_TOUCH_FAILED``) answer FIN/REQ/TOUCH, which wait for nothing, so they
never take a waiting command's place: they go to
:meth:`ConnectionDelegate.on_error`, as does any error frame nothing waits
for.

Receiving a message makes one :class:`Message` and nothing else: no
Deferred, no timer, no log line.  The read deadline is one timer that
re-arms itself from the time of the last read.
"""

from __future__ import annotations

import json
import socket
import struct
from collections import deque
from dataclasses import dataclass, field
from typing import Any, Deque, Dict, List, Optional, Protocol as TypingProtocol, Tuple, Union

from twisted.internet.defer import CancelledError, Deferred, fail
from twisted.internet.error import ConnectingCancelledError
from twisted.internet.interfaces import IDelayedCall, IReactorTime
from twisted.internet.protocol import Factory, Protocol
from twisted.logger import Logger
from twisted.python.failure import Failure

from txnsq import __version__
from txnsq.addresses import client_endpoint, split_host_port
from txnsq.client.message import Message
from txnsq.protocol import v2_client as codec
from txnsq.protocol.compression import (
    CompressionError,
    DeflateDecoder,
    DeflateEncoder,
    SnappyDecoder,
    SnappyEncoder,
)
from txnsq.protocol.frames import (
    FRAME_TYPE_ERROR,
    FRAME_TYPE_MESSAGE,
    FRAME_TYPE_RESPONSE,
    FrameError,
    FrameParser,
)
from txnsq.protocol.message import MESSAGE_HEADER_LENGTH
from txnsq.protocol.v2_client import CLOSE_WAIT, HEARTBEAT, OK, MalformedFrame, NSQError

__all__ = [
    "ConnectionConfig",
    "ConnectionDelegate",
    "NSQConnection",
    "NSQConnectionError",
    "NSQError",
    "connect",
]

#: What nsqd allows in flight per connection when it does not say
#: (servers without feature negotiation).
DEFAULT_MAX_RDY_COUNT = 2500

#: The longest frame accepted while negotiating: an IDENTIFY or AUTH reply
#: is a few hundred bytes, and a small bound refuses garbage (an HTTP
#: server's reply read as a frame size) at once.
MAX_HANDSHAKE_FRAME = 1024 * 1024

_STATE_CONNECTING = 0
_STATE_IDENTIFYING = 1
_STATE_TLS = 2
_STATE_COMPRESSION = 3
_STATE_AUTH = 4
_STATE_READY = 5
_STATE_CLOSING = 6
_STATE_CLOSED = 7

_STATE_NAMES = {
    _STATE_CONNECTING: "connecting",
    _STATE_IDENTIFYING: "identifying",
    _STATE_TLS: "tls",
    _STATE_COMPRESSION: "compression",
    _STATE_AUTH: "auth",
    _STATE_READY: "ready",
    _STATE_CLOSING: "closing",
    _STATE_CLOSED: "closed",
}

_unpack_prefix = struct.Struct(">qH").unpack_from


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


class NSQConnectionError(ConnectionError):
    """
    The connection to nsqd failed, was lost or is not usable; commands
    waiting for an answer fail with it.

    :ivar reason: the underlying failure, when there is one.
    """

    def __init__(self, message: str, reason: Optional[Failure] = None) -> None:
        ConnectionError.__init__(self, message)
        self.reason = reason


class ConnectionDelegate(TypingProtocol):
    """What a connection reports to its owner (a Consumer or a Producer)."""

    def on_message(self, conn: "NSQConnection", message: Message) -> None:
        """A message arrived (``conn.in_flight`` already counts it)."""

    def on_message_finished(self, conn: "NSQConnection", message: Message) -> None:
        """FIN was sent for ``message``."""

    def on_message_requeued(self, conn: "NSQConnection", message: Message, backoff: bool) -> None:
        """REQ was sent for ``message``; ``backoff`` as the handler asked."""

    def on_error(self, conn: "NSQConnection", error: NSQError) -> None:
        """An error frame no command was waiting for (e.g. E_FIN_FAILED)."""

    def on_close(self, conn: "NSQConnection", reason: Failure) -> None:
        """The connection (which had become ready) is gone; called once."""


class _NullDelegate:
    """The delegate of a connection nobody watches: errors are logged."""

    _log = Logger()

    def on_message(self, conn: "NSQConnection", message: Message) -> None:
        self._log.warn("unexpected message {message!r} on {address}", message=message, address=conn.address)

    def on_message_finished(self, conn: "NSQConnection", message: Message) -> None:
        pass

    def on_message_requeued(self, conn: "NSQConnection", message: Message, backoff: bool) -> None:
        pass

    def on_error(self, conn: "NSQConnection", error: NSQError) -> None:
        self._log.warn("nsqd {address}: {error}", address=conn.address, error=str(error))

    def on_close(self, conn: "NSQConnection", reason: Failure) -> None:
        pass


class NSQConnection(Protocol):
    """
    A V2 client connection to one nsqd.

    :ivar address: ``host:port`` of the nsqd.
    :ivar identify_response: the negotiated features (empty when nsqd
        answered IDENTIFY with a bare ``OK``).
    :ivar auth_response: the AUTH reply (``identity``, ``identity_url``,
        ``permission_count``) when AUTH was required.
    :ivar max_rdy_count: the most RDY nsqd accepts (default 2500).
    :ivar rdy_count: the last RDY count sent.
    :ivar in_flight: messages received and not yet finished or requeued.
    :ivar last_message_time: reactor time of the last read that carried a
        message (0 before any).
    :ivar tls: whether TLS was started.
    :ivar snappy: whether snappy compression is on.
    :ivar deflate: whether deflate compression is on.
    :ivar subscribed: whether SUB succeeded.
    """

    _log = Logger()

    def __init__(
        self,
        address: str,
        config: ConnectionConfig,
        delegate: Optional[ConnectionDelegate],
        clock: IReactorTime,
    ) -> None:
        self.address = address
        self.config = config
        self.delegate: ConnectionDelegate = delegate if delegate is not None else _NullDelegate()
        self.clock = clock
        self.identify_response: Dict[str, Any] = {}
        self.auth_response: Optional[Dict[str, Any]] = None
        self.max_rdy_count = DEFAULT_MAX_RDY_COUNT
        self.rdy_count = 0
        self.in_flight = 0
        self.last_message_time = 0.0
        self.tls = False
        self.snappy = False
        self.deflate = False
        self.subscribed = False
        self._state = _STATE_CONNECTING
        self._ready: "Deferred[NSQConnection]" = Deferred(self._cancel_connect)
        self._pending: Deque[Tuple["Deferred[None]", bytes]] = deque()
        self._parser = FrameParser(config.max_frame_size)
        self._handshake = bytearray()
        self._encoder: Any = None
        self._decoder: Any = None
        # Writes of one read are compressed together (see _write).
        self._batch: Optional[List[bytes]] = None
        self._sub_sent = False
        self._last_read = 0.0
        self._read_call: Optional[IDelayedCall] = None
        self._close_call: Optional[IDelayedCall] = None
        self._tls_abort_call: Optional[IDelayedCall] = None
        self._draining = False
        self._disconnecting = False
        self._closed_waiters: List["Deferred[None]"] = []
        self._drop_reason: Optional[Failure] = None
        self._lost = False
        self._late_ack_logged = False

    def __repr__(self) -> str:
        return "<NSQConnection %s %s>" % (self.address, _STATE_NAMES[self._state])

    # -- state ---------------------------------------------------------------

    @property
    def state(self) -> str:
        """The connection state's name (``identifying`` ... ``closed``)."""
        return _STATE_NAMES[self._state]

    def is_ready(self) -> bool:
        """Whether commands may be sent (connected, negotiated, not closing)."""
        return self._state == _STATE_READY and self._drop_reason is None

    def when_ready(self) -> "Deferred[NSQConnection]":
        """
        Fires with this connection once negotiation is done; fails with
        :class:`NSQError` (an ``E_*`` reply, e.g. ``E_UNAUTHORIZED``) or
        :class:`NSQConnectionError`.  Only one caller may wait (``connect``).
        """
        return self._ready

    # -- Protocol ------------------------------------------------------------

    def connectionMade(self) -> None:
        """Send the magic and IDENTIFY; start the read deadline."""
        self._state = _STATE_IDENTIFYING
        self._last_read = self.clock.seconds()
        self.transport.write(codec.MAGIC_V2 + codec.identify(self.config.identify_body()))  # type: ignore[union-attr]
        if self.config.read_timeout > 0:
            self._read_call = self.clock.callLater(self.config.read_timeout, self._check_read)

    def dataReceived(self, data: bytes) -> None:
        """Decompress if need be, then negotiate or dispatch the frames."""
        if self._lost or self._drop_reason is not None:
            return
        self._last_read = self.clock.seconds()
        decoder = self._decoder
        if decoder is None:
            if self._state < _STATE_READY:
                # Negotiating: an upgrade may start within this read, and
                # what was written before it must go out before it.
                self._received(data)
                return
            # The FINs for a read's messages go out in one write: a write
            # each cost more than the rest of the client's work per message
            # (bench/consumer.py).
            self._batch = []
            try:
                self._received(data)
            finally:
                self._flush_batch()
                self._batch = None
            return
        # Compressed: writes made while handling this read are compressed
        # together, as nsqd does per reactor turn, but with no timer.
        self._batch = []
        try:
            for piece in decoder.decode_iter(data):
                self._received(piece)
                if self._drop_reason is not None:
                    return
        except CompressionError as error:
            self._drop(NSQConnectionError("corrupt compressed data from nsqd %s: %s" % (self.address, error)))
        finally:
            self._flush_batch()
            self._batch = None

    def _flush_batch(self) -> None:
        """Write the commands held back while a read is handled, if any."""
        batch = self._batch
        if not batch:
            return
        self._batch = []
        if self._drop_reason is not None or self._lost:
            return
        data = batch[0] if len(batch) == 1 else b"".join(batch)
        encoder = self._encoder
        self.transport.write(data if encoder is None else encoder.encode(data))  # type: ignore[union-attr]

    def connectionLost(self, reason: Failure = None) -> None:  # type: ignore[assignment]
        """
        Fail what waits (pending commands with :class:`NSQConnectionError`,
        or ``connect``), tell the delegate once, fire :meth:`close`'s
        Deferreds.
        """
        if self._lost:
            return
        self._lost = True
        was_ready = self._state >= _STATE_READY
        self._state = _STATE_CLOSED
        for name in ("_read_call", "_close_call", "_tls_abort_call"):
            call = getattr(self, name)
            setattr(self, name, None)
            if call is not None and call.active():
                call.cancel()
        why = self._drop_reason if self._drop_reason is not None else reason
        if why is None:
            why = Failure(NSQConnectionError("connection to nsqd %s closed" % (self.address,)))
        error = NSQConnectionError(
            "connection to nsqd %s lost: %s" % (self.address, why.getErrorMessage()), why
        )
        pending, self._pending = self._pending, deque()
        for waiting, _ in pending:
            waiting.errback(Failure(error))
        # nsqd requeues whatever was in flight on a lost connection; none of
        # it can be answered any more.
        self.in_flight = 0
        if not was_ready:
            if not self._ready.called:
                if why.check(NSQError, NSQConnectionError):
                    self._ready.errback(why)
                else:
                    self._ready.errback(Failure(error))
        else:
            try:
                self.delegate.on_close(self, why)
            except Exception:
                self._log.failure("on_close of {address} failed", address=self.address)
        waiters, self._closed_waiters = self._closed_waiters, []
        for waiter in waiters:
            waiter.callback(None)

    # -- negotiation -----------------------------------------------------------

    def _received(self, data: bytes) -> None:
        """Plain bytes: frames for the handshake, or for the ready connection."""
        if self._state >= _STATE_READY:
            try:
                frames = self._parser.feed(data)
            except FrameError as error:
                self._drop(NSQConnectionError("malformed frame from nsqd %s: %s" % (self.address, error)))
                return
            self._frames(frames)
        elif self._state != _STATE_CONNECTING:
            self._handshake += data
            self._negotiate()

    def _negotiate(self) -> None:
        """Handle the handshake frames received, one at a time."""
        buf = self._handshake
        while self._state < _STATE_READY and self._drop_reason is None:
            try:
                cut = codec.split_frame(buf, MAX_HANDSHAKE_FRAME)
            except MalformedFrame as error:
                self._drop(NSQConnectionError("malformed frame from nsqd %s: %s" % (self.address, error)))
                return
            if cut is None:
                return
            frame_type, data, length = cut
            del buf[:length]
            if frame_type == FRAME_TYPE_RESPONSE and data == HEARTBEAT:
                self._write(codec.nop())
            elif frame_type == FRAME_TYPE_ERROR:
                self._drop(codec.parse_error(data))
            elif frame_type == FRAME_TYPE_MESSAGE:
                self._protocol_violation("a message before SUB")
            elif self._state == _STATE_IDENTIFYING:
                self._identified(data)
            elif self._state == _STATE_AUTH:
                self._authenticated(data)
            elif data != OK:
                self._protocol_violation("%r instead of OK after an upgrade" % (data[:64],))
            elif self._state == _STATE_TLS:
                self._start_compression()
            else:
                self._after_compression()
        if self._state >= _STATE_READY and buf and self._drop_reason is None:
            rest = bytes(buf)
            buf.clear()
            self._received(rest)

    def _identified(self, data: bytes) -> None:
        """IDENTIFY's reply: keep the features, start the upgrades granted."""
        if data == OK:
            response: Dict[str, Any] = {}
        else:
            try:
                response = json.loads(data)
            except ValueError:
                response = None  # type: ignore[assignment]
            if not isinstance(response, dict):
                self._protocol_violation("IDENTIFY reply is not a JSON object: %r" % (data[:64],))
                return
        self.identify_response = response
        max_rdy = response.get("max_rdy_count")
        if isinstance(max_rdy, int) and max_rdy > 0:
            self.max_rdy_count = max_rdy
        if response.get("tls_v1"):
            if self._handshake:
                self._protocol_violation("data in clear after the IDENTIFY reply granting TLS")
                return
            start_tls = getattr(self.transport, "startTLS", None)
            if start_tls is None:
                self._drop(NSQConnectionError("nsqd %s granted TLS but the transport cannot start it" % (self.address,)))
                return
            options = self.config.tls_options
            if options is None:
                from twisted.internet.ssl import optionsForClientTLS

                options = optionsForClientTLS(split_host_port(self.address)[0])
            self._state = _STATE_TLS
            start_tls(options)
            self.tls = True
            return
        self._start_compression()

    def _start_compression(self) -> None:
        """After TLS (if any): install the compression granted, or go on."""
        response = self.identify_response
        if response.get("snappy"):
            self._encoder = SnappyEncoder()
            self._decoder = SnappyDecoder()
            self.snappy = True
        elif response.get("deflate"):
            level = response.get("deflate_level") or self.config.deflate_level
            self._encoder = DeflateEncoder(level if 1 <= level <= 9 else self.config.deflate_level)
            self._decoder = DeflateDecoder()
            self.deflate = True
        else:
            self._after_compression()
            return
        self._state = _STATE_COMPRESSION
        # What followed the upgrade's frame in this read is compressed.
        rest = bytes(self._handshake)
        self._handshake.clear()
        if rest:
            try:
                for piece in self._decoder.decode_iter(rest):
                    self._handshake += piece
            except CompressionError as error:
                self._drop(NSQConnectionError("corrupt compressed data from nsqd %s: %s" % (self.address, error)))

    def _after_compression(self) -> None:
        """After the upgrades: AUTH if nsqd requires it, else ready."""
        if not self.identify_response.get("auth_required"):
            self._become_ready()
            return
        secret = self.config.auth_secret
        if not secret:
            self._drop(
                NSQConnectionError(
                    "nsqd %s requires AUTH but no auth_secret is configured" % (self.address,)
                )
            )
            return
        self._state = _STATE_AUTH
        self._write(codec.auth(secret))

    def _authenticated(self, data: bytes) -> None:
        try:
            response = json.loads(data)
        except ValueError:
            response = None
        if not isinstance(response, dict):
            self._protocol_violation("AUTH reply is not a JSON object: %r" % (data[:64],))
            return
        self.auth_response = response
        self._become_ready()

    def _become_ready(self) -> None:
        self._state = _STATE_READY
        if self.config.heartbeat_interval < 0:
            # No heartbeats: an idle connection receives nothing, rightly.
            call, self._read_call = self._read_call, None
            if call is not None and call.active():
                call.cancel()
        if not self._ready.called:
            self._ready.callback(self)

    def _cancel_connect(self, ready: "Deferred[NSQConnection]") -> None:
        """``connect`` was cancelled during negotiation: drop the connection."""
        if self.transport is not None and not self._lost:
            self._drop(NSQConnectionError("connecting to nsqd %s cancelled" % (self.address,)))

    # -- ready connection --------------------------------------------------------

    def _frames(self, frames: List[Tuple[int, bytes]]) -> None:
        """Dispatch frames of a ready connection (the hot path)."""
        delegate = self.delegate
        address = self.address
        for frame_type, data in frames:
            if frame_type == FRAME_TYPE_MESSAGE:
                if len(data) < MESSAGE_HEADER_LENGTH:
                    self._protocol_violation("message frame of %d bytes" % (len(data),))
                    return
                timestamp, attempts = _unpack_prefix(data, 0)
                message = Message(data[10:26], data[26:], timestamp, attempts, address, self)
                self.in_flight += 1
                self.last_message_time = self._last_read
                try:
                    delegate.on_message(self, message)
                except Exception:
                    self._log.failure("on_message of {address} failed", address=address)
            elif frame_type == FRAME_TYPE_RESPONSE:
                if data == HEARTBEAT:
                    self._write(codec.nop())
                else:
                    self._response(data)
            elif frame_type == FRAME_TYPE_ERROR:
                self._error(codec.parse_error(data))
            else:
                self._protocol_violation("unknown frame type %d" % (frame_type,))
            if self._drop_reason is not None or self._lost:
                return

    def _response(self, data: bytes) -> None:
        if not self._pending:
            self._log.warn(
                "nsqd {address} answered {data!r} to no command", address=self.address, data=data[:64]
            )
            return
        waiting, expected = self._pending.popleft()
        if data != expected:
            waiting.errback(
                Failure(NSQConnectionError("nsqd %s answered %r, expected %r" % (self.address, data[:64], expected)))
            )
            self._protocol_violation("unexpected response %r" % (data[:64],))
            return
        waiting.callback(None)
        self._maybe_finish_closing()

    def _error(self, error: NSQError) -> None:
        if not error.fatal:
            self._report_error(error)
            return
        # nsqd closes the connection after a fatal error and handles no
        # command sent after the one it refused: stop using it now rather
        # than send more into it.
        self._drop(error, abort=False)
        if self._pending:
            waiting, _ = self._pending.popleft()
            waiting.errback(Failure(error))
        else:
            self._report_error(error)

    def _report_error(self, error: NSQError) -> None:
        try:
            self.delegate.on_error(self, error)
        except Exception:
            self._log.failure("on_error of {address} failed", address=self.address)

    def _write(self, data: bytes) -> None:
        """Write one command, through the compression codec once there is one."""
        batch = self._batch
        if batch is not None:
            batch.append(data)
            return
        encoder = self._encoder
        if encoder is None:
            self.transport.write(data)  # type: ignore[union-attr]
        else:
            self.transport.write(encoder.encode(data))  # type: ignore[union-attr]

    def _command(self, data: bytes, expected: bytes = OK) -> "Deferred[None]":
        """Send a command nsqd answers; its Deferred fires on the answer."""
        if self._state != _STATE_READY or self._drop_reason is not None:
            state = _STATE_NAMES[self._state] if self._drop_reason is None else "closing"
            return fail(NSQConnectionError("connection to nsqd %s is %s" % (self.address, state)))
        waiting: "Deferred[None]" = Deferred()
        self._pending.append((waiting, expected))
        self._write(data)
        return waiting

    # -- commands --------------------------------------------------------------

    def subscribe(self, topic: str, channel: str) -> "Deferred[None]":
        """
        SUB: fires once subscribed; fails with :class:`NSQError`
        (``E_BAD_TOPIC``, ``E_BAD_CHANNEL`` checked before sending,
        ``E_INVALID`` when already subscribed, or nsqd's answer) or
        :class:`NSQConnectionError`.
        """
        try:
            codec.check_topic("SUB", topic)
            codec.check_channel("SUB", channel)
        except NSQError as error:
            return fail(error)
        if self._sub_sent:
            return fail(NSQError("E_INVALID", "cannot SUB in current state", fatal=False))
        waiting = self._command(codec.sub(topic, channel))
        if self._state == _STATE_READY:
            self._sub_sent = True

        def subscribed(result: None) -> None:
            self.subscribed = True

        return waiting.addCallback(subscribed)

    def publish(self, topic: str, body: bytes) -> "Deferred[None]":
        """PUB one message; fires on OK, fails with :class:`NSQError` or :class:`NSQConnectionError`."""
        try:
            codec.check_topic("PUB", topic)
        except NSQError as error:
            return fail(error)
        return self._command(codec.pub(topic, body))

    def multi_publish(self, topic: str, bodies: List[bytes]) -> "Deferred[None]":
        """MPUB several messages at once (atomically); as :meth:`publish`."""
        try:
            codec.check_topic("MPUB", topic)
        except NSQError as error:
            return fail(error)
        bodies = list(bodies)
        if not bodies:
            return fail(NSQError("E_BAD_BODY", "MPUB invalid message count 0", fatal=False))
        return self._command(codec.mpub(topic, bodies))

    def deferred_publish(self, topic: str, delay: float, body: bytes) -> "Deferred[None]":
        """DPUB one message delivered ``delay`` seconds from now; as :meth:`publish`."""
        try:
            codec.check_topic("DPUB", topic)
        except NSQError as error:
            return fail(error)
        if delay < 0:
            return fail(NSQError("E_INVALID", "DPUB timeout %r out of range" % (delay,), fatal=False))
        return self._command(codec.dpub(topic, int(round(delay * 1000)), body))

    def send_rdy(self, count: int) -> None:
        """
        RDY: let nsqd send up to ``count`` messages at once; ignored unless
        the connection is ready.

        :raises ValueError: ``count`` outside ``0..max_rdy_count`` (nsqd
            would drop the connection).
        """
        if not 0 <= count <= self.max_rdy_count:
            raise ValueError("RDY %d outside 0..%d" % (count, self.max_rdy_count))
        if self._state != _STATE_READY:
            return
        self.rdy_count = count
        self._write(codec.rdy(count))

    # -- MessageDelegate ---------------------------------------------------------

    def _ignored_after_close(self, verb: str, message: Message) -> bool:
        if not self._lost:
            return False
        if not self._late_ack_logged:
            self._late_ack_logged = True
            self._log.info(
                "{verb} of message {id} ignored: the connection to nsqd {address} is closed"
                " (nsqd requeues its messages)",
                verb=verb,
                id=message.id.decode("ascii", "replace"),
                address=self.address,
            )
        return True

    def on_finish(self, message: Message) -> None:
        """Send FIN for ``message`` and tell the delegate."""
        if self._ignored_after_close("FIN", message):
            return
        self._write(codec.fin(message.id))
        self.in_flight -= 1
        self.delegate.on_message_finished(self, message)
        if self._draining:
            self._maybe_finish_closing()

    def on_requeue(self, message: Message, delay: Optional[float], backoff: bool) -> None:
        """Send REQ for ``message`` (``delay`` ``None``: go-nsq's computed delay)."""
        if self._ignored_after_close("REQ", message):
            return
        if delay is None:
            delay = self.config.requeue_delay(message.attempts)
        self._write(codec.req(message.id, int(round(delay * 1000))))
        self.in_flight -= 1
        self.delegate.on_message_requeued(self, message, backoff)
        if self._draining:
            self._maybe_finish_closing()

    def on_touch(self, message: Message) -> None:
        """Send TOUCH for ``message``."""
        if self._ignored_after_close("TOUCH", message):
            return
        self._write(codec.touch(message.id))

    # -- closing ---------------------------------------------------------------

    def close(self) -> "Deferred[None]":
        """
        Close cleanly; fires once the connection is gone (never fails).

        No command may be sent any more.  A subscribed connection sends CLS
        and waits for CLOSE_WAIT, then for the messages in flight to be
        answered (at most nsqd's message timeout, after which nsqd requeues
        them anyway); any connection waits for the answers to commands
        already sent.  Those waits are bounded by ``close_timeout``.  Then
        the transport is closed (a TLS one is aborted if the server does not
        answer the close_notify within ``close_timeout``).
        """
        done: "Deferred[None]" = Deferred()
        if self._lost:
            done.callback(None)
            return done
        self._closed_waiters.append(done)
        if self._state == _STATE_CLOSING or self._disconnecting:
            return done
        if self._state < _STATE_READY:
            if self.transport is None:
                # Never connected: there is nothing to close.
                self._closed_waiters.remove(done)
                done.callback(None)
            else:
                self._drop(NSQConnectionError("connection to nsqd %s closed while connecting" % (self.address,)))
            return done
        self._state = _STATE_CLOSING
        self._close_call = self.clock.callLater(self.config.close_timeout, self._disconnect)
        if self._sub_sent:
            waiting: "Deferred[None]" = Deferred()
            self._pending.append((waiting, CLOSE_WAIT))
            self._write(codec.cls())
            # Losing the connection fails it; that is fine here.
            waiting.addErrback(lambda failure: None)
        else:
            self._maybe_finish_closing()
        return done

    def _maybe_finish_closing(self) -> None:
        """While closing: disconnect once nothing is awaited any more."""
        if self._state != _STATE_CLOSING or self._disconnecting or self._pending:
            return
        if self.in_flight > 0:
            if not self._draining:
                self._draining = True
                call, self._close_call = self._close_call, None
                if call is not None and call.active():
                    call.cancel()
                msg_timeout = self.identify_response.get("msg_timeout")
                wait = msg_timeout / 1000.0 if isinstance(msg_timeout, (int, float)) and msg_timeout > 0 else 60.0
                self._close_call = self.clock.callLater(wait, self._disconnect)
            return
        self._disconnect()

    def _disconnect(self) -> None:
        """Close the transport (after pending writes); bound a TLS shutdown."""
        if self._disconnecting or self._lost:
            return
        self._disconnecting = True
        call, self._close_call = self._close_call, None
        if call is not None and call.active():
            call.cancel()
        # The last FIN may still be held back by the read being handled.
        self._flush_batch()
        self.transport.loseConnection()  # type: ignore[union-attr]
        if self.tls:
            # Twisted's TLS waits for the peer's close_notify, which a
            # server may never send.
            self._tls_abort_call = self.clock.callLater(self.config.close_timeout, self._abort)

    def _abort(self) -> None:
        self._tls_abort_call = None
        if not self._lost:
            self.transport.abortConnection()  # type: ignore[union-attr]

    def _check_read(self) -> None:
        """The read deadline: drop a connection silent for ``read_timeout``."""
        self._read_call = None
        timeout = self.config.read_timeout
        idle = self.clock.seconds() - self._last_read
        if idle >= timeout:
            self._drop(
                NSQConnectionError("no data from nsqd %s for %gs (read timeout)" % (self.address, timeout))
            )
            return
        self._read_call = self.clock.callLater(timeout - idle, self._check_read)

    def _protocol_violation(self, what: str) -> None:
        self._drop(NSQConnectionError("protocol error from nsqd %s: %s" % (self.address, what)))

    def _drop(self, error: Exception, abort: bool = True) -> None:
        """
        End the connection because of ``error``, which becomes the reason
        given to everything waiting (at ``connectionLost``); nothing more
        is read or sent.

        :param abort: abort at once (bad data); else close after what was
            written (nsqd is closing the connection itself).
        """
        if self._drop_reason is not None or self._lost:
            return
        self._drop_reason = Failure(error)
        if not isinstance(error, NSQError):
            self._log.info("dropping connection to nsqd {address}: {error}", address=self.address, error=str(error))
        if abort:
            self.transport.abortConnection()  # type: ignore[union-attr]
        else:
            self._disconnect()


class _ConnectionFactory(Factory):
    """Builds the one :class:`NSQConnection` of a :func:`connect` call."""

    noisy = False

    def __init__(self, connection: NSQConnection) -> None:
        self.connection = connection

    def buildProtocol(self, addr: Any) -> NSQConnection:
        return self.connection


def connect(
    reactor: Any,
    address: str,
    config: Optional[ConnectionConfig] = None,
    delegate: Optional[ConnectionDelegate] = None,
    clock: Optional[IReactorTime] = None,
) -> "Deferred[NSQConnection]":
    """
    Connect to the nsqd at ``address`` (``host:port``) and negotiate: TCP
    (within ``dial_timeout``), magic, IDENTIFY, TLS / snappy / deflate,
    AUTH.

    :param reactor: makes the TCP connection.
    :param delegate: told about messages, errors and the end of the
        connection (``None``: errors are logged).
    :param clock: times the connection's deadlines; the reactor by default.
    :return: a Deferred firing with the ready :class:`NSQConnection`, or
        failing with :class:`NSQError` (nsqd refused IDENTIFY or AUTH) or
        :class:`NSQConnectionError` (no connection, or lost, or no AUTH
        secret for an nsqd that requires one).  Cancelling it aborts.
    :raises ValueError: a malformed ``address``.
    """
    config = config if config is not None else ConnectionConfig()
    host, port = split_host_port(address)
    connection = NSQConnection(address, config, delegate, clock if clock is not None else reactor)
    attempt: "Deferred[Any]" = client_endpoint(reactor, host, port, config.dial_timeout).connect(
        _ConnectionFactory(connection)
    )

    def connected(protocol: Any) -> "Deferred[NSQConnection]":
        return connection.when_ready()

    def failed(failure: Failure) -> Failure:
        if failure.check(NSQError, NSQConnectionError, CancelledError):
            return failure
        if failure.check(ConnectingCancelledError):
            return Failure(CancelledError())
        return Failure(
            NSQConnectionError(
                "connecting to nsqd %s failed: %s" % (address, failure.getErrorMessage()), failure
            )
        )

    return attempt.addCallback(connected).addErrback(failed)
