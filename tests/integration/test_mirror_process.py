"""
Mirrored topics with real processes (docs/mirroring.md): one nsqlookupd,
two ``nsqd`` routed to each other with ``--mirror-topics`` and
``--mirror-ack=sync``, a txnsq Consumer that finds both through the
lookupd, and a Producer publishing at a steady rate.

- The primary is SIGKILLed halfway through 20,000 messages (the rest go to
  the standby): every message acknowledged to the producer is received,
  duplicates stay within the consumer's max-in-flight.  The killed node
  is restarted on its ports, becomes the standby of the node now
  publishing, and takes over in turn when that one is SIGKILLed.
- The standby is SIGKILLed: the primary keeps serving, nothing is lost,
  and the restarted standby keeps copies again.

The figures are printed in the test output.  Nothing sleeps for a fixed
time: waits poll up to a deadline (the failover timeout is shortened).
"""

from __future__ import annotations

import json
import os
from collections import Counter
from typing import Any, Callable, Dict, Generator, List, Optional, Set

import treq
from twisted.internet.defer import Deferred, inlineCallbacks
from twisted.internet.task import LoopingCall, deferLater
from twisted.trial.unittest import TestCase
from twisted.web.client import HTTPConnectionPool

from tests.integration.nsqd_process import NSQDProcess, NSQLookupdProcess
from txnsq.client import Consumer, Message, Producer

#: ``--mirror-failover-timeout`` of both nodes (seconds).
FAILOVER = 1.0

#: The consumer's max-in-flight: the bound on duplicates.
MAX_IN_FLIGHT = 50

#: Messages of the SIGKILL round, and how many are published per tick.
TOTAL = 20000
PER_TICK = 50
TICK = 0.01

#: Seconds between the consumer's lookupd polls.
POLL_INTERVAL = 0.5

TOPIC = "orders"
CHANNEL = "billing"


class Node:
    """One nsqd of the pair, on fixed ports so that it restarts on them."""

    def __init__(self, test: "MirrorTestCase", name: str) -> None:
        self.test = test
        self.name = name
        self.tcp_port, self.http_port, self.cluster_port = free_ports(3)
        self.data_path = os.path.abspath(test.mktemp())
        os.makedirs(self.data_path)
        self.process: Optional[NSQDProcess] = None
        self.other: Optional["Node"] = None
        self.storage = test.storage

    @property
    def tcp_address(self) -> str:
        return "127.0.0.1:%d" % (self.tcp_port,)

    @inlineCallbacks
    def start(self) -> Generator[Any, Any, None]:
        assert self.other is not None
        process = NSQDProcess(
            [
                "--tcp-address=" + self.tcp_address,
                "--http-address=127.0.0.1:%d" % (self.http_port,),
                "--broadcast-address=127.0.0.1",
                "--storage=" + self.storage,
                "--data-path=" + self.data_path,
                "--lookupd-tcp-address=127.0.0.1:%d" % (self.test.lookupd.tcp_port,),
                "--cluster-name=mirror-test",
                "--cluster-address=127.0.0.1:%d" % (self.cluster_port,),
                "--routes=nats-route://127.0.0.1:%d" % (self.other.cluster_port,),
                "--mirror-topics=^%s$" % (TOPIC,),
                "--mirror-ack=sync",
                "--mirror-failover-timeout=%gs" % (FAILOVER,),
            ]
            + list(self.test.extra_args),
            self.test.reactor,
            cwd=self.data_path,
        )
        self.process = process
        self.test.addCleanup(process.stop)
        yield process.start()

    @inlineCallbacks
    def kill(self) -> Generator[Any, Any, None]:
        assert self.process is not None
        self.process.kill()
        yield self.process.ended

    @inlineCallbacks
    def stats(self) -> Generator[Any, Any, Dict[str, Any]]:
        url = "http://127.0.0.1:%d/stats?format=json" % (self.http_port,)
        response = yield treq.get(url, pool=self.test.pool)
        body = yield response.content()
        return json.loads(body)  # type: ignore[no-any-return]

    @inlineCallbacks
    def mirror(self) -> Generator[Any, Any, Dict[str, Any]]:
        """The ``mirror`` part of /stats, and the topic's marking under ``topic``."""
        stats = yield self.stats()
        found = dict(stats["cluster"]["mirror"])
        for topic in stats["topics"]:
            if topic["topic_name"] == TOPIC:
                found["topic"] = topic.get("mirror")
        return found


