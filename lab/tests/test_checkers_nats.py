"""Tests for :mod:`lab.checkers_nats`, on hand-made histories."""

from __future__ import annotations

from typing import Any, Dict, List

from twisted.trial.unittest import SynchronousTestCase

from lab.checkers_nats import Path, check_bridge, fault_window

START, STOP = 100.0, 106.0


def pub(p: str, n: int, t: float, kind: str = "ok") -> List[Dict[str, Any]]:
    """An invoke and its outcome ``kind`` at ``t``."""
    return [
        {"t": t - 0.01, "p": p, "type": "invoke", "f": "pub", "v": n},
        {"t": t, "p": p, "type": kind, "f": "pub", "v": n},
    ]


def recv(ch: str, src: str, n: Any, t: float) -> Dict[str, Any]:
    """A delivery to ``ch`` of ``src``'s message ``n``."""
    return {"t": t, "p": ch, "type": "recv", "f": "msg", "v": n, "ch": ch, "src": src}


def nemesis() -> List[Dict[str, Any]]:
    """A fault from START to STOP."""
    return [
        {"t": START, "p": "nemesis", "type": "start", "f": "partition"},
        {"t": STOP, "p": "nemesis", "type": "stop", "f": "partition"},
    ]


PATHS = [Path("p1", "sub-x1", affected=True), Path("p1", "sub-x2", affected=False)]


def history(lost_x1: List[int] = (), lost_x2: List[int] = ()) -> List[Dict[str, Any]]:  # type: ignore[assignment]
    """
    p1 publishes 1..30, one every half second from t=96 (9..21 are
    acknowledged in the fault, 22..30 after it); both subscribers get all
    but the given numbers.
    """
    events = nemesis()
    for n in range(1, 31):
        t = 95.5 + 0.5 * n
        events += pub("p1", n, t)
        if n not in lost_x1:
            events.append(recv("sub-x1", "p1", n, t + 0.01))
        if n not in lost_x2:
            events.append(recv("sub-x2", "p1", n, t + 0.01))
    return sorted(events, key=lambda e: e["t"])


class FaultWindowTests(SynchronousTestCase):
    def test_window(self) -> None:
        """The first nemesis start and the last stop; None without a nemesis."""
        events = nemesis() + [{"t": 103.0, "p": "nemesis", "type": "stop", "f": "other"}]
        self.assertEqual(fault_window(events), (START, STOP))
        self.assertEqual(fault_window(history()[:0]), (None, None))


