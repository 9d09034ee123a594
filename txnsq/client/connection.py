# -*- test-case-name: tests.test_client_connection -*-
"""
One client connection to one nsqd: :class:`NSQConnection` (a Twisted
``Protocol``) and :func:`connect`; its settings are
:class:`ConnectionConfig <txnsq.client.config.ConnectionConfig>`, what it reports to its owner
a :class:`ConnectionDelegate <txnsq.client.delegate.ConnectionDelegate>`.

A connection goes through the handshake's states (identifying, tls,
compression, auth: :class:`txnsq.protocol.handshake.ClientHandshake`, whose
steps this module carries out), then *ready*: :func:`connect`'s Deferred
fires and SUB, PUB, MPUB, DPUB, RDY, FIN, REQ and TOUCH may be sent
(:mod:`txnsq.client.commands`); then *closing* (a clean :meth:`NSQConnection.close`:
CLS, CLOSE_WAIT, the messages in flight answered, each wait bounded) and
*closed*.  Once ready, frames go through
:class:`txnsq.protocol.frames.FrameParser` in bulk.

Responses (``OK``, ``CLOSE_WAIT``, ``E_*``) answer commands in the order
they were sent, so they are matched to a queue of waiting Deferreds (kept
by the connection's :class:`ConnectionCommands <txnsq.client.commands.ConnectionCommands>`).  The
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

import struct
from typing import Any, Dict, List, Optional, Tuple

from twisted.internet.defer import CancelledError, Deferred, fail
from twisted.internet.error import ConnectingCancelledError
from twisted.internet.interfaces import IDelayedCall, IReactorTime
from twisted.internet.protocol import Factory, Protocol
from twisted.logger import Logger
from twisted.python.failure import Failure

from txnsq.addresses import client_endpoint, split_host_port
from txnsq.client.commands import ConnectionCommands
from txnsq.client.config import ConnectionConfig
from txnsq.client.delegate import ConnectionDelegate, NSQConnectionError, NullDelegate
from txnsq.client.message import Message
from txnsq.client.states import (
    NEGOTIATING,
    STATE_CLOSED,
    STATE_CLOSING,
    STATE_CONNECTING,
    STATE_IDENTIFYING,
    STATE_NAMES,
    STATE_READY,
)
from txnsq.protocol import v2_client as codec
from txnsq.protocol.compression import CompressionError
from txnsq.protocol.frames import (
    FRAME_TYPE_ERROR,
    FRAME_TYPE_MESSAGE,
    FRAME_TYPE_RESPONSE,
    FrameError,
    FrameParser,
)
from txnsq.protocol.handshake import ClientHandshake, HandshakeError, Ready, Send, StartCompression, StartTLS
from txnsq.protocol.handshake.client import MAX_HANDSHAKE_FRAME
from txnsq.protocol.message import MESSAGE_HEADER_LENGTH
from txnsq.protocol.v2_client import HEARTBEAT, NSQError

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

_unpack_prefix = struct.Struct(">qH").unpack_from


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
        self.delegate: ConnectionDelegate = delegate if delegate is not None else NullDelegate()
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
        self._state = STATE_CONNECTING
        self._ready: "Deferred[NSQConnection]" = Deferred(self._cancel_connect)
        self._parser = FrameParser(config.max_frame_size)
        self._shake = ClientHandshake(
            config.identify_body(),
            config.auth_secret,
            deflate_level=config.deflate_level,
            max_frame_size=MAX_HANDSHAKE_FRAME,
        )
        self._encoder: Any = None
        self._decoder: Any = None
        # Writes of one read are compressed together (see _write).
        self._batch: Optional[List[bytes]] = None
        self._sub_sent = False
        self._last_read = 0.0
        self._read_call: Optional[IDelayedCall] = None
        self._close_call: Optional[IDelayedCall] = None
        self._tls_abort_call: Optional[IDelayedCall] = None
        self._disconnecting = False
        self._closed_waiters: List["Deferred[None]"] = []
        self._drop_reason: Optional[Failure] = None
        self._lost = False
        # The commands sent and their answers; the messages' delegate.
        self._commands = ConnectionCommands(self, self._write, self._refusal, self._maybe_finish_closing)

    def __repr__(self) -> str:
        return "<NSQConnection %s %s>" % (self.address, STATE_NAMES[self._state])

    # -- state ---------------------------------------------------------------

    @property
    def state(self) -> str:
        """The connection state's name (``identifying`` ... ``closed``)."""
        return STATE_NAMES[self._state]

    def is_ready(self) -> bool:
        """Whether commands may be sent (connected, negotiated, not closing)."""
        return self._state == STATE_READY and self._drop_reason is None

    def when_ready(self) -> "Deferred[NSQConnection]":
        """
        Fires with this connection once negotiation is done; fails with
        :class:`NSQError` (an ``E_*`` reply, e.g. ``E_UNAUTHORIZED``) or
        :class:`NSQConnectionError`.  Only one caller may wait (``connect``).
        """
        return self._ready

    def _refusal(self) -> str:
        """Why commands may not be sent now, for the error: the state, or ``closing`` once dropped."""
        return STATE_NAMES[self._state] if self._drop_reason is None else "closing"

    # -- commands ----------------------------------------------------------------

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
        waiting = self._commands.send(codec.sub(topic, channel))
        if self._state == STATE_READY:
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
        return self._commands.send(codec.pub(topic, body))

    def multi_publish(self, topic: str, bodies: List[bytes]) -> "Deferred[None]":
        """MPUB several messages at once (atomically); as :meth:`publish`."""
        try:
            codec.check_topic("MPUB", topic)
        except NSQError as error:
            return fail(error)
        bodies = list(bodies)
        if not bodies:
            return fail(NSQError("E_BAD_BODY", "MPUB invalid message count 0", fatal=False))
        return self._commands.send(codec.mpub(topic, bodies))

    def deferred_publish(self, topic: str, delay: float, body: bytes) -> "Deferred[None]":
        """DPUB one message delivered ``delay`` seconds from now; as :meth:`publish`."""
        try:
            codec.check_topic("DPUB", topic)
        except NSQError as error:
            return fail(error)
        if delay < 0:
            return fail(NSQError("E_INVALID", "DPUB timeout %r out of range" % (delay,), fatal=False))
        return self._commands.send(codec.dpub(topic, int(round(delay * 1000)), body))

    def send_rdy(self, count: int) -> None:
        """
        RDY: let nsqd send up to ``count`` messages at once; ignored unless
        the connection is ready.

        :raises ValueError: ``count`` outside ``0..max_rdy_count`` (nsqd
            would drop the connection).
        """
        if not 0 <= count <= self.max_rdy_count:
            raise ValueError("RDY %d outside 0..%d" % (count, self.max_rdy_count))
        if self._state != STATE_READY:
            return
        self.rdy_count = count
        self._write(codec.rdy(count))

    # A MessageDelegate too, as before; the messages read here answer
    # through the commands directly.

    def on_finish(self, message: Message) -> None:
        """Send FIN for ``message`` and tell the delegate."""
        self._commands.on_finish(message)

    def on_requeue(self, message: Message, delay: Optional[float], backoff: bool) -> None:
        """Send REQ for ``message`` (``delay`` ``None``: go-nsq's computed delay)."""
        self._commands.on_requeue(message, delay, backoff)

    def on_touch(self, message: Message) -> None:
        """Send TOUCH for ``message``."""
        self._commands.on_touch(message)

    # -- Protocol ------------------------------------------------------------

    def connectionMade(self) -> None:
        """Send the magic and IDENTIFY; start the read deadline."""
        self._state = STATE_IDENTIFYING
        self._last_read = self.clock.seconds()
        self.transport.write(self._shake.initiate())  # type: ignore[union-attr]
        if self.config.read_timeout > 0:
            self._read_call = self.clock.callLater(self.config.read_timeout, self._check_read)

    def dataReceived(self, data: bytes) -> None:
        """Decompress if need be, then negotiate or dispatch the frames."""
        if self._lost or self._drop_reason is not None:
            return
        self._last_read = self.clock.seconds()
        decoder = self._decoder
        if decoder is None:
            if self._state < STATE_READY:
                # Negotiating: an upgrade may start within this read, and
                # what was written before it must go out before it.
                self._received(data)
                return
            # The FINs for a read's messages go out in one write: a write
            # each cost more than the rest of the client's work per message
            # (bench/system/consumer.py).
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
        was_ready = self._state >= STATE_READY
        self._state = STATE_CLOSED
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
        self._commands.connection_lost(error)
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
        if self._state >= STATE_READY:
            try:
                frames = self._parser.feed(data)
            except FrameError as error:
                self._drop(NSQConnectionError("malformed frame from nsqd %s: %s" % (self.address, error)))
                return
            self._frames(frames)
        elif self._state != STATE_CONNECTING:
            self._negotiate(data)

    def _negotiate(self, data: bytes) -> None:
        """Hand handshake bytes to the machine and carry out its steps."""
        shake = self._shake
        try:
            steps = shake.receive(data)
        except NSQError as error:
            self._drop(error)
            return
        except HandshakeError as error:
            self._drop(NSQConnectionError("nsqd %s: %s" % (self.address, error)))
            return
        except CompressionError as error:
            self._drop(NSQConnectionError("corrupt compressed data from nsqd %s: %s" % (self.address, error)))
            return
        response = self.identify_response = shake.identify_response
        max_rdy = response.get("max_rdy_count")
        if isinstance(max_rdy, int) and max_rdy > 0:
            self.max_rdy_count = max_rdy
        for step in steps:
            if isinstance(step, Send):
                self._write(step.data)
            elif isinstance(step, StartTLS):
                if not self._start_tls():
                    return
            elif isinstance(step, StartCompression):
                self._encoder = step.encoder
                self._decoder = step.decoder
                self.snappy = step.name == "snappy"
                self.deflate = step.name == "deflate"
            elif isinstance(step, Ready):
                self.auth_response = shake.auth_response
                self._become_ready()
                if step.rest and self._drop_reason is None:
                    self._received(step.rest)
                return
        self._state = NEGOTIATING[shake.state]

    def _start_tls(self) -> bool:
        """IDENTIFY granted TLS: start it (``False``: the transport cannot)."""
        start_tls = getattr(self.transport, "startTLS", None)
        if start_tls is None:
            self._drop(NSQConnectionError("nsqd %s granted TLS but the transport cannot start it" % (self.address,)))
            return False
        options = self.config.tls_options
        if options is None:
            from twisted.internet.ssl import optionsForClientTLS

            options = optionsForClientTLS(split_host_port(self.address)[0])
        start_tls(options)
        self.tls = True
        return True

    def _become_ready(self) -> None:
        self._state = STATE_READY
        self._commands.accepting = self._drop_reason is None
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
        commands = self._commands
        for frame_type, data in frames:
            if frame_type == FRAME_TYPE_MESSAGE:
                if len(data) < MESSAGE_HEADER_LENGTH:
                    self._protocol_violation("message frame of %d bytes" % (len(data),))
                    return
                timestamp, attempts = _unpack_prefix(data, 0)
                message = Message(data[10:26], data[26:], timestamp, attempts, address, commands)
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
                    # A command's answer; a wrong one drops the connection.
                    problem = commands.answer(data)
                    if problem is not None:
                        self._protocol_violation(problem)
            elif frame_type == FRAME_TYPE_ERROR:
                self._error(codec.parse_error(data))
            else:
                self._protocol_violation("unknown frame type %d" % (frame_type,))
            if self._drop_reason is not None or self._lost:
                return

    def _error(self, error: NSQError) -> None:
        if not error.fatal:
            self._report_error(error)
            return
        # nsqd closes the connection after a fatal error and handles no
        # command sent after the one it refused: stop using it now rather
        # than send more into it.
        self._drop(error, abort=False)
        if not self._commands.fail_oldest(error):
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

    # -- closing -----------------------------------------------------------------

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
        if self._state == STATE_CLOSING or self._disconnecting:
            return done
        if self._state < STATE_READY:
            if self.transport is None:
                # Never connected: there is nothing to close.
                self._closed_waiters.remove(done)
                done.callback(None)
            else:
                self._drop(NSQConnectionError("connection to nsqd %s closed while connecting" % (self.address,)))
            return done
        self._state = STATE_CLOSING
        self._commands.accepting = False
        self._close_call = self.clock.callLater(self.config.close_timeout, self._disconnect)
        if self._sub_sent:
            self._commands.close_wait()
        else:
            self._maybe_finish_closing()
        return done

    def _maybe_finish_closing(self) -> None:
        """While closing: disconnect once nothing is awaited any more."""
        commands = self._commands
        if self._state != STATE_CLOSING or self._disconnecting or commands.waiting:
            return
        if self.in_flight > 0:
            if not commands.draining:
                commands.draining = True
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
        self._commands.accepting = False
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
