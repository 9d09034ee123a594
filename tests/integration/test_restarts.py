"""
Restarts under load, end to end: real nsqd processes stopped with SIGTERM
or SIGKILL while a producer publishes and a consumer finishes every message,
then restarted on the same data path; counted exactly.

- SIGTERM: nothing acknowledged is lost, and nothing finished is delivered
  again (nsqd stops delivering, takes the FINs on their way, then saves).
- SIGKILL with ``--mem-queue-size=0 --sync-every=1``: nothing acknowledged
  is lost, deferred messages included (a message may come twice: it was in
  flight when nsqd died).
"""

from __future__ import annotations

import json
import os
from collections import Counter
from typing import Any, Dict, Generator, List, Optional, Set, Tuple

from twisted.internet.defer import Deferred, inlineCallbacks
from twisted.internet.task import LoopingCall, deferLater
from twisted.python.failure import Failure
from twisted.trial.unittest import TestCase

from tests.integration.nsq_client import FinishingClient, NSQClient, connect
from tests.integration.nsqd_process import ExitStatus, NSQDProcess
from tests.integration.test_http_process import http_client
from tests.integration.test_nsqd_process import LOOPBACK, ProcessStarter

#: Generous bound for anything that should happen "at once".
WAIT = 30.0

#: How long nothing must arrive to count as "nothing arrives".
QUIET = 1.0

#: How long the load runs before each stop.
LOAD_SECONDS = 1.0

#: PUBs sent per tick of the producer (every 10 ms: about 2,000 msg/s).
PER_TICK = 20

#: PUBs a producer keeps unanswered at most (pipelined).
WINDOW = 32

DURABLE = ["--mem-queue-size=0", "--sync-every=1"]


class Producer:
    """
    Publishes ``m%08d`` messages with up to :data:`WINDOW` PUBs unanswered;
    remembers which were answered ``OK``.
    """

    def __init__(self, client: NSQClient, topic: str, acknowledged: Set[bytes], counter: List[int]) -> None:
        self.client = client
        self.topic = topic
        self.acknowledged = acknowledged
        self.counter = counter
        self.outstanding = 0
        self.loop = LoopingCall(self._tick)
        self.loop.clock = client.reactor

    def start(self) -> None:
        self.loop.start(0.01)

    def stop(self) -> None:
        if self.loop.running:
            self.loop.stop()

    def _tick(self) -> None:
        if self.client.lost is not None:
            self.stop()
            return
        for _ in range(min(PER_TICK, WINDOW - self.outstanding)):
            body = b"m%08d" % (self.counter[0],)
            self.counter[0] += 1
            self.outstanding += 1
            self.client.pub(self.topic, body).addBoth(self._answered, body)

    def _answered(self, result: Any, body: bytes) -> None:
        self.outstanding -= 1
        if result == b"OK":
            self.acknowledged.add(body)
        elif isinstance(result, Failure):
            result.trap(Exception)


