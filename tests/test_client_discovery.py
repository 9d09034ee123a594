"""
Tests for L{txnsq.client.discovery}: polling nsqlookupd for a topic.
"""

from __future__ import annotations

import json
import random
from typing import List

from twisted.internet.defer import Deferred
from twisted.internet.task import Clock
from twisted.trial.unittest import SynchronousTestCase

from tests.client_fakes import FakeLookupd
from txnsq.client.discovery import (
    LookupdError,
    LookupdPoller,
    join_host_port,
    lookup_url,
    parse_lookup_response,
)


class LookupURLTests(SynchronousTestCase):
    """Tests for L{lookup_url} (go-nsq's buildLookupAddr)."""

    def test_host_port(self) -> None:
        """A bare host:port becomes http://host:port/lookup?topic=..."""
        self.assertEqual(lookup_url("127.0.0.1:4161", "clicks"), "http://127.0.0.1:4161/lookup?topic=clicks")

    def test_url_without_path(self) -> None:
        """A URL without a path (or with /) gets /lookup."""
        self.assertEqual(lookup_url("https://lookupd:4161/", "t"), "https://lookupd:4161/lookup?topic=t")

    def test_url_with_path_and_query(self) -> None:
        """A URL's own path and query parameters are kept; its topic is replaced."""
        self.assertEqual(
            lookup_url("http://h:1/api/lookup?x=1&topic=old", "new#ephemeral"),
            "http://h:1/api/lookup?x=1&topic=new%23ephemeral",
        )


class ParseTests(SynchronousTestCase):
    """Tests for L{parse_lookup_response}."""

    def test_producers(self) -> None:
        """Each producer is keyed broadcast_address:tcp_port, IPv6 bracketed."""
        body = json.dumps(
            {
                "channels": ["c"],
                "producers": [
                    {"broadcast_address": "a.example", "tcp_port": 4150, "remote_address": "x:1"},
                    {"broadcast_address": "::1", "tcp_port": 4152},
                ],
            }
        ).encode()
        self.assertEqual(parse_lookup_response(body), ["a.example:4150", "[::1]:4152"])

    def test_envelope(self) -> None:
        """The pre-1.0 {status_code, data} envelope is accepted."""
        body = json.dumps(
            {"status_code": 200, "status_txt": "OK", "data": {"producers": [{"address": "h", "tcp_port": 1}]}}
        ).encode()
        self.assertEqual(parse_lookup_response(body), ["h:1"])

    def test_bad(self) -> None:
        """Garbage, or producers without address or port, are refused."""
        for body in (b"nope", b"[]", b'{"producers": 3}', b'{"producers": [{"tcp_port": 1}]}',
                     b'{"producers": [{"broadcast_address": "h", "tcp_port": "1"}]}', b'{"producers": [1]}'):
            self.assertRaises(LookupdError, parse_lookup_response, body)

    def test_join_host_port(self) -> None:
        """join_host_port brackets IPv6 like Go's net.JoinHostPort."""
        self.assertEqual(join_host_port("fe80::1", 80), "[fe80::1]:80")
        self.assertEqual(join_host_port("host", 80), "host:80")


