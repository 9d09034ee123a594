# -*- test-case-name: tests.test_lookup_peer -*-
"""
One nsqd's connection to one nsqlookupd (Go's ``nsqd/lookup_peer.go`` and
the per-peer half of ``nsqd/lookup.go``).

A :class:`LookupPeer` keeps a connection open with
Twisted's ``ClientService``, reconnecting with a
backoff.  On every connection it sends the V1 magic and IDENTIFY, and once
the lookupd answered it registers every topic and channel nsqd has; after
that it forwards REGISTER/UNREGISTER as they are given and PINGs every 15
seconds.  Commands are pipelined: each reply answers the oldest command
still unanswered.

A lookupd that is down, slow or confused never holds nsqd up: commands
given while the peer is not identified are dropped (the whole state is
registered again on the next connection), an error reply is logged, and a
reply that cannot be framed, or comes unasked for, or does not come in
time, drops the connection (and the peer reconnects).
"""

from __future__ import annotations

import json
from collections import deque
from typing import Any, Callable, Deque, Iterable, Mapping, Optional, Tuple

from twisted.application.internet import ClientService, backoffPolicy
from twisted.application.service import Service
from twisted.internet.defer import Deferred, succeed
from twisted.internet.interfaces import IReactorTime, IStreamClientEndpoint
from twisted.internet.protocol import Factory, Protocol
from twisted.internet.task import LoopingCall
from twisted.logger import Logger
from twisted.python.failure import Failure
from zope.interface import implementer

from txnsq.addresses import client_endpoint, join_host_port, split_host_port
from txnsq.protocol.errors import ProtocolError
from txnsq.protocol.lookup_v1 import (
    MAGIC_V1,
    MAX_IDENTIFY_BODY,
    PING,
    V1ResponseParser,
    encode_identify,
    encode_register,
)

__all__ = [
    "CONNECT_TIMEOUT",
    "PING_INTERVAL",
    "REPLY_TIMEOUT",
    "LookupPeer",
    "LookupPeerProtocol",
    "LookupdInfo",
]

#: Seconds to wait for the TCP connection (Go dials with a one-second timeout).
CONNECT_TIMEOUT = 1.0
#: Seconds between PINGs (Go's lookupLoop ticker).
PING_INTERVAL = 15.0
#: Seconds the oldest unanswered command may wait for its reply before the
#: connection is given up.  Go reads each reply with a one-second deadline;
#: replies are not awaited here, so a longer wait costs nothing and spares
#: a busy lookupd needless reconnections.
REPLY_TIMEOUT = 5.0

_IDENTIFY_PREFIX = b"IDENTIFY\n"


class LookupdInfo:
    """
    What an nsqlookupd said about itself in its IDENTIFY reply (Go's
    ``peerInfo``).
    """

    __slots__ = ("tcp_port", "http_port", "version", "broadcast_address")

    def __init__(
        self, tcp_port: int = 0, http_port: int = 0, version: str = "", broadcast_address: str = ""
    ) -> None:
        self.tcp_port = tcp_port
        self.http_port = http_port
        self.version = version
        self.broadcast_address = broadcast_address

    @classmethod
    def from_reply(cls, data: bytes) -> "LookupdInfo":
        """
        Decode the IDENTIFY reply as Go's ``json.Unmarshal`` into
        ``peerInfo``: unknown keys and ``null`` values are ignored, keys
        match case-insensitively.

        :raises ValueError: not JSON, not an object, or a field of the
            wrong type.
        """
        document = json.loads(data.decode("utf-8", "surrogateescape"))
        info = cls()
        if document is None:
            return info
        if not isinstance(document, dict):
            raise ValueError("IDENTIFY reply is not a JSON object")
        for key, value in document.items():
            name = key.lower()
            if value is None or name not in cls.__slots__:
                continue
            if name.endswith("_port"):
                if isinstance(value, bool) or not isinstance(value, int):
                    raise ValueError("%s is not an integer" % (key,))
            elif not isinstance(value, str):
                raise ValueError("%s is not a string" % (key,))
            setattr(info, name, value)
        return info

    def http_address(self) -> Optional[str]:
        """The lookupd's HTTP ``host:port``; ``None`` without a broadcast address."""
        if not self.broadcast_address:
            return None
        return join_host_port(self.broadcast_address, self.http_port)

    def __repr__(self) -> str:
        # Go logs it with %+v.
        return "{TCPPort:%d HTTPPort:%d Version:%s BroadcastAddress:%s}" % (
            self.tcp_port,
            self.http_port,
            self.version,
            self.broadcast_address,
        )


def _describe(command: bytes) -> str:
    """A command as Go's ``nsq.Command.String()`` logs it."""
    if command.startswith(_IDENTIFY_PREFIX):
        return "IDENTIFY"
    return command.rstrip(b"\n").decode("ascii", "replace")


