# -*- test-case-name: tests.test_client_connection -*-
"""
How a client connection ends: a clean :meth:`ConnectionClosing.close` (CLS,
CLOSE_WAIT, the messages in flight answered, each wait bounded), the read
deadline, and dropping the connection on bad data or a fatal error.

:class:`ConnectionClosing` is mixed into
:class:`txnsq.client.connection.NSQConnection`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Deque, Dict, List, Optional, Tuple

from twisted.internet.defer import Deferred
from twisted.internet.interfaces import IDelayedCall, IReactorTime, ITransport
from twisted.logger import Logger
from twisted.python.failure import Failure

from txnsq.client.config import ConnectionConfig
from txnsq.client.delegate import NSQConnectionError
from txnsq.client.states import STATE_CLOSING, STATE_READY
from txnsq.protocol import v2_client as codec
from txnsq.protocol.v2_client import CLOSE_WAIT, NSQError

__all__ = ["ConnectionClosing"]


class ConnectionClosing:
    """The closing side of a client connection (see the module)."""

    _log = Logger()

    if TYPE_CHECKING:
        transport: Optional[ITransport]
        address: str
        config: ConnectionConfig
        clock: IReactorTime
        identify_response: Dict[str, Any]
        in_flight: int
        tls: bool
        _state: int
        _pending: Deque[Tuple["Deferred[None]", bytes]]
        _drop_reason: Optional[Failure]
        _sub_sent: bool
        _lost: bool
        _draining: bool
        _disconnecting: bool
        _closed_waiters: List["Deferred[None]"]
        _last_read: float
        _read_call: Optional[IDelayedCall]
        _close_call: Optional[IDelayedCall]
        _tls_abort_call: Optional[IDelayedCall]

        def _write(self, data: bytes) -> None: ...
        def _flush_batch(self) -> None: ...

    # -- closing ---------------------------------------------------------------

    def close(self) -> "Deferred[None]":
        """
        Close cleanly; fires once the connection is gone (never fails).

        No command may be sent any more.  A subscribed connection sends CLS
        and waits for CLOSE_WAIT, then for the messages in flight to be
        answered (at most nsqd's message timeout, after which nsqd requeues
        them anyway); any connection waits for the answers to commands
        already sent.  Those waits are bounded by ``close_timeout``.  Then
        the transport is closed (a TLS one is aborted if the server does not
        answer the close_notify within ``close_timeout``).
        """
        done: "Deferred[None]" = Deferred()
        if self._lost:
            done.callback(None)
            return done
        self._closed_waiters.append(done)
        if self._state == STATE_CLOSING or self._disconnecting:
            return done
        if self._state < STATE_READY:
            if self.transport is None:
                # Never connected: there is nothing to close.
                self._closed_waiters.remove(done)
                done.callback(None)
            else:
                self._drop(NSQConnectionError("connection to nsqd %s closed while connecting" % (self.address,)))
            return done
        self._state = STATE_CLOSING
        self._close_call = self.clock.callLater(self.config.close_timeout, self._disconnect)
        if self._sub_sent:
            waiting: "Deferred[None]" = Deferred()
            self._pending.append((waiting, CLOSE_WAIT))
            self._write(codec.cls())
            # Losing the connection fails it; that is fine here.
            waiting.addErrback(lambda failure: None)
        else:
            self._maybe_finish_closing()
        return done

    def _maybe_finish_closing(self) -> None:
        """While closing: disconnect once nothing is awaited any more."""
        if self._state != STATE_CLOSING or self._disconnecting or self._pending:
            return
        if self.in_flight > 0:
            if not self._draining:
                self._draining = True
                call, self._close_call = self._close_call, None
                if call is not None and call.active():
                    call.cancel()
                msg_timeout = self.identify_response.get("msg_timeout")
                wait = msg_timeout / 1000.0 if isinstance(msg_timeout, (int, float)) and msg_timeout > 0 else 60.0
                self._close_call = self.clock.callLater(wait, self._disconnect)
            return
        self._disconnect()

    def _disconnect(self) -> None:
        """Close the transport (after pending writes); bound a TLS shutdown."""
        if self._disconnecting or self._lost:
            return
        self._disconnecting = True
        call, self._close_call = self._close_call, None
        if call is not None and call.active():
            call.cancel()
        # The last FIN may still be held back by the read being handled.
        self._flush_batch()
        self.transport.loseConnection()  # type: ignore[union-attr]
        if self.tls:
            # Twisted's TLS waits for the peer's close_notify, which a
            # server may never send.
            self._tls_abort_call = self.clock.callLater(self.config.close_timeout, self._abort)

    def _abort(self) -> None:
        self._tls_abort_call = None
        if not self._lost:
            self.transport.abortConnection()  # type: ignore[union-attr]

    def _check_read(self) -> None:
        """The read deadline: drop a connection silent for ``read_timeout``."""
        self._read_call = None
        timeout = self.config.read_timeout
        idle = self.clock.seconds() - self._last_read
        if idle >= timeout:
            self._drop(
                NSQConnectionError("no data from nsqd %s for %gs (read timeout)" % (self.address, timeout))
            )
            return
        self._read_call = self.clock.callLater(timeout - idle, self._check_read)

    def _protocol_violation(self, what: str) -> None:
        self._drop(NSQConnectionError("protocol error from nsqd %s: %s" % (self.address, what)))

    def _drop(self, error: Exception, abort: bool = True) -> None:
        """
        End the connection because of ``error``, which becomes the reason
        given to everything waiting (at ``connectionLost``); nothing more
        is read or sent.

        :param abort: abort at once (bad data); else close after what was
            written (nsqd is closing the connection itself).
        """
        if self._drop_reason is not None or self._lost:
            return
        self._drop_reason = Failure(error)
        if not isinstance(error, NSQError):
            self._log.info("dropping connection to nsqd {address}: {error}", address=self.address, error=str(error))
        if abort:
            self.transport.abortConnection()  # type: ignore[union-attr]
        else:
            self._disconnect()
