"""
The HTTP API of the ``nsqd`` console script over real sockets: publish
with ``/pub``, ``/mpub`` (both body formats) and ``/pub?defer=`` using treq,
consume over TCP with the test client, and serve the same API over HTTPS
with a certificate made by the test.
"""

from __future__ import annotations

import datetime
import ipaddress
import os
from typing import Any, Generator, List, Optional, Tuple

import treq
from twisted.internet.defer import Deferred, inlineCallbacks
from twisted.trial.unittest import TestCase
from twisted.web.client import Agent, BrowserLikePolicyForHTTPS, HTTPConnectionPool

from tests.integration.nsq_client import NSQClient, connect
from tests.integration.nsqd_process import NSQDProcess, run_nsqd

LOOPBACK = ["--tcp-address=127.0.0.1:0", "--http-address=127.0.0.1:0"]

#: How long a message may take to arrive over TCP after its publish.
DELIVERY_TIMEOUT = 10.0


def write_self_signed(directory: str, host: str = "127.0.0.1") -> Tuple[str, str]:
    """
    A self-signed certificate for ``host`` (IP and ``localhost`` names) and
    its key, written as PEM files in ``directory``; their paths.
    """
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import rsa
    from cryptography.x509.oid import NameOID

    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, host)])
    now = datetime.datetime.now(datetime.timezone.utc)
    certificate = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(days=1))
        .not_valid_after(now + datetime.timedelta(days=30))
        .add_extension(
            x509.SubjectAlternativeName(
                [x509.IPAddress(ipaddress.ip_address(host)), x509.DNSName("localhost")]
            ),
            critical=False,
        )
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    cert_path = os.path.join(directory, "cert.pem")
    key_path = os.path.join(directory, "key.pem")
    with open(cert_path, "wb") as stream:
        stream.write(certificate.public_bytes(serialization.Encoding.PEM))
    with open(key_path, "wb") as stream:
        stream.write(
            key.private_bytes(
                serialization.Encoding.PEM,
                serialization.PrivateFormat.TraditionalOpenSSL,
                serialization.NoEncryption(),
            )
        )
    return cert_path, key_path


def http_client(reactor: Any, trust_pem: Optional[bytes] = None) -> Any:
    """A treq client without persistent connections (nothing left open after a test)."""
    pool = HTTPConnectionPool(reactor, persistent=False)
    if trust_pem is None:
        agent = Agent(reactor, pool=pool)
    else:
        from twisted.internet.ssl import Certificate

        policy = BrowserLikePolicyForHTTPS(trustRoot=Certificate.loadPEM(trust_pem))
        agent = Agent(reactor, contextFactory=policy, pool=pool)
    return treq.client.HTTPClient(agent)


class HTTPProcessTestCase(TestCase):
    """Runs one nsqd process per test, and talks to it."""

    timeout = 60

    def setUp(self) -> None:
        from twisted.internet import reactor

        self.reactor = reactor
        self.http = http_client(reactor)
        self.consumers: List[NSQClient] = []

    @inlineCallbacks
    def start(self, *args: str) -> Generator[Any, Any, NSQDProcess]:
        data_path = self.mktemp()
        os.makedirs(data_path)
        process = NSQDProcess(LOOPBACK + ["--data-path=" + data_path] + list(args), self.reactor)
        yield process.start()
        self.addCleanup(process.stop)
        return process

    @inlineCallbacks
    def consumer(self, process: NSQDProcess, topic: str, ready: int = 100) -> Generator[Any, Any, NSQClient]:
        client = yield connect(self.reactor, process.tcp_port)
        self.addCleanup(client.close)
        yield client.sub(topic, "c")
        client.rdy(ready)
        yield client.round_trip()
        return client

    def url(self, process: NSQDProcess, path: str) -> str:
        return "http://127.0.0.1:%d%s" % (process.http_port, path)

    @inlineCallbacks
    def post(self, process: NSQDProcess, path: str, body: bytes) -> Generator[Any, Any, Tuple[int, bytes, Any]]:
        response = yield self.http.post(self.url(process, path), data=body)
        content = yield response.content()
        return response.code, content, response


