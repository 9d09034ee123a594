"""
Tests for L{txnsq.client.consumer}, with fake connections on a Clock.
"""

from __future__ import annotations

import random
from typing import Any, List

from twisted.internet.defer import Deferred, fail
from twisted.internet.task import Clock
from twisted.trial.unittest import SynchronousTestCase

from tests.client_fakes import FakeConnector, FakeLookupd
from txnsq.client.consumer import Consumer
from txnsq.client.message import Message

A = "10.0.0.1:4150"
B = "10.0.0.2:4150"
C = "10.0.0.3:4150"


class HandlerError(Exception):
    """What the failing handlers raise."""


class ConsumerTestCase(SynchronousTestCase):
    """Builds consumers on a Clock with a FakeConnector."""

    def setUp(self) -> None:
        self.clock = Clock()
        self.connector = FakeConnector(self.clock)
        self.lookupd = FakeLookupd(self.clock)
        self.results: List[Any] = []
        self.handled: List[Message] = []

    def handler(self, message: Message) -> Any:
        self.handled.append(message)
        result = self.results.pop(0) if self.results else True
        if isinstance(result, Exception):
            raise result
        return result

    def consumer(self, **kwargs: Any) -> Consumer:
        kwargs.setdefault("handler", self.handler)
        kwargs.setdefault("reactor", self.clock)
        kwargs.setdefault("connect", self.connector)
        kwargs.setdefault("lookupd_request", self.lookupd)
        kwargs.setdefault("rng", random.Random(0))
        consumer = Consumer("topic", "channel", **kwargs)
        return consumer

    def started(self, **kwargs: Any) -> Consumer:
        consumer = self.consumer(**kwargs)
        consumer.start()
        return consumer


