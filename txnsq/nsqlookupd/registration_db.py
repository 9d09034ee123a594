# -*- test-case-name: tests.test_nsqlookupd_registration_db -*-
"""
nsqlookupd's registration database: which producers (nsqd) serve which
topics and channels.

As in Go's ``registration_db.go`` a registration is ``(category, key,
subkey)``: ``("client", "", "")`` for every identified producer,
``("topic", TOPIC, "")`` and ``("channel", TOPIC, CHANNEL)``.  Each maps to
the producers registered under it, keyed by their id (remote address).  A
registration may exist with no producer (created over HTTP, or left behind
when its producers went): ``/topics`` and ``/channels`` still list it.

No I/O and no clock of its own: the times compared against the inactivity
timeout and the tombstone lifetime are passed in, so tests drive them with
``task.Clock``.  Dicts keep insertion order, so listings are stable (Go's
map order is random; clients must not rely on either).
"""

from __future__ import annotations

from typing import Dict, Iterable, List, NamedTuple, Optional, Tuple

from txnsq.protocol.lookup_v1 import PeerInfo

__all__ = ["Producer", "Registration", "RegistrationDB", "CLIENT", "TOPIC", "CHANNEL"]

CLIENT = "client"
TOPIC = "topic"
CHANNEL = "channel"

#: Matches any key or subkey in :meth:`RegistrationDB.find_registrations`.
ANY = "*"


class Registration(NamedTuple):
    """``(category, key, subkey)``: ``("channel", "t", "c")``."""

    category: str
    key: str
    subkey: str

    def matches(self, category: str, key: str, subkey: str) -> bool:
        """Whether this registration is selected by a pattern (``*`` = any)."""
        return (
            self.category == category
            and (key == ANY or self.key == key)
            and (subkey == ANY or self.subkey == subkey)
        )


class Producer:
    """
    One producer's entry under a registration: its peer info (shared by
    all its entries) and whether this entry is tombstoned.

    Tombstones are per registration, as in Go: tombstoning a producer for
    topic ``t`` hides it from ``/lookup?topic=t`` only.
    """

    __slots__ = ("peer", "tombstoned", "tombstoned_at")

    def __init__(self, peer: PeerInfo) -> None:
        self.peer = peer
        self.tombstoned = False
        self.tombstoned_at = 0.0

    def tombstone(self, now: float) -> None:
        """Hide this producer under its registration from ``now`` on."""
        self.tombstoned = True
        self.tombstoned_at = now

    def is_tombstoned(self, lifetime: float, now: float) -> bool:
        """Whether a tombstone set less than ``lifetime`` seconds ago hides it."""
        return self.tombstoned and now - self.tombstoned_at < lifetime

    def is_active(self, inactivity_timeout: float, tombstone_lifetime: float, now: float) -> bool:
        """Go's ``FilterByActive``: recently heard from and not tombstoned."""
        return now - self.peer.last_update <= inactivity_timeout and not self.is_tombstoned(
            tombstone_lifetime, now
        )

    def __repr__(self) -> str:
        return "Producer(%r, tombstoned=%r)" % (self.peer, self.tombstoned)


class RegistrationDB:
    """Registrations and their producers (Go's ``RegistrationDB``)."""

    def __init__(self) -> None:
        self._registrations: Dict[Registration, Dict[str, Producer]] = {}

    def add_registration(self, registration: Registration) -> None:
        """Make sure ``registration`` exists (with no producer if new)."""
        self._registrations.setdefault(registration, {})

    def add_producer(self, registration: Registration, peer: PeerInfo) -> bool:
        """
        Register ``peer`` under ``registration`` (creating it); ``True`` if
        it was not there yet.  An existing entry, tombstone included, is kept.
        """
        producers = self._registrations.setdefault(registration, {})
        if peer.id in producers:
            return False
        producers[peer.id] = Producer(peer)
        return True

    def remove_producer(self, registration: Registration, peer_id: str) -> Tuple[bool, int]:
        """
        Remove a producer from a registration: whether it was there, and
        how many producers are left.  The registration itself stays.
        """
        producers = self._registrations.get(registration)
        if producers is None:
            return False, 0
        removed = producers.pop(peer_id, None) is not None
        return removed, len(producers)

    def remove_registration(self, registration: Registration) -> None:
        """Forget a registration and all its producers."""
        self._registrations.pop(registration, None)

    def find_registrations(self, category: str, key: str, subkey: str) -> List[Registration]:
        """The registrations matching a pattern (``*`` for any key or subkey)."""
        if key != ANY and subkey != ANY:
            registration = Registration(category, key, subkey)
            return [registration] if registration in self._registrations else []
        return [r for r in self._registrations if r.matches(category, key, subkey)]

    def find_producers(self, category: str, key: str, subkey: str) -> List[Producer]:
        """
        The producers under the matching registrations, each peer once (the
        first entry found for it).
        """
        if key != ANY and subkey != ANY:
            return list(self._registrations.get(Registration(category, key, subkey), {}).values())
        seen: Dict[str, Producer] = {}
        for registration, producers in self._registrations.items():
            if registration.matches(category, key, subkey):
                for peer_id, producer in producers.items():
                    seen.setdefault(peer_id, producer)
        return list(seen.values())

    def lookup_registrations(self, peer_id: str) -> List[Registration]:
        """Every registration ``peer_id`` is registered under."""
        return [r for r, producers in self._registrations.items() if peer_id in producers]

    def producer(self, registration: Registration, peer_id: str) -> Optional[Producer]:
        """The entry of ``peer_id`` under ``registration``, if any."""
        return self._registrations.get(registration, {}).get(peer_id)

    def remove_peer(self, peer_id: str) -> List[Registration]:
        """
        Remove a producer from every registration (its connection closed);
        the registrations it was removed from.
        """
        removed = []
        for registration, producers in self._registrations.items():
            if producers.pop(peer_id, None) is not None:
                removed.append(registration)
        return removed

    def registrations(self) -> Dict[Registration, List[Producer]]:
        """A copy of the whole database, for ``/debug``."""
        return {r: list(p.values()) for r, p in self._registrations.items()}


def active(
    producers: Iterable[Producer],
    inactivity_timeout: float,
    tombstone_lifetime: float,
    now: float,
) -> List[Producer]:
    """The producers recently heard from and not tombstoned (``FilterByActive``)."""
    return [p for p in producers if p.is_active(inactivity_timeout, tombstone_lifetime, now)]
