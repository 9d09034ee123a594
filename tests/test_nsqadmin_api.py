"""
Tests for txnsq.nsqadmin.api, driven in-process through ``treq.testing``
over a fake cluster: Go nsqadmin's JSON shapes and statuses, warnings for
a node down, 502 when none answers, the ACL and the notifications.
"""

from __future__ import annotations

import json
from typing import Any, Dict, Optional, Tuple

from treq.testing import StubTreq
from twisted.internet.task import Clock
from twisted.trial.unittest import SynchronousTestCase

from tests.nsqadmin_fakes import LOOKUPD, NSQD_A, NSQD_B, FakeCluster, client
from txnsq.nsqadmin.app import admin_resource
from txnsq.nsqadmin.clusterinfo import ClusterInfo
from txnsq.nsqadmin.notify import Notifier
from txnsq.nsqadmin.options import NSQAdminOptions


class AdminHarness:
    """An nsqadmin resource over a fake cluster, and a way to call it."""

    def __init__(self, fake: FakeCluster, **settings: Any) -> None:
        self.fake = fake
        self.clock = Clock()
        self.clock.advance(1795600100)
        self.options = NSQAdminOptions(**settings)
        if not self.options.nsqd_http_addresses and not self.options.nsqlookupd_http_addresses:
            self.options.nsqlookupd_http_addresses = [LOOKUPD]
        self.notifications = FakeCluster()
        notifier = Notifier(
            self.notifications.request,
            self.options.notification_http_endpoint,
            self.clock,
            self.options.acl_http_header,
            via="admin-host",
        )
        self.stub = StubTreq(
            admin_resource(self.options, ClusterInfo(fake.request), self.clock, notifier)
        )

    def call(
        self, method: str, path: str, body: Any = None, headers: Optional[Dict[str, str]] = None
    ) -> Tuple[int, Dict[str, Any], bytes]:
        data = None
        if body is not None:
            data = body if isinstance(body, bytes) else json.dumps(body).encode("utf-8")
        d = self.stub.request(
            method, "http://nsqadmin.local" + path, data=data, headers=headers or {}
        )
        self.stub.flush()
        results: list = []
        d.addBoth(results.append)
        response = results[0]
        content: list = []
        self.stub.content(response).addBoth(content.append)
        self.stub.flush()
        raw = content[0]
        doc = {}
        if response.headers.getRawHeaders(b"content-type", [b""])[0].startswith(
            b"application/json"
        ):
            doc = json.loads(raw)
        return response.code, doc, raw


