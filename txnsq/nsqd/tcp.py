# -*- test-case-name: tests.test_tcp -*-
"""
The nsqd V2 TCP protocol adapter: bytes from a transport become codec and
broker calls, broker events become frames on the transport.

The parsing lives in :mod:`txnsq.protocol.v2`, the queueing in the broker
core; this module only keeps per-connection state (init, subscribed,
closing) and wires the two together.
"""

from __future__ import annotations

import struct
from itertools import count as _count
from typing import TYPE_CHECKING, Any, Callable, Dict, List, Optional, Set

from twisted.internet.interfaces import (
    IAddress,
    IDelayedCall,
    IHandshakeListener,
    IReactorTime,
    ITransport,
)
from twisted.internet.protocol import Factory, Protocol
from twisted.logger import Logger
from twisted.python.failure import Failure
from zope.interface import implementer

from txnsq.addresses import go_address
from txnsq.nsqd.channel import InFlightError, SubscribeError
from txnsq.nsqd.listener import set_no_delay
from txnsq.nsqd.output import scheduler_for
from txnsq.nsqd.tls import cipher_suite_name, tls_version_name
from txnsq.nsqd.topic import PublishError
from txnsq.protocol.compression import (
    CompressionError,
    DeflateDecoder,
    DeflateEncoder,
    SnappyDecoder,
    SnappyEncoder,
)
from txnsq.protocol.auth import unauthorized_description
from txnsq.protocol.errors import ProtocolError, protocol_error
from txnsq.protocol.go_json import go_json
from txnsq.protocol.frames import (
    CLOSE_WAIT_FRAME,
    FRAME_TYPE_ERROR,
    FRAME_TYPE_RESPONSE,
    HEARTBEAT_FRAME,
    OK_FRAME,
    encode_frame,
)
from txnsq.protocol.identify import (
    DEFAULT_OUTPUT_BUFFER_SIZE,
    Identity,
    identify_response,
    negotiate_identify,
)
from txnsq.protocol.v2 import (
    Command,
    LineTooLong,
    V2CommandParser,
    parse_fin,
    parse_rdy,
    parse_req,
    parse_sub,
    parse_touch,
)
from txnsq.version import NSQ_VERSION

if TYPE_CHECKING:
    from txnsq.nsqd.broker import Broker
    from txnsq.nsqd.channel import Channel
    from txnsq.nsqd.topic import Topic

MAGIC_V2 = b"  V2"

STATE_INIT = 0
STATE_SUBSCRIBED = 1
STATE_CLOSING = 2
STATE_CLOSED = 3

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

#: The error frame Go nsqd sends for a wrong magic: the bare code.
BAD_PROTOCOL_FRAME = encode_frame(FRAME_TYPE_ERROR, b"E_BAD_PROTOCOL")


class ServerFeatures:
    """
    What this nsqd can negotiate in IDENTIFY beyond the options, and what
    it needs to do so.

    :ivar tls_options: the server TLS settings (``getContext()``) for the
        ``tls_v1`` upgrade, or ``None`` when no certificate is configured.
    :ivar tls_required: TCP clients must upgrade to TLS before any command
        but IDENTIFY (``--tls-required`` true or ``tcp-https``).
    :ivar snappy: ``--snappy``: clients may ask for snappy compression.
    :ivar deflate: ``--deflate``: clients may ask for deflate compression.
    :ivar auth: the client of the auth servers (``--auth-http-address``),
        or ``None`` when AUTH is disabled.
    """

    __slots__ = ("tls_options", "tls_required", "snappy", "deflate", "auth")

    def __init__(
        self,
        tls_options: Any = None,
        tls_required: bool = False,
        snappy: bool = False,
        deflate: bool = False,
        auth: Any = None,
    ) -> None:
        self.tls_options = tls_options
        self.tls_required = tls_required
        self.snappy = snappy
        self.deflate = deflate
        self.auth = auth

    @property
    def tls_configured(self) -> bool:
        """A certificate is configured: clients may ask for ``tls_v1``."""
        return self.tls_options is not None

    @property
    def auth_required(self) -> bool:
        """AUTH is enabled (``--auth-http-address`` given)."""
        return self.auth is not None

    @classmethod
    def from_options(cls, options: Any, tls_options: Any = None, auth: Any = None) -> "ServerFeatures":
        """The features of an nsqd with these options."""
        return cls(
            tls_options=tls_options,
            tls_required=bool(options.tls_required) and tls_options is not None,
            snappy=bool(options.snappy),
            deflate=bool(options.deflate),
            auth=auth,
        )


