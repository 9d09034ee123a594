"""Tests for txnsq.nsqadmin.stats, txnsq.nsqadmin.history and txnsq.nsqadmin.notify's payload."""

from __future__ import annotations

from twisted.internet.task import Clock
from twisted.trial.unittest import SynchronousTestCase

from tests.nsqadmin_fakes import client, nsqd_stats
from txnsq.nsqadmin.history import History
from txnsq.nsqadmin.notify import basic_auth_user
from txnsq.nsqadmin.stats import node_topic, topic_total


class StatsTests(SynchronousTestCase):
    """Tests for the sums of per-node stats."""

    def test_topic_total(self) -> None:
        """Two nodes' topic and channel counters are summed; clients carry their node."""
        a = node_topic(nsqd_stats(5, 100, [client("c1")])["topics"][0], "a:1", "alpha", True)
        b = node_topic(nsqd_stats(7, 200, paused=True)["topics"][0], "b:1", "beta", True)
        total = topic_total("orders", [b, a])
        self.assertEqual((total["node"], total["depth"], total["message_count"]), ("*", 12, 300))
        self.assertEqual([n["node"] for n in total["nodes"]], ["a:1", "b:1"])
        [channel] = total["channels"]
        self.assertEqual(channel["deferred_count"], 4)
        self.assertEqual(channel["client_count"], 1)
        self.assertTrue(channel["paused"])
        self.assertEqual(channel["clients"][0]["node"], "a:1")

    def test_without_clients(self) -> None:
        """Without clients, the count is nsqd's client_count and no client is listed."""
        doc = node_topic(nsqd_stats(1, 1, [client("c1")])["topics"][0], "a:1", "alpha", False)
        self.assertEqual(doc["channels"][0]["clients"], [])
        self.assertEqual(doc["channels"][0]["client_count"], 1)

    def test_garbage_counters(self) -> None:
        """Counters that are not integers count as 0."""
        raw = {
            "topic_name": "t",
            "depth": "lots",
            "channels": [{"channel_name": "c", "depth": None}],
        }
        doc = node_topic(raw, "a:1", "alpha", True)
        self.assertEqual((doc["depth"], doc["channels"][0]["depth"]), (0, 0))


class HistoryTests(SynchronousTestCase):
    """Tests for History."""

    def test_rate(self) -> None:
        """The rate is the message count difference over the time between the last two samples."""
        clock = Clock()
        history = History(clock, window=60)
        history.record("t", 5, 100)
        self.assertIsNone(history.rate("t"))
        clock.advance(2)
        history.record("t", 6, 140)
        self.assertEqual(history.rate("t"), 20.0)
        self.assertEqual(history.rates("t"), [20.0])

    def test_window(self) -> None:
        """Samples older than the window are dropped."""
        clock = Clock()
        history = History(clock, window=10)
        history.record("t", 1, 1)
        clock.advance(11)
        history.record("t", 2, 2)
        self.assertEqual([s.depth for s in history.samples("t")], [2])

    def test_close_samples_replace(self) -> None:
        """A sample closer than min_interval to the last replaces it."""
        clock = Clock()
        history = History(clock, min_interval=1.0)
        history.record("t", 1, 1)
        clock.advance(0.5)
        history.record("t", 2, 2)
        self.assertEqual([s.depth for s in history.samples("t")], [2])


class BasicAuthTests(SynchronousTestCase):
    """Tests for basic_auth_user."""

    def test_user(self) -> None:
        """The user of a Basic header is read; anything else is ''."""
        from twisted.web.test.requesthelper import DummyRequest

        request = DummyRequest([b""])
        request.requestHeaders.setRawHeaders(b"authorization", [b"Basic ZGY6c2VjcmV0"])
        self.assertEqual(basic_auth_user(request), "df")
        request.requestHeaders.setRawHeaders(b"authorization", [b"Basic !!"])
        self.assertEqual(basic_auth_user(request), "")