class APIReadTests(SynchronousTestCase):
    """Tests for the GET /api/* routes."""

    def setUp(self) -> None:
        self.fake = FakeCluster().standard(clients=[client("c1")])
        self.admin = AdminHarness(self.fake)

    def test_ping(self) -> None:
        """/ping answers OK."""
        code, _, raw = self.admin.call("GET", "/ping")
        self.assertEqual((code, raw), (200, b"OK"))

    def test_topics(self) -> None:
        """/api/topics lists the lookupds' topics with an empty message."""
        code, doc, _ = self.admin.call("GET", "/api/topics")
        self.assertEqual((code, doc), (200, {"topics": ["orders"], "message": ""}))

    def test_inactive_topics(self) -> None:
        """?inactive=true maps topics without producers to their channels."""
        self.fake.answers["http://%s/topics" % LOOKUPD] = {"topics": ["orders", "idle"]}
        self.fake.answers["http://%s/lookup?topic=idle" % LOOKUPD] = {
            "channels": ["x"],
            "producers": [],
        }
        self.fake.answers["http://%s/channels?topic=idle" % LOOKUPD] = {"channels": ["x"]}
        code, doc, _ = self.admin.call("GET", "/api/topics?inactive=true")
        self.assertEqual((code, doc), (200, {"topics": {"idle": ["x"]}, "message": ""}))

    def test_topic(self) -> None:
        """/api/topics/:topic sums the nodes in Go's TopicStats shape."""
        code, doc, _ = self.admin.call("GET", "/api/topics/orders")
        self.assertEqual(code, 200)
        self.assertEqual(doc["node"], "*")
        self.assertEqual(doc["topic_name"], "orders")
        self.assertEqual(doc["depth"], 12)
        self.assertEqual(doc["message_count"], 300)
        self.assertEqual([n["node"] for n in doc["nodes"]], [NSQD_A, NSQD_B])
        self.assertEqual(doc["channels"][0]["channel_name"], "billing")
        self.assertEqual(doc["channels"][0]["depth"], 12)
        self.assertEqual(doc["message"], "")
        for key in (
            "hostname",
            "memory_depth",
            "backend_depth",
            "paused",
            "e2e_processing_latency",
        ):
            self.assertIn(key, doc)

    def test_channel(self) -> None:
        """/api/topics/:topic/:channel sums the nodes and lists every client with its node."""
        code, doc, _ = self.admin.call("GET", "/api/topics/orders/billing")
        self.assertEqual(code, 200)
        self.assertEqual(doc["channel_name"], "billing")
        self.assertEqual(doc["in_flight_count"], 2)
        self.assertEqual(doc["requeue_count"], 6)
        self.assertEqual([c["client_id"] for c in doc["clients"]], ["c1"])
        self.assertEqual(doc["clients"][0]["node"], NSQD_A)
        self.assertEqual(doc["client_count"], 1)

    def test_unknown_channel(self) -> None:
        """An unknown channel answers only the message, as Go's nil ChannelStats does."""
        code, doc, _ = self.admin.call("GET", "/api/topics/orders/nope")
        self.assertEqual((code, doc), (200, {"message": ""}))

    def test_nodes(self) -> None:
        """/api/nodes lists producers in Go's Producer shape."""
        code, doc, _ = self.admin.call("GET", "/api/nodes")
        self.assertEqual(code, 200)
        self.assertEqual(
            sorted(doc["nodes"][0]),
            sorted(
                [
                    "remote_addresses",
                    "remote_address",
                    "hostname",
                    "broadcast_address",
                    "tcp_port",
                    "http_port",
                    "version",
                    "topics",
                    "out_of_date",
                ]
            ),
        )

    def test_node(self) -> None:
        """/api/nodes/:node gives that node's topics and totals."""
        code, doc, _ = self.admin.call("GET", "/api/nodes/" + NSQD_A)
        self.assertEqual(code, 200)
        self.assertEqual(
            (doc["node"], doc["total_messages"], doc["total_clients"]), (NSQD_A, 100, 1)
        )

    def test_node_not_found(self) -> None:
        """An unknown node is 404 NODE_NOT_FOUND."""
        code, doc, _ = self.admin.call("GET", "/api/nodes/127.0.0.1:9")
        self.assertEqual((code, doc), (404, {"message": "NODE_NOT_FOUND"}))

    def test_counter(self) -> None:
        """/api/counter keys message counts by topic:channel:node."""
        code, doc, _ = self.admin.call("GET", "/api/counter")
        self.assertEqual(code, 200)
        self.assertEqual(
            doc["stats"]["orders:billing:" + NSQD_B],
            {
                "node": NSQD_B,
                "topic_name": "orders",
                "channel_name": "billing",
                "message_count": 200,
            },
        )

    def test_node_down_warns(self) -> None:
        """One nsqd down: the answer comes from the other, with a WARNING naming it."""
        del self.fake.answers["http://%s/stats" % NSQD_B]
        code, doc, _ = self.admin.call("GET", "/api/topics/orders")
        self.assertEqual((code, doc["depth"]), (200, 5))
        self.assertTrue(doc["message"].startswith("WARNING: GET http://%s/stats" % NSQD_B))

    def test_all_down_502(self) -> None:
        """No lookupd answering is 502 UPSTREAM_ERROR."""
        del self.fake.answers["http://%s/topics" % LOOKUPD]
        code, doc, _ = self.admin.call("GET", "/api/topics")
        self.assertEqual(code, 502)
        self.assertTrue(doc["message"].startswith("UPSTREAM_ERROR: failed to query any nsqlookupd"))

    def test_every_nsqd_down_502(self) -> None:
        """No nsqd answering for its stats is 502 UPSTREAM_ERROR, as Go's."""
        del self.fake.answers["http://%s/stats" % NSQD_A]
        del self.fake.answers["http://%s/stats" % NSQD_B]
        code, doc, _ = self.admin.call("GET", "/api/topics/orders/billing")
        self.assertEqual(code, 502)
        self.assertTrue(doc["message"].startswith("UPSTREAM_ERROR: failed to query any nsqd: "))

    def test_unknown_route(self) -> None:
        """An unknown path is Go's 404 NOT_FOUND, a wrong method 405."""
        self.assertEqual(self.admin.call("GET", "/api/nope")[:2], (404, {"message": "NOT_FOUND"}))
        self.assertEqual(
            self.admin.call("PUT", "/api/topics")[:2], (405, {"message": "METHOD_NOT_ALLOWED"})
        )


