"""Tests for :mod:`lab.workers.tcpproxy`: settings, and the proxy on loopback sockets."""

from __future__ import annotations

import random
import time
from typing import Any, List

from twisted.internet import protocol
from twisted.internet import reactor as _reactor
from twisted.internet.defer import Deferred
from twisted.trial.unittest import SynchronousTestCase, TestCase

from lab.workers.tcpproxy import Proxy, Settings

reactor: Any = _reactor


class SettingsTests(SynchronousTestCase):
    """Settings: the control file's values."""

    def test_update(self) -> None:
        """Known keys are taken, others ignored; absent keys keep their value."""
        settings = Settings(delay_ms=5.0)
        settings.update({"jitter_ms": "3", "drop": 0.5, "other": 1})
        self.assertEqual(settings.as_dict(), {"delay_ms": 5.0, "jitter_ms": 3.0, "drop": 0.5, "cut_every_s": 0.0})

    def test_out_of_range(self) -> None:
        """A negative value, or a drop chance over 1, is refused."""
        self.assertRaises(ValueError, Settings().update, {"delay_ms": -1})
        self.assertRaises(ValueError, Settings().update, {"drop": 1.5})


class _Echo(protocol.Protocol):
    def dataReceived(self, data: bytes) -> None:
        assert self.transport is not None
        self.transport.write(data)


class _Client(protocol.Protocol):
    def __init__(self, expected: int) -> None:
        self.expected = expected
        self.received = b""
        self.done: Deferred = Deferred()
        self.closed: Deferred = Deferred()

    def dataReceived(self, data: bytes) -> None:
        self.received += data
        if len(self.received) >= self.expected and not self.done.called:
            self.done.callback(self.received)

    def connectionLost(self, reason: Any = None) -> None:
        if not self.done.called:
            self.done.callback(self.received)
        # A Failure given to callback would run the errbacks.
        self.closed.callback(None)


class ProxyTests(TestCase):
    """The proxy between a client and an echo server on 127.0.0.1."""

    def setUp(self) -> None:
        echo = protocol.Factory.forProtocol(_Echo)
        self.server: Any = reactor.listenTCP(0, echo, interface="127.0.0.1")
        self.addCleanup(self.server.stopListening)
        self.settings = Settings()
        self.proxy = Proxy(("127.0.0.1", self.server.getHost().port), self.settings, random.Random(1))
        self.listener: Any = reactor.listenTCP(0, self.proxy, interface="127.0.0.1")
        self.addCleanup(self.listener.stopListening)
        self.clients: List[Any] = []
        self.addCleanup(self.close_all)

    def close_all(self) -> None:
        for client in self.clients:
            if client.transport is not None:
                client.transport.abortConnection()
        for pair in list(self.proxy.pairs):
            pair.finish(abort=True)

    def connect(self, expected: int) -> Deferred:
        client = _Client(expected)
        self.clients.append(client)
        creator = protocol.ClientCreator(reactor, lambda: client)
        port = self.listener.getHost().port
        return creator.connectTCP("127.0.0.1", port).addCallback(lambda _: client)

    def test_delay_keeps_order(self) -> Deferred:
        """Chunks come back in order, each way delayed: an echo takes at least twice the delay less the jitter."""
        self.settings.update({"delay_ms": 40, "jitter_ms": 20})
        chunks = [b"%04d" % i for i in range(50)]
        started = time.monotonic()

        def send(client: _Client) -> Deferred:
            assert client.transport is not None
            for chunk in chunks:
                client.transport.write(chunk)
            return client.done

        def check(received: bytes) -> None:
            self.assertEqual(received, b"".join(chunks))
            self.assertGreaterEqual(time.monotonic() - started, 0.039)

        return self.connect(200).addCallback(send).addCallback(check)

    def test_drop_cuts(self) -> Deferred:
        """With drop 1 the first chunk cuts the connection: nothing comes back."""
        self.settings.update({"drop": 1.0})

        def send(client: _Client) -> Deferred:
            assert client.transport is not None
            client.transport.write(b"lost")
            return client.closed.addCallback(lambda _: client)

        def check(client: _Client) -> None:
            self.assertEqual(client.received, b"")
            self.assertEqual(self.proxy.cuts, 1)

        return self.connect(4).addCallback(send).addCallback(check)

    def test_cut_timer(self) -> Deferred:
        """cut_every_s cuts a connection that stays open."""
        self.settings.update({"cut_every_s": 0.05})

        def send(client: _Client) -> Deferred:
            assert client.transport is not None
            client.transport.write(b"ping")
            return client.closed

        def check(_: Any) -> None:
            self.assertEqual(self.proxy.cuts, 1)

        return self.connect(1000).addCallback(send).addCallback(check)