class ConnectionTests(ConsumerTestCase):
    """Connecting, subscribing and reconnecting."""

    def test_subscribes_and_bootstraps(self) -> None:
        """Each direct nsqd gets one connection, SUB, then RDY 1; the first message raises RDY."""
        consumer = self.started(nsqd_tcp_addresses=[A, B], max_in_flight=10)
        a, b = self.connector.current(A), self.connector.current(B)
        self.assertEqual(a.subscribed, ("topic", "channel"))
        self.assertEqual((a.rdy_counts(), b.rdy_counts()), ([1], [1]))
        self.assertEqual(consumer.connections, 2)
        a.deliver()
        self.assertEqual(a.rdy_counts(), [1, 5])

    def test_one_connection_per_nsqd(self) -> None:
        """Connecting again to a known or pending nsqd does nothing."""
        self.connector.manual.add(A)
        consumer = self.started(nsqd_tcp_addresses=A)
        consumer.connect_to_nsqd(A)
        self.connector.complete(A)
        consumer.connect_to_nsqd(A)
        self.assertEqual(len(self.connector.attempts), 1)
        self.assertEqual(consumer.connected_addresses(), [A])

    def test_config_requeue_delays(self) -> None:
        """The connections' config carries the consumer's requeue delays."""
        self.started(nsqd_tcp_addresses=A, default_requeue_delay=7.0, max_requeue_delay=20.0)
        config = self.connector.configs[0]
        self.assertEqual((config.default_requeue_delay, config.max_requeue_delay), (7.0, 20.0))

    def test_reconnect_direct(self) -> None:
        """A lost direct connection is retried with growing, capped, jittered delays."""
        consumer = self.started(
            nsqd_tcp_addresses=A, reconnect_delay=1.0, max_reconnect_delay=8.0
        )
        first = self.connector.current(A)
        self.connector.refused.add(A)
        first.lose()
        self.assertEqual(consumer.connections, 0)
        self.clock.pump([0.05] * 2000)  # 100 s
        times = self.connector.attempt_times(A)
        gaps = [later - earlier for earlier, later in zip(times, times[1:])]
        ceilings = [1.0, 2.0, 4.0, 8.0] + [8.0] * 20
        for gap, ceiling in zip(gaps, ceilings):
            self.assertTrue(ceiling * 0.7 - 0.06 <= gap <= ceiling + 0.06, (gaps, ceilings))
        self.assertGreater(len(gaps), 10)
        # Once reachable again it connects and the delays start over.
        self.connector.refused.clear()
        self.clock.advance(8.0)
        self.assertEqual(consumer.connections, 1)
        self.connector.refused.add(A)
        self.connector.current(A).lose()
        attempts = len(self.connector.attempts)
        self.clock.advance(1.0)
        self.assertEqual(len(self.connector.attempts), attempts + 1)

    def test_subscribe_failure_reconnects(self) -> None:
        """A refused SUB closes the connection and, for a direct nsqd, retries later."""
        from txnsq.client.connection import NSQError

        self.connector.manual.add(A)
        consumer = self.started(nsqd_tcp_addresses=A, reconnect_delay=2.0)
        conn = self.connector.waiting[A][1]
        conn.subscribe_result = fail(NSQError("E_UNAUTHORIZED", "no", fatal=True))
        self.connector.manual.clear()
        self.connector.complete(A)
        self.assertTrue(conn.closed)
        self.assertEqual(consumer.connections, 0)
        self.clock.advance(2.0)
        self.assertEqual(len(self.connector.attempt_times(A)), 2)
        self.assertEqual(consumer.connections, 1)

    def test_lost_while_subscribing(self) -> None:
        """A connection lost before SUB is answered is retried once."""
        self.connector.manual.add(A)
        consumer = self.started(nsqd_tcp_addresses=A, reconnect_delay=2.0)
        conn = self.connector.waiting[A][1]
        waiting: Deferred[None] = Deferred()
        conn.subscribe_result = waiting
        self.connector.manual.clear()
        self.connector.complete(A)
        conn.lose()
        waiting.errback(ConnectionError("lost"))
        self.assertEqual(len(self.clock.getDelayedCalls()), 2)  # redistribution + one reconnect
        self.clock.advance(2.0)
        self.assertEqual(consumer.connections, 1)

    def test_discovered(self) -> None:
        """nsqd found through lookupds are connected once each."""
        self.lookupd.producers = {"l1:4161": [("10.0.0.1", 4150)], "l2:4161": [("10.0.0.1", 4150), ("10.0.0.2", 4150)]}
        consumer = self.started(lookupd_http_addresses=["l1:4161", "l2:4161"], max_in_flight=2)
        self.assertEqual(sorted(consumer.connected_addresses()), [A, B])
        self.clock.advance(200)
        self.assertEqual(len(self.connector.attempts), 2)

    def test_discovered_lost_comes_back_with_poll(self) -> None:
        """A lost discovered nsqd is not retried by timer but by the next poll that lists it."""
        self.lookupd.producers = {"l1:4161": [("10.0.0.1", 4150), ("10.0.0.2", 4150)]}
        consumer = self.started(lookupd_http_addresses="l1:4161", lookupd_poll_interval=10.0, lookupd_poll_jitter=0.0)
        self.connector.current(A).lose()
        self.lookupd.producers = {"l1:4161": [("10.0.0.2", 4150)]}
        self.clock.advance(9.9)
        self.assertEqual(consumer.connected_addresses(), [B])
        self.clock.advance(0.1)  # a poll that no longer lists A
        self.assertEqual(consumer.connected_addresses(), [B])
        self.lookupd.producers = {"l1:4161": [("10.0.0.1", 4150), ("10.0.0.2", 4150)]}
        self.clock.advance(10.0)
        self.assertEqual(sorted(consumer.connected_addresses()), [A, B])
        self.assertEqual(len(self.connector.attempt_times(A)), 2)

    def test_invalid_arguments(self) -> None:
        """Bad names and settings are refused at once."""
        self.assertRaises(ValueError, Consumer, "bad topic", "c", print, reactor=self.clock)
        self.assertRaises(ValueError, Consumer, "t", "c" * 70, print, reactor=self.clock)
        self.assertRaises(ValueError, Consumer, "t", "c", None, reactor=self.clock)
        self.assertRaises(ValueError, Consumer, "t", "c", print, max_in_flight=-1, reactor=self.clock)


