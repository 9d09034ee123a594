# -*- test-case-name: tests.test_nsqlookupd_tcp -*-
"""
nsqlookupd's V1 TCP protocol adapter: what producers (nsqd) send becomes
registrations in an :class:`NSQLookupd <txnsq.nsqlookupd.core.NSQLookupd>`'s database.

Framing and checks live in :mod:`txnsq.protocol.lookup_v1`; this module
keeps one connection's state (magic read, identified or not, closing) and
applies Go nsqlookupd's ``LookupProtocolV1`` semantics to the database.
Every V1 error is fatal: the reply is written and the connection closed.
"""

from __future__ import annotations

from typing import Callable, Dict, List, Optional, Set

from twisted.internet.interfaces import IAddress, ITransport
from twisted.internet.protocol import Factory, Protocol
from twisted.logger import Logger
from twisted.python.failure import Failure

from txnsq.protocol.go_values import format_duration
from txnsq.addresses import go_address
from txnsq.nsqd.listener import set_no_delay
from txnsq.nsqlookupd.core import NSQLookupd
from txnsq.nsqlookupd.registration_db import CHANNEL, CLIENT, TOPIC, Registration
from txnsq.protocol.errors import ProtocolError, protocol_error
from txnsq.protocol.lookup_v1 import (
    MAGIC_V1,
    LookupCommand,
    PeerInfo,
    V1CommandParser,
    encode_response,
    identify_reply,
    parse_peer_info,
    topic_and_channel,
)
from txnsq.protocol.names import EPHEMERAL_SUFFIX

__all__ = ["LookupFactory", "LookupProtocolV1"]

OK = encode_response(b"OK")
#: What Go nsqlookupd answers a wrong magic with (no code text, no frame type).
BAD_PROTOCOL = encode_response(b"E_BAD_PROTOCOL")