class APIActionTests(SynchronousTestCase):
    """Tests for the POST and DELETE /api/* routes."""

    def setUp(self) -> None:
        self.fake = FakeCluster().standard()
        self.admin = AdminHarness(
            self.fake, admin_users=["alice"], notification_http_endpoint="http://127.0.0.1:7/notify"
        )
        self.alice = {"X-Forwarded-User": "alice", "User-Agent": "test-agent"}

    def test_pause_channel(self) -> None:
        """Pausing a channel POSTs channel/pause to every nsqd of the topic."""
        code, doc, _ = self.admin.call(
            "POST", "/api/topics/orders/billing", {"action": "pause"}, self.alice
        )
        self.assertEqual((code, doc), (200, {"message": ""}))
        self.assertEqual(
            sorted(self.fake.posted()),
            ["http://%s/channel/pause?topic=orders&channel=billing" % a for a in (NSQD_A, NSQD_B)],
        )

    def test_notification(self) -> None:
        """An action POSTs Go's AdminAction JSON to the notification endpoint."""
        self.admin.call("POST", "/api/topics/orders/billing", {"action": "unpause"}, self.alice)
        [(method, url, body)] = self.admin.notifications.requests
        self.assertEqual((method, url), ("POST", "http://127.0.0.1:7/notify"))
        doc = json.loads(body or b"")
        self.assertEqual(
            list(doc),
            [
                "action",
                "topic",
                "channel",
                "timestamp",
                "user",
                "remote_ip",
                "user_agent",
                "url",
                "via",
            ],
        )
        self.assertEqual(doc["action"], "unpause_channel")
        self.assertEqual(
            (doc["topic"], doc["channel"], doc["user"]), ("orders", "billing", "alice")
        )
        self.assertEqual(doc["timestamp"], 1795600100)
        self.assertEqual(doc["user_agent"], "test-agent")
        self.assertEqual(doc["url"], "http://nsqadmin.local/api/topics/orders/billing")
        self.assertEqual(doc["via"], "admin-host")

    def test_forbidden(self) -> None:
        """A user not in --admin-user gets 403 FORBIDDEN and nothing is sent."""
        for headers in ({}, {"X-Forwarded-User": "mallory"}):
            code, doc, _ = self.admin.call(
                "POST", "/api/topics/orders", {"action": "pause"}, headers
            )
            self.assertEqual((code, doc), (403, {"message": "FORBIDDEN"}))
            code, _, _ = self.admin.call("DELETE", "/api/topics/orders", None, headers)
            self.assertEqual(code, 403)
        self.assertEqual(self.fake.posted(), [])
        self.assertEqual(self.admin.notifications.requests, [])

    def test_invalid_action(self) -> None:
        """An unknown action is 400 INVALID_ACTION; a body that is not JSON is 400."""
        code, doc, _ = self.admin.call(
            "POST", "/api/topics/orders", {"action": "explode"}, self.alice
        )
        self.assertEqual((code, doc), (400, {"message": "INVALID_ACTION"}))
        code, _, _ = self.admin.call("POST", "/api/topics/orders", b"{not json", self.alice)
        self.assertEqual(code, 400)

    def test_create(self) -> None:
        """Creating a topic and channel tells the lookupd and the topic's nsqds."""
        code, doc, _ = self.admin.call(
            "POST", "/api/topics", {"topic": "orders", "channel": "audit"}, self.alice
        )
        self.assertEqual((code, doc), (200, {"message": ""}))
        posted = self.fake.posted()
        self.assertIn("http://%s/topic/create?topic=orders" % LOOKUPD, posted)
        self.assertIn("http://%s/channel/create?topic=orders&channel=audit" % LOOKUPD, posted)
        self.assertIn("http://%s/channel/create?topic=orders&channel=audit" % NSQD_B, posted)
        actions = [json.loads(b or b"")["action"] for _, _, b in self.admin.notifications.requests]
        self.assertEqual(actions, ["create_topic", "create_channel"])

    def test_create_invalid(self) -> None:
        """Bad names are 400 INVALID_TOPIC and INVALID_CHANNEL."""
        code, doc, _ = self.admin.call("POST", "/api/topics", {"topic": "<script>"}, self.alice)
        self.assertEqual((code, doc), (400, {"message": "INVALID_TOPIC"}))
        code, doc, _ = self.admin.call(
            "POST", "/api/topics", {"topic": "ok", "channel": "a b"}, self.alice
        )
        self.assertEqual((code, doc), (400, {"message": "INVALID_CHANNEL"}))

    def test_delete_channel(self) -> None:
        """Deleting a channel tells the lookupd and every nsqd of the topic."""
        code, _, _ = self.admin.call("DELETE", "/api/topics/orders/billing", None, self.alice)
        self.assertEqual(code, 200)
        self.assertEqual(
            sorted(self.fake.posted()),
            sorted(
                "http://%s/channel/delete?topic=orders&channel=billing" % a
                for a in (LOOKUPD, NSQD_A, NSQD_B)
            ),
        )

    def test_tombstone(self) -> None:
        """Tombstoning a producer tells the lookupd, then deletes the topic on that nsqd."""
        code, _, _ = self.admin.call(
            "DELETE", "/api/nodes/" + NSQD_B, {"topic": "orders"}, self.alice
        )
        self.assertEqual(code, 200)
        self.assertEqual(
            self.fake.posted(),
            [
                "http://%s/topic/tombstone?topic=orders&node=%s" % (LOOKUPD, "127.0.0.1%3A5151"),
                "http://%s/topic/delete?topic=orders" % NSQD_B,
            ],
        )
        doc = json.loads(self.admin.notifications.requests[0][2] or b"")
        self.assertEqual((doc["action"], doc["node"]), ("tombstone_topic_producer", NSQD_B))

    def test_tombstone_bad_body(self) -> None:
        """A tombstone without a JSON body is 400 INVALID_BODY."""
        code, doc, _ = self.admin.call("DELETE", "/api/nodes/" + NSQD_B, b"", self.alice)
        self.assertEqual((code, doc), (400, {"message": "INVALID_BODY"}))

    def test_partial_failure_warns(self) -> None:
        """An nsqd refusing the action is a WARNING in the answer."""
        self.fake.answers["http://%s/channel/" % NSQD_B] = (500, b"INTERNAL_ERROR")
        code, doc, _ = self.admin.call(
            "POST", "/api/topics/orders/billing", {"action": "empty"}, self.alice
        )
        self.assertEqual(code, 200)
        self.assertIn("WARNING: POST http://%s/channel/empty" % NSQD_B, doc["message"])


