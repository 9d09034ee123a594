"""Tests for :mod:`lab.checkers_lookupd`, on hand-made histories and polls."""

from __future__ import annotations

from typing import Any, Dict, List

from twisted.trial.unittest import SynchronousTestCase

from lab.checkers_lookupd import (
    LookupPoll,
    check_hidden_discovery,
    check_tombstone_polls,
    first_from_after,
    flow_during,
)

N1, N2, N3 = "10.0.0.1:4150", "10.0.0.2:4150", "10.0.0.3:4150"
L1, L2 = "l1:4161", "l2:4161"


def recv(t: float, node: str, ch: str = "billing") -> Dict[str, Any]:
    """A delivery at ``t`` from ``node``."""
    return {"t": t, "p": "consumer1", "type": "recv", "f": "msg", "v": int(t * 10), "node": node, "ch": ch, "src": "p1"}


class FlowDuringTests(SynchronousTestCase):
    def test_counts_spared_nodes_in_window(self) -> None:
        """Only deliveries from the given nodes inside the window count; gaps include the window's ends."""
        events = [recv(9.0, N2), recv(10.5, N2), recv(12.0, N1), recv(13.0, N3), recv(14.5, N2),
                  recv(13.5, N2, ch="audit"), recv(21.0, N3)]
        flow = flow_during(events, "billing", [N2, N3], 10.0, 20.0)
        self.assertEqual(flow, {"count": 3, "per_s": 0.3, "second_half": 0, "max_gap_s": 5.5})

    def test_nothing(self) -> None:
        """No delivery in the window: count 0 and the whole window as the gap."""
        flow = flow_during([recv(9.0, N2)], "billing", [N2], 10.0, 12.0)
        self.assertEqual((flow["count"], flow["second_half"], flow["max_gap_s"]), (0, 0, 2.0))


class FirstFromAfterTests(SynchronousTestCase):
    def test_first(self) -> None:
        """The first delivery from the node at or after the time, on that channel only."""
        events = [recv(5.0, N1), recv(12.0, N1, ch="audit"), recv(13.0, N1), recv(14.0, N1)]
        self.assertEqual(first_from_after(events, "billing", N1, 10.0), 13.0)
        self.assertIsNone(first_from_after(events, "billing", N2, 0.0))


def polls(lookupd: str, listed: Dict[float, List[str]]) -> List[LookupPoll]:
    """Polls sent at each time (answered 0.1 s later) listing the given producers."""
    return [LookupPoll(lookupd, t, t + 0.1, 200, producers) for t, producers in sorted(listed.items())]


ALL = [N1, N2, N3]
OTHERS = [N2, N3]


def good(lookupd: str) -> List[LookupPoll]:
    """A lookupd that did what is documented: tombstone set at 100.0-100.2, lifetime 5 s."""
    return polls(lookupd, {98.0: ALL, 99.0: ALL, 101.0: OTHERS, 103.0: OTHERS, 104.8: OTHERS,
                           105.1: ALL, 106.5: ALL, 107.0: ALL})


class TombstonePollTests(SynchronousTestCase):
    def check(self, all_polls: List[LookupPoll]) -> List[str]:
        return check_tombstone_polls(all_polls, N1, OTHERS, 100.0, 100.2, 5.0, margin=1.0)

    def test_documented(self) -> None:
        """Listed before, hidden within the lifetime (others listed), back after: no problem."""
        self.assertEqual(self.check(good(L1) + good(L2)), [])

    def test_listed_while_tombstoned(self) -> None:
        """A poll within the lifetime listing the tombstoned node is a problem (once per lookupd, counted)."""
        bad = polls(L2, {98.0: ALL, 101.0: ALL, 102.0: ALL, 106.5: ALL})
        self.assertEqual(self.check(good(L1) + bad),
                         ["l2:4161 listed tombstoned %s at +1.0 s (lifetime 5 s) (2 polls)" % N1])

    def test_others_hidden(self) -> None:
        """The tombstone hides one producer: another missing within the lifetime is a problem."""
        bad = polls(L1, {98.0: ALL, 101.0: [N2], 106.5: ALL})
        self.assertEqual(self.check(bad), ["l1:4161 did not list %s at +1.0 s (only %s is tombstoned)" % (N3, N1)])

    def test_never_back(self) -> None:
        """Still hidden a margin after the lifetime: a problem."""
        bad = polls(L1, {98.0: ALL, 101.0: OTHERS, 106.5: OTHERS})
        self.assertEqual(self.check(bad), ["l1:4161 still hid %s at +6.5 s (lifetime 5 s)" % N1])

    def test_between_is_not_judged(self) -> None:
        """Polls around the lifetime's end (either answer is right) are not judged."""
        edge = polls(L1, {98.0: ALL, 101.0: OTHERS, 104.95: ALL, 105.5: OTHERS, 106.5: ALL})
        self.assertEqual(self.check(edge), [])

    def test_polls_during_posts_not_judged(self) -> None:
        """A poll sent before the last POST was answered may still list the node."""
        edge = polls(L1, {98.0: ALL, 100.1: ALL, 101.0: OTHERS, 106.5: ALL})
        self.assertEqual(self.check(edge), [])

    def test_missing_kinds(self) -> None:
        """A lookupd with no poll while the tombstone held, or none after, checked nothing: a problem."""
        few = polls(L1, {98.0: ALL, 106.5: ALL})
        self.assertEqual(self.check(few), ["l1:4161: no poll answered while it held"])
        self.assertEqual(self.check([]), ["no lookupd was polled"])

    def test_failed_polls_ignored(self) -> None:
        """A poll that got no 200 counts for nothing (and so may leave a kind unchecked)."""
        failed = [LookupPoll(L1, 101.0, 101.1, 0, [])]
        self.assertEqual(self.check(polls(L1, {98.0: ALL, 106.5: ALL}) + failed),
                         ["l1:4161: no poll answered while it held"])


class HiddenDiscoveryTests(SynchronousTestCase):
    def test_documented(self) -> None:
        """Nothing from the node before the tombstone ends, then deliveries: no problem."""
        events = [recv(101.0, N2, "audit"), recv(104.0, N1, "billing"), recv(105.7, N1, "audit")]
        found = check_hidden_discovery(events, "audit", N1, 105.0)
        self.assertEqual(found, {"early": 0, "after": 1, "first_after_s": 0.7, "problems": []})

    def test_found_early(self) -> None:
        """A delivery from the tombstoned node before its end: the consumer found it, a problem."""
        events = [recv(103.0, N1, "audit"), recv(105.5, N1, "audit")]
        found = check_hidden_discovery(events, "audit", N1, 105.0)
        self.assertEqual(found["problems"], ["audit got 1 from tombstoned %s, the first 2.0 s before its tombstone ended" % N1])

    def test_never_found(self) -> None:
        """Nothing from the node after the tombstone ended: a problem."""
        found = check_hidden_discovery([recv(106.0, N2, "audit")], "audit", N1, 105.0)
        self.assertEqual(found["problems"], ["audit never got anything from %s after its tombstone ended" % N1])