class MirrorTestCase(TestCase):
    """A lookupd, nodes ``a`` and ``b`` mirroring TOPIC, a consumer of both."""

    timeout = 120
    #: Both nodes' ``--storage``.
    storage = "memory"
    #: More flags for both nodes.
    extra_args: List[str] = []

    @inlineCallbacks
    def setUp(self) -> Any:  # type: ignore[override]
        from twisted.internet import reactor

        self.reactor = reactor
        self.pool = HTTPConnectionPool(reactor, persistent=False)
        lookupd_path = os.path.abspath(self.mktemp())
        os.makedirs(lookupd_path)
        self.lookupd = NSQLookupdProcess(
            ["--tcp-address=127.0.0.1:0", "--http-address=127.0.0.1:0", "--broadcast-address=127.0.0.1"],
            reactor,
            cwd=lookupd_path,
        )
        self.addCleanup(self.lookupd.stop)
        yield self.lookupd.start()
        self.a = Node(self, "a")
        self.b = Node(self, "b")
        self.a.other, self.b.other = self.b, self.a
        yield self.a.start()
        yield self.b.start()
        yield self.wait_for("the route between a and b", self.peers_up, 20.0)
        self.received: List[bytes] = []
        self.acked: Set[bytes] = set()
        self.refused = 0
        self.taken_over = 0
        # The topic and channel on a; b makes its own copy's topic.
        producer = Producer(self.a.tcp_address, reactor=reactor)
        yield producer.publish(TOPIC, b"warm-up")
        self.acked.add(b"warm-up")
        yield producer.close()
        self.consumer = Consumer(
            TOPIC,
            CHANNEL,
            self.handler,
            lookupd_http_addresses=["127.0.0.1:%d" % (self.lookupd.http_port,)],
            lookupd_poll_interval=POLL_INTERVAL,
            max_in_flight=MAX_IN_FLIGHT,
            reactor=reactor,
        )
        self.consumer.start()
        self.addCleanup(self.consumer.close)
        yield self.wait_for(
            "the consumer connected to both nodes",
            lambda: succeed_with(self.consumer.connections == 2),
            30.0,
        )

    def handler(self, message: Message) -> bool:
        self.received.append(message.body)
        return True

    # -- helpers ---------------------------------------------------------------

    @inlineCallbacks
    def peers_up(self) -> Generator[Any, Any, bool]:
        try:
            first = yield self.a.mirror()
            second = yield self.b.mirror()
        except Exception:
            return False
        return bool(first["peers"]) and bool(second["peers"])

    @inlineCallbacks
    def wait_for(
        self, what: str, probe: Callable[[], "Deferred[Any]"], within: float
    ) -> Generator[Any, Any, Any]:
        deadline = self.reactor.seconds() + within
        while True:
            seen = yield probe()
            if seen:
                return seen
            if self.reactor.seconds() >= deadline:
                self.fail("%s: not within %.1f s" % (what, within))
            yield deferLater(self.reactor, 0.05, lambda: None)

    @inlineCallbacks
    def publish_steadily(
        self,
        node: Node,
        prefix: str,
        count: int,
        at_half: Optional[Callable[[], "Deferred[Any]"]] = None,
        after_half: Optional[Node] = None,
    ) -> Generator[Any, Any, None]:
        """
        Publish ``count`` bodies ``prefix-N``, PER_TICK every TICK seconds,
        to ``node``; at half, run ``at_half`` (a SIGKILL) and go on with
        ``after_half`` when given.  Fires when every publish is answered.
        """
        producer = Producer(node.tcp_address, reactor=self.reactor)
        producers = [producer]
        pending: List["Deferred[Any]"] = []
        state = {"next": 0, "paused": False, "halved": False}

        def ok(_: Any, body: bytes) -> None:
            self.acked.add(body)

        def refused(failure: Any) -> None:
            self.refused += 1

        def switched(_: Any) -> None:
            if after_half is not None:
                producers.append(Producer(after_half.tcp_address, reactor=self.reactor))
            state["paused"] = False

        def tick() -> None:
            if state["paused"]:
                return
            for _ in range(PER_TICK):
                index = state["next"]
                if index >= count:
                    loop.stop()
                    return
                if index == count // 2 and at_half is not None and not state["halved"]:
                    # Killed once this tick's publishes are written: some
                    # are in flight, unanswered; later ticks wait.
                    state["halved"] = state["paused"] = True
                    self.reactor.callLater(0, lambda: at_half().addCallback(switched))
                body = ("%s-%d" % (prefix, index)).encode()
                state["next"] = index + 1
                sent = producers[-1].publish(TOPIC, body)
                sent.addCallbacks(ok, refused, callbackArgs=(body,))
                pending.append(sent)

        loop = LoopingCall(tick)
        loop.clock = self.reactor
        yield loop.start(TICK)
        for sent in pending:
            yield sent
        for each in producers:
            yield each.close()

    @inlineCallbacks
    def all_received(self, within: float) -> Generator[Any, Any, None]:
        def missing() -> "Deferred[bool]":
            return succeed_with(not (self.acked - set(self.received)))

        try:
            yield self.wait_for("every acknowledged message received", missing, within)
        except Exception:
            lost = sorted(self.acked - set(self.received))
            print("lost %d, e.g. %r" % (len(lost), lost[:10]))
            raise

    def taken_over_by(self, node: Node) -> "Deferred[Any]":
        """Wait until ``node`` has failed over (FAILOVER after the kill)."""

        @inlineCallbacks
        def probe() -> Generator[Any, Any, bool]:
            view = yield node.mirror()
            return bool(view["taken_over"])

        return self.wait_for("failover on " + node.name, probe, FAILOVER + 20.0)

    def figures(self, label: str) -> Dict[str, int]:
        counts = Counter(self.received)
        duplicates = sum(n - 1 for n in counts.values() if n > 1)
        lost = len(self.acked - set(counts))
        found = {
            "acknowledged": len(self.acked),
            "refused": self.refused,
            "received": len(self.received),
            "distinct": len(counts),
            "lost": lost,
            "duplicates": duplicates,
            "max_in_flight": MAX_IN_FLIGHT,
            "taken_over": self.taken_over,
        }
        print("mirror %s: %s" % (label, " ".join("%s=%d" % item for item in found.items())))
        if duplicates:
            print("  delivered twice, e.g. %r" % ([b for b, n in counts.items() if n > 1][:5],))
        return found