class CSRFTests(SynchronousTestCase):
    """Tests for the cross-site checks of POST, PUT and DELETE."""

    def setUp(self) -> None:
        self.fake = FakeCluster().standard()
        self.admin = AdminHarness(self.fake)
        self.ui = {
            "Origin": "http://nsqadmin.local",
            "Sec-Fetch-Site": "same-origin",
            "X-Requested-With": "nsqadmin",
        }

    def test_ui_request_acts(self) -> None:
        """The UI's own request (same origin, X-Requested-With) acts."""
        code, doc, _ = self.admin.call("POST", "/api/topics/orders", {"action": "pause"}, self.ui)
        self.assertEqual((code, doc), (200, {"message": ""}))
        self.assertEqual(len(self.fake.posted()), 2)

    def test_api_client_acts(self) -> None:
        """A Go-compatible API client (no browser headers) acts without X-Requested-With."""
        code, _, _ = self.admin.call("POST", "/api/topics", {"topic": "fresh"})
        self.assertEqual(code, 200)
        code, _, _ = self.admin.call("DELETE", "/api/topics/orders/billing")
        self.assertEqual(code, 200)

    def test_cross_site_form_refused(self) -> None:
        """Another site's form POST is refused 403 CSRF_CROSS_ORIGIN and nothing is sent."""
        for headers in (
            {"Origin": "https://evil.example", "Content-Type": "text/plain"},
            {"Sec-Fetch-Site": "cross-site"},
            {"Referer": "https://evil.example/x"},
            dict(self.ui, Origin="https://evil.example"),
        ):
            code, doc, raw = self.admin.call(
                "POST", "/api/topics/orders", {"action": "empty"}, headers
            )
            self.assertEqual((code, doc), (403, {"message": "CSRF_CROSS_ORIGIN"}), headers)
            code, doc, _ = self.admin.call("DELETE", "/api/topics/orders", None, headers)
            self.assertEqual((code, doc), (403, {"message": "CSRF_CROSS_ORIGIN"}))
        self.assertEqual(self.fake.posted(), [])

    def test_browser_without_header_refused(self) -> None:
        """A same-origin browser request without X-Requested-With is 403 CSRF_HEADER_REQUIRED."""
        headers = {"Origin": "http://nsqadmin.local", "Sec-Fetch-Site": "same-origin"}
        code, doc, _ = self.admin.call("POST", "/api/topics", {"topic": "t"}, headers)
        self.assertEqual((code, doc), (403, {"message": "CSRF_HEADER_REQUIRED"}))
        self.assertEqual(self.fake.posted(), [])

    def test_behind_proxy(self) -> None:
        """Behind a proxy the browser's Origin may match X-Forwarded-Host instead of Host."""
        headers = {
            "Origin": "https://nsq.example.com",
            "X-Forwarded-Host": "nsq.example.com",
            "X-Requested-With": "nsqadmin",
        }
        code, _, _ = self.admin.call("POST", "/api/topics", {"topic": "t"}, headers)
        self.assertEqual(code, 200)
        del headers["X-Forwarded-Host"]
        code, doc, _ = self.admin.call("POST", "/api/topics", {"topic": "t"}, headers)
        self.assertEqual((code, doc), (403, {"message": "CSRF_CROSS_ORIGIN"}))

    def test_before_acl(self) -> None:
        """A forged request is refused before the ACL is consulted, so it reveals nothing."""
        admin = AdminHarness(self.fake, admin_users=["alice"])
        headers = {"Origin": "https://evil.example", "X-Forwarded-User": "alice"}
        code, doc, _ = admin.call("POST", "/api/topics", {"topic": "t"}, headers)
        self.assertEqual((code, doc), (403, {"message": "CSRF_CROSS_ORIGIN"}))

    def test_reads_unchecked(self) -> None:
        """GET requests are answered whatever their origin."""
        code, _, _ = self.admin.call("GET", "/api/topics", None, {"Origin": "https://evil.example"})
        self.assertEqual(code, 200)


