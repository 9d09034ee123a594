# -*- test-case-name: tests.test_cluster_route -*-
"""
One route connection: the handshake, keepalive and per-connection
interest of the NATS cluster protocol, as a thin Twisted protocol over
:class:`RouteParser <txnsq.protocol.nats_route.RouteParser>`.  What to do with routes
and messages is the :class:`RouteNode <txnsq.cluster.node.RouteNode>`'s business.

Handshake, as real nats-server (2.9 to 2.15) needs it (with TLS routes the
connection is TLS from its first byte, as nats-server's are; the service
wraps the transport, this protocol does not see it):

- we dial: the server sends ``INFO``; we answer ``CONNECT`` then our own
  ``INFO``;
- the server dials: we send our ``INFO`` at once; it sends ``CONNECT``
  (its cluster name must be ours) then its ``INFO``.

Either way the route is up once both INFOs are known: we send our
interest (``RS+``) and a ``PING``.
"""

from __future__ import annotations

from collections import deque
from typing import TYPE_CHECKING, Any, Deque, Dict, List, Optional

from twisted.internet.protocol import Protocol
from twisted.logger import Logger
from twisted.python.failure import Failure

from txnsq.cluster.interest import InterestTable
from txnsq.nsqd.listener import set_no_delay
from txnsq.protocol.nats_route import (
    CRLF,
    ERR_AUTHORIZATION,
    ERR_STALE_CONNECTION,
    PING,
    PONG,
    Connect,
    Err,
    Info,
    Ping,
    Pong,
    RouteMessage,
    RouteMessages,
    RouteOp,
    RouteParser,
    RouteProtocolError,
    RouteSub,
    RouteUnsub,
    cluster_name_error,
    encode_connect,
    encode_err,
    encode_info,
)

if TYPE_CHECKING:
    from txnsq.cluster.node import RouteNode


__all__ = ["RouteProtocol", "CONNECTING", "AWAIT_CONNECT", "AWAIT_INFO", "ROUTED", "CLOSED"]

#: States.  Dialing side: CONNECTING (waiting for the server's INFO).
#: Accepting side: AWAIT_CONNECT, then AWAIT_INFO.  Both: ROUTED, CLOSED.
CONNECTING = "connecting"
AWAIT_CONNECT = "await-connect"
AWAIT_INFO = "await-info"
ROUTED = "routed"
CLOSED = "closed"

#: Unanswered PINGs before a route is stale (nats-server's ping_max).
MAX_PINGS_OUT = 2

#: Seconds between tries to hand a held message over again.
RETRY_INTERVAL = 0.05


def _as_batch(message: RouteMessage) -> RouteMessages:
    """One message (an HMSG, or an RMSG from a parser not batching) as a batch."""
    headers = message.headers
    return RouteMessages(
        message.account,
        message.subject,
        message.reply,
        message.queues,
        [message.payload],
        [headers] if headers is not None else None,
    )


