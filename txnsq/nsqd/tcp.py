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
from typing import TYPE_CHECKING, Callable, Dict, List, Optional, Set, Tuple

from twisted.internet.address import IPv4Address, IPv6Address, UNIXAddress
from twisted.internet.interfaces import IAddress, IDelayedCall, IReactorTime, ITransport
from twisted.internet.protocol import Factory, Protocol
from twisted.logger import Logger
from twisted.python.failure import Failure

from txnsq import __version__
from txnsq.nsqd.channel import InFlightError, SubscribeError
from txnsq.nsqd.topic import PublishError
from txnsq.protocol.errors import ProtocolError, protocol_error
from txnsq.protocol.frames import (
    CLOSE_WAIT_FRAME,
    FRAME_TYPE_ERROR,
    FRAME_TYPE_RESPONSE,
    HEARTBEAT_FRAME,
    OK_FRAME,
    encode_frame,
)
from txnsq.protocol.identify import Identity, identify_response, negotiate_identify
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

if TYPE_CHECKING:
    from txnsq.nsqd.broker import Broker
    from txnsq.nsqd.channel import Channel

MAGIC_V2 = b"  V2"

STATE_INIT = 0
STATE_SUBSCRIBED = 1
STATE_CLOSING = 2
STATE_CLOSED = 3

# Go's numbers for these states in stats (stateInit 0, stateDisconnected 1,
# stateSubscribed 3, stateClosing 4).
_GO_STATES = {STATE_INIT: 0, STATE_SUBSCRIBED: 3, STATE_CLOSING: 4, STATE_CLOSED: 1}

# Connection numbers, in connection order (Go's clientIDSequence).
_connection_ids = _count(1)

_MESSAGE_FRAME_HEADER = struct.Struct(">ii")
_FRAME_TYPE_MESSAGE = 2

#: The error frame Go nsqd sends for a wrong magic: the bare code.
BAD_PROTOCOL_FRAME = encode_frame(FRAME_TYPE_ERROR, b"E_BAD_PROTOCOL")