class BasePathTests(SynchronousTestCase):
    """Tests for --base-path."""

    def setUp(self) -> None:
        self.fake = FakeCluster().standard()
        self.admin = AdminHarness(self.fake, base_path="/nsq/admin/")

    def test_api_under_prefix(self) -> None:
        """Every route is served under the base path, and nowhere else."""
        code, doc, _ = self.admin.call("GET", "/nsq/admin/api/topics")
        self.assertEqual((code, doc["topics"]), (200, ["orders"]))
        self.assertEqual(self.admin.call("GET", "/nsq/admin/ping")[::2], (200, b"OK"))
        for outside in ("/api/topics", "/ping", "/nsq/api/topics", "/nsq/adminx/ping", "/"):
            self.assertEqual(
                self.admin.call("GET", outside)[:2], (404, {"message": "NOT_FOUND"}), outside
            )

    def test_index_and_static(self) -> None:
        """The base path itself (with or without a slash) is the index; assets are under it."""
        for path in ("/nsq/admin", "/nsq/admin/"):
            code, _, raw = self.admin.call("GET", path)
            self.assertEqual(code, 200)
            self.assertIn(b'href="/nsq/admin/static/nsqadmin.css"', raw)
            self.assertIn(b'src="/nsq/admin/static/nsqadmin.js"', raw)
        self.assertEqual(self.admin.call("GET", "/nsq/admin/static/nsqadmin.js")[0], 200)
        self.assertEqual(self.admin.call("GET", "/static/nsqadmin.js")[0], 404)

    def test_links_under_prefix(self) -> None:
        """Every link, action URL and form of a page is under the base path."""
        admin = AdminHarness(self.fake, base_path="/nsq", admin_users=[])
        _, _, raw = admin.call("GET", "/nsq/topics/orders")
        html = raw.decode("utf-8")
        self.assertIn('data-url="/nsq/api/topics/orders"', html)
        self.assertIn('href="/nsq/topics/orders/billing"', html)
        self.assertIn('href="/nsq/nodes"', html)
        self.assertIn('href="/nsq/"', html)
        _, _, raw = admin.call("GET", "/nsq/lookup")
        self.assertIn('data-url="/nsq/api/topics"', raw.decode("utf-8"))
        for link in ('href="/topics', 'href="/nodes', 'data-url="/api'):
            self.assertNotIn(link, html)

    def test_error_page_under_prefix(self) -> None:
        """An error page links back under the base path."""
        code, _, raw = self.admin.call("GET", "/nsq/admin/topics/nobody-knows")
        self.assertEqual(code, 404)
        self.assertIn(b'href="/nsq/admin/topics"', raw)

    def test_redirect_keeps_prefix(self) -> None:
        """httprouter's trailing-slash redirect points under the base path."""
        stub = self.admin.stub
        d = stub.request("GET", "http://nsqadmin.local/nsq/admin/topics/", allow_redirects=False)
        stub.flush()
        response = self.successResultOf(d)
        self.assertEqual(response.code, 301)
        self.assertEqual(response.headers.getRawHeaders(b"location"), [b"/nsq/admin/topics"])

    def test_actions_under_prefix(self) -> None:
        """Actions are served under the base path too."""
        code, _, _ = self.admin.call("POST", "/nsq/admin/api/topics/orders", {"action": "pause"})
        self.assertEqual(code, 200)
        self.assertEqual(self.admin.call("POST", "/api/topics/orders", {"action": "pause"})[0], 404)


