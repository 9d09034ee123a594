"""
Tests for txnsq.metaq.server: the MetaQ listener's protocol over
StringTransport, with a backend over real topic logs in a temporary
directory (LogMetaqBackend) or a fake one.
"""

from __future__ import annotations

from typing import Any, List, Optional, Tuple

from twisted.internet.address import IPv4Address
from twisted.internet.defer import Deferred
from twisted.internet.task import Clock
from twisted.internet.testing import StringTransport
from twisted.python.failure import Failure
from twisted.trial.unittest import SynchronousTestCase
from zope.interface import implementer
from zope.interface.verify import verifyObject

from txnsq.metaq.backend import IMetaqBackend, LogMetaqBackend, MetaqRefused, NoSuchPartition
from txnsq.metaq.server import MetaqFactory, MetaqServerProtocol
from txnsq.protocol.auth import AuthError, AuthState, Authorization
from txnsq.protocol.metaq import GetRequest, PutRequest, ResultResponse, ValueResponse
from txnsq.protocol.metaq_parser import MetaqResponseParser
from txnsq.protocol.metaq_record import encode_record, iter_records, join_attribute
from txnsq.storage.log import PartitionStats
from txnsq.storage.topic_log import TopicLog

HUNDRED = b"x" * 100


class Client:
    """One connection to the listener over a StringTransport, its replies parsed."""

    def __init__(self, factory: MetaqFactory, port: int = 40000) -> None:
        self.transport = StringTransport(
            hostAddress=IPv4Address("TCP", "127.0.0.1", 8123),
            peerAddress=IPv4Address("TCP", "127.0.0.1", port),
        )
        protocol = factory.buildProtocol(None)
        assert isinstance(protocol, MetaqServerProtocol)
        self.protocol = protocol
        protocol.makeConnection(self.transport)
        self.parser = MetaqResponseParser(max_body_size=64 * 1024 * 1024)

    def send(self, data: bytes) -> List[Any]:
        """Send bytes; the replies they caused."""
        self.protocol.dataReceived(data)
        return self.replies()

    def replies(self) -> List[Any]:
        """The replies written since the last call."""
        written = self.transport.value()
        self.transport.clear()
        return self.parser.feed(written)

    def one(self, data: bytes) -> Any:
        """Send bytes that cause exactly one reply; that reply."""
        replies = self.send(data)
        assert len(replies) == 1, replies
        return replies[0]

    @property
    def closed(self) -> bool:
        return bool(self.transport.disconnecting)


def result(code: int, body: bytes, opaque: int) -> ResultResponse:
    return ResultResponse(code, body, opaque)


class LogBackendCase(SynchronousTestCase):
    """A listener over a LogMetaqBackend in a temporary directory."""

    max_body_size = 1024 * 1024

    def setUp(self) -> None:
        self.clock = Clock()
        self.clock.advance(1700000000)
        self.backend = LogMetaqBackend(self.clock, self.mktemp(), partitions=2, version="txnsq-test")
        self.addCleanup(self.backend.close)
        self.factory = MetaqFactory(self.backend, self.clock, self.max_body_size)
        self.client = Client(self.factory)

    def put(self, topic: str, partition: int, payload: bytes, opaque: int = 1) -> Tuple[int, int, int]:
        reply = self.client.one(PutRequest(topic, partition, payload, 0, opaque).encode())
        self.assertEqual((reply.code, reply.opaque), (200, opaque), reply)
        return reply.put_result()


