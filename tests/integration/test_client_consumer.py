"""
The consumer against real nsqd and nsqlookupd running in this process, on
127.0.0.1 with kernel-chosen ports: discovery through two lookupds of three
nsqd, an nsqd replaced on the same port (found again through the lookupds,
or reconnected to directly), the handler's answers as nsqd sees them, and
close().

Nothing sleeps for a fixed time: each check polls in short steps up to a
deadline.
"""

from __future__ import annotations

from typing import Any, Callable, Dict, Generator, List, Optional, Set

from twisted.internet import reactor
from twisted.internet.defer import inlineCallbacks
from twisted.internet.task import deferLater
from twisted.trial.unittest import TestCase

from txnsq.client.consumer import Consumer
from txnsq.client.message import Message
from txnsq.http_client import GoHTTPClient
from txnsq.testing import RunningNSQD, RunningNSQLookupd, start_nsqd, start_nsqlookupd

TOPIC = "consumer_it"
CHANNEL = "ch"

#: Seconds any one wait may take.
DEADLINE = 20.0

#: Seconds between two checks of a condition.
STEP = 0.02


@inlineCallbacks
def wait_for(condition: Callable[[], bool], what: str, deadline: float = DEADLINE) -> Generator[Any, Any, None]:
    """Fire once ``condition()`` holds; fail after ``deadline`` seconds."""
    waited = 0.0
    while not condition():
        if waited >= deadline:
            raise AssertionError("timed out after %gs waiting for %s" % (deadline, what))
        yield deferLater(reactor, STEP, lambda: None)
        waited += STEP


class ConsumerIntegrationTestCase(TestCase):
    """Starts daemons, publishes over HTTP, and cleans everything up."""

    timeout = 60

    def setUp(self) -> None:
        self.http = GoHTTPClient(reactor, 2.0, 5.0)
        self.consumers: List[Consumer] = []

    @inlineCallbacks
    def lookupd(self) -> Generator[Any, Any, RunningNSQLookupd]:
        running = yield start_nsqlookupd()
        self.addCleanup(running.stop)
        return running

    @inlineCallbacks
    def nsqd(
        self, lookupds: List[RunningNSQLookupd] = (), tcp_port: int = 0  # type: ignore[assignment]
    ) -> Generator[Any, Any, RunningNSQD]:
        args = ["--broadcast-address=127.0.0.1", "--tcp-address=127.0.0.1:%d" % (tcp_port,)]
        args += ["--lookupd-tcp-address=" + l.tcp_address for l in lookupds]
        running = yield start_nsqd(args)
        self.addCleanup(running.stop)
        return running

    @inlineCallbacks
    def publish(self, nsqd: RunningNSQD, bodies: List[bytes]) -> Generator[Any, Any, None]:
        url = "http://%s/mpub?topic=%s" % (nsqd.http_address, TOPIC)
        code, _, body = yield self.http.request("POST", url, b"\n".join(bodies), b"text/plain")
        self.assertEqual(code, 200, body)

    def consumer(self, handler: Callable[[Message], Any], **kwargs: Any) -> Consumer:
        consumer = Consumer(TOPIC, CHANNEL, handler, **kwargs)
        self.consumers.append(consumer)
        self.addCleanup(consumer.close)
        consumer.start()
        return consumer

    def channel(self, nsqd: RunningNSQD) -> Any:
        topic = nsqd.broker.find_topic(TOPIC)
        return topic.find_channel(CHANNEL) if topic is not None else None


class DiscoveryTests(ConsumerIntegrationTestCase):
    """Three nsqd found through two nsqlookupd."""

    @inlineCallbacks
    def test_consume_from_three(self) -> Generator[Any, Any, None]:
        """
        Messages published on three nsqd registered with two lookupds are
        all consumed, over one connection per nsqd; an nsqd replaced on
        the same port is found again by a later poll and consumed from.
        """
        lookupds = [(yield self.lookupd()), (yield self.lookupd())]
        # Each nsqd registers with one lookupd only but the third: the
        # consumer must join both lookupds' answers.
        nsqds = [
            (yield self.nsqd([lookupds[0]])),
            (yield self.nsqd([lookupds[1]])),
            (yield self.nsqd(lookupds)),
        ]
        expected: Set[bytes] = set()
        for i, nsqd in enumerate(nsqds):
            bodies = [b"n%d-%d" % (i, j) for j in range(50)]
            expected.update(bodies)
            yield self.publish(nsqd, bodies)
        received: Dict[bytes, str] = {}

        def handler(message: Message) -> bool:
            received[message.body] = message.nsqd_address
            return True

        consumer = self.consumer(
            handler,
            lookupd_http_addresses=[l.http_address for l in lookupds],
            max_in_flight=9,
            lookupd_poll_interval=0.5,
            lookupd_poll_jitter=0.2,
        )
        yield wait_for(lambda: set(received) == expected, "all 150 messages")
        addresses = sorted(n.tcp_address for n in nsqds)
        self.assertEqual(sorted(consumer.connected_addresses()), addresses)
        self.assertEqual(sorted(set(received.values())), addresses)
        yield wait_for(lambda: consumer.stats().messages_finished == 150, "150 FINs")
        self.assertEqual(consumer.stats().messages_received, 150)
        for nsqd in nsqds:
            channel = self.channel(nsqd)
            yield wait_for(lambda: channel.in_flight_count == 0, "FINs reaching nsqd")
            self.assertEqual(len(channel.consumers), 1)

        # Replace the second nsqd by a new one on the same port.
        old = nsqds[1]
        port = old.tcp_port
        yield old.stop()
        yield wait_for(lambda: consumer.connections == 2, "the lost connection dropped")
        new = yield self.nsqd([lookupds[1]], tcp_port=port)
        yield self.publish(new, [b"after-restart-%d" % (j,) for j in range(20)])
        yield wait_for(
            lambda: all(b"after-restart-%d" % (j,) in received for j in range(20)),
            "messages from the replacement nsqd",
        )
        self.assertEqual(consumer.connections, 3)
        # And the other two still deliver.
        yield self.publish(nsqds[0], [b"late-0"])
        yield self.publish(nsqds[2], [b"late-2"])
        yield wait_for(lambda: b"late-0" in received and b"late-2" in received, "later messages")

        yield consumer.close()
        self.assertEqual(consumer.connections, 0)
        for nsqd in (nsqds[0], new, nsqds[2]):
            channel = self.channel(nsqd)
            yield wait_for(lambda: not channel.consumers, "nsqd to see the consumer leave")


