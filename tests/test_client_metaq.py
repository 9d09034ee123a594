"""Tests for txnsq.client.metaq."""

from __future__ import annotations

from typing import Any, List, Optional, Tuple

from twisted.internet.defer import Deferred
from twisted.internet.task import Clock
from twisted.internet.testing import MemoryReactorClock, StringTransport
from twisted.trial.unittest import SynchronousTestCase

from tests.metaq_fakes import FakeMetaqServer, FakeMetaqStore, Pump
from txnsq.client.metaq import (
    GetResult,
    LogRecord,
    MetaqClient,
    MetaqConnectionError,
    MetaqEndOfPartition,
    MetaqMoved,
    MetaqNotFound,
    MetaqProtocolError,
    MetaqReader,
    MetaqRecordTooLarge,
    MetaqResultError,
    MetaqTimeoutError,
    connect_metaq,
    get_result,
    id_time,
    id_time_threshold,
    records_since,
)
from txnsq.nsqd.guid import TWEPOCH
from txnsq.protocol.metaq import OffsetRequest, ResultResponse, ValueResponse, encode_value
from txnsq.protocol.metaq_record import HEADER_LENGTH, encode_record, join_attribute


def joined(
    store: Optional[FakeMetaqStore] = None, timeout: float = 30.0, max_reply_size: int = 1 << 20
) -> Tuple[MetaqClient, FakeMetaqStore, Pump, Clock]:
    """A client pumped to a fake broker over ``store``."""
    store = store if store is not None else FakeMetaqStore(topics=("t",), partitions_per_topic=2)
    clock = Clock()
    client = MetaqClient("127.0.0.1:8123", clock, request_timeout=timeout, max_reply_size=max_reply_size)
    pump = Pump(client, FakeMetaqServer(store))
    return client, store, pump, clock


def result_of(test: SynchronousTestCase, deferred: "Deferred[Any]", pump: Pump) -> Any:
    pump.flush()
    return test.successResultOf(deferred)


def failure_of(test: SynchronousTestCase, deferred: "Deferred[Any]", pump: Pump, *kinds: type) -> Any:
    pump.flush()
    return test.failureResultOf(deferred, *kinds).value