class PutAndGetTests(LogBackendCase):
    """put stores a record, get serves whole records."""

    def test_put_reply(self) -> None:
        """put is answered result 200 with msgId, partition and offset, and the record is in the log."""
        reply = self.client.one(b"put orders 1 5 0 7\r\nhello")
        self.assertEqual(reply, result(200, b"1 1 0", 7))
        reply = self.client.one(b"put orders 1 5 0 8\r\nworld")
        self.assertEqual(reply, result(200, b"2 1 25", 8))
        data, _ = self.backend.logs["orders"].partitions[1].read(0, 1000)
        self.assertEqual([r.payload for r in iter_records(data)], [b"hello", b"world"])

    def test_put_any_partition(self) -> None:
        """put to partition -1 lets the backend pick one, named in the reply."""
        self.assertEqual(self.put("orders", -1, b"a")[1], 0)
        self.assertEqual(self.put("orders", -1, b"b")[1], 1)

    def test_get_whole_records(self) -> None:
        """get serves the records from offset, whole, at most maxSize bytes."""
        for number in range(3):
            self.put("orders", 0, HUNDRED)
        reply = self.client.one(GetRequest("orders", "g", 0, 0, 250, 9).encode())
        self.assertIsInstance(reply, ValueResponse)
        self.assertEqual(reply.opaque, 9)
        self.assertEqual(len(reply.data), 240)
        self.assertEqual([(r.msg_id, r.payload) for r in reply.records()], [(1, HUNDRED), (2, HUNDRED)])
        reply = self.client.one(GetRequest("orders", "g", 0, 240, 1000, 10).encode())
        self.assertEqual([r.msg_id for r in reply.records()], [3])

    def test_get_writes_header_and_slice(self) -> None:
        """get writes the value header and the log's slice in one writeSequence."""
        self.put("orders", 0, b"abc")
        sequences: List[List[bytes]] = []
        transport = self.client.transport
        write_sequence = transport.writeSequence

        def recording(data: Any) -> None:
            sequences.append(list(data))
            write_sequence(data)

        transport.writeSequence = recording  # type: ignore[method-assign]
        self.client.one(b"get orders g 0 0 1000 4\r\n")
        self.assertEqual(sequences, [[b"value 23 4\r\n", encode_record(1, 0, b"abc")]])

    def test_attribute_kept(self) -> None:
        """A put with flag & 1 keeps its attribute and flag in the record get serves."""
        data = join_attribute(b"AAA", b"FFFF")
        reply = self.client.one(PutRequest("orders", 0, data, 1, 3).encode())
        self.assertEqual(reply.code, 200)
        [record] = self.client.one(b"get orders g 0 0 1000 4\r\n").records()
        self.assertEqual((record.flag, record.attribute, record.payload), (1, b"AAA", b"FFFF"))

    def test_get_at_end(self) -> None:
        """get at the end of the partition is 404 Could not find message at position."""
        self.put("orders", 0, b"abc")
        reply = self.client.one(b"get orders g 0 23 1000 5\r\n")
        self.assertEqual(reply, result(404, b"Could not find message at position 23", 5))

    def test_get_moved(self) -> None:
        """get inside a record, past the end or before the start is 301 with the nearest valid offset."""
        self.put("orders", 0, b"abc")
        self.put("orders", 0, b"abc")
        self.assertEqual(self.client.one(b"get orders g 0 30 1000 5\r\n"), result(301, b"23", 5))
        self.assertEqual(self.client.one(b"get orders g 0 999 1000 6\r\n"), result(301, b"46", 6))
        self.assertEqual(self.client.one(b"get orders g 0 -5 1000 7\r\n"), result(301, b"0", 7))

    def test_get_never_serves_a_damaged_record(self) -> None:
        """
        A record byte flipped in the segment file while the listener runs:
        get serves the records before it, a get at it is 301 to the next
        record, and the reader's parser accepts every reply.
        """
        for number in range(4):
            self.put("orders", 0, HUNDRED)
        partition = self.backend.logs["orders"].partitions[0]
        path = "%s/%020d.log" % (partition.directory, 0)
        with open(path, "r+b") as segment:
            segment.seek(120 + 20 + 50)
            segment.write(b"y")
        reply = self.client.one(GetRequest("orders", "g", 0, 0, 10000, 9).encode())
        self.assertEqual([r.msg_id for r in reply.records()], [1])
        self.assertEqual(self.client.one(GetRequest("orders", "g", 0, 120, 10000, 10).encode()), result(301, b"240", 10))
        reply = self.client.one(GetRequest("orders", "g", 0, 240, 10000, 11).encode())
        self.assertEqual([r.msg_id for r in reply.records()], [3, 4])

    def test_get_no_such_topic_or_partition(self) -> None:
        """get on an unknown topic or partition is 404 ... is not exists."""
        self.put("orders", 0, b"abc")
        self.assertEqual(
            self.client.one(b"get nope g 0 0 1000 5\r\n"),
            result(404, b"The topic `nope` in partition `0` is not exists", 5),
        )
        self.assertEqual(
            self.client.one(b"get orders g 7 0 1000 6\r\n"),
            result(404, b"The topic `orders` in partition `7` is not exists", 6),
        )

    def test_get_record_larger_than_max_size(self) -> None:
        """get whose first record is larger than maxSize is value 0 (ask again with more)."""
        self.put("orders", 0, HUNDRED)
        reply = self.client.one(b"get orders g 0 0 119 5\r\n")
        self.assertEqual(reply, ValueResponse(b"", 5))
        self.assertFalse(self.client.closed)

    def test_get_max_size_below_a_header(self) -> None:
        """get with a maxSize no record fits in (below 20 bytes) is 400, and the connection goes on."""
        reply = self.client.one(b"get orders g 0 0 19 5\r\n")
        self.assertEqual(reply.code, 400)
        self.assertEqual(reply.opaque, 5)
        self.assertIn(b"invalid max size:19", reply.body)
        self.assertFalse(self.client.closed)
        self.assertEqual(self.client.one(b"version 6\r\n"), result(200, b"txnsq-test", 6))

    def test_offset(self) -> None:
        """offset answers the nearest valid offset; 404 for a partition that does not exist."""
        self.put("orders", 0, b"abc")
        self.put("orders", 0, b"abc")
        self.assertEqual(self.client.one(b"offset orders g 0 30 3\r\n"), result(200, b"23", 3))
        self.assertEqual(self.client.one(b"offset orders g 0 9999 3\r\n"), result(200, b"46", 3))
        self.assertEqual(self.client.one(b"offset orders g 5 0 4\r\n").code, 404)

    def test_offset_by_timestamp(self) -> None:
        """offset with @unixMs answers a record start at or before the first record published at or after it, the end when all are older, 404 for no partition."""
        backend = LogMetaqBackend(self.clock, self.mktemp(), partitions=2, index_interval=1)
        self.addCleanup(backend.close)
        client = Client(MetaqFactory(backend, self.clock, self.max_body_size))
        for body in (b"aaa", b"bbb"):
            self.assertEqual(client.one(PutRequest("orders", 0, body, 0, 1).encode()).code, 200)
        self.clock.advance(1)
        for body in (b"ccc", b"ddd"):
            self.assertEqual(client.one(PutRequest("orders", 0, body, 0, 1).encode()).code, 200)
        # Published at 1700000000 s (a, b at offsets 0, 23) and 1700000001 s (c, d at 46, 69).
        self.assertEqual(client.one(b"offset orders g 0 @1700000000500 3\r\n"), result(200, b"23", 3))
        self.assertEqual(client.one(b"offset orders g 0 @1700000000000 4\r\n"), result(200, b"0", 4))
        self.assertEqual(client.one(b"offset orders g 0 @1700000002000 5\r\n"), result(200, b"92", 5))
        self.assertEqual(client.one(b"offset orders g 0 @0 6\r\n"), result(200, b"0", 6))
        self.assertEqual(client.one(b"offset orders g 1 @0 7\r\n"), result(200, b"0", 7))
        self.assertEqual(client.one(b"offset orders g 5 @0 8\r\n").code, 404)
        reply = client.one(b"offset orders g 0 @-1 9\r\n")
        self.assertEqual((reply.code, reply.opaque), (400, 9))

    def test_pipelined(self) -> None:
        """Requests sent together are answered in order, each with its opaque."""
        replies = self.client.send(b"put t 0 1 0 1\r\naversion 2\r\nget t g 0 0 100 3\r\noffset t g 0 0 4\r\n")
        self.assertEqual([reply.opaque for reply in replies], [1, 2, 3, 4])
        self.assertIsInstance(replies[2], ValueResponse)