class ConfigTests(SynchronousTestCase):
    """Tests for GET and PUT /config/:opt."""

    def setUp(self) -> None:
        self.fake = FakeCluster().standard()
        self.admin = AdminHarness(self.fake)

    def test_get(self) -> None:
        """GET answers an option by Go's config name, typed as Go types it (strings as text, as RespondV1)."""
        cases = {
            "nsqlookupd_http_addresses": [LOOKUPD],
            "nsqd_http_addresses": [],
            "http_client_connect_timeout": 2000000000,
            "log_level": 2,
            "base_path": "/",
            "allow_config_from_cidr": "127.0.0.1/8",
            "proxy_graphite": False,
            "admin_users": [],
            "statsd_prefix": "nsq.%s",
        }
        for name, value in cases.items():
            code, _, raw = self.admin.call("GET", "/config/" + name)
            got = raw.decode("utf-8") if isinstance(value, str) else json.loads(raw)
            self.assertEqual((code, got), (200, value), name)
        for unknown in ("nope", "version", "config", "verbose", "lookupd_http_address"):
            self.assertEqual(
                self.admin.call("GET", "/config/" + unknown)[:2],
                (400, {"message": "INVALID_OPTION"}),
            )

    def test_put_lookupds(self) -> None:
        """PUT nsqlookupd_http_addresses changes the lookupds every later question asks."""
        other = "127.0.0.1:9161"
        code, _, raw = self.admin.call("PUT", "/config/nsqlookupd_http_addresses", [other])
        self.assertEqual((code, json.loads(raw)), (200, [other]))
        self.fake.requests.clear()
        self.admin.call("GET", "/api/topics")
        self.assertEqual([url for _, url, _ in self.fake.requests], ["http://%s/topics" % other])
        self.fake.requests.clear()
        self.admin.call("POST", "/api/topics", {"topic": "fresh"})
        self.assertIn("http://%s/topic/create?topic=fresh" % other, self.fake.posted())

    def test_put_log_level(self) -> None:
        """PUT log_level takes a level name in any case and answers Go's number."""
        code, _, raw = self.admin.call("PUT", "/config/log_level", b"WARN")
        self.assertEqual((code, json.loads(raw)), (200, 3))
        self.assertEqual(self.admin.options.log_level, "warn")
        self.admin.call("PUT", "/config/log_level", b"info")

    def test_put_refused(self) -> None:
        """Bad values are 400 INVALID_VALUE, an empty body 413, other options 400 INVALID_OPTION."""
        cases = [
            ("log_level", b"loud", 400, "INVALID_VALUE"),
            ("nsqlookupd_http_addresses", b'"a:1"', 400, "INVALID_VALUE"),
            ("nsqlookupd_http_addresses", b"", 413, "INVALID_VALUE"),
            ("nsqlookupd_http_addresses", b"[" + b" " * (1024 * 1024) + b"]", 413, "INVALID_VALUE"),
            ("base_path", b"/x", 400, "INVALID_OPTION"),
        ]
        for name, body, code, text in cases:
            got = self.admin.call("PUT", "/config/" + name, body)[:2]
            self.assertEqual(got, (code, {"message": text}), name)
        self.assertEqual(self.admin.options.nsqlookupd_http_addresses, [LOOKUPD])

    def test_cidr(self) -> None:
        """Clients outside --allow-config-from-cidr get 403 FORBIDDEN; an empty CIDR allows all."""
        outside = AdminHarness(self.fake, allow_config_from_cidr="10.0.0.0/8")
        self.assertEqual(
            outside.call("GET", "/config/log_level")[:2], (403, {"message": "FORBIDDEN"})
        )
        self.assertEqual(
            outside.call("PUT", "/config/log_level", b"debug")[:2], (403, {"message": "FORBIDDEN"})
        )
        self.assertEqual(outside.options.log_level, "info")
        anyone = AdminHarness(self.fake, allow_config_from_cidr="")
        self.assertEqual(anyone.call("GET", "/config/log_level")[0], 200)

    def test_config_allowed(self) -> None:
        """config_allowed matches IPv4, IPv4-mapped IPv6 and IPv6, and refuses a non-IP peer."""
        from txnsq.nsqadmin.config import config_allowed
        from txnsq.protocol.http_params import APIError

        config_allowed("127.0.0.1/8", "127.9.9.9")
        config_allowed("127.0.0.1/8", "::ffff:127.0.0.1")
        config_allowed("::1/128", "::1")
        for cidr, host, code in (
            ("127.0.0.1/8", "10.0.0.1", 403),
            ("127.0.0.1/8", "::1", 403),
            ("127.0.0.1/8", None, 400),
            ("127.0.0.1/8", "/tmp/sock", 400),
        ):
            with self.assertRaises(APIError) as caught:
                config_allowed(cidr, host)
            self.assertEqual(caught.exception.code, code)

    def test_put_from_browser_checked(self) -> None:
        """PUT /config is a state-changing request: another site's is refused."""
        code, doc, _ = self.admin.call(
            "PUT", "/config/log_level", b"debug", {"Origin": "https://evil.example"}
        )
        self.assertEqual((code, doc), (403, {"message": "CSRF_CROSS_ORIGIN"}))
