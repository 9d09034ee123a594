"""Tests for :mod:`lab.timing_checkers`, on hand-made histories."""

from __future__ import annotations

from typing import Any, Dict, List

from twisted.trial.unittest import SynchronousTestCase

from lab.timing_checkers import check_deferred, check_timeouts


def _dpub(t: float, n: int, delay: float, ok: bool = True) -> List[Dict[str, Any]]:
    events: List[Dict[str, Any]] = [{"t": t, "p": "p1", "type": "invoke", "f": "pub", "v": [n], "d": delay}]
    if ok:
        events.append({"t": t + 0.01, "p": "p1", "type": "ok", "f": "pub", "v": [n]})
    return events


def _recv(t: float, n: int, attempts: int = 1, held: bool = False, ch: str = "c") -> Dict[str, Any]:
    event: Dict[str, Any] = {"t": t, "p": "consumer1", "type": "recv", "f": "msg", "v": n, "src": "p1",
                             "ch": ch, "a": attempts}
    if held:
        event["held"] = 1
    return event


def _pub(t: float, n: int) -> List[Dict[str, Any]]:
    return [
        {"t": t, "p": "p1", "type": "invoke", "f": "pub", "v": [n]},
        {"t": t + 0.01, "p": "p1", "type": "ok", "f": "pub", "v": [n]},
    ]


class CheckDeferredTests(SynchronousTestCase):
    """check_deferred: deferred deliveries against the client's clock."""

    def test_on_time(self) -> None:
        """Deliveries after their due time are neither early nor lost; lateness is measured."""
        events = _dpub(100.0, 1, 2.0) + _dpub(100.5, 2, 1.0) + [_recv(102.1, 1), _recv(101.6, 2)]
        result = check_deferred(events, "c", bound=0.0)
        self.assertEqual((result.deferred, result.early, result.queue.lost), (2, 0, 0))
        self.assertAlmostEqual(result.max_late_s, 0.1, places=3)
        self.assertAlmostEqual(result.max_early_s, -0.1, places=3)

    def test_early(self) -> None:
        """A delivery before invoke + delay - bound - tolerance is early, and named."""
        events = _dpub(100.0, 1, 5.0) + [_recv(102.0, 1)]
        result = check_deferred(events, "c", bound=0.0)
        self.assertEqual(result.early, 1)
        self.assertEqual(result.early_sample, ["p1:1 3.00s early"])
        self.assertEqual(result.max_early_s, 3.0)

    def test_bound(self) -> None:
        """Up to bound (plus the tolerance) early is allowed; more is not."""
        events = _dpub(100.0, 1, 5.0) + _dpub(100.0, 2, 5.0) + [_recv(102.02, 1), _recv(101.9, 2)]
        result = check_deferred(events, "c", bound=3.0)
        self.assertEqual(result.early, 1)
        self.assertEqual(result.early_sample, ["p1:2 3.10s early"])

    def test_redelivery_early(self) -> None:
        """A second delivery is checked too: a taken-over copy delivered early counts."""
        events = _dpub(100.0, 1, 5.0) + [_recv(105.1, 1), _recv(101.0, 1, attempts=1)]
        result = check_deferred(events, "c", bound=0.0)
        self.assertEqual(result.early, 1)
        self.assertEqual(result.queue.duplicates, 1)

    def test_lost_and_unknown(self) -> None:
        """An acknowledged DPUB never delivered is lost; an unanswered one is not counted."""
        events = _dpub(100.0, 1, 1.0) + _dpub(100.0, 2, 1.0, ok=False)
        result = check_deferred(events, "c", bound=0.0)
        self.assertEqual((result.deferred, result.queue.lost), (1, 1))
        self.assertIsNone(result.max_early_s)

    def test_other_channel(self) -> None:
        """Deliveries on another channel do not count."""
        events = _dpub(100.0, 1, 5.0) + [_recv(100.5, 1, ch="other")]
        result = check_deferred(events, "c", bound=0.0)
        self.assertEqual((result.early, result.queue.lost), (0, 1))

    def test_as_dict(self) -> None:
        """The figures hold the queue checker's and the timing ones."""
        figures = check_deferred(_dpub(100.0, 1, 1.0) + [_recv(101.5, 1)], "c", bound=0.0).as_dict()
        self.assertEqual((figures["acknowledged"], figures["deferred"], figures["early"]), (1, 1, 0))


class CheckTimeoutsTests(SynchronousTestCase):
    """check_timeouts: held messages delivered again, not before their timeout."""

    def test_requeued_in_time(self) -> None:
        """A held message delivered again after the timeout passes; the gap is measured."""
        events = _pub(100.0, 10) + [_recv(100.1, 10, held=True), _recv(103.3, 10, attempts=2)]
        result = check_timeouts(events, "c", msg_timeout=3.0, bound=0.0)
        self.assertEqual((result.held, result.early, result.not_redelivered), (1, 0, 0))
        self.assertEqual((result.min_requeue_s, result.max_requeue_s), (3.2, 3.2))

    def test_early(self) -> None:
        """Delivered again before msg_timeout - bound - tolerance: early."""
        events = _pub(100.0, 10) + [_recv(100.1, 10, held=True), _recv(101.0, 10, attempts=2)]
        result = check_timeouts(events, "c", msg_timeout=3.0, bound=1.0)
        self.assertEqual(result.early, 1)
        self.assertEqual(result.early_sample, ["p1:10 again after 0.90s"])

    def test_bound_allows(self) -> None:
        """Within the bound and tolerance it is not early."""
        events = _pub(100.0, 10) + [_recv(100.1, 10, held=True), _recv(101.7, 10, attempts=2)]
        self.assertEqual(check_timeouts(events, "c", msg_timeout=3.0, bound=1.0).early, 0)

    def test_not_redelivered(self) -> None:
        """A held message never delivered again is named, though the queue checker sees it delivered."""
        events = _pub(100.0, 10) + _pub(100.0, 11) + [_recv(100.1, 10, held=True), _recv(100.1, 11)]
        result = check_timeouts(events, "c", msg_timeout=3.0, bound=0.0)
        self.assertEqual((result.not_redelivered, result.not_redelivered_sample), (1, ["p1:10"]))
        self.assertEqual(result.queue.lost, 0)

    def test_later_deliveries(self) -> None:
        """Only the delivery after the held one counts, whatever comes later."""
        events = _pub(100.0, 10) + [
            _recv(100.1, 10, held=True), _recv(103.2, 10, attempts=2), _recv(103.3, 10, attempts=3)]
        result = check_timeouts(events, "c", msg_timeout=3.0, bound=0.0)
        self.assertEqual((result.early, result.min_requeue_s), (0, 3.1))
