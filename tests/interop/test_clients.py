"""
Real NSQ clients from PyPI against a txnsq nsqd (in process, 127.0.0.1).

Each client runs as a script in a subprocess (its own event loop) and
reports JSON events; these tests assert on them.  A client that cannot be
imported fails the test with what to install.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from twisted.internet.defer import inlineCallbacks
from twisted.trial.unittest import TestCase

from tests.interop.harness import GNSQ_UNAVAILABLE, REQUIREMENTS, ScriptResult, run_script


class ClientTestCase(TestCase):
    """Starts an nsqd for each test and runs a client script against it."""

    timeout = 90

    @inlineCallbacks
    def setUp(self) -> Any:  # type: ignore[override]
        from txnsq.testing import start_nsqd

        self.nsqd = yield start_nsqd()
        self.addCleanup(self.nsqd.stop)

    @inlineCallbacks
    def run_client(self, script: str, client: str, topic: str) -> Any:
        """Run the script; fail with the install line when the client is missing."""
        result: ScriptResult = yield run_script(script, [self.nsqd.tcp_address, topic])
        if result.of("import_error"):
            self.fail(
                "%s cannot be imported by %s (%s): install it with pip install %s "
                "(tox: add it to the deps)" % (
                    client, "this interpreter", result.of("import_error")[0]["error"], REQUIREMENTS[client]))
        self.assertEqual((result.code, result.of("done") != []), (0, True), result.describe())
        return result

    def assert_published(self, result: ScriptResult, commands: "Counter[str]") -> None:
        """Every publish was answered OK."""
        published = result.of("published")
        self.assertEqual(Counter(p["command"] for p in published), commands, result.describe())
        self.assertEqual({p["response"] for p in published}, {"OK"}, result.describe())

    def assert_requeued_once(self, result: ScriptResult) -> None:
        """req-me came twice, same id, attempts 1 then 2."""
        again = [m for m in result.of("message") if m["body"] == "req-me"]
        self.assertEqual([m["attempts"] for m in again], [1, 2], result.describe())
        self.assertEqual(again[0]["id"], again[1]["id"], result.describe())


class PynsqTests(ClientTestCase):
    """pynsq 0.9.1 (the official Tornado client)."""

    @inlineCallbacks
    def test_writer_and_reader(self) -> Any:
        """pynsq's Writer PUB/MPUB/DPUB all arrive; its Reader FINs, REQs (redelivered with attempts 2) and TOUCHes past msg_timeout."""
        result = yield self.run_client("pynsq_client.py", "pynsq", "interop_pynsq")
        self.assert_published(result, Counter({"pub": 1, "mpub": 1, "dpub": 1}))
        bodies = Counter((m["body"], m["attempts"]) for m in result.of("message"))
        self.assertEqual(bodies, Counter({
            ("pub-1", 1): 1, ("mpub-1", 1): 1, ("mpub-2", 1): 1, ("req-me", 1): 1,
            ("req-me", 2): 1, ("touch-me", 1): 1, ("dpub-1", 1): 1}), result.describe())
        self.assert_requeued_once(result)
        self.assertEqual(len(result.of("touched")), 2, result.describe())
        self.assertEqual(result.of("error"), [], result.describe())
        # The MPUB order is kept within the batch.
        order = [m["body"] for m in result.of("message") if m["body"].startswith("mpub-")]
        self.assertEqual(order, ["mpub-1", "mpub-2"])


class GnsqTests(ClientTestCase):
    """gnsq 1.0.2 (gevent)."""

    skip = GNSQ_UNAVAILABLE

    @inlineCallbacks
    def test_producer_and_consumer(self) -> Any:
        """gnsq's Producer publish/multipublish/deferred publish all arrive at its Consumer; a REQ is redelivered with attempts 2."""
        result = yield self.run_client("gnsq_client.py", "gnsq", "interop_gnsq")
        self.assert_published(result, Counter({"pub": 2, "mpub": 1, "dpub": 1}))
        bodies = Counter((m["body"], m["attempts"]) for m in result.of("message"))
        self.assertEqual(bodies, Counter({
            ("pub-1", 1): 1, ("pub-2", 1): 1, ("mpub-1", 1): 1, ("mpub-2", 1): 1,
            ("req-me", 1): 1, ("req-me", 2): 1, ("dpub-1", 1): 1}), result.describe())
        self.assert_requeued_once(result)
        self.assertEqual(result.of("error"), [], result.describe())