class StatsTests(LogBackendCase):
    """stats: the broker's figures and the partitions' offsets, as text."""

    def test_stats(self) -> None:
        """stats without an item gives uptime, topics and every partition's offsets."""
        self.put("orders", 0, b"abc")
        self.clock.advance(12)
        reply = self.client.one(b"stats 3\r\n")
        self.assertEqual((reply.code, reply.opaque), (200, 3))
        lines = reply.body.decode().split("\r\n")
        self.assertIn("uptime 12", lines)
        self.assertIn("version txnsq-test", lines)
        self.assertIn("topics 1", lines)
        self.assertIn("curr_connections 1", lines)
        self.assertIn("orders-0 0 23 23 1", lines)
        self.assertIn("orders-1 0 0 0 1", lines)

    def test_stats_topic(self) -> None:
        """stats with a topic's name gives that topic's partitions; stats topics lists the topics."""
        self.put("orders", 0, b"abc")
        self.put("other", 0, b"abc")
        reply = self.client.one(b"stats orders 3\r\n")
        self.assertEqual(reply.body, b"orders-0 0 23 23 1\r\norders-1 0 0 0 1\r\n")
        reply = self.client.one(b"stats topics 4\r\n")
        self.assertEqual(reply.body, b"orders 2\r\nother 2\r\n")

    def test_stats_unknown(self) -> None:
        """stats of an unknown item or topic is 404."""
        reply = self.client.one(b"stats nothing 3\r\n")
        self.assertEqual((reply.code, reply.opaque), (404, 3))

    def test_version(self) -> None:
        """version answers the backend's version, with or without an opaque."""
        self.assertEqual(self.client.one(b"version 2\r\n"), result(200, b"txnsq-test", 2))
        self.assertEqual(self.client.one(b"version\r\n"), result(200, b"txnsq-test", 2147483647))