class HandlerTests(ConsumerTestCase):
    """What the handler's result does to the message."""

    def setUp(self) -> None:
        super().setUp()
        self.c = self.started(nsqd_tcp_addresses=A, max_in_flight=10, max_backoff_duration=0)
        self.conn = self.connector.current(A)

    def answer_of(self, result: Any, attempts: int = 1) -> Any:
        self.results.append(result)
        message = self.conn.deliver(attempts=attempts)
        answers = [a for a in self.conn.answers if a[1] == message.id]
        return answers

    def test_true_and_none_finish(self) -> None:
        """True and None send FIN."""
        self.assertEqual([a[0] for a in self.answer_of(True)], ["FIN"])
        self.assertEqual([a[0] for a in self.answer_of(None)], ["FIN"])
        self.assertEqual(self.c.stats().messages_finished, 2)
        self.assertEqual(self.c.finished, 2)

    def test_false_requeues(self) -> None:
        """False sends REQ with backoff and a delay of default_requeue_delay * attempts, capped."""
        self.assertEqual(self.answer_of(False, attempts=1)[0][2:], (90.0, True))
        self.assertEqual(self.answer_of(False, attempts=3)[0][2:], (270.0, True))
        self.assertEqual(self.answer_of(False, attempts=5)[0][2:], (450.0, True))
        self.c.max_attempts = 0
        self.assertEqual(self.answer_of(False, attempts=100)[0][2:], (900.0, True))
        self.assertEqual(self.c.requeued, 4)

    def test_raise_requeues_and_logs(self) -> None:
        """An exception sends REQ and is logged once with its traceback."""
        self.assertEqual(self.answer_of(HandlerError("boom"))[0][0], "REQ")
        self.assertEqual(len(self.flushLoggedErrors(HandlerError)), 1)

    def test_deferred(self) -> None:
        """A Deferred's result decides, by the same rules, when it fires."""
        d1: Deferred[Any] = Deferred()
        d2: Deferred[Any] = Deferred()
        d3: Deferred[Any] = Deferred()
        self.results.extend([d1, d2, d3])
        m1, m2, m3 = self.conn.deliver(), self.conn.deliver(), self.conn.deliver()
        self.assertEqual(self.conn.answers, [])
        self.assertEqual(self.conn.in_flight, 3)
        d1.callback(None)
        d2.callback(False)
        d3.errback(HandlerError("later"))
        self.assertEqual(
            [(a[0], a[1]) for a in self.conn.answers],
            [("FIN", m1.id), ("REQ", m2.id), ("REQ", m3.id)],
        )
        self.assertEqual(len(self.flushLoggedErrors(HandlerError)), 1)

    def test_coroutine(self) -> None:
        """An async handler's result decides when it completes."""
        waiting: Deferred[bool] = Deferred()

        async def handler(message: Message) -> bool:
            return await waiting

        self.c._handler = handler
        message = self.conn.deliver()
        self.assertEqual(self.conn.answers, [])
        waiting.callback(False)
        self.assertEqual(self.conn.answers[0][:2], ("REQ", message.id))

    def test_async(self) -> None:
        """After enable_async() the handler answers by itself, whatever it returns."""
        held: List[Message] = []

        def handler(message: Message) -> bool:
            message.enable_async()
            held.append(message)
            return False

        self.c._handler = handler
        self.conn.deliver()
        self.conn.deliver()
        self.assertEqual(self.conn.answers, [])
        held[0].finish()
        held[1].requeue(delay=3.0, backoff=False)
        self.assertEqual([a[0] for a in self.conn.answers], ["FIN", "REQ"])
        self.assertEqual(self.conn.answers[1][2:], (3.0, False))

    def test_async_exception(self) -> None:
        """An async handler that raises is logged but its message is left to it."""

        def handler(message: Message) -> None:
            message.enable_async()
            raise HandlerError("oops")

        self.c._handler = handler
        self.conn.deliver()
        self.assertEqual(self.conn.answers, [])
        self.assertEqual(len(self.flushLoggedErrors(HandlerError)), 1)

    def test_answered_by_handler(self) -> None:
        """A handler that answered itself is not answered again."""

        def handler(message: Message) -> bool:
            message.requeue(0.0, backoff=False)
            return True

        self.c._handler = handler
        self.conn.deliver()
        self.assertEqual([a[0] for a in self.conn.answers], ["REQ"])

    def test_max_attempts(self) -> None:
        """A message past max_attempts goes to giving_up and is finished, not handled."""
        given_up: List[Message] = []
        self.c._giving_up = given_up.append
        self.assertEqual([a[0] for a in self.answer_of(False, attempts=5)], ["REQ"])
        self.assertEqual(len(self.handled), 1)
        self.results.clear()
        message = self.conn.deliver(attempts=6)
        self.assertEqual(given_up, [message])
        self.assertEqual(len(self.handled), 1)
        self.assertEqual(self.conn.answers[-1], ("FIN", message.id))

    def test_default_giving_up_logs(self) -> None:
        """Without giving_up a warning is logged; a failing giving_up still finishes."""
        from twisted.logger import globalLogPublisher

        events: List[Any] = []
        globalLogPublisher.addObserver(events.append)
        self.addCleanup(globalLogPublisher.removeObserver, events.append)
        message = self.conn.deliver(attempts=6)
        self.assertTrue(any("giving up" in e.get("log_format", "") for e in events))
        self.assertEqual(self.conn.answers[-1], ("FIN", message.id))

        def broken(message: Message) -> None:
            raise HandlerError("giving_up")

        self.c._giving_up = broken
        message = self.conn.deliver(attempts=7)
        self.assertEqual(self.conn.answers[-1], ("FIN", message.id))
        self.assertEqual(len(self.flushLoggedErrors(HandlerError)), 1)

    def test_no_max_attempts(self) -> None:
        """max_attempts 0 never gives up."""
        self.c.max_attempts = 0
        self.conn.deliver(attempts=65535)
        self.assertEqual(len(self.handled), 1)

    def test_stats(self) -> None:
        """stats() counts received, finished, requeued messages and connections."""
        self.results.extend([True, False, True])
        for _ in range(3):
            self.conn.deliver()
        stats = self.c.stats()
        self.assertEqual(
            (stats.messages_received, stats.messages_finished, stats.messages_requeued, stats.connections),
            (3, 2, 1, 1),
        )

    def test_hot_path_schedules_nothing(self) -> None:
        """Handling messages creates no timer."""
        before = len(self.clock.getDelayedCalls())
        for _ in range(100):
            self.conn.deliver()
        self.assertEqual(len(self.clock.getDelayedCalls()), before)


