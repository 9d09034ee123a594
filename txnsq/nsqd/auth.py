# -*- test-case-name: tests.test_auth -*-
"""
nsqd's AUTH client: asks the auth servers named by ``--auth-http-address``
what a client's secret grants, with Twisted's ``Agent``, never blocking the
reactor.

What is asked and how the reply is read is :mod:`txnsq.protocol.auth`;
this module is the HTTP side: Go's endpoint choice (a random server first,
then the others), timeouts, and errors that never carry the secret.
"""

from __future__ import annotations

import random
from typing import Any, Callable, List, Optional, Sequence, Tuple, Union

from twisted.internet.defer import Deferred
from twisted.internet.error import ConnectError
from twisted.internet.interfaces import IReactorTime
from twisted.python.failure import Failure
from twisted.web.iweb import IPolicyForHTTPS

from txnsq.http_client import GoHTTPClient, RequestTimedOut, describe_failure, status_error_text
from txnsq.protocol.auth import (
    AuthError,
    AuthState,
    auth_query_url,
    https_endpoint,
    parse_auth_response,
)

__all__ = ["AuthClient"]


def _describe(error: Optional[BaseException]) -> str:
    """One line about a failed attempt; never the request URL."""
    if isinstance(error, (AuthError, ConnectError)):
        return str(error)
    return describe_failure(error)


class AuthClient:
    """
    Asks the ``--auth-http-address`` servers about a client's secret, as Go
    nsqd's ``QueryAnyAuthd``: the addresses are tried one at a time from a
    random starting point until one gives a usable reply.

    Each HTTP request may take ``request_timeout`` seconds from sending to
    the end of the body, connecting at most ``connect_timeout`` of those
    (Go's ``--http-client-request-timeout`` and
    ``--http-client-connect-timeout``).  Connections are not reused, as Go
    builds a new HTTP client for every query.  A 403 from a plain-HTTP URL
    is retried once over HTTPS at the port its JSON body names
    (``{"https_port": N}``), as Go's ``http_api`` client does.
    """

    def __init__(
        self,
        addresses: Sequence[str],
        reactor: Any,
        connect_timeout: float,
        request_timeout: float,
        method: str = "get",
        *,
        clock: Optional[IReactorTime] = None,
        tls_policy: Optional[IPolicyForHTTPS] = None,
        pick_start: Optional[Callable[[int], int]] = None,
    ) -> None:
        """
        :param addresses: ``host:port`` or full URLs, as the flag takes them.
        :param reactor: makes the connections (``IReactorTCP``,
            ``IReactorTime``, name resolution).
        :param method: ``"get"`` or ``"post"`` (``--auth-http-request-method``).
        :param clock: times the requests; the reactor when not given.
        :param tls_policy: checks the certificates of ``https`` servers
            (the default trusts the system's roots, as Go with no
            ``--tls-root-ca-file``).
        :param pick_start: ``pick_start(n)`` gives the index of the first
            address to try; random when not given.
        :raises ValueError: for no addresses or an unknown method.
        """
        if not addresses:
            raise ValueError("no auth addresses")
        if method not in ("get", "post"):
            raise ValueError("--auth-http-request-method must be post or get")
        self.addresses = list(addresses)
        self.method = method
        self.request_timeout = request_timeout
        self._clock: IReactorTime = clock if clock is not None else reactor
        self._pick_start = pick_start if pick_start is not None else random.randrange
        self._http = GoHTTPClient(
            reactor, connect_timeout, request_timeout, clock=self._clock, tls_policy=tls_policy
        )

    def query(
        self, remote_ip: str, tls: bool, secret: Union[str, bytes], common_name: str
    ) -> Deferred[AuthState]:
        """
        Fetch the authorizations for ``secret`` from a client at
        ``remote_ip`` (``""`` for a Unix socket), connected with ``tls``
        and presenting a certificate for ``common_name`` (``""`` if none).

        Cancelling the result stops the request in progress and tries no
        other address.

        :return: a Deferred firing with the :class:`AuthState`, or failing
            with :class:`AuthError` whose text gathers Go's ``failed to auth
            against ADDRESS - REASON`` for every address, joined by ``"; "``.
        """
        count = len(self.addresses)
        start = self._pick_start(count)
        failures: List[str] = []
        attempts: List[Deferred[AuthState]] = []
        cancelled: List[bool] = []

        def cancel(_: Deferred[AuthState]) -> None:
            # The Agent reports a cancelled request as one of its own
            # errors, not CancelledError; the flag tells the loop to stop.
            cancelled.append(True)
            if attempts:
                attempts[-1].cancel()

        result: Deferred[AuthState] = Deferred(cancel)

        def attempt(offset: int) -> None:
            if offset == count:
                result.errback(AuthError("; ".join(failures)))
                return
            address = self.addresses[(start + offset) % count]

            def succeeded(state: AuthState) -> None:
                if not cancelled:
                    result.callback(state)

            def failed(failure: Failure) -> None:
                if cancelled:
                    return
                failures.append(
                    "failed to auth against %s - %s" % (address, _describe(failure.value))
                )
                attempt(offset + 1)

            trying = Deferred.fromCoroutine(
                self._query_one(address, remote_ip, tls, secret, common_name)
            )
            attempts.append(trying)
            trying.addCallbacks(succeeded, failed)

        attempt(0)
        return result

    async def _query_one(
        self,
        address: str,
        remote_ip: str,
        tls: bool,
        secret: Union[str, bytes],
        common_name: str,
    ) -> AuthState:
        method, url, body = auth_query_url(
            address, remote_ip, tls, secret, common_name, self.method
        )
        code, phrase, content = await self._fetch(method, url, body)
        if code == 403 and not url.startswith("https"):
            url = https_endpoint(url, content)
            code, phrase, content = await self._fetch(method, url, body)
        if code != 200:
            raise AuthError(status_error_text(code, phrase, content))
        return parse_auth_response(content, self._clock.seconds())

    async def _fetch(
        self, method: str, url: str, body: Optional[bytes]
    ) -> Tuple[int, bytes, bytes]:
        try:
            requested = self._http.request(method, url, body)
        except UnicodeEncodeError:
            raise AuthError("invalid auth address (not ASCII)")
        try:
            return await requested
        except RequestTimedOut as error:
            raise AuthError(str(error))
