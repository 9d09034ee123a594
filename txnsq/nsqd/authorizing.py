# -*- test-case-name: tests.test_auth -*-
"""
AUTH on an nsqd connection: the auth server's query (an HTTP request, so
asynchronous) and the commands held while it is pending.

:class:`AuthGate` is mixed into :class:`txnsq.nsqd.tcp.NSQDProtocol`; what
is allowed, and the errors, are decided by the connection's
:class:`txnsq.protocol.handshake.ServerHandshake`. While the auth server is
asked, reading pauses and the command that needs the answer waits; once it
answers, that command and those after it run.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable, Dict, Optional

from twisted.logger import Logger
from twisted.python.failure import Failure

from txnsq.addresses import go_address
from txnsq.protocol.errors import ProtocolError, protocol_error
from txnsq.protocol.v2 import Command

if TYPE_CHECKING:
    from twisted.internet.interfaces import IReactorTime, ITransport

    from txnsq.nsqd.features import ServerFeatures
    from txnsq.protocol.auth import AuthState
    from txnsq.protocol.handshake import ServerHandshake

__all__ = ["AuthGate"]


class AuthGate:
    """The AUTH command and Go's ``CheckAuth`` before SUB, PUB, MPUB, DPUB."""

    _log = Logger()

    if TYPE_CHECKING:
        transport: ITransport
        clock: IReactorTime
        features: ServerFeatures
        tls: bool
        _shake: ServerHandshake
        _handlers: Dict[bytes, Callable[[Command], None]]
        _dead: bool
        _blocked: bool
        _held_command: Optional[Command]
        _auth_query: Any

        def _write(self, data: bytes) -> None: ...
        def _run(self) -> None: ...
        def _send_error(self, error: ProtocolError) -> None: ...
        def _peer(self) -> str: ...
        def _common_name(self) -> str: ...

    @property
    def auth_state(self) -> Optional[AuthState]:
        """The authorizations of the last AUTH, else ``None``."""
        return self._shake.auth_state

    def _auth(self, command: Command) -> None:
        body = command.body
        assert isinstance(body, bytes)
        secret = self._shake.auth(body)
        self._ask_auth_server(secret, self._authenticated)

    def _authenticated(self, state: AuthState) -> None:
        """The auth server answered AUTH: keep its authorizations, reply."""
        self._write(self._shake.authenticated(state))

    def _ask_auth_server(self, secret: str, done: Callable[[Any], None]) -> None:
        """
        Query the auth servers; commands wait (and reading pauses) until
        the answer, which goes to ``done``.  A failure is Go's fatal
        E_AUTH_FAILED, with the reason logged but not sent (nor the secret).
        """
        self._blocked = True
        self.transport.pauseProducing()  # type: ignore[attr-defined]
        host = go_address(self.transport.getPeer())[1]
        query = self.features.auth.query(host, self.tls, secret, self._common_name())
        self._auth_query = query

        def answered(state: Any) -> None:
            self._auth_query = None
            if self._dead:
                return
            try:
                done(state)
            except ProtocolError as error:
                self._send_error(error)
                return
            self._unblock()

        def failed(failure: Failure) -> None:
            self._auth_query = None
            if self._dead:
                return
            self._log.warn(
                "PROTOCOL(V2): [{peer}] AUTH failed {error}",
                peer=self._peer(),
                error=failure.getErrorMessage(),
            )
            self._send_error(protocol_error("E_AUTH_FAILED", "AUTH failed"))

        query.addCallbacks(answered, failed)
        query.addErrback(lambda failure: self._log.failure("AUTH", failure))

    def _unblock(self) -> None:
        """The auth server answered: run the held command and what follows."""
        self._blocked = False
        self.transport.resumeProducing()  # type: ignore[attr-defined]
        held, self._held_command = self._held_command, None
        if held is not None:
            try:
                self._handlers[held.name](held)
            except ProtocolError as error:
                self._send_error(error)
                return
        self._run()

    def _authorized(self, command: Command, topic: str, channel: str) -> bool:
        """
        Go's CheckAuth before SUB, PUB and DPUB (MPUB's is its precheck).
        ``False`` means the authorizations expired and are being fetched
        again: the command is held and runs again once they are back.

        :raises ProtocolError: E_AUTH_FIRST, E_UNAUTHORIZED (fatal).
        """
        if self.features.auth is None:
            return True
        return self._check_auth(command.name.decode("ascii"), topic, channel, _nothing, command)

    def _check_auth(
        self,
        verb: str,
        topic: str,
        channel: str,
        then: Callable[[], None],
        held: Optional[Command] = None,
    ) -> bool:
        """
        Go's CheckAuth.  ``False`` means the authorizations expired and are
        being fetched again (reading pauses, ``held`` waits); once they are
        back and allow ``topic``/``channel``, ``then()`` runs, then ``held``
        and the commands after it.

        :raises ProtocolError: E_AUTH_FIRST, E_UNAUTHORIZED (fatal), now or
            (E_UNAUTHORIZED) when the new authorizations arrive.
        """
        shake = self._shake
        if shake.check_auth(verb, topic, channel, self.clock.seconds()):
            return True
        self._held_command = held

        def refreshed(new_state: AuthState) -> None:
            shake.reauthorized(new_state, verb, topic, channel)
            then()

        self._ask_auth_server(shake.auth_secret, refreshed)
        return False


def _nothing() -> None:
    """Nothing more to do."""
