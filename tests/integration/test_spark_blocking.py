"""
Tests for :mod:`txnsq.spark.blocking` against a real nsqd process.
"""

from __future__ import annotations

import os
import socket

from twisted.trial.unittest import SynchronousTestCase

from tests_spark.nsqd import NSQDProcess, shared_nsqd, unique_topic
from txnsq.protocol.frames import FRAME_TYPE_MESSAGE
from txnsq.protocol.message import decode_message
from txnsq.protocol.v2_client import NSQError
from txnsq.spark.blocking import BlockingConnection, ClientSettings, NSQConnectionFailed, lookup_nsqd_addresses


def _free_address() -> str:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return "127.0.0.1:%d" % (s.getsockname()[1],)


def _receive(conn: BlockingConnection, count: int) -> list:
    """``count`` message payloads read from ``conn`` (bounded by a timeout)."""
    got: list = []
    for _ in range(200):
        for frame_type, data in conn.read_frames(0.1):
            if frame_type == FRAME_TYPE_MESSAGE:
                got.append(decode_message(data))
        if len(got) >= count:
            return got
    raise AssertionError("received %d of %d messages" % (len(got), count))


class BlockingConnectionTests(SynchronousTestCase):
    """BlockingConnection against nsqd."""

    def setUp(self) -> None:
        self.nsqd = shared_nsqd()
        self.topic = unique_topic()

    def connect(self, **settings: object) -> BlockingConnection:
        conn = BlockingConnection(self.nsqd.tcp_address, ClientSettings(**settings))  # type: ignore[arg-type]
        self.addCleanup(conn.close)
        return conn

    def test_identify(self) -> None:
        """IDENTIFY's reply is kept; msg_timeout is what nsqd granted, max sizes are Go's defaults."""
        conn = self.connect(msg_timeout=12.5)
        self.assertEqual(conn.identify_response["max_rdy_count"], 2500)
        self.assertEqual(conn.msg_timeout, 12.5)
        self.assertEqual((conn.max_msg_size, conn.max_body_size), (1048576, 5242880))

    def test_publish_subscribe(self) -> None:
        """Messages published with PUB and MPUB reach a subscriber, which FINs them."""
        producer = self.connect()
        consumer = self.connect()
        consumer.subscribe(self.topic, "c")
        producer.publish(self.topic, b"one")
        producer.mpublish(self.topic, [b"two", b"three"])
        consumer.ready(10)
        got = _receive(consumer, 3)
        self.assertEqual(sorted(body for _, _, _, body in got), [b"one", b"three", b"two"])
        consumer.finish([msg_id for _, _, msg_id, _ in got])
        consumer.close_wait()
        stats = self.nsqd.channel_stats(self.topic, "c")
        self.assertEqual((stats["depth"], stats["in_flight_count"]), (0, 0))

    def test_requeue(self) -> None:
        """REQ sends a message back; it comes again with attempts 2."""
        self.connect().publish(self.topic, b"again")
        consumer = self.connect()
        consumer.subscribe(self.topic, "c")
        consumer.ready(1)
        (_, attempts, msg_id, _), = _receive(consumer, 1)
        self.assertEqual(attempts, 1)
        consumer.requeue([msg_id])
        (_, attempts, again, body), = _receive(consumer, 1)
        self.assertEqual((attempts, again, body), (2, msg_id, b"again"))

    def test_refused(self) -> None:
        """nsqd's error frames become NSQError; names are checked before sending."""
        conn = self.connect()
        self.assertEqual(self.assertRaises(NSQError, conn.publish, "bad topic", b"x").code, "E_BAD_TOPIC")
        error = self.assertRaises(NSQError, conn.publish, self.topic, b"x" * (1048576 + 1))
        self.assertEqual(error.code, "E_BAD_MESSAGE")

    def test_compression(self) -> None:
        """With snappy or deflate negotiated, messages still flow both ways."""
        for compression in ("snappy", "deflate"):
            producer = self.connect(compression=compression)
            consumer = self.connect(compression=compression)
            consumer.subscribe(self.topic, compression)
            producer.mpublish(self.topic, [b"z" * 1000, b"y"])
            consumer.ready(5)
            self.assertEqual(sorted(m[3] for m in _receive(consumer, 2)), [b"y", b"z" * 1000])

    def test_heartbeat(self) -> None:
        """Heartbeats are answered and not returned; the connection stays usable."""
        conn = self.connect(heartbeat_interval=1.0)
        conn.subscribe(self.topic, "c")
        # nsqd heartbeats every second; three seconds of reads see only heartbeats.
        for _ in range(30):
            self.assertEqual(conn.read_frames(0.1), [])
        self.connect().publish(self.topic, b"after")
        conn.ready(1)
        self.assertEqual(_receive(conn, 1)[0][3], b"after")

    def test_unreachable(self) -> None:
        """An address nobody listens on fails with NSQConnectionFailed naming it."""
        address = _free_address()
        error = self.assertRaises(NSQConnectionFailed, BlockingConnection, address, ClientSettings(connect_timeout=2))
        self.assertIn(address, str(error))

    def test_tls_refused_without_cert(self) -> None:
        """Asking for TLS from an nsqd without a certificate fails clearly."""
        error = self.assertRaises(
            NSQConnectionFailed, BlockingConnection, self.nsqd.tcp_address, ClientSettings(tls=True)
        )
        self.assertIn("did not grant TLS", str(error))


