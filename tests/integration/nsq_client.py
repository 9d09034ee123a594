"""
A tiny NSQ V2 TCP client for integration tests, built on the sans-IO
codecs of :mod:`txnsq.protocol` (the frame parser and the message decoder).

It speaks just enough of the protocol to drive a real nsqd: the magic,
``PUB``/``MPUB``/``DPUB``, ``SUB``, ``RDY``, ``FIN``/``REQ``, and ``NOP`` in
answer to heartbeats.  Everything is event driven: received messages are
collected, and :meth:`NSQClient.wait_for` fires when a condition on them
holds or a ``callLater`` deadline passes.  Nothing sleeps.
"""

from __future__ import annotations

import struct
from collections import deque
from typing import Any, Callable, Deque, Generator, List, NamedTuple, Optional, Sequence, Tuple

from twisted.internet.defer import Deferred, inlineCallbacks
from twisted.internet.endpoints import TCP4ClientEndpoint
from twisted.internet.protocol import Factory, Protocol
from twisted.python.failure import Failure

from txnsq.protocol.frames import (
    FRAME_TYPE_ERROR,
    FRAME_TYPE_MESSAGE,
    FRAME_TYPE_RESPONSE,
    FrameParser,
)
from txnsq.protocol.message import decode_message

__all__ = ["Message", "NSQClient", "NSQError", "connect"]

#: How long a command may wait for its response by default.
RESPONSE_TIMEOUT = 10.0

#: How long connecting may take.
CONNECT_TIMEOUT = 10.0

_MAGIC = b"  V2"
_HEARTBEAT = b"_heartbeat_"
_SIZE = struct.Struct(">I")

# An ID no nsqd hands out twice in a test run: FIN of it is always refused.
_UNKNOWN_ID = b"0" * 16


class Message(NamedTuple):
    """One received message, and when it arrived (reactor seconds)."""

    id: bytes
    attempts: int
    timestamp: int
    body: bytes
    received_at: float


class NSQError(Exception):
    """nsqd answered a command with an error frame; ``args[0]`` is its data."""


def _fire_once(waiter: "Deferred[None]") -> None:
    if not waiter.called:
        waiter.callback(None)