class PollerTests(SynchronousTestCase):
    """Tests for L{LookupdPoller}."""

    def setUp(self) -> None:
        self.clock = Clock()
        self.lookupd = FakeLookupd(self.clock)
        self.found: List[List[str]] = []

    def poller(self, addresses: List[str], interval: float = 60.0, jitter: float = 0.3, seed: int = 5) -> LookupdPoller:
        return LookupdPoller(
            self.clock,
            self.lookupd,
            addresses,
            "clicks",
            self.found.append,
            interval,
            jitter,
            random.Random(seed),
        )

    def test_union(self) -> None:
        """Every lookupd is asked; their producers are joined without duplicates."""
        self.lookupd.producers = {
            "l1:4161": [("a", 4150), ("b", 4150)],
            "l2:4161": [("b", 4150), ("c", 4150), ("a", 4151)],
        }
        self.poller(["l1:4161", "l2:4161"]).start()
        self.assertEqual(
            [url for _, url in self.lookupd.requests],
            ["http://l1:4161/lookup?topic=clicks", "http://l2:4161/lookup?topic=clicks"],
        )
        self.assertEqual(self.found, [["a:4150", "b:4150", "c:4150", "a:4151"]])

    def test_failed_lookupd(self) -> None:
        """A lookupd that fails is left out of the union, and logged."""
        self.lookupd.producers = {"l1:4161": [("a", 4150)], "l2:4161": [("b", 4150)]}
        self.lookupd.down = {"l2:4161"}
        self.poller(["l1:4161", "l2:4161"]).start()
        self.assertEqual(self.found, [["a:4150"]])

    def test_all_failed(self) -> None:
        """When no lookupd answers nothing is reported."""
        self.lookupd.down = {"l1:4161"}
        self.poller(["l1:4161"]).start()
        self.assertEqual(self.found, [])

    def test_bad_status(self) -> None:
        """A non-200 answer counts as a failure."""

        def request(method: str, url: str) -> "Deferred[object]":
            d: Deferred[object] = Deferred()
            d.callback((404, b"Not Found", b'{"message":"TOPIC_NOT_FOUND"}'))
            return d

        LookupdPoller(self.clock, request, ["l:1"], "t", self.found.append).start()  # type: ignore[arg-type]
        self.assertEqual(self.found, [])

    def test_schedule(self) -> None:
        """
        The first poll is at once, the second after an interval plus a
        random jitter of at most poll_jitter of an interval, then one every
        interval.
        """
        self.lookupd.producers = {"l1:4161": [("a", 4150)]}
        poller = self.poller(["l1:4161"], interval=10.0, jitter=0.3, seed=11)
        poller.start()
        jitter = random.Random(11).random() * 0.3 * 10.0
        for _ in range(500):
            self.clock.advance(0.1)
        times = self.lookupd.request_times()
        self.assertEqual(times[0], 0.0)
        self.assertTrue(10.0 <= times[1] <= 13.0, times)
        self.assertLessEqual(abs(times[1] - (10.0 + jitter)), 0.11)
        for earlier, later in zip(times[1:], times[2:]):
            self.assertLessEqual(abs(later - earlier - 10.0), 0.11)
        self.assertEqual(len(times), 5)
        self.assertEqual(poller.polls, 5)

    def test_jitter_bounds(self) -> None:
        """Over many random sources the second poll stays within [interval, interval * (1 + jitter)]."""
        seconds = set()
        for seed in range(50):
            clock = Clock()
            lookupd = FakeLookupd(clock)
            poller = LookupdPoller(clock, lookupd, ["l:1"], "t", lambda a: None, 60.0, 0.3, random.Random(seed))
            poller.start()
            calls = clock.getDelayedCalls()
            self.assertEqual(len(calls), 1)
            when = calls[0].getTime()
            self.assertTrue(60.0 <= when <= 78.0, when)
            seconds.add(round(when, 3))
            poller.stop()
            self.assertEqual(clock.getDelayedCalls(), [])
        self.assertGreater(len(seconds), 40)

    def test_slow_poll_not_overlapped(self) -> None:
        """A poll still waiting for a lookupd delays the next one."""
        self.lookupd.hold = True
        poller = self.poller(["l1:4161"], interval=10.0, jitter=0.0)
        poller.start()
        self.clock.advance(10)  # the loop starts with a poll: now two held
        self.clock.advance(10)
        self.clock.advance(10)
        self.assertEqual(len(self.lookupd.requests), 2)
        self.lookupd.held[-1].callback((200, b"OK", b'{"producers": []}'))
        self.clock.advance(10)
        self.assertEqual(len(self.lookupd.requests), 3)
        poller.stop()

    def test_stop(self) -> None:
        """stop() cancels requests under way and every later poll."""
        self.lookupd.hold = True
        poller = self.poller(["l1:4161"], interval=10.0)
        poller.start()
        self.assertTrue(poller.running)
        poller.stop()
        self.assertFalse(poller.running)
        self.assertTrue(self.lookupd.held[0].called)
        self.clock.advance(100)
        self.assertEqual(len(self.lookupd.requests), 1)
        self.assertEqual(self.clock.getDelayedCalls(), [])
        self.assertEqual(self.found, [])

    def test_stop_after_loop_started(self) -> None:
        """stop() also stops the periodic polls."""
        poller = self.poller(["l1:4161"], interval=10.0)
        poller.start()
        self.clock.advance(20)
        poller.stop()
        self.assertEqual(self.clock.getDelayedCalls(), [])

    def test_invalid(self) -> None:
        """A jitter outside 0..1 or a non-positive interval is refused."""
        self.assertRaises(ValueError, LookupdPoller, self.clock, self.lookupd, [], "t", print, 60.0, 1.5)
        self.assertRaises(ValueError, LookupdPoller, self.clock, self.lookupd, [], "t", print, 0.0)