class DirectTests(ConsumerIntegrationTestCase):
    """nsqd given directly."""

    @inlineCallbacks
    def test_reconnects_after_restart(self) -> Generator[Any, Any, None]:
        """A directly configured nsqd that restarts on the same port is reconnected to."""
        nsqd = yield self.nsqd()
        port = nsqd.tcp_port
        yield self.publish(nsqd, [b"before"])
        received: List[bytes] = []
        consumer = self.consumer(
            lambda m: received.append(m.body),
            nsqd_tcp_addresses=nsqd.tcp_address,
            reconnect_delay=0.1,
            max_reconnect_delay=0.5,
        )
        yield wait_for(lambda: received == [b"before"], "the first message")
        yield nsqd.stop()
        yield wait_for(lambda: consumer.connections == 0, "the connection lost")
        # Some reconnections fail while nothing listens.
        yield deferLater(reactor, 0.5, lambda: None)
        restarted = yield self.nsqd(tcp_port=port)
        yield self.publish(restarted, [b"after"])
        yield wait_for(lambda: received == [b"before", b"after"], "the message after the restart")
        self.assertEqual(consumer.connections, 1)


class HandlerTests(ConsumerIntegrationTestCase):
    """The handler's answers as nsqd sees them."""

    @inlineCallbacks
    def test_outcomes(self) -> Generator[Any, Any, None]:
        """
        True finishes; False and exceptions requeue and the message comes
        back; a Deferred and an async handler answer later; a message past
        max_attempts is given up and finished.
        """
        nsqd = yield self.nsqd()
        bodies = [b"fin", b"false-once", b"raise-once", b"deferred", b"async", b"always-fail"]
        yield self.publish(nsqd, bodies)
        attempts: Dict[bytes, List[int]] = {}
        given_up: List[Message] = []

        def handler(message: Message) -> Any:
            attempts.setdefault(message.body, []).append(message.attempts)
            body = message.body
            if body == b"false-once":
                return message.attempts > 1
            if body == b"raise-once" and message.attempts == 1:
                raise ValueError("first attempt fails")
            if body == b"deferred":
                return deferLater(reactor, 0.05, lambda: True)
            if body == b"async":
                message.enable_async()
                reactor.callLater(0.05, message.finish)
                return None
            if body == b"always-fail":
                return False
            return True

        consumer = self.consumer(
            handler,
            nsqd_tcp_addresses=nsqd.tcp_address,
            max_in_flight=10,
            max_attempts=3,
            giving_up=given_up.append,
            default_requeue_delay=0.0,
            backoff_multiplier=0.02,
            max_backoff_duration=0.2,
        )
        channel = None

        def settled() -> bool:
            nonlocal channel
            channel = self.channel(nsqd)
            return (
                channel is not None
                and len(given_up) == 1
                and channel.depth() == 0
                and channel.in_flight_count == 0
                and channel.deferred_count == 0
            )

        yield wait_for(settled, "every message answered")
        self.assertEqual(len(self.flushLoggedErrors(ValueError)), 1)
        self.assertEqual(given_up[0].body, b"always-fail")
        self.assertEqual(given_up[0].attempts, 4)
        self.assertEqual(
            attempts,
            {
                b"fin": [1],
                b"false-once": [1, 2],
                b"raise-once": [1, 2],
                b"deferred": [1],
                b"async": [1],
                b"always-fail": [1, 2, 3],
            },
        )
        stats = consumer.stats()
        # 6 first deliveries, 4 redeliveries, the given-up one.
        self.assertEqual(stats.messages_received, 11)
        self.assertEqual(stats.messages_requeued, 5)
        self.assertEqual(stats.messages_finished, 6)
        assert channel is not None
        self.assertEqual(channel.requeue_count, 5)

    @inlineCallbacks
    def test_close_waits_for_in_flight(self) -> Generator[Any, Any, None]:
        """close() sends CLS and fires only after a message in flight is finished."""
        nsqd = yield self.nsqd()
        yield self.publish(nsqd, [b"slow"])
        held: List[Message] = []

        def handler(message: Message) -> None:
            message.enable_async()
            held.append(message)

        consumer = self.consumer(handler, nsqd_tcp_addresses=nsqd.tcp_address)
        yield wait_for(lambda: len(held) == 1, "the message")
        closed = consumer.close()
        fired: List[Optional[object]] = []
        closed.addCallback(fired.append)
        yield deferLater(reactor, 0.2, lambda: None)
        self.assertEqual(fired, [])
        held[0].finish()
        yield wait_for(lambda: fired == [None], "close() to fire")
        channel = self.channel(nsqd)
        self.assertEqual(channel.in_flight_count, 0)
        self.assertEqual(channel.requeue_count, 0)
        self.assertEqual(channel.depth(), 0)