class BadInputTests(LogBackendCase):
    """Bad requests: a result with the code and why, the connection kept where MetaQ keeps it, nothing stored."""

    max_body_size = 100

    def assertNothingStored(self) -> None:
        for log in self.backend.logs.values():
            for stats in log.stats():
                self.assertEqual(stats.next_offset, 0)

    def assertBad(self, line: bytes, code: int, text: bytes, closed: bool = False) -> None:
        reply = self.client.one(line)
        self.assertEqual(reply.code, code, reply)
        self.assertIn(text, reply.body)
        self.assertEqual(self.client.closed, closed)
        self.assertNothingStored()

    def test_unknown_command(self) -> None:
        """An unknown command is 400, and the connection goes on."""
        self.assertBad(b"frobnicate 1\r\n", 400, b"unknown command")
        self.assertEqual(self.client.one(b"version 2\r\n").code, 200)

    def test_wrong_field_count(self) -> None:
        """A get with a wrong number of fields is 400 with its opaque."""
        self.assertBad(b"get t g 0 0 5\r\n", 400, b"expected 7 fields")

    def test_non_numeric(self) -> None:
        """A non-numeric partition is 400; a put's body is skipped with it."""
        self.assertBad(b"put t x 3 0 5\r\nabc", 400, b"invalid partition")
        self.assertEqual(self.client.one(b"version 2\r\n").code, 200)

    def test_negative_body_length(self) -> None:
        """A negative put body length is 400 and closes (the stream cannot be framed)."""
        self.assertBad(b"put t 0 -3 0 5\r\nabc", 400, b"negative body length", closed=True)

    def test_body_larger_than_max_msg_size(self) -> None:
        """A put body over --max-msg-size is 400 and closes, nothing stored."""
        self.assertBad(b"put t 0 101 0 5\r\n" + b"x" * 101, 400, b"larger than 100", closed=True)

    def test_no_such_partition(self) -> None:
        """A put to a partition the topic does not have is 404, nothing stored."""
        self.put("t", 0, b"")  # the topic exists, with 2 partitions
        self.backend.logs["t"].partitions[0].close()
        self.backend.logs["t"] = TopicLog(self.mktemp(), "t", 2, self.clock)
        self.assertBad(b"put t 2 3 0 5\r\nabc", 404, b"The topic `t` in partition `2` is not exists")

    def test_invalid_topic_name(self) -> None:
        """A put to a topic name NSQ refuses is 400, nothing created."""
        self.assertBad(b"put bad/name 0 3 0 5\r\nabc", 400, b"invalid topic name")
        self.assertEqual(self.backend.topics(), [])

    def test_bad_checksum(self) -> None:
        """A put whose checksum is not its body's is 400."""
        self.assertBad(b"put t 0 3 0 12345 5\r\nabc", 400, b"checksum")

    def test_transaction(self) -> None:
        """A put inside a transaction is refused with 403."""
        self.assertBad(b"put t 0 3 0 tx1 5\r\nabc", 403, b"transactions")

    def test_storage_failure(self) -> None:
        """A put the log cannot write is 500, and the log is unchanged."""
        self.put("t", 0, b"")
        partition = self.backend.logs["t"].partitions[0]

        def failing(fd: int, data: Any) -> int:
            raise OSError(28, "No space left on device")

        partition.os_write = failing
        reply = self.client.one(b"put t 0 3 0 5\r\nabc")
        self.assertEqual((reply.code, reply.opaque), (500, 5))
        self.assertIn(b"No space left", reply.body)
        self.assertEqual(partition.next_offset, 20)

    def test_quit(self) -> None:
        """quit closes the connection without a reply; what follows is ignored."""
        self.assertEqual(self.client.send(b"quit\r\nput t 0 3 0 5\r\nabc"), [])
        self.assertTrue(self.client.closed)
        self.assertNothingStored()

    def test_line_too_long(self) -> None:
        """A line without CRLF in 4096 bytes is 400 and closes."""
        self.assertBad(b"x" * 5000, 400, b"line too long", closed=True)