class PublishOverHTTPTests(HTTPProcessTestCase):
    """Messages published over HTTP reach TCP consumers."""

    @inlineCallbacks
    def test_pub(self) -> Generator[Any, Any, None]:
        """POST /pub delivers the body to a subscribed consumer."""
        process = yield self.start()
        client = yield self.consumer(process, "t")
        code, body, response = yield self.post(process, "/pub?topic=t", b"hello over http")
        self.assertEqual((code, body), (200, b"OK"))
        self.assertEqual(response.headers.getRawHeaders("X-NSQ-Content-Type"), ["nsq; version=1.0"])
        arrived = yield client.wait_messages(1, DELIVERY_TIMEOUT)
        self.assertTrue(arrived)
        self.assertEqual([m.body for m in client.messages], [b"hello over http"])

    @inlineCallbacks
    def test_mpub_both_formats(self) -> Generator[Any, Any, None]:
        """POST /mpub in text and binary mode delivers every message, in order."""
        process = yield self.start()
        client = yield self.consumer(process, "t")
        code, body, _ = yield self.post(process, "/mpub?topic=t", b"one\n\ntwo\r\nthree")
        self.assertEqual((code, body), (200, b"OK"))
        binary = b"\x00\x00\x00\x02" + b"\x00\x00\x00\x04four" + b"\x00\x00\x00\x07fi\nve\x00\xff"
        code, body, _ = yield self.post(process, "/mpub?topic=t&binary=true", binary)
        self.assertEqual((code, body), (200, b"OK"))
        arrived = yield client.wait_messages(5, DELIVERY_TIMEOUT)
        self.assertTrue(arrived)
        self.assertEqual(
            [m.body for m in client.messages],
            [b"one", b"two\r", b"three", b"four", b"fi\nve\x00\xff"],
        )

    @inlineCallbacks
    def test_pub_deferred(self) -> Generator[Any, Any, None]:
        """POST /pub?defer=1500 arrives no earlier than 1.5 s later; an undeferred one first."""
        process = yield self.start()
        client = yield self.consumer(process, "t")
        sent = self.reactor.seconds()
        code, body, _ = yield self.post(process, "/pub?topic=t&defer=1500", b"later")
        self.assertEqual((code, body), (200, b"OK"))
        code, body, _ = yield self.post(process, "/pub?topic=t", b"now")
        self.assertEqual((code, body), (200, b"OK"))
        arrived = yield client.wait_messages(2, DELIVERY_TIMEOUT)
        self.assertTrue(arrived)
        self.assertEqual([m.body for m in client.messages], [b"now", b"later"])
        self.assertGreaterEqual(client.messages[1].received_at - sent, 1.5)

    @inlineCallbacks
    def test_errors(self) -> Generator[Any, Any, None]:
        """Errors are Go's JSON with a Content-Length; nothing is published."""
        process = yield self.start("--max-msg-size=5")
        code, body, response = yield self.post(process, "/pub?topic=t", b"too long")
        self.assertEqual((code, body), (413, b'{"message":"MSG_TOO_BIG"}'))
        self.assertEqual(response.length, len(body))
        self.assertEqual(
            response.headers.getRawHeaders("Content-Type"), ["application/json; charset=utf-8"]
        )
        code, body, _ = yield self.post(process, "/mpub?topic=t&binary=1", b"\x00\x00\x00\x00")
        self.assertEqual((code, body), (413, b'{"message":"BAD_BODY"}'))
        response = yield self.http.get(self.url(process, "/stats?format=json&include_mem=false"))
        stats = yield response.json()
        self.assertEqual([t["message_count"] for t in stats["topics"]], [0])


