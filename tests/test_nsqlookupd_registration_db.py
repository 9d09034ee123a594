"""
Tests for txnsq.nsqlookupd.registration_db: registrations, producers,
wildcard finds, per-registration tombstones and the activity filter, with
time from a ``task.Clock``.
"""

from __future__ import annotations

from typing import List

from twisted.internet.task import Clock
from twisted.trial.unittest import SynchronousTestCase

from txnsq.nsqlookupd.registration_db import (
    ANY,
    CHANNEL,
    CLIENT,
    TOPIC,
    Producer,
    Registration,
    RegistrationDB,
    active,
)
from txnsq.protocol.lookup_v1 import PeerInfo

CLIENT_REG = Registration(CLIENT, "", "")


def peer(id: str, clock: Clock, http_port: int = 4151) -> PeerInfo:
    """A producer last heard from now."""
    return PeerInfo(
        id,
        remote_address=id,
        hostname="host-" + id,
        broadcast_address="127.0.0.1",
        tcp_port=4150,
        http_port=http_port,
        version="1.3.0",
        last_update=clock.seconds(),
    )


class RegistrationTests(SynchronousTestCase):
    """A Registration is a (category, key, subkey) triple matched by patterns."""

    def test_fields(self) -> None:
        """The triple's fields are named as Go's."""
        registration = Registration(CHANNEL, "t", "c")
        self.assertEqual(
            (registration.category, registration.key, registration.subkey), ("channel", "t", "c")
        )
        self.assertEqual("%s:%s:%s" % registration, "channel:t:c")

    def test_matches(self) -> None:
        """``*`` matches any key or subkey, never another category."""
        registration = Registration(CHANNEL, "t", "c")
        self.assertTrue(registration.matches(CHANNEL, "t", "c"))
        self.assertTrue(registration.matches(CHANNEL, ANY, "c"))
        self.assertTrue(registration.matches(CHANNEL, "t", ANY))
        self.assertTrue(registration.matches(CHANNEL, ANY, ANY))
        self.assertFalse(registration.matches(TOPIC, "t", ANY))
        self.assertFalse(registration.matches(CHANNEL, "u", ANY))
        self.assertFalse(registration.matches(CHANNEL, "t", "d"))