@implementer(IMetaqBackend)
class FakeBackend:
    """An IMetaqBackend whose answers the test sets."""

    version = "fake"

    def __init__(self) -> None:
        self.data = b""
        self.error: Optional[BaseException] = None
        self.calls: List[Tuple[Any, ...]] = []

    def put(self, topic: str, partition: int, flag: int, data: bytes) -> Tuple[int, int, int]:
        self.calls.append(("put", topic, partition, flag, data))
        if self.error is not None:
            raise self.error
        return -5, 0, 40

    def read(self, topic: str, partition: int, offset: int, max_size: int) -> bytes:
        self.calls.append(("read", topic, partition, offset, max_size))
        if self.error is not None:
            raise self.error
        return self.data

    def nearest_offset(self, topic: str, partition: int, offset: int) -> int:
        if self.error is not None:
            raise self.error
        return 0

    def offset_for_timestamp(self, topic: str, partition: int, timestamp_ms: int) -> int:
        self.calls.append(("offset_for_timestamp", topic, partition, timestamp_ms))
        if self.error is not None:
            raise self.error
        return 7

    def topics(self) -> List[str]:
        return []

    def partition_stats(self, topic: str) -> Optional[List[PartitionStats]]:
        return None


class FakeBackendTests(SynchronousTestCase):
    """The adapter over a fake IMetaqBackend."""

    def setUp(self) -> None:
        self.backend = FakeBackend()
        self.factory = MetaqFactory(self.backend, Clock(), 1024)
        self.client = Client(self.factory)

    def test_backends_provide_the_interface(self) -> None:
        """The fake and LogMetaqBackend provide IMetaqBackend."""
        verifyObject(IMetaqBackend, self.backend)
        verifyObject(IMetaqBackend, LogMetaqBackend(Clock()))

    def test_data_written_as_read(self) -> None:
        """get writes the very bytes object the backend read, after the header."""
        data = encode_record(1, 0, b"abc")
        self.backend.data = data
        sequences: List[List[bytes]] = []
        self.client.transport.writeSequence = sequences.append  # type: ignore[method-assign,assignment]
        self.client.protocol.dataReceived(b"get t g 0 0 1000 4\r\n")
        self.assertEqual(sequences, [[b"value 23 4\r\n", data]])
        self.assertIs(sequences[0][1], data)

    def test_read_error(self) -> None:
        """A get the backend cannot read is 500 and the connection goes on."""
        self.backend.error = OSError(5, "Input/output error")
        reply = self.client.one(b"get t g 0 0 1000 4\r\n")
        self.assertEqual((reply.code, reply.opaque), (500, 4))
        self.assertIn(b"Input/output error", reply.body)
        self.assertFalse(self.client.closed)

    def test_unexpected_error(self) -> None:
        """An unexpected backend error is logged and answered 500; the connection goes on."""
        self.backend.error = RuntimeError("boom")
        reply = self.client.one(b"put t 0 1 0 4\r\na")
        self.assertEqual((reply.code, reply.opaque, reply.body), (500, 4, b"put: internal error"))
        self.assertEqual(len(self.flushLoggedErrors(RuntimeError)), 1)
        self.assertEqual(self.client.one(b"version 5\r\n").code, 200)

    def test_refused(self) -> None:
        """A refusal from the backend is answered with its code and text."""
        self.backend.error = MetaqRefused(403, "closed")
        self.assertEqual(self.client.one(b"put t 0 1 0 4\r\na"), result(403, b"closed", 4))
        self.backend.error = NoSuchPartition("t", 3)
        self.assertEqual(self.client.one(b"offset t g 3 0 5\r\n").code, 404)

    def test_offset_by_timestamp_calls_backend(self) -> None:
        """offset with @unixMs asks the backend's offset_for_timestamp and answers its offset; a storage error is 500."""
        self.assertEqual(self.client.one(b"offset t g 2 @1795687200000 4\r\n"), result(200, b"7", 4))
        self.assertEqual(self.backend.calls, [("offset_for_timestamp", "t", 2, 1795687200000)])
        self.backend.error = OSError(5, "Input/output error")
        reply = self.client.one(b"offset t g 2 @1 5\r\n")
        self.assertEqual((reply.code, reply.opaque), (500, 5))

    def test_put_reply_signed_id(self) -> None:
        """The put reply carries the backend's signed message id."""
        self.assertEqual(self.client.one(b"put t 0 1 0 4\r\na"), result(200, b"-5 0 40", 4))
        self.assertEqual(self.backend.calls, [("put", "t", 0, 0, b"a")])

    def test_backpressure(self) -> None:
        """While the transport's buffer is full the connection is not read; then it is again."""
        self.assertIs(self.client.transport.producer, self.client.protocol)
        self.client.protocol.pauseProducing()
        self.assertEqual(self.client.transport.producerState, "paused")
        self.client.protocol.resumeProducing()
        self.assertEqual(self.client.transport.producerState, "producing")

    def test_no_delay(self) -> None:
        """TCP connections are set TCP_NODELAY, so that a value reply's last segment is not held back."""

        class NoDelayTransport(StringTransport):
            no_delay = False

            def setTcpNoDelay(self, enabled: bool) -> None:
                self.no_delay = enabled

        transport = NoDelayTransport()
        self.factory.buildProtocol(None).makeConnection(transport)
        self.assertTrue(transport.no_delay)

    def test_connections_counted(self) -> None:
        """The factory knows its connections; close_all closes them."""
        self.assertEqual(len(self.factory.connections), 1)
        self.factory.close_all()
        self.assertTrue(self.client.closed)
        self.client.protocol.connectionLost(Failure(ConnectionError()))
        self.assertEqual(len(self.factory.connections), 0)


