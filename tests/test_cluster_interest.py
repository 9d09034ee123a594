"""Tests for :mod:`txnsq.cluster.interest`: one peer's interest table."""

from __future__ import annotations

from twisted.trial.unittest import SynchronousTestCase

from txnsq.cluster.interest import CACHE_SIZE, InterestTable


class InterestTableTests(SynchronousTestCase):
    """RS+/RS- bookkeeping and the per-subject match."""

    def test_plain_and_wildcards(self) -> None:
        """Plain interest matches literal and wildcard patterns, per account."""
        table = InterestTable()
        table.add("$G", "nsq.>")
        self.assertEqual(table.match("$G", "nsq.orders"), (True, frozenset()))
        self.assertEqual(table.match("$G", "other"), (False, frozenset()))
        self.assertEqual(table.match("ACC", "nsq.orders"), (False, frozenset()))

    def test_queue_groups(self) -> None:
        """Queue interest gives the group names matching the subject."""
        table = InterestTable()
        table.add("$G", "nsq.orders", "workers", 2)
        table.add("$G", "nsq.*", "audit", 1)
        self.assertEqual(table.match("$G", "nsq.orders"), (False, frozenset(["workers", "audit"])))
        self.assertEqual(table.match("$G", "nsq.clicks"), (False, frozenset(["audit"])))

    def test_weight_update_is_no_change(self) -> None:
        """RS+ with a new weight for a known group changes no match, only the weight."""
        table = InterestTable()
        self.assertTrue(table.add("$G", "s", "q", 1))
        version = table.version
        self.assertFalse(table.add("$G", "s", "q", 5))
        self.assertEqual(table.version, version)
        self.assertEqual(table.queue_groups("$G"), {("s", "q"): 5})

    def test_remove_updates_cached_match(self) -> None:
        """RS- removes interest and clears cached matches."""
        table = InterestTable()
        table.add("$G", "s")
        table.add("$G", "s", "q")
        self.assertEqual(table.match("$G", "s"), (True, frozenset(["q"])))
        self.assertTrue(table.remove("$G", "s"))
        self.assertEqual(table.match("$G", "s"), (False, frozenset(["q"])))
        self.assertTrue(table.remove("$G", "s", "q"))
        self.assertEqual(table.match("$G", "s"), (False, frozenset()))
        self.assertFalse(table.remove("$G", "s"))
        self.assertEqual(len(table), 0)

    def test_duplicate_add(self) -> None:
        """A second RS+ for known plain interest changes nothing."""
        table = InterestTable()
        self.assertTrue(table.add("$G", "s"))
        self.assertFalse(table.add("$G", "s"))
        self.assertEqual(len(table), 1)

    def test_cache_is_bounded(self) -> None:
        """The match cache never holds more than CACHE_SIZE subjects."""
        table = InterestTable()
        table.add("$G", ">")
        for index in range(CACHE_SIZE + 10):
            table.match("$G", "s%d" % (index,))
        self.assertLessEqual(len(table._cache), CACHE_SIZE)

    def test_describe(self) -> None:
        """describe lists interest, leaving $SYS out."""
        table = InterestTable()
        table.add("$G", "b")
        table.add("$G", "a", "q", 3)
        table.add("$SYS", "$SYS.x")
        self.assertEqual(table.describe(), ["$G a q 3", "$G b"])
