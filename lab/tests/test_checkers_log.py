"""Tests for :mod:`lab.checkers_log` and :mod:`lab.log_bodies`, on hand-made histories."""

from __future__ import annotations

from typing import Any, Dict, List, Optional, Sequence

from twisted.trial.unittest import SynchronousTestCase

from lab.checkers_log import check_log
from lab.log_bodies import parse_body, record_body, record_hash


class _History:
    """Builds a history: writer operations, reader passes, damage, in time order."""

    def __init__(self) -> None:
        self.events: List[Dict[str, Any]] = []
        self.t = 0.0

    def _add(self, **event: Any) -> None:
        self.t += 1.0
        event["t"] = self.t
        self.events.append(event)

    def write(self, n: int, outcome: str = "ok", f: str = "put", place: Optional[tuple] = None,
              p: str = "w1") -> None:
        self._add(p=p, type="invoke", f=f, v=n)
        extra = {"part": place[0], "off": place[1]} if place is not None else {}
        self._add(p=p, type=outcome, f=f, v=n, **extra)

    def read(self, label: str, records: Dict[tuple, Any], partitions: int = 1,
             bad: Sequence[tuple] = (), client: str = "refused: checksum", error: Optional[int] = None,
             finished: bool = True) -> None:
        """A pass: ``records`` maps (partition, offset) to (writer, n), or to a dict of fields."""
        for place, what in sorted(records.items()):
            if isinstance(what, dict):
                fields = what
            else:
                src, n = what
                fields = {"src": src, "n": n, "body_ok": True, "h": "%s:%d" % (src, n)}
            self._add(p="reader", type="read", f="record", v=list(place), **{"pass": label}, **fields)
        for place in bad:
            self._add(p="reader", type="read", f="bad", v=list(place), why="checksum mismatch", **{"pass": label})
            self._add(p="reader", type="read", f="client", v=list(place), client=client, **{"pass": label})
        for partition in range(partitions):
            if partition == error:
                self._add(p="reader", type="read", f="error", v=[partition, 0], why="x", **{"pass": label})
            else:
                self._add(p="reader", type="read", f="end", v=[partition, 999], **{"pass": label})
        if finished:
            self._add(p="reader", type="read", f="pass", v=label, **{"pass": label})

    def damage(self, kind: str, partition: int, lo: int, hi: int) -> None:
        self._add(p="nemesis", type="damage", f=kind, partition=partition, lo=lo, hi=hi)


