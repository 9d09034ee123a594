"""Tests for txnsq.nsqadmin.notify: the AdminAction document and how sending it fails."""

from __future__ import annotations

import json
from typing import Any, List

from twisted.internet.address import IPv4Address
from twisted.internet.defer import fail
from twisted.internet.task import Clock
from twisted.logger import LogLevel, globalLogPublisher
from twisted.trial.unittest import SynchronousTestCase
from twisted.web.test.requesthelper import DummyRequest

from tests.nsqadmin_fakes import FakeCluster
from txnsq.nsqadmin.notify import Notifier, admin_action


class _Request(DummyRequest):
    """A DummyRequest over plain HTTP."""

    def isSecure(self) -> bool:
        return False


def _request() -> DummyRequest:
    request = _Request([b"api", b"topics", b"beer"])
    request.uri = b"/api/topics/beer"
    request.client = IPv4Address("TCP", "1.2.3.4", 5678)
    request.requestHeaders.setRawHeaders(b"host", [b"nsqadmin.local"])
    request.requestHeaders.setRawHeaders(b"user-agent", [b"Mozilla/5.0"])
    return request


class AdminActionTests(SynchronousTestCase):
    """Tests for admin_action."""

    def test_fields(self) -> None:
        """Empty channel, node and user are left out; the rest is in Go's order."""
        doc = admin_action(
            "pause_topic", "beer", "", "", _request(), 1357683731.9, "X-Forwarded-User", "here"
        )
        self.assertEqual(
            doc,
            {
                "action": "pause_topic",
                "topic": "beer",
                "timestamp": 1357683731,
                "remote_ip": "1.2.3.4:5678",
                "user_agent": "Mozilla/5.0",
                "url": "http://nsqadmin.local/api/topics/beer",
                "via": "here",
            },
        )

    def test_https_and_user(self) -> None:
        """X-Scheme: https makes the URL https; the ACL header names the user."""
        request = _request()
        request.requestHeaders.setRawHeaders(b"x-scheme", [b"https"])
        request.requestHeaders.setRawHeaders(b"x-forwarded-user", [b"df"])
        doc = admin_action(
            "tombstone_topic_producer", "beer", "", "n:1", request, 0, "X-Forwarded-User", "h"
        )
        self.assertEqual(doc["url"], "https://nsqadmin.local/api/topics/beer")
        self.assertEqual((doc["user"], doc["node"]), ("df", "n:1"))


class NotifierTests(SynchronousTestCase):
    """Tests for Notifier."""

    def test_no_endpoint(self) -> None:
        """Without an endpoint nothing is sent."""
        fake = FakeCluster()
        Notifier(fake.request, "", Clock()).notify("empty_topic", "t", "", "", _request())
        self.assertEqual(fake.requests, [])

    def test_posts_json(self) -> None:
        """The document is POSTed as JSON to the endpoint."""
        fake = FakeCluster()
        notifier = Notifier(
            fake.request, "http://127.0.0.1:4151/pub?topic=admin_actions", Clock(), via="h"
        )
        notifier.notify("empty_channel", "t", "c", "", _request())
        [(method, url, body)] = fake.requests
        self.assertEqual((method, url), ("POST", "http://127.0.0.1:4151/pub?topic=admin_actions"))
        self.assertEqual(json.loads(body or b"")["channel"], "c")

    def test_failure_logged(self) -> None:
        """A failed notification is logged as an error, never raised."""
        events: List[Any] = []
        globalLogPublisher.addObserver(events.append)
        self.addCleanup(globalLogPublisher.removeObserver, events.append)
        notifier = Notifier(
            lambda m, u, b: fail(ConnectionError("refused")), "http://127.0.0.1:1/", Clock()
        )
        notifier.notify("delete_topic", "t", "", "", _request())
        errors = [e for e in events if e.get("log_level") == LogLevel.error]
        self.assertEqual(len(errors), 1)
        self.assertIn("refused", str(errors[0].get("error")))