class RegistrationDBTests(SynchronousTestCase):
    """Every method of RegistrationDB."""

    def setUp(self) -> None:
        self.clock = Clock()
        self.clock.advance(1000)
        self.db = RegistrationDB()
        self.p1 = peer("127.0.0.1:5001", self.clock)
        self.p2 = peer("127.0.0.1:5002", self.clock, http_port=4251)

    def register(self, who: PeerInfo, topic: str, channel: str = "") -> None:
        """What a producer's REGISTER does: the client, topic and channel entries."""
        self.db.add_producer(CLIENT_REG, who)
        self.db.add_producer(Registration(TOPIC, topic, ""), who)
        if channel:
            self.db.add_producer(Registration(CHANNEL, topic, channel), who)

    def ids(self, producers: List[Producer]) -> List[str]:
        return [p.peer.id for p in producers]

    def test_empty(self) -> None:
        """A new database has no registrations and no producers."""
        self.assertEqual(self.db.registrations(), {})
        self.assertEqual(self.db.find_registrations(TOPIC, ANY, ""), [])
        self.assertEqual(self.db.find_producers(CLIENT, "", ""), [])
        self.assertEqual(self.db.lookup_registrations("x"), [])

    def test_add_registration(self) -> None:
        """A registration may exist without producers; adding it twice keeps one."""
        registration = Registration(TOPIC, "t", "")
        self.db.add_registration(registration)
        self.db.add_registration(registration)
        self.assertEqual(self.db.registrations(), {registration: []})
        self.assertEqual(self.db.find_registrations(TOPIC, "t", ""), [registration])
        self.assertEqual(self.db.find_producers(TOPIC, "t", ""), [])

    def test_add_registration_keeps_producers(self) -> None:
        """Adding an existing registration leaves its producers in place."""
        self.register(self.p1, "t")
        self.db.add_registration(Registration(TOPIC, "t", ""))
        self.assertEqual(self.ids(self.db.find_producers(TOPIC, "t", "")), [self.p1.id])

    def test_add_producer(self) -> None:
        """A producer is added once per registration; the second add reports False."""
        registration = Registration(TOPIC, "t", "")
        self.assertTrue(self.db.add_producer(registration, self.p1))
        self.assertFalse(self.db.add_producer(registration, self.p1))
        self.assertTrue(self.db.add_producer(registration, self.p2))
        self.assertEqual(self.ids(self.db.find_producers(TOPIC, "t", "")), [self.p1.id, self.p2.id])

    def test_add_producer_keeps_tombstone(self) -> None:
        """Registering again does not lift a tombstone (the entry is kept)."""
        registration = Registration(TOPIC, "t", "")
        self.db.add_producer(registration, self.p1)
        entry = self.db.producer(registration, self.p1.id)
        assert entry is not None
        entry.tombstone(self.clock.seconds())
        self.db.add_producer(registration, self.p1)
        self.assertIs(self.db.producer(registration, self.p1.id), entry)
        self.assertTrue(entry.tombstoned)

    def test_remove_producer(self) -> None:
        """Removing reports whether it was there and how many are left; the registration stays."""
        registration = Registration(TOPIC, "t", "")
        self.db.add_producer(registration, self.p1)
        self.db.add_producer(registration, self.p2)
        self.assertEqual(self.db.remove_producer(registration, self.p1.id), (True, 1))
        self.assertEqual(self.db.remove_producer(registration, self.p1.id), (False, 1))
        self.assertEqual(self.db.remove_producer(registration, self.p2.id), (True, 0))
        self.assertEqual(self.db.find_registrations(TOPIC, "t", ""), [registration])
        self.assertEqual(
            self.db.remove_producer(Registration(TOPIC, "nope", ""), self.p1.id), (False, 0)
        )

    def test_remove_registration(self) -> None:
        """A removed registration takes its producers with it; removing it again is harmless."""
        self.register(self.p1, "t", "c")
        self.db.remove_registration(Registration(CHANNEL, "t", "c"))
        self.db.remove_registration(Registration(CHANNEL, "t", "c"))
        self.assertEqual(self.db.find_registrations(CHANNEL, "t", ANY), [])
        self.assertEqual(
            self.db.lookup_registrations(self.p1.id), [CLIENT_REG, Registration(TOPIC, "t", "")]
        )

    def test_find_registrations_wildcards(self) -> None:
        """``*`` finds every key or subkey of a category, in insertion order."""
        self.register(self.p1, "t1", "a")
        self.register(self.p1, "t1", "b")
        self.register(self.p2, "t2", "a")
        self.assertEqual(
            [r.key for r in self.db.find_registrations(TOPIC, ANY, "")], ["t1", "t2"]
        )
        self.assertEqual(
            [r.subkey for r in self.db.find_registrations(CHANNEL, "t1", ANY)], ["a", "b"]
        )
        self.assertEqual(
            [r.key for r in self.db.find_registrations(CHANNEL, ANY, "a")], ["t1", "t2"]
        )
        self.assertEqual(len(self.db.find_registrations(CHANNEL, ANY, ANY)), 3)
        self.assertEqual(self.db.find_registrations(CHANNEL, "t3", ANY), [])
        self.assertEqual(self.db.find_registrations(TOPIC, "t1", "x"), [])

    def test_find_producers_wildcards(self) -> None:
        """A wildcard find lists each producer once, with its first entry."""
        self.register(self.p1, "t1", "a")
        self.register(self.p1, "t1", "b")
        self.register(self.p2, "t2", "a")
        found = self.db.find_producers(CHANNEL, ANY, ANY)
        self.assertEqual(self.ids(found), [self.p1.id, self.p2.id])
        self.assertIs(found[0], self.db.producer(Registration(CHANNEL, "t1", "a"), self.p1.id))
        self.assertEqual(self.ids(self.db.find_producers(CHANNEL, "t1", ANY)), [self.p1.id])
        self.assertEqual(self.ids(self.db.find_producers(TOPIC, ANY, "")), [self.p1.id, self.p2.id])
        self.assertEqual(self.ids(self.db.find_producers(CLIENT, "", "")), [self.p1.id, self.p2.id])
        self.assertEqual(self.db.find_producers(TOPIC, "nope", ""), [])

    def test_lookup_registrations(self) -> None:
        """A producer's registrations, in insertion order."""
        self.register(self.p1, "t", "c")
        self.register(self.p2, "u")
        self.assertEqual(
            self.db.lookup_registrations(self.p1.id),
            [CLIENT_REG, Registration(TOPIC, "t", ""), Registration(CHANNEL, "t", "c")],
        )
        self.assertEqual(
            self.db.lookup_registrations(self.p2.id), [CLIENT_REG, Registration(TOPIC, "u", "")]
        )

    def test_producer(self) -> None:
        """The entry of one producer under one registration, or None."""
        self.register(self.p1, "t")
        entry = self.db.producer(Registration(TOPIC, "t", ""), self.p1.id)
        assert entry is not None
        self.assertIs(entry.peer, self.p1)
        self.assertIsNone(self.db.producer(Registration(TOPIC, "t", ""), self.p2.id))
        self.assertIsNone(self.db.producer(Registration(TOPIC, "nope", ""), self.p1.id))

    def test_entries_share_peer_info(self) -> None:
        """A producer's entries share one PeerInfo, so a PING's update shows everywhere."""
        self.register(self.p1, "t", "c")
        self.clock.advance(10)
        self.p1.last_update = self.clock.seconds()
        for registration in self.db.lookup_registrations(self.p1.id):
            entry = self.db.producer(registration, self.p1.id)
            assert entry is not None
            self.assertEqual(entry.peer.last_update, 1010)

    def test_registrations_copy(self) -> None:
        """registrations() is a snapshot: changing it does not change the database."""
        self.register(self.p1, "t")
        snapshot = self.db.registrations()
        snapshot[Registration(TOPIC, "t", "")].clear()
        del snapshot[CLIENT_REG]
        self.assertEqual(self.ids(self.db.find_producers(TOPIC, "t", "")), [self.p1.id])
        self.assertEqual(self.ids(self.db.find_producers(CLIENT, "", "")), [self.p1.id])

    def test_remove_peer(self) -> None:
        """A vanished producer leaves every registration; the registrations and others stay."""
        self.register(self.p1, "t", "c")
        self.register(self.p2, "t", "c")
        removed = self.db.remove_peer(self.p1.id)
        self.assertEqual(
            removed, [CLIENT_REG, Registration(TOPIC, "t", ""), Registration(CHANNEL, "t", "c")]
        )
        self.assertEqual(self.db.lookup_registrations(self.p1.id), [])
        self.assertEqual(self.ids(self.db.find_producers(CHANNEL, "t", "c")), [self.p2.id])
        self.assertEqual(self.db.remove_peer(self.p1.id), [])

    def test_peer_vanishes_mid_stream(self) -> None:
        """
        A producer that goes between REGISTERs leaves no entry behind: its
        registrations stay (empty) and a later find does not list it.
        """
        self.register(self.p1, "t", "c1")
        self.db.add_producer(Registration(CHANNEL, "t", "c2"), self.p1)
        # The connection drops before the rest of its REGISTERs arrive.
        self.db.remove_peer(self.p1.id)
        self.assertEqual(self.db.find_producers(CHANNEL, "t", ANY), [])
        self.assertEqual(self.db.find_producers(TOPIC, ANY, ""), [])
        self.assertEqual(self.db.find_producers(CLIENT, "", ""), [])
        self.assertEqual(
            [r.subkey for r in self.db.find_registrations(CHANNEL, "t", ANY)], ["c1", "c2"]
        )
        self.assertTrue(all(not p for p in self.db.registrations().values()))
        # Its UNREGISTER racing the close finds nothing to remove.
        self.assertEqual(
            self.db.remove_producer(Registration(CHANNEL, "t", "c1"), self.p1.id), (False, 0)
        )

    def test_peer_vanishes_while_iterating(self) -> None:
        """A list found before a producer went is not changed by its removal."""
        self.register(self.p1, "t")
        self.register(self.p2, "t")
        found = self.db.find_producers(TOPIC, "t", "")
        self.db.remove_peer(self.p1.id)
        self.assertEqual(self.ids(found), [self.p1.id, self.p2.id])
        self.assertEqual(self.ids(self.db.find_producers(TOPIC, "t", "")), [self.p2.id])


