"""
nsqadmin in headless Chromium over a real txnsq cluster: a published topic
is listed, depths update live without a reload, a channel paused from the
UI is paused on nsqd, a reader sees no action and a forged POST gets 403,
another site's form cannot act for an admin (CSRF), the UI works whole
under a ``--base-path``, and names chosen by clients are shown as text.

Each test starts nsqlookupd, nsqd and nsqadmin processes on 127.0.0.1
(:mod:`tests_browser.cluster`) and drives the browser from a thread with
Playwright's sync API (the reactor keeps reading the daemons' output); every
wait is Playwright's, with a timeout.  Screenshots of the topics and
channel pages go to ``_trial_temp/screenshots/``.
"""

from __future__ import annotations

import importlib.util
import json
import os
from typing import Any, Callable, Dict, Optional

from twisted.internet.threads import deferToThread
from twisted.trial.unittest import TestCase

from tests_browser.cluster import Cluster, V2Consumer, http

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]

#: Milliseconds any one browser wait may take.
WAIT_MS = 20000

ADMIN = "admin"


def screenshot_path(name: str) -> str:
    """Where a screenshot goes: ``screenshots/`` in trial's working directory."""
    directory = os.path.abspath("screenshots")
    os.makedirs(directory, exist_ok=True)
    return os.path.join(directory, name)


class BrowserTestCase(TestCase):
    """Starts a cluster per test; runs a browser scenario in a thread."""

    #: More nsqadmin flags for this class's cluster.
    admin_args: "list[str]" = []
    #: More nsqd flags for this class's cluster.
    nsqd_args: "list[str]" = []

    def setUp(self) -> Any:
        # Missing tools fail the test (never skip it): tox -e browser
        # installs both, so their absence is a broken environment.
        if importlib.util.find_spec("playwright") is None:
            self.fail("Playwright's Python package is not installed (tox -e browser installs it)")
        if not os.path.exists(CHROMIUM):
            self.fail("%s is missing (tox -e browser installs it)" % (CHROMIUM,))
        self.cluster = Cluster(
            os.path.abspath(self.mktemp()),
            ["--admin-user=%s" % (ADMIN,)] + self.admin_args,
            notify_topic="admin_actions",
            nsqd_args=self.nsqd_args,
        )
        os.makedirs(self.cluster.data_path)
        return self.cluster.start()

    def tearDown(self) -> Any:
        return self.cluster.stop()

    def in_browser(self, scenario: Callable[[Any], None], user: Optional[str] = ADMIN) -> Any:
        """Run ``scenario(context)`` in a fresh headless Chromium, in a thread."""

        def run() -> None:
            from playwright.sync_api import sync_playwright

            with sync_playwright() as playwright:
                browser = playwright.chromium.launch(
                    executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True
                )
                try:
                    headers: Dict[str, str] = {"X-Forwarded-User": user} if user else {}
                    context = browser.new_context(
                        extra_http_headers=headers, viewport={"width": 1280, "height": 800}
                    )
                    context.set_default_timeout(WAIT_MS)
                    scenario(context)
                finally:
                    browser.close()

        return deferToThread(run)


class TopicsPageTests(BrowserTestCase):
    """The topics and topic pages."""

    def test_topic_listed_after_publish(self) -> Any:
        """A topic appears on the topics page after a publish, with its depth, and a rate once sampled."""
        cluster = self.cluster

        def scenario(context: Any) -> None:
            cluster.create_channel("orders", "billing")
            cluster.publish("orders", 3)
            cluster.publish("audit", 1)
            page = context.new_page()
            response = page.goto(cluster.admin_url + "/topics")
            assert response.status == 200
            # nsqd registers with nsqlookupd asynchronously: the live refresh shows it.
            page.wait_for_selector('tr[data-topic="orders"] td.depth')
            page.wait_for_function(
                "() => document.querySelector('tr[data-topic=\"orders\"] td.rate').textContent.endsWith('/s')"
            )
            page.wait_for_selector('tr[data-topic="audit"]')
            row = page.locator('tr[data-topic="orders"]')
            assert row.locator("a").inner_text() == "orders"
            # The topic's own depth (0: handed to billing) plus its channels'.
            assert row.locator("td.depth").inner_text() == "3"
            page.screenshot(path=screenshot_path("topics.png"), full_page=True)
            page.click('tr[data-topic="orders"] a')
            page.wait_for_selector('tr[data-channel="billing"] td.depth')
            assert page.locator('tr[data-channel="billing"] td.depth').inner_text() == "3"
            # Reading needs no JavaScript.
            plain = context.browser.new_context(
                java_script_enabled=False, extra_http_headers={"X-Forwarded-User": ADMIN}
            )
            try:
                still = plain.new_page()
                still.goto(cluster.admin_url + "/topics/orders/billing")
                assert still.locator("tr[data-node] td.depth").inner_text() == "3"
                still.goto(cluster.admin_url + "/topics")
                assert still.locator('tr[data-topic="orders"] td.depth').inner_text() == "3"
            finally:
                plain.close()

        return self.in_browser(scenario)

    def test_depth_updates_live(self) -> Any:
        """A channel's depth on the topic page follows new messages without a reload."""
        cluster = self.cluster

        def scenario(context: Any) -> None:
            cluster.create_channel("live", "watch")
            cluster.publish("live", 1)
            page = context.new_page()
            page.goto(cluster.admin_url + "/topics/live")
            depth = page.locator('tr[data-channel="watch"] td.depth')
            assert depth.inner_text() == "1"
            page.evaluate("() => { window.__notReloaded = true; }")
            cluster.publish("live", 5)
            page.wait_for_function(
                "() => document.querySelector('tr[data-channel=\"watch\"] td.depth').textContent === '6'"
            )
            assert page.evaluate("() => window.__notReloaded") is True

        return self.in_browser(scenario)


