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

from tests.interop.harness import REQUIREMENTS, ScriptResult, run_script


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
