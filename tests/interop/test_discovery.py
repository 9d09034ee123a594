"""
Discovery with a real client: a pynsq Reader configured with nsqlookupd
HTTP addresses only finds two txnsq nsqd through two txnsq nsqlookupd and
consumes from both.  Everything runs on 127.0.0.1 (the nsqd broadcast
127.0.0.1, so the Reader connects over loopback).
"""

from __future__ import annotations

from typing import Any, Generator, List

import treq
from twisted.internet.defer import inlineCallbacks
from twisted.internet.task import deferLater
from twisted.trial.unittest import TestCase
from twisted.web.client import HTTPConnectionPool

from tests.interop.harness import REQUIREMENTS, ScriptResult, run_script
from txnsq.testing import RunningNSQD, start_nsqd, start_nsqlookupd

#: How long the lookupds may take to list both nsqd for the topic.
REGISTRATION_TIMEOUT = 10.0


class PynsqDiscoveryTests(TestCase):
    """Two nsqlookupd, two nsqd registered with both, one pynsq Reader."""

    timeout = 90

    @inlineCallbacks
    def setUp(self) -> Generator[Any, Any, None]:
        from twisted.internet import reactor

        self.reactor = reactor
        # No kept connections: nothing may stay open after the test.
        self.pool = HTTPConnectionPool(reactor, persistent=False)
        self.lookupds = []
        for _ in range(2):
            lookupd = yield start_nsqlookupd()
            self.addCleanup(lookupd.stop)
            self.lookupds.append(lookupd)
        flags = ["--broadcast-address=127.0.0.1"] + [
            "--lookupd-tcp-address=" + lookupd.tcp_address for lookupd in self.lookupds
        ]
        self.nsqds: List[RunningNSQD] = []
        for _ in range(2):
            nsqd = yield start_nsqd(args=flags)
            self.addCleanup(nsqd.stop)
            self.nsqds.append(nsqd)

    @inlineCallbacks
    def publish(self, nsqd: RunningNSQD, topic: str, bodies: List[str]) -> Generator[Any, Any, None]:
        """Publish ``bodies`` to ``nsqd`` over its HTTP API."""
        response = yield treq.post(
            "http://%s/mpub?topic=%s" % (nsqd.http_address, topic),
            data="\n".join(bodies).encode("utf-8"),
            pool=self.pool,
        )
        self.assertEqual(response.code, 200, (yield response.text()))

    @inlineCallbacks
    def wait_for_producers(self, topic: str, count: int) -> Generator[Any, Any, None]:
        """Until every lookupd lists ``count`` producers for ``topic``."""
        deadline = self.reactor.seconds() + REGISTRATION_TIMEOUT
        while True:
            listed = []
            for lookupd in self.lookupds:
                response = yield treq.get(
                    "http://%s/lookup?topic=%s" % (lookupd.http_address, topic), pool=self.pool
                )
                document = yield response.json() if response.code == 200 else {"producers": []}
                listed.append(len(document["producers"]))
            if listed == [count] * len(self.lookupds):
                return
            if self.reactor.seconds() > deadline:
                self.fail("producers listed by the lookupds: %r" % (listed,))
            yield deferLater(self.reactor, 0.05, lambda: None)

    @inlineCallbacks
    def test_reader_finds_both_nsqd(self) -> Generator[Any, Any, None]:
        """The Reader consumes what was published to each nsqd, each message once."""
        topic = "discovered"
        first = ["first-%d" % (i,) for i in range(5)]
        second = ["second-%d" % (i,) for i in range(5)]
        yield self.publish(self.nsqds[0], topic, first)
        yield self.publish(self.nsqds[1], topic, second)
        yield self.wait_for_producers(topic, 2)
        result: ScriptResult = yield run_script(
            "pynsq_lookupd.py",
            [
                ",".join(lookupd.http_address for lookupd in self.lookupds),
                topic,
                ",".join(first + second),
            ],
        )
        if result.of("import_error"):
            self.fail("pynsq cannot be imported: pip install %s" % (REQUIREMENTS["pynsq"],))
        self.assertEqual((result.code, result.of("done") != []), (0, True), result.describe())
        bodies = sorted(message["body"] for message in result.of("message"))
        self.assertEqual(bodies, sorted(first + second), result.describe())
        [connections] = result.of("connections")
        self.assertEqual(
            sorted(connections["addresses"]),
            sorted("127.0.0.1:%d" % (nsqd.tcp_port,) for nsqd in self.nsqds),
            result.describe(),
        )
