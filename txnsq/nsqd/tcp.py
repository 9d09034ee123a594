# -*- test-case-name: tests.test_tcp -*-
"""
The nsqd V2 TCP protocol adapter: bytes from a transport become codec and
broker calls, broker events become frames on the transport.

The parsing lives in :mod:`txnsq.protocol.v2`, the handshake's rules in
:mod:`txnsq.protocol.handshake`, the commands in :mod:`txnsq.nsqd.commands`
(a part each connection makes and hands its reads to) and the queueing in
the broker core; this module keeps the connection's life: reads (through
the compression decoder), the output buffer (through the encoder), TLS,
heartbeats and the read deadline.
"""

from __future__ import annotations

import struct
from itertools import count as _count
from typing import TYPE_CHECKING, Any, Dict, List, Optional, Set, Tuple

from twisted.internet.interfaces import IAddress, IDelayedCall, IHandshakeListener, IReactorTime, ITransport
from twisted.internet.protocol import Factory, Protocol
from twisted.logger import Logger
from twisted.python.failure import Failure
from zope.interface import implementer

from txnsq.addresses import go_address
from txnsq.mirror.hold import MirrorHold
from txnsq.nsqd.commands import STATE_CLOSED, STATE_CLOSING, STATE_INIT, STATE_SUBSCRIBED, V2Commands
from txnsq.nsqd.features import ServerFeatures
from txnsq.nsqd.listener import set_no_delay
from txnsq.nsqd.output import scheduler_for
from txnsq.nsqd.tls import cipher_suite_name, tls_version_name
from txnsq.protocol.compression import CompressionError
from txnsq.protocol.errors import ProtocolError, protocol_error
from txnsq.protocol.frames import FRAME_TYPE_ERROR, HEARTBEAT_FRAME, encode_frame
from txnsq.protocol.handshake import BadMagic, Send, StartCompression, StartTLS, Step
from txnsq.protocol.handshake.server import BAD_PROTOCOL_FRAME, MAGIC_V2
from txnsq.protocol.identify import DEFAULT_OUTPUT_BUFFER_SIZE, Identity
from txnsq.protocol import message as _message

if TYPE_CHECKING:
    from txnsq.nsqd.broker import Broker
    from txnsq.nsqd.channel import Channel
    from txnsq.nsqd.topic import Topic
    from txnsq.protocol.auth import AuthState

__all__ = ["BAD_PROTOCOL_FRAME", "MAGIC_V2", "NSQDFactory", "NSQDProtocol", "ServerFeatures"]
__all__ += ["STATE_CLOSED", "STATE_CLOSING", "STATE_INIT", "STATE_SUBSCRIBED"]

#: Seconds a client has to finish the TLS handshake it asked for (Go's
#: ``UpgradeTLS`` deadline).
TLS_HANDSHAKE_TIMEOUT = 5.0
#: Seconds a closing TLS connection waits for the client's close_notify
#: before the socket is closed regardless.  Twisted's TLS ``loseConnection``
#: would wait forever; Go closes after writing its own alert, which it
#: allows five seconds.
TLS_CLOSE_TIMEOUT = 5.0

# Go's numbers for these states in stats (stateInit 0, stateDisconnected 1,
# stateSubscribed 3, stateClosing 4).
_GO_STATES = {STATE_INIT: 0, STATE_SUBSCRIBED: 3, STATE_CLOSING: 4, STATE_CLOSED: 1}

# Connection numbers, in connection order (Go's clientIDSequence).
_connection_ids = _count(1)

_MESSAGE_FRAME_HEADER = struct.Struct(">ii")
_pack_message_frame_header = _MESSAGE_FRAME_HEADER.pack
_FRAME_TYPE_MESSAGE = 2
#: The compiled frame encoder (header and payload in one allocation), or
#: None: the pure path appends the header and the payload apart, which
#: costs less in Python than joining them here.
_compiled_message_frame = None if _message.compiled is None else _message.message_frame