class LogCheckerTests(SynchronousTestCase):
    """check_log's figures."""

    def test_clean(self) -> None:
        """Every acknowledged record read back at its offset, the same in every pass: no violation."""
        h = _History()
        h.write(1, place=(0, 0))
        h.write(2, f="pub")
        h.read("before", {(0, 0): ("w1", 1), (0, 100): ("w1", 2)})
        h.read("final", {(0, 0): ("w1", 1), (0, 100): ("w1", 2)})
        result = check_log(h.events)
        self.assertEqual((result.acknowledged, result.lost, result.passes), (2, 0, 2))
        self.assertEqual(result.violations(), [])

    def test_lost(self) -> None:
        """An acknowledged record missing from the final pass is lost."""
        h = _History()
        h.write(1, place=(0, 0))
        h.write(2, f="pub")
        h.read("final", {(0, 0): ("w1", 1)})
        result = check_log(h.events)
        self.assertEqual(result.lost, 1)
        self.assertIn("lost", result.violations()[0])

    def test_unknown_not_lost(self) -> None:
        """A record of unknown outcome may be missing; one read back counts as recovered."""
        h = _History()
        h.write(1, outcome="info")
        h.write(2, outcome="info")
        h.read("final", {(0, 0): ("w1", 2)})
        result = check_log(h.events)
        self.assertEqual((result.lost, result.unknown, result.recovered), (0, 2, 1))
        self.assertEqual(result.violations(), [])

    def test_unstable(self) -> None:
        """An offset reading back other bytes in a later pass is unstable."""
        h = _History()
        h.write(1, place=(0, 0))
        h.read("before", {(0, 0): ("w1", 1)})
        h.read("final", {(0, 0): {"src": "w1", "n": 1, "body_ok": True, "h": "other"}})
        result = check_log(h.events)
        self.assertEqual(result.unstable, 1)
        self.assertEqual(result.lost, 0)

    def test_vanished(self) -> None:
        """A record read once and missing from a later complete pass has vanished, even of unknown outcome."""
        h = _History()
        h.write(1, outcome="info")
        h.read("before", {(0, 0): ("w1", 1)})
        h.read("final", {})
        result = check_log(h.events)
        self.assertEqual((result.vanished, result.lost), (1, 0))

    def test_incomplete_pass_does_not_vanish(self) -> None:
        """A partition a pass could not read to its end proves nothing missing; the final pass incomplete is a violation."""
        h = _History()
        h.write(1, place=(0, 0))
        h.read("before", {(0, 0): ("w1", 1)})
        h.read("final", {}, error=0)
        result = check_log(h.events)
        self.assertEqual(result.vanished, 0)
        self.assertFalse(result.final_complete)
        self.assertIn("the final read did not reach the end of every partition", result.violations())

    def test_misplaced(self) -> None:
        """A put read back elsewhere than the offset it was answered with is misplaced."""
        h = _History()
        h.write(1, place=(0, 0))
        h.read("final", {(1, 0): ("w1", 1)}, partitions=2)
        result = check_log(h.events)
        self.assertEqual((result.misplaced, result.lost), (1, 0))

    def test_bad_checksum(self) -> None:
        """Records failing their checksum are counted, and whether the client took the reply."""
        h = _History()
        h.write(1, place=(0, 0))
        h.read("final", {(0, 0): ("w1", 1)}, bad=[(0, 50)], client="accepted 2 records")
        result = check_log(h.events)
        self.assertEqual((result.bad_served, result.client_accepted_bad), (1, 1))
        self.assertEqual(len(result.violations()), 2)

    def test_client_refused(self) -> None:
        """A reply the client refused is counted apart from one it took."""
        h = _History()
        h.read("final", {}, bad=[(0, 0)])
        result = check_log(h.events)
        self.assertEqual((result.bad_served, result.client_refused_bad, result.client_accepted_bad), (1, 1, 0))

    def test_unexpected_and_mismatched(self) -> None:
        """Records never written, or naming no writer, are unexpected; a wrong body for a number is mismatched."""
        h = _History()
        h.write(1, place=(0, 0))
        h.read("final", {
            (0, 0): {"src": "w1", "n": 1, "body_ok": False, "h": "x"},
            (0, 100): ("w1", 7),
            (0, 200): {"h": "y"},
        })
        result = check_log(h.events)
        self.assertEqual((result.unexpected, result.mismatched), (2, 1))

    def test_duplicates_and_failed_present(self) -> None:
        """A record at two offsets is a duplicate; a refused write read back is failed_present."""
        h = _History()
        h.write(1, f="pub")
        h.write(2, outcome="fail", f="pub")
        h.read("final", {(0, 0): ("w1", 1), (0, 100): ("w1", 1), (0, 200): ("w1", 2)})
        result = check_log(h.events)
        self.assertEqual((result.duplicates, result.failed_present), (1, 1))

    def test_declared_cut(self) -> None:
        """Records in a declared cut are cut, not lost; an offset then holding another record is reused."""
        h = _History()
        h.write(1, place=(0, 0))
        h.write(2, place=(0, 100))
        h.write(3, place=(0, 200))
        h.read("before", {(0, 0): ("w1", 1), (0, 100): ("w1", 2), (0, 200): ("w1", 3)})
        h.damage("cut", 0, 100, 300)
        h.read("after", {(0, 0): ("w1", 1)})
        h.write(4, place=(0, 100))
        h.read("final", {(0, 0): ("w1", 1), (0, 100): ("w1", 4)})
        result = check_log(h.events)
        self.assertEqual((result.cut, result.lost, result.vanished, result.reused, result.unstable),
                         (2, 0, 0, 1, 0))
        self.assertEqual(result.violations(), [])

    def test_cut_does_not_excuse_later_writes(self) -> None:
        """A record acknowledged after a cut, at an offset in it, and then missing is lost."""
        h = _History()
        h.write(1, place=(0, 0))
        h.read("before", {(0, 0): ("w1", 1)})
        h.damage("cut", 0, 0, 100)
        h.write(2, place=(0, 0))
        h.read("final", {})
        result = check_log(h.events)
        self.assertEqual((result.cut, result.lost), (1, 1))

    def test_cut_kept(self) -> None:
        """A record still there after a declared cut is counted as kept."""
        h = _History()
        h.write(1, place=(0, 0))
        h.read("before", {(0, 0): ("w1", 1)})
        h.damage("cut", 0, 0, 100)
        h.read("final", {(0, 0): ("w1", 1)})
        result = check_log(h.events)
        self.assertEqual((result.cut_kept, result.cut), (1, 0))

    def test_damage_before_reads_does_not_apply(self) -> None:
        """A declared cut only excuses what a pass before it read."""
        h = _History()
        h.write(1, place=(0, 0))
        h.damage("cut", 0, 0, 100)
        h.read("before", {(0, 0): ("w1", 1)})
        h.read("final", {(0, 0): {"src": "w1", "n": 1, "body_ok": True, "h": "z"}})
        result = check_log(h.events)
        self.assertEqual((result.unstable, result.reused), (1, 0))

    def test_declared_alteration(self) -> None:
        """Other bytes at an offset a declared alteration covers count as altered, not unstable."""
        h = _History()
        h.write(1, place=(0, 0))
        h.read("before", {(0, 0): ("w1", 1)})
        h.damage("altered", 0, 0, 10)
        h.read("final", {(0, 0): {"src": "w1", "n": 1, "body_ok": True, "h": "z"}})
        result = check_log(h.events)
        self.assertEqual((result.altered, result.unstable), (1, 0))

    def test_documented(self) -> None:
        """Figures a scenario documents are left out of the violations."""
        h = _History()
        h.write(1, place=(0, 0))
        h.read("final", {})
        result = check_log(h.events)
        self.assertEqual(result.violations(documented=["lost"]), [])


class LogBodiesTests(SynchronousTestCase):
    """The workload's record bodies."""

    def test_round_trip(self) -> None:
        """A body names its writer and number, and has the size asked for."""
        body = record_body("w1", 42, 120)
        self.assertEqual(len(body), 120)
        self.assertEqual(parse_body(body), ("w1", 42))

    def test_distinct(self) -> None:
        """Bodies of different numbers differ past the prefix too."""
        self.assertNotEqual(record_body("w1", 1, 100)[10:], record_body("w1", 2, 100)[10:])

    def test_short(self) -> None:
        """A size below the prefix gives the prefix."""
        self.assertEqual(record_body("w1", 3, 1), b"w1:3:")

    def test_not_a_body(self) -> None:
        """Bytes naming no writer parse as None."""
        self.assertIsNone(parse_body(b"hello"))
        self.assertIsNone(parse_body(b"w1:x:"))

    def test_hash(self) -> None:
        """The record hash tells different bytes apart."""
        self.assertNotEqual(record_hash(b"a"), record_hash(b"b"))
        self.assertEqual(len(record_hash(b"a")), 16)
