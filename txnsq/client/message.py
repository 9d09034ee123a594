# -*- test-case-name: tests.test_client_message -*-
"""
A message received from nsqd, and the answers a handler gives it: FIN
(:meth:`Message.finish`), REQ (:meth:`Message.requeue`) and TOUCH
(:meth:`Message.touch`).

A message answers through its *delegate* (the connection it came in on),
which writes the command and keeps the connection's accounting.  A message
is answered at most once: a second ``finish`` or ``requeue`` is ignored,
never sent, because nsqd would refuse it (``E_FIN_FAILED``) or, worse, the
id may by then belong to a redelivery held by another consumer.

One :class:`Message` is made per delivery, so the class has ``__slots__``
and its methods create nothing.
"""

from __future__ import annotations

from typing import Optional, Protocol

from twisted.logger import Logger

__all__ = ["Message", "MessageDelegate"]

_log = Logger(namespace="txnsq.client.message")

# Response states.
_WAITING = 0
_RESPONDED = 1
# Responded, and a further answer was already reported: later ones are
# ignored silently so a buggy handler cannot flood the log.
_REPORTED = 2


class MessageDelegate(Protocol):
    """What answers a message on the wire (its connection)."""

    def on_finish(self, message: "Message") -> None:
        """Send FIN for ``message``."""

    def on_requeue(self, message: "Message", delay: Optional[float], backoff: bool) -> None:
        """
        Send REQ for ``message``, deferred ``delay`` seconds (``None``: the
        delegate computes the delay from the attempts).
        """

    def on_touch(self, message: "Message") -> None:
        """Send TOUCH for ``message``."""


class Message:
    """
    One delivery of a message.

    :ivar id: the 16 ASCII hex bytes nsqd identifies it by.
    :ivar body: its bytes.
    :ivar timestamp: when it was published, in nanoseconds since the epoch.
    :ivar attempts: how many times it has been delivered, this one included.
    :ivar nsqd_address: ``host:port`` of the nsqd it came from.
    :ivar delegate: what sends the answers (the connection's commands).
    """

    __slots__ = ("id", "body", "timestamp", "attempts", "nsqd_address", "delegate", "_state", "_async")

    def __init__(
        self,
        id: bytes,
        body: bytes,
        timestamp: int,
        attempts: int,
        nsqd_address: str,
        delegate: MessageDelegate,
    ) -> None:
        self.id = id
        self.body = body
        self.timestamp = timestamp
        self.attempts = attempts
        self.nsqd_address = nsqd_address
        self.delegate = delegate
        self._state = _WAITING
        self._async = False

    def __repr__(self) -> str:
        return "<Message %s attempts=%d from %s, %d bytes>" % (
            self.id.decode("ascii", "replace"),
            self.attempts,
            self.nsqd_address,
            len(self.body),
        )

    def _answered_again(self, verb: str) -> None:
        if self._state == _RESPONDED:
            self._state = _REPORTED
            _log.warn(
                "{verb} of message {id} from {address} ignored: already answered",
                verb=verb,
                id=self.id.decode("ascii", "replace"),
                address=self.nsqd_address,
            )

    def finish(self) -> None:
        """Tell nsqd the message was handled (FIN); ignored once answered."""
        if self._state:
            self._answered_again("FIN")
            return
        self._state = _RESPONDED
        self.delegate.on_finish(self)

    def requeue(self, delay: Optional[float] = None, backoff: bool = True) -> None:
        """
        Give the message back to nsqd for another attempt (REQ); ignored
        once answered.

        :param delay: seconds before nsqd delivers it again; ``None`` lets
            the connection compute it from :attr:`attempts` (go-nsq's
            linear delay, capped).
        :param backoff: whether this failure should make the consumer back
            off (``False`` for a deliberate requeue).
        :raises ValueError: a negative ``delay``.
        """
        if delay is not None and delay < 0:
            raise ValueError("requeue delay must not be negative, not %r" % (delay,))
        if self._state:
            self._answered_again("REQ")
            return
        self._state = _RESPONDED
        self.delegate.on_requeue(self, delay, backoff)

    def touch(self) -> None:
        """
        Ask nsqd for more time to handle the message (TOUCH resets its
        in-flight timeout); ignored once answered.
        """
        if self._state:
            return
        self.delegate.on_touch(self)

    def enable_async(self) -> None:
        """
        The handler will answer later by itself: whoever runs the handler
        must not finish or requeue the message when it returns.
        """
        self._async = True

    def is_async(self) -> bool:
        """Whether :meth:`enable_async` was called."""
        return self._async

    def has_responded(self) -> bool:
        """Whether the message was finished or requeued."""
        return self._state != _WAITING