@implementer(IHandshakeListener)
class NSQDProtocol(Protocol):
    """
    One client connection speaking NSQ's V2 protocol.

    It is also the broker's consumer for the channel it subscribes to:
    ``ready_count``, ``in_flight_count``, ``msg_timeout`` and
    :meth:`send_message` are what :class:`txnsq.nsqd.channel.Channel` uses.
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
        self._has_output = False
        self._flusher = scheduler_for(clock)
        self._needs_tls = features.tls_required
        # AUTH: the authorizations, and commands held while asking for them.
        self.auth_state: Any = None  # txnsq.protocol.auth.AuthState
        self._blocked = False
        self._held_command: Optional[Command] = None
        # The topic of the MPUB whose body is being read.
        self._mpub_topic: Optional[Topic] = None
        # A run of PUBs to one topic in this read, published together
        # (_publish_run) before any other command runs or the read ends.
        self._run_name = b""
        self._run_topic: Optional[Topic] = None
        self._run_bodies: List[bytes] = []
        self._auth_secret = ""
        self._auth_query: Any = None  # Deferred of a pending auth query
        self._magic = b""
        self._parser = V2CommandParser(
            max_msg_size=options.max_msg_size,
            max_body_size=options.max_body_size,
            max_req_timeout_ms=int(options.max_req_timeout * 1000),
            precheck=self._precheck,
            # Only when needed: the hook takes PUB off the parser's fast path.
            early_check=self._early_check if features.tls_required else None,
        )
        self._dead = False
        # Mirrored topics (txnsq.cluster.mirror): a publish to one asks the
        # broker's mirror gate before its OK leaves; output held meanwhile.
        self._mirror_wait = False
        self._mirror_held = False
        self._heartbeat_call: Optional[IDelayedCall] = None
        self._read_deadline_call: Optional[IDelayedCall] = None
        # TLS deadlines: finishing the handshake, and closing.
        self._handshake_call: Optional[IDelayedCall] = None
        self._tls_close_call: Optional[IDelayedCall] = None
        self._last_read = 0.0
        self._handlers: Dict[bytes, Callable[[Command], None]] = {
            b"FIN": self._fin,
            b"RDY": self._rdy,
            b"REQ": self._req,
            b"PUB": self._pub,
            b"MPUB": self._mpub,
            b"DPUB": self._dpub,
            b"NOP": self._nop,
            b"TOUCH": self._touch,
            b"SUB": self._sub,
            b"CLS": self._cls,
            b"IDENTIFY": self._identify,
            b"AUTH": self._auth,
        }

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
        self._dead = True
        self.state = STATE_CLOSED
        self._cancel_timers()
        for call in (self._handshake_call, self._tls_close_call):
            if call is not None and call.active():
                call.cancel()
        self._handshake_call = self._tls_close_call = None
        query, self._auth_query = self._auth_query, None
        if query is not None:
            query.cancel()
        if self.tls and reason is not None and _is_tls_failure(reason):
            self._log.info(
                "client({peer}) TLS failed: {error}",
                peer=self._peer(),
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
        if self._dead:
            return
        flusher = self._flusher
        flusher.reading()
        try:
            self._received(data)
        finally:
            flusher.done_reading()

    def _received(self, data: bytes) -> None:
        self._last_read = self.clock.seconds()
        if self._magic != MAGIC_V2:
            data = self._read_magic(data)
            if not data:
                return
        decoder = self._decoder
        if decoder is None:
            self._parser.feed(data)
            self._run()
            return
        try:
            for piece in decoder.decode_iter(data):
                self._parser.feed(piece)
                self._run()
                if self._dead:
                    return
        except CompressionError as error:
            self._log.info(
                "client({peer}) - corrupt compressed data: {error}",
                peer=self._peer(),
                error=error,
            )
            self._abort()

    def _run(self) -> None:
        """Run every complete command, unless one waits for the auth server."""
        parser = self._parser
        handlers = self._handlers
        # The messages the commands of this read make room for (FIN, REQ,
        # RDY) go out together when they are done.
        channel = self.channel
        if channel is not None:
            channel.hold()
        try:
            while not self._dead and not self._blocked:
                # A non-fatal error (E_FIN_FAILED, E_REQ_FAILED, ...) is
                # answered and the commands after it run, as Go's IOLoop
                # goes on; a fatal one closes the connection (_dead).
                try:
                    if channel is not None:
                        fin_ids = parser.next_fin_ids()
                        if fin_ids:
                            if self._run_topic is not None:
                                self._publish_run()
                                if self._dead:
                                    return
                            self._finish_all(fin_ids)
                            continue
                    command = parser.next_command()
                    if command is None:
                        return
                    name = command.name
                    # A run of PUBs ends at any other command, answered
                    # in order after the run's OKs.
                    if self._run_topic is not None and name != b"PUB":
                        self._publish_run()
                        if self._dead:
                            return
                    # Go's order: the TLS policy, then the command's own
                    # checks, an unknown command included.
                    if self._needs_tls and name != b"IDENTIFY":
                        self._refuse_without_tls(name)
                    handler = handlers.get(name)
                    if handler is None:
                        raise protocol_error("E_INVALID", b"invalid command " + name)
                    handler(command)
                except ProtocolError as error:
                    if self._run_topic is not None:
                        self._publish_run()
                        if self._dead:
                            return
                    self._send_error(error)
        except LineTooLong:
            # Go's 16 KiB read buffer overflows: it drops the connection
            # without a word (the PUBs before the long line are answered).
            if self._run_topic is not None:
                self._publish_run()
            self._abort()
        finally:
            if self._run_topic is not None:
                self._publish_run()
            if channel is not None:
                channel.release()

    def _read_magic(self, data: bytes) -> bytes:
        """Consume the 4-byte protocol magic; return the bytes after it."""
        needed = 4 - len(self._magic)
        self._magic += data[:needed]
        if len(self._magic) < 4:
            return b""
        if self._magic != MAGIC_V2:
            self._log.info(
                "client({peer}) bad protocol magic {magic!r}",
                peer=self._peer(),
                magic=self._magic,
            )
            self.transport.write(BAD_PROTOCOL_FRAME)
            self._abort()
            return b""
        return data[needed:]

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
        out.append(_pack_message_frame_header(len(data) + 4, _FRAME_TYPE_MESSAGE))
        out.append(data)
        self._out_size += len(data) + 8
        if self._out_size >= self._out_limit:
            self.flush_output()
        elif not self._has_output:
            self._has_output = True
            self._flusher.has_output(self)

    def close(self) -> None:
        """The channel was deleted or closed: disconnect, as Go nsqd does."""
        self.channel = None
        if self.transport is not None and not self._dead:
            self._abort()

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
            peer=self._peer(),
            seconds=TLS_HANDSHAKE_TIMEOUT,
        )
        self._dead = True
        self._cancel_timers()
        self._abort_transport()

    # -- helpers ---------------------------------------------------------

    def _peer(self) -> str:
        peer: Optional[IAddress] = self.transport.getPeer() if self.transport else None
        host = getattr(peer, "host", None)
        port = getattr(peer, "port", None)
        if host is None:
            return str(peer)
        return "%s:%s" % (host, port)

    def _write(self, data: bytes) -> None:
        """Write a frame (buffered until the read or reactor turn ends)."""
        self._out.append(data)
        self._out_size += len(data)
        if self._out_size >= self._out_limit:
            self.flush_output()
        elif not self._has_output:
            self._has_output = True
            self._flusher.has_output(self)

    def flush_output(self) -> None:
        """Write what is buffered, through the compression encoder if any."""
        self._has_output = False
        if self._mirror_wait or self._mirror_held:
            if self._mirror_gate():
                return
        out = self._out
        if not out:
            return
        self._out = []
        self._out_size = 0
        if self.state == STATE_CLOSED or self.transport is None:
            return
        barrier = self.broker.barrier
        if barrier is not None:
            # --mem-queue-size=0: an OK (or a message) leaves only once the
            # records and flight-log entries it depends on are written.
            barrier()
        data = out[0] if len(out) == 1 else b"".join(out)
        encoder = self._encoder
        self.transport.write(data if encoder is None else encoder.encode(data))

    def _mirror_gate(self) -> bool:
        """
        Output waits while the mirror has not confirmed the publishes it
        answers (``--mirror-ack=sync``, or a lagging peer): reading pauses,
        so producers slow down.  True while held.
        """
        if self._mirror_held:
            return True
        self._mirror_wait = False
        gate = self.broker.mirror_gate
        if gate is None or not gate(self):
            return False
        self._mirror_held = True
        if self.transport is not None and not self._blocked:
            self.transport.pauseProducing()  # type: ignore[attr-defined]
        return True

    def mirror_release(self) -> None:
        """The mirror confirmed: write the held output and read again."""
        if not self._mirror_held:
            return
        self._mirror_held = False
        if self.state == STATE_CLOSED or self.transport is None:
            return
        if not self._blocked:
            self.transport.resumeProducing()  # type: ignore[attr-defined]
        self.flush_output()

    def _refuse_without_tls(self, name: bytes) -> None:
        """``--tls-required``: nothing but IDENTIFY before the TLS upgrade."""
        raise protocol_error(
            "E_INVALID",
            b"cannot " + name + b" in current state (TLS required)",
        )

    def _early_check(self, name: bytes, params: List[bytes]) -> None:
        """Go's check before a body command's line: the TLS policy."""
        if self._needs_tls and name != b"IDENTIFY":
            self._refuse_without_tls(name)

    def _send_error(self, error: ProtocolError) -> None:
        self._write(encode_frame(FRAME_TYPE_ERROR, error.frame_data()))
        if error.fatal:
            self._log.info("client({peer}) - {error}", peer=self._peer(), error=error)
            self._abort()

    def _abort(self) -> None:
        """Stop reading and close once pending writes are flushed."""
        self._dead = True
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
        self._write(HEARTBEAT_FRAME)

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
            peer=self._peer(),
            seconds=self.heartbeat_interval * 2,
        )
        self._abort()

    def _precheck(self, name: bytes, params: List[bytes]) -> bool:
        """
        The checks Go makes before it reads a command's body, at Go's place
        for each command (the parser calls this once per body command):
        IDENTIFY's and AUTH's state, MPUB's auth.  ``False`` holds the body
        until the auth server has answered.

        :raises ProtocolError: E_INVALID (wrong state), MPUB's auth errors.
        """
        if name == b"PUB":
            return True
        if name == b"MPUB":
            # Go's MPUB checks auth once its line is checked, before the
            # body, and gets (so creates) the topic then: an MPUB whose body
            # turns out bad leaves the topic behind.
            topic_name = params[0].decode("ascii")
            if self.features.auth is not None and not self._check_auth(
                "MPUB", topic_name, "", lambda: self._mpub_get_topic(topic_name)
            ):
                return False
            self._mpub_topic = self.broker.get_topic(topic_name)
            return True
        if name == b"IDENTIFY" or name == b"AUTH":
            if self.state != STATE_INIT:
                raise protocol_error("E_INVALID", b"cannot " + name + b" in current state")
        return True

    def _mpub_get_topic(self, topic_name: str) -> None:
        # Kept for the handler, as Go keeps it: a topic deleted while the
        # body arrives makes the MPUB fail ("exiting"), not come back.
        self._mpub_topic = self.broker.get_topic(topic_name)

    def _require_state(self, verb: str, *states: int) -> None:
        if self.state not in states:
            raise protocol_error("E_INVALID", "cannot %s in current state" % (verb,))

    # -- commands --------------------------------------------------------

    def _nop(self, command: Command) -> None:
        pass

    def _identify(self, command: Command) -> None:
        assert isinstance(command.body, bytes)
        identity = negotiate_identify(
            command.body,
            self.broker.options,
            tls_configured=self.features.tls_configured,
            snappy_enabled=self.features.snappy,
            deflate_enabled=self.features.deflate,
        )
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
        if not identity.feature_negotiation:
            self._write(OK_FRAME)
            return
        self._write(
            encode_frame(
                FRAME_TYPE_RESPONSE,
                identify_response(
                    identity,
                    self.broker.options,
                    NSQ_VERSION,
                    auth_required=self.features.auth_required,
                ),
            )
        )
        # The upgrades, in Go's order, each confirmed by an OK sent through
        # it: TLS, then compression on top.
        if identity.tls_v1:
            # What was written so far (the IDENTIFY response) still goes
            # out in clear; the handshake follows, then the OK inside TLS.
            self.flush_output()
            self.transport.startTLS(self.features.tls_options)  # type: ignore[attr-defined]
            self.tls = True
            self._handshake_call = self.clock.callLater(
                TLS_HANDSHAKE_TIMEOUT, self._handshake_timed_out
            )
            self._needs_tls = False
            self._write(OK_FRAME)
        if identity.snappy or identity.deflate:
            # What came before goes out uncompressed.
            self.flush_output()
        if identity.snappy:
            self._encoder = SnappyEncoder()
            self._decoder = SnappyDecoder()
            self.snappy = True
            self._write(OK_FRAME)
        elif identity.deflate:
            self._encoder = DeflateEncoder(identity.deflate_level)
            self._decoder = DeflateDecoder()
            self.deflate = True
            self._write(OK_FRAME)

    def _auth(self, command: Command) -> None:
        body = command.body
        assert isinstance(body, bytes)
        if self.auth_state is not None:
            raise protocol_error("E_INVALID", "AUTH already set")
        auth = self.features.auth
        if auth is None:
            raise protocol_error("E_AUTH_DISABLED", "AUTH disabled")
        secret = body.decode("utf-8", "replace")
        self._ask_auth_server(secret, self._authenticated)

    def _ask_auth_server(self, secret: str, done: Callable[[Any], None]) -> None:
        """
        Query the auth servers; commands wait (and reading pauses) until
        the answer, which goes to ``done``.  A failure is Go's fatal
        E_AUTH_FAILED, with the reason logged but not sent (nor the secret).
        """
        self._blocked = True
        self.transport.pauseProducing()  # type: ignore[attr-defined]
        self._auth_secret = secret
        host = go_address(self.transport.getPeer())[1]
        query = self.features.auth.query(
            host, self.tls, secret, self._common_name()
        )
        self._auth_query = query

        def answered(state: Any) -> None:
            self._auth_query = None
            if self._dead:
                return
            try:
                done(state)
            except ProtocolError as error:
                self._send_error(error)
                return
            self._unblock()

        def failed(failure: Failure) -> None:
            self._auth_query = None
            if self._dead:
                return
            self._log.warn(
                "PROTOCOL(V2): [{peer}] AUTH failed {error}",
                peer=self._peer(),
                error=failure.getErrorMessage(),
            )
            self._send_error(protocol_error("E_AUTH_FAILED", "AUTH failed"))

        query.addCallbacks(answered, failed)
        query.addErrback(lambda failure: self._log.failure("AUTH", failure))

    def _authenticated(self, state: Any) -> None:
        """The auth server answered AUTH: keep its authorizations, reply."""
        self.auth_state = state
        if not state.authorizations:
            raise protocol_error("E_UNAUTHORIZED", "AUTH no authorizations found")
        self._write(
            encode_frame(
                FRAME_TYPE_RESPONSE,
                go_json(
                    {
                        "identity": state.identity,
                        "identity_url": state.identity_url,
                        "permission_count": len(state.authorizations),
                    }
                ),
            )
        )

    def _unblock(self) -> None:
        """The auth server answered: run the held command and what follows."""
        self._blocked = False
        self.transport.resumeProducing()  # type: ignore[attr-defined]
        held, self._held_command = self._held_command, None
        if held is not None:
            try:
                self._handlers[held.name](held)
            except ProtocolError as error:
                self._send_error(error)
                return
        self._run()

    def _common_name(self) -> str:
        """The subject common name of the client's TLS certificate, if any."""
        connection = self._tls_connection()
        if connection is None:
            return ""
        certificate = connection.get_peer_certificate()
        if certificate is None:
            return ""
        return str(certificate.get_subject().commonName or "")

    def _authorized(self, command: Command, topic: str, channel: str) -> bool:
        """
        Go's CheckAuth before SUB, PUB and DPUB (MPUB's is its precheck).
        ``False`` means the authorizations expired and are being fetched
        again: the command is held and runs again once they are back.

        :raises ProtocolError: E_AUTH_FIRST, E_UNAUTHORIZED (fatal).
        """
        if self.features.auth is None:
            return True
        return self._check_auth(command.name.decode("ascii"), topic, channel, _nothing, command)

    def _check_auth(
        self,
        verb: str,
        topic: str,
        channel: str,
        then: Callable[[], None],
        held: Optional[Command] = None,
    ) -> bool:
        """
        Go's CheckAuth.  ``False`` means the authorizations expired and are
        being fetched again (reading pauses, ``held`` waits); once they are
        back and allow ``topic``/``channel``, ``then()`` runs, then ``held``
        and the commands after it.  (The auth server answers asynchronously:
        it is an HTTP request.)

        :raises ProtocolError: E_AUTH_FIRST, E_UNAUTHORIZED (fatal), now or
            (E_UNAUTHORIZED) when the new authorizations arrive.
        """
        if self.features.auth is None:
            return True
        state = self.auth_state
        if state is None:
            raise protocol_error("E_AUTH_FIRST", "AUTH required before %s" % (verb,))
        if state.is_expired(self.clock.seconds()):
            self._held_command = held

            def refreshed(new_state: Any) -> None:
                self.auth_state = new_state
                if not new_state.is_allowed(topic, channel):
                    raise protocol_error("E_UNAUTHORIZED", unauthorized_description(verb, topic, channel))
                then()

            self._ask_auth_server(self._auth_secret, refreshed)
            return False
        if not state.is_allowed(topic, channel):
            raise protocol_error("E_UNAUTHORIZED", unauthorized_description(verb, topic, channel))
        return True

    def _sub(self, command: Command) -> None:
        self._require_state("SUB", STATE_INIT)
        if self.heartbeat_interval <= 0:
            raise protocol_error("E_INVALID", "cannot SUB with heartbeats disabled")
        topic_name, channel_name = parse_sub(command.params)
        if not self._authorized(command, topic_name, channel_name):
            return
        channel = self.broker.get_topic(topic_name).get_channel(channel_name)
        try:
            channel.add_consumer(self)
        except SubscribeError as error:
            raise protocol_error("E_SUB_FAILED", "SUB failed %s" % (error,))
        self.channel = channel
        self.state = STATE_SUBSCRIBED
        self._write(OK_FRAME)

    def _rdy(self, command: Command) -> None:
        if self.state == STATE_CLOSING:
            # Go ignores readiness changes from a client that sent CLS.
            return
        self._require_state("RDY", STATE_SUBSCRIBED)
        count = parse_rdy(command.params, self.broker.options.max_rdy_count)
        self.ready_count = count
        assert self.channel is not None
        self.channel.consumer_ready(self)

    def _fin(self, command: Command) -> None:
        # Go's order: the state, then the parameters.
        state = self.state
        if state != STATE_SUBSCRIBED and state != STATE_CLOSING:
            self._require_state("FIN", STATE_SUBSCRIBED, STATE_CLOSING)
        self._finish_all([parse_fin(command.params)])

    def _finish_all(self, msg_ids: List[bytes]) -> None:
        """
        The FINs of a run of plain FIN lines (or of one FIN command), in
        order; a failed one is answered with its error and the others still
        count, as if each had been a command of its own.
        """
        state = self.state
        if state != STATE_SUBSCRIBED and state != STATE_CLOSING:
            self._require_state("FIN", STATE_SUBSCRIBED, STATE_CLOSING)
        channel = self.channel
        assert channel is not None
        finish = channel.finish
        finished = 0
        for msg_id in msg_ids:
            try:
                finish(self, msg_id)
            except InFlightError as error:
                self._send_error(protocol_error(
                    "E_FIN_FAILED", b"FIN " + msg_id + b" failed " + str(error).encode()
                ))
                continue
            finished += 1
        self.finish_count += finished

    def _req(self, command: Command) -> None:
        self._require_state("REQ", STATE_SUBSCRIBED, STATE_CLOSING)
        msg_id, timeout_ms = parse_req(
            command.params, int(self.broker.options.max_req_timeout * 1000)
        )
        assert self.channel is not None
        try:
            self.channel.requeue(self, msg_id, timeout_ms / 1000.0)
        except InFlightError as error:
            raise protocol_error(
                "E_REQ_FAILED", b"REQ " + msg_id + b" failed " + str(error).encode()
            )
        self.requeue_count += 1

    def _touch(self, command: Command) -> None:
        self._require_state("TOUCH", STATE_SUBSCRIBED, STATE_CLOSING)
        msg_id = parse_touch(command.params)
        assert self.channel is not None
        try:
            self.channel.touch(self, msg_id)
        except InFlightError as error:
            raise protocol_error(
                "E_TOUCH_FAILED",
                b"TOUCH " + msg_id + b" failed " + str(error).encode(),
            )

    def _cls(self, command: Command) -> None:
        self._require_state("CLS", STATE_SUBSCRIBED)
        self.state = STATE_CLOSING
        self.ready_count = 0
        self._write(CLOSE_WAIT_FRAME)

    def _pub(self, command: Command) -> None:
        """
        PUB: joins the run of PUBs to the same topic in this read, which
        :meth:`_publish_run` publishes and answers as one MPUB would cost
        (one retained-log write, one output frame of OKs).
        """
        body = command.body
        assert isinstance(body, bytes)
        raw_name = command.params[0]
        if self._run_topic is not None:
            if raw_name == self._run_name:
                if self.features.auth is not None and not self._authorized(
                    command, raw_name.decode("ascii"), ""
                ):
                    return
                bodies = self._run_bodies
                bodies.append(body)
                if len(bodies) >= _MAX_RUN:
                    self._publish_run()
                return
            self._publish_run()
            if self._dead:
                return
        name = raw_name.decode("ascii")
        if not self._authorized(command, name, ""):
            return
        # Got (so created) now, as Go's PUB does before it publishes.
        self._run_topic = self.broker.get_topic(name)
        self._run_name = raw_name
        self._run_bodies = [body]

    def _publish_run(self) -> None:
        """
        Publish the pending run of PUBs and answer each: all at once when
        the topic takes them all; else one by one, each answered as Go
        answers a PUB, so that an error (E_PUB_FAILED, fatal) follows the
        OKs of the PUBs published before it and nothing after it is
        published.
        """
        topic = self._run_topic
        bodies = self._run_bodies
        assert topic is not None
        self._run_topic = None
        self._run_bodies = []
        name = topic.name
        counts = self.pub_counts
        try:
            if len(bodies) == 1:
                topic.publish(bodies[0])
            else:
                # All or none: on an error nothing was published.
                topic.publish_many(bodies)
        except PublishError:
            for done, body in enumerate(bodies):
                try:
                    topic.publish(body)
                except PublishError as error:
                    if done:
                        counts[name] = counts.get(name, 0) + done
                        if topic.mirror is not None:
                            self._mirror_wait = True
                        self._write(OK_FRAME * done)
                    self._send_error(protocol_error("E_PUB_FAILED", "PUB failed %s" % (error,)))
                    return
        counts[name] = counts.get(name, 0) + len(bodies)
        if topic.mirror is not None:
            self._mirror_wait = True
        self._write(OK_FRAME * len(bodies))

    def _mpub(self, command: Command) -> None:
        bodies = command.body
        assert isinstance(bodies, list)
        # Auth was checked and the topic got before the body: _precheck.
        topic = self._mpub_topic
        self._mpub_topic = None
        assert topic is not None
        name = topic.name
        try:
            topic.publish_many(bodies)
        except PublishError as error:
            raise protocol_error("E_MPUB_FAILED", "MPUB failed %s" % (error,))
        counts = self.pub_counts
        counts[name] = counts.get(name, 0) + len(bodies)
        if topic.mirror is not None:
            self._mirror_wait = True
        self._write(OK_FRAME)

    def _dpub(self, command: Command) -> None:
        body = command.body
        assert isinstance(body, bytes)
        name = command.params[0].decode("ascii")
        if not self._authorized(command, name, ""):
            return
        topic = self.broker.get_topic(name)
        try:
            topic.publish_deferred(body, command.defer_ms / 1000.0)
        except PublishError as error:
            raise protocol_error("E_DPUB_FAILED", "DPUB failed %s" % (error,))
        counts = self.pub_counts
        counts[name] = counts.get(name, 0) + 1
        if topic.mirror is not None:
            self._mirror_wait = True
        self._write(OK_FRAME)


#: The most PUBs published as one run (a read holds a few hundred at most).
_MAX_RUN = 1024


def _nothing() -> None:
    """Nothing more to do."""


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