def free_ports(count: int) -> List[int]:
    """
    ``count`` distinct TCP ports of 127.0.0.1 free now (all bound at once,
    then released: racy by nature, as ``free_port``).
    """
    import socket

    sockets = []
    try:
        for _ in range(count):
            sock = socket.socket()
            sock.bind(("127.0.0.1", 0))
            sockets.append(sock)
        return [sock.getsockname()[1] for sock in sockets]
    finally:
        for sock in sockets:
            sock.close()


def succeed_with(value: Any) -> "Deferred[Any]":
    done: Deferred[Any] = Deferred()
    done.callback(value)
    return done


class PrimaryKillTests(MirrorTestCase):
    """SIGKILL of the node producers publish to."""

    @inlineCallbacks
    def test_primary_sigkill_then_fail_back(self) -> Generator[Any, Any, None]:
        """
        a is SIGKILLed halfway through TOTAL messages (the rest go to b):
        0 acknowledged messages lost, duplicates <= max-in-flight; a,
        restarted, is b's standby, and takes over when b is SIGKILLed.
        """
        yield self.publish_steadily(self.a, "one", TOTAL, at_half=self.a.kill, after_half=self.b)
        yield self.taken_over_by(self.b)
        yield self.all_received(30.0)
        b_view = yield self.b.mirror()
        self.taken_over = sum(done["messages"] for done in b_view["taken_over"])
        found = self.figures("primary SIGKILL")
        self.assertEqual(found["lost"], 0)
        self.assertLessEqual(found["duplicates"], MAX_IN_FLIGHT)
        self.assertGreater(found["acknowledged"], TOTAL * 0.9)
        self.assertEqual([done["reason"] for done in b_view["taken_over"]], ["unreachable"])

        # a comes back (same node id, new process): b's standby.
        yield self.a.start()
        yield self.wait_for("a routed to b again", self.peers_up, 20.0)
        self.received.clear()
        self.acked.clear()
        self.refused = 0
        # a makes the topic (and registers it) with its first copy.
        producer = Producer(self.b.tcp_address, reactor=self.reactor)
        yield producer.publish(TOPIC, b"warm-up-2")
        self.acked.add(b"warm-up-2")
        yield producer.close()
        yield self.wait_for(
            "the consumer connected to a again",
            lambda: succeed_with(self.consumer.connections == 2),
            30.0,
        )
        count = TOTAL // 4
        yield self.publish_steadily(self.b, "two", count, at_half=self.b.kill, after_half=self.a)
        yield self.taken_over_by(self.a)
        yield self.all_received(30.0)
        a_view = yield self.a.mirror()
        self.taken_over = sum(done["messages"] for done in a_view["taken_over"])
        found = self.figures("fail-back, then SIGKILL of the new primary")
        self.assertEqual(found["lost"], 0)
        self.assertLessEqual(found["duplicates"], MAX_IN_FLIGHT)
        self.assertEqual([done["reason"] for done in a_view["taken_over"]], ["unreachable"])