class BackoffTests(ConsumerTestCase):
    """Exact RDY sequences while backing off."""

    def test_sequence(self) -> None:
        """
        fail, fail, success, success from one connection gives RDY 0 for
        2 s, test with RDY 1, RDY 0 for 4 s, test, RDY 0 for 2 s, test,
        then back to the full share.
        """
        self.started(nsqd_tcp_addresses=A, max_in_flight=5)
        conn = self.connector.current(A)
        self.results.extend([False, False, True, True])
        conn.deliver()  # t=0 fails
        self.clock.advance(2)
        conn.deliver()  # t=2 fails
        self.clock.advance(4)
        conn.deliver()  # t=6 succeeds
        self.clock.advance(2)
        conn.deliver()  # t=8 succeeds
        self.assertEqual(
            conn.rdy_history,
            [(0, 1), (0, 5), (0, 0), (2, 1), (2, 0), (6, 1), (6, 0), (8, 1), (8, 5)],
        )

    def test_one_result_per_interval(self) -> None:
        """Failures already in flight when backoff starts count once."""
        consumer = self.started(nsqd_tcp_addresses=A, max_in_flight=5)
        conn = self.connector.current(A)
        held: List[Message] = []

        def handler(message: Message) -> None:
            message.enable_async()
            held.append(message)

        consumer._handler = handler
        conn.deliver()
        for _ in range(4):
            conn.deliver()
        for message in held:
            message.requeue()
        self.assertEqual(consumer.backoff_level, 1)
        self.assertEqual(conn.rdy_counts(), [1, 5, 0])
        self.clock.advance(2)
        self.assertEqual(conn.rdy_counts(), [1, 5, 0, 1])

    def test_requeue_without_backoff(self) -> None:
        """requeue(backoff=False) does not start a backoff."""
        consumer = self.started(nsqd_tcp_addresses=A, max_in_flight=5)
        conn = self.connector.current(A)

        def handler(message: Message) -> None:
            message.requeue(backoff=False)

        consumer._handler = handler
        conn.deliver()
        self.assertEqual(consumer.backoff_level, 0)
        self.assertEqual(conn.rdy_counts(), [1, 5])

    def test_disabled(self) -> None:
        """max_backoff_duration=0: failures leave RDY alone."""
        consumer = self.started(nsqd_tcp_addresses=A, max_in_flight=5, max_backoff_duration=0)
        conn = self.connector.current(A)
        self.results.extend([False] * 5)
        for _ in range(5):
            conn.deliver()
        self.assertEqual(conn.rdy_counts(), [1, 5])
        self.assertEqual(consumer.backoff_level, 0)

    def test_several_connections(self) -> None:
        """Backoff zeroes every connection and tests the waters on exactly one."""
        self.started(nsqd_tcp_addresses=[A, B, C], max_in_flight=9, backoff_multiplier=0.5)
        conns = [self.connector.current(x) for x in (A, B, C)]
        for conn in conns:
            conn.deliver()
        self.assertEqual([c.rdy_count for c in conns], [3, 3, 3])
        self.results.append(False)
        conns[0].deliver()
        self.assertEqual([c.rdy_count for c in conns], [0, 0, 0])
        self.clock.advance(1.0)
        self.assertEqual(sorted(c.rdy_count for c in conns), [0, 0, 1])
        tester = next(c for c in conns if c.rdy_count)
        tester.deliver()  # succeeds: backoff ends
        self.assertEqual([c.rdy_count for c in conns], [3, 3, 3])

    def test_no_connection_to_test(self) -> None:
        """With no connection when the interval ends, it waits 1 s more; a new one is then tested."""
        self.connector.refused.add(A)
        consumer = self.started(nsqd_tcp_addresses=[A, B], max_in_flight=2, reconnect_delay=10.0)
        b = self.connector.current(B)
        self.results.append(False)
        b.deliver()
        b.lose()
        self.clock.advance(2.0)
        self.assertEqual(consumer.backoff_level, 1)
        self.connector.refused.clear()
        self.clock.advance(8.0)  # A connects (t=10), B reconnects meanwhile too
        for address in (A, B):
            conn = self.connector.current(address)
            self.assertFalse(conn.closed)
        self.clock.advance(1.0)
        rdys = [self.connector.current(x).rdy_count for x in (A, B)]
        self.assertEqual(sorted(rdys), [0, 1])

    def test_new_connection_while_backing_off(self) -> None:
        """A connection made during backoff gets no RDY until backoff lets it."""
        consumer = self.started(nsqd_tcp_addresses=A, max_in_flight=4)
        a = self.connector.current(A)
        self.results.append(False)
        a.deliver()
        consumer.connect_to_nsqd(B)
        b = self.connector.current(B)
        self.assertEqual(b.rdy_counts(), [])
        self.clock.advance(2.0)
        self.assertEqual(a.rdy_count + b.rdy_count, 1)