class MirrorGateTests(SynchronousTestCase):
    """Puts whose reply waits for the mirror (``--mirror-min-standbys``), through the factory's gate."""

    def setUp(self) -> None:
        self.backend = FakeBackend()
        self.held: List[Any] = []
        self.asked: List[str] = []
        self.fail_now: Optional[str] = None
        self.factory = MetaqFactory(self.backend, Clock(), 1024, mirror_gate=self.gate)
        self.client = Client(self.factory)

    def gate(self, topic: str, waiter: Any) -> bool:
        self.asked.append(topic)
        if self.fail_now is not None:
            waiter.mirror_fail(self.fail_now)
            return True
        if topic.startswith("m"):
            self.held.append(waiter)
            return True
        return False

    def test_reply_waits_for_release(self) -> None:
        """A put the gate holds is answered on release; requests after it wait, reading paused, and are answered in order."""
        self.assertEqual(self.client.send(b"put mt 0 1 0 4\r\na"), [])
        self.assertEqual(self.client.transport.producerState, "paused")
        self.assertEqual(self.client.send(b"version 5\r\nput other 0 1 0 6\r\nb"), [])
        self.held[0].mirror_release()
        replies = self.client.replies()
        self.assertEqual([(r.code, r.opaque) for r in replies], [(200, 4), (200, 5), (200, 6)])
        self.assertEqual(replies[0], result(200, b"-5 0 40", 4))
        self.assertEqual(self.client.transport.producerState, "producing")
        self.assertEqual(self.asked, ["mt", "other"])

    def test_reply_failed(self) -> None:
        """A put the mirror fails is answered 503 with the reason; the connection goes on."""
        self.client.send(b"put mt 0 1 0 4\r\na")
        self.held[0].mirror_fail("mirror: gone; outcome unknown")
        self.assertEqual(self.client.replies(), [result(503, b"put: mirror: gone; outcome unknown", 4)])
        self.assertEqual(self.client.one(b"version 5\r\n").code, 200)
        self.assertFalse(self.client.closed)

    def test_failed_at_once(self) -> None:
        """A gate failing the put as it is asked answers 503 at once, and the next request runs."""
        self.fail_now = "mirror: gone"
        replies = self.client.send(b"put mt 0 1 0 4\r\naversion 5\r\n")
        self.assertEqual([(r.code, r.opaque) for r in replies], [(503, 4), (200, 5)])
        self.assertEqual(self.client.transport.producerState, "producing")

    def test_refused_put_not_gated(self) -> None:
        """A put the backend refused is answered at once, the gate not asked."""
        self.backend.error = MetaqRefused(503, "put: mirror: 0 of 1 required standbys live")
        self.assertEqual(
            self.client.one(b"put mt 0 1 0 4\r\na"), result(503, b"put: mirror: 0 of 1 required standbys live", 4)
        )
        self.assertEqual(self.asked, [])

    def test_release_after_close(self) -> None:
        """A release after the connection closed writes nothing."""
        self.client.send(b"put mt 0 1 0 4\r\na")
        self.client.protocol.connectionLost(Failure(Exception("gone")))
        self.held[0].mirror_release()
        self.assertEqual(self.client.transport.value(), b"")

    def test_no_gate_by_default(self) -> None:
        """Without a gate (--mirror-min-standbys=0) a put is answered at once."""
        client = Client(MetaqFactory(self.backend, Clock(), 1024))
        self.assertEqual(client.one(b"put mt 0 1 0 4\r\na").code, 200)