class StandbyKillTests(MirrorTestCase):
    """SIGKILL of the standby."""

    @inlineCallbacks
    def test_standby_sigkill_and_restart(self) -> Generator[Any, Any, None]:
        """
        b is SIGKILLed halfway: a keeps serving, nothing acknowledged is
        lost; with the consumer stopped, a takes 1,000 more while b is
        down; b restarted catches up (its copy holds them) and delivers
        none of them, and keeps copies of what a publishes next.
        """
        count = TOTAL // 4
        yield self.publish_steadily(self.a, "one", count, at_half=self.b.kill, after_half=None)
        yield self.all_received(30.0)
        found = self.figures("standby SIGKILL")
        self.assertEqual(found["lost"], 0)
        self.assertEqual(found["refused"], 0)
        self.assertEqual(found["duplicates"], 0)
        yield self.consumer.close()
        self.received.clear()
        yield self.publish_steadily(self.a, "down", 1000)
        yield self.b.start()
        yield self.wait_for("b routed to a again", self.peers_up, 20.0)

        @inlineCallbacks
        def held_by_b() -> Generator[Any, Any, int]:
            view = yield self.b.mirror()
            return sum(  # type: ignore[no-any-return]
                topic["held"] + sum(topic["channels"].values())
                for copy in view["copies"]
                for topic in copy["topics"].values()
            )

        caught_up = yield self.wait_for(
            "b's copy holds the 1,000 published while it was down",
            lambda: held_by_b().addCallback(lambda held: held >= 1000 and held),
            20.0,
        )
        yield self.publish_steadily(self.a, "after", 1000)
        held = yield held_by_b()
        b_view = yield self.b.mirror()
        a_view = yield self.a.mirror()
        print(
            "mirror standby restart: b caught up %d copies of a's unfinished messages "
            "(a sent %d as catch-up), then holds %d; b's topic marking %r"
            % (caught_up, a_view["catch_up_messages"], held, b_view.get("topic"))
        )
        self.assertEqual(caught_up, 1000)
        self.assertEqual(held, 2000)
        self.assertEqual(b_view["topic"]["role"], "standby")
        self.assertEqual(self.received, [])