class TombstoneTests(SynchronousTestCase):
    """Tombstones hide a producer under one registration for a lifetime."""

    def setUp(self) -> None:
        self.clock = Clock()
        self.clock.advance(1000)
        self.db = RegistrationDB()
        self.p1 = peer("127.0.0.1:5001", self.clock)
        for registration in (
            CLIENT_REG,
            Registration(TOPIC, "t", ""),
            Registration(TOPIC, "u", ""),
            Registration(CHANNEL, "t", "c"),
        ):
            self.db.add_producer(registration, self.p1)

    def entry(self, registration: Registration) -> Producer:
        found = self.db.producer(registration, self.p1.id)
        assert found is not None
        return found

    def test_not_tombstoned(self) -> None:
        """A new entry is not tombstoned."""
        entry = self.entry(Registration(TOPIC, "t", ""))
        self.assertFalse(entry.tombstoned)
        self.assertEqual(entry.tombstoned_at, 0.0)
        self.assertFalse(entry.is_tombstoned(45, self.clock.seconds()))

    def test_per_registration(self) -> None:
        """Tombstoning the producer for topic t leaves its other entries alone."""
        self.entry(Registration(TOPIC, "t", "")).tombstone(self.clock.seconds())
        now = self.clock.seconds()
        self.assertTrue(self.entry(Registration(TOPIC, "t", "")).is_tombstoned(45, now))
        for other in (CLIENT_REG, Registration(TOPIC, "u", ""), Registration(CHANNEL, "t", "c")):
            self.assertFalse(self.entry(other).is_tombstoned(45, now), other)

    def test_expiry(self) -> None:
        """A tombstone hides for less than its lifetime, then no more (the flag stays)."""
        entry = self.entry(Registration(TOPIC, "t", ""))
        entry.tombstone(self.clock.seconds())
        self.assertEqual(entry.tombstoned_at, 1000)
        self.clock.advance(44.999)
        self.assertTrue(entry.is_tombstoned(45, self.clock.seconds()))
        self.clock.advance(0.001)
        self.assertFalse(entry.is_tombstoned(45, self.clock.seconds()))
        self.assertTrue(entry.tombstoned)

    def test_zero_lifetime(self) -> None:
        """With a lifetime of 0 nothing is hidden (how /nodes lists tombstoned producers)."""
        entry = self.entry(Registration(TOPIC, "t", ""))
        entry.tombstone(self.clock.seconds())
        self.assertFalse(entry.is_tombstoned(0, self.clock.seconds()))
        self.assertTrue(entry.is_active(300, 0, self.clock.seconds()))

    def test_tombstone_again(self) -> None:
        """Tombstoning again restarts the lifetime."""
        entry = self.entry(Registration(TOPIC, "t", ""))
        entry.tombstone(self.clock.seconds())
        self.clock.advance(40)
        entry.tombstone(self.clock.seconds())
        self.clock.advance(40)
        self.assertTrue(entry.is_tombstoned(45, self.clock.seconds()))