class NSQClient(Protocol):
    """
    One V2 connection.

    Commands that nsqd answers (``PUB``, ``MPUB``, ``DPUB``, ``SUB``) return
    a Deferred firing with the response data, or failing with
    :class:`NSQError` on an error frame.  An error frame with no command
    waiting for it (a refused ``FIN``) is kept in :attr:`errors`.

    :ivar messages: every message received, in order.
    :ivar errors: error frames no command was waiting for.
    :ivar lost: why the connection ended, once it has.
    """

    def __init__(self, reactor: Any) -> None:
        self.reactor = reactor
        self.parser = FrameParser()
        self.messages: List[Message] = []
        self.errors: List[bytes] = []
        self.lost: Optional[Failure] = None
        self._responses: Deque["Deferred[Tuple[int, bytes]]"] = deque()
        self._waiters: List["Deferred[None]"] = []
        self._closed: "Deferred[None]" = Deferred()

    # -- Protocol ------------------------------------------------------------

    def connectionMade(self) -> None:
        """Send the protocol magic."""
        self._write(_MAGIC)

    def dataReceived(self, data: bytes) -> None:
        """Sort the frames: heartbeats, responses, errors, messages."""
        for frame_type, payload in self.parser.feed(data):
            if frame_type == FRAME_TYPE_MESSAGE:
                timestamp, attempts, msg_id, body = decode_message(payload)
                self.messages.append(
                    Message(msg_id, attempts, timestamp, body, self.reactor.seconds())
                )
            elif frame_type == FRAME_TYPE_RESPONSE and payload == _HEARTBEAT:
                self._write(b"NOP\n")
            else:
                self._answer(frame_type, payload)
        self._changed()

    def connectionLost(self, reason: Failure = None) -> None:  # type: ignore[assignment]
        """Fail the commands still waiting; wake every waiter."""
        self.lost = reason
        responses, self._responses = self._responses, deque()
        for waiting in responses:
            if not waiting.called:
                waiting.errback(reason)
        self._closed.callback(None)
        self._changed()

    # -- commands ------------------------------------------------------------

    def pub(self, topic: str, body: bytes) -> "Deferred[bytes]":
        """``PUB``: publish one message."""
        return self._command(b"PUB %s\n" % (topic.encode(),) + _SIZE.pack(len(body)) + body)

    def mpub(self, topic: str, bodies: Sequence[bytes]) -> "Deferred[bytes]":
        """``MPUB``: publish several messages at once."""
        payload = _SIZE.pack(len(bodies)) + b"".join(_SIZE.pack(len(body)) + body for body in bodies)
        return self._command(b"MPUB %s\n" % (topic.encode(),) + _SIZE.pack(len(payload)) + payload)

    def dpub(self, topic: str, delay_ms: int, body: bytes) -> "Deferred[bytes]":
        """``DPUB``: publish one message delivered ``delay_ms`` from now."""
        return self._command(
            b"DPUB %s %d\n" % (topic.encode(), delay_ms) + _SIZE.pack(len(body)) + body
        )

    def sub(self, topic: str, channel: str) -> "Deferred[bytes]":
        """``SUB``: subscribe to a channel (created if need be)."""
        return self._command(b"SUB %s %s\n" % (topic.encode(), channel.encode()))

    def rdy(self, count: int) -> None:
        """``RDY``: take up to ``count`` messages in flight."""
        self._write(b"RDY %d\n" % (count,))

    def fin(self, msg_id: bytes) -> None:
        """``FIN``: finish a message."""
        self._write(b"FIN %s\n" % (msg_id,))

    def req(self, msg_id: bytes, delay_ms: int = 0) -> None:
        """``REQ``: requeue a message, deferred by ``delay_ms``."""
        self._write(b"REQ %s %d\n" % (msg_id, delay_ms))

    def round_trip(self, timeout: float = RESPONSE_TIMEOUT) -> "Deferred[bytes]":
        """
        A barrier for commands nsqd does not answer (``RDY``, ``FIN``,
        ``REQ``): a ``FIN`` of an ID nobody holds, which nsqd refuses with
        ``E_FIN_FAILED``; since nsqd handles a connection's commands in
        order, everything sent before was handled when this fires (with the
        error frame's data).  Fails if anything else comes back.
        """
        waiting: "Deferred[Tuple[int, bytes]]" = Deferred()
        self._responses.append(waiting)
        self._write(b"FIN %s\n" % (_UNKNOWN_ID,))

        def check(frame: Tuple[int, bytes]) -> bytes:
            frame_type, data = frame
            if frame_type != FRAME_TYPE_ERROR or not data.startswith(b"E_FIN_FAILED"):
                raise NSQError(data)
            return data

        return waiting.addTimeout(timeout, self.reactor).addCallback(check)

    def close(self) -> "Deferred[None]":
        """Close the connection; fires once it is closed."""
        if self.lost is None and self.transport is not None:
            self.transport.loseConnection()
        done: "Deferred[None]" = Deferred()
        if self._closed.called:
            done.callback(None)
        else:
            self._closed.addCallback(lambda _: done.callback(None))
        return done

    # -- waiting -------------------------------------------------------------

    @inlineCallbacks
    def wait_for(self, predicate: Callable[[], bool], timeout: float) -> Generator[Any, Any, bool]:
        """
        A Deferred firing ``True`` once ``predicate()`` holds (checked after
        every frame received and at the end of the connection), ``False``
        once ``timeout`` seconds passed without it holding.
        """
        deadline = self.reactor.seconds() + timeout
        while not predicate():
            remaining = deadline - self.reactor.seconds()
            if remaining <= 0:
                return False
            waiter: "Deferred[None]" = Deferred()
            self._waiters.append(waiter)
            timer = self.reactor.callLater(remaining, _fire_once, waiter)
            try:
                yield waiter
            finally:
                if timer.active():
                    timer.cancel()
        return True

    def wait_messages(self, count: int, timeout: float) -> "Deferred[bool]":
        """``True`` once ``count`` messages in all arrived, ``False`` at the deadline."""
        return self.wait_for(lambda: len(self.messages) >= count, timeout)  # type: ignore[no-any-return]

    # -- internals -----------------------------------------------------------

    def _command(self, data: bytes, timeout: float = RESPONSE_TIMEOUT) -> "Deferred[bytes]":
        waiting: "Deferred[Tuple[int, bytes]]" = Deferred()
        self._responses.append(waiting)
        self._write(data)

        def unwrap(frame: Tuple[int, bytes]) -> bytes:
            frame_type, payload = frame
            if frame_type == FRAME_TYPE_ERROR:
                raise NSQError(payload)
            return payload

        return waiting.addTimeout(timeout, self.reactor).addCallback(unwrap)

    def _write(self, data: bytes) -> None:
        transport = self.transport
        assert transport is not None, "not connected"
        transport.write(data)

    def _answer(self, frame_type: int, payload: bytes) -> None:
        """A response or error frame: to the oldest waiting command."""
        while self._responses:
            waiting = self._responses.popleft()
            if not waiting.called:  # else it timed out
                waiting.callback((frame_type, payload))
                return
        if frame_type == FRAME_TYPE_ERROR:
            self.errors.append(payload)

    def _changed(self) -> None:
        waiters, self._waiters = self._waiters, []
        for waiter in waiters:
            _fire_once(waiter)


