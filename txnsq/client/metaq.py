# -*- test-case-name: tests.test_client_metaq -*-
"""
A MetaQ client on Twisted: reads a retained topic's partitions by offset
(``get``), stores messages (``put``), and asks for offsets, statistics and
the broker's version, over the MetaQ text protocol (see ``docs/metaq.md``)
through the sans-IO codec in :mod:`txnsq.protocol.metaq`.

- :func:`connect_metaq` connects (plain TCP, or TLS from the first byte as
  an nsqd started with ``--tls-required`` serves MetaQ) and, given a
  secret, sends txnsq's ``auth`` first;
- :class:`MetaqClient` is the connection: requests are pipelined, each
  carries its own opaque and its reply is matched by it, so replies may
  come in any order; every call returns a Deferred;
- :class:`MetaqReader` walks one partition from an offset, batch by batch.

What the replies mean (codes, the 301 "moved" body, a ``get``'s records
and their offsets) is decided by the sans-IO functions shared with the
blocking client (:mod:`txnsq.spark.metaq`) in
:mod:`txnsq.protocol.metaq_results`: :func:`put_result`, :func:`get_result`,
:func:`offset_result`, :func:`text_result`; they and its errors are
re-exported here, where the client's users meet them.

Time comes from the injected clock: one timer for all pending requests
(not one per request) fails those older than ``request_timeout`` with
:class:`MetaqTimeoutError`.
"""

from __future__ import annotations

import itertools
from collections import OrderedDict
from typing import Any, Callable, List, Optional, Tuple, Union

from twisted.internet.defer import CancelledError, Deferred, succeed
from twisted.internet.error import ConnectingCancelledError, ConnectionDone
from twisted.internet.interfaces import IDelayedCall, IReactorTime
from twisted.internet.protocol import Factory, Protocol
from twisted.logger import Logger
from twisted.python.failure import Failure

from txnsq.addresses import client_endpoint, split_host_port
from txnsq.protocol.metaq import (
    DEFAULT_OPAQUE,
    SUCCESS,
    AuthRequest,
    GetRequest,
    MetaqError,
    OffsetRequest,
    PutRequest,
    QuitRequest,
    ResultResponse,
    StatsRequest,
    ValueResponse,
    VersionRequest,
)
from txnsq.protocol.metaq_parser import MetaqResponseParser
from txnsq.protocol.message_id import id_time, id_time_threshold
from txnsq.protocol.metaq_results import (
    DEFAULT_GROUP,
    DEFAULT_MAX_REPLY_SIZE,
    GetResult,
    LogRecord,
    MetaqConnectionError,
    MetaqEndOfPartition,
    MetaqMoved,
    MetaqNotFound,
    MetaqProtocolError,
    MetaqRecordTooLarge,
    MetaqResultError,
    MetaqTimeoutError,
    body_text,
    get_result,
    offset_result,
    put_request,
    put_result,
    records_since,
    text_result,
)

__all__ = [
    "DEFAULT_GROUP",
    "DEFAULT_MAX_REPLY_SIZE",
    "GetResult",
    "LogRecord",
    "MetaqClient",
    "MetaqConnectionError",
    "MetaqEndOfPartition",
    "MetaqMoved",
    "MetaqNotFound",
    "MetaqProtocolError",
    "MetaqReader",
    "MetaqRecordTooLarge",
    "MetaqResultError",
    "MetaqTimeoutError",
    "connect_metaq",
    "get_result",
    "id_time",
    "id_time_threshold",
    "offset_result",
    "put_request",
    "put_result",
    "records_since",
    "text_result",
]

_log = Logger(namespace="txnsq.client.metaq")

_MAX_OPAQUE = 2**31 - 2  # DEFAULT_OPAQUE is the broker's "no opaque"

# ---------------------------------------------------------------------------
# The Twisted connection


Reply = Union[ResultResponse, ValueResponse]


