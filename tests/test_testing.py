"""
Tests for txnsq.testing: the in-memory nsqd (driven only by its Clock,
no sockets) with txnsq's own Producer and Consumer, and the real-socket
daemons' ``stop()``.
"""

from __future__ import annotations

import random
from typing import Any, List

from twisted.internet.defer import Deferred, fail, inlineCallbacks, succeed
from twisted.trial.unittest import SynchronousTestCase, TestCase

from txnsq.client.connection import ConnectionConfig, NSQConnectionError
from txnsq.client.consumer import Consumer
from txnsq.client.message import Message
from txnsq.client.producer import Producer
from txnsq.protocol.v2_client import NSQError
from txnsq.testing import MemoryNSQD, RunningNSQD, start_nsqd, start_nsqlookupd
from txnsq.testing.servers import RunningNSQLookupd

ADDRESS = "127.0.0.1:4150"


class MemoryNSQDTestCase(SynchronousTestCase):
    """An in-memory nsqd, closed after each test."""

    def setUp(self) -> None:
        self.nsqd = MemoryNSQD()
        self.addCleanup(self.nsqd.close)
        self.handled: List[Message] = []

    def producer(self, **kwargs: Any) -> Producer:
        producer = Producer(ADDRESS, reactor=self.nsqd.clock, connect=self.nsqd.connect, **kwargs)
        self.addCleanup(producer.close)
        return producer

    def consumer(self, handler: Any = None, **kwargs: Any) -> Consumer:
        kwargs.setdefault("nsqd_tcp_addresses", [ADDRESS])
        consumer = Consumer(
            "events",
            "archive",
            handler if handler is not None else self.handle,
            reactor=self.nsqd.clock,
            connect=self.nsqd.connect,
            rng=random.Random(0),
            **kwargs,
        )
        self.addCleanup(consumer.close)
        return consumer

    def handle(self, message: Message) -> bool:
        self.handled.append(message)
        return True


class ProducerTests(MemoryNSQDTestCase):
    """txnsq's Producer against the in-memory nsqd."""

    def test_publish(self) -> None:
        """A PUB reaches the topic once the bytes move, and its Deferred fires."""
        published = self.producer().publish("events", b"hello")
        self.assertNoResult(published)
        self.nsqd.flush()
        self.assertIsNone(self.successResultOf(published))
        self.assertEqual(self.nsqd.broker.find_topic("events").depth(), 1)
        self.assertEqual(self.nsqd.connections, 1)

    def test_multi_publish_and_deferred(self) -> None:
        """MPUB and DPUB behave as on a real nsqd: the DPUB waits for the clock."""
        producer = self.producer()
        self.nsqd.broker.get_topic("events").get_channel("archive")
        done = [producer.multi_publish("events", [b"a", b"b"]), producer.deferred_publish("events", 5.0, b"c")]
        self.nsqd.flush()
        for result in done:
            self.successResultOf(result)
        channel = self.nsqd.broker.find_topic("events").channels["archive"]
        self.assertEqual((channel.depth(), channel.deferred_count), (2, 1))
        self.nsqd.advance(5)
        self.assertEqual((channel.depth(), channel.deferred_count), (3, 0))

    def test_error_answer(self) -> None:
        """nsqd's own error answers reach the producer (here E_BAD_MESSAGE)."""
        self.nsqd.close()
        self.nsqd = MemoryNSQD(["--max-msg-size=5"])
        published = self.producer().publish("events", b"too long")
        self.nsqd.flush()
        failure = self.failureResultOf(published, NSQError)
        self.assertIn("E_BAD_MESSAGE", str(failure.value))

    def test_refused(self) -> None:
        """A refused address fails the publish with NSQConnectionError."""
        self.nsqd.refuse(ADDRESS)
        published = self.producer().publish("events", b"x")
        self.nsqd.flush()
        failure = self.failureResultOf(published, NSQConnectionError)
        self.assertIn("connection refused", str(failure.value))

    def test_accept_after_refuse(self) -> None:
        """accept() undoes refuse(): the next publish connects, and the server side is the factory's client."""
        self.nsqd.refuse(ADDRESS)
        self.nsqd.accept(ADDRESS)
        published = self.producer().publish("events", b"x")
        self.nsqd.flush()
        self.successResultOf(published)
        self.assertEqual(len(self.nsqd.factory.clients), 1)

    def test_snappy(self) -> None:
        """Compression negotiated in IDENTIFY works through the in-memory pipes."""
        producer = self.producer(config=ConnectionConfig(snappy=True))
        published = producer.publish("events", b"compressed" * 100)
        self.nsqd.flush()
        self.successResultOf(published)
        [connection] = producer.connections
        self.assertTrue(connection.snappy)
        self.assertEqual(self.nsqd.broker.find_topic("events").depth(), 1)


