"""Tests for txnsq.nsqlookupd.core: the state both nsqlookupd adapters share."""

from twisted.internet.task import Clock
from twisted.trial.unittest import SynchronousTestCase

from txnsq.version import NSQ_VERSION
from txnsq.nsqlookupd.core import NSQLookupd
from txnsq.nsqlookupd.options import NSQLookupdOptions
from txnsq.nsqlookupd.registration_db import CLIENT, Registration
from txnsq.protocol.lookup_v1 import PeerInfo


class NSQLookupdTests(SynchronousTestCase):
    def setUp(self) -> None:
        self.clock = Clock()
        self.options = NSQLookupdOptions(inactive_producer_timeout=10.0, tombstone_lifetime=5.0)
        self.lookupd = NSQLookupd(self.options, self.clock)

    def test_defaults(self) -> None:
        """No ports until listening; the package version."""
        self.assertEqual((self.lookupd.tcp_port, self.lookupd.http_port), (0, 0))
        self.assertEqual(self.lookupd.version, NSQ_VERSION)

    def test_now(self) -> None:
        """Time is the clock's."""
        self.clock.advance(12.5)
        self.assertEqual(self.lookupd.now(), 12.5)

    def test_active_uses_options_and_clock(self) -> None:
        """A producer silent past the inactivity timeout, or tombstoned within the lifetime, is not active."""
        registration = Registration(CLIENT, "", "")
        quiet = PeerInfo("a:1", last_update=0.0)
        talking = PeerInfo("b:1", last_update=0.0)
        self.lookupd.db.add_producer(registration, quiet)
        self.lookupd.db.add_producer(registration, talking)
        producers = self.lookupd.db.find_producers(CLIENT, "", "")
        self.assertEqual(len(self.lookupd.active(producers)), 2)
        self.clock.advance(11)
        talking.last_update = self.clock.seconds()
        self.assertEqual([p.peer for p in self.lookupd.active(producers)], [talking])
        producer = self.lookupd.db.producer(registration, "b:1")
        assert producer is not None
        producer.tombstone(self.lookupd.now())
        self.assertEqual(self.lookupd.active(producers), [])
        self.clock.advance(5)
        talking.last_update = self.clock.seconds()
        self.assertEqual([p.peer for p in self.lookupd.active(producers)], [talking])