class MetaqClient(Protocol):
    """
    One connection to a MetaQ broker.

    :ivar address: ``host:port`` it was made to.
    :ivar clock: times requests out.
    :ivar request_timeout: seconds a request waits for its reply (0: forever).
    :ivar connected: whether the connection is up and not closing.
    """

    def __init__(
        self,
        address: str,
        clock: IReactorTime,
        request_timeout: float = 30.0,
        max_reply_size: int = DEFAULT_MAX_REPLY_SIZE,
        close_timeout: float = 5.0,
    ) -> None:
        self.address = address
        self.clock = clock
        self.request_timeout = request_timeout
        self.max_reply_size = max_reply_size
        self.close_timeout = close_timeout
        self.connected = False
        self._parser = MetaqResponseParser(max_body_size=max_reply_size)
        # opaque -> (deferred, deadline); insertion order is deadline order.
        self._pending: "OrderedDict[int, Tuple[Deferred[Reply], float]]" = OrderedDict()
        self._opaques = itertools.count(1)
        self._timer: Optional[IDelayedCall] = None
        self._close_call: Optional[IDelayedCall] = None
        self._closed: "Deferred[None]" = Deferred()
        self._reason: Optional[Exception] = None

    def __repr__(self) -> str:
        return "<MetaqClient %s>" % (self.address,)

    # -- Protocol --------------------------------------------------------------

    def connectionMade(self) -> None:
        self.connected = True

    def dataReceived(self, data: bytes) -> None:
        pending = self._pending
        for item in self._parser.feed(data):
            if isinstance(item, MetaqError):
                self._fail_connection(
                    MetaqProtocolError("bad reply from %s: %s" % (self.address, item.message))
                )
                return
            waiting = pending.pop(item.opaque, None)
            if waiting is not None:
                waiting[0].callback(item)
            elif isinstance(item, ResultResponse) and item.code != SUCCESS:
                # An error about a line the broker could not read (its
                # opaque 2147483647), or a late reply to a timed-out request.
                _log.warn(
                    "MetaQ broker {address}: result {code} {message} (opaque {opaque})",
                    address=self.address,
                    code=item.code,
                    message=body_text(item.body),
                    opaque=item.opaque,
                )
        if not pending and self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def connectionLost(self, reason: Failure = None) -> None:  # type: ignore[assignment]
        self.connected = False
        for name in ("_timer", "_close_call"):
            call = getattr(self, name)
            if call is not None and call.active():
                call.cancel()
            setattr(self, name, None)
        error = self._reason
        if error is None:
            if reason is not None and not reason.check(ConnectionDone):
                error = MetaqConnectionError(
                    "connection to %s lost: %s" % (self.address, reason.getErrorMessage())
                )
            else:
                error = MetaqConnectionError("connection to %s closed" % (self.address,))
        self._reason = error
        pending = list(self._pending.values())
        self._pending.clear()
        for waiting, _deadline in pending:
            waiting.errback(Failure(error))
        if not self._closed.called:
            self._closed.callback(None)

    # -- requests --------------------------------------------------------------

    def _next_opaque(self) -> int:
        while True:
            opaque = next(self._opaques)
            if opaque > _MAX_OPAQUE:
                self._opaques = itertools.count(1)
                continue
            if opaque not in self._pending:
                return opaque

    def _request(self, make: Callable[[int], Any]) -> "Deferred[Reply]":
        """Send the request ``make(opaque)`` and wait for its reply."""
        if not self.connected:
            return _failed(self._reason or MetaqConnectionError("not connected to %s" % (self.address,)))
        opaque = self._next_opaque()
        try:
            data = make(opaque).encode()
        except ValueError as error:
            return _failed(error)
        def forget(_: "Deferred[Reply]") -> None:
            self._pending.pop(opaque, None)

        waiting: "Deferred[Reply]" = Deferred(forget)
        deadline = self.clock.seconds() + self.request_timeout
        self._pending[opaque] = (waiting, deadline)
        if self.request_timeout > 0 and self._timer is None:
            self._timer = self.clock.callLater(self.request_timeout, self._expire)
        assert self.transport is not None
        self.transport.write(data)
        return waiting

    def _expire(self) -> None:
        """Fail the requests past their deadline; wait for the next one."""
        self._timer = None
        now = self.clock.seconds()
        pending = self._pending
        while pending:
            opaque, (waiting, deadline) = next(iter(pending.items()))
            if deadline > now:
                self._timer = self.clock.callLater(deadline - now, self._expire)
                return
            del pending[opaque]
            waiting.errback(
                Failure(MetaqTimeoutError("no reply from %s in %gs" % (self.address, self.request_timeout)))
            )

    def put(
        self,
        topic: str,
        partition: int,
        body: bytes,
        flag: int = 0,
        attribute: Optional[bytes] = None,
    ) -> "Deferred[Tuple[int, int, int]]":
        """
        Store ``body`` (with ``attribute``, if given) in ``partition``
        (-1: the broker picks).

        :return: a Deferred firing with ``(msg_id, partition, offset)``, or
            failing with :class:`MetaqResultError` (refused),
            :class:`MetaqTimeoutError`, :class:`MetaqConnectionError`, or
            ``ValueError`` (a topic that cannot be a field).
        """
        try:
            request = put_request(topic, partition, body, flag, attribute)
        except ValueError as error:
            return _failed(error)

        def make(opaque: int) -> PutRequest:
            request.opaque = opaque
            return request

        return self._request(make).addCallback(put_result)

    def get(
        self,
        topic: str,
        partition: int,
        offset: int,
        max_size: int,
        group: str = DEFAULT_GROUP,
        follow_moved: bool = False,
    ) -> "Deferred[GetResult]":
        """
        At most ``max_size`` bytes of whole records from ``offset``.

        :param follow_moved: on 301, read once more from the offset the
            broker gave (e.g. offset 0 for "from the first record kept").
        :return: a Deferred firing with a :class:`GetResult` (no records:
            the first record is larger than ``max_size``), or failing with
            :class:`MetaqMoved` (301, not followed),
            :class:`MetaqEndOfPartition`, :class:`MetaqNotFound`,
            :class:`MetaqResultError`, :class:`MetaqProtocolError`,
            :class:`MetaqTimeoutError`, :class:`MetaqConnectionError`, or
            ``ValueError`` (``max_size`` above ``max_reply_size``).
        """
        if max_size > self.max_reply_size:
            return _failed(ValueError("max_size %d is above %d" % (max_size, self.max_reply_size)))
        result = self._request(
            lambda opaque: GetRequest(topic, group, partition, offset, max_size, opaque)
        ).addCallback(get_result, offset)
        if follow_moved:

            def moved(failure: Failure) -> Any:
                failure.trap(MetaqMoved)
                error: MetaqMoved = failure.value  # type: ignore[assignment]
                return self.get(topic, partition, error.offset, max_size, group, False)

            result.addErrback(moved)
        return result

    def offset(
        self, topic: str, partition: int, offset: int, group: str = DEFAULT_GROUP
    ) -> "Deferred[int]":
        """
        The valid offset nearest ``offset`` (0: the first record kept).

        :return: a Deferred firing with the offset, or failing as :meth:`get`.
        """
        return self._request(
            lambda opaque: OffsetRequest(topic, group, partition, offset, opaque)
        ).addCallback(offset_result)

    def offset_for_time(
        self, topic: str, partition: int, timestamp_ms: int, group: str = DEFAULT_GROUP
    ) -> "Deferred[int]":
        """
        txnsq's offset by time (``offset topic group partition @unixMs``):
        a record start at or before the first record published at or after
        unix milliseconds ``timestamp_ms`` (the end of the partition when
        every record is older).  A few older records may follow it: drop
        them with :func:`records_since`.

        :return: a Deferred firing with the offset, or failing as
            :meth:`offset` (a MetaQ broker without the extension answers 400).
        """
        return self._request(
            lambda opaque: OffsetRequest(topic, group, partition, 0, opaque, timestamp_ms)
        ).addCallback(offset_result)

    def stats(self, item: Optional[str] = None) -> "Deferred[str]":
        """The broker's statistics (all, or ``item``) as text."""
        return self._request(lambda opaque: StatsRequest(item, opaque)).addCallback(text_result, "stats")

    def version(self) -> "Deferred[str]":
        """The broker's version (MetaQ clients also send this as a heartbeat)."""
        return self._request(lambda opaque: VersionRequest(opaque)).addCallback(text_result, "version")

    def auth(self, secret: Union[str, bytes]) -> "Deferred[str]":
        """
        txnsq's ``auth`` extension.

        :return: a Deferred firing with the reply's text, or failing with
            :class:`MetaqResultError` (403: the secret was refused).
        """
        if isinstance(secret, str):
            secret = secret.encode("utf-8")
        data = secret
        return self._request(lambda opaque: AuthRequest(data, opaque)).addCallback(text_result, "auth")

    # -- closing -----------------------------------------------------------------

    def close(self) -> "Deferred[None]":
        """
        Send ``quit`` (the broker closes without a reply) and wait for the
        connection to end; after ``close_timeout`` it is aborted.  Pending
        requests fail with :class:`MetaqConnectionError`.
        """
        if self.connected:
            self.connected = False
            assert self.transport is not None
            self.transport.write(QuitRequest(DEFAULT_OPAQUE).encode())
            self.transport.loseConnection()
            self._close_call = self.clock.callLater(self.close_timeout, self._abort)
        elif self.transport is None and not self._closed.called:
            # Never connected: nothing to wait for.
            self._closed.callback(None)
        result: "Deferred[None]" = Deferred()

        def ended(_: object) -> None:
            result.callback(None)

        self._closed.addBoth(ended)
        return result

    def _abort(self) -> None:
        self._close_call = None
        if self.transport is not None:
            self.transport.abortConnection()  # type: ignore[attr-defined]

    def _fail_connection(self, error: Exception) -> None:
        self._reason = error
        self.connected = False
        if self.transport is not None:
            self.transport.abortConnection()  # type: ignore[attr-defined]


