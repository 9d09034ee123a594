"""
Tests for txnsq.nsqadmin.pages, views and markup, in-process over a fake
cluster: what each page shows without JavaScript, escaping of what clients
chose, action buttons for admins only, 404 and 502 pages, a node down.
"""

from __future__ import annotations

from twisted.trial.unittest import SynchronousTestCase

from tests.nsqadmin_fakes import LOOKUPD, NSQD_A, NSQD_B, FakeCluster, client, nsqd_stats
from tests.test_nsqadmin_api import AdminHarness
from txnsq.nsqadmin.markup import Safe, el, escape

EVIL = "<script>alert(1)</script>"


class MarkupTests(SynchronousTestCase):
    """Tests for txnsq.nsqadmin.markup."""

    def test_text_escaped(self) -> None:
        """Text children and attribute values are escaped; Safe children are not."""
        html = el("a", {"href": '/x?"<>', "data_x": "'"}, EVIL, Safe("<b>ok</b>"))
        self.assertEqual(
            html,
            '<a href="/x?&quot;&lt;&gt;" data-x="&#x27;">'
            "&lt;script&gt;alert(1)&lt;/script&gt;<b>ok</b></a>",
        )

    def test_escape_idempotent_on_safe(self) -> None:
        """escape() leaves markup it produced alone."""
        once = escape("<")
        self.assertEqual(escape(once), "&lt;")


class PageTests(SynchronousTestCase):
    """Tests for the HTML pages."""

    def setUp(self) -> None:
        self.evil_client = client(
            EVIL, user_agent='<img src=x onerror="alert(2)">', hostname="<b>h</b>", tls=True
        )
        self.fake = FakeCluster().standard(clients=[self.evil_client])
        self.admin = AdminHarness(self.fake, admin_users=["alice"])

    def page(self, path: str, user: str = "") -> "tuple[int, str]":
        headers = {"X-Forwarded-User": user} if user else {}
        code, _, raw = self.admin.call("GET", path, headers=headers)
        return code, raw.decode("utf-8")

    def test_topics_page(self) -> None:
        """The topics page lists each topic with its summed depth and counts."""
        code, html = self.page("/")
        self.assertEqual(code, 200)
        self.assertIn('<tr data-topic="orders">', html)
        # The fake nsqds' topics and channels each hold 5 and 7.
        self.assertIn('<td class="num depth">24</td>', html)
        self.assertIn('<main id="content">', html)

    def test_pages_not_framable(self) -> None:
        """Every page, an error page too, forbids framing by another site."""
        for path in ("/", "/topics/orders/billing", "/topics/nobody"):
            d = self.admin.stub.request("GET", "http://nsqadmin.local" + path)
            self.admin.stub.flush()
            headers = self.successResultOf(d).headers
            self.assertEqual(headers.getRawHeaders(b"x-frame-options"), [b"DENY"], path)
            self.assertEqual(
                headers.getRawHeaders(b"content-security-policy"), [b"frame-ancestors 'none'"]
            )

    def test_script_sends_csrf_header(self) -> None:
        """The page script sends X-Requested-With with every action."""
        _, _, raw = self.admin.call("GET", "/static/nsqadmin.js")
        self.assertIn(b'"X-Requested-With": "nsqadmin"', raw)

    def test_rate_after_two_samples(self) -> None:
        """The message rate shows once two samples are a few seconds apart."""
        self.page("/topics")
        self.fake.answers["http://%s/stats" % NSQD_A] = nsqd_stats(5, 120)
        self.admin.clock.advance(2)
        _, html = self.page("/topics")
        self.assertIn('<td class="num rate">10.0/s</td>', html)
        self.assertIn("<svg", html)

    def test_channel_page_escapes_clients(self) -> None:
        """Client ids, hostnames and user agents are escaped on the channel page."""
        code, html = self.page("/topics/orders/billing", "alice")
        self.assertEqual(code, 200)
        self.assertNotIn("<script>alert", html)
        self.assertNotIn("<img src=x", html)
        self.assertIn("&lt;script&gt;alert(1)&lt;/script&gt;", html)
        self.assertIn("&lt;img src=x onerror=&quot;alert(2)&quot;&gt;", html)
        self.assertIn("&lt;b&gt;h&lt;/b&gt;", html)
        self.assertIn(">TLS<", html)
        self.assertIn(">snappy<", html)

    def test_admin_sees_actions(self) -> None:
        """An admin gets pause, empty and delete buttons with a confirmation text."""
        _, html = self.page("/topics/orders/billing", "alice")
        self.assertIn('data-url="/api/topics/orders/billing"', html)
        self.assertIn('data-confirm="Pause channel billing?"', html)
        _, html = self.page("/topics/orders", "alice")
        self.assertIn('data-method="DELETE" data-url="/api/nodes/127.0.0.1%3A4151"', html)

    def test_retention_section(self) -> None:
        """A retained topic's page shows each node's partitions and, to an admin, a rewind form."""
        _, html = self.page("/topics/orders", "alice")
        self.assertNotIn("<h2>Retention</h2>", html)
        stats = nsqd_stats(5, 100)
        stats["topics"][0]["retention"] = {
            "bytes_limit": 1000000,
            "age_ms": 3600000,
            "log_bytes": 4321,
            "partitions": [{"partition": 0, "first_offset": 0, "next_offset": 4321, "bytes": 4321, "segments": 2}],
        }
        self.fake.answers["http://%s/stats" % NSQD_A] = stats
        _, html = self.page("/topics/orders", "alice")
        self.assertIn("<h2>Retention</h2>", html)
        self.assertIn('<td class="num log-bytes">4,321</td>', html)
        self.assertIn('<form class="rewind" data-url="/api/topics/orders">', html)
        self.assertIn("<option>billing</option>", html)
        _, html = self.page("/topics/orders", "mallory")
        self.assertIn("<h2>Retention</h2>", html)
        self.assertNotIn("<form", html)

    def test_reader_sees_no_actions(self) -> None:
        """Someone not in --admin-user sees no action button or create form."""
        for path in ("/topics/orders", "/topics/orders/billing", "/lookup"):
            _, html = self.page(path, "mallory")
            self.assertNotIn("<button", html)
            self.assertNotIn("<form", html)

    def test_unknown_topic_404(self) -> None:
        """A topic nobody knows, or an impossible name, is a 404 page with the name escaped."""
        code, html = self.page("/topics/nope")
        self.assertEqual(code, 404)
        self.assertIn("Topic not found", html)
        code, html = self.page("/topics/%3Cscript%3Ealert(1)%3C%2Fscript%3E")
        self.assertEqual(code, 404)
        self.assertNotIn("<script>alert", html)
        self.assertIn("&lt;script&gt;", html)

    def test_unknown_channel_404(self) -> None:
        """A channel neither the nsqds nor the lookupd know is a 404 page."""
        code, html = self.page("/topics/orders/nope")
        self.assertEqual(code, 404)
        self.assertIn("Channel not found", html)

    def test_lookupd_only_channel(self) -> None:
        """A channel only the lookupd knows (created there) has a page."""
        self.fake.answers["http://%s/channels?topic=orders" % LOOKUPD] = {
            "channels": ["billing", "fresh"]
        }
        code, html = self.page("/topics/orders/fresh")
        self.assertEqual(code, 200)
        self.assertIn("No clients connected.", html)

    def test_node_down_row(self) -> None:
        """An nsqd that does not answer shows as an error row on the topic page."""
        del self.fake.answers["http://%s/stats" % NSQD_B]
        code, html = self.page("/topics/orders")
        self.assertEqual(code, 200)
        self.assertIn('<tr class="error" data-node="%s">' % NSQD_B, html)
        self.assertIn("Some nodes did not answer", html)

    def test_every_node_down(self) -> None:
        """A lookupd that does not answer is a 502 page, not a traceback."""
        self.fake.answers = {}
        code, html = self.page("/topics")
        self.assertEqual(code, 502)
        self.assertIn("failed to query any nsqlookupd", html)

    def test_nodes_and_lookup_pages(self) -> None:
        """The nodes page lists both nsqds; the lookup page the topic's channels."""
        code, html = self.page("/nodes")
        self.assertEqual(code, 200)
        self.assertIn('data-node="%s"' % NSQD_A, html)
        self.assertIn('data-node="%s"' % NSQD_B, html)
        code, html = self.page("/lookup", "alice")
        self.assertEqual(code, 200)
        self.assertIn('href="/topics/orders/billing"', html)
        self.assertIn('<form class="create"', html)

    def test_node_page(self) -> None:
        """A node page lists its topics; an unknown node is 404."""
        self.assertEqual(self.page("/nodes/" + NSQD_A)[0], 200)
        self.assertEqual(self.page("/nodes/127.0.0.1:9")[0], 404)

    def test_counter_page(self) -> None:
        """The counter page sums every channel's messages."""
        _, html = self.page("/counter")
        self.assertIn('<p class="counter" id="counter">300</p>', html)

    def test_static_assets(self) -> None:
        """The script and stylesheet are served with their types; other names are 404."""
        code, _, raw = self.admin.call("GET", "/static/nsqadmin.js")
        self.assertEqual(code, 200)
        self.assertIn(b"window.confirm", raw)
        self.assertEqual(self.admin.call("GET", "/static/../options.py")[0], 404)
        self.assertEqual(self.admin.call("GET", "/static/nope.js")[0], 404)

    def test_bad_bytes_in_path(self) -> None:
        """A path that is not UTF-8 gets Klein's plain 400, not a traceback."""
        code, html = self.page("/topics/%FF%FE")
        self.assertEqual(code, 400)
        self.assertNotIn("Traceback", html)
        self.assertEqual(len(self.flushLoggedErrors(UnicodeDecodeError)), 1)