class MetaqClientTests(SynchronousTestCase):
    """Requests and their replies through the fake broker."""

    def test_put_then_get(self) -> None:
        """A put reports id, partition and offset; get returns the records with their offsets."""
        client, store, pump, _clock = joined()
        first = client.put("t", 0, b"hello")
        second = client.put("t", 0, b"world", attribute=b"k=v")
        self.assertEqual(result_of(self, first, pump), (1, 0, 0))
        msg_id, partition, offset = result_of(self, second, pump)
        self.assertEqual((msg_id, partition, offset), (2, 0, HEADER_LENGTH + 5))
        got = result_of(self, client.get("t", 0, 0, 4096), pump)
        self.assertEqual(
            got.records,
            [
                LogRecord(1, 0, None, b"hello", 0, HEADER_LENGTH + 5),
                LogRecord(2, 1, b"k=v", b"world", 25, HEADER_LENGTH + 4 + 3 + 5),
            ],
        )
        self.assertEqual(got.next_offset, 25 + HEADER_LENGTH + 12)
        self.assertEqual(got.offset, 0)

    def test_requests_are_pipelined(self) -> None:
        """Several requests go out before any reply, each with its own opaque."""
        client, store, pump, _clock = joined()
        calls = [client.version(), client.stats(), client.put("t", 1, b"x")]
        sent = pump.client_transport.value()
        self.assertEqual(sent.count(b"\r\n"), 3)
        self.assertEqual(store.requests, [])
        pump.flush()
        self.assertEqual([r.opaque for r in store.requests], [1, 2, 3])
        self.assertEqual(self.successResultOf(calls[0]), "txnsq-fake")
        self.assertEqual(self.successResultOf(calls[2]), (1, 1, 0))

    def test_replies_matched_by_opaque(self) -> None:
        """Replies that come in another order than the requests reach their own callers."""
        clock = Clock()
        client = MetaqClient("h:1", clock)
        transport = StringTransport()
        client.makeConnection(transport)
        version = client.version()
        offset = client.offset("t", 0, 5)
        client.dataReceived(b"result 200 2 2\r\n40result 200 3 1\r\n1.0")
        self.assertEqual(self.successResultOf(offset), 40)
        self.assertEqual(self.successResultOf(version), "1.0")

    def test_get_moved_raises_with_offset(self) -> None:
        """A get the broker moves (301) fails with MetaqMoved carrying the nearest offset."""
        client, store, pump, _clock = joined()
        store.add("t", 0, b"a")
        store.add("t", 0, b"b")
        store.partitions[("t", 0)].drop_before(21)
        error = failure_of(self, client.get("t", 0, 0, 100), pump, MetaqMoved)
        self.assertEqual(error.offset, 21)
        self.assertEqual(error.code, 301)

    def test_get_follows_moved(self) -> None:
        """With follow_moved, a 301 is followed once and the result says where it read from."""
        client, store, pump, _clock = joined()
        store.add("t", 0, b"a")
        store.add("t", 0, b"b")
        store.partitions[("t", 0)].drop_before(21)
        got = result_of(self, client.get("t", 0, 0, 100, follow_moved=True), pump)
        self.assertEqual(got.offset, 21)
        self.assertEqual([(r.offset, r.payload) for r in got.records], [(21, b"b")])

    def test_get_at_end(self) -> None:
        """A get at the end of a partition fails with MetaqEndOfPartition."""
        client, store, pump, _clock = joined()
        error = failure_of(self, client.get("t", 0, 0, 100), pump, MetaqEndOfPartition)
        self.assertEqual((error.code, error.offset), (404, 0))

    def test_get_unknown_topic(self) -> None:
        """A get of a partition the broker lacks fails with MetaqNotFound, not the end."""
        client, store, pump, _clock = joined()
        error = failure_of(self, client.get("nope", 3, 0, 100), pump, MetaqNotFound)
        self.assertNotIsInstance(error, MetaqEndOfPartition)
        self.assertEqual(error.message, "The topic `nope` in partition `3` is not exists")

    def test_get_bad_max_size(self) -> None:
        """maxSize 0 is refused with the broker's 400."""
        client, store, pump, _clock = joined()
        store.add("t", 0, b"a")
        error = failure_of(self, client.get("t", 0, 0, 0), pump, MetaqResultError)
        self.assertEqual((error.code, error.message), (400, "Bad request,invalid max size:0"))

    def test_get_above_reply_limit(self) -> None:
        """A max_size above the client's reply limit fails at once with ValueError."""
        client, store, pump, _clock = joined(max_reply_size=1000)
        self.failureResultOf(client.get("t", 0, 0, 1001), ValueError)
        self.assertEqual(pump.client_transport.value(), b"")

    def test_offset(self) -> None:
        """offset returns the nearest valid offset."""
        client, store, pump, _clock = joined()
        store.add("t", 0, b"abc")
        store.add("t", 0, b"def")
        self.assertEqual(result_of(self, client.offset("t", 0, 30), pump), 23)
        self.assertEqual(result_of(self, client.offset("t", 0, 10**6), pump), 46)

    def test_offset_for_time(self) -> None:
        """offset_for_time sends the @unixMs form and returns the broker's offset."""
        client, store, pump, _clock = joined()
        store.add("t", 0, b"old", time_ms=1000)
        store.add("t", 0, b"new", time_ms=2000)
        self.assertEqual(result_of(self, client.offset_for_time("t", 0, 1500), pump), 23)
        self.assertEqual(result_of(self, client.offset_for_time("t", 0, 0), pump), 0)
        self.assertEqual(result_of(self, client.offset_for_time("t", 0, 3000), pump), 46)
        self.assertEqual(store.requests[-1], OffsetRequest("t", "txnsq", 0, 0, store.requests[-1].opaque, 3000))
        failure_of(self, client.offset_for_time("t", 9, 0), pump, MetaqNotFound)

    def test_stats_item(self) -> None:
        """stats with an item sends it and returns the text."""
        client, store, pump, _clock = joined()
        self.assertEqual(result_of(self, client.stats("realtime"), pump), "item realtime")

    def test_auth(self) -> None:
        """Before auth the broker answers 401; a wrong secret is 403; the right one opens the rest."""
        store = FakeMetaqStore(topics=("t",), secret=b"s3cret")
        client, store, pump, _clock = joined(store)
        error = failure_of(self, client.version(), pump, MetaqResultError)
        self.assertEqual(error.code, 401)
        error = failure_of(self, client.auth("wrong"), pump, MetaqResultError)
        self.assertEqual(error.code, 403)
        result_of(self, client.auth("s3cret"), pump)
        self.assertEqual(result_of(self, client.version(), pump), "txnsq-fake")

    def test_bad_topic_name(self) -> None:
        """A topic with a space fails with ValueError and sends nothing."""
        client, store, pump, _clock = joined()
        self.failureResultOf(client.put("a b", 0, b"x"), ValueError)
        self.failureResultOf(client.get("a b", 0, 0, 10), ValueError)
        self.assertEqual(pump.client_transport.value(), b"")

    def test_flag_with_attribute_bit_needs_attribute(self) -> None:
        """A flag announcing an attribute without one is refused before sending."""
        client, store, pump, _clock = joined()
        self.failureResultOf(client.put("t", 0, b"x", flag=1), ValueError)

    def test_timeout(self) -> None:
        """A request without a reply fails with MetaqTimeoutError after request_timeout; a later one is timed from its own start."""
        client, store, pump, clock = joined(timeout=10)
        store.silent = True
        first = client.version()
        clock.advance(4)
        second = client.version()
        pump.flush()
        clock.advance(6)
        self.failureResultOf(first, MetaqTimeoutError)
        self.assertNoResult(second)
        clock.advance(4)
        self.failureResultOf(second, MetaqTimeoutError)
        self.assertEqual(clock.getDelayedCalls(), [])
        self.assertTrue(client.connected)

    def test_one_timer_for_many_requests(self) -> None:
        """Many pending requests share one delayed call."""
        client, store, pump, clock = joined(timeout=10)
        store.silent = True
        for _ in range(50):
            client.version()
        self.assertEqual(len(clock.getDelayedCalls()), 1)

    def test_timer_cancelled_when_all_answered(self) -> None:
        """Once every pending request has its reply no timer is left."""
        client, store, pump, clock = joined(timeout=10)
        result_of(self, client.version(), pump)
        self.assertEqual(clock.getDelayedCalls(), [])

    def test_late_reply_after_timeout_is_dropped(self) -> None:
        """A reply whose request timed out is ignored and later replies still match."""
        clock = Clock()
        client = MetaqClient("h:1", clock, request_timeout=1)
        client.makeConnection(StringTransport())
        late = client.version()
        clock.advance(1)
        self.failureResultOf(late, MetaqTimeoutError)
        current = client.version()
        client.dataReceived(b"result 200 1 1\r\nAresult 200 1 2\r\nB")
        self.assertEqual(self.successResultOf(current), "B")

    def test_close_sends_quit(self) -> None:
        """close sends quit, pending requests fail with MetaqConnectionError, close fires when the connection ends."""
        client, store, pump, clock = joined()
        store.silent = True
        pending = client.version()
        closed = client.close()
        self.assertTrue(pump.client_transport.value().endswith(b"quit\r\n"))
        pump.flush()
        self.successResultOf(closed)
        self.failureResultOf(pending, MetaqConnectionError)
        self.failureResultOf(client.version(), MetaqConnectionError)
        self.assertEqual(clock.getDelayedCalls(), [])

    def test_close_unconnected(self) -> None:
        """close on a client that never connected fires at once."""
        client = MetaqClient("h:1", Clock())
        self.successResultOf(client.close())
        self.failureResultOf(client.version(), MetaqConnectionError)

    def test_close_aborts_after_timeout(self) -> None:
        """A connection that does not end after quit is aborted after close_timeout."""
        clock = Clock()
        client = MetaqClient("h:1", clock, close_timeout=5)
        transport = StringTransport()
        client.makeConnection(transport)
        aborted: List[bool] = []
        transport.abortConnection = lambda: aborted.append(True)  # type: ignore[method-assign]
        closed = client.close()
        clock.advance(5)
        self.assertEqual(aborted, [True])
        self.assertNoResult(closed)

    def test_bad_reply_closes(self) -> None:
        """A reply that cannot be framed aborts the connection and fails pending requests with MetaqProtocolError."""
        clock = Clock()
        client = MetaqClient("h:1", clock)
        transport = StringTransport()
        client.makeConnection(transport)
        pending = client.version()
        transport.abortConnection = transport.loseConnection  # type: ignore[method-assign]
        client.dataReceived(b"value -3 1\r\n")
        self.assertTrue(transport.disconnecting)
        client.connectionLost(None)  # type: ignore[arg-type]
        self.failureResultOf(pending, MetaqProtocolError)

    def test_corrupt_records(self) -> None:
        """Records whose checksum is wrong fail the get with MetaqProtocolError."""
        record = bytearray(encode_record(1, 0, b"abcd"))
        record[-1] ^= 1
        with self.assertRaises(MetaqProtocolError):
            get_result(ValueResponse(bytes(record), 1), 0)

    def test_cut_records(self) -> None:
        """A value whose last record is cut fails with MetaqProtocolError."""
        data = encode_record(1, 0, b"abcd")[:-1]
        with self.assertRaises(MetaqProtocolError):
            get_result(ValueResponse(data, 1), 0)

    def test_bad_attribute(self) -> None:
        """A record whose flag announces an attribute its data cannot hold is a protocol error."""
        data = encode_record(1, 1, b"\x00\x00\x00\x09ab")
        with self.assertRaises(MetaqProtocolError):
            get_result(ValueResponse(data, 1), 0)

    def test_header_cut(self) -> None:
        """Bytes after the last record that are not a whole header are a protocol error."""
        data = encode_record(1, 0, b"a") + b"\x00" * 5
        with self.assertRaises(MetaqProtocolError):
            get_result(ValueResponse(data, 1), 0)

    def test_record_offsets_and_ids(self) -> None:
        """Record offsets count from the requested offset; ids read unsigned."""
        data = encode_record(-1, 0, b"a") + encode_record(7, 1, join_attribute(b"", b"b"))
        got = get_result(ValueResponse(data, 1), 1000)
        self.assertEqual([r.offset for r in got.records], [1000, 1021])
        self.assertEqual(got.records[0].id, 2**64 - 1)
        self.assertEqual(got.records[1].attribute, b"")
        self.assertEqual(got.next_offset, 1000 + len(data))

    def test_value_reply_to_offset(self) -> None:
        """A value reply to offset is a protocol error."""
        clock = Clock()
        client = MetaqClient("h:1", clock)
        client.makeConnection(StringTransport())
        result = client.offset("t", 0, 0)
        client.dataReceived(encode_value(b"", 1))
        self.failureResultOf(result, MetaqProtocolError)

    def test_moved_without_offset(self) -> None:
        """A 301 whose body is no number is a protocol error."""
        with self.assertRaises(MetaqProtocolError):
            get_result(ResultResponse(301, b"x", 1), 0)