def _failed(error: Exception) -> "Deferred[Any]":
    result: "Deferred[Any]" = Deferred()
    result.errback(Failure(error))
    return result


class _ClientFactory(Factory):
    noisy = False

    def __init__(self, client: MetaqClient) -> None:
        self.client = client

    def buildProtocol(self, addr: Any) -> MetaqClient:
        return self.client


def connect_metaq(
    reactor: Any,
    address: str,
    tls: bool = False,
    tls_options: Any = None,
    auth_secret: Optional[Union[str, bytes]] = None,
    clock: Optional[IReactorTime] = None,
    connect_timeout: float = 5.0,
    request_timeout: float = 30.0,
    max_reply_size: int = DEFAULT_MAX_REPLY_SIZE,
) -> "Deferred[MetaqClient]":
    """
    Connect to the MetaQ broker at ``address`` (``host:port``).

    :param reactor: makes the TCP connection.
    :param tls: speak TLS from the first byte (an nsqd with
        ``--tls-required`` serves MetaQ over TLS only).
    :param tls_options: an ``IOpenSSLClientConnectionCreator``
        (``optionsForClientTLS(...)``, :class:`txnsq.tools.tls.ToolClientTLS`);
        default: the system's roots, checked against the address's host.
    :param auth_secret: sent with ``auth`` before the client is handed out.
    :param clock: times requests; the reactor by default.
    :return: a Deferred firing with the :class:`MetaqClient`, or failing with
        :class:`MetaqConnectionError` (no connection) or
        :class:`MetaqResultError` (the secret was refused; the connection
        is then closed).  Cancelling it aborts the attempt.
    :raises ValueError: a malformed ``address``.
    """
    host, port = split_host_port(address)
    client = MetaqClient(
        address,
        clock if clock is not None else reactor,
        request_timeout=request_timeout,
        max_reply_size=max_reply_size,
    )
    endpoint = client_endpoint(reactor, host, port, connect_timeout)
    if tls:
        from twisted.internet.endpoints import wrapClientTLS

        if tls_options is None:
            from twisted.internet.ssl import optionsForClientTLS

            tls_options = optionsForClientTLS(host)
        endpoint = wrapClientTLS(tls_options, endpoint)
    attempt: "Deferred[Any]" = endpoint.connect(_ClientFactory(client))

    def connected(_: Any) -> "Deferred[MetaqClient]":
        if auth_secret is None:
            return succeed(client)

        def refused(failure: Failure) -> Any:
            return client.close().addCallback(lambda _: failure)

        return client.auth(auth_secret).addCallbacks(lambda _: client, refused)

    def failed(failure: Failure) -> Failure:
        if failure.check(MetaqResultError, MetaqConnectionError, CancelledError):
            return failure
        if failure.check(ConnectingCancelledError):
            return Failure(CancelledError())
        return Failure(
            MetaqConnectionError("connecting to %s failed: %s" % (address, failure.getErrorMessage()))
        )

    return attempt.addCallback(connected).addErrback(failed)