class LookupPeerProtocol(Protocol):
    """
    One connection to an nsqlookupd: writes commands, matches replies to
    them in order, and hands each pair to its :class:`LookupPeer`.  Framing
    trouble and replies that never come close the connection.
    """

    def __init__(self, peer: LookupPeer) -> None:
        self._peer = peer
        self._parser = V1ResponseParser(peer.max_reply_size)
        # Commands written and not answered yet, oldest first.
        self._unanswered: Deque[bytes] = deque()
        # The deadline of the oldest unanswered command.
        self._timer: Any = None
        self.dropped = False

    def connectionMade(self) -> None:
        self._peer.connection_made(self)

    def send(self, command: bytes) -> None:
        """Write one command; its reply is awaited in order."""
        if self.dropped:
            return
        self.transport.write(command)  # type: ignore[union-attr]
        self._unanswered.append(command)
        if self._timer is None:
            self._timer = self._peer.clock.callLater(self._peer.reply_timeout, self._timed_out)

    def dataReceived(self, data: bytes) -> None:
        self._parser.feed(data)
        while not self.dropped:
            try:
                reply = self._parser.next_response()
            except ProtocolError as error:
                self._peer.log.error(
                    "LOOKUPD({address}): {error}", address=self._peer.address, error=error
                )
                self.drop()
                return
            if reply is None:
                return
            if not self._unanswered:
                self._peer.log.error(
                    "LOOKUPD({address}): unexpected reply {reply!r}; reconnecting",
                    address=self._peer.address,
                    reply=reply[:100],
                )
                self.drop()
                return
            command = self._unanswered.popleft()
            self._rearm()
            self._peer.reply_received(self, command, reply)

    def drop(self) -> None:
        """Give the connection up (the peer reconnects); replies are ignored from now on."""
        if self.dropped:
            return
        self.dropped = True
        self._cancel_timer()
        transport: Any = self.transport
        if transport is not None:
            transport.abortConnection()

    def connectionLost(self, reason: Failure = None) -> None:  # type: ignore[assignment]
        self.dropped = True
        self._cancel_timer()
        self._unanswered.clear()
        self._peer.connection_lost(self)

    def _rearm(self) -> None:
        # The next command in line gets a full timeout from now: replies
        # come in order, so it could not have been answered earlier.
        self._cancel_timer()
        if self._unanswered:
            self._timer = self._peer.clock.callLater(self._peer.reply_timeout, self._timed_out)

    def _timed_out(self) -> None:
        self._timer = None
        self._peer.log.error(
            "LOOKUPD({address}): {command} - no reply within {timeout}s; reconnecting",
            address=self._peer.address,
            command=_describe(self._unanswered[0]) if self._unanswered else "",
            timeout=self._peer.reply_timeout,
        )
        self.drop()

    def _cancel_timer(self) -> None:
        timer, self._timer = self._timer, None
        if timer is not None and timer.active():
            timer.cancel()


class _PeerFactory(Factory):
    """Makes the :class:`LookupPeerProtocol` of each connection."""

    noisy = False

    def __init__(self, peer: LookupPeer) -> None:
        self._peer = peer

    def buildProtocol(self, addr: Any) -> LookupPeerProtocol:
        return LookupPeerProtocol(self._peer)


@implementer(IStreamClientEndpoint)
class _LoggingEndpoint:
    """Logs each connection attempt, as Go's ``LOOKUP connecting to``."""

    def __init__(self, peer: LookupPeer, endpoint: IStreamClientEndpoint) -> None:
        self._peer = peer
        self._endpoint: Any = endpoint

    def connect(self, factory: Any) -> "Deferred[Any]":
        self._peer.log.info("LOOKUP connecting to {address}", address=self._peer.address)
        return self._endpoint.connect(factory)  # type: ignore[no-any-return]


