# -*- test-case-name: tests.test_client_connection -*-
"""
What a client connection reports to its owner (:class:`ConnectionDelegate`)
and the error its waiting commands fail with (:class:`NSQConnectionError`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Optional, Protocol as TypingProtocol

from twisted.logger import Logger
from twisted.python.failure import Failure

from txnsq.client.message import Message
from txnsq.protocol.v2_client import NSQError

if TYPE_CHECKING:
    from txnsq.client.connection import NSQConnection

__all__ = ["ConnectionDelegate", "NSQConnectionError", "NullDelegate"]


class NSQConnectionError(ConnectionError):
    """
    The connection to nsqd failed, was lost or is not usable; commands
    waiting for an answer fail with it.

    :ivar reason: the underlying failure, when there is one.
    """

    def __init__(self, message: str, reason: Optional[Failure] = None) -> None:
        ConnectionError.__init__(self, message)
        self.reason = reason


class ConnectionDelegate(TypingProtocol):
    """What a connection reports to its owner (a Consumer or a Producer)."""

    def on_message(self, conn: "NSQConnection", message: Message) -> None:
        """A message arrived (``conn.in_flight`` already counts it)."""

    def on_message_finished(self, conn: "NSQConnection", message: Message) -> None:
        """FIN was sent for ``message``."""

    def on_message_requeued(self, conn: "NSQConnection", message: Message, backoff: bool) -> None:
        """REQ was sent for ``message``; ``backoff`` as the handler asked."""

    def on_error(self, conn: "NSQConnection", error: NSQError) -> None:
        """An error frame no command was waiting for (e.g. E_FIN_FAILED)."""

    def on_close(self, conn: "NSQConnection", reason: Failure) -> None:
        """The connection (which had become ready) is gone; called once."""


class NullDelegate:
    """The delegate of a connection nobody watches: errors are logged."""

    _log = Logger()

    def on_message(self, conn: "NSQConnection", message: Message) -> None:
        self._log.warn("unexpected message {message!r} on {address}", message=message, address=conn.address)

    def on_message_finished(self, conn: "NSQConnection", message: Message) -> None:
        pass

    def on_message_requeued(self, conn: "NSQConnection", message: Message, backoff: bool) -> None:
        pass

    def on_error(self, conn: "NSQConnection", error: NSQError) -> None:
        self._log.warn("nsqd {address}: {error}", address=conn.address, error=str(error))

    def on_close(self, conn: "NSQConnection", reason: Failure) -> None:
        pass
