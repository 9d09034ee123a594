"""
Tests for txnsq.nsqadmin.clusterinfo and txnsq.nsqadmin.http_client: the
questions asked of fake nsqlookupd and nsqd answers, a node that fails or
times out (on a Clock), and every node failing.
"""

from __future__ import annotations

from typing import Any, List

from twisted.internet.defer import Deferred
from twisted.internet.task import Clock
from twisted.trial.unittest import SynchronousTestCase

from tests.nsqadmin_fakes import LOOKUPD, NSQD_A, NSQD_B, FakeCluster
from txnsq.nsqadmin.clusterinfo import ClusterInfo, ClusterUnavailable, Gathered, http_address
from txnsq.http_client import with_request_timeout


def result_of(d: "Deferred[Any]") -> Any:
    """The result a Deferred already has (raising its failure)."""
    results: List[Any] = []
    d.addBoth(results.append)
    assert results, "the Deferred has not fired"
    if hasattr(results[0], "raiseException"):
        results[0].raiseException()
    return results[0]


class ClusterInfoTests(SynchronousTestCase):
    """Tests for ClusterInfo."""

    def setUp(self) -> None:
        self.fake = FakeCluster().standard()
        self.cluster = ClusterInfo(self.fake.request)

    def test_lookupd_topics(self) -> None:
        """The lookupds' topics are united and sorted."""
        self.fake.answers["http://127.0.0.1:4261/topics"] = {"topics": ["zeta", "orders"]}
        found = result_of(self.cluster.lookupd_topics([LOOKUPD, "127.0.0.1:4261"]))
        self.assertEqual(found, Gathered(["orders", "zeta"], []))

    def test_lookupd_producers_merged(self) -> None:
        """A producer two lookupds list appears once, with both remote addresses."""
        self.fake.answers["http://127.0.0.1:4261/nodes"] = self.fake.answers[
            "http://%s/nodes" % LOOKUPD
        ]
        found = result_of(self.cluster.lookupd_producers([LOOKUPD, "127.0.0.1:4261"]))
        self.assertEqual([p["hostname"] for p in found.value], ["alpha", "beta"])
        self.assertEqual(
            found.value[0]["remote_addresses"],
            ["127.0.0.1:4161/127.0.0.1:5150", "127.0.0.1:4261/127.0.0.1:5150"],
        )
        self.assertEqual(found.value[0]["topics"], [{"topic": "orders", "tombstoned": False}])
        self.assertEqual(http_address(found.value[1]), NSQD_B)

    def test_one_lookupd_down(self) -> None:
        """A lookupd that refuses is an error naming it; the other's answer is used."""
        found = result_of(self.cluster.lookupd_topics([LOOKUPD, "127.0.0.1:1"]))
        self.assertEqual(found.value, ["orders"])
        self.assertEqual([e.node for e in found.errors], ["127.0.0.1:1"])
        self.assertIn("GET http://127.0.0.1:1/topics", found.errors[0].text)

    def test_all_down(self) -> None:
        """When no lookupd answers, the question fails with Go's text."""
        d = self.cluster.lookupd_topics(["127.0.0.1:1", "127.0.0.1:2"])
        failure = self.failureResultOf(d, ClusterUnavailable)
        self.assertTrue(str(failure.value).startswith("failed to query any nsqlookupd: "))
        self.assertEqual(len(failure.value.errors), 2)

    def test_error_status(self) -> None:
        """A non-200 answer is that node's error, with Go's wording."""
        self.fake.answers["http://%s/stats" % NSQD_B] = (500, b"oops")
        producers = result_of(self.cluster.lookupd_producers([LOOKUPD])).value
        found = result_of(self.cluster.nsqd_stats(producers))
        self.assertEqual([t["node"] for t in found.value], [NSQD_A])
        self.assertEqual(found.errors[0].node, NSQD_B)
        self.assertIn('got response 500 Status "oops"', found.errors[0].text)

    def test_node_times_out(self) -> None:
        """An nsqd that never answers is an error on that node once the request timeout passes."""
        clock = Clock()
        self.fake.answers["http://%s/stats" % NSQD_B] = "hang"
        cluster = ClusterInfo(
            lambda m, u, b=None: with_request_timeout(self.fake.request(m, u, b), clock, 5.0)
        )
        producers = result_of(cluster.lookupd_producers([LOOKUPD])).value
        d = cluster.nsqd_stats(producers, "orders")
        self.assertNoResult(d)
        clock.advance(5)
        found = result_of(d)
        self.assertEqual([t["node"] for t in found.value], [NSQD_A])
        self.assertEqual([e.node for e in found.errors], [NSQD_B])
        self.assertIn("timed out", found.errors[0].text)

    def test_requests_concurrent(self) -> None:
        """Every nsqd is asked before any has answered."""
        self.fake.answers["http://%s/stats" % NSQD_A] = "hang"
        self.fake.answers["http://%s/stats" % NSQD_B] = "hang"
        producers = result_of(self.cluster.lookupd_producers([LOOKUPD])).value
        self.cluster.nsqd_stats(producers)
        self.assertEqual(len(self.fake.hanging), 2)

    def test_topic_producers_unknown_topic(self) -> None:
        """A topic the lookupd answers 404 for has no producers and no error."""
        found = result_of(self.cluster.lookupd_topic_producers("nope", [LOOKUPD]))
        self.assertEqual(found, Gathered([], []))

    def test_nsqd_mode_producers(self) -> None:
        """Without lookupds, the nsqds having a topic are found from their /stats and /info."""
        found = result_of(self.cluster.topic_producers("orders", [], [NSQD_A, NSQD_B]))
        self.assertEqual([p["hostname"] for p in found.value], ["alpha", "beta"])
        self.assertEqual(found.value[0]["topics"], [{"topic": "orders", "tombstoned": False}])
        missing = result_of(self.cluster.topic_producers("other", [], [NSQD_A]))
        self.assertEqual(missing.value, [])

    def test_stats_query(self) -> None:
        """Stats are asked for the topic and channel, without clients when not wanted."""
        producers = result_of(self.cluster.lookupd_producers([LOOKUPD])).value
        result_of(
            self.cluster.nsqd_stats(producers[:1], "orders", "billing", include_clients=False)
        )
        self.assertEqual(
            self.fake.requests[-1][1],
            "http://%s/stats?format=json&topic=orders&channel=billing&include_clients=false"
            % NSQD_A,
        )

    def test_post_failures(self) -> None:
        """A POST that fails is reported, not raised."""
        self.fake.answers["http://127.0.0.1:1/"] = ConnectionError("refused")
        errors = result_of(
            self.cluster.post_lookupds([LOOKUPD, "127.0.0.1:1"], "topic/create", "topic=x")
        )
        self.assertEqual([e.node for e in errors], ["127.0.0.1:1"])