class StandbyDiskTests(MirrorTestCase):
    """A standby on disk storage keeps its copy across its own restart."""

    storage = "disk"

    @inlineCallbacks
    def test_both_killed_standby_restarted(self) -> Generator[Any, Any, None]:
        """
        With nothing consumed, 2,000 messages and one deferred for an hour
        published to a; b and then a SIGKILLed; b restarted alone reads its
        copy back and, a staying away, delivers every acknowledged message
        after the timeout, the deferred one deferred.
        """
        yield self.consumer.close()
        self.received.clear()
        yield self.publish_steadily(self.a, "kept", 2000)
        # And one deferred for an hour: kept deferred through b's restart.
        producer = Producer(self.a.tcp_address, reactor=self.reactor)
        yield producer.deferred_publish(TOPIC, 3600.0, b"deferred")
        yield producer.close()
        yield self.b.kill()
        yield self.a.kill()
        yield self.b.start()
        yield self.taken_over_by(self.b)
        consumer = Consumer(
            TOPIC,
            CHANNEL,
            self.handler,
            lookupd_http_addresses=["127.0.0.1:%d" % (self.lookupd.http_port,)],
            lookupd_poll_interval=POLL_INTERVAL,
            max_in_flight=MAX_IN_FLIGHT,
            reactor=self.reactor,
        )
        consumer.start()
        self.addCleanup(consumer.close)
        # The warm-up message was consumed before: not expected again.
        self.acked.discard(b"warm-up")
        yield self.all_received(30.0)
        b_view = yield self.b.mirror()
        self.taken_over = sum(done["messages"] for done in b_view["taken_over"])
        found = self.figures("both killed, standby restarted on disk storage")
        b_stats = yield self.b.stats()
        deferred = sum(
            channel["deferred_count"]
            for topic in b_stats["topics"]
            if topic["topic_name"] == TOPIC
            for channel in topic["channels"]
        )
        print("mirror both killed: b took over the deferred message still deferred: %d" % (deferred,))
        self.assertEqual(deferred, 1)
        self.assertNotIn(b"deferred", self.received)
        self.assertEqual(found["lost"], 0)
        self.assertEqual(found["acknowledged"], 2000)
        self.assertEqual(found["duplicates"], 0)
        yield consumer.close()


class FailBackDiskTests(MirrorTestCase):
    """A primary restarted on disk storage drops what its standby took over."""

    storage = "disk"
    # Every message on disk at once: a SIGKILLed node keeps all it held.
    extra_args = ["--mem-queue-size=0"]

    @inlineCallbacks
    def test_fail_back_drops_taken_over(self) -> Generator[Any, Any, None]:
        """
        With nothing consumed, 2,000 messages published to a; a SIGKILLed,
        b takes over; a restarted on its data path still holds them, and
        drops every one at the exchange with b before delivering: the
        consumer gets each acknowledged message once, from b.
        """
        yield self.consumer.close()
        self.received.clear()
        self.acked.discard(b"warm-up")
        yield self.publish_steadily(self.a, "kept", 2000)
        yield self.a.kill()
        yield self.taken_over_by(self.b)
        yield self.a.start()

        @inlineCallbacks
        def exchanged() -> Generator[Any, Any, bool]:
            view = yield self.a.mirror()
            return bool(view["exchange"]["applied"]) and not view["exchange"]["holding"]

        yield self.wait_for("a's exchange with b", exchanged, 20.0)
        consumer = Consumer(
            TOPIC,
            CHANNEL,
            self.handler,
            lookupd_http_addresses=["127.0.0.1:%d" % (self.lookupd.http_port,)],
            lookupd_poll_interval=POLL_INTERVAL,
            max_in_flight=MAX_IN_FLIGHT,
            reactor=self.reactor,
        )
        consumer.start()
        self.addCleanup(consumer.close)
        yield self.wait_for(
            "the consumer connected to both nodes",
            lambda: succeed_with(consumer.connections == 2),
            30.0,
        )
        yield self.all_received(30.0)
        a_view = yield self.a.mirror()
        b_view = yield self.b.mirror()
        a_stats = yield self.a.stats()
        left_on_a = sum(
            channel["depth"] + channel["in_flight_count"] + channel["deferred_count"]
            for topic in a_stats["topics"]
            if topic["topic_name"] == TOPIC
            for channel in topic["channels"]
        )
        self.taken_over = sum(done["messages"] for done in b_view["taken_over"])
        dropped = a_view["exchange"]["dropped_taken_over"]
        # The warm-up, consumed before this test's publishes, may come
        # again: its FIN on a need not be on a's disk yet at the SIGKILL
        # (--sync-every/--sync-timeout), which no exchange can tell.
        earlier = self.received.count(b"warm-up")
        self.received = [body for body in self.received if body != b"warm-up"]
        found = self.figures("fail-back on disk storage")
        print(
            "mirror fail-back exchange: a restarted holding %d of the messages b took over, "
            "dropped them before delivering; left to deliver on a: %d; a message "
            "consumed before the kill delivered again %d time(s)"
            % (dropped, left_on_a, earlier)
        )
        self.assertEqual(found["lost"], 0)
        self.assertEqual(found["acknowledged"], 2000)
        self.assertEqual(found["duplicates"], 0)
        self.assertEqual(left_on_a, 0)
        self.assertGreater(dropped, 0)
        yield consumer.close()


