# -*- test-case-name: tests.test_spark_metaq -*-
"""
A blocking MetaQ client (one socket, no reactor) for Spark's driver and
executors, which run plain Python and must not start a Twisted reactor.

It speaks the MetaQ text protocol through the same codec as the Twisted
client (:mod:`txnsq.protocol.metaq`) and reads replies with the same
functions (:func:`txnsq.client.metaq.get_result` and its siblings), so the
two clients return the same values and raise the same exceptions
(:class:`MetaqMoved <txnsq.client.metaq.MetaqMoved>`,
:class:`MetaqEndOfPartition <txnsq.client.metaq.MetaqEndOfPartition>`, ...).  Requests go one
at a time: a lock holds the socket from a request's write to its reply's
read, so threads may share a client.

TLS is from the first byte (the ``ssl`` module), as an nsqd with
``--tls-required`` serves MetaQ.
"""

from __future__ import annotations

import socket
import ssl
import threading
from typing import Any, Callable, Iterator, List, Optional, Sequence, Tuple, Union

from txnsq.protocol.host_port import split_host_port
from txnsq.protocol.metaq_results import (
    DEFAULT_GROUP,
    DEFAULT_MAX_REPLY_SIZE,
    GetResult,
    LogRecord,
    MetaqConnectionError,
    MetaqEndOfPartition,
    MetaqMoved,
    MetaqProtocolError,
    MetaqRecordTooLarge,
    MetaqTimeoutError,
    MetaqResultError,
    get_result,
    offset_result,
    put_request,
    put_result,
    refusal,
    text_result,
)
from txnsq.protocol.metaq import (
    DEFAULT_OPAQUE,
    AuthRequest,
    GetRequest,
    MetaqError,
    OffsetRequest,
    QuitRequest,
    ResultResponse,
    StatsRequest,
    ValueResponse,
    VersionRequest,
)
from txnsq.protocol.metaq_parser import MetaqResponseParser

__all__ = ["BlockingMetaqClient", "read_partition"]

_RECV_SIZE = 256 * 1024
_MAX_OPAQUE = 2**31 - 2


