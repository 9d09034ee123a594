# -*- test-case-name: tests.test_client_connection -*-
"""
The commands a ready client connection sends: SUB, PUB, MPUB, DPUB and RDY,
which :class:`txnsq.client.connection.NSQConnection` answers with
Deferreds, and FIN, REQ and TOUCH, which a :class:`Message <txnsq.client.message.Message>`
sends through its connection (its ``MessageDelegate``) and which wait for
nothing.

:class:`ConnectionCommands` is mixed into ``NSQConnection``, which owns the
transport, the queue of commands waiting for an answer and the state.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Deque, List, Optional, Tuple

from twisted.internet.defer import Deferred, fail
from twisted.logger import Logger
from twisted.python.failure import Failure

from txnsq.client.config import ConnectionConfig
from txnsq.client.delegate import ConnectionDelegate, NSQConnectionError
from txnsq.client.message import Message
from txnsq.client.states import STATE_NAMES, STATE_READY
from txnsq.protocol import v2_client as codec
from txnsq.protocol.v2_client import OK, NSQError

__all__ = ["ConnectionCommands"]


class ConnectionCommands:
    """The command side of a client connection (see the module)."""

    _log = Logger()

    if TYPE_CHECKING:
        address: str
        config: ConnectionConfig
        delegate: ConnectionDelegate
        max_rdy_count: int
        rdy_count: int
        in_flight: int
        subscribed: bool
        _state: int
        _pending: Deque[Tuple["Deferred[None]", bytes]]
        _drop_reason: Optional[Failure]
        _sub_sent: bool
        _lost: bool
        _late_ack_logged: bool
        _draining: bool

        def _write(self, data: bytes) -> None: ...
        def _maybe_finish_closing(self) -> None: ...

    def _command(self, data: bytes, expected: bytes = OK) -> "Deferred[None]":
        """Send a command nsqd answers; its Deferred fires on the answer."""
        if self._state != STATE_READY or self._drop_reason is not None:
            state = STATE_NAMES[self._state] if self._drop_reason is None else "closing"
            return fail(NSQConnectionError("connection to nsqd %s is %s" % (self.address, state)))
        waiting: "Deferred[None]" = Deferred()
        self._pending.append((waiting, expected))
        self._write(data)
        return waiting

    # -- commands --------------------------------------------------------------

    def subscribe(self, topic: str, channel: str) -> "Deferred[None]":
        """
        SUB: fires once subscribed; fails with :class:`NSQError`
        (``E_BAD_TOPIC``, ``E_BAD_CHANNEL`` checked before sending,
        ``E_INVALID`` when already subscribed, or nsqd's answer) or
        :class:`NSQConnectionError`.
        """
        try:
            codec.check_topic("SUB", topic)
            codec.check_channel("SUB", channel)
        except NSQError as error:
            return fail(error)
        if self._sub_sent:
            return fail(NSQError("E_INVALID", "cannot SUB in current state", fatal=False))
        waiting = self._command(codec.sub(topic, channel))
        if self._state == STATE_READY:
            self._sub_sent = True

        def subscribed(result: None) -> None:
            self.subscribed = True

        return waiting.addCallback(subscribed)

    def publish(self, topic: str, body: bytes) -> "Deferred[None]":
        """PUB one message; fires on OK, fails with :class:`NSQError` or :class:`NSQConnectionError`."""
        try:
            codec.check_topic("PUB", topic)
        except NSQError as error:
            return fail(error)
        return self._command(codec.pub(topic, body))

    def multi_publish(self, topic: str, bodies: List[bytes]) -> "Deferred[None]":
        """MPUB several messages at once (atomically); as :meth:`publish`."""
        try:
            codec.check_topic("MPUB", topic)
        except NSQError as error:
            return fail(error)
        bodies = list(bodies)
        if not bodies:
            return fail(NSQError("E_BAD_BODY", "MPUB invalid message count 0", fatal=False))
        return self._command(codec.mpub(topic, bodies))

    def deferred_publish(self, topic: str, delay: float, body: bytes) -> "Deferred[None]":
        """DPUB one message delivered ``delay`` seconds from now; as :meth:`publish`."""
        try:
            codec.check_topic("DPUB", topic)
        except NSQError as error:
            return fail(error)
        if delay < 0:
            return fail(NSQError("E_INVALID", "DPUB timeout %r out of range" % (delay,), fatal=False))
        return self._command(codec.dpub(topic, int(round(delay * 1000)), body))

    def send_rdy(self, count: int) -> None:
        """
        RDY: let nsqd send up to ``count`` messages at once; ignored unless
        the connection is ready.

        :raises ValueError: ``count`` outside ``0..max_rdy_count`` (nsqd
            would drop the connection).
        """
        if not 0 <= count <= self.max_rdy_count:
            raise ValueError("RDY %d outside 0..%d" % (count, self.max_rdy_count))
        if self._state != STATE_READY:
            return
        self.rdy_count = count
        self._write(codec.rdy(count))

    # -- MessageDelegate ---------------------------------------------------------

    def _ignored_after_close(self, verb: str, message: Message) -> bool:
        if not self._lost:
            return False
        if not self._late_ack_logged:
            self._late_ack_logged = True
            self._log.info(
                "{verb} of message {id} ignored: the connection to nsqd {address} is closed"
                " (nsqd requeues its messages)",
                verb=verb,
                id=message.id.decode("ascii", "replace"),
                address=self.address,
            )
        return True

    def on_finish(self, message: Message) -> None:
        """Send FIN for ``message`` and tell the delegate."""
        if self._ignored_after_close("FIN", message):
            return
        self._write(codec.fin(message.id))
        self.in_flight -= 1
        self.delegate.on_message_finished(self, message)  # type: ignore[arg-type]  # the mixin is an NSQConnection
        if self._draining:
            self._maybe_finish_closing()

    def on_requeue(self, message: Message, delay: Optional[float], backoff: bool) -> None:
        """Send REQ for ``message`` (``delay`` ``None``: go-nsq's computed delay)."""
        if self._ignored_after_close("REQ", message):
            return
        if delay is None:
            delay = self.config.requeue_delay(message.attempts)
        self._write(codec.req(message.id, int(round(delay * 1000))))
        self.in_flight -= 1
        self.delegate.on_message_requeued(self, message, backoff)  # type: ignore[arg-type]
        if self._draining:
            self._maybe_finish_closing()

    def on_touch(self, message: Message) -> None:
        """Send TOUCH for ``message``."""
        if self._ignored_after_close("TOUCH", message):
            return
        self._write(codec.touch(message.id))