class FakeAuth:
    """An auth client whose answers the test gives."""

    def __init__(self) -> None:
        self.queries: List[Tuple[Any, ...]] = []
        self.pending: List["Deferred[AuthState]"] = []

    def query(self, remote_ip: str, tls: bool, secret: Any, common_name: str) -> "Deferred[AuthState]":
        self.queries.append((remote_ip, tls, secret, common_name))
        answer: Deferred[AuthState] = Deferred()
        self.pending.append(answer)
        return answer

    def answer(self, state: Any) -> None:
        self.pending.pop(0).callback(state)

    def fail(self) -> None:
        self.pending.pop(0).errback(AuthError("failed to auth against x - 500"))


class AuthTests(SynchronousTestCase):
    """With --auth-http-address: auth first, then permissions per topic."""

    def setUp(self) -> None:
        self.clock = Clock()
        self.clock.advance(1000)
        self.backend = LogMetaqBackend(self.clock, self.mktemp(), version="v")
        self.addCleanup(self.backend.close)
        self.auth = FakeAuth()
        self.factory = MetaqFactory(self.backend, self.clock, 1024, auth=self.auth)
        self.client = Client(self.factory)

    def state(self, ttl: float = 60, topic: str = "orders") -> AuthState:
        return AuthState(
            "alice",
            "https://x/alice",
            [Authorization(topic, [".*"], ["publish", "subscribe"])],
            self.clock.seconds() + ttl,
        )

    def authenticate(self) -> None:
        self.assertEqual(self.client.send(b"auth s3cret 1\r\n"), [])
        self.assertEqual(self.auth.queries[-1], ("127.0.0.1", False, b"s3cret", ""))
        self.auth.answer(self.state())
        reply = self.client.replies()[0]
        self.assertEqual((reply.code, reply.opaque), (200, 1))
        self.assertIn(b'"identity":"alice"', reply.body)

    def test_unauthenticated_refused(self) -> None:
        """Requests before auth are refused with 401, nothing stored, the connection kept."""
        for line in [b"put orders 0 1 0 2\r\na", b"get orders g 0 0 100 3\r\n", b"version 4\r\n", b"stats 5\r\n"]:
            reply = self.client.one(line)
            self.assertEqual(reply.code, 401, line)
            self.assertIn(b"AUTH required", reply.body)
        self.assertEqual(self.backend.topics(), [])
        self.assertFalse(self.client.closed)

    def test_authenticated(self) -> None:
        """After an accepted auth, allowed topics can be put to and read."""
        self.authenticate()
        self.assertEqual(self.client.one(b"put orders 0 1 0 2\r\na"), result(200, b"1 0 0", 2))
        self.assertIsInstance(self.client.one(b"get orders g 0 0 100 3\r\n"), ValueResponse)

    def test_not_allowed(self) -> None:
        """A topic the authorizations do not name is refused with 403."""
        self.authenticate()
        reply = self.client.one(b"put other 0 1 0 2\r\na")
        self.assertEqual((reply.code, reply.opaque), (403, 2))
        self.assertEqual(self.backend.topics(), [])

    def test_refused_secret(self) -> None:
        """A secret the auth servers refuse is 403; the client may try again."""
        self.client.send(b"auth wrong 1\r\n")
        self.auth.fail()
        self.assertEqual(self.client.replies(), [result(403, b"AUTH failed", 1)])
        self.assertEqual(self.client.one(b"version 2\r\n").code, 401)
        self.authenticate()

    def test_no_authorizations(self) -> None:
        """A secret with no authorizations is 403."""
        self.client.send(b"auth s 1\r\n")
        self.auth.answer(AuthState("x", "", [], 2000))
        self.assertEqual(self.client.replies(), [result(403, b"AUTH no authorizations found", 1)])

    def test_requests_wait_for_auth(self) -> None:
        """Requests sent behind auth wait for its answer and are answered in order."""
        self.assertEqual(self.client.send(b"auth s 1\r\nput orders 0 1 0 2\r\na"), [])
        self.assertEqual(self.client.transport.producerState, "paused")
        self.assertEqual(self.client.send(b"version 3\r\n"), [])
        self.auth.answer(self.state())
        replies = self.client.replies()
        self.assertEqual([(r.code, r.opaque) for r in replies], [(200, 1), (200, 2), (200, 3)])
        self.assertEqual(self.client.transport.producerState, "producing")

    def test_expired_asked_again(self) -> None:
        """Expired authorizations are asked for again before the request runs."""
        self.authenticate()
        self.clock.advance(61)
        self.assertEqual(self.client.send(b"put orders 0 1 0 2\r\na"), [])
        self.assertEqual(len(self.auth.queries), 2)
        self.auth.answer(self.state())
        self.assertEqual(self.client.replies(), [result(200, b"1 0 0", 2)])

    def test_expired_refresh_fails(self) -> None:
        """When asking again fails, the waiting request is refused with 403 and auth is needed again."""
        self.authenticate()
        self.clock.advance(61)
        self.client.send(b"put orders 0 1 0 2\r\naversion 3\r\n")
        self.auth.fail()
        self.assertEqual(
            [(r.code, r.opaque) for r in self.client.replies()], [(403, 2), (401, 3)]
        )
        self.assertEqual(self.backend.topics(), [])

    def test_auth_twice(self) -> None:
        """A second auth is 400."""
        self.authenticate()
        self.assertEqual(self.client.one(b"auth s 9\r\n"), result(400, b"AUTH already set", 9))

    def test_auth_disabled(self) -> None:
        """auth without --auth-http-address is 403 AUTH disabled."""
        client = Client(MetaqFactory(self.backend, self.clock, 1024))
        self.assertEqual(client.one(b"auth s 9\r\n"), result(403, b"AUTH disabled", 9))