@inlineCallbacks
def connect(reactor: Any, port: int, host: str = "127.0.0.1") -> Generator[Any, Any, NSQClient]:
    """Connect an :class:`NSQClient` to nsqd's TCP port (the magic is sent)."""
    endpoint = TCP4ClientEndpoint(reactor, host, port, timeout=CONNECT_TIMEOUT)
    client = yield endpoint.connect(Factory.forProtocol(lambda: NSQClient(reactor)))
    return client  # type: ignore[no-any-return]


class FinishingClient(NSQClient):
    """A consumer that sends ``FIN`` for every message as it arrives."""

    def dataReceived(self, data: bytes) -> None:
        before = len(self.messages)
        NSQClient.dataReceived(self, data)
        if self.transport is not None and self.lost is None:
            for message in self.messages[before:]:
                self.fin(message.id)


@inlineCallbacks
def receive_exactly(
    reactor: Any,
    port: int,
    topic: str,
    channel: str,
    count: int,
    wait: float,
    quiet: float = 1.0,
    ready: int = 2500,
) -> Generator[Any, Any, List[bytes]]:
    """
    Subscribe a :class:`FinishingClient` with RDY ``ready`` and receive:
    the bodies, once ``count`` arrived and no more came within ``quiet``
    seconds.

    :raises AssertionError: fewer than ``count`` within ``wait`` seconds,
        or more than ``count``.
    """
    endpoint = TCP4ClientEndpoint(reactor, "127.0.0.1", port, timeout=CONNECT_TIMEOUT)
    client = yield endpoint.connect(Factory.forProtocol(lambda: FinishingClient(reactor)))
    try:
        yield client.sub(topic, channel)
        client.rdy(ready)
        arrived = yield client.wait_messages(count, wait)
        if not arrived:
            raise AssertionError("%d of %d arrived" % (len(client.messages), count))
        more = yield client.wait_messages(count + 1, quiet)
        if more:
            raise AssertionError("more than %d arrived" % (count,))
    finally:
        yield client.close()
    return [message.body for message in client.messages]


# -- IDENTIFY feature negotiation and the upgrades (TLS, snappy, deflate) --------

from typing import Dict  # noqa: E402

__all__ += ["FinishingClient", "UpgradingNSQClient", "connect_upgrading", "receive_exactly"]


