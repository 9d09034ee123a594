"""
The txnsq Consumer against a cluster of real processes: three ``nsqd``
found through two ``nsqlookupd`` (the console scripts, on 127.0.0.1), one
of them killed and restarted while the Consumer keeps consuming.

The Consumer runs in the test's reactor; the daemons are child processes
(:mod:`tests.integration.test_cluster` starts them).  Nothing sleeps for a
fixed time: every wait polls up to a deadline.
"""

from __future__ import annotations

from collections import Counter
from typing import Any, Generator, List

from twisted.internet.defer import inlineCallbacks, succeed

from tests.integration.nsqd_process import NSQDProcess, free_port
from tests.integration.test_cluster import RECONNECT_BOUND, SLACK, ClusterTestCase, node_name
from txnsq.client import Consumer, Message

#: Seconds between the Consumer's lookupd polls (short, so a restarted
#: nsqd is found again quickly).
POLL_INTERVAL = 1.0

#: Messages published to each nsqd per round.
COUNT = 40


class ConsumerClusterTests(ClusterTestCase):
    """Two lookupds, three nsqd (the third on fixed ports, to restart it), one Consumer."""

    timeout = 90

    @inlineCallbacks
    def setUp(self) -> Any:  # type: ignore[override]
        yield super().setUp()
        self.third_ports = (free_port(), free_port())
        third = yield self.start_nsqd(*self.third_ports)
        self.nsqds.append(third)
        names = sorted(node_name(nsqd) for nsqd in self.nsqds)
        yield self.wait_for(
            "both lookupds know the three nsqd",
            lambda: self.all([self.registered(lookupd) for lookupd in self.lookupds]),
            lambda seen: [registered.get("client::") for registered in seen] == [names, names],
            RECONNECT_BOUND,
        )
        self.received: List[bytes] = []

    def handler(self, message: Message) -> bool:
        self.received.append(message.body)
        return True

    @inlineCallbacks
    def publish(self, nsqd: NSQDProcess, prefix: str) -> Generator[Any, Any, List[bytes]]:
        """Publish COUNT bodies ``prefix-N`` to ``nsqd`` over HTTP; the bodies."""
        bodies = [("%s-%d" % (prefix, i)).encode() for i in range(COUNT)]
        yield self.post(nsqd, "/mpub", ("topic", "events"), body=b"\n".join(bodies))
        return bodies

    def consumed(self, expected: List[bytes], within: float) -> Any:
        """Wait until every body of ``expected`` arrived."""
        wanted = Counter(expected)

        def done(_: Any) -> bool:
            got = Counter(self.received)
            return all(got[body] >= n for body, n in wanted.items())

        return self.wait_for(
            "all %d messages consumed" % (len(expected),),
            lambda: succeed(sorted(set(wanted) - set(self.received))[:10]),
            done,
            within,
        )

    @inlineCallbacks
    def test_consume_from_three_and_survive_a_restart(self) -> Generator[Any, Any, None]:
        """
        The Consumer, given only the lookupds, reads from all three nsqd;
        after one is killed and restarted it reads that nsqd's new messages
        too, and nothing is delivered twice.
        """
        expected: List[bytes] = []
        for index, nsqd in enumerate(self.nsqds):
            expected += yield self.publish(nsqd, "first%d" % (index,))
        consumer = Consumer(
            "events",
            "archive",
            self.handler,
            lookupd_http_addresses=["127.0.0.1:%d" % (lookupd.http_port,) for lookupd in self.lookupds],
            lookupd_poll_interval=POLL_INTERVAL,
            max_in_flight=10,
            reactor=self.reactor,
        )
        consumer.start()
        self.addCleanup(consumer.close)
        yield self.consumed(expected, 30.0)
        self.assertEqual(consumer.connections, 3)

        # Kill the third nsqd (its unconsumed messages, in memory, die with
        # it) and start a new one on the same ports.
        third = self.nsqds.pop()
        third.kill()
        yield third.ended
        restarted = yield self.start_nsqd(*self.third_ports)
        self.nsqds.append(restarted)
        for index, nsqd in enumerate(self.nsqds):
            expected += yield self.publish(nsqd, "second%d" % (index,))
        # Found again by a poll once the restarted nsqd has registered.
        yield self.consumed(expected, RECONNECT_BOUND + POLL_INTERVAL + SLACK)
        self.assertEqual(consumer.connections, 3)
        duplicates = [body for body, n in Counter(self.received).items() if n > 1]
        self.assertEqual(duplicates, [])
        yield consumer.close()