class LookupProtocolV1(Protocol):
    """
    One producer's connection.

    :ivar peer: what the producer told in IDENTIFY; ``None`` before.
    :ivar remote_address: the connection's ``host:port`` (Go's
        ``RemoteAddr().String()``): the peer's id in the database.
    """

    _log = Logger()
    # Always set by makeConnection before any other method runs.
    transport: ITransport  # type: ignore[assignment]

    def __init__(self, lookupd: NSQLookupd) -> None:
        self.lookupd = lookupd
        self.peer: Optional[PeerInfo] = None
        self.remote_address = ""
        # The factory's set of open connections, when built by one.
        self.clients: Optional[Set[LookupProtocolV1]] = None
        self._magic = b""
        self._parser = V1CommandParser()
        # Set once the connection is closing: nothing more is read.
        self._dead = False
        self._handlers: Dict[bytes, Callable[[LookupCommand], bytes]] = {
            b"PING": self._ping,
            b"IDENTIFY": self._identify,
            b"REGISTER": self._register,
            b"UNREGISTER": self._unregister,
        }

    # -- connection life -------------------------------------------------

    def connectionMade(self) -> None:
        """Note who connected."""
        set_no_delay(self.transport)
        peer: Optional[IAddress] = self.transport.getPeer()
        self.remote_address = go_address(peer)[0]
        self._log.info("TCP: new client({client})", client=self.remote_address)
        if self.clients is not None:
            self.clients.add(self)

    def connectionLost(self, reason: Failure = None) -> None:  # type: ignore[assignment]
        """Remove this producer from every registration, as Go does on close."""
        self._dead = True
        if self.clients is not None:
            self.clients.discard(self)
        self._log.info("CLIENT({client}): closing", client=self.remote_address)
        peer, self.peer = self.peer, None
        if peer is None:
            return
        for registration in self.lookupd.db.remove_peer(peer.id):
            self._log_db("UNREGISTER", registration)

    def dataReceived(self, data: bytes) -> None:
        """Check the magic, then run every complete command."""
        if self._dead:
            return
        try:
            if len(self._magic) < 4:
                data = self._read_magic(data)
                if not data:
                    return
            self._parser.feed(data)
            self._run()
        except Exception:
            # A bug must cost only this connection, never the daemon.
            self._log.failure("client({client}) - internal error", client=self.remote_address)
            self._close()

    def _read_magic(self, data: bytes) -> bytes:
        """Consume the 4-byte magic; return the bytes after it."""
        needed = 4 - len(self._magic)
        self._magic += data[:needed]
        if len(self._magic) < 4:
            return b""
        if self._magic != MAGIC_V1:
            self._log.error(
                "client({client}) bad protocol magic '{magic}'",
                client=self.remote_address,
                magic=self._magic.decode("latin-1"),
            )
            self.transport.write(BAD_PROTOCOL)
            self._close()
            return b""
        return data[needed:]

    def _run(self) -> None:
        """Execute commands until the input runs out or one fails."""
        parser = self._parser
        while not self._dead:
            try:
                command = parser.next_command()
                if command is None:
                    if parser.expects_body() and self.peer is not None:
                        # Go refuses a second IDENTIFY before reading its body.
                        self._refuse_identify()
                    return
                handler = self._handlers.get(command.name)
                if handler is None:
                    raise protocol_error("E_INVALID", b"invalid command " + command.name)
                self.transport.write(encode_response(handler(command)))
            except ProtocolError as error:
                if parser.expects_body() and self.peer is not None:
                    # A bad body size of a second IDENTIFY: Go never read it.
                    error = self._identify_again_error()
                self._send_error(error)
                return

    def _send_error(self, error: ProtocolError) -> None:
        """Reply with the error and close: every V1 error is fatal."""
        self._log.error("[{client}] - {error}", client=self.remote_address, error=error)
        self.transport.write(encode_response(error.frame_data()))
        self._close()

    def _close(self) -> None:
        """Stop reading; close once the pending replies are written."""
        self._dead = True
        self.transport.loseConnection()

    # -- commands --------------------------------------------------------

    def _ping(self, command: LookupCommand) -> bytes:
        peer = self.peer
        if peer is not None:
            # A PING may come before IDENTIFY; only an identified one counts.
            now = self.lookupd.now()
            self._log.info(
                "CLIENT({client}): pinged (last ping {since})",
                client=peer.id,
                since=format_duration(now - peer.last_update),
            )
            peer.last_update = now
        return b"OK"

    @staticmethod
    def _identify_again_error() -> ProtocolError:
        return protocol_error("E_INVALID", "cannot IDENTIFY again")

    def _refuse_identify(self) -> None:
        raise self._identify_again_error()

    def _identify(self, command: LookupCommand) -> bytes:
        if self.peer is not None:
            self._refuse_identify()
        lookupd = self.lookupd
        peer = parse_peer_info(command.body or b"", self.remote_address, lookupd.now())
        self._log.info(
            "CLIENT({client}): IDENTIFY Address:{address} TCP:{tcp} HTTP:{http} Version:{version}",
            client=self.remote_address,
            address=peer.broadcast_address,
            tcp=peer.tcp_port,
            http=peer.http_port,
            version=peer.version,
        )
        self.peer = peer
        registration = Registration(CLIENT, "", "")
        if lookupd.db.add_producer(registration, peer):
            self._log_db("REGISTER", registration)
        return identify_reply(
            lookupd.options.broadcast_address,
            lookupd.hostname,
            lookupd.tcp_port,
            lookupd.http_port,
            lookupd.version,
        )

    def _identified(self) -> PeerInfo:
        """The peer; fatal ``E_INVALID`` before IDENTIFY."""
        if self.peer is None:
            raise protocol_error("E_INVALID", "client must IDENTIFY")
        return self.peer

    def _register(self, command: LookupCommand) -> bytes:
        peer = self._identified()
        topic, channel = topic_and_channel("REGISTER", command.params)
        db = self.lookupd.db
        registrations: List[Registration] = []
        if channel:
            registrations.append(Registration(CHANNEL, topic, channel))
        # A channel's producer produces its topic too.
        registrations.append(Registration(TOPIC, topic, ""))
        for registration in registrations:
            if db.add_producer(registration, peer):
                self._log_db("REGISTER", registration)
        return b"OK"

    def _unregister(self, command: LookupCommand) -> bytes:
        peer = self._identified()
        topic, channel = topic_and_channel("UNREGISTER", command.params)
        db = self.lookupd.db
        if channel:
            registration = Registration(CHANNEL, topic, channel)
            removed, left = db.remove_producer(registration, peer.id)
            if removed:
                self._log_db("UNREGISTER", registration)
            # An ephemeral channel is gone once no producer has it.
            if left == 0 and channel.endswith(EPHEMERAL_SUFFIX):
                db.remove_registration(registration)
            return b"OK"
        # Unregistering a topic takes its channels with it.  txnsq's nsqd
        # unregisters a deleted topic's channels first; Go's nsqd sends
        # them in no fixed order, so finding any here is only a warning.
        for registration in db.find_registrations(CHANNEL, topic, "*"):
            removed, _ = db.remove_producer(registration, peer.id)
            if removed:
                self._log.warn(
                    "client({client}) unexpected UNREGISTER category:{category} "
                    "key:{key} subkey:{subkey}",
                    client=self.remote_address,
                    category=CHANNEL,
                    key=topic,
                    subkey=registration.subkey,
                )
        registration = Registration(TOPIC, topic, "")
        removed, _ = db.remove_producer(registration, peer.id)
        if removed:
            self._log_db("UNREGISTER", registration)
        return b"OK"

    def _log_db(self, verb: str, registration: Registration) -> None:
        self._log.info(
            "DB: client({client}) {verb} category:{category} key:{key} subkey:{subkey}",
            client=self.remote_address,
            verb=verb,
            category=registration.category,
            key=registration.key,
            subkey=registration.subkey,
        )


class LookupFactory(Factory):
    """Builds a :class:`LookupProtocolV1` for every producer of one nsqlookupd."""

    # The listener logs its own line, in Go's words.
    noisy = False

    def __init__(self, lookupd: NSQLookupd) -> None:
        self.lookupd = lookupd
        #: Every connected producer, for closing at shutdown.
        self.clients: Set[LookupProtocolV1] = set()

    def buildProtocol(self, addr: Optional[IAddress]) -> LookupProtocolV1:
        """Make the protocol for one accepted connection."""
        protocol = LookupProtocolV1(self.lookupd)
        protocol.factory = self
        protocol.clients = self.clients
        return protocol

    def close_all(self) -> None:
        """Disconnect every producer (at shutdown)."""
        for client in list(self.clients):
            if client.transport is not None:
                client.transport.loseConnection()