class ConsumerTests(MemoryNSQDTestCase):
    """txnsq's Consumer against the in-memory nsqd."""

    def test_consume_and_finish(self) -> None:
        """Published messages reach the handler, and are FINed when it returns True."""
        self.consumer(max_in_flight=10).start()
        self.nsqd.flush()
        for number in range(3):
            self.nsqd.publish("events", b"m%d" % (number,))
        self.nsqd.flush()
        self.assertEqual([m.body for m in self.handled], [b"m0", b"m1", b"m2"])
        channel = self.nsqd.broker.find_topic("events").channels["archive"]
        self.assertEqual((channel.depth(), channel.in_flight_count), (0, 0))

    def test_requeue_after_delay(self) -> None:
        """A handler's False requeues the message; it comes back once the clock passes its delay."""
        answers = [False, True]

        def handler(message: Message) -> bool:
            self.handled.append(message)
            return answers.pop(0)

        self.consumer(handler, default_requeue_delay=2.0, max_backoff_duration=0).start()
        self.nsqd.flush()
        self.nsqd.publish("events", b"retry")
        self.nsqd.flush()
        self.assertEqual(len(self.handled), 1)
        self.nsqd.advance(2)
        self.assertEqual([(m.body, m.attempts) for m in self.handled], [(b"retry", 1), (b"retry", 2)])

    def test_heartbeats_keep_the_connection(self) -> None:
        """Minutes of clock time pass with heartbeats answered: the connection stays."""
        consumer = self.consumer()
        consumer.start()
        self.nsqd.flush()
        for _ in range(12):
            self.nsqd.advance(15)
        self.assertEqual((consumer.connections, self.nsqd.connections), (1, 1))

    def test_reconnects_after_drop(self) -> None:
        """A dropped connection is redialed after the reconnect delay and consuming goes on."""
        consumer = self.consumer(reconnect_delay=1.0)
        consumer.start()
        self.nsqd.flush()
        self.nsqd.drop()
        self.assertEqual(consumer.connections, 0)
        self.nsqd.advance(1.5)
        self.assertEqual(consumer.connections, 1)
        self.nsqd.publish("events", b"after")
        self.nsqd.flush()
        self.assertEqual([m.body for m in self.handled], [b"after"])

    def test_producer_to_consumer(self) -> None:
        """A Producer's messages reach a Consumer through the same in-memory nsqd."""
        self.consumer(max_in_flight=5).start()
        producer = self.producer()
        published = producer.multi_publish("events", [b"x", b"y"])
        self.nsqd.flush()
        self.successResultOf(published)
        self.assertEqual([m.body for m in self.handled], [b"x", b"y"])