class ActionTests(BrowserTestCase):
    """Actions from the UI, and who may take them."""

    def test_pause_channel(self) -> Any:
        """Pausing a channel from its page (confirmed) pauses it on nsqd."""
        cluster = self.cluster

        def scenario(context: Any) -> None:
            cluster.create_channel("work", "jobs")
            cluster.publish("work", 2)
            consumer = V2Consumer(
                cluster.nsqd_tcp_port,
                "work",
                "jobs",
                {
                    "client_id": "worker-1",
                    "hostname": "worker-host",
                    "user_agent": "browser-test/1.0",
                    "feature_negotiation": True,
                },
            )
            try:
                page = context.new_page()
                dialogs = []

                def accept(dialog: Any) -> None:
                    dialogs.append(dialog.message)
                    dialog.accept()

                page.on("dialog", accept)
                page.goto(cluster.admin_url + "/topics/work/jobs")
                page.wait_for_selector("td.client-id")
                assert cluster.channel_stats("work", "jobs")["paused"] is False
                page.click("button.action:has-text('Pause')")
                page.wait_for_selector("#paused-badge")
                assert dialogs == ["Pause channel jobs?"], dialogs
                assert cluster.channel_stats("work", "jobs")["paused"] is True
                page.wait_for_selector("button.action:has-text('Unpause')")
                # Two samples a live refresh apart draw the charts.
                page.wait_for_selector(".charts svg")
                page.screenshot(path=screenshot_path("channel.png"), full_page=True)
            finally:
                consumer.close()
            # The notification went to nsqd's admin_actions topic (sent after the reply).
            page.goto(cluster.admin_url + "/topics")
            page.wait_for_selector('tr[data-topic="admin_actions"]')
            notes = V2Consumer(
                cluster.nsqd_tcp_port,
                "admin_actions",
                "check",
                {"client_id": "check", "feature_negotiation": True},
            )
            try:
                note = json.loads(notes.read_message())
            finally:
                notes.close()
            assert (note["action"], note["topic"], note["channel"], note["user"]) == (
                "pause_channel",
                "work",
                "jobs",
                ADMIN,
            ), note
            assert note["url"] == cluster.admin_url + "/api/topics/work/jobs", note
            assert note["user_agent"].startswith("Mozilla/"), note

        return self.in_browser(scenario)

    def test_create_from_lookup(self) -> Any:
        """A topic and channel created on the lookup page (confirmed) are listed by nsqlookupd."""
        cluster = self.cluster

        def scenario(context: Any) -> None:
            page = context.new_page()
            dialogs = []

            def accept(dialog: Any) -> None:
                dialogs.append(dialog.message)
                dialog.accept()

            page.on("dialog", accept)
            page.goto(cluster.admin_url + "/lookup")
            page.fill("input[name=topic]", "made_here")
            page.fill("input[name=channel]", "fresh")
            page.click("form.create button[type=submit]")
            page.wait_for_selector('a[href="/topics/made_here/fresh"]')
            assert dialogs == ["Create channel fresh of topic made_here?"], dialogs
            page.goto(cluster.admin_url + "/topics/made_here/fresh")
            page.wait_for_selector("text=No clients connected.")

        return self.in_browser(scenario)

    def test_reader_cannot_act(self) -> Any:
        """A user not in --admin-user sees no action button, and a forged POST gets 403."""
        cluster = self.cluster

        def scenario(context: Any) -> None:
            cluster.create_channel("ro", "c")
            cluster.publish("ro", 1)
            page = context.new_page()
            for path in ("/topics/ro", "/topics/ro/c", "/lookup"):
                assert page.goto(cluster.admin_url + path).status == 200
                assert page.locator("button").count() == 0, path
                assert page.locator("form").count() == 0, path
            status = page.evaluate("""async () => (await fetch('/api/topics/ro/c', {
                    method: 'POST', headers: {'Content-Type': 'application/json'},
                    body: JSON.stringify({action: 'pause'})})).status""")
            assert status == 403, status
            forged = http(
                "DELETE",
                cluster.admin_url + "/api/topics/ro",
                headers={"X-Forwarded-User": "mallory"},
            )
            assert forged == (403, b'{"message":"FORBIDDEN"}'), forged
            assert cluster.channel_stats("ro", "c")["paused"] is False

        return self.in_browser(scenario, user="mallory")


