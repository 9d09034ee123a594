"""
The txnsq Producer and Consumer against an ``nsqd`` process (the console
script on 127.0.0.1): TLS with snappy, TLS with deflate, and AUTH against
an auth server in the test.  Certificates come from
:mod:`tests.integration.tls_certs`.
"""

from __future__ import annotations

import os
from typing import Any, Generator, List

import treq
from twisted.internet.defer import inlineCallbacks
from twisted.internet.task import deferLater
from twisted.trial.unittest import TestCase
from twisted.web import server
from twisted.web.client import HTTPConnectionPool

from tests.integration.nsqd_process import NSQDProcess
from tests.integration.test_auth import AuthServer
from tests.integration.tls_certs import client_tls_options, shared_pki, write_server_files
from txnsq.client import ConnectionConfig, Consumer, Message, NSQError, Producer

#: Messages each test publishes and consumes.
COUNT = 50

#: Seconds the messages may take to arrive.
DELIVERY_TIMEOUT = 20.0


class ClientProcessTestCase(TestCase):
    """An nsqd process per test; a Producer and a Consumer in the test's reactor."""

    timeout = 60

    def setUp(self) -> None:
        from twisted.internet import reactor

        self.reactor = reactor
        self.received: List[bytes] = []

    @inlineCallbacks
    def start(self, *flags: str) -> Generator[Any, Any, NSQDProcess]:
        directory = os.path.abspath(self.mktemp())
        os.makedirs(directory)
        process = NSQDProcess(
            ["--tcp-address=127.0.0.1:0", "--http-address=127.0.0.1:0", "--https-address=",
             "--storage=memory", "--data-path=" + directory] + list(flags),
            self.reactor,
            cwd=directory,
        )
        self.addCleanup(process.stop)
        yield process.start()
        return process

    def handler(self, message: Message) -> bool:
        self.received.append(message.body)
        return True

    @inlineCallbacks
    def round_trip(self, nsqd: NSQDProcess, config: ConnectionConfig, topic: str = "events") -> Generator[Any, Any, None]:
        """Publish COUNT messages with a Producer and consume them all with a Consumer."""
        address = "127.0.0.1:%d" % (nsqd.tcp_port,)
        producer = Producer([address], config=config, reactor=self.reactor)
        self.addCleanup(producer.close)
        bodies = [b"message %d " % (i,) + b"x" * (i * 37) for i in range(COUNT)]
        yield producer.multi_publish(topic, bodies[: COUNT // 2])
        for body in bodies[COUNT // 2 :]:
            yield producer.publish(topic, body)
        consumer = Consumer(
            topic, "archive", self.handler, nsqd_tcp_addresses=[address],
            max_in_flight=10, config=config, reactor=self.reactor,
        )
        consumer.start()
        self.addCleanup(consumer.close)
        yield self.wait_for(lambda: len(self.received) >= COUNT)
        self.assertEqual(sorted(self.received), sorted(bodies))
        self.server_clients = yield self.clients(nsqd, topic)
        yield consumer.close()

    @inlineCallbacks
    def clients(self, nsqd: NSQDProcess, topic: str) -> Generator[Any, Any, List[Any]]:
        """nsqd's /stats entries for the clients of ``topic``'s channels."""
        pool = HTTPConnectionPool(self.reactor, persistent=False)
        response = yield treq.get(
            "http://127.0.0.1:%d/stats?format=json&topic=%s" % (nsqd.http_port, topic), pool=pool
        )
        stats = yield response.json()
        return [
            client
            for entry in stats["topics"]
            for channel in entry["channels"]
            for client in channel["clients"]
        ]

    @inlineCallbacks
    def wait_for(self, done: Any) -> Generator[Any, Any, None]:
        deadline = self.reactor.seconds() + DELIVERY_TIMEOUT
        while not done():
            if self.reactor.seconds() > deadline:
                self.fail("%d of %d messages arrived" % (len(self.received), COUNT))
            yield deferLater(self.reactor, 0.02, lambda: None)


class TLSTests(ClientProcessTestCase):
    """TLS with snappy, and with deflate, end to end."""

    @inlineCallbacks
    def start_tls(self) -> Generator[Any, Any, NSQDProcess]:
        files = write_server_files(os.path.abspath(self.mktemp()), shared_pki())
        nsqd = yield self.start(*files.args())
        return nsqd

    @inlineCallbacks
    def test_tls_snappy(self) -> Generator[Any, Any, None]:
        """tls_v1 + snappy: every message published and consumed intact."""
        nsqd = yield self.start_tls()
        yield self.round_trip(nsqd, ConnectionConfig(tls_v1=True, tls_options=client_tls_options(), snappy=True))
        self.assertEqual(
            [(c["tls"], c["snappy"], c["deflate"]) for c in self.server_clients], [(True, True, False)]
        )

    @inlineCallbacks
    def test_tls_deflate(self) -> Generator[Any, Any, None]:
        """tls_v1 + deflate: every message published and consumed intact."""
        nsqd = yield self.start_tls()
        yield self.round_trip(
            nsqd, ConnectionConfig(tls_v1=True, tls_options=client_tls_options(), deflate=True, deflate_level=3)
        )
        self.assertEqual(
            [(c["tls"], c["snappy"], c["deflate"]) for c in self.server_clients], [(True, False, True)]
        )


class AuthTests(ClientProcessTestCase):
    """AUTH against a real auth HTTP server."""

    @inlineCallbacks
    def start_with_auth(self) -> Generator[Any, Any, NSQDProcess]:
        self.authd = AuthServer()
        site = server.Site(self.authd)
        site.noisy = False
        port = self.reactor.listenTCP(0, site, interface="127.0.0.1")
        self.addCleanup(port.stopListening)
        nsqd = yield self.start("--auth-http-address=127.0.0.1:%d" % (port.getHost().port,))
        return nsqd

    @inlineCallbacks
    def test_allowed(self) -> Generator[Any, Any, None]:
        """With a secret that grants the topic, Producer and Consumer work."""
        nsqd = yield self.start_with_auth()
        yield self.round_trip(nsqd, ConnectionConfig(auth_secret="s3cret"))
        self.assertEqual({query["secret"] for query in self.authd.queries}, {"s3cret"})

    @inlineCallbacks
    def test_denied(self) -> Generator[Any, Any, None]:
        """A topic the authorizations do not cover: the publish fails with E_UNAUTHORIZED."""
        nsqd = yield self.start_with_auth()
        producer = Producer(["127.0.0.1:%d" % (nsqd.tcp_port,)], config=ConnectionConfig(auth_secret="s3cret"),
                            reactor=self.reactor)
        self.addCleanup(producer.close)
        error = yield self.assertFailure(producer.publish("other", b"x"), NSQError)
        self.assertEqual(error.code, "E_UNAUTHORIZED")
