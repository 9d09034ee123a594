# -*- test-case-name: tests.test_cluster_interest -*-
"""
One route peer's interest: the subjects (and queue groups) its clients
subscribe to, as told by ``RS+``/``RS-``, and the question a sender asks
per message: does this peer want ``subject``, and through which groups?
"""

from __future__ import annotations

from typing import Dict, FrozenSet, List, Optional, Set, Tuple

from txnsq.cluster.subjects import subject_matches

__all__ = ["InterestTable", "Match"]

#: ``(plain, queues)``: the peer has plain subscribers of the subject;
#: the queue groups (names) it has there.
Match = Tuple[bool, FrozenSet[str]]

_NONE: Match = (False, frozenset())

#: Subjects whose match is remembered, per account, before the cache is
#: cleared (bounded memory against a stream of unique subjects).
CACHE_SIZE = 4096


class InterestTable:
    """
    The interest of one peer, by account.  Plain interest is a set of
    subjects (patterns); queue interest maps ``(subject, queue)`` to the
    group's weight there.  :meth:`match` is cached per subject until the
    interest changes.

    :ivar version: increases on every change (senders cache plans on it).
    """

    def __init__(self) -> None:
        self._plain: Dict[str, Set[str]] = {}
        self._queues: Dict[str, Dict[Tuple[str, str], int]] = {}
        self._cache: Dict[Tuple[str, str], Match] = {}
        self.version = 0

    def __len__(self) -> int:
        """Subjects and queue groups of interest, over all accounts."""
        return sum(map(len, self._plain.values())) + sum(map(len, self._queues.values()))

    def add(self, account: str, subject: str, queue: Optional[str] = None, weight: int = 1) -> bool:
        """
        Record ``RS+``; whether anything changed (a queue weight update
        changes nothing a sender sees).
        """
        if queue is None:
            subjects = self._plain.setdefault(account, set())
            if subject in subjects:
                return False
            subjects.add(subject)
        else:
            groups = self._queues.setdefault(account, {})
            known = (subject, queue) in groups
            groups[(subject, queue)] = weight
            if known:
                return False
        self._changed()
        return True

    def remove(self, account: str, subject: str, queue: Optional[str] = None) -> bool:
        """Record ``RS-``; whether there was such interest."""
        if queue is None:
            subjects = self._plain.get(account)
            if not subjects or subject not in subjects:
                return False
            subjects.discard(subject)
        else:
            groups = self._queues.get(account)
            if not groups or (subject, queue) not in groups:
                return False
            del groups[(subject, queue)]
        self._changed()
        return True

    def clear(self) -> None:
        """Forget all interest (the peer is gone)."""
        self._plain.clear()
        self._queues.clear()
        self._changed()

    def _changed(self) -> None:
        self._cache.clear()
        self.version += 1

    def subjects(self, account: str) -> Set[str]:
        """The plain subjects (patterns) of interest in ``account``."""
        return set(self._plain.get(account, ()))

    def queue_groups(self, account: str) -> Dict[Tuple[str, str], int]:
        """``(subject, queue) -> weight`` in ``account``."""
        return dict(self._queues.get(account, {}))

    def match(self, account: str, subject: str) -> Match:
        """Whether the peer wants the literal ``subject``, and which groups."""
        key = (account, subject)
        found = self._cache.get(key)
        if found is not None:
            return found
        plain = False
        for pattern in self._plain.get(account, ()):
            if subject_matches(pattern, subject):
                plain = True
                break
        queues = frozenset(
            queue
            for (pattern, queue) in self._queues.get(account, {})
            if subject_matches(pattern, subject)
        )
        found = (plain, queues) if (plain or queues) else _NONE
        if len(self._cache) >= CACHE_SIZE:
            self._cache.clear()
        self._cache[key] = found
        return found

    def describe(self, skip: Tuple[str, ...] = ("$SYS",)) -> List[str]:
        """
        The interest as sorted ``"<account> <subject>"`` and ``"<account>
        <subject> <queue> <weight>"`` items, leaving out the accounts in
        ``skip`` (nats-server's own ``$SYS`` traffic).
        """
        found = [
            "%s %s" % (account, subject)
            for account, subjects in self._plain.items()
            if account not in skip
            for subject in subjects
        ]
        found.extend(
            "%s %s %s %d" % (account, subject, queue, weight)
            for account, groups in self._queues.items()
            if account not in skip
            for (subject, queue), weight in groups.items()
        )
        return sorted(found)