class RDYTests(ConsumerTestCase):
    """RDY upkeep through the consumer."""

    def test_redistribution(self) -> None:
        """With max_in_flight 1 and three nsqd, RDY 1 moves to idle ones every 5 s."""
        consumer = self.started(nsqd_tcp_addresses=[A, B, C], max_in_flight=1, low_rdy_idle_timeout=10.0)
        conns = [self.connector.current(x) for x in (A, B, C)]
        self.assertEqual([c.rdy_count for c in conns], [1, 0, 0])
        holders = set()
        for _ in range(40):
            self.clock.advance(5.0)
            self.assertLessEqual(sum(c.rdy_count for c in conns), 1)
            holders.update(c.address for c in conns if c.rdy_count)
        self.assertEqual(holders, {A, B, C})
        self.assertFalse(consumer.is_starved())

    def test_set_max_in_flight(self) -> None:
        """set_max_in_flight(0) pauses every connection; a new value resumes."""
        consumer = self.started(nsqd_tcp_addresses=[A, B], max_in_flight=10)
        conns = [self.connector.current(x) for x in (A, B)]
        consumer.set_max_in_flight(0)
        self.assertEqual([c.rdy_count for c in conns], [0, 0])
        consumer.set_max_in_flight(20)
        self.assertEqual([c.rdy_count for c in conns], [10, 10])
        self.assertEqual(consumer.max_in_flight, 20)

    def test_is_starved(self) -> None:
        """is_starved() is true once a connection's in-flight reaches 85 % of its RDY."""
        consumer = self.started(nsqd_tcp_addresses=A, max_in_flight=10)
        conn = self.connector.current(A)

        def handler(message: Message) -> None:
            message.enable_async()

        consumer._handler = handler
        conn.deliver()
        for _ in range(6):
            conn.deliver()
        self.assertFalse(consumer.is_starved())
        conn.deliver()
        self.assertTrue(consumer.is_starved())

    def test_closed_connection_share_returns(self) -> None:
        """When a connection closes, the others grow to the new share with their next message."""
        self.started(nsqd_tcp_addresses=[A, B], max_in_flight=10, reconnect_delay=30.0)
        a, b = self.connector.current(A), self.connector.current(B)
        a.deliver()
        b.deliver()
        self.connector.refused.add(B)
        b.lose()
        a.deliver()
        self.assertEqual(a.rdy_counts(), [1, 5, 10])


