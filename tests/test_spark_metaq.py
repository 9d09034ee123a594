"""Tests for txnsq.spark.metaq: the blocking client against the fake broker on a loopback socket."""

from __future__ import annotations

import os
import socket
import ssl

from twisted.trial.unittest import SynchronousTestCase

from tests.metaq_fakes import FakeMetaqStore, ThreadedFakeBroker
from txnsq.client.metaq import (
    LogRecord,
    MetaqConnectionError,
    MetaqEndOfPartition,
    MetaqMoved,
    MetaqNotFound,
    MetaqRecordTooLarge,
    MetaqResultError,
    MetaqTimeoutError,
)
from txnsq.spark.metaq import BlockingMetaqClient, read_partition


class BlockingMetaqClientTests(SynchronousTestCase):
    """BlockingMetaqClient's calls."""

    def setUp(self) -> None:
        self.store = FakeMetaqStore(topics=("t",), partitions_per_topic=2)
        self.broker = ThreadedFakeBroker(self.store)
        self.addCleanup(self.broker.stop)

    def connect(self, **kwargs: object) -> BlockingMetaqClient:
        client = BlockingMetaqClient(self.broker.address, request_timeout=5, **kwargs)  # type: ignore[arg-type]
        self.addCleanup(client.close)
        return client

    def test_put_get(self) -> None:
        """put returns id, partition and offset; get returns the records with their offsets."""
        client = self.connect()
        self.assertEqual(client.put("t", 1, b"one"), (1, 1, 0))
        self.assertEqual(client.put("t", 1, b"two", attribute=b"a"), (2, 1, 23))
        got = client.get("t", 1, 0, 1000)
        self.assertEqual(
            got.records,
            [LogRecord(1, 0, None, b"one", 0, 23), LogRecord(2, 1, b"a", b"two", 23, 28)],
        )
        self.assertEqual(got.next_offset, 51)

    def test_errors(self) -> None:
        """End of partition, unknown partition and moved offsets raise the Twisted client's exceptions."""
        client = self.connect()
        self.assertRaises(MetaqEndOfPartition, client.get, "t", 0, 0, 100)
        self.assertRaises(MetaqNotFound, client.get, "t", 7, 0, 100)
        client.put("t", 0, b"abc")
        moved = self.assertRaises(MetaqMoved, client.get, "t", 0, 5, 100)
        self.assertEqual(moved.offset, 0)
        self.assertEqual(client.get("t", 0, 5, 100, follow_moved=True).records[0].payload, b"abc")

    def test_get_raw(self) -> None:
        """get_raw returns the reply's record bytes unparsed, and raises as get does."""
        client = self.connect()
        client.put("t", 1, b"one")
        client.put("t", 1, b"two")
        raw = client.get_raw("t", 1, 0, 1000)
        self.assertEqual(len(raw), 46)
        self.assertEqual(raw[20:23] + raw[43:], b"onetwo")
        self.assertEqual(client.get_raw("t", 1, 23, 1000)[20:], b"two")
        self.assertRaises(MetaqEndOfPartition, client.get_raw, "t", 1, 46, 100)
        self.assertRaises(MetaqMoved, client.get_raw, "t", 1, 5, 100)
        self.assertRaises(MetaqNotFound, client.get_raw, "t", 9, 0, 100)

    def test_put_many(self) -> None:
        """put_many writes every put before reading the replies: results in order; a refusal raises after all are read."""
        client = self.connect()
        results = client.put_many("t", 0, [(b"a", None), (b"b", b"attr"), (b"c", None)])
        self.assertEqual([r[2] for r in results], [0, 21, 50])
        self.assertEqual([r.payload for r in client.get("t", 0, 0, 1000).records], [b"a", b"b", b"c"])
        self.assertRaises(MetaqResultError, client.put_many, "t", 9, [(b"x", None)])
        self.assertEqual(client.put("t", 0, b"d")[2], 71)

    def test_offset_stats_version(self) -> None:
        """offset, stats and version return the broker's answers."""
        client = self.connect()
        client.put("t", 0, b"abc")
        self.assertEqual(client.offset("t", 0, 10), 0)
        self.assertEqual(client.stats("x"), "item x")
        self.assertEqual(client.version(), "txnsq-fake")

    def test_offset_for_time(self) -> None:
        """offset_for_time asks with @unixMs and returns the broker's offset; an unknown partition raises 404."""
        client = self.connect()
        self.store.add("t", 0, b"old", time_ms=1000)
        self.store.add("t", 0, b"new", time_ms=2000)
        self.assertEqual(client.offset_for_time("t", 0, 1500), 23)
        self.assertEqual(client.offset_for_time("t", 0, 5000), 46)
        self.assertRaises(MetaqNotFound, client.offset_for_time, "t", 7, 0)

    def test_auth(self) -> None:
        """A secret is sent on connect; a refused one raises the 403."""
        self.store.secret = b"pw"
        error = self.assertRaises(
            MetaqResultError, BlockingMetaqClient, self.broker.address, auth_secret="bad"
        )
        self.assertEqual(error.code, 403)
        client = self.connect(auth_secret="pw")
        self.assertEqual(client.version(), "txnsq-fake")

    def test_read_partition(self) -> None:
        """read_partition yields every record from the first kept to the end, growing the size for a large one."""
        for n in range(5):
            self.store.add("t", 0, b"%d" % (n,) * (1 if n != 3 else 300))
        part = self.store.partitions[("t", 0)]
        part.drop_before(part.starts[1])
        client = self.connect()
        records = list(read_partition(client, "t", 0, 0, max_size=50))
        self.assertEqual([r.payload[:1] for r in records], [b"1", b"2", b"3", b"4"])
        self.assertEqual(len(records[2].payload), 300)

    def test_read_partition_too_large(self) -> None:
        """A record above max_reply_size raises MetaqRecordTooLarge."""
        self.store.add("t", 0, b"x" * 300)
        client = self.connect(max_reply_size=256)
        self.assertRaises(MetaqRecordTooLarge, list, read_partition(client, "t", 0, 0, max_size=50))

    def test_timeout(self) -> None:
        """A broker that does not answer raises MetaqTimeoutError."""
        self.store.silent = True
        client = BlockingMetaqClient(self.broker.address, request_timeout=0.2)
        self.addCleanup(client.close)
        self.assertRaises(MetaqTimeoutError, client.version)

    def test_closed(self) -> None:
        """After close, calls raise MetaqConnectionError; close is idempotent."""
        client = self.connect()
        client.close()
        client.close()
        self.assertRaises(MetaqConnectionError, client.version)

    def test_unreachable(self) -> None:
        """An address nobody listens on raises MetaqConnectionError naming it."""
        sock = socket.socket()
        sock.bind(("127.0.0.1", 0))
        address = "127.0.0.1:%d" % (sock.getsockname()[1],)
        sock.close()
        error = self.assertRaises(MetaqConnectionError, BlockingMetaqClient, address)
        self.assertIn(address, str(error))


class BlockingMetaqTLSTests(SynchronousTestCase):
    """TLS from the first byte."""

    def test_tls(self) -> None:
        """With tls the client verifies the broker's certificate and talks over TLS; an untrusted one fails."""
        from tests.integration.tls_certs import write_server_files

        directory = self.mktemp()
        os.makedirs(directory)
        files = write_server_files(directory)
        server_context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        server_context.load_cert_chain(files.cert, files.key)
        store = FakeMetaqStore(topics=("t",))
        broker = ThreadedFakeBroker(store, server_context)
        self.addCleanup(broker.stop)
        context = ssl.create_default_context(cafile=files.ca)
        client = BlockingMetaqClient(broker.address, tls=True, ssl_context=context)
        self.addCleanup(client.close)
        self.assertEqual(client.put("t", 0, b"secret"), (1, 0, 0))
        self.assertEqual(client.get("t", 0, 0, 100).records[0].payload, b"secret")
        error = self.assertRaises(MetaqConnectionError, BlockingMetaqClient, broker.address, tls=True)
        self.assertIn("CERTIFICATE_VERIFY_FAILED", str(error))
