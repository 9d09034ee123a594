# -*- test-case-name: tests.test_auth -*-
"""
AUTH on an nsqd connection: the auth server's query (an HTTP request, so
asynchronous) and the commands held while it is pending.

:class:`AuthGate` is a part of a connection's commands
(:class:`txnsq.nsqd.commands.V2Commands`); what is allowed, and the
errors, are decided by the connection's
:class:`txnsq.protocol.handshake.ServerHandshake`.  While the auth server
is asked, reading pauses and the command that needs the answer waits; once
it answers, that command and those after it run.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable, Optional

from twisted.logger import Logger
from twisted.python.failure import Failure

from txnsq.addresses import go_address
from txnsq.protocol.errors import ProtocolError, protocol_error
from txnsq.protocol.handshake import ServerHandshake
from txnsq.protocol.v2 import Command

if TYPE_CHECKING:
    from txnsq.nsqd.tcp import NSQDProtocol
    from txnsq.protocol.auth import AuthState

__all__ = ["AuthGate"]


class AuthGate:
    """
    The AUTH command and Go's ``CheckAuth`` before SUB, PUB, MPUB, DPUB,
    for one connection.

    :param connection: the connection: paused while the auth server is
        asked, and told of errors (``send_error``).
    :param shake: the connection's handshake rules, which keep the
        authorizations.
    :param resume: called once the auth server answered and allowed what
        waited, with the command that was held (or ``None``): it runs that
        command and the ones read after it.

    :ivar waiting: the auth server is being asked; no command runs.
    """

    _log = Logger()

    def __init__(
        self,
        connection: NSQDProtocol,
        shake: ServerHandshake,
        resume: Callable[[Optional[Command]], None],
    ) -> None:
        self._connection = connection
        self._shake = shake
        self._resume = resume
        self._features = connection.features
        self._clock = connection.clock
        self.waiting = False
        # The command to run once the auth server answered.
        self._held: Optional[Command] = None
        # The Deferred of the pending query.
        self._query: Any = None

    def cancel(self) -> None:
        """The connection is gone: forget the pending query, if any."""
        query, self._query = self._query, None
        if query is not None:
            query.cancel()

    def auth(self, command: Command) -> None:
        """
        The AUTH command: ask the auth server about the secret.

        :raises ProtocolError: Go's AUTH errors (not enabled, empty or too
            long a secret, already authed).
        """
        body = command.body
        assert isinstance(body, bytes)
        secret = self._shake.auth(body)
        self._ask_auth_server(secret, self._authenticated)

    def _authenticated(self, state: AuthState) -> None:
        """The auth server answered AUTH: keep its authorizations, reply."""
        self._connection.write(self._shake.authenticated(state))

    def _ask_auth_server(self, secret: str, done: Callable[[Any], None]) -> None:
        """
        Query the auth servers; commands wait (and reading pauses) until
        the answer, which goes to ``done``.  A failure is Go's fatal
        E_AUTH_FAILED, with the reason logged but not sent (nor the secret).
        """
        connection = self._connection
        self.waiting = True
        connection.pause_reading()
        host = go_address(connection.transport.getPeer())[1]
        query = self._features.auth.query(host, connection.tls, secret, connection.tls_common_name)
        self._query = query

        def answered(state: Any) -> None:
            self._query = None
            if connection.dead:
                return
            try:
                done(state)
            except ProtocolError as error:
                connection.send_error(error)
                return
            self._unblock()

        def failed(failure: Failure) -> None:
            self._query = None
            if connection.dead:
                return
            self._log.warn(
                "PROTOCOL(V2): [{peer}] AUTH failed {error}",
                peer=connection.peer_name(),
                error=failure.getErrorMessage(),
            )
            connection.send_error(protocol_error("E_AUTH_FAILED", "AUTH failed"))

        query.addCallbacks(answered, failed)
        query.addErrback(lambda failure: self._log.failure("AUTH", failure))

    def _unblock(self) -> None:
        """The auth server answered: run the held command and what follows."""
        self.waiting = False
        self._connection.resume_reading()
        held, self._held = self._held, None
        self._resume(held)

    def authorized(self, command: Command, topic: str, channel: str) -> bool:
        """
        Go's CheckAuth before SUB, PUB and DPUB (MPUB's is its precheck).
        ``False`` means the authorizations expired and are being fetched
        again: the command is held and runs again once they are back.

        :raises ProtocolError: E_AUTH_FIRST, E_UNAUTHORIZED (fatal).
        """
        if self._features.auth is None:
            return True
        return self.check_auth(command.name.decode("ascii"), topic, channel, _nothing, command)

    def check_auth(
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
        if shake.check_auth(verb, topic, channel, self._clock.seconds()):
            return True
        self._held = held

        def refreshed(new_state: AuthState) -> None:
            shake.reauthorized(new_state, verb, topic, channel)
            then()

        self._ask_auth_server(shake.auth_secret, refreshed)
        return False


def _nothing() -> None:
    """Nothing more to do."""