class ServerFeatures:
    """
    What this nsqd can negotiate in IDENTIFY beyond the options: which
    upgrades are actually implemented and configured.

    IDENTIFY must never promise an upgrade the server cannot perform, so
    every feature here is false until its implementation lands.
    """

    __slots__ = ("tls_configured", "snappy", "deflate", "auth_required")

    def __init__(
        self,
        tls_configured: bool = False,
        snappy: bool = False,
        deflate: bool = False,
        auth_required: bool = False,
    ) -> None:
        self.tls_configured = tls_configured
        self.snappy = snappy
        self.deflate = deflate
        self.auth_required = auth_required


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
        self._magic = b""
        self._parser = V2CommandParser(
            max_msg_size=options.max_msg_size,
            max_body_size=options.max_body_size,
            max_req_timeout_ms=int(options.max_req_timeout * 1000),
            precheck=self._precheck,
        )
        self._dead = False
        self._heartbeat_call: Optional[IDelayedCall] = None
        self._read_deadline_call: Optional[IDelayedCall] = None
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
        self._last_read = self.clock.seconds()
        self.remote_address, host = _go_address(self.transport.getPeer())
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
        self._last_read = self.clock.seconds()
        if self._magic != MAGIC_V2:
            data = self._read_magic(data)
            if not data:
                return
        parser = self._parser
        parser.feed(data)
        handlers = self._handlers
        try:
            while not self._dead:
                command = parser.next_command()
                if command is None:
                    return
                handler = handlers.get(command.name)
                if handler is None:
                    raise protocol_error(
                        "E_INVALID", b"invalid command " + command.name
                    )
                handler(command)
        except ProtocolError as error:
            self._send_error(error)
        except LineTooLong:
            # Go's 16 KiB read buffer overflows: it drops the connection
            # without a word.
            self._abort()

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

    @property
    def stats_state(self) -> int:
        """The connection state as Go numbers it in stats."""
        return _GO_STATES[self.state]

    # -- consumer interface ----------------------------------------------

    def send_message(self, data: bytes) -> None:
        """Write one message (payload with attempts already counted)."""
        self.message_count += 1
        self.transport.write(
            _MESSAGE_FRAME_HEADER.pack(len(data) + 4, _FRAME_TYPE_MESSAGE) + data
        )

    def close(self) -> None:
        """The channel was deleted or closed: disconnect, as Go nsqd does."""
        self.channel = None
        if self.transport is not None and not self._dead:
            self._abort()

    # -- helpers ---------------------------------------------------------

    def _peer(self) -> str:
        peer: Optional[IAddress] = self.transport.getPeer() if self.transport else None
        host = getattr(peer, "host", None)
        port = getattr(peer, "port", None)
        if host is None:
            return str(peer)
        return "%s:%s" % (host, port)

    def _send_error(self, error: ProtocolError) -> None:
        self.transport.write(encode_frame(FRAME_TYPE_ERROR, error.frame_data()))
        if error.fatal:
            self._log.info("client({peer}) - {error}", peer=self._peer(), error=error)
            self._abort()

    def _abort(self) -> None:
        """Stop reading and close once pending writes are flushed."""
        self._dead = True
        self._cancel_timers()
        self.transport.loseConnection()

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
        self.transport.write(HEARTBEAT_FRAME)

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

    def _precheck(self, name: bytes, params: List[bytes]) -> None:
        """State checks Go makes before it reads a command's body."""
        if name == b"IDENTIFY" and self.state != STATE_INIT:
            raise protocol_error("E_INVALID", "cannot IDENTIFY in current state")
        if name == b"AUTH" and self.state != STATE_INIT:
            raise protocol_error("E_INVALID", "cannot AUTH in current state")

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
        if not identity.feature_negotiation:
            self.transport.write(OK_FRAME)
            return
        self.transport.write(
            encode_frame(
                FRAME_TYPE_RESPONSE,
                identify_response(
                    identity,
                    self.broker.options,
                    __version__,
                    auth_required=self.features.auth_required,
                ),
            )
        )

    def _auth(self, command: Command) -> None:
        if not self.features.auth_required:
            raise protocol_error("E_AUTH_DISABLED", "AUTH disabled")
        raise protocol_error("E_AUTH_FAILED", "AUTH failed")

    def _sub(self, command: Command) -> None:
        self._require_state("SUB", STATE_INIT)
        if self.heartbeat_interval <= 0:
            raise protocol_error("E_INVALID", "cannot SUB with heartbeats disabled")
        topic_name, channel_name = parse_sub(command.params)
        channel = self.broker.get_topic(topic_name).get_channel(channel_name)
        try:
            channel.add_consumer(self)
        except SubscribeError as error:
            raise protocol_error("E_SUB_FAILED", "SUB failed %s" % (error,))
        self.channel = channel
        self.state = STATE_SUBSCRIBED
        self.transport.write(OK_FRAME)

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
        self._require_state("FIN", STATE_SUBSCRIBED, STATE_CLOSING)
        msg_id = parse_fin(command.params)
        assert self.channel is not None
        try:
            self.channel.finish(self, msg_id)
        except InFlightError as error:
            raise protocol_error(
                "E_FIN_FAILED", b"FIN " + msg_id + b" failed " + str(error).encode()
            )
        self.finish_count += 1

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
        self.transport.write(CLOSE_WAIT_FRAME)

    def _pub(self, command: Command) -> None:
        body = command.body
        assert isinstance(body, bytes)
        name = command.params[0].decode("ascii")
        topic = self.broker.get_topic(name)
        try:
            topic.publish(body)
        except PublishError as error:
            raise protocol_error("E_PUB_FAILED", "PUB failed %s" % (error,))
        counts = self.pub_counts
        counts[name] = counts.get(name, 0) + 1
        self.transport.write(OK_FRAME)

    def _mpub(self, command: Command) -> None:
        bodies = command.body
        assert isinstance(bodies, list)
        name = command.params[0].decode("ascii")
        topic = self.broker.get_topic(name)
        try:
            topic.publish_many(bodies)
        except PublishError as error:
            raise protocol_error("E_MPUB_FAILED", "MPUB failed %s" % (error,))
        counts = self.pub_counts
        counts[name] = counts.get(name, 0) + len(bodies)
        self.transport.write(OK_FRAME)

    def _dpub(self, command: Command) -> None:
        body = command.body
        assert isinstance(body, bytes)
        name = command.params[0].decode("ascii")
        topic = self.broker.get_topic(name)
        try:
            topic.publish_deferred(body, command.defer_ms / 1000.0)
        except PublishError as error:
            raise protocol_error("E_DPUB_FAILED", "DPUB failed %s" % (error,))
        counts = self.pub_counts
        counts[name] = counts.get(name, 0) + 1
        self.transport.write(OK_FRAME)


def _go_address(peer: Optional[IAddress]) -> Tuple[str, str]:
    """
    A peer's address as Go's ``RemoteAddr().String()`` (``1.2.3.4:5``,
    ``[::1]:5``) and its host part (Go's default client id and hostname).
    """
    if isinstance(peer, IPv4Address):
        return "%s:%d" % (peer.host, peer.port), peer.host
    if isinstance(peer, IPv6Address):
        return "[%s]:%d" % (peer.host, peer.port), peer.host
    if isinstance(peer, UNIXAddress):
        # No host part; Go shows an unnamed peer socket as "@".
        name = peer.name
        if isinstance(name, bytes):
            name = name.decode("utf-8", "replace")
        return name or "@", ""
    return "", ""


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
                client.transport.loseConnection()

    def buildProtocol(self, addr: Optional[IAddress]) -> NSQDProtocol:
        """Make the protocol for one accepted connection."""
        protocol = NSQDProtocol(self.broker, self.clock, self.features)
        protocol.factory = self
        return protocol