class CloseTests(ConsumerTestCase):
    """close()."""

    def test_close(self) -> None:
        """close() closes every connection, stops polls and timers, and fires."""
        self.lookupd.producers = {"l:1": [("10.0.0.3", 4150)]}
        consumer = self.started(nsqd_tcp_addresses=[A, B], lookupd_http_addresses="l:1")
        d = consumer.close()
        self.assertIsNone(self.successResultOf(d))
        for address in (A, B, C):
            self.assertTrue(self.connector.current(address).closed)
        self.assertEqual(consumer.connections, 0)
        self.assertEqual(self.clock.getDelayedCalls(), [])
        requests = len(self.lookupd.requests)
        self.clock.advance(1000)
        self.assertEqual(len(self.lookupd.requests), requests)
        self.assertEqual(len(self.connector.attempts), 3)
        self.assertIsNone(self.successResultOf(consumer.close()))

    def test_waits_for_in_flight(self) -> None:
        """close() fires once the messages in flight are answered."""
        consumer = self.started(nsqd_tcp_addresses=A, max_in_flight=5)
        conn = self.connector.current(A)
        held: List[Message] = []

        def handler(message: Message) -> None:
            message.enable_async()
            held.append(message)

        consumer._handler = handler
        conn.deliver()
        d = consumer.close()
        second = consumer.close()
        self.assertNoResult(d)
        self.assertTrue(conn.closing)
        held[0].finish()
        self.assertIsNone(self.successResultOf(d))
        self.assertIsNone(self.successResultOf(second))
        self.assertEqual(conn.answers[0][0], "FIN")

    def test_bounded(self) -> None:
        """close() fires after close_timeout even if a connection never closes."""
        consumer = self.started(nsqd_tcp_addresses=A, close_timeout=3.0)
        self.connector.current(A).hang_on_close = True
        d = consumer.close()
        self.clock.advance(2.9)
        self.assertNoResult(d)
        self.clock.advance(0.1)
        self.assertIsNone(self.successResultOf(d))

    def test_pending_connection(self) -> None:
        """A connection still being made when close() is called is closed when it arrives."""
        self.connector.manual.add(A)
        consumer = self.started(nsqd_tcp_addresses=A)
        d = consumer.close()
        self.assertNoResult(d)
        conn = self.connector.complete(A)
        self.assertTrue(conn.closed)
        self.assertIsNone(conn.subscribed)
        self.assertIsNone(self.successResultOf(d))

    def test_no_reconnect_after_close(self) -> None:
        """Lost connections are not reconnected once closing."""
        consumer = self.started(nsqd_tcp_addresses=A)
        consumer.close()
        self.clock.advance(100)
        self.assertEqual(len(self.connector.attempts), 1)
        self.assertRaises(RuntimeError, consumer.connect_to_nsqd, B)

    def test_close_during_backoff(self) -> None:
        """close() during backoff cancels the backoff timer."""
        consumer = self.started(nsqd_tcp_addresses=A, max_in_flight=2)
        self.results.append(False)
        self.connector.current(A).deliver()
        self.successResultOf(consumer.close())
        self.assertEqual(self.clock.getDelayedCalls(), [])