class HungPrimaryTests(MirrorTestCase):
    """A primary that hangs (SIGSTOP: its routes stay connected)."""

    @inlineCallbacks
    def test_hung_primary_seen_by_heartbeat(self) -> Generator[Any, Any, None]:
        """
        With nothing consumed, 1,000 messages published to a, then a
        SIGSTOPped: b sees it silent (mirror heartbeat, not the route's
        30 s PINGs) and delivers its copy; a, continued, hears b again and
        drops at the exchange what b took over: 0 lost, duplicates within
        max-in-flight.
        """
        yield self.consumer.close()
        self.received.clear()
        self.acked.discard(b"warm-up")
        yield self.publish_steadily(self.a, "hung", 1000)
        assert self.a.process is not None
        stopped_at = self.reactor.seconds()
        self.a.process.signal("STOP")
        yield self.taken_over_by(self.b)
        seen_after = self.reactor.seconds() - stopped_at
        consumer = Consumer(
            TOPIC,
            CHANNEL,
            self.handler,
            lookupd_http_addresses=["127.0.0.1:%d" % (self.lookupd.http_port,)],
            lookupd_poll_interval=POLL_INTERVAL,
            max_in_flight=MAX_IN_FLIGHT,
            reactor=self.reactor,
        )
        consumer.start()
        self.addCleanup(consumer.close)
        yield self.all_received(30.0)
        self.a.process.signal("CONT")

        @inlineCallbacks
        def exchanged() -> Generator[Any, Any, bool]:
            view = yield self.a.mirror()
            return view["exchange"]["dropped_taken_over"] > 0

        yield self.wait_for("a's exchange with b after SIGCONT", exchanged, 30.0)
        a_view = yield self.a.mirror()
        b_view = yield self.b.mirror()
        a_stats = yield self.a.stats()
        left_on_a = sum(
            channel["depth"] + channel["deferred_count"]
            for topic in a_stats["topics"]
            if topic["topic_name"] == TOPIC
            for channel in topic["channels"]
        )
        self.taken_over = sum(done["messages"] for done in b_view["taken_over"])
        found = self.figures("hung primary (SIGSTOP)")
        print(
            "mirror hung primary: b took over %.2f s after SIGSTOP (silence limit %.1f s + "
            "failover %.1f s); after SIGCONT a dropped %d at the exchange, %d left queued "
            "on a; split_brain=%r"
            % (
                seen_after,
                b_view["heartbeat"]["silence_limit"],
                FAILOVER,
                a_view["exchange"]["dropped_taken_over"],
                left_on_a,
                [done["split_brain"] for done in b_view["taken_over"]],
            )
        )
        self.assertEqual(found["lost"], 0)
        self.assertEqual(found["acknowledged"], 1000)
        self.assertLessEqual(found["duplicates"], MAX_IN_FLIGHT)
        self.assertEqual(left_on_a, 0)
        self.assertLess(seen_after, 20.0)
        yield consumer.close()