class BlockingMetaqClient:
    """
    A connection to a MetaQ broker over a blocking socket, with the calls
    of :class:`txnsq.client.metaq.MetaqClient` returning values instead of
    Deferreds.

    :ivar address: ``host:port`` of the broker.
    :ivar request_timeout: seconds to wait for a reply (None: forever).
    """

    def __init__(
        self,
        address: str,
        tls: bool = False,
        ssl_context: Optional[ssl.SSLContext] = None,
        tls_server_name: Optional[str] = None,
        auth_secret: Optional[Union[str, bytes]] = None,
        connect_timeout: float = 5.0,
        request_timeout: Optional[float] = 30.0,
        max_reply_size: int = DEFAULT_MAX_REPLY_SIZE,
    ) -> None:
        """
        Connect to ``address`` (with TLS from the first byte when ``tls``:
        ``ssl_context`` or the system's roots, checking ``tls_server_name``
        or the address's host) and send ``auth`` when given a secret.

        :raises MetaqConnectionError: the broker is unreachable, or TLS failed.
        :raises MetaqResultError: the secret was refused.
        :raises ValueError: ``address`` is not ``host:port``.
        """
        self.address = address
        self.request_timeout = request_timeout
        self.max_reply_size = max_reply_size
        self._parser = MetaqResponseParser(max_body_size=max_reply_size)
        self._lock = threading.Lock()
        self._opaque = 0
        self._closed = False
        host, port = split_host_port(address)
        try:
            raw = socket.create_connection((host, port), timeout=connect_timeout)
        except OSError as error:
            raise MetaqConnectionError("cannot connect to %s: %s" % (address, error)) from None
        self._sock: Union[socket.socket, ssl.SSLSocket] = raw
        try:
            raw.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            if tls:
                context = ssl_context if ssl_context is not None else ssl.create_default_context()
                try:
                    self._sock = context.wrap_socket(raw, server_hostname=tls_server_name or host)
                except (ssl.SSLError, OSError) as error:
                    raise MetaqConnectionError("TLS with %s failed: %s" % (address, error)) from None
            self._sock.settimeout(request_timeout)
            if auth_secret is not None:
                self.auth(auth_secret)
        except BaseException:
            self._sock.close()
            raise

    def __enter__(self) -> "BlockingMetaqClient":
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    # -- IO ------------------------------------------------------------------

    def _call(self, make: Callable[..., Any], *args: object) -> Union[ResultResponse, ValueResponse]:
        """Send ``make(*args, opaque)`` and read its reply."""
        with self._lock:
            if self._closed:
                raise MetaqConnectionError("connection to %s is closed" % (self.address,))
            self._opaque = self._opaque + 1 if self._opaque < _MAX_OPAQUE else 1
            opaque = self._opaque
            data = make(*args, opaque).encode()
            try:
                self._sock.sendall(data)
            except OSError as error:
                self._break()
                raise MetaqConnectionError("cannot write to %s: %s" % (self.address, error)) from None
            while True:
                for item in self._read():
                    if isinstance(item, MetaqError):
                        self._break()
                        raise MetaqProtocolError("bad reply from %s: %s" % (self.address, item.message))
                    if item.opaque == opaque:
                        return item
                    # A reply to an earlier request that timed out.

    def _read(self) -> List[Union[ResultResponse, ValueResponse, MetaqError]]:
        try:
            chunk = self._sock.recv(_RECV_SIZE)
        except socket.timeout:
            # The reply may still come; it will be skipped by its opaque.
            raise MetaqTimeoutError("no reply from %s in %ss" % (self.address, self.request_timeout)) from None
        except OSError as error:
            self._break()
            raise MetaqConnectionError("connection to %s broke: %s" % (self.address, error)) from None
        if not chunk:
            self._break()
            raise MetaqConnectionError("%s closed the connection" % (self.address,))
        return self._parser.feed(chunk)

    def _break(self) -> None:
        self._closed = True
        self._sock.close()

    # -- requests --------------------------------------------------------------

    def put(
        self, topic: str, partition: int, body: bytes, flag: int = 0, attribute: Optional[bytes] = None
    ) -> Tuple[int, int, int]:
        """
        Store ``body``; ``(msg_id, partition, offset)``.

        :raises MetaqResultError: refused.
        :raises MetaqTimeoutError: no reply in time.
        :raises MetaqConnectionError: the connection broke.
        :raises ValueError: a topic that cannot be a field, a flag
            announcing an attribute that is not given.
        """
        request = put_request(topic, partition, body, flag, attribute)

        def make(opaque: int) -> object:
            request.opaque = opaque
            return request

        return put_result(self._call(make))

    def get(
        self,
        topic: str,
        partition: int,
        offset: int,
        max_size: int,
        group: str = DEFAULT_GROUP,
        follow_moved: bool = False,
    ) -> GetResult:
        """
        At most ``max_size`` bytes of whole records from ``offset``; with
        ``follow_moved`` a 301 is followed once.

        :raises MetaqMoved: 301 (not followed), with the offset to use.
        :raises MetaqEndOfPartition: no message at ``offset`` yet.
        :raises MetaqNotFound: no such topic or partition.
        :raises MetaqResultError: other refusals.
        :raises MetaqProtocolError: corrupt records.
        :raises ValueError: ``max_size`` above ``max_reply_size``.
        """
        if max_size > self.max_reply_size:
            raise ValueError("max_size %d is above %d" % (max_size, self.max_reply_size))
        try:
            return get_result(self._call(GetRequest, topic, group, partition, offset, max_size), offset)
        except MetaqMoved as moved:
            if not follow_moved:
                raise
            return self.get(topic, partition, moved.offset, max_size, group, False)

    def get_raw(self, topic: str, partition: int, offset: int, max_size: int, group: str = DEFAULT_GROUP) -> bytes:
        """
        The reply to a ``get`` as the broker sent it: whole records in
        MetaQ's layout, not parsed or checked (the Spark source turns them
        into Arrow columns itself).  Empty when the first record is larger
        than ``max_size``.

        :raises MetaqMoved: 301, with the offset to use.
        :raises MetaqEndOfPartition: no message at ``offset`` yet.
        :raises MetaqNotFound: no such topic or partition.
        :raises MetaqResultError: other refusals.
        :raises ValueError: ``max_size`` above ``max_reply_size``.
        """
        if max_size > self.max_reply_size:
            raise ValueError("max_size %d is above %d" % (max_size, self.max_reply_size))
        reply = self._call(GetRequest, topic, group, partition, offset, max_size)
        if isinstance(reply, ResultResponse):
            if reply.code == 200:
                raise MetaqProtocolError("result 200 instead of value to get")
            raise refusal(reply, offset)
        return reply.data

    def put_many(
        self, topic: str, partition: int, messages: Sequence[Tuple[bytes, Optional[bytes]]]
    ) -> List[Tuple[int, int, int]]:
        """
        Store ``(body, attribute or None)`` messages in order, pipelined:
        every ``put`` is written before the replies are read.  The result
        of each, in order.

        :raises MetaqResultError: one was refused (those before it, and
            possibly some after it, were stored).
        :raises MetaqConnectionError: the connection broke.
        """
        with self._lock:
            if self._closed:
                raise MetaqConnectionError("connection to %s is closed" % (self.address,))
            first = self._opaque + 1
            if first + len(messages) > _MAX_OPAQUE:
                first = 1
            chunks = []
            for index, (body, attribute) in enumerate(messages):
                chunks.append(put_request(topic, partition, body, 0, attribute, first + index).encode())
            self._opaque = first + len(messages) - 1
            try:
                self._sock.sendall(b"".join(chunks))
            except OSError as error:
                self._break()
                raise MetaqConnectionError("cannot write to %s: %s" % (self.address, error)) from None
            results: List[Tuple[int, int, int]] = []
            refused: Optional[MetaqResultError] = None
            while len(results) < len(messages):
                for item in self._read():
                    if isinstance(item, MetaqError):
                        self._break()
                        raise MetaqProtocolError("bad reply from %s: %s" % (self.address, item.message))
                    if not first <= item.opaque < first + len(messages):
                        continue
                    try:
                        results.append(put_result(item))
                    except MetaqResultError as error:
                        refused = refused or error
                        results.append((0, partition, -1))
            if refused is not None:
                raise refused
            return results

    def offset(self, topic: str, partition: int, offset: int, group: str = DEFAULT_GROUP) -> int:
        """The valid offset nearest ``offset``. :raises MetaqResultError: refused."""
        return offset_result(self._call(OffsetRequest, topic, group, partition, offset))

    def offset_for_time(
        self, topic: str, partition: int, timestamp_ms: int, group: str = DEFAULT_GROUP
    ) -> int:
        """
        txnsq's offset by time: a record start at or before the first
        record published at or after unix milliseconds ``timestamp_ms``
        (see :meth:`txnsq.client.metaq.MetaqClient.offset_for_time`; drop
        the older records read after it with
        :func:`txnsq.client.metaq.records_since`).

        :raises MetaqResultError: refused (400 from a broker without it).
        """

        def make(opaque: int) -> OffsetRequest:
            return OffsetRequest(topic, group, partition, 0, opaque, timestamp_ms)

        return offset_result(self._call(make))

    def stats(self, item: Optional[str] = None) -> str:
        """The broker's statistics (all, or ``item``) as text."""
        return text_result(self._call(StatsRequest, item), "stats")

    def version(self) -> str:
        """The broker's version."""
        return text_result(self._call(VersionRequest), "version")

    def auth(self, secret: Union[str, bytes]) -> str:
        """txnsq's ``auth``. :raises MetaqResultError: 403, the secret was refused."""
        if isinstance(secret, str):
            secret = secret.encode("utf-8")
        return text_result(self._call(AuthRequest, secret), "auth")

    @property
    def closed(self) -> bool:
        """Whether the connection was closed, or broke (a new one is needed)."""
        return self._closed

    def close(self) -> None:
        """Send ``quit`` and close the socket (idempotent)."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            try:
                self._sock.sendall(QuitRequest(DEFAULT_OPAQUE).encode())
            except OSError:
                pass
            self._sock.close()


def read_partition(
    client: BlockingMetaqClient,
    topic: str,
    partition: int,
    offset: int = 0,
    max_size: int = 64 * 1024,
    group: str = DEFAULT_GROUP,
) -> Iterator[LogRecord]:
    """
    The records of a partition from ``offset`` (followed when the broker
    moves it, so 0 reads from the first record kept) to its current end,
    ``max_size`` bytes per ``get``; a record larger than ``max_size`` is
    read with a doubled size, up to the client's ``max_reply_size``.

    :raises MetaqRecordTooLarge: a record no allowed size holds.
    :raises MetaqNotFound: no such topic or partition.
    """
    size = max_size
    moves = 0
    while True:
        try:
            got = client.get(topic, partition, offset, size, group)
        except MetaqEndOfPartition:
            return
        except MetaqMoved as moved:
            moves += 1
            if moves > 2:
                raise
            offset = moved.offset
            continue
        moves = 0
        if not got.records:
            if size >= client.max_reply_size:
                raise MetaqRecordTooLarge(offset, size)
            size = min(size * 2, client.max_reply_size)
            continue
        size = max_size
        for record in got.records:
            yield record
        offset = got.next_offset