class CheckBridgeTests(SynchronousTestCase):
    def test_clean(self) -> None:
        """Everything delivered on both paths: no problem, the counts."""
        result = check_bridge(history(), PATHS, exactly_once=["sub-x1", "sub-x2"], serving=["p1"])
        self.assertEqual(result.problems, [])
        self.assertEqual(result.acknowledged, 30)
        self.assertEqual(result.lost, 0)
        self.assertEqual(result.receivers["sub-x1"]["delivered"], 30)
        self.assertEqual(result.paths["p1->sub-x1"]["acked_in_fault"], 13)

    def test_loss_in_fault_on_affected_path(self) -> None:
        """At most once while cut: counted as lost in the fault, no problem."""
        result = check_bridge(history(lost_x1=[10, 11, 12]), PATHS)
        self.assertEqual(result.problems, [])
        self.assertEqual(result.lost, 3)
        self.assertEqual(result.lost_in_fault, 3)
        self.assertEqual(result.lost_outside_fault, 0)
        self.assertEqual(result.paths["p1->sub-x1"]["resumed_s"], 0.0)

    def test_loss_after_stop_until_resumed(self) -> None:
        """Acknowledged after the fault's end but before the path resumed: allowed."""
        # 21 is acked at 106.0 (the stop), 22 at 106.5: lost; 23 is the first delivered.
        result = check_bridge(history(lost_x1=[21, 22]), PATHS)
        self.assertEqual(result.problems, [])
        self.assertEqual(result.lost_in_fault, 2)
        self.assertEqual(result.paths["p1->sub-x1"]["resumed_s"], 1.0)

    def test_loss_after_resumed(self) -> None:
        """A loss acknowledged after the path resumed is a problem."""
        result = check_bridge(history(lost_x1=[25]), PATHS)
        self.assertEqual(len(result.problems), 1)
        self.assertIn("p1->sub-x1 lost 1 acknowledged outside the fault window: p1:25@108.00", result.problems[0])

    def test_loss_before_fault(self) -> None:
        """A loss acknowledged more than ``grace`` before the fault began is a problem."""
        result = check_bridge(history(lost_x1=[1, 8]), PATHS, grace=1.0)
        # 1 was acked at 96.0 (4 s before), 8 at 99.5 (within the grace).
        self.assertEqual(result.lost_outside_fault, 1)
        self.assertEqual(result.lost_in_fault, 1)
        self.assertIn("p1:1@96.00", result.problems[0])

    def test_loss_on_spared_path(self) -> None:
        """A path the fault spares may lose nothing, even inside the window."""
        result = check_bridge(history(lost_x2=[12]), PATHS)
        self.assertEqual(result.lost_outside_fault, 1)
        self.assertIn("p1->sub-x2 lost 1 acknowledged on a path the fault spares", result.problems[0])

    def test_never_resumed(self) -> None:
        """An affected path that gets nothing acknowledged after the fault: a problem."""
        result = check_bridge(history(lost_x1=list(range(21, 31))), PATHS)
        self.assertIn("p1->sub-x1 never resumed after the fault", result.problems)
        self.assertEqual(result.lost_outside_fault, 0)

    def test_unexpected(self) -> None:
        """A delivery never published (or not numbered) is a problem, whatever the path."""
        events = history() + [recv("sub-x2", "p1", 99, 101.0), recv("sub-x1", "p9", "garbage", 101.0)]
        result = check_bridge(events, PATHS)
        self.assertEqual(result.unexpected, 2)
        self.assertEqual(len(result.problems), 2)
        self.assertIn("sub-x1 got 1 never published: p9:-1", result.problems)
        self.assertIn("sub-x2 got 1 never published: p1:99", result.problems)

    def test_unknown_publish_delivered(self) -> None:
        """A publish of unknown outcome may arrive (recovered) and is neither lost nor unexpected."""
        events = history() + pub("p1", 50, 103.0, kind="info") + [recv("sub-x2", "p1", 50, 104.0)]
        result = check_bridge(events, PATHS)
        self.assertEqual(result.problems, [])
        self.assertEqual((result.unknown, result.recovered, result.unexpected), (1, 1, 0))

    def test_duplicates(self) -> None:
        """Twice on an exactly-once receiver is a problem; on another, only counted."""
        events = history() + [recv("sub-x1", "p1", 3, 101.0), recv("sub-x2", "p1", 3, 101.0)]
        result = check_bridge(events, PATHS, exactly_once=["sub-x1"])
        self.assertEqual(result.duplicates, 2)
        self.assertEqual(result.problems, ["sub-x1 got 1 copies (first deliveries of a message already delivered)"])

    def test_redelivery_is_no_copy(self) -> None:
        """An NSQ redelivery (attempts 2) is a duplicate but no copy; a second first attempt is."""
        events = pub("np-x2", 1, 1.0) + pub("np-x2", 2, 1.5) + [
            dict(recv("bridge", "np-x2", 1, 1.1), a=1),
            dict(recv("bridge", "np-x2", 1, 2.1), a=2),
            dict(recv("bridge", "np-x2", 2, 1.6), a=1),
            dict(recv("bridge", "np-x2", 2, 1.7), a=1),
        ]
        result = check_bridge(events, [Path("np-x2", "bridge", affected=False)], exactly_once=["bridge"])
        self.assertEqual(result.duplicates, 2)
        self.assertEqual(result.problems, ["bridge got 1 copies (first deliveries of a message already delivered)"])

    def test_serving(self) -> None:
        """A producer that must keep being served had nothing acknowledged in the fault: a problem."""
        events = [e for e in history() if not (e["type"] == "ok" and START <= e["t"] <= STOP)]
        result = check_bridge(events, PATHS, serving=["p1"])
        self.assertIn("p1 had nothing acknowledged during the fault", result.problems)

    def test_nothing_acknowledged(self) -> None:
        """A path whose producer had nothing acknowledged is a problem (the round tested nothing)."""
        result = check_bridge(nemesis(), [Path("np-x2", "bridge", affected=False)])
        self.assertEqual(result.problems, ["np-x2->bridge: nothing acknowledged"])

    def test_batches(self) -> None:
        """MPUB runs (a list value) count each number."""
        events = [
            {"t": 1.0, "p": "p1", "type": "invoke", "f": "pub", "v": [1, 2]},
            {"t": 1.1, "p": "p1", "type": "ok", "f": "pub", "v": [1, 2]},
            recv("sink", "p1", 1, 1.2),
        ]
        result = check_bridge(events, [Path("p1", "sink", affected=False)])
        self.assertEqual((result.acknowledged, result.lost), (2, 1))