class MirrorMarkingTests(SynchronousTestCase):
    """The topic page marks each nsqd's role for a mirrored topic."""

    def test_roles_and_lag(self) -> None:
        """Primary and standby (with its copies) are marked; a lagging peer is a warning."""
        fake = FakeCluster().standard()
        primary = nsqd_stats(5, 100)
        primary["topics"][0]["mirror"] = {
            "role": "primary", "standby_messages": 0, "peers": ["b"], "ack": "async",
            "lag_bytes": 5 << 20,
        }
        standby = nsqd_stats(0, 0)
        standby["topics"][0]["mirror"] = {
            "role": "standby", "standby_messages": 42, "peers": ["a"], "ack": "async", "lag_bytes": 0,
        }
        fake.answers["http://%s/stats" % NSQD_A] = primary
        fake.answers["http://%s/stats" % NSQD_B] = standby
        admin = AdminHarness(fake)
        code, _, raw = admin.call("GET", "/topics/orders")
        html = raw.decode("utf-8")
        self.assertEqual(code, 200)
        self.assertIn("mirror: primary</span>", html)
        self.assertIn("mirror: standby (42 copies)</span>", html)
        self.assertIn("standby lags 5242880 bytes", html)

    def test_unmirrored_unmarked(self) -> None:
        """A topic without the field has no marking."""
        admin = AdminHarness(FakeCluster().standard())
        _, _, raw = admin.call("GET", "/topics/orders")
        self.assertNotIn(b"mirror:", raw)