class CSRFTests(BrowserTestCase):
    """Another site cannot make an admin's browser act."""

    def test_cross_site_form_refused(self) -> Any:
        """A form on another origin POSTing to nsqadmin gets 403 CSRF_CROSS_ORIGIN; nothing is paused."""
        cluster = self.cluster

        def scenario(context: Any) -> None:
            cluster.create_channel("guarded", "c")
            cluster.publish("guarded", 1)
            target = cluster.admin_url + "/api/topics/guarded/c"
            # A text/plain form is a "simple" request: no CORS preflight.
            evil = (
                '<form id="f" method="POST" enctype="text/plain" action="%s">'
                '<input name=\'{"action":"pause","x":"\' value=\'"}\'></form>'
                "<script>document.getElementById('f').submit()</script>" % (target,)
            )
            context.route(
                "http://evil.example/**",
                lambda route: route.fulfill(status=200, content_type="text/html", body=evil),
            )
            page = context.new_page()
            with page.expect_navigation(url=target) as navigation:
                page.goto("http://evil.example/attack")
            response = navigation.value
            assert response is not None and response.status == 403, response
            assert json.loads(page.locator("body").inner_text()) == {
                "message": "CSRF_CROSS_ORIGIN"
            }
            assert cluster.channel_stats("guarded", "c")["paused"] is False
            # A same-origin request without the UI's header is refused too.
            page.goto(cluster.admin_url + "/topics/guarded/c")
            status = page.evaluate("""async () => (await fetch('/api/topics/guarded/c', {
                    method: 'POST', headers: {'Content-Type': 'application/json'},
                    body: JSON.stringify({action: 'pause'})})).json()""")
            assert status == {"message": "CSRF_HEADER_REQUIRED"}, status
            assert cluster.channel_stats("guarded", "c")["paused"] is False
            # The API without a browser's headers is Go's: it acts.
            code, _ = http(
                "POST",
                target,
                json.dumps({"action": "pause"}).encode("utf-8"),
                headers={"X-Forwarded-User": ADMIN},
            )
            assert code == 200, code
            assert cluster.channel_stats("guarded", "c")["paused"] is True

        return self.in_browser(scenario)


class BasePathTests(BrowserTestCase):
    """The whole UI under --base-path, as behind a reverse proxy that keeps the prefix."""

    admin_args = ["--base-path=/nsq/admin"]

    def test_browse_and_act_under_base_path(self) -> Any:
        """Pages, assets, links, live refresh and actions all stay under the base path."""
        cluster = self.cluster
        base = cluster.admin_url + "/nsq/admin"

        def scenario(context: Any) -> None:
            cluster.create_channel("based", "c")
            cluster.publish("based", 2)
            outside = []
            context.on(
                "request",
                lambda request: outside.append(request.url)
                if request.url.startswith(cluster.admin_url)
                and not request.url.startswith(base + "/")
                and request.url != base
                else None,
            )
            page = context.new_page()
            dialogs = []

            def accept(dialog: Any) -> None:
                dialogs.append(dialog.message)
                dialog.accept()

            page.on("dialog", accept)
            assert page.goto(base).status == 200
            page.wait_for_selector('tr[data-topic="based"]')
            page.click('tr[data-topic="based"] a')
            page.wait_for_url(base + "/topics/based")
            page.click('tr[data-channel="c"] a')
            page.wait_for_url(base + "/topics/based/c")
            page.wait_for_selector("body[data-refreshed]", state="attached")
            page.click("button.action:has-text('Pause')")
            page.wait_for_selector("#paused-badge")
            assert cluster.channel_stats("based", "c")["paused"] is True
            page.click("button.action:has-text('Delete')")
            page.wait_for_url(base + "/topics/based")
            page.goto(base + "/lookup")
            page.fill("input[name=topic]", "made_under")
            page.fill("input[name=channel]", "")
            page.click("form.create button[type=submit]")
            page.wait_for_selector('a[href="/nsq/admin/topics/made_under"]')
            page.click("nav a:has-text('Nodes')")
            page.wait_for_url(base + "/nodes")
            assert page.evaluate(
                "() => getComputedStyle(document.body).fontFamily !== ''"
            ), "stylesheet"
            assert outside == [], outside
            assert dialogs[0] == "Pause channel c?", dialogs
            assert page.goto(cluster.admin_url + "/topics").status == 404

        return self.in_browser(scenario)


