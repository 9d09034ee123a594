"""
Tests for txnsq.client.message: a message answers once through its
delegate, and says whether it was answered or taken over by its handler.
"""

from __future__ import annotations

from typing import Any, List, Optional, Tuple

from twisted.trial.unittest import SynchronousTestCase

from txnsq.client.message import Message


class RecordingDelegate:
    """A MessageDelegate that records what it is asked to send."""

    def __init__(self) -> None:
        self.calls: List[Tuple[Any, ...]] = []

    def on_finish(self, message: Message) -> None:
        self.calls.append(("FIN", message.id))

    def on_requeue(self, message: Message, delay: Optional[float], backoff: bool) -> None:
        self.calls.append(("REQ", message.id, delay, backoff))

    def on_touch(self, message: Message) -> None:
        self.calls.append(("TOUCH", message.id))


def make_message(delegate: RecordingDelegate) -> Message:
    return Message(b"0123456789abcdef", b"body", 1700000000000000000, 2, "127.0.0.1:4150", delegate)


class MessageTests(SynchronousTestCase):
    """Answers go to the delegate, at most once."""

    def setUp(self) -> None:
        self.delegate = RecordingDelegate()
        self.message = make_message(self.delegate)

    def test_attributes(self) -> None:
        """A message exposes its id, body, timestamp, attempts and origin."""
        m = self.message
        self.assertEqual(
            (m.id, m.body, m.timestamp, m.attempts, m.nsqd_address),
            (b"0123456789abcdef", b"body", 1700000000000000000, 2, "127.0.0.1:4150"),
        )
        self.assertIn("0123456789abcdef", repr(m))

    def test_finish(self) -> None:
        """finish asks the delegate for FIN and marks the message answered."""
        self.assertFalse(self.message.has_responded())
        self.message.finish()
        self.assertEqual(self.delegate.calls, [("FIN", b"0123456789abcdef")])
        self.assertTrue(self.message.has_responded())

    def test_requeue(self) -> None:
        """requeue passes the delay (seconds or None) and the backoff flag."""
        self.message.requeue()
        other = make_message(self.delegate)
        other.requeue(2.5, backoff=False)
        self.assertEqual(
            self.delegate.calls,
            [("REQ", b"0123456789abcdef", None, True), ("REQ", b"0123456789abcdef", 2.5, False)],
        )

    def test_negative_delay(self) -> None:
        """A negative requeue delay is refused and the message stays unanswered."""
        self.assertRaises(ValueError, self.message.requeue, -1)
        self.assertFalse(self.message.has_responded())
        self.assertEqual(self.delegate.calls, [])

    def test_double_finish_ignored(self) -> None:
        """A second finish, or a requeue after it, sends nothing and logs once."""
        self.message.finish()
        self.message.finish()
        self.message.requeue()
        self.message.finish()
        self.assertEqual(self.delegate.calls, [("FIN", b"0123456789abcdef")])
        self.assertEqual(len(self.flushLoggedErrors()), 0)

    def test_finish_after_requeue_ignored(self) -> None:
        """A finish after a requeue sends nothing."""
        self.message.requeue(0)
        self.message.finish()
        self.assertEqual(self.delegate.calls, [("REQ", b"0123456789abcdef", 0, True)])

    def test_touch(self) -> None:
        """touch may be repeated before an answer and is ignored after it."""
        self.message.touch()
        self.message.touch()
        self.message.finish()
        self.message.touch()
        self.assertEqual(
            self.delegate.calls,
            [("TOUCH", b"0123456789abcdef"), ("TOUCH", b"0123456789abcdef"), ("FIN", b"0123456789abcdef")],
        )

    def test_async(self) -> None:
        """enable_async marks the message as answered by its handler later."""
        self.assertFalse(self.message.is_async())
        self.message.enable_async()
        self.assertTrue(self.message.is_async())
        self.assertFalse(self.message.has_responded())

    def test_slots(self) -> None:
        """Messages are made per delivery: no per-instance dict."""
        self.assertFalse(hasattr(self.message, "__dict__"))
