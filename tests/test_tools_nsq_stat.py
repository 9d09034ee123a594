"""Tests for txnsq.tools.nsq_stat, txnsq.tools.stat_table and txnsq.tools.cluster_http."""

from __future__ import annotations

import io
import json
from typing import Any, Dict, List, Tuple

from twisted.internet.defer import Deferred, fail, succeed
from twisted.internet.task import Clock
from twisted.trial.unittest import SynchronousTestCase

from txnsq import cli
from txnsq.tools.cluster_http import ClusterError, ClusterHTTP
from txnsq.tools.nsq_stat import StatError, StatLoop, nsq_stat_flags, validate
from txnsq.tools.stat_table import ChannelStats, StatTable, channel_stats


def stats_reply(message_count: int, depth: int = 0, topic: str = "t", channel: str = "c") -> Dict[str, Any]:
    """An nsqd /stats?format=json reply with one channel."""
    return {
        "version": "1.3.0",
        "topics": [
            {
                "topic_name": topic,
                "channels": [
                    {
                        "channel_name": channel,
                        "depth": depth,
                        "backend_depth": 1 if depth else 0,
                        "in_flight_count": 2,
                        "deferred_count": 3,
                        "requeue_count": 4,
                        "timeout_count": 5,
                        "message_count": message_count,
                        "client_count": 1,
                    }
                ],
            }
        ],
    }


class FakeHTTP:
    """Answers GETs from a table of URL prefixes."""

    def __init__(self) -> None:
        self.answers: Dict[str, Any] = {}
        self.requests: List[str] = []

    def request(self, method: str, url: str) -> "Deferred[Tuple[int, bytes, bytes]]":
        self.requests.append(url)
        for prefix, answer in self.answers.items():
            if url.startswith(prefix):
                if isinstance(answer, Exception):
                    return fail(answer)
                if callable(answer):
                    answer = answer()
                return succeed((200, b"OK", json.dumps(answer).encode()))
        return succeed((404, b"Not Found", b'{"message":"NOT_FOUND"}'))


class StatTableTests(SynchronousTestCase):
    """Go nsq_stat's table."""

    def test_sum_over_nsqds(self) -> None:
        """A channel's counters are summed over nsqds; memory depth is depth minus disk."""
        total = channel_stats([stats_reply(10, depth=4), {"data": stats_reply(5, depth=2)}], "t", "c")
        assert total is not None
        self.assertEqual(total.message_count, 15)
        self.assertEqual((total.depth, total.memory_depth, total.backend_depth), (6, 4, 2))
        self.assertEqual(total.client_count, 2)
        self.assertIsNone(channel_stats([stats_reply(1)], "t", "other"))

    def test_client_count_from_clients_list(self) -> None:
        """Without client_count (older nsqd) the clients are counted."""
        reply = stats_reply(1)
        channel = reply["topics"][0]["channels"][0]
        del channel["client_count"]
        channel["clients"] = [{}, {}, {}]
        total = channel_stats([reply], "t", "c")
        assert total is not None
        self.assertEqual(total.client_count, 3)

    def test_header_then_rows_with_rates(self) -> None:
        """The first poll prints only the header; later ones a row with the rates over the interval."""
        out = io.StringIO()
        table = StatTable(out, 2.0)
        table.poll(ChannelStats(message_count=100, depth=10))
        self.assertEqual(
            out.getvalue(),
            "------rate------+----------------depth----------------+--------------metadata---------------\n"
            "ingress  egress |   total     mem    disk inflt   def |     req     t-o         msgs clients\n",
        )
        table.poll(ChannelStats(message_count=121, depth=4, memory_depth=4, client_count=1))
        self.assertEqual(
            out.getvalue().splitlines()[-1],
            "     10      13 |       4       4       0     0     0 |       0       0          121       1",
        )

    def test_header_every_25_polls(self) -> None:
        """The header is printed again every 25 polls."""
        out = io.StringIO()
        table = StatTable(out, 1.0)
        for _ in range(51):
            table.poll(ChannelStats())
        self.assertEqual(out.getvalue().count("ingress"), 3)