class MemoryNSQDOptionsTests(SynchronousTestCase):
    """Building an in-memory nsqd."""

    def test_flags_and_overrides(self) -> None:
        """Go-style flags and NSQDOptions attributes both apply."""
        nsqd = MemoryNSQD(["--max-rdy-count=10"], msg_timeout=5.0)
        self.addCleanup(nsqd.close)
        self.assertEqual((nsqd.options.max_rdy_count, nsqd.options.msg_timeout), (10, 5.0))

    def test_unknown_override(self) -> None:
        """An unknown option is a TypeError naming it."""
        error = self.assertRaises(TypeError, MemoryNSQD, nosuch=1)
        self.assertIn("nosuch", str(error))

    def test_disk_refused(self) -> None:
        """Only memory storage: --storage=disk is refused."""
        error = self.assertRaises(ValueError, MemoryNSQD, ["--storage=disk"])
        self.assertIn("--storage=disk", str(error))

    def test_tls_and_auth_refused(self) -> None:
        """What needs files or another server is refused, pointing to start_nsqd."""
        for flags in (["--tls-cert=c.pem", "--tls-key=k.pem"], ["--auth-http-address=127.0.0.1:1"]):
            error = self.assertRaises(ValueError, MemoryNSQD, flags)
            self.assertIn("start_nsqd", str(error))

    def test_flush_gives_up_on_a_loop(self) -> None:
        """Sides that never go quiet make flush() raise instead of spinning forever."""
        from txnsq.testing import memory

        nsqd = MemoryNSQD()
        self.addCleanup(nsqd.close)
        nsqd.connect(None, ADDRESS)
        self.patch(memory._Connection, "pump", lambda connection: True)
        self.assertRaises(RuntimeError, nsqd.flush)
        self.patch(memory._Connection, "pump", lambda connection: False)

    def test_shared_clock(self) -> None:
        """A given Clock is the one nsqd runs on."""
        from twisted.internet.task import Clock

        clock = Clock()
        nsqd = MemoryNSQD(clock=clock)
        self.addCleanup(nsqd.close)
        self.assertIs(nsqd.clock, clock)
        self.assertIs(nsqd.broker.clock, clock)


class _FailingService:
    """A service whose shutdown fails."""

    def __init__(self, stopping: Any) -> None:
        self.stopping = stopping
        self.calls = 0

    def bound_ports(self) -> dict:
        return {"TCP": 1, "HTTP": 2}

    def stopService(self) -> Any:
        self.calls += 1
        return self.stopping


class StopTests(SynchronousTestCase):
    """``stop()`` of the real-socket daemons reports what happened."""

    def running(self, stopping: Any) -> "tuple[RunningNSQD, _FailingService]":
        service = _FailingService(stopping)
        service.broker = None  # type: ignore[attr-defined]
        service.options = None  # type: ignore[attr-defined]
        return RunningNSQD(service, None), service  # type: ignore[arg-type]

    def test_failure_reported(self) -> None:
        """A failed shutdown fails stop()'s Deferred, every call's, and is stopped only once."""
        running, service = self.running(fail(RuntimeError("port would not close")))
        self.failureResultOf(running.stop(), RuntimeError)
        self.failureResultOf(running.stop(), RuntimeError)
        self.assertEqual(service.calls, 1)

    def test_success(self) -> None:
        """A clean shutdown fires stop()'s Deferred with None, before and after it is done."""
        stopping: Deferred[None] = Deferred()
        running, _ = self.running(stopping)
        first = running.stop()
        self.assertNoResult(first)
        stopping.callback(None)
        self.assertIsNone(self.successResultOf(first))
        self.assertIsNone(self.successResultOf(running.stop()))

    def test_lookupd_failure_reported(self) -> None:
        """nsqlookupd's stop() fails as loudly."""
        service = _FailingService(fail(RuntimeError("no")))
        service.lookupd = None  # type: ignore[attr-defined]
        service.options = None  # type: ignore[attr-defined]
        running = RunningNSQLookupd(service)  # type: ignore[arg-type]
        self.failureResultOf(running.stop(), RuntimeError)

    def test_synchronous_stop(self) -> None:
        """A service whose stopService returns None stops at once."""
        running, _ = self.running(None)
        self.assertIsNone(self.successResultOf(running.stop()))

    def test_synchronous_success(self) -> None:
        """A succeeded Deferred from stopService is a clean stop."""
        running, _ = self.running(succeed(None))
        self.assertIsNone(self.successResultOf(running.stop()))


class RealDaemonTests(TestCase):
    """The real-socket helpers start, serve and stop."""

    @inlineCallbacks
    def test_nsqd_and_lookupd(self) -> Any:
        """An nsqd registered with an nsqlookupd, both on 127.0.0.1, stop cleanly."""
        lookupd = yield start_nsqlookupd()
        nsqd = yield start_nsqd(["--lookupd-tcp-address=" + lookupd.tcp_address])
        self.assertEqual(nsqd.host, "127.0.0.1")
        self.assertNotEqual(nsqd.tcp_port, 0)
        producer = Producer(nsqd.tcp_address)
        yield producer.publish("events", b"real")
        yield producer.close()
        self.assertEqual(nsqd.broker.find_topic("events").depth(), 1)
        yield nsqd.stop()
        yield lookupd.stop()