class ClientTests(SynchronousTestCase):
    """txnsq's MetaQ client (txnsq.client.metaq) against the listener, through a byte pump."""

    def setUp(self) -> None:
        from tests.metaq_fakes import Pump
        from txnsq.client.metaq import MetaqClient

        self.clock = Clock()
        self.backend = LogMetaqBackend(self.clock, self.mktemp(), partitions=1, version="v")
        self.addCleanup(self.backend.close)
        self.client = MetaqClient("127.0.0.1:8123", self.clock, max_reply_size=1 << 20)
        self.factory = MetaqFactory(self.backend, self.clock, 1024 * 1024)
        self.pump = Pump(self.client, self.factory.buildProtocol(None))

    def result(self, deferred: "Deferred[Any]") -> Any:
        self.pump.flush()
        return self.successResultOf(deferred)

    def test_put_get_and_read(self) -> None:
        """Puts with and without attribute are read back by get and by a MetaqReader, batch by batch."""
        from txnsq.client.metaq import MetaqReader

        self.assertEqual(self.result(self.client.put("t", 0, b"hello")), (1, 0, 0))
        self.assertEqual(self.result(self.client.put("t", 0, b"world", attribute=b"k=v")), (2, 0, 25))
        got = self.result(self.client.get("t", 0, 0, 4096))
        self.assertEqual([(r.id, r.attribute, r.payload) for r in got.records], [(1, None, b"hello"), (2, b"k=v", b"world")])
        for number in range(3, 50):
            self.result(self.client.put("t", 0, b"%d" % (number,)))
        reader = MetaqReader(self.client, "t", 0, offset=0, max_size=100)
        payloads: List[bytes] = []
        while True:
            batch = self.result(reader.next_batch())
            if not batch:
                break
            payloads.extend(record.payload for record in batch)
        self.assertEqual(payloads, [b"hello", b"world"] + [b"%d" % (n,) for n in range(3, 50)])
        self.assertTrue(reader.at_end)

    def test_reader_grows_max_size(self) -> None:
        """A record larger than the reader's maxSize is read after the reader doubles it (value 0 replies)."""
        from txnsq.client.metaq import MetaqReader

        self.result(self.client.put("t", 0, b"y" * 300))
        reader = MetaqReader(self.client, "t", 0, offset=0, max_size=64)
        [record] = self.result(reader.next_batch())
        self.assertEqual(record.payload, b"y" * 300)

    def test_moved_and_end(self) -> None:
        """An offset inside a record is moved (301) and followed; the end is an empty batch."""
        from txnsq.client.metaq import MetaqEndOfPartition, MetaqMoved

        self.result(self.client.put("t", 0, b"abc"))
        self.result(self.client.put("t", 0, b"def"))
        self.pump.flush()
        moved = self.client.get("t", 0, 30, 4096)
        self.pump.flush()
        self.assertEqual(self.failureResultOf(moved, MetaqMoved).value.offset, 23)
        got = self.result(self.client.get("t", 0, 30, 4096, follow_moved=True))
        self.assertEqual([r.payload for r in got.records], [b"def"])
        end = self.client.get("t", 0, 46, 4096)
        self.pump.flush()
        self.failureResultOf(end, MetaqEndOfPartition)
        self.assertEqual(self.result(self.client.offset("t", 0, 30)), 23)

    def test_version_and_stats(self) -> None:
        """version and stats come back as text."""
        self.result(self.client.put("t", 0, b"abc"))
        self.assertEqual(self.result(self.client.version()), "v")
        self.assertEqual(self.result(self.client.stats("t")), "t-0 0 23 23 1\r\n")