class MetaqReaderTests(SynchronousTestCase):
    """Walking a partition in batches."""

    def test_reads_whole_partition_in_batches(self) -> None:
        """Batches of max_size follow each other to the end, then come back empty with at_end."""
        client, store, pump, _clock = joined()
        for n in range(10):
            store.add("t", 1, b"m%d" % (n,))
        reader = MetaqReader(client, "t", 1, 0, max_size=3 * 22)
        seen: List[bytes] = []
        sizes: List[int] = []
        while True:
            batch = result_of(self, reader.next_batch(), pump)
            if not batch:
                break
            sizes.append(len(batch))
            seen.extend(r.payload for r in batch)
        self.assertEqual(seen, [b"m%d" % (n,) for n in range(10)])
        self.assertEqual(sizes, [3, 3, 3, 1])
        self.assertTrue(reader.at_end)
        self.assertEqual(reader.offset, 220)

    def test_polls_after_end(self) -> None:
        """After the end, a new message is read by the next call."""
        client, store, pump, _clock = joined()
        reader = MetaqReader(client, "t", 0, 0)
        self.assertEqual(result_of(self, reader.next_batch(), pump), [])
        store.add("t", 0, b"new")
        self.assertEqual([r.payload for r in result_of(self, reader.next_batch(), pump)], [b"new"])
        self.assertFalse(reader.at_end)

    def test_follows_moved_from_earliest(self) -> None:
        """From offset 0 on a partition whose start was dropped, the reader moves to the first record kept."""
        client, store, pump, _clock = joined()
        for n in range(3):
            store.add("t", 0, b"%d" % (n,))
        store.partitions[("t", 0)].drop_before(42)
        reader = MetaqReader(client, "t", 0, 0)
        self.assertEqual([r.payload for r in result_of(self, reader.next_batch(), pump)], [b"2"])

    def test_moved_not_followed(self) -> None:
        """With follow_moved False a 301 fails the batch with MetaqMoved."""
        client, store, pump, _clock = joined()
        store.add("t", 0, b"abc")
        reader = MetaqReader(client, "t", 0, 5, follow_moved=False)
        self.assertEqual(failure_of(self, reader.next_batch(), pump, MetaqMoved).offset, 0)

    def test_grows_max_size_for_large_record(self) -> None:
        """A record larger than max_size is read by doubling the size up to the reply limit."""
        client, store, pump, _clock = joined(max_reply_size=1 << 20)
        store.add("t", 0, b"x" * 1000)
        reader = MetaqReader(client, "t", 0, 0, max_size=100)
        batch = result_of(self, reader.next_batch(), pump)
        self.assertEqual(len(batch[0].payload), 1000)
        gets = [r.max_size for r in store.requests]
        self.assertEqual(gets, [100, 200, 400, 800, 1600])

    def test_record_too_large(self) -> None:
        """A record above the reply limit fails with MetaqRecordTooLarge."""
        client, store, pump, _clock = joined(max_reply_size=512)
        store.add("t", 0, b"x" * 1000)
        reader = MetaqReader(client, "t", 0, 0, max_size=100)
        error = failure_of(self, reader.next_batch(), pump, MetaqRecordTooLarge)
        self.assertEqual((error.offset, error.max_size), (0, 512))

    def test_unknown_partition_fails(self) -> None:
        """A partition the broker lacks fails the batch with MetaqNotFound."""
        client, store, pump, _clock = joined()
        reader = MetaqReader(client, "t", 9, 0)
        failure_of(self, reader.next_batch(), pump, MetaqNotFound)


