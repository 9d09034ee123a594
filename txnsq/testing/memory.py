# -*- test-case-name: tests.test_testing -*-
"""
An nsqd in memory, for unit tests of code that publishes or consumes: the
real broker core and V2 protocol on a ``twisted.internet.task.Clock``,
no sockets, no threads, no sleeps, in the manner of ``treq.testing``.

txnsq's :class:`Producer <txnsq.client.producer.Producer>` and
:class:`Consumer <txnsq.client.consumer.Consumer>` reach it through their
``connect=`` hook; the bytes between the client and nsqd move only when
the test calls :meth:`MemoryNSQD.flush` (or :meth:`MemoryNSQD.advance`,
which moves the clock first)::

    nsqd = MemoryNSQD()
    producer = Producer("nsqd:4150", reactor=nsqd.clock, connect=nsqd.connect)
    published = producer.publish("events", b"hello")
    nsqd.flush()
    self.successResultOf(published)
    self.assertEqual(nsqd.broker.find_topic("events").depth(), 1)

What it does not do: TLS (nsqd offers none: a client that requires it
fails its IDENTIFY as against any nsqd without a certificate), the HTTP
API, lookupd (give consumers ``nsqd_tcp_addresses``), and disk storage.
"""

from __future__ import annotations

from typing import Any, Dict, List, Optional, Sequence

from twisted.internet.address import IPv4Address
from twisted.internet.defer import Deferred, fail
from twisted.internet.error import ConnectionDone, ConnectionRefusedError
from twisted.internet.interfaces import IProtocol
from twisted.internet.task import Clock
from twisted.internet.testing import StringTransport
from twisted.python.failure import Failure

from txnsq.addresses import split_host_port
from txnsq.nsqd.broker import Broker
from txnsq.nsqd.flags import parse_nsqd_args
from txnsq.nsqd.options import NSQDOptions
from txnsq.nsqd.tcp import NSQDFactory, ServerFeatures
from txnsq.storage.memory import MemoryStorage

__all__ = ["MemoryNSQD", "apply_overrides"]

#: The most rounds :meth:`MemoryNSQD.flush` makes before it gives up.
MAX_ROUNDS = 10000


def apply_overrides(options: Any, overrides: Dict[str, Any]) -> None:
    """
    Set option attributes after the flags, then validate the whole.

    :raises TypeError: an unknown option (named).
    :raises ValueError: the options are not valid together.
    """
    for name, value in overrides.items():
        if not hasattr(options, name):
            raise TypeError("%s has no option %r" % (type(options).__name__, name))
        setattr(options, name, value)
    options.validate()


class _Pipe(StringTransport):
    """One end of an in-memory connection: what its protocol writes waits here."""

    def __init__(self, host: IPv4Address, peer: IPv4Address) -> None:
        super().__init__(hostAddress=host, peerAddress=peer)
        self.protocol: Optional[IProtocol] = None

    def abortConnection(self) -> None:
        """Close at once (what is buffered is not delivered)."""
        self.clear()
        self.loseConnection()


class _Connection:
    """A client protocol and nsqd's, joined by two pipes."""

    def __init__(self, client: IProtocol, server: IProtocol, port: int, address: str) -> None:
        host, nsqd_port = split_host_port(address)
        client_address = IPv4Address("TCP", "127.0.0.1", port)
        server_address = IPv4Address("TCP", "127.0.0.1", nsqd_port)
        self.address = address
        self.client_end = _Pipe(client_address, server_address)
        self.server_end = _Pipe(server_address, client_address)
        self.client_end.protocol = client
        self.server_end.protocol = server
        self.closed = False
        server.makeConnection(self.server_end)
        client.makeConnection(self.client_end)

    def pump(self) -> bool:
        """Move what each side wrote to the other; whether anything moved."""
        if self.closed:
            return False
        moved = False
        for source, target in ((self.client_end, self.server_end), (self.server_end, self.client_end)):
            data = source.value()
            if data:
                source.clear()
                moved = True
                if not target.disconnecting:
                    assert target.protocol is not None
                    target.protocol.dataReceived(data)
        if not moved and (self.client_end.disconnecting or self.server_end.disconnecting):
            self.close(Failure(ConnectionDone()))
            return True
        return moved

    def close(self, reason: Failure) -> None:
        """Both sides learn that the connection is gone."""
        if self.closed:
            return
        self.closed = True
        for end in (self.server_end, self.client_end):
            end.disconnecting = True
            assert end.protocol is not None
            end.protocol.connectionLost(reason)


