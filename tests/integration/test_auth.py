"""
AUTH end to end: an in-process nsqd with ``--auth-http-address`` pointing at
a real auth HTTP server started by the test, and V2 clients over real
sockets on 127.0.0.1.
"""

from __future__ import annotations

import json
import struct
from typing import Any, Dict, List, Optional

from twisted.internet import reactor
from twisted.internet.defer import Deferred, inlineCallbacks
from twisted.internet.task import deferLater
from twisted.trial.unittest import TestCase
from twisted.web import resource, server

from tests.integration.nsq_client import NSQClient, NSQError, connect
from tests.integration.nsqd_process import free_port
from txnsq.testing import start_nsqd


class AuthServer(resource.Resource):
    """An auth server answering what the test tells it, recording queries."""

    isLeaf = True

    def __init__(self) -> None:
        resource.Resource.__init__(self)
        self.queries: List[Dict[str, str]] = []
        self.answer: Any = {
            "ttl": 3600,
            "identity": "worker-1",
            "identity_url": "https://auth.example/worker-1",
            "authorizations": [
                {"permissions": ["publish", "subscribe"], "topic": "^events$", "channels": [".*"]}
            ],
        }
        self.status = 200
        self.hang = False

    def render_GET(self, request: Any) -> Any:
        self.queries.append(
            {key.decode(): values[0].decode() for key, values in request.args.items()}
        )
        if self.hang:
            return server.NOT_DONE_YET
        request.setResponseCode(self.status)
        if isinstance(self.answer, bytes):
            return self.answer
        return json.dumps(self.answer).encode()


def auth_command(secret: bytes) -> bytes:
    return b"AUTH\n" + struct.pack(">I", len(secret)) + secret


class AuthTests(TestCase):
    """nsqd asks the auth server and enforces what it answers."""

    timeout = 30

    @inlineCallbacks
    def start(self, *extra: str, auth_port: Optional[int] = None) -> Any:
        self.authd = AuthServer()
        if auth_port is None:
            port = reactor.listenTCP(0, server.Site(self.authd), interface="127.0.0.1")  # type: ignore[attr-defined]
            self.addCleanup(port.stopListening)
            auth_port = port.getHost().port
        self.nsqd = yield start_nsqd(
            args=["--auth-http-address=127.0.0.1:%d" % (auth_port,)] + list(extra)
        )
        self.addCleanup(self.nsqd.stop)

    @inlineCallbacks
    def client(self) -> Any:
        client = yield connect(reactor, self.nsqd.tcp_port)
        self.addCleanup(client.close)
        return client

    def auth(self, client: NSQClient, secret: bytes = b"s3cret") -> "Deferred[bytes]":
        return client._command(auth_command(secret))

    @inlineCallbacks
    def test_allowed(self) -> Any:
        """AUTH answers the identity; an authorized client publishes and subscribes."""
        yield self.start()
        client = yield self.client()
        reply = yield self.auth(client)
        self.assertEqual(
            json.loads(reply),
            {"identity": "worker-1", "identity_url": "https://auth.example/worker-1", "permission_count": 1},
        )
        self.assertEqual(
            self.authd.queries,
            [{"common_name": "", "remote_ip": "127.0.0.1", "secret": "s3cret", "tls": "false"}],
        )
        yield client.pub("events", b"hello")
        yield client.sub("events", "archive")
        client.rdy(1)
        yield client.wait_messages(1, 5)
        self.assertEqual(client.messages[0].body, b"hello")

    @inlineCallbacks
    def test_auth_first(self) -> Any:
        """Before AUTH, PUB is refused with E_AUTH_FIRST and the connection closes."""
        yield self.start()
        client = yield self.client()
        error = yield self.assertFailure(client.pub("events", b"x"), NSQError)
        self.assertEqual(error.args[0], b"E_AUTH_FIRST AUTH required before PUB")
        yield client.wait_for(lambda: client.lost is not None, 5)
        self.assertIsNotNone(client.lost)

    @inlineCallbacks
    def test_denied(self) -> Any:
        """A topic the authorizations do not cover is E_UNAUTHORIZED; other clients go on."""
        yield self.start()
        client = yield self.client()
        other = yield self.client()
        yield self.auth(client)
        yield self.auth(other)
        error = yield self.assertFailure(client.pub("payroll", b"x"), NSQError)
        self.assertEqual(error.args[0], b'E_UNAUTHORIZED AUTH failed for PUB on "payroll" ""')
        yield client.wait_for(lambda: client.lost is not None, 5)
        yield other.pub("events", b"still fine")

    @inlineCallbacks
    def test_no_authorizations(self) -> Any:
        """An auth server granting nothing makes AUTH E_UNAUTHORIZED."""
        yield self.start()
        self.authd.answer = dict(self.authd.answer, authorizations=[])
        client = yield self.client()
        error = yield self.assertFailure(self.auth(client), NSQError)
        self.assertEqual(error.args[0], b"E_UNAUTHORIZED AUTH no authorizations found")

    @inlineCallbacks
    def test_expired_refreshed(self) -> Any:
        """Once the ttl is over, the next command asks the auth server again."""
        yield self.start()
        self.authd.answer = dict(self.authd.answer, ttl=1)
        client = yield self.client()
        yield self.auth(client)
        yield client.pub("events", b"one")
        self.assertEqual(len(self.authd.queries), 1)
        yield deferLater(reactor, 1.2, lambda: None)
        yield client.pub("events", b"two")
        self.assertEqual(len(self.authd.queries), 2)
        self.assertEqual(self.authd.queries[1]["secret"], "s3cret")

    @inlineCallbacks
    def test_unreachable(self) -> Any:
        """An auth server that cannot be reached is E_AUTH_FAILED for that client only."""
        yield self.start(auth_port=free_port())
        client = yield self.client()
        error = yield self.assertFailure(self.auth(client), NSQError)
        self.assertEqual(error.args[0], b"E_AUTH_FAILED AUTH failed")
        other = yield self.client()
        error = yield self.assertFailure(other.pub("events", b"x"), NSQError)
        self.assertEqual(error.args[0], b"E_AUTH_FIRST AUTH required before PUB")

    @inlineCallbacks
    def test_garbage_answer(self) -> Any:
        """An auth server answering garbage is E_AUTH_FAILED."""
        yield self.start()
        self.authd.answer = b"<html>oops</html>"
        client = yield self.client()
        error = yield self.assertFailure(self.auth(client), NSQError)
        self.assertEqual(error.args[0], b"E_AUTH_FAILED AUTH failed")

    @inlineCallbacks
    def test_never_answers(self) -> Any:
        """An auth server that never answers times out as E_AUTH_FAILED."""
        yield self.start("--http-client-request-timeout=300ms")
        self.authd.hang = True
        client = yield self.client()
        error = yield self.assertFailure(self.auth(client), NSQError)
        self.assertEqual(error.args[0], b"E_AUTH_FAILED AUTH failed")