class BlockingTLSTests(SynchronousTestCase):
    """BlockingConnection with TLS."""

    def test_tls(self) -> None:
        """With TLS granted the socket is wrapped, nsqd's certificate verified, and messages flow."""
        from tests.integration.tls_certs import write_server_files

        directory = self.mktemp()
        os.makedirs(directory)
        files = write_server_files(directory)
        nsqd = NSQDProcess(*files.args())
        self.addCleanup(nsqd.stop)
        settings = ClientSettings(tls=True, tls_ca_file=files.ca)
        conn = BlockingConnection(nsqd.tcp_address, settings)
        self.addCleanup(conn.close)
        conn.subscribe("tls_topic", "c")
        conn.publish("tls_topic", b"secret")
        conn.ready(1)
        self.assertEqual(_receive(conn, 1)[0][3], b"secret")
        untrusted = ClientSettings(tls=True)
        error = self.assertRaises(NSQConnectionFailed, BlockingConnection, nsqd.tcp_address, untrusted)
        self.assertIn("TLS", str(error))


class LookupTests(SynchronousTestCase):
    """lookup_nsqd_addresses."""

    def test_lookup(self) -> None:
        """The nsqds a lookupd lists for a topic are found; an unknown topic has none."""
        from tests_spark.nsqd import wait_until

        lookupd = NSQDProcess(program="nsqlookupd")
        self.addCleanup(lookupd.stop)
        nsqd = NSQDProcess("--lookupd-tcp-address=" + lookupd.tcp_address, "--broadcast-address=127.0.0.1")
        self.addCleanup(nsqd.stop)
        conn = BlockingConnection(nsqd.tcp_address)
        self.addCleanup(conn.close)
        conn.publish("looked_up", b"x")
        port = nsqd.tcp_address.rsplit(":", 1)[1]
        found = wait_until(lambda: lookup_nsqd_addresses([lookupd.http_address], "looked_up"), 20, "registration")
        self.assertEqual(found, ["127.0.0.1:" + port])
        self.assertEqual(lookup_nsqd_addresses(["http://" + lookupd.http_address], "unknown"), [])

    def test_no_lookupd(self) -> None:
        """When no lookupd answers the error lists them."""
        address = _free_address()
        error = self.assertRaises(NSQConnectionFailed, lookup_nsqd_addresses, [address], "t", 2.0)
        self.assertIn(address, str(error))


class BlockingAuthTests(SynchronousTestCase):
    """BlockingConnection with an nsqd that requires AUTH."""

    def setUp(self) -> None:
        import http.server
        import json
        import threading
        from urllib.parse import parse_qs, urlsplit

        secrets = self.secrets = []  # type: list

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                secret = parse_qs(urlsplit(self.path).query).get("secret", [""])[0]
                secrets.append(secret)
                if secret != "s3cret":
                    self.send_response(403)
                    self.end_headers()
                    return
                body = json.dumps({
                    "ttl": 3600, "identity": "spark", "identity_url": "",
                    "authorizations": [{"permissions": ["publish", "subscribe"], "topic": ".*", "channels": [".*"]}],
                }).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: object) -> None:
                pass

        server = http.server.HTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        self.addCleanup(server.server_close)
        self.addCleanup(server.shutdown)
        self.nsqd = NSQDProcess("--auth-http-address=127.0.0.1:%d" % (server.server_address[1],))
        self.addCleanup(self.nsqd.stop)

    def test_auth(self) -> None:
        """AUTH is sent when nsqd requires it; its reply is kept and commands are then allowed."""
        conn = BlockingConnection(self.nsqd.tcp_address, ClientSettings(auth_secret="s3cret"))
        self.addCleanup(conn.close)
        self.assertEqual(conn.auth_response["identity"], "spark")
        conn.publish("authed", b"x")
        self.assertEqual(self.secrets, ["s3cret"])

    def test_no_secret(self) -> None:
        """Without auth_secret the connection fails, saying which option to set."""
        error = self.assertRaises(NSQConnectionFailed, BlockingConnection, self.nsqd.tcp_address)
        self.assertIn("auth_secret", str(error))

    def test_refused(self) -> None:
        """A secret the auth server refuses fails with nsqd's error."""
        error = self.assertRaises(NSQError, BlockingConnection, self.nsqd.tcp_address, ClientSettings(auth_secret="nope"))
        self.assertIn("E_AUTH", error.code)