class ActiveTests(SynchronousTestCase):
    """active(): Go's FilterByActive over the inactivity timeout and tombstones."""

    def setUp(self) -> None:
        self.clock = Clock()
        self.clock.advance(1000)
        self.db = RegistrationDB()
        self.registration = Registration(TOPIC, "t", "")
        self.p1 = peer("127.0.0.1:5001", self.clock)
        self.p2 = peer("127.0.0.1:5002", self.clock)
        self.db.add_producer(self.registration, self.p1)
        self.db.add_producer(self.registration, self.p2)

    def active_ids(self, timeout: float = 300, lifetime: float = 45) -> List[str]:
        producers = self.db.find_producers(TOPIC, "t", "")
        return [p.peer.id for p in active(producers, timeout, lifetime, self.clock.seconds())]

    def test_all_active(self) -> None:
        """Producers heard from just now are listed, in order."""
        self.assertEqual(self.active_ids(), [self.p1.id, self.p2.id])

    def test_inactivity(self) -> None:
        """A producer silent for longer than the timeout is dropped; exactly the timeout is kept."""
        self.clock.advance(300)
        self.p2.last_update = self.clock.seconds()
        self.assertEqual(self.active_ids(), [self.p1.id, self.p2.id])
        self.clock.advance(0.5)
        self.assertEqual(self.active_ids(), [self.p2.id])

    def test_ping_keeps_active(self) -> None:
        """A PING (a new last_update) brings a silent producer back."""
        self.clock.advance(301)
        self.assertEqual(self.active_ids(), [])
        self.p1.last_update = self.clock.seconds()
        self.assertEqual(self.active_ids(), [self.p1.id])

    def test_tombstoned(self) -> None:
        """A tombstoned producer is hidden until its tombstone expires."""
        entry = self.db.producer(self.registration, self.p1.id)
        assert entry is not None
        entry.tombstone(self.clock.seconds())
        self.assertEqual(self.active_ids(), [self.p2.id])
        self.clock.advance(45)
        self.p1.last_update = self.p2.last_update = self.clock.seconds()
        self.assertEqual(self.active_ids(), [self.p1.id, self.p2.id])