class HTTPSTests(HTTPProcessTestCase):
    """With --tls-cert and --tls-key the API is served over HTTPS too."""

    def certificate(self) -> Tuple[str, str, bytes]:
        directory = self.mktemp()
        os.makedirs(directory)
        cert, key = write_self_signed(directory)
        with open(cert, "rb") as stream:
            return cert, key, stream.read()

    def wait_for_listener(self, process: NSQDProcess, label: str) -> "Deferred[int]":
        """Fires with the port of ``label``'s listening line once it is printed."""
        found: Deferred[int] = Deferred()

        def check() -> None:
            process._scan()
            if label in process.ports and not found.called:
                process.collector.on_output = None
                found.callback(process.ports[label])

        process.collector.on_output = check
        check()
        return found.addTimeout(20, self.reactor)

    @inlineCallbacks
    def test_https_process(self) -> Generator[Any, Any, None]:
        """nsqd logs 'HTTPS: listening on', and answers /ping and /pub over TLS."""
        cert, key, pem = self.certificate()
        process = yield self.start(
            "--tls-cert=" + cert, "--tls-key=" + key, "--https-address=127.0.0.1:0"
        )
        port = yield self.wait_for_listener(process, "HTTPS")
        self.assertIn("HTTPS: listening on 127.0.0.1:%d" % (port,), process.output())
        https = http_client(self.reactor, pem)
        response = yield https.get("https://127.0.0.1:%d/ping" % (port,))
        body = yield response.content()
        self.assertEqual((response.code, body), (200, b"OK"))
        client = yield self.consumer(process, "secure")
        response = yield https.post("https://127.0.0.1:%d/pub?topic=secure" % (port,), data=b"tls")
        self.assertEqual(response.code, 200)
        yield response.content()
        arrived = yield client.wait_messages(1, DELIVERY_TIMEOUT)
        self.assertTrue(arrived)
        self.assertEqual(client.messages[0].body, b"tls")

    @inlineCallbacks
    def test_tls_required(self) -> Generator[Any, Any, None]:
        """With --tls-required=true plain HTTP is refused 403 with the HTTPS port."""
        cert, key, pem = self.certificate()
        process = yield self.start(
            "--tls-cert=" + cert,
            "--tls-key=" + key,
            "--https-address=127.0.0.1:0",
            "--tls-required=true",
        )
        port = yield self.wait_for_listener(process, "HTTPS")
        response = yield self.http.get(self.url(process, "/ping"))
        body = yield response.content()
        self.assertEqual(
            (response.code, body),
            (403, b'{"message": "TLS_REQUIRED", "https_port": %d}' % (port,)),
        )
        https = http_client(self.reactor, pem)
        response = yield https.get("https://127.0.0.1:%d/ping" % (port,))
        body = yield response.content()
        self.assertEqual((response.code, body), (200, b"OK"))

    @inlineCallbacks
    def test_https_in_process(self) -> Generator[Any, Any, None]:
        """txnsq.testing.start_nsqd serves HTTPS too when given a certificate."""
        from txnsq.testing import start_nsqd

        cert, key, pem = self.certificate()
        nsqd = yield start_nsqd(
            args=["--tls-cert=" + cert, "--tls-key=" + key, "--https-address=127.0.0.1:0"]
        )
        self.addCleanup(nsqd.stop)
        port = nsqd.service.bound_ports()["HTTPS"]
        https = http_client(self.reactor, pem)
        response = yield https.get("https://127.0.0.1:%d/info" % (port,))
        info = yield response.json()
        self.assertEqual(info["http_port"], nsqd.http_port)

    @inlineCallbacks
    def test_untrusted_client_refused(self) -> Generator[Any, Any, None]:
        """A client that does not trust the certificate cannot connect."""
        from twisted.web._newclient import ResponseNeverReceived

        cert, key, _ = self.certificate()
        _, _, other = self.certificate()
        process = yield self.start("--tls-cert=" + cert, "--tls-key=" + key, "--https-address=127.0.0.1:0")
        port = yield self.wait_for_listener(process, "HTTPS")
        https = http_client(self.reactor, other)
        with self.assertRaises(ResponseNeverReceived):
            yield https.get("https://127.0.0.1:%d/ping" % (port,))

    @inlineCallbacks
    def test_bad_certificate(self) -> Generator[Any, Any, None]:
        """An unreadable certificate stops nsqd with Go's message and status 1."""
        status, _, stderr = yield run_nsqd(
            LOOPBACK + ["--tls-cert=/no/such/cert.pem", "--tls-key=/no/such/key.pem"],
            self.reactor,
        )
        self.assertEqual(status.code, 1)
        self.assertIn(b"failed to instantiate nsqd - failed to build TLS config - ", stderr)


