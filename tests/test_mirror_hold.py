"""
Tests for :mod:`txnsq.mirror.hold`: a connection's output held for the
mirror, as bookkeeping alone (no connection: the gate is a function).
"""

from __future__ import annotations

from typing import Any, List

from twisted.trial.unittest import SynchronousTestCase

from txnsq.mirror.hold import MirrorHold


class MirrorHoldTests(SynchronousTestCase):
    """A hold, and a gate that holds or not as a test says."""

    def setUp(self) -> None:
        self.hold = MirrorHold()
        self.holding = True
        self.asked: List[Any] = []

    def gate(self, connection: Any) -> bool:
        self.asked.append(connection)
        return self.holding

    def test_not_published(self) -> None:
        """Output with no publish to a mirrored topic in it does not ask the gate."""
        self.assertFalse(self.hold.wait or self.hold.held)

    def test_held(self) -> None:
        """After a publish the gate is asked, with the connection; while it holds, the output waits without asking again."""
        self.hold.published(b"PUB", 0)
        self.assertTrue(self.hold.ask(self.gate, "connection"))
        self.assertTrue(self.hold.ask(self.gate, "connection"))
        self.assertEqual(self.asked, ["connection"])
        self.assertFalse(self.hold.wait)

    def test_gate_lets_go(self) -> None:
        """A gate that does not hold lets the output leave."""
        self.holding = False
        self.hold.published(b"PUB", 0)
        self.assertFalse(self.hold.ask(self.gate, "connection"))
        self.assertFalse(self.hold.held)

    def test_no_gate(self) -> None:
        """Without a gate (no mirroring) nothing waits."""
        self.hold.published(b"PUB", 0)
        self.assertFalse(self.hold.ask(None, "connection"))

    def test_held_from_before_the_gate_answers(self) -> None:
        """The gate finds the connection held while it is asked (so that failing it at once leaves it closing)."""
        seen: List[bool] = []
        self.hold.published(b"PUB", 0)
        self.hold.ask(lambda connection: seen.append(self.hold.held) or False, "connection")
        self.assertEqual(seen, [True])

    def test_input_kept(self) -> None:
        """Reads while held are kept and given back, joined, once released; the release says reading was paused."""
        self.hold.published(b"PUB", 0)
        self.hold.ask(self.gate, "connection")
        self.hold.keep(b"PUB a\n")
        self.hold.keep(b"PUB b\n")
        self.assertEqual(self.hold.kept, [b"PUB a\n", b"PUB b\n"])
        self.assertIsNone(self.hold.take_input())
        self.assertTrue(self.hold.paused)
        self.hold.held = False
        self.assertEqual(self.hold.take_input(), b"PUB a\nPUB b\n")
        self.assertIsNone(self.hold.take_input())

    def test_nothing_read(self) -> None:
        """Held with nothing read meanwhile, reading was not paused and nothing is given back."""
        self.hold.published(b"PUB", 0)
        self.hold.ask(self.gate, "connection")
        self.hold.held = False
        self.assertFalse(self.hold.paused)
        self.assertIsNone(self.hold.take_input())

    def test_fail(self) -> None:
        """A failure cuts the output at the first answer not confirmed, with Go's error for its command, and drops the reads kept."""
        self.hold.published(b"MPUB", 7)
        self.hold.published(b"PUB", 9)
        self.hold.ask(self.gate, "connection")
        self.hold.keep(b"PUB c\n")
        mark, error = self.hold.fail("why")
        self.assertEqual(mark, 7)
        self.assertEqual((error.code, error.description), ("E_MPUB_FAILED", "MPUB failed why"))
        self.assertFalse(self.hold.held)
        self.assertIsNone(self.hold.take_input())

    def test_fail_while_held(self) -> None:
        """Failed while held, the first unconfirmed answer is the first held, whatever was published since."""
        self.hold.published(b"PUB", 2)
        self.hold.ask(self.gate, "connection")
        self.hold.published(b"DPUB", 5)
        mark, error = self.hold.fail("why")
        self.assertEqual((mark, error.code), (2, "E_PUB_FAILED"))

    def test_fail_after_release(self) -> None:
        """Once released, the unconfirmed answers are those published while held."""
        self.hold.published(b"PUB", 2)
        self.hold.ask(self.gate, "connection")
        self.hold.published(b"DPUB", 5)
        self.hold.held = False
        self.assertTrue(self.hold.ask(self.gate, "connection"))
        mark, error = self.hold.fail("why")
        self.assertEqual((mark, error.code), (5, "E_DPUB_FAILED"))

    def test_published_after_release(self) -> None:
        """Released, the next publish answered marks its own place."""
        self.hold.published(b"PUB", 2)
        self.hold.ask(self.gate, "connection")
        self.hold.held = False
        self.holding = False
        self.assertFalse(self.hold.ask(self.gate, "connection"))
        self.hold.published(b"MPUB", 0)
        mark, error = self.hold.fail("why")
        self.assertEqual((mark, error.code), (0, "E_MPUB_FAILED"))