# ---------------------------------------------------------------------------
# Reading a partition


class MetaqReader:
    """
    Walks one partition from an offset, a ``get`` of ``max_size`` bytes at
    a time.

    An offset the broker cannot serve (301) is followed to the one it
    gives when ``follow_moved`` (so ``offset=0`` means "from the first
    record kept"), else it fails with :class:`MetaqMoved`.  A record
    larger than ``max_size`` doubles the size of the next ``get`` up to
    the client's ``max_reply_size``.

    :ivar offset: where the next batch starts.
    :ivar at_end: whether the last batch found no message (the end of the
        partition, for now).
    """

    def __init__(
        self,
        client: Any,
        topic: str,
        partition: int,
        offset: int = 0,
        max_size: int = 64 * 1024,
        group: str = DEFAULT_GROUP,
        follow_moved: bool = True,
    ) -> None:
        if max_size <= 0:
            raise ValueError("max_size must be positive, not %d" % (max_size,))
        self.client = client
        self.topic = topic
        self.partition = partition
        self.offset = offset
        self.max_size = max_size
        self.group = group
        self.follow_moved = follow_moved
        self.at_end = False

    def next_batch(self) -> "Deferred[List[LogRecord]]":
        """
        The next records (an empty list at the end of the partition: call
        again later to poll).

        :return: a Deferred firing with the records, or failing as
            :meth:`MetaqClient.get` does (:class:`MetaqRecordTooLarge` for
            a record that no allowed ``max_size`` holds).
        """
        return self._read(self.max_size, 0)

    def _read(self, max_size: int, moves: int) -> "Deferred[List[LogRecord]]":
        result = self.client.get(self.topic, self.partition, self.offset, max_size, self.group)

        def read(got: GetResult) -> Any:
            if not got.records:
                limit = self.client.max_reply_size
                if max_size >= limit:
                    raise MetaqRecordTooLarge(self.offset, max_size)
                return self._read(min(max_size * 2, limit), moves)
            self.at_end = False
            self.offset = got.next_offset
            return got.records

        def refused(failure: Failure) -> Any:
            if failure.check(MetaqEndOfPartition):
                self.at_end = True
                return []
            # Two moves in a row: the broker keeps moving; do not loop.
            if failure.check(MetaqMoved) and self.follow_moved and moves < 2:
                moved: MetaqMoved = failure.value  # type: ignore[assignment]
                self.offset = moved.offset
                return self._read(max_size, moves + 1)
            return failure

        return result.addCallbacks(read, refused)  # type: ignore[no-any-return]