class ConnectMetaqTests(SynchronousTestCase):
    """connect_metaq over a memory reactor."""

    def test_connects_and_authenticates(self) -> None:
        """connect_metaq dials the address and sends auth first when given a secret."""
        reactor = MemoryReactorClock()
        attempt = connect_metaq(reactor, "127.0.0.1:8123", auth_secret="s")
        host, port, factory, timeout, _ = reactor.tcpClients[0]
        self.assertEqual((host, port, timeout), ("127.0.0.1", 8123, 5.0))
        client = factory.buildProtocol(None)
        transport = StringTransport()
        client.makeConnection(transport)
        self.assertNoResult(attempt)
        self.assertEqual(transport.value(), b"auth s 1\r\n")
        client.dataReceived(b"result 200 0 1\r\n")
        self.assertIs(self.successResultOf(attempt), client._wrappedProtocol)

    def test_auth_refused(self) -> None:
        """A refused secret fails the attempt with the 403 and closes the connection."""
        reactor = MemoryReactorClock()
        attempt = connect_metaq(reactor, "127.0.0.1:8123", auth_secret="s")
        client = reactor.tcpClients[0][2].buildProtocol(None)
        transport = StringTransport()
        client.makeConnection(transport)
        client.dataReceived(b"result 403 2 1\r\nno")
        self.assertTrue(transport.value().endswith(b"quit\r\n"))
        client.connectionLost(None)
        self.assertEqual(self.failureResultOf(attempt, MetaqResultError).value.code, 403)

    def test_connection_refused(self) -> None:
        """A failed dial is a MetaqConnectionError naming the address."""
        from twisted.internet.error import ConnectionRefusedError

        reactor = MemoryReactorClock()
        attempt = connect_metaq(reactor, "127.0.0.1:8123")
        connector = reactor.connectors[0]
        reactor.tcpClients[0][2].clientConnectionFailed(connector, ConnectionRefusedError())
        error = self.failureResultOf(attempt, MetaqConnectionError).value
        self.assertIn("127.0.0.1:8123", str(error))

    def test_tls_wraps_endpoint(self) -> None:
        """With tls the connection speaks TLS from the first byte."""
        from twisted.protocols.tls import TLSMemoryBIOFactory

        reactor = MemoryReactorClock()
        connect_metaq(reactor, "127.0.0.1:8123", tls=True)
        factory = reactor.tcpClients[0][2]
        wrapped = getattr(factory, "_wrappedFactory", factory)
        self.assertIsInstance(wrapped, TLSMemoryBIOFactory)


class RecordsSinceTests(SynchronousTestCase):
    """records_since keeps the records whose nsqd id time is not before a timestamp."""

    def test_threshold(self) -> None:
        """A record whose id carries the timestamp's pseudo-millisecond is kept, one a pseudo-millisecond earlier is not."""
        timestamp_ms = 1795687200000
        tick = id_time_threshold(timestamp_ms * 1000000)
        self.assertEqual(tick + TWEPOCH, (timestamp_ms * 1000000) >> 20)
        self.assertEqual(id_time(tick << 22 | 4095), tick)
        at = LogRecord(tick << 22 | 5, 0, None, b"at", 0, 22)
        before = LogRecord((tick - 1) << 22 | 4095, 0, None, b"before", 22, 26)
        after = LogRecord((tick + 1) << 22, 0, None, b"after", 48, 25)
        self.assertEqual(records_since([before, at, before, after], timestamp_ms), [at, after])
        self.assertEqual(records_since([before], 0), [before])
        self.assertEqual(id_time_threshold(0), 0)