class ClusterHTTPTests(SynchronousTestCase):
    """The lookupd and nsqd questions."""

    def test_lookupd_topics_union(self) -> None:
        """Topics of every lookupd are merged and sorted."""
        http = FakeHTTP()
        http.answers["http://a/topics"] = {"topics": ["b", "a"]}
        http.answers["http://b/topics"] = {"topics": ["c", "a"]}
        cluster = ClusterHTTP(http.request)
        self.assertEqual(self.successResultOf(cluster.lookupd_topics(["a", "b"])), ["a", "b", "c"])

    def test_lookupd_producers(self) -> None:
        """Producers' HTTP addresses come from broadcast_address and http_port, without repeats."""
        http = FakeHTTP()
        producer = {"broadcast_address": "h", "http_port": 4151, "tcp_port": 4150}
        http.answers["http://l1/lookup?topic=t%2F"] = {"producers": [producer]}
        http.answers["http://l2/lookup?topic=t%2F"] = {"producers": [producer, dict(producer, broadcast_address="::1")]}
        cluster = ClusterHTTP(http.request)
        self.assertEqual(
            self.successResultOf(cluster.lookupd_topic_producers("t/", ["l1", "l2"])),
            ["h:4151", "[::1]:4151"],
        )

    def test_failures_listed(self) -> None:
        """A failed request fails the question, naming the URL and Go's status text."""
        http = FakeHTTP()
        cluster = ClusterHTTP(http.request)
        failure = self.failureResultOf(cluster.lookupd_topics(["x"]), ClusterError)
        self.assertEqual(
            str(failure.value),
            'Get http://x/topics: got response 404 Not Found "{\\"message\\":\\"NOT_FOUND\\"}"',
        )

    def test_nsqd_producers(self) -> None:
        """Only the nsqds that have the topic are its producers."""
        http = FakeHTTP()
        http.answers["http://n1/stats"] = stats_reply(1)
        http.answers["http://n2/stats"] = {"topics": []}
        cluster = ClusterHTTP(http.request)
        self.assertEqual(self.successResultOf(cluster.nsqd_topic_producers("t", ["n1", "n2"])), ["n1"])
        self.assertIn("include_clients=false", http.requests[0])


class StatLoopTests(SynchronousTestCase):
    """Go's statLoop."""

    def test_count_rows(self) -> None:
        """--count N prints N rows from N+1 polls, one every interval, then fires 0."""
        http = FakeHTTP()
        counts = iter([10, 30, 70])
        # The producers question comes first, then the channel's stats.
        http.answers["http://n1/stats?format=json&topic="] = stats_reply(0)
        http.answers["http://n1/stats"] = lambda: stats_reply(next(counts))
        clock = Clock()
        out = io.StringIO()
        loop = StatLoop(
            ClusterHTTP(http.request), StatTable(out, 2.0), clock, "t", "c",
            nsqd_http_addresses=["n1"], count=2,
        )
        done = loop.run()
        self.assertEqual(len(out.getvalue().splitlines()), 2)
        clock.advance(2)
        clock.advance(2)
        self.assertNoResult(done)
        clock.advance(2)
        self.assertEqual(self.successResultOf(done), 0)
        rows = out.getvalue().splitlines()[2:]
        self.assertEqual([row.split()[0] for row in rows], ["10", "20"])

    def test_missing_channel_fatal(self) -> None:
        """A channel no nsqd has is Go's fatal message."""
        http = FakeHTTP()
        http.answers["http://l/lookup"] = {"producers": []}
        loop = StatLoop(
            ClusterHTTP(http.request), StatTable(io.StringIO(), 1.0), Clock(), "t", "c",
            lookupd_http_addresses=["l"],
        )
        failure = self.failureResultOf(loop.run(), StatError)
        self.assertEqual(
            str(failure.value), "ERROR: failed to find channel(c) in stats metadata for topic(t)"
        )

    def test_producer_failure_fatal(self) -> None:
        """A failed lookup is 'failed to get topic producers'."""
        http = FakeHTTP()
        http.answers["http://l/lookup"] = ConnectionRefusedError("refused")
        loop = StatLoop(
            ClusterHTTP(http.request), StatTable(io.StringIO(), 1.0), Clock(), "t", "c",
            lookupd_http_addresses=["l"],
        )
        failure = self.failureResultOf(loop.run(), StatError)
        self.assertTrue(str(failure.value).startswith("ERROR: failed to get topic producers - Get http://l/lookup: "))


class NSQStatFlagsTests(SynchronousTestCase):
    """nsq_stat's flags and checks."""

    def parse(self, *argv: str) -> Any:
        return cli.parse_flags(nsq_stat_flags(), argv)

    def test_checks(self) -> None:
        """Go's checks, in Go's order, with Go's texts."""
        base = ("--topic=t", "--channel=c")
        cases = [
            ((), "--topic and --channel are required"),
            (base + ("--interval=0s",), "--interval should be positive"),
            (base + ("--http-client-connect-timeout=0s",), "--http-client-connect-timeout should be positive"),
            (base + ("--count=0",), "--count should be positive"),
            (base, "--nsqd-http-address or --lookupd-http-address required"),
            (base + ("--nsqd-http-address=a:1", "--lookupd-http-address=b:1"), "use --nsqd-http-address or --lookupd-http-address not both"),
            (base + ("--nsqd-http-address=http://a:1",), "--nsqd-http-address error - address should not contain scheme"),
            (base + ("--lookupd-http-address=b:1",), None),
        ]
        for argv, message in cases:
            self.assertEqual(validate(self.parse(*argv)), message, argv)

    def test_count_parse(self) -> None:
        """--count takes a 32-bit integer; others are Go's flag error."""
        self.assertEqual(self.parse("--count=3")["count"], 3)
        self.assertIsNone(self.parse()["count"])
        error = self.assertRaises(cli.FlagError, self.parse, "--count=99999999999")
        self.assertEqual(
            error.message,
            'invalid value "99999999999" for flag -count: strconv.ParseInt: parsing "99999999999": value out of range',
        )