class RouteProtocol(Protocol):
    """
    One route to another cluster server.

    :param node: the local server's :class:`RouteNode`.
    :param outbound: we dialed (``url`` is what we dialed).
    :param url: the route URL dialed, ``None`` for an accepted route.

    :ivar state: one of the state constants.
    :ivar peer_info: the peer's INFO fields (the latest).
    :ivar server_id: the peer's ``server_id`` once known.
    :ivar interest: what the peer wants (:class:`InterestTable`).
    :ivar messages_in, bytes_in, messages_out, bytes_out: counts.
    """

    _log = Logger()
    transport: Any

    def __init__(self, node: RouteNode, outbound: bool, url: Optional[str] = None) -> None:
        self.node = node
        self.outbound = outbound
        self.url = url
        #: The node's dialer of ``url`` (outbound routes), told when we close.
        self.dialer: Any = None
        self.state = CONNECTING if outbound else AWAIT_CONNECT
        self.parser = RouteParser(node.max_payload, batch=True)
        self.peer_info: Dict[str, Any] = {}
        self.server_id: Optional[str] = None
        self.interest = InterestTable()
        self.messages_in = 0
        self.bytes_in = 0
        self.messages_out = 0
        self.bytes_out = 0
        self.pings_out = 0
        self.connected_at = 0.0
        self.error: Optional[str] = None
        self._ping_call: Any = None
        self._retry_call: Any = None
        self._held: Deque[RouteOp] = deque()
        self._paused = False

    def __repr__(self) -> str:
        return "<RouteProtocol %s %s %s>" % (
            "out" if self.outbound else "in",
            self.server_id or self.url or "?",
            self.state,
        )

    # -- Twisted -----------------------------------------------------------

    def connectionMade(self) -> None:
        """Count the connection; an accepted route sends its INFO at once."""
        self.connected_at = self.node.clock.seconds()
        # As nats-server (Go) does on every TCP connection: with Nagle on,
        # the tail of a payload written while an earlier one is not yet
        # acknowledged waits for the peer's delayed ACK (40 ms on Linux),
        # and a sync mirror publish waits for that payload.
        set_no_delay(self.transport)
        self.node.connection_made(self)
        if not self.outbound:
            self.transport.write(encode_info(self.node.info_fields()))

    def dataReceived(self, data: bytes) -> None:
        """Parse and handle; bad input gets ``-ERR`` and a close."""
        if self.state == CLOSED:
            return
        try:
            ops = self.parser.feed(data)
        except RouteProtocolError as error:
            self.protocol_error(error.text, error.detail)
            return
        if self._held:
            self._held.extend(ops)
            return
        self._process(ops)

    def _process(self, ops: List[RouteOp]) -> None:
        """
        Handle ``ops`` in order.  Messages go to the node in batches (a
        run of RMSGs for one subject is one :class:`RouteMessages`); when
        not all of a batch can be taken now, the rest of it and what
        follows are held (backpressure).
        """
        for index, op in enumerate(ops):
            kind = type(op)
            if kind is RouteMessages or kind is RouteMessage:
                if self.state != ROUTED:
                    self.protocol_error(ERR_AUTHORIZATION, "message before the handshake")
                    return
                if kind is RouteMessage:
                    op = _as_batch(op)  # type: ignore[arg-type]
                batch: RouteMessages = op  # type: ignore[assignment]
                payloads = batch.payloads
                taken = self.node.route_messages(self, batch)
                if taken:
                    self.messages_in += taken
                    if taken == len(payloads):
                        self.bytes_in += sum(map(len, payloads))
                        continue
                    self.bytes_in += sum(map(len, payloads[:taken]))
                headers = batch.headers
                rest = batch._replace(
                    payloads=payloads[taken:],
                    headers=headers[taken:] if headers is not None else None,
                )
                self._hold([rest] + ops[index + 1 :])
                return
            self._handle(op)
            if self.state == CLOSED:
                return

    def connectionLost(self, reason: Failure = Failure(Exception("closed"))) -> None:
        """Forget the route and its interest; the node redials if it should."""
        previous, self.state = self.state, CLOSED
        self._cancel_timers()
        self._held.clear()
        self.node.connection_lost(self, previous == ROUTED)

    # -- handling ------------------------------------------------------------

    def _handle(self, op: RouteOp) -> None:
        """Handle one operation other than a message."""
        kind = type(op)
        if kind is Ping:
            self.transport.write(PONG)
        elif kind is Pong:
            self.pings_out = 0
            self.node.pong_received(self)
        elif kind is RouteSub:
            if self.state == ROUTED and self.interest.add(
                op.account, op.subject, op.queue, op.weight  # type: ignore[union-attr]
            ):
                self.node.interest_changed(self)
        elif kind is RouteUnsub:
            if self.state == ROUTED and self.interest.remove(
                op.account, op.subject, op.queue  # type: ignore[union-attr]
            ):
                self.node.interest_changed(self)
        elif kind is Info:
            self._info(op.fields)  # type: ignore[union-attr]
        elif kind is Connect:
            self._connect(op.fields)  # type: ignore[union-attr]
        elif kind is Err:
            self.error = op.text  # type: ignore[union-attr]
            self.node.errors += 1
            self._log.warn(
                "NATS route {route}: -ERR {text!r}", route=self.describe(), text=self.error
            )

    def _info(self, fields: Dict[str, Any]) -> None:
        if self.state == CONNECTING:
            self.peer_info = fields
            self.server_id = str(fields.get("server_id", "")) or None
            self.transport.write(encode_connect(self.node.connect_fields()))
            self.transport.write(encode_info(self.node.info_fields()))
            self._routed()
        elif self.state == AWAIT_CONNECT:
            # nats-server 2.15 does the same to an INFO before CONNECT.
            self.protocol_error(ERR_AUTHORIZATION, "INFO before CONNECT")
        elif self.state == AWAIT_INFO:
            self.peer_info = fields
            self.server_id = str(fields.get("server_id", "")) or None
            self._routed()
        else:
            # An update of the peer's own INFO, or gossip about another
            # server (one that joined: its "ip" is to be dialed).
            if fields.get("server_id", self.server_id) == self.server_id:
                self.peer_info.update(fields)
            self.node.gossip(self, fields)

    def _connect(self, fields: Dict[str, Any]) -> None:
        if self.state != AWAIT_CONNECT:
            return
        if "lang" in fields:
            self.protocol_error("attempted to connect to route port", "a client CONNECT")
            return
        theirs = fields.get("cluster")
        ours = self.node.cluster_name
        if theirs != ours:
            self.protocol_error(cluster_name_error(str(theirs or ""), ours), "cluster name")
            return
        self.state = AWAIT_INFO

    def _routed(self) -> None:
        self.state = ROUTED
        self.node.route_ready(self)
        if self.state != ROUTED:
            return
        self.transport.writeSequence(self.node.interest_lines())
        self.send_ping()
        interval = self.node.ping_interval
        self._ping_call = self.node.clock.callLater(interval, self._keepalive)

    def _keepalive(self) -> None:
        self._ping_call = None
        if self.state != ROUTED:
            return
        if self.pings_out >= MAX_PINGS_OUT:
            self.protocol_error(ERR_STALE_CONNECTION, "no PONG")
            return
        self.send_ping()
        self._ping_call = self.node.clock.callLater(self.node.ping_interval, self._keepalive)

    def send_ping(self) -> None:
        """Send a PING (answered by a PONG once what came before is done)."""
        self.pings_out += 1
        self.transport.write(PING)

    # -- backpressure --------------------------------------------------------

    def _hold(self, ops: List[RouteOp]) -> None:
        """A message cannot be taken now: stop reading and try again soon."""
        self._held.extend(ops)
        if not self._paused:
            self._paused = True
            self.transport.pauseProducing()
            self.node.paused += 1
        if self._retry_call is None:
            self._retry_call = self.node.clock.callLater(RETRY_INTERVAL, self._retry)

    def _retry(self) -> None:
        self._retry_call = None
        ops = list(self._held)
        self._held.clear()
        self._process(ops)
        if not self._held and self._paused and self.state != CLOSED:
            self._paused = False
            self.transport.resumeProducing()

    # -- sending ---------------------------------------------------------------

    def send_message(self, head: bytes, payload: bytes) -> None:
        """Write one RMSG/HMSG: its line (``head``), payload and CRLF."""
        self.messages_out += 1
        self.bytes_out += len(payload)
        self.transport.write(b"".join((head, payload, CRLF)))

    def send_messages(self, data: bytes, count: int, size: int) -> None:
        """Write ``count`` messages (``size`` payload bytes) already framed in ``data``."""
        self.messages_out += count
        self.bytes_out += size
        self.transport.write(data)

    def send(self, data: bytes) -> None:
        """Write protocol bytes (RS+, RS-, ...) when routed."""
        if self.state == ROUTED:
            self.transport.write(data)

    # -- closing ---------------------------------------------------------------

    def protocol_error(self, text: str, detail: str = "") -> None:
        """Send ``-ERR '<text>'`` and close (nats-server's way)."""
        if self.state == CLOSED:
            return
        self.node.errors += 1
        self._log.warn(
            "NATS route {route}: {text} ({detail}), closing",
            route=self.describe(),
            text=text,
            detail=detail,
        )
        self.transport.write(encode_err(text))
        self.close()

    def close(self) -> None:
        """Close the connection (after what was written)."""
        self._cancel_timers()
        self.transport.loseConnection()

    def abort(self) -> None:
        """Drop the connection at once."""
        self._cancel_timers()
        abort = getattr(self.transport, "abortConnection", None)
        if abort is not None:
            abort()
        else:
            self.transport.loseConnection()

    def _cancel_timers(self) -> None:
        for name in ("_ping_call", "_retry_call"):
            call = getattr(self, name)
            setattr(self, name, None)
            if call is not None and call.active():
                call.cancel()

    def describe(self) -> str:
        """The peer as a log line names it."""
        peer = self.transport.getPeer() if self.transport is not None else None
        where = "%s:%s" % (getattr(peer, "host", "?"), getattr(peer, "port", "?"))
        name = self.peer_info.get("server_name") or self.server_id or "?"
        return "%s (%s)" % (where, name)

    def stats(self) -> Dict[str, Any]:
        """This route in /stats."""
        return {
            "server_id": self.server_id or "",
            "server_name": str(self.peer_info.get("server_name", "")),
            "version": str(self.peer_info.get("version", "")),
            "url": self.url or "",
            "remote_address": self.describe().split(" ", 1)[0],
            "outbound": self.outbound,
            "state": self.state,
            "tls": self.node.tls,
            "interest_count": len(self.interest),
            "interest": self.interest.describe(),
            "messages_in": self.messages_in,
            "bytes_in": self.bytes_in,
            "messages_out": self.messages_out,
            "bytes_out": self.bytes_out,
            "paused": self._paused,
            "connected_at": int(self.connected_at),
        }