@implementer(IHandshakeListener)
class NSQDProtocol(Protocol):
    """
    One client connection speaking NSQ's V2 protocol.

    It is also the broker's consumer for the channel it subscribes to:
    ``ready_count``, ``in_flight_count``, ``msg_timeout`` and
    :meth:`send_message` are what :class:`txnsq.nsqd.channel.Channel` uses;
    and, for mirrored topics, a producer the mirror gate holds
    (:meth:`mirror_release`, :meth:`mirror_fail`).
    Its commands (:class:`txnsq.nsqd.commands.V2Commands`) set ``state``,
    ``channel``, ``ready_count`` and the counters, and write through
    :meth:`write` and :meth:`send_error`.

    :ivar state: ``STATE_INIT``, ``STATE_SUBSCRIBED``, ``STATE_CLOSING``
        (after CLS) or ``STATE_CLOSED``.
    :ivar channel: the channel subscribed to, or ``None``.
    :ivar identity: what the client sent in IDENTIFY, or ``None``.
    :ivar dead: nothing more is read or run: the connection is being
        dropped, or is gone.
    :ivar mirror_hold: its output held for the mirror
        (:class:`txnsq.mirror.hold.MirrorHold`).
    """

    _log = Logger()
    # Always set by makeConnection before any other method runs.
    transport: ITransport  # type: ignore[assignment]

    def __init__(
        self, broker: Broker, clock: IReactorTime, features: ServerFeatures
    ) -> None:
        options = broker.options
        self.broker = broker
        self.clock = clock
        self.features = features
        self.state = STATE_INIT
        self.channel: Optional[Channel] = None
        self.identity: Optional[Identity] = None
        # Consumer attributes read by the channel.
        self.ready_count = 0
        self.in_flight_count = 0
        self.msg_timeout: float = options.msg_timeout
        self.sample_rate = 0
        # Counters, reported in stats.
        self.conn_id = next(_connection_ids)
        self.message_count = 0
        self.finish_count = 0
        self.requeue_count = 0
        #: Messages published, by topic (PUB, DPUB: 1; MPUB: the batch).
        self.pub_counts: Dict[str, int] = {}
        self.connect_time = clock.seconds()
        self.remote_address = ""
        self.client_id = ""
        self.hostname = ""
        self.user_agent = ""
        # Go's default heartbeat before IDENTIFY is half the client timeout.
        self.heartbeat_interval: float = options.client_timeout / 2
        # Upgrades (IDENTIFY tls_v1, snappy, deflate), reported in stats.
        self.tls = False
        self.snappy = False
        self.deflate = False
        self._encoder: Any = None  # txnsq.protocol.compression encoder
        self._decoder: Any = None
        # Frames written while a read is handled, or in one reactor turn,
        # go out in one transport write (compressed together), or at once
        # past output_buffer_size: see txnsq.nsqd.output.
        self._out: List[bytes] = []
        self._out_size = 0
        self._out_limit = DEFAULT_OUTPUT_BUFFER_SIZE
        # With --mem-queue-size=0: the publishes answered in _out, checked
        # after the barrier (_confirm_published): (place, topic, verb).
        self._unconfirmed: List[Tuple[int, Topic, bytes]] = []
        self._has_output = False
        self._flusher = scheduler_for(clock)
        # IDENTIFY, the upgrades and AUTH's authorizations.
        self._shake = features.handshake(options)
        # Reading is paused while the auth server is asked (pause_reading);
        # MirrorHold leaves it paused then.
        self._blocked = False
        self.dead = False
        self.mirror_hold = MirrorHold()
        self._heartbeat_call: Optional[IDelayedCall] = None
        self._read_deadline_call: Optional[IDelayedCall] = None
        # TLS deadlines: finishing the handshake, and closing.
        self._handshake_call: Optional[IDelayedCall] = None
        self._tls_close_call: Optional[IDelayedCall] = None
        self._last_read = 0.0
        self._commands = V2Commands(self, self._shake)

    # -- connection life -------------------------------------------------

    def connectionMade(self) -> None:
        """Start the heartbeat and the read deadline for this client."""
        set_no_delay(self.transport)
        self._last_read = self.clock.seconds()
        self.remote_address, host = go_address(self.transport.getPeer())
        # Until IDENTIFY, Go names a client by its remote IP.
        self.client_id = self.hostname = host
        factory = getattr(self, "factory", None)
        if factory is not None:
            factory.clients.add(self)
        self._schedule_heartbeat()

    def connectionLost(self, reason: Failure = None) -> None:  # type: ignore[assignment]
        """Leave the channel (requeueing in-flight messages) and stop timers."""
        self.dead = True
        self.state = STATE_CLOSED
        self._cancel_timers()
        for call in (self._handshake_call, self._tls_close_call):
            if call is not None and call.active():
                call.cancel()
        self._handshake_call = self._tls_close_call = None
        self._commands.connection_lost()
        if self.tls and reason is not None and _is_tls_failure(reason):
            self._log.info(
                "client({peer}) TLS failed: {error}",
                peer=self.peer_name(),
                error=reason.getErrorMessage(),
            )
        if self.channel is not None:
            channel, self.channel = self.channel, None
            channel.remove_consumer(self)
        factory = getattr(self, "factory", None)
        if factory is not None:
            factory.clients.discard(self)

    def dataReceived(self, data: bytes) -> None:
        """Feed bytes to the command parser and run every complete command."""
        if self.dead:
            return
        hold = self.mirror_hold
        if hold.held:
            # Kept, and reading paused, until the mirror confirms.
            hold.keep(data)
            if self.transport is not None and not self._blocked:
                self.transport.pauseProducing()  # type: ignore[attr-defined]
            return
        flusher = self._flusher
        flusher.reading()
        try:
            self._received(data)
        finally:
            flusher.done_reading()

    def _received(self, data: bytes) -> None:
        self._last_read = self.clock.seconds()
        if not self._shake.has_magic:
            data = self._read_magic(data)
            if not data:
                return
        decoder = self._decoder
        if decoder is None:
            self._commands.received(data)
            return
        commands = self._commands
        try:
            for piece in decoder.decode_iter(data):
                commands.received(piece)
                if self.dead:
                    return
        except CompressionError as error:
            self._log.info(
                "client({peer}) - corrupt compressed data: {error}",
                peer=self.peer_name(),
                error=error,
            )
            self.abort()

    def _read_magic(self, data: bytes) -> bytes:
        """Consume the 4-byte protocol magic; return the bytes after it."""
        try:
            return self._shake.receive_magic(data)
        except BadMagic as error:
            self._log.info("client({peer}) bad protocol magic {magic!r}", peer=self.peer_name(), magic=error.magic)
            self.transport.write(BAD_PROTOCOL_FRAME)
            self.abort()
            return b""

    def _tls_connection(self) -> Any:
        """The OpenSSL connection once TLS is on, else ``None``."""
        if not self.tls or self.transport is None:
            return None
        get_handle = getattr(self.transport, "getHandle", None)
        handle = get_handle() if get_handle is not None else None
        return handle if hasattr(handle, "get_cipher_name") else None

    @property
    def tls_version(self) -> str:
        """The TLS version in Go's spelling (``TLS1.3``), for stats."""
        connection = self._tls_connection()
        if connection is None:
            return ""
        return tls_version_name(connection.get_protocol_version_name() or "")

    @property
    def tls_cipher_suite(self) -> str:
        """The negotiated cipher suite (its IANA name, as Go's), for stats."""
        connection = self._tls_connection()
        if connection is None:
            return ""
        return cipher_suite_name(connection.get_cipher_name() or "")

    @property
    def stats_state(self) -> int:
        """The connection state as Go numbers it in stats."""
        return _GO_STATES[self.state]

    # -- consumer interface ----------------------------------------------

    def send_message(self, data: bytes) -> None:
        """Write one message (payload with attempts already counted)."""
        self.message_count += 1
        # _write, inlined for the hot path, with the header and the payload
        # appended apart (the join at flush time copies them once).
        out = self._out
        if _compiled_message_frame is not None:
            out.append(_compiled_message_frame(data))
        else:
            out.append(_pack_message_frame_header(len(data) + 4, _FRAME_TYPE_MESSAGE))
            out.append(data)
        self._out_size += len(data) + 8
        if self._out_size >= self._out_limit:
            self.flush_output()
        elif not self._has_output:
            self._has_output = True
            self._flusher.has_output(self)

    # -- for the commands --------------------------------------------------

    def identified(self, identity: Identity, steps: List[Step]) -> None:
        """
        IDENTIFY was accepted: take the client's settings (names, message
        timeout, sampling, heartbeats, output buffering), then write the
        reply and start the upgrades in Go's order, each confirmed by an
        OK sent through it: TLS, then compression on top.
        """
        self.identity = identity
        self.client_id = identity.client_id
        self.hostname = identity.hostname
        self.user_agent = identity.user_agent
        self.msg_timeout = identity.msg_timeout
        self.sample_rate = identity.sample_rate
        self.heartbeat_interval = identity.heartbeat_interval
        self._schedule_heartbeat()
        if identity.output_buffer_size <= 0 or identity.output_buffer_timeout <= 0:
            self._out_limit = 0  # buffering disabled: encode every frame at once
        else:
            self._out_limit = identity.output_buffer_size
        for step in steps:
            if isinstance(step, Send):
                self.write(step.data)
            elif isinstance(step, StartTLS):
                self._start_tls()
            elif isinstance(step, StartCompression):
                # What came before goes out uncompressed.
                self.flush_output()
                self._encoder = step.encoder
                self._decoder = step.decoder
                self.snappy = step.name == "snappy"
                self.deflate = step.name == "deflate"

    def pause_reading(self) -> None:
        """Stop reading while the auth server is asked (commands wait)."""
        self._blocked = True
        self.transport.pauseProducing()  # type: ignore[attr-defined]

    def resume_reading(self) -> None:
        """The auth server answered: read again."""
        self._blocked = False
        self.transport.resumeProducing()  # type: ignore[attr-defined]

    @property
    def auth_state(self) -> Optional[AuthState]:
        """The authorizations of the last AUTH, else ``None``."""
        return self._shake.auth_state

    def close(self) -> None:
        """The channel was deleted or closed: disconnect, as Go nsqd does."""
        self.channel = None
        if self.transport is not None and not self.dead:
            self.abort()

    def handshakeCompleted(self) -> None:
        """The TLS handshake is done: the handshake deadline no longer applies."""
        call, self._handshake_call = self._handshake_call, None
        if call is not None and call.active():
            call.cancel()

    def disconnect(self) -> None:
        """
        Close the connection once pending writes are flushed; under TLS,
        after at most :data:`TLS_CLOSE_TIMEOUT` even if the client never
        answers the close_notify.
        """
        self.flush_output()
        self.transport.loseConnection()
        if self.tls and self._tls_close_call is None and self.state != STATE_CLOSED:
            self._tls_close_call = self.clock.callLater(
                TLS_CLOSE_TIMEOUT, self._abort_transport
            )

    def _abort_transport(self) -> None:
        self._tls_close_call = None
        self.transport.abortConnection()  # type: ignore[attr-defined]

    def _handshake_timed_out(self) -> None:
        self._handshake_call = None
        self._log.info(
            "client({peer}) TLS handshake timed out after {seconds}s",
            peer=self.peer_name(),
            seconds=TLS_HANDSHAKE_TIMEOUT,
        )
        self.dead = True
        self._cancel_timers()
        self._abort_transport()

    # -- helpers ---------------------------------------------------------

    def peer_name(self) -> str:
        """The client's ``host:port``, for log lines."""
        peer: Optional[IAddress] = self.transport.getPeer() if self.transport else None
        host = getattr(peer, "host", None)
        port = getattr(peer, "port", None)
        if host is None:
            return str(peer)
        return "%s:%s" % (host, port)

    def write(self, data: bytes) -> None:
        """Write a frame (buffered until the read or reactor turn ends)."""
        self._out.append(data)
        self._out_size += len(data)
        if self._out_size >= self._out_limit:
            self.flush_output()
        elif not self._has_output:
            self._has_output = True
            self._flusher.has_output(self)

    def answer_published(self, topic: Topic, verb: bytes, answer: bytes) -> None:
        """
        Write the ``OK`` (``answer``) of a ``verb`` (PUB, MPUB, DPUB) to
        ``topic``; with ``--mem-queue-size=0`` its place is marked, for
        :meth:`_confirm_published` to check once the barrier wrote it.
        """
        if self.broker.barrier is not None:
            unconfirmed = self._unconfirmed
            # A later answer to the same topic needs no mark: the first
            # one's is before it, and an error cuts the output there.
            if not unconfirmed or unconfirmed[-1][1] is not topic:
                unconfirmed.append((len(self._out), topic, verb))
        self.write(answer)

    def _confirm_published(self, out: List[bytes], unconfirmed: List[Tuple[int, Topic, bytes]]) -> bool:
        """
        After the barrier, before ``out`` (the output taken from
        ``_out``) is written: the publishes answered in it whose records
        could not be written (a full disk, a failed fsync;
        :meth:`Topic.write_error`) are not on disk, so their ``OK`` must
        not leave.  The output before the first of them stays; in place of
        its answer goes Go's fatal error for its command (``E_PUB_FAILED
        PUB failed <error>``, ``E_MPUB_FAILED``, ``E_DPUB_FAILED``), and
        nothing after it.  The queue keeps the messages in memory and
        writes them once writing works again, so their outcome is unknown
        to the producer, as for any publish answered with an error after
        it was stored.

        :return: whether ``out`` now ends with that error (the caller
            closes the connection once it is written).
        """
        for index, topic, verb in unconfirmed:
            if index > len(out):
                break
            error = topic.write_error()
            if error is not None:
                del out[index:]
                name = verb.decode("ascii")
                failure = protocol_error("E_%s_FAILED" % (name,), "%s failed %s" % (name, error))
                out.append(encode_frame(FRAME_TYPE_ERROR, failure.frame_data()))
                self._log.info("client({peer}) - {error}", peer=self.peer_name(), error=failure)
                return True
        return False

    def flush_output(self) -> None:
        """Write what is buffered, through the compression encoder if any."""
        self._has_output = False
        hold = self.mirror_hold
        if hold.wait or hold.held:
            if hold.ask(self.broker.mirror_gate, self):
                return
        out = self._out
        if not out:
            return
        self._out = []
        self._out_size = 0
        unconfirmed = self._unconfirmed
        if unconfirmed:
            self._unconfirmed = []
        if self.state == STATE_CLOSED or self.transport is None:
            return
        barrier = self.broker.barrier
        failed = False
        if barrier is not None:
            # --mem-queue-size=0: an OK (or a message) leaves only once the
            # records and flight-log entries it depends on are written.
            barrier()
            if unconfirmed:
                failed = self._confirm_published(out, unconfirmed)
        data = out[0] if len(out) == 1 else b"".join(out)
        encoder = self._encoder
        self.transport.write(data if encoder is None else encoder.encode(data))
        if failed:
            self.abort()

    def send_error(self, error: ProtocolError) -> None:
        """Write an error frame; a fatal error closes the connection after it."""
        self.write(encode_frame(FRAME_TYPE_ERROR, error.frame_data()))
        if error.fatal:
            self._log.info("client({peer}) - {error}", peer=self.peer_name(), error=error)
            self.abort()

    # -- the mirror's hold -------------------------------------------------

    def mirror_published(self, verb: bytes) -> None:
        """A ``verb`` to a mirrored topic is about to be answered (:meth:`MirrorHold.published`)."""
        self.mirror_hold.published(verb, len(self._out))

    def mirror_release(self) -> None:
        """The mirror confirmed: write the held output, then read again (what was kept first)."""
        hold = self.mirror_hold
        if not hold.held:
            return
        hold.held = False
        if self.state == STATE_CLOSED or self.transport is None:
            return
        self.flush_output()
        if hold.paused:
            hold.paused = False
            if not self._blocked:
                self.transport.resumeProducing()  # type: ignore[attr-defined]
        if hold.kept:
            kept = hold.take_input()
            if kept is not None:
                self.dataReceived(kept)

    def mirror_fail(self, reason: str) -> None:
        """
        The mirror cannot confirm the publishes whose answers are held
        (fewer live standbys than ``--mirror-min-standbys``): the output
        written before the first of them leaves, then, in place of its
        answer, Go's fatal error for its command (:meth:`MirrorHold.fail`),
        and the connection closes.  The bytes read while held are dropped.
        """
        mark, error = self.mirror_hold.fail(reason)
        if self.state == STATE_CLOSED or self.transport is None:
            return
        out = self._out
        del out[mark:]
        self._out_size = sum(map(len, out))
        self.send_error(error)

    def abort(self) -> None:
        """Stop reading and close once pending writes are flushed."""
        self.dead = True
        self._cancel_timers()
        self.disconnect()

    def _cancel_timers(self) -> None:
        for call in (self._heartbeat_call, self._read_deadline_call):
            if call is not None and call.active():
                call.cancel()
        self._heartbeat_call = None
        self._read_deadline_call = None

    def _schedule_heartbeat(self) -> None:
        """(Re)arm the heartbeat writer and the read deadline."""
        self._cancel_timers()
        interval = self.heartbeat_interval
        if interval <= 0:
            return
        self._heartbeat_call = self.clock.callLater(interval, self._heartbeat)
        # Go closes a client that sent nothing for two heartbeat intervals.
        self._read_deadline_call = self.clock.callLater(
            interval * 2, self._check_read_deadline
        )

    def _heartbeat(self) -> None:
        self._heartbeat_call = self.clock.callLater(
            self.heartbeat_interval, self._heartbeat
        )
        self.write(HEARTBEAT_FRAME)

    def _check_read_deadline(self) -> None:
        # Rather than resetting a timer on every read, the deadline timer
        # re-arms itself from the time of the last read when it fires.
        deadline = self._last_read + self.heartbeat_interval * 2
        now = self.clock.seconds()
        if now < deadline:
            self._read_deadline_call = self.clock.callLater(
                deadline - now, self._check_read_deadline
            )
            return
        self._read_deadline_call = None
        self._log.info(
            "client({peer}) sent nothing for {seconds}s, closing",
            peer=self.peer_name(),
            seconds=self.heartbeat_interval * 2,
        )
        self.abort()

    def _start_tls(self) -> None:
        """
        IDENTIFY granted TLS: what was written so far (the IDENTIFY reply)
        goes out in clear, then the TLS handshake, within
        :data:`TLS_HANDSHAKE_TIMEOUT`.
        """
        self.flush_output()
        self.transport.startTLS(self.features.tls_options)  # type: ignore[attr-defined]
        self.tls = True
        self._handshake_call = self.clock.callLater(TLS_HANDSHAKE_TIMEOUT, self._handshake_timed_out)

    @property
    def tls_common_name(self) -> str:
        """The subject common name of the client's TLS certificate, if any."""
        connection = self._tls_connection()
        if connection is None:
            return ""
        certificate = connection.get_peer_certificate()
        if certificate is None:
            return ""
        return str(certificate.get_subject().commonName or "")


def _is_tls_failure(reason: Failure) -> bool:
    """Whether a connection ended on a TLS error (a failed handshake)."""
    from OpenSSL import SSL

    return reason.check(SSL.Error) is not None


class NSQDFactory(Factory):
    """Builds an :class:`NSQDProtocol` for every client of one broker."""

    # The listener logs its own line, in Go's words.
    noisy = False

    def __init__(
        self,
        broker: Broker,
        clock: IReactorTime,
        features: Optional[ServerFeatures] = None,
    ) -> None:
        self.broker = broker
        self.clock = clock
        self.features = features if features is not None else ServerFeatures()
        #: Every connected client, for stats and for closing at shutdown.
        self.clients: Set[NSQDProtocol] = set()

    def close_all(self) -> None:
        """Disconnect every client (at shutdown)."""
        for client in list(self.clients):
            if client.transport is not None:
                client.disconnect()

    def buildProtocol(self, addr: Optional[IAddress]) -> NSQDProtocol:
        """Make the protocol for one accepted connection."""
        protocol = NSQDProtocol(self.broker, self.clock, self.features)
        protocol.factory = self
        return protocol
