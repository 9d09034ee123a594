# -*- test-case-name: tests.test_client_connection -*-
"""
The commands of a client connection in flight: those nsqd answers (SUB,
PUB, MPUB, DPUB, CLS), each waiting for its answer in the order they were
sent, and FIN, REQ and TOUCH, which a :class:`Message <txnsq.client.message.Message>`
sends through here (its ``MessageDelegate``) and which wait for nothing.

:class:`ConnectionCommands` is a part of
:class:`txnsq.client.connection.NSQConnection`, made by it (as amp's
``BoxDispatcher`` keeps a protocol's outstanding requests): the connection
owns the transport, the negotiation and its life, encodes the commands its
users call, and hands this part the answers it reads; the part is given
the means to write, the word for why commands are refused, and a call for
when a closing connection's messages have been answered.
"""

from __future__ import annotations

from collections import deque
from typing import TYPE_CHECKING, Callable, Deque, Optional, Tuple

from twisted.internet.defer import Deferred, fail
from twisted.logger import Logger
from twisted.python.failure import Failure

from txnsq.client.delegate import NSQConnectionError
from txnsq.client.message import Message
from txnsq.protocol import v2_client as codec
from txnsq.protocol.v2_client import CLOSE_WAIT, OK, NSQError

if TYPE_CHECKING:
    from txnsq.client.connection import NSQConnection

__all__ = ["ConnectionCommands"]


class ConnectionCommands:
    """
    The commands in flight of one client connection (see the module).

    :param connection: the connection: its ``address``, ``config`` and
        ``delegate``, and its ``in_flight`` count, which FIN and REQ
        bring down.
    :param write: writes one command to nsqd.
    :param refusal: the word for why commands may not be sent (the
        state: ``identifying``, ``closing``, ...), for the error.
    :param settled: called after a command was answered, and after a
        message was finished or requeued while :attr:`draining`: a closing
        connection may be done.

    :ivar accepting: commands may be sent: the connection is ready, not
        closing and not dropped; set by the connection.
    :ivar draining: the connection is closing and waits for the messages
        in flight to be answered; set by the connection.
    """

    _log = Logger()

    def __init__(
        self,
        connection: NSQConnection,
        write: Callable[[bytes], None],
        refusal: Callable[[], str],
        settled: Callable[[], None],
    ) -> None:
        self._connection = connection
        self._write = write
        self._refusal = refusal
        self._settled = settled
        # Commands sent and not answered yet, with the answer each expects.
        self._pending: Deque[Tuple["Deferred[None]", bytes]] = deque()
        self.accepting = False
        self.draining = False
        # The connection is gone: FIN, REQ, TOUCH are ignored (and said so once).
        self._lost = False
        self._late_ack_logged = False

    def send(self, data: bytes, expected: bytes = OK) -> "Deferred[None]":
        """
        Send a command nsqd answers; its Deferred fires on the answer (the
        ``expected`` response), or fails with :class:`NSQError` (nsqd's
        fatal error) or :class:`NSQConnectionError` (not ready, closing,
        lost, or a wrong answer).
        """
        if not self.accepting:
            return fail(
                NSQConnectionError("connection to nsqd %s is %s" % (self._connection.address, self._refusal()))
            )
        waiting: "Deferred[None]" = Deferred()
        self._pending.append((waiting, expected))
        self._write(data)
        return waiting

    def close_wait(self) -> None:
        """CLS, as closing sends it: its ``CLOSE_WAIT`` is awaited, its failure is fine."""
        waiting: "Deferred[None]" = Deferred()
        self._pending.append((waiting, CLOSE_WAIT))
        self._write(codec.cls())
        # Losing the connection fails it; that is fine here.
        waiting.addErrback(lambda failure: None)

    # -- answers -----------------------------------------------------------------

    @property
    def waiting(self) -> bool:
        """Some command sent waits for its answer."""
        return bool(self._pending)

    def answer(self, data: bytes) -> Optional[str]:
        """
        A response frame (``OK``, ``CLOSE_WAIT``) answers the oldest
        command waiting: fire it (one unasked for is logged).  Returns what
        is wrong when the answer is not the one expected (the command fails
        with :class:`NSQConnectionError`, and the connection must be
        dropped).
        """
        if not self._pending:
            self._log.warn(
                "nsqd {address} answered {data!r} to no command", address=self._connection.address, data=data[:64]
            )
            return None
        waiting, expected = self._pending.popleft()
        if data != expected:
            waiting.errback(
                Failure(
                    NSQConnectionError(
                        "nsqd %s answered %r, expected %r" % (self._connection.address, data[:64], expected)
                    )
                )
            )
            return "unexpected response %r" % (data[:64],)
        waiting.callback(None)
        self._settled()
        return None

    def fail_oldest(self, error: NSQError) -> bool:
        """A fatal error answered the oldest command waiting: fail it (``False``: none waits)."""
        if not self._pending:
            return False
        waiting, _ = self._pending.popleft()
        waiting.errback(Failure(error))
        return True

    def connection_lost(self, error: NSQConnectionError) -> None:
        """The connection is gone: fail every command waiting; ignore FIN, REQ, TOUCH from now on."""
        self._lost = True
        self.accepting = False
        pending, self._pending = self._pending, deque()
        for waiting, _ in pending:
            waiting.errback(Failure(error))

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
                address=self._connection.address,
            )
        return True

    def on_finish(self, message: Message) -> None:
        """Send FIN for ``message`` and tell the connection's delegate."""
        if self._ignored_after_close("FIN", message):
            return
        self._write(codec.fin(message.id))
        connection = self._connection
        connection.in_flight -= 1
        connection.delegate.on_message_finished(connection, message)
        if self.draining:
            self._settled()

    def on_requeue(self, message: Message, delay: Optional[float], backoff: bool) -> None:
        """Send REQ for ``message`` (``delay`` ``None``: go-nsq's computed delay)."""
        if self._ignored_after_close("REQ", message):
            return
        connection = self._connection
        if delay is None:
            delay = connection.config.requeue_delay(message.attempts)
        self._write(codec.req(message.id, int(round(delay * 1000))))
        connection.in_flight -= 1
        connection.delegate.on_message_requeued(connection, message, backoff)
        if self.draining:
            self._settled()

    def on_touch(self, message: Message) -> None:
        """Send TOUCH for ``message``."""
        if self._ignored_after_close("TOUCH", message):
            return
        self._write(codec.touch(message.id))