class UpgradeTestCase(TestCase):
    """
    Starts an nsqd with a certificate for 127.0.0.1 from a fresh CA (so it
    offers ``tls_v1``; snappy and deflate are on by default, as in Go) and
    runs an ``*_upgraded.py`` client script against it: a producer and a
    consumer that both ask for the upgrades, publish ``COUNT`` numbered
    messages and check every body received.
    """

    timeout = 30
    #: Messages each script publishes (and must consume, once each).
    COUNT = 120
    #: nsqd flags after the TLS ones (``["--snappy=false"]`` shows that the
    #: tests notice an nsqd that does not upgrade).
    nsqd_args: tuple[str, ...] = ()

    @inlineCallbacks
    def setUp(self) -> Any:  # type: ignore[override]
        from txnsq.testing import start_nsqd

        from tests.interop.tls_files import write_tls_files

        self.tls = write_tls_files(self.mktemp())
        self.nsqd = yield start_nsqd(
            ["--tls-cert=" + self.tls.server_cert, "--tls-key=" + self.tls.server_key,
             "--https-address="] + list(self.nsqd_args))
        self.addCleanup(self.nsqd.stop)

    @inlineCallbacks
    def run_upgraded(self, script: str, client: str, topic: str, flags: list[str]) -> Any:
        """Run the script; fail with the install line when the client is missing."""
        result: ScriptResult = yield run_script(
            script,
            [self.nsqd.tcp_address, self.nsqd.http_address, topic, "--count=%d" % (self.COUNT,),
             "--timeout=10"] + list(flags),
            timeout=14.0,
        )
        if result.of("import_error"):
            self.fail(
                "%s cannot be imported by %s (%s): install it with pip install %s "
                "(tox: add it to the deps)" % (
                    client, "this interpreter", result.of("import_error")[0]["error"], REQUIREMENTS[client]))
        return result

    def assert_upgraded(
        self, result: ScriptResult, tls: bool, compression: str, deflate_level: int = 0
    ) -> None:
        """
        Both connections negotiated (IDENTIFY reply), run on (client sockets)
        and, by nsqd's /stats, have exactly the upgrades asked for; every
        message was published OK and consumed once, intact.
        """
        snappy, deflate = compression == "snappy", compression == "deflate"
        details = result.describe()
        self.assertEqual(result.of("error"), [], details)
        self.assertEqual((result.code, len(result.of("done"))), (0, 1), details)
        offered = sorted(
            (e["role"], e["data"]["tls_v1"], e["data"]["snappy"], e["data"]["deflate"])
            for e in result.of("identify_response"))
        self.assertEqual(offered, [(role, tls, snappy, deflate) for role in ("reader", "writer")], details)
        if deflate:
            levels = {e["data"]["deflate_level"] for e in result.of("identify_response")}
            self.assertEqual(levels, {deflate_level}, details)
        upgraded = sorted((e["role"], e["tls"], e["snappy"], e["deflate"]) for e in result.of("upgraded"))
        self.assertEqual(upgraded, [(role, tls, snappy, deflate) for role in ("reader", "writer")], details)
        [seen_by_server] = result.of("server_clients")
        server = sorted(
            (c["role"], c["tls"], c["tls_version"], c["snappy"], c["deflate"])
            for c in seen_by_server["clients"])
        # Both clients pin PROTOCOL_TLSv1_2; /stats spells it as Go does.
        version = "TLS1.2" if tls else ""
        self.assertEqual(
            server, [(role, tls, version, snappy, deflate) for role in ("consumer", "producer")], details)
        published = result.of("published")
        self.assertEqual({p["response"] for p in published}, {"OK"}, details)
        self.assertEqual(sorted(i for p in published for i in p["indexes"]), list(range(self.COUNT)), details)
        messages = result.of("message")
        self.assertEqual(
            Counter(m["index"] for m in messages), Counter(range(self.COUNT)), details)
        self.assertEqual([m["index"] for m in messages if not m["intact"] or m["attempts"] != 1], [], details)


class PynsqUpgradeTests(UpgradeTestCase):
    """pynsq 0.9.1 (Tornado) with IDENTIFY upgrades."""

    @inlineCallbacks
    def test_tls_and_snappy(self) -> Any:
        """pynsq's Writer and Reader upgrade to TLS (verifying nsqd's certificate against the CA) then snappy; every message arrives once, intact."""
        # pynsq's SnappySocket raises a bare OSError(EAGAIN) that Tornado
        # takes as fatal when one socket read ends inside a snappy chunk,
        # which over TLS (16 KiB records) happens to chunks of incompressible
        # bodies beyond about 16 KiB, from Go's nsqd as from txnsq: keep the
        # random bodies smaller than a TLS record.
        result = yield self.run_upgraded(
            "pynsq_upgraded.py", "pynsq", "interop_pynsq_tls_snappy",
            ["--tls-ca=" + self.tls.ca_cert, "--snappy", "--incompressible-size=8000"])
        self.assert_upgraded(result, tls=True, compression="snappy")

    @inlineCallbacks
    def test_deflate(self) -> Any:
        """pynsq's Writer and Reader upgrade to deflate at their level 3 (below --max-deflate-level); 120 kB random bodies arrive intact."""
        result = yield self.run_upgraded(
            "pynsq_upgraded.py", "pynsq", "interop_pynsq_deflate", ["--deflate", "--deflate-level=3"])
        self.assert_upgraded(result, tls=False, compression="deflate", deflate_level=3)


class GnsqUpgradeTests(UpgradeTestCase):
    """gnsq 1.0.2 (gevent) with IDENTIFY upgrades (its Producer patched for wtolson/gnsq#25)."""

    skip = GNSQ_UNAVAILABLE

    @inlineCallbacks
    def test_tls_and_snappy(self) -> Any:
        """gnsq's Producer and Consumer upgrade to TLS (verifying nsqd's certificate against the CA) then snappy; 120 kB random bodies arrive intact."""
        result = yield self.run_upgraded(
            "gnsq_upgraded.py", "gnsq", "interop_gnsq_tls_snappy",
            ["--tls-ca=" + self.tls.ca_cert, "--snappy"])
        self.assert_upgraded(result, tls=True, compression="snappy")

    @inlineCallbacks
    def test_tls_and_deflate(self) -> Any:
        """gnsq asks for deflate level 9 over TLS; nsqd caps it at --max-deflate-level 6 and every message arrives once, intact."""
        result = yield self.run_upgraded(
            "gnsq_upgraded.py", "gnsq", "interop_gnsq_tls_deflate",
            ["--tls-ca=" + self.tls.ca_cert, "--deflate", "--deflate-level=9"])
        self.assert_upgraded(result, tls=True, compression="deflate", deflate_level=6)