class LookupPeer(Service):
    """
    nsqd's registration with one nsqlookupd.

    :param address: the lookupd's TCP ``host:port`` (``--lookupd-tcp-address``).
    :param reactor: connects (``IReactorTCP``) and, unless ``clock`` is
        given, times the pings, the retries and the replies.
    :param identify: the IDENTIFY body to send, asked on every connection.
    :param registrations: the ``(topic, channel)`` pairs to register once
        identified (``channel`` empty for a topic without channels), asked
        on every connection.
    :param max_reply_size: refuse a reply claiming more bytes (Go's
        ``--max-body-size``).
    :param clock: times pings, retries and reply deadlines.
    :param endpoint: where to connect; made from ``address`` when omitted.
    :param retry_policy: seconds to wait before the n-th retry; a backoff
        from 1 s to 15 s, each with up to 1 s of random jitter (Go retries
        at every 15 s ping), when omitted.
    :raises ValueError: ``address`` is not ``host:port`` (when no
        ``endpoint`` is given).

    :ivar info: what the lookupd said in its last IDENTIFY reply, or
        ``None`` before any.
    """

    #: Where the peer, its connections and its connection attempts log.
    log = Logger()
    reply_timeout = REPLY_TIMEOUT
    ping_interval = PING_INTERVAL

    def __init__(
        self,
        address: str,
        reactor: Any,
        identify: Callable[[], Mapping[str, Any]],
        registrations: Callable[[], Iterable[Tuple[str, str]]],
        *,
        max_reply_size: int = MAX_IDENTIFY_BODY,
        clock: Optional[IReactorTime] = None,
        endpoint: Optional[IStreamClientEndpoint] = None,
        retry_policy: Optional[Callable[[int], float]] = None,
    ) -> None:
        self.address = address
        self.clock: Any = clock if clock is not None else reactor
        self.max_reply_size = max_reply_size
        self.info: Optional[LookupdInfo] = None
        self._identify = identify
        self._registrations = registrations
        if endpoint is None:
            endpoint = client_endpoint(reactor, *split_host_port(address), CONNECT_TIMEOUT)
        self._client = ClientService(
            _LoggingEndpoint(self, endpoint),
            _PeerFactory(self),
            retryPolicy=retry_policy or backoffPolicy(initialDelay=1.0, maxDelay=15.0),
            clock=self.clock,
        )
        # The connection that is identified and takes commands, if any.
        self._identified: Optional[LookupPeerProtocol] = None
        self._pinger = LoopingCall(self.ping)
        self._pinger.clock = self.clock

    def __repr__(self) -> str:
        return "<LookupPeer %s%s>" % (self.address, " identified" if self.identified else "")

    @property
    def identified(self) -> bool:
        """Connected, identified, and taking commands."""
        return self._connection() is not None

    def _connection(self) -> Optional[LookupPeerProtocol]:
        """The connection taking commands, if any (not one being dropped)."""
        connection = self._identified
        if connection is None or connection.dropped:
            return None
        return connection

    def startService(self) -> None:
        """Connect, and keep reconnecting until stopped."""
        Service.startService(self)
        self._client.startService()
        self._pinger.start(self.ping_interval, now=False)

    def stopService(self) -> "Deferred[None]":
        """Close the connection and stop retrying; fires once it is closed."""
        Service.stopService(self)
        if self._pinger.running:
            self._pinger.stop()
        if not self._client.running:
            return succeed(None)
        return self._client.stopService()  # type: ignore[no-any-return]

    def send(self, command: bytes, branch: str = "") -> bool:
        """
        Send a REGISTER or UNREGISTER command, if identified; dropped
        otherwise (the next connection registers the whole state).
        ``branch`` (``topic``/``channel``) is only for the log line.

        :return: whether it was sent.
        """
        connection = self._connection()
        if connection is None:
            return False
        self.log.info(
            "LOOKUPD({address}): {branch}{command}",
            address=self.address,
            branch=branch + " " if branch else "",
            command=_describe(command),
        )
        connection.send(command)
        return True

    def ping(self) -> None:
        """Send a heartbeat (Go's every 15 s) when identified."""
        connection = self._connection()
        if connection is not None:
            self.log.debug("LOOKUPD({address}): sending heartbeat", address=self.address)
            connection.send(PING)

    # -- from the connection ---------------------------------------------

    def connection_made(self, connection: LookupPeerProtocol) -> None:
        """``connection`` is up: send the magic and IDENTIFY."""
        connection.transport.write(MAGIC_V1)  # type: ignore[union-attr]
        try:
            identify = encode_identify(self._identify())
        except Exception:
            self.log.failure("LOOKUPD({address}): cannot build IDENTIFY", address=self.address)
            connection.drop()
            return
        connection.send(identify)

    def connection_lost(self, connection: LookupPeerProtocol) -> None:
        """``connection`` is gone: no more commands go through it."""
        if self._identified is connection:
            self._identified = None
            if self.running:
                self.log.warn("LOOKUPD({address}): connection lost", address=self.address)

    def reply_received(self, connection: LookupPeerProtocol, command: bytes, reply: bytes) -> None:
        """The lookupd answered ``command`` on ``connection`` with ``reply``."""
        if command.startswith(_IDENTIFY_PREFIX):
            self._identify_reply(connection, reply)
        elif reply != b"OK":
            self.log.error(
                "LOOKUPD({address}): {command} - {reply}",
                address=self.address,
                command=_describe(command),
                reply=reply.decode("utf-8", "replace"),
            )

    def _identify_reply(self, connection: LookupPeerProtocol, reply: bytes) -> None:
        if reply.startswith(b"E_"):
            self.log.info(
                "LOOKUPD({address}): lookupd returned {reply}",
                address=self.address,
                reply=reply.decode("utf-8", "replace"),
            )
            connection.drop()
            return
        try:
            info = LookupdInfo.from_reply(reply)
        except ValueError:
            self.log.error(
                "LOOKUPD({address}): parsing response - {reply}",
                address=self.address,
                reply=reply.decode("utf-8", "replace"),
            )
            connection.drop()
            return
        self.info = info
        self.log.info("LOOKUPD({address}): peer info {info!r}", address=self.address, info=info)
        if not info.broadcast_address:
            self.log.error("LOOKUPD({address}): no broadcast address", address=self.address)
        self._identified = connection
        for topic, channel in list(self._registrations()):
            self.log.info(
                "LOOKUPD({address}): {command}",
                address=self.address,
                command=_describe(encode_register(topic, channel)),
            )
            connection.send(encode_register(topic, channel))
