"""Tests for :mod:`lab.checkers`: the queue checker over hand-made histories."""

from __future__ import annotations

from typing import Any, Dict, List

from twisted.trial.unittest import SynchronousTestCase

from lab.checkers import check_queue


def _pub(kind: str, numbers: List[int], t: float = 1.0, node: str = "n1:4150") -> Dict[str, Any]:
    return {"t": t, "p": "p1", "type": kind, "f": "pub", "v": numbers, "node": node}


def _recv(number: int, channel: str = "a", src: str = "p1") -> Dict[str, Any]:
    return {"t": 2.0, "p": "c", "type": "recv", "f": "msg", "v": number, "ch": channel, "src": src}


class QueueCheckerTests(SynchronousTestCase):
    """The queue checker's counts."""

    def test_all_delivered(self) -> None:
        """Every acknowledged message delivered on every channel: nothing lost."""
        events = [_pub("invoke", [1, 2]), _pub("ok", [1, 2]), _recv(1), _recv(2), _recv(1, "b"), _recv(2, "b")]
        result = check_queue(events, ["a", "b"])
        self.assertEqual((result.acknowledged, result.lost, result.unexpected, result.duplicates), (2, 0, 0, 0))

    def test_lost_on_one_channel(self) -> None:
        """A message acknowledged and missing on one channel is lost, and charged to its node."""
        events = [_pub("invoke", [1, 2]), _pub("ok", [1, 2]), _recv(1), _recv(2), _recv(1, "b")]
        result = check_queue(events, ["a", "b"])
        self.assertEqual(result.lost, 1)
        self.assertEqual(result.lost_sample, ["p1:2"])
        self.assertEqual(result.by_node["n1:4150"], {"acknowledged": 2, "lost": 1})
        self.assertEqual(result.channels["b"]["lost"], 1)

    def test_unexpected(self) -> None:
        """A delivery of a number never invoked is unexpected."""
        events = [_pub("invoke", [1]), _pub("ok", [1]), _recv(1), _recv(7)]
        self.assertEqual(check_queue(events, ["a"]).unexpected, 1)

    def test_duplicates(self) -> None:
        """Deliveries beyond a message's first are counted as duplicates, not lost."""
        events = [_pub("invoke", [1]), _pub("ok", [1]), _recv(1), _recv(1), _recv(1)]
        result = check_queue(events, ["a"])
        self.assertEqual((result.lost, result.duplicates), (0, 2))

    def test_recovered_unknown(self) -> None:
        """A publish of unknown outcome that was delivered is recovered, never lost."""
        events = [_pub("invoke", [1, 2]), _pub("info", [1, 2]), _recv(2)]
        result = check_queue(events, ["a"])
        self.assertEqual((result.acknowledged, result.unknown, result.recovered, result.lost), (0, 2, 1, 0))

    def test_failed_not_expected(self) -> None:
        """A publish that definitely failed is neither expected nor unexpected when absent."""
        events = [_pub("invoke", [1]), _pub("fail", [1])]
        result = check_queue(events, ["a"])
        self.assertEqual((result.failed, result.lost, result.unexpected), (1, 0, 0))