class EscapingTests(BrowserTestCase):
    """What clients choose is shown as text."""

    def test_script_shown_escaped(self) -> Any:
        """A <script> client id, hostname and user agent from IDENTIFY, and in a URL, are shown as text."""
        cluster = self.cluster
        evil = {
            "client_id": "<script>window.__xss=1</script>",
            "hostname": '<img src=x onerror="window.__xss=2">',
            "user_agent": '<b onmouseover="window.__xss=3">agent</b>',
            "feature_negotiation": True,
        }

        def scenario(context: Any) -> None:
            # NSQ refuses such a topic name, so it can only come in a URL.
            status, reply = http("POST", cluster.nsqd_url + "/pub?topic=%3Cscript%3E", b"x")
            assert (status, json.loads(reply)) == (400, {"message": "INVALID_TOPIC"}), (
                status,
                reply,
            )
            cluster.create_channel("xss", "c")
            consumer = V2Consumer(cluster.nsqd_tcp_port, "xss", "c", evil)
            try:
                page = context.new_page()
                page.goto(cluster.admin_url + "/topics/xss/c")
                cell = page.wait_for_selector("td.client-id")
                assert cell.inner_text() == evil["client_id"]
                assert page.locator("td.hostname").inner_text() == evil["hostname"]
                assert page.locator("td.user-agent").inner_text().endswith(evil["user_agent"])
                assert page.locator("td.hostname img, td.user-agent b").count() == 0
                page.screenshot(path=screenshot_path("channel-escaped.png"), full_page=True)
                # The live refresh swaps the content in too: it must not run it either.
                page.wait_for_selector("body[data-refreshed]", state="attached")
                assert page.evaluate("() => window.__xss") is None
                # A decoded %2F splits the path, as in Go's router: this is
                # topic "<script>window.__xss=4<" and channel "script>".
                response = page.goto(
                    cluster.admin_url + "/topics/%3Cscript%3Ewindow.__xss%3D4%3C%2Fscript%3E"
                )
                assert response.status == 404
                assert "<script>window.__xss=4<" in page.locator("p.detail").inner_text()
                response = page.goto(
                    cluster.admin_url + "/topics/%3Cimg%20src%3Dx%20onerror%3Dwindow.__xss%3D5%3E"
                )
                assert response.status == 404
                assert "<img src=x onerror=window.__xss=5>" in page.locator("p.detail").inner_text()
                assert page.locator("p.detail img").count() == 0
                assert page.evaluate("() => window.__xss") is None
            finally:
                consumer.close()

        return self.in_browser(scenario)


class RetentionPageTests(BrowserTestCase):
    """A retained topic's log and the rewind form on its page."""

    nsqd_args = ["--retain-topics=^history$", "--log-partitions=2"]

    def test_rewind_channel(self) -> Any:
        """
        The topic page shows the retained log per partition, and rewinding a
        channel to ``earliest`` from the form (confirmed) makes nsqd deliver
        every retained message to it again.
        """
        cluster = self.cluster

        def scenario(context: Any) -> None:
            cluster.create_channel("history", "replay")
            cluster.publish("history", 3)
            status, reply = http(
                "POST", "%s/channel/empty?topic=history&channel=replay" % (cluster.nsqd_url,)
            )
            assert status == 200, (status, reply)
            assert cluster.channel_stats("history", "replay")["depth"] == 0
            page = context.new_page()
            dialogs = []

            def accept(dialog: Any) -> None:
                dialogs.append(dialog.message)
                dialog.accept()

            page.on("dialog", accept)
            page.goto(cluster.admin_url + "/topics/history")
            page.wait_for_selector("table.retention td.log-bytes")
            partitions = page.locator("table.retention tbody tr").count()
            assert partitions == 2, partitions
            page.select_option("form.rewind select[name=channel]", "replay")
            page.fill("form.rewind input[name=from]", "earliest")
            page.click("form.rewind button")
            page.wait_for_function(
                "() => document.body.innerText.indexOf('rewound replay') >= 0"
            )
            assert dialogs == ["Rewind channel replay to earliest?"], dialogs
            page.screenshot(path=screenshot_path("retention.png"), full_page=True)
            consumer = V2Consumer(
                cluster.nsqd_tcp_port,
                "history",
                "replay",
                {"client_id": "replayer", "feature_negotiation": True},
            )
            try:
                bodies = sorted(consumer.read_message() for _ in range(3))
            finally:
                consumer.close()
            assert bodies == [b"message 0", b"message 1", b"message 2"], bodies

        return self.in_browser(scenario)