class MemoryNSQD:
    """
    An nsqd with no sockets: a :class:`Broker <txnsq.nsqd.broker.Broker>` and the V2
    protocol on a clock, reached through :meth:`connect`.

    :param args: Go-style nsqd flags (``["--max-rdy-count=10"]``).
    :param clock: the clock nsqd (and the clients given it as their
        reactor) run on; a new ``Clock`` when omitted.
    :param address: the ``host:port`` clients use for it (any is accepted
        by :meth:`connect` unless :meth:`refuse` was called for it).
    :param overrides: :class:`NSQDOptions <txnsq.nsqd.options.NSQDOptions>` attributes
        set after the flags.

    :ivar clock: the clock; :meth:`advance` moves it.
    :ivar broker: the broker core, to inspect topics and channels, or to
        publish in-process.
    :ivar factory: the V2 protocol factory (its ``clients``, for stats).
    :ivar options: the options it runs with.
    """

    def __init__(
        self,
        args: Sequence[str] = (),
        clock: Optional[Clock] = None,
        address: str = "127.0.0.1:4150",
        **overrides: Any,
    ) -> None:
        self.clock = clock if clock is not None else Clock()
        self.address = address
        # --storage=memory unless told otherwise by a later flag; no data path.
        options = parse_nsqd_args(["--storage=memory"] + list(args))
        apply_overrides(options, overrides)
        if options.storage != "memory":
            raise ValueError("MemoryNSQD keeps messages in memory only, not --storage=%s" % (options.storage,))
        for flag, value in (
            ("--tls-cert", options.tls_cert),
            ("--auth-http-address", options.auth_http_address),
        ):
            if value:
                raise ValueError("MemoryNSQD has no %s: use txnsq.testing.start_nsqd" % (flag,))
        self.options: NSQDOptions = options
        self.broker = Broker(options, self.clock, MemoryStorage())
        # nsqd's negotiable features (snappy, deflate) as its flags say; no
        # TLS (no certificate in memory), no auth server.
        self.factory = NSQDFactory(
            self.broker, self.clock, ServerFeatures.from_options(options, None, None)
        )
        self._connections: List[_Connection] = []
        self._refused: Dict[str, str] = {}
        self._ports = 50000

    @property
    def connections(self) -> int:
        """How many client connections are open."""
        return sum(1 for connection in self._connections if not connection.closed)

    def connect(
        self,
        reactor: Any,
        address: str,
        config: Any = None,
        delegate: Any = None,
        clock: Any = None,
    ) -> "Deferred[Any]":
        """
        :func:`txnsq.client.connection.connect` in memory, to pass as a
        Producer's or Consumer's ``connect=``: a Deferred firing with the
        ready :class:`NSQConnection <txnsq.client.connection.NSQConnection>` once the
        handshake's bytes have moved (at the next :meth:`flush`), or
        failing as a refused connection for an address :meth:`refuse`\\ d.
        ``reactor`` and ``clock`` are ignored: the connection runs on this
        nsqd's clock.
        """
        from txnsq.client.connection import ConnectionConfig, NSQConnection, NSQConnectionError

        reason = self._refused.get(address)
        if reason is not None:
            return fail(
                NSQConnectionError(
                    "connecting to nsqd %s failed: %s" % (address, reason),
                    Failure(ConnectionRefusedError(reason)),
                )
            )
        client = NSQConnection(
            address, config if config is not None else ConnectionConfig(), delegate, self.clock
        )
        self._ports += 1
        server = self.factory.buildProtocol(IPv4Address("TCP", "127.0.0.1", self._ports))
        self._connections.append(_Connection(client, server, self._ports, address))
        return client.when_ready()

    def refuse(self, address: str, reason: str = "connection refused") -> None:
        """Make :meth:`connect` to ``address`` fail, as a down nsqd does."""
        self._refused[address] = reason

    def accept(self, address: str) -> None:
        """Undo :meth:`refuse`."""
        self._refused.pop(address, None)

    def flush(self) -> None:
        """
        Run what is due now (``callLater(0)``, nsqd's output batching) and
        move bytes both ways until nothing more moves.

        :raises RuntimeError: the two sides never go quiet (a protocol loop).
        """
        for _ in range(MAX_ROUNDS):
            self.clock.advance(0)
            moved = False
            for connection in list(self._connections):
                if connection.pump():
                    moved = True
            self._connections = [c for c in self._connections if not c.closed]
            if not moved:
                return
        raise RuntimeError("MemoryNSQD.flush: the connections never went quiet")

    def advance(self, seconds: float) -> None:
        """Move the clock ``seconds`` (timers fire: heartbeats, timeouts, deferred messages), then :meth:`flush`."""
        self.flush()
        self.clock.advance(seconds)
        self.flush()

    def drop(self, address: Optional[str] = None) -> None:
        """
        Break the connections (to ``address``, or all) as a network failure
        would: both sides see the connection lost, nothing buffered arrives.
        """
        for connection in list(self._connections):
            if address is None or connection.address == address:
                connection.close(Failure(ConnectionDone("dropped by MemoryNSQD.drop")))
        self._connections = [c for c in self._connections if not c.closed]

    def close(self) -> None:
        """Disconnect every client and close the broker (after the test)."""
        self.flush()
        self.drop()
        self.broker.close()

    def publish(self, topic: str, body: bytes) -> None:
        """Publish in-process (no client), as another producer would."""
        self.broker.get_topic(topic).publish(body)