class RestartTests(TestCase):
    """What a producer was told OK for survives restarts; a clean one repeats nothing."""

    timeout = 120

    def setUp(self) -> None:
        from twisted.internet import reactor

        self.reactor: Any = reactor
        self.reaper = ProcessStarter(self)

    # -- helpers -----------------------------------------------------------

    def make_dir(self) -> str:
        path = os.path.abspath(self.mktemp())
        os.makedirs(path)
        return path

    @inlineCallbacks
    def start(self, data_path: str, *flags: str) -> Generator[Any, Any, NSQDProcess]:
        process = NSQDProcess(
            LOOPBACK + ["--data-path=%s" % (data_path,)] + list(flags),
            cwd=os.path.dirname(data_path),
        )
        self.addCleanup(self.reaper._reap, process)
        yield process.start()
        return process

    @inlineCallbacks
    def stop(self, process: NSQDProcess, sig: str) -> Generator[Any, Any, None]:
        status = yield process.stop(sig)
        if sig == "TERM":
            self.assertEqual(status, ExitStatus(0, None), process.output())
        else:
            self.assertEqual(status.signal, 9, process.output())

    @inlineCallbacks
    def consumer(self, process: NSQDProcess, topic: str, channel: str, ready: int) -> Generator[Any, Any, FinishingClient]:
        endpoint_client = yield connect_finishing(self.reactor, process.tcp_port, process.host)
        self.addCleanup(endpoint_client.close)
        yield endpoint_client.sub(topic, channel)
        if ready:
            endpoint_client.rdy(ready)
        return endpoint_client

    @inlineCallbacks
    def http_stats(self, process: NSQDProcess, topic: str) -> Generator[Any, Any, Dict[str, Any]]:
        client = http_client(self.reactor)
        response = yield client.get(
            "http://%s:%d/stats?format=json&topic=%s" % (process.host, process.http_port, topic)
        )
        body = yield response.content()
        stats = json.loads(body)
        (found,) = [entry for entry in stats["topics"] if entry["topic_name"] == topic]
        return found  # type: ignore[no-any-return]

    @inlineCallbacks
    def cycles(
        self, sig: str, flags: List[str], count: int
    ) -> Generator[Any, Any, Tuple[Set[bytes], "Counter[bytes]", NSQDProcess]]:
        """
        ``count`` times: start nsqd, publish and consume under load for
        :data:`LOAD_SECONDS`, stop it with ``sig``.  Then start it once
        more and consume until everything acknowledged came (or
        :data:`WAIT` passed) and nothing more arrives.  Returns the
        acknowledged bodies, how often each body was received, and the
        last nsqd (still running).
        """
        data_path = self.make_dir()
        acknowledged: Set[bytes] = set()
        received: "Counter[bytes]" = Counter()
        counter = [0]
        for _ in range(count):
            process = yield self.start(data_path, *flags)
            consumer = yield self.consumer(process, "t", "c", 100)
            publisher = yield connect(self.reactor, process.tcp_port, process.host)
            self.addCleanup(publisher.close)
            producer = Producer(publisher, "t", acknowledged, counter)
            producer.start()
            yield deferLater(self.reactor, LOAD_SECONDS, lambda: None)
            yield self.stop(process, sig)
            producer.stop()
            received.update(message.body for message in consumer.messages)
        self.assertGreater(len(acknowledged), count * 100, "the load did not run")
        process = yield self.start(data_path, *flags)
        consumer = yield self.consumer(process, "t", "c", 100)

        def all_came() -> bool:
            got = set(received) | {message.body for message in consumer.messages}
            return acknowledged <= got

        arrived = yield consumer.wait_for(all_came, WAIT)
        before = len(consumer.messages)
        yield consumer.wait_for(lambda: len(consumer.messages) > before, QUIET)
        received.update(message.body for message in consumer.messages)
        if not arrived:
            missing = sorted(acknowledged - set(received))
            self.fail("%d acknowledged messages lost: %r...\n%s" % (len(missing), missing[:10], process.output()))
        return acknowledged, received, process

    # -- tests -------------------------------------------------------------

    @inlineCallbacks
    def test_sigterm_under_load_loses_and_repeats_nothing(self) -> Generator[Any, Any, None]:
        """Three SIGTERM restarts under load: every acknowledged message is delivered, and exactly once."""
        acknowledged, received, process = yield self.cycles("TERM", [], 3)
        lost = acknowledged - set(received)
        duplicates = sorted(body for body, times in received.items() if times > 1)
        self.assertEqual((len(lost), duplicates[:10], len(duplicates)), (0, [], 0))
        yield self.stop(process, "TERM")

    @inlineCallbacks
    def test_sigkill_with_durable_flags_under_load_loses_nothing(self) -> Generator[Any, Any, None]:
        """Three SIGKILL restarts under load with --mem-queue-size=0 --sync-every=1: every acknowledged message is delivered."""
        acknowledged, received, process = yield self.cycles("KILL", DURABLE, 3)
        self.assertEqual(sorted(acknowledged - set(received))[:10], [])
        yield self.stop(process, "TERM")

    @inlineCallbacks
    def test_sigkill_redelivers_in_flight_messages(self) -> Generator[Any, Any, None]:
        """With durable flags, messages in flight (delivered, not finished) when nsqd is killed are delivered again after the restart."""
        data_path = self.make_dir()
        first = yield self.start(data_path, *DURABLE)
        holder = yield connect(self.reactor, first.tcp_port, first.host)
        self.addCleanup(holder.close)
        yield holder.sub("t", "c")
        publisher = yield connect(self.reactor, first.tcp_port, first.host)
        self.addCleanup(publisher.close)
        bodies = [b"held %d" % (number,) for number in range(10)]
        # Five queued first, five delivered at once as they are published.
        for body in bodies[:5]:
            self.assertEqual((yield publisher.pub("t", body)), b"OK")
        holder.rdy(10)
        self.assertTrue((yield holder.wait_messages(5, WAIT)))
        for body in bodies[5:]:
            self.assertEqual((yield publisher.pub("t", body)), b"OK")
        self.assertTrue((yield holder.wait_messages(10, WAIT)))
        yield self.stop(first, "KILL")

        second = yield self.start(data_path, *DURABLE)
        consumer = yield self.consumer(second, "t", "c", 100)
        arrived = yield consumer.wait_messages(len(bodies), WAIT)
        self.assertTrue(arrived, "%d of 10 arrived\n%s" % (len(consumer.messages), second.output()))
        self.assertEqual(sorted(message.body for message in consumer.messages), sorted(bodies))
        self.assertEqual({message.attempts for message in consumer.messages}, {2})
        yield self.stop(second, "TERM")

    @inlineCallbacks
    def test_sigkill_keeps_deferred_http_publishes(self) -> Generator[Any, Any, None]:
        """With durable flags, 20 deferred HTTP publishes answered OK are still deferred after SIGKILL, and delivered when due."""
        data_path = self.make_dir()
        # Long enough that they are still deferred when the restarted nsqd
        # is asked, even on a loaded machine.
        delay_ms = 15000
        first = yield self.start(data_path, *DURABLE)
        client = http_client(self.reactor)
        base = "http://%s:%d" % (first.host, first.http_port)
        for path in ("/topic/create?topic=df", "/channel/create?topic=df&channel=c"):
            response = yield client.post(base + path)
            self.assertEqual(response.code, 200)
            yield response.content()
        bodies = [b"deferred %02d" % (number,) for number in range(20)]
        sent_at = self.reactor.seconds()
        for body in bodies:
            response = yield client.post(base + "/pub?topic=df&defer=%d" % (delay_ms,), data=body)
            self.assertEqual((yield response.content()), b"OK")
        yield self.stop(first, "KILL")

        second = yield self.start(data_path, *DURABLE)
        stats = yield self.http_stats(second, "df")
        asked_at = self.reactor.seconds()
        (channel,) = stats["channels"]
        counts = (channel["deferred_count"], channel["depth"])
        if asked_at < sent_at + delay_ms / 1000.0:
            self.assertEqual(counts, (20, 0), second.output())
        else:  # pragma: no cover - a restart slower than the delay
            self.assertEqual(sum(counts), 20, second.output())
        consumer = yield self.consumer(second, "df", "c", 100)
        arrived = yield consumer.wait_messages(len(bodies), WAIT)
        self.assertTrue(arrived, "%d of 20 arrived\n%s" % (len(consumer.messages), second.output()))
        self.assertEqual(sorted(message.body for message in consumer.messages), bodies)
        early = [m.body for m in consumer.messages if m.received_at < sent_at + delay_ms / 1000.0]
        self.assertEqual(early, [])
        yield self.stop(second, "TERM")


@inlineCallbacks
def connect_finishing(reactor: Any, port: int, host: str) -> Generator[Any, Any, FinishingClient]:
    """Connect a :class:`FinishingClient` (the magic is sent)."""
    from twisted.internet.endpoints import TCP4ClientEndpoint
    from twisted.internet.protocol import Factory

    endpoint = TCP4ClientEndpoint(reactor, host, port, timeout=10)
    client = yield endpoint.connect(Factory.forProtocol(lambda: FinishingClient(reactor)))
    return client  # type: ignore[no-any-return]