class UpgradingNSQClient(NSQClient):
    """
    An :class:`NSQClient` that also speaks the client side of IDENTIFY
    feature negotiation and of the upgrades it grants, in NSQ's order: the
    JSON reply in clear, ``transport.startTLS`` and an ``OK`` inside TLS,
    then the snappy or deflate codec (``txnsq.protocol.compression``) on
    both directions and a compressed ``OK``.

    While an upgrade runs, frames are cut one at a time, so that the bytes
    after each stay undecoded until the codec they belong to is installed.

    :ivar encoder: the compression encoder of what is sent, once upgraded.
    :ivar decoder: the compression decoder of what is received.
    :ivar reply: the decoded IDENTIFY JSON reply, once received.
    """

    def __init__(self, reactor: Any) -> None:
        NSQClient.__init__(self, reactor)
        self.encoder: Any = None
        self.decoder: Any = None
        self.reply: Optional[Dict[str, Any]] = None
        self._upgrading: Optional[bytearray] = None
        self._frame_waiter: "Optional[Deferred[Tuple[int, bytes]]]" = None

    # -- Protocol ------------------------------------------------------------

    def dataReceived(self, data: bytes) -> None:
        """Decompress, then hand frames to the upgrade or to NSQClient."""
        if self.decoder is not None:
            data = self.decoder.decode(data)
        if self._upgrading is None:
            if data:
                NSQClient.dataReceived(self, data)
            return
        self._upgrading += data
        self._next_upgrade_frame()

    def connectionLost(self, reason: Failure = None) -> None:  # type: ignore[assignment]
        """Fail an upgrade step still waiting, then as NSQClient."""
        waiter, self._frame_waiter = self._frame_waiter, None
        if waiter is not None and not waiter.called:
            waiter.errback(reason)
        NSQClient.connectionLost(self, reason)

    def _write(self, data: bytes) -> None:
        if self.encoder is not None:
            data = self.encoder.encode(data)
        NSQClient._write(self, data)

    # -- negotiation ---------------------------------------------------------

    def negotiate(self, timeout: float = RESPONSE_TIMEOUT, **fields: Any) -> "Deferred[Dict[str, Any]]":
        """
        Send IDENTIFY with ``feature_negotiation`` and ``fields``; a
        Deferred firing with the decoded JSON reply, or failing with
        :class:`NSQError` on an error frame.  No upgrade is made yet: call
        :meth:`upgrade` with the reply next.
        """
        import json

        body = json.dumps(dict(fields, feature_negotiation=True)).encode()
        self._upgrading = bytearray()
        self._write(b"IDENTIFY\n" + _SIZE.pack(len(body)) + body)

        def decode(frame: Tuple[int, bytes]) -> Dict[str, Any]:
            frame_type, payload = frame
            if frame_type == FRAME_TYPE_ERROR:
                raise NSQError(payload)
            self.reply = json.loads(payload)
            return self.reply

        return self._next_frame(timeout).addCallback(decode)

    @inlineCallbacks
    def upgrade(
        self, reply: Dict[str, Any], tls_options: Any = None, timeout: float = RESPONSE_TIMEOUT
    ) -> Generator[Any, Any, None]:
        """
        Make the upgrades ``reply`` grants, each confirmed by an ``OK``,
        then go back to normal frame handling.

        :param tls_options: the client TLS settings for ``startTLS``.
        :raises NSQError: nsqd answered an upgrade with something but OK.
        """
        if reply.get("tls_v1"):
            self.transport.startTLS(tls_options)  # type: ignore[union-attr]
            yield self._expect_ok(timeout)
        if reply.get("snappy"):
            from txnsq.protocol.compression import SnappyDecoder, SnappyEncoder

            self._install(SnappyEncoder(), SnappyDecoder())
            yield self._expect_ok(timeout)
        elif reply.get("deflate"):
            from txnsq.protocol.compression import DeflateDecoder, DeflateEncoder

            self._install(DeflateEncoder(reply["deflate_level"]), DeflateDecoder())
            yield self._expect_ok(timeout)
        rest, self._upgrading = self._upgrading, None
        if rest:
            NSQClient.dataReceived(self, bytes(rest))

    @inlineCallbacks
    def identify(
        self, tls_options: Any = None, timeout: float = RESPONSE_TIMEOUT, **fields: Any
    ) -> Generator[Any, Any, Dict[str, Any]]:
        """
        :meth:`negotiate` (asking for ``tls_v1`` when ``tls_options`` is
        given) then :meth:`upgrade`; fires with the reply.
        """
        if tls_options is not None:
            fields.setdefault("tls_v1", True)
        reply = yield self.negotiate(timeout, **fields)
        yield self.upgrade(reply, tls_options, timeout)
        return reply  # type: ignore[no-any-return]

    def when_lost(self, timeout: float = RESPONSE_TIMEOUT) -> "Deferred[None]":
        """
        Fires once the connection is closed, without closing it (the reason
        is then in :attr:`lost`); fails with ``TimeoutError`` if it is still
        open after ``timeout`` seconds.
        """
        done: "Deferred[None]" = Deferred()
        self._closed.addCallback(lambda _: done.callback(None))
        return done.addTimeout(timeout, self.reactor)

    @property
    def tls_version(self) -> str:
        """The TLS version in use (OpenSSL's ``TLSv1.3``), or ``""``."""
        get_handle = getattr(self.transport, "getHandle", None)
        handle = get_handle() if get_handle is not None else None
        if not hasattr(handle, "get_protocol_version_name"):
            return ""
        return handle.get_protocol_version_name()  # type: ignore[no-any-return, union-attr]

    # -- internals -------------------------------------------------------------

    def _install(self, encoder: Any, decoder: Any) -> None:
        """The codec covers everything after the frame just read."""
        assert self._upgrading is not None
        self._upgrading = bytearray(decoder.decode(bytes(self._upgrading)))
        self.encoder = encoder
        self.decoder = decoder

    def _expect_ok(self, timeout: float) -> "Deferred[bytes]":
        def check(frame: Tuple[int, bytes]) -> bytes:
            frame_type, payload = frame
            if (frame_type, payload) != (FRAME_TYPE_RESPONSE, b"OK"):
                raise NSQError(payload)
            return payload

        return self._next_frame(timeout).addCallback(check)

    def _next_frame(self, timeout: float) -> "Deferred[Tuple[int, bytes]]":
        waiting: "Deferred[Tuple[int, bytes]]" = Deferred()
        self._frame_waiter = waiting
        self._next_upgrade_frame()
        if self.lost is not None and not waiting.called:
            self._frame_waiter = None
            waiting.errback(self.lost)
        return waiting.addTimeout(timeout, self.reactor)

    def _next_upgrade_frame(self) -> None:
        """Give the waiting upgrade step the next complete frame, if any."""
        pending = self._upgrading
        waiter = self._frame_waiter
        if waiter is None or pending is None or len(pending) < 8:
            return
        (size,) = _SIZE.unpack_from(pending)
        if len(pending) < 4 + size:
            return
        (frame_type,) = _SIZE.unpack_from(pending, 4)
        payload = bytes(pending[8 : 4 + size])
        del pending[: 4 + size]
        self._frame_waiter = None
        waiter.callback((frame_type, payload))


@inlineCallbacks
def connect_upgrading(reactor: Any, port: int, host: str = "127.0.0.1") -> Generator[Any, Any, UpgradingNSQClient]:
    """Connect an :class:`UpgradingNSQClient` to nsqd's TCP port (the magic is sent)."""
    endpoint = TCP4ClientEndpoint(reactor, host, port, timeout=CONNECT_TIMEOUT)
    client = yield endpoint.connect(Factory.forProtocol(lambda: UpgradingNSQClient(reactor)))
    return client  # type: ignore[no-any-return]
