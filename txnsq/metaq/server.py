# -*- test-case-name: tests.test_metaq_server -*-
"""
The MetaQ listener's Twisted side: bytes in, :class:`MetaqRequestParser`
items, :class:`IMetaqBackend <txnsq.metaq.backend.IMetaqBackend>` calls, reply bytes out.

A ``get`` is answered with the ``value`` header and the log's slice of
whole records in one ``writeSequence``: no per-record work here (the log
walks record headers from its nearest index entry only).

Connections follow the codec's rules: a bad request is answered with
``result 400`` and the connection goes on, unless the codec marks the
error fatal (the stream cannot be framed any more), in which case the
listener answers and closes; ``quit`` closes without a reply.

Authentication (``--auth-http-address``): every request but ``auth`` and
``quit`` is refused with 401 until an ``auth <secret> <opaque>`` has been
accepted by the auth servers (``result 200`` with the identity JSON,
``result 403`` otherwise).  Then a ``put`` needs the ``publish``
permission on its topic, and ``get`` and ``offset`` need ``subscribe`` on
the topic with the MetaQ group as the channel (403 otherwise).  Expired
authorizations are asked for again before the request runs; requests that
arrive meanwhile wait (and reading pauses), in order.

Mirrored topics (``--mirror-min-standbys``): a ``put`` to one is answered
once the standbys have applied it, the requests after it waiting (and
reading paused) as for the auth servers; when too few standbys are left
live first, it is answered ``result 503`` (stored here, outcome unknown)
and the connection goes on.
"""

from __future__ import annotations

import os
from typing import Any, Callable, Dict, List, Optional, Set

from twisted.internet.interfaces import IPushProducer
from twisted.internet.protocol import Factory, Protocol, connectionDone
from twisted.logger import Logger
from twisted.python.failure import Failure
from zope.interface import implementer

from txnsq.addresses import go_address
from txnsq.metaq.backend import MetaqRefused
from txnsq.nsqd.listener import set_no_delay
from txnsq.protocol.auth import auth_response_body
from txnsq.protocol.metaq import (
    BAD_REQUEST,
    DEFAULT_OPAQUE,
    FORBIDDEN,
    INTERNAL_SERVER_ERROR,
    NOT_FOUND,
    SERVICE_UNAVAILABLE,
    UNAUTHORIZED,
    AuthRequest,
    GetRequest,
    MetaqError,
    OffsetRequest,
    PutRequest,
    QuitRequest,
    StatsRequest,
    VersionRequest,
    encode_moved,
    encode_offset_result,
    encode_position_not_found,
    encode_put_result,
    encode_result,
    encode_value_header,
    encode_version_result,
)
from txnsq.protocol.metaq_parser import MetaqRequestParser
from txnsq.protocol.metaq_record import HEADER_LENGTH
from txnsq.storage.log import OffsetOutOfRange, RecordTooLarge

__all__ = ["MetaqFactory", "MetaqServerProtocol", "stats_text"]


def stats_text(factory: "MetaqFactory", item: Optional[str]) -> Optional[str]:
    """
    The body of a ``stats`` reply, ``name value`` lines ended by CRLF:

    - no item: ``pid``, ``uptime`` (seconds), ``version``,
      ``curr_connections``, ``topics`` (how many), then a line per
      partition: ``<topic>-<n> first_offset next_offset bytes segments``;
    - ``topics``: a line per retained topic, ``<topic> <partitions>``;
    - ``offsets``: the partition lines only;
    - a topic's name: that topic's partition lines.

    None for an unknown item (answered 404).
    """
    backend = factory.backend
    topics = backend.topics()
    if item is None:
        lines = [
            "pid %d" % (os.getpid(),),
            "uptime %d" % (int(factory.clock.seconds() - factory.start_time),),
            "version %s" % (backend.version,),
            "curr_connections %d" % (len(factory.connections),),
            "topics %d" % (len(topics),),
        ]
        for topic in topics:
            lines.extend(_partition_lines(factory, topic))
    elif item == "topics":
        lines = []
        for topic in topics:
            stats = backend.partition_stats(topic)
            lines.append("%s %d" % (topic, len(stats or ())))
    elif item == "offsets":
        lines = []
        for topic in topics:
            lines.extend(_partition_lines(factory, topic))
    elif backend.partition_stats(item) is not None:
        lines = _partition_lines(factory, item)
    else:
        return None
    return "".join(line + "\r\n" for line in lines)


def _partition_lines(factory: "MetaqFactory", topic: str) -> List[str]:
    return [
        "%s-%d %d %d %d %d" % (topic, number, stats.first_offset, stats.next_offset, stats.bytes, stats.segments)
        for number, stats in enumerate(factory.backend.partition_stats(topic) or ())
    ]


class MetaqFactory(Factory):
    """
    Makes :class:`MetaqServerProtocol`\\s over ``backend``.

    :param backend: an :class:`IMetaqBackend <txnsq.metaq.backend.IMetaqBackend>`.
    :param clock: ``IReactorTime`` (uptime, auth expiry).
    :param max_body_size: the largest ``put`` body (``--max-msg-size``);
        a larger one is a fatal 400.
    :param auth: the auth servers' client (``--auth-http-address``, a
        :class:`txnsq.nsqd.auth.AuthClient`), or None for no auth.
    :param tls: connections are TLS (the listener is wrapped in it), as
        the auth servers are told.
    :param mirror_gate: ``gate(topic, waiter)`` asked after each ``put``:
        True when its reply waits for ``waiter.mirror_release()`` or
        ``waiter.mirror_fail(reason)``
        (:meth:`mirror_gate <txnsq.metaq.backend.BrokerMetaqBackend.mirror_gate>`);
        None: replies never wait.
    :ivar connections: the open connections.
    """

    _log = Logger()

    def __init__(
        self,
        backend: Any,
        clock: Any,
        max_body_size: int,
        auth: Any = None,
        tls: bool = False,
        start_time: Optional[float] = None,
        mirror_gate: Optional[Callable[[str, Any], bool]] = None,
    ) -> None:
        self.backend = backend
        self.mirror_gate = mirror_gate
        self.clock = clock
        self.max_body_size = max_body_size
        self.auth = auth
        self.tls = tls
        self.start_time = clock.seconds() if start_time is None else start_time
        self.connections: Set[MetaqServerProtocol] = set()

    def buildProtocol(self, addr: Any) -> "MetaqServerProtocol":
        """A protocol for one accepted connection."""
        protocol = MetaqServerProtocol(self)
        protocol.factory = self
        return protocol

    def close_all(self) -> None:
        """Close every connection (nsqd is stopping)."""
        for connection in list(self.connections):
            if connection.transport is not None:
                connection.transport.loseConnection()


@implementer(IPushProducer)
class MetaqServerProtocol(Protocol):
    """
    One MetaQ client.  Registered as the transport's producer, so that a
    client that asks faster than it reads (pipelined ``get``\\s) stops
    being read while its replies wait to be sent.
    """

    _log = Logger()

    def __init__(self, factory: MetaqFactory) -> None:
        self.server = factory
        self._parser: Optional[MetaqRequestParser] = None
        # Items waiting while the auth servers are asked (None: not waiting).
        self._held: Optional[List[object]] = None
        self._paused_by_consumer = False
        self._closed = False
        self.auth_state: Any = None  # txnsq.protocol.auth.AuthState
        self._secret = b""
        self._auth_query: Any = None
        self._handlers: Dict[type, Callable[[Any], bool]] = {
            GetRequest: self._get,
            PutRequest: self._put,
            OffsetRequest: self._offset,
            VersionRequest: self._version,
            StatsRequest: self._stats,
            AuthRequest: self._auth,
            QuitRequest: self._quit,
            MetaqError: self._error,
        }

    # -- connection ----------------------------------------------------------

    def connectionMade(self) -> None:
        self._parser = MetaqRequestParser(max_body_size=self.server.max_body_size)
        # Without it the last partial segment of a large value reply waits
        # for the client's delayed ACK (40 ms on Linux), a get loop's main
        # cost at 0.5-1 MiB maxSize.
        set_no_delay(self.transport)
        self.server.connections.add(self)
        self.transport.registerProducer(self, True)  # type: ignore[union-attr]

    def connectionLost(self, reason: Failure = connectionDone) -> None:
        self._closed = True
        self.server.connections.discard(self)
        self._held = None
        query, self._auth_query = self._auth_query, None
        if query is not None:
            query.cancel()

    def dataReceived(self, data: bytes) -> None:
        parser = self._parser
        if parser is None or self._closed:
            return
        items: List[object] = parser.feed(data)  # type: ignore[assignment]
        if self._held is not None:
            self._held.extend(items)
            return
        self._run(items)

    def _run(self, items: List[object]) -> None:
        handlers = self._handlers
        for index, item in enumerate(items):
            if self._closed:
                return
            if not handlers[type(item)](item):
                # Waiting for the auth servers (the list of waiting
                # requests exists now): the rest waits too.
                assert self._held is not None
                self._held.extend(items[index + 1 :])
                return

    def _write(self, data: bytes) -> None:
        self.transport.write(data)  # type: ignore[union-attr]

    def _close(self) -> None:
        self._closed = True
        self.transport.loseConnection()  # type: ignore[union-attr]

    # -- IPushProducer: the transport's buffer is full / drained ---------------

    def pauseProducing(self) -> None:
        self._paused_by_consumer = True
        self.transport.pauseProducing()  # type: ignore[union-attr]

    def resumeProducing(self) -> None:
        self._paused_by_consumer = False
        if self._held is None:
            self.transport.resumeProducing()  # type: ignore[union-attr]

    def stopProducing(self) -> None:
        pass

    # -- requests (each returns False when it waits for the auth servers) ----

    def _get(self, request: GetRequest) -> bool:
        if self.server.auth is not None:
            verdict = self._authorize(request, request.topic, request.group)
            if verdict is not _GO:
                return verdict is _DONE
        opaque = request.opaque
        max_size = request.max_size
        if max_size < HEADER_LENGTH:
            self._write(
                encode_result(
                    BAD_REQUEST,
                    "Bad request,invalid max size:%d (a record takes at least %d bytes)" % (max_size, HEADER_LENGTH),
                    opaque,
                )
            )
            return True
        try:
            data = self.server.backend.read(request.topic, request.partition, request.offset, max_size)
        except OffsetOutOfRange as moved:
            self._write(encode_moved(moved.nearest, opaque))
            return True
        except RecordTooLarge:
            # docs/metaq.md: the first record cannot be served whole; the
            # client asks again with a larger maxSize.
            self._write(encode_value_header(0, opaque))
            return True
        except MetaqRefused as refused:
            self._write(encode_result(refused.code, refused.message, opaque))
            return True
        except OSError as error:
            self._storage_failed("get", error, opaque)
            return True
        except Exception:
            self._internal_error("get", opaque)
            return True
        if data:
            self.transport.writeSequence([encode_value_header(len(data), opaque), data])  # type: ignore[union-attr]
        else:
            self._write(encode_position_not_found(request.offset, opaque))
        return True

    def _put(self, request: PutRequest) -> bool:
        if self.server.auth is not None:
            verdict = self._authorize(request, request.topic, "")
            if verdict is not _GO:
                return verdict is _DONE
        opaque = request.opaque
        if request.transaction_key is not None:
            self._write(encode_result(FORBIDDEN, "put: transactions are not supported", opaque))
            return True
        try:
            msg_id, partition, offset = self.server.backend.put(
                request.topic, request.partition, request.flag, request.data
            )
        except MetaqRefused as refused:
            self._write(encode_result(refused.code, refused.message, opaque))
            return True
        except Exception:
            self._internal_error("put", opaque)
            return True
        reply = encode_put_result(msg_id, partition, offset, opaque)
        gate = self.server.mirror_gate
        if gate is not None:
            waiter = _MirroredPut(self._mirrored_answer, reply, opaque)
            if gate(request.topic, waiter) and not waiter.answered:
                # Later requests wait for the reply, as for the auth servers.
                waiter.parked = True
                self._held = []
                self.transport.pauseProducing()  # type: ignore[union-attr]
                return False
            if waiter.answered:
                return True
        self._write(reply)
        return True

    def _mirrored_answer(self, data: bytes, parked: bool) -> None:
        """A put's answer out of the mirror gate; the requests held behind it run next."""
        if self._closed:
            return
        self._write(data)
        if parked:
            self._resume()

    def _offset(self, request: OffsetRequest) -> bool:
        if self.server.auth is not None:
            verdict = self._authorize(request, request.topic, request.group)
            if verdict is not _GO:
                return verdict is _DONE
        try:
            if request.timestamp_ms is not None:
                offset = self.server.backend.offset_for_timestamp(
                    request.topic, request.partition, request.timestamp_ms
                )
            else:
                offset = self.server.backend.nearest_offset(request.topic, request.partition, request.offset)
        except MetaqRefused as refused:
            self._write(encode_result(refused.code, refused.message, request.opaque))
            return True
        except OSError as error:
            self._storage_failed("offset", error, request.opaque)
            return True
        except Exception:
            self._internal_error("offset", request.opaque)
            return True
        self._write(encode_offset_result(offset, request.opaque))
        return True

    def _version(self, request: VersionRequest) -> bool:
        if self.server.auth is not None:
            verdict = self._authorize(request, None, "")
            if verdict is not _GO:
                return verdict is _DONE
        self._write(encode_version_result(self.server.backend.version, request.opaque))
        return True

    def _stats(self, request: StatsRequest) -> bool:
        if self.server.auth is not None:
            verdict = self._authorize(request, None, "")
            if verdict is not _GO:
                return verdict is _DONE
        try:
            text = stats_text(self.server, request.item)
        except Exception:
            self._internal_error("stats", request.opaque)
            return True
        if text is None:
            self._write(encode_result(NOT_FOUND, "stats: no such item or topic %s" % (request.item,), request.opaque))
        else:
            self._write(encode_result(200, text, request.opaque))
        return True

    def _quit(self, request: QuitRequest) -> bool:
        self._close()
        return True

    def _error(self, error: MetaqError) -> bool:
        self._write(error.encode())
        if error.fatal:
            self._close()
        return True

    def _internal_error(self, command: str, opaque: int) -> None:
        """An unexpected error from the backend: logged, answered 500, the connection kept."""
        self._log.failure("MetaQ: {command} failed", command=command)
        self._write(encode_result(INTERNAL_SERVER_ERROR, "%s: internal error" % (command,), opaque))

    def _storage_failed(self, command: str, error: OSError, opaque: int) -> None:
        self._log.error("MetaQ: {command} failed - {error}", command=command, error=error)
        self._write(encode_result(INTERNAL_SERVER_ERROR, "%s: storage failure: %s" % (command, error), opaque))

    # -- auth ----------------------------------------------------------------

    def _authorize(self, request: Any, topic: Optional[str], channel: str) -> object:
        """
        With auth on, whether ``request`` may run: :data:`_GO`; refused
        (401 before ``auth``, 403 without the permission), the reply
        written: :data:`_DONE`; expired authorizations being asked for
        again, the request waiting for them: :data:`_WAIT`.
        """
        state = self.auth_state
        verb = request.command
        if state is None:
            self._write(encode_result(UNAUTHORIZED, "AUTH required before %s" % (verb,), request.opaque))
            return _DONE
        if state.is_expired(self.server.clock.seconds()):
            self._ask(self._secret, request, None)
            return _WAIT
        if topic is not None and not state.is_allowed(topic, channel):
            self._write(
                encode_result(
                    FORBIDDEN, "AUTH failed for %s on topic `%s` group `%s`" % (verb, topic, channel), request.opaque
                )
            )
            return _DONE
        return _GO

    def _auth(self, request: AuthRequest) -> bool:
        if self.server.auth is None:
            self._write(encode_result(FORBIDDEN, "AUTH disabled", request.opaque))
            return True
        if self.auth_state is not None:
            self._write(encode_result(BAD_REQUEST, "AUTH already set", request.opaque))
            return True
        self._ask(request.secret, None, request.opaque)
        return False

    def _ask(self, secret: bytes, held: Any, auth_opaque: Optional[int]) -> None:
        """
        Query the auth servers for ``secret``; until the answer, reading
        pauses and requests wait.  ``held`` (a request) runs first after it;
        ``auth_opaque`` is set when answering an ``auth`` request.
        """
        self._held = [] if held is None else [held]
        self.transport.pauseProducing()  # type: ignore[union-attr]
        host = go_address(self.transport.getPeer())[1]  # type: ignore[union-attr]
        query = self.server.auth.query(host, self.server.tls, secret, self._common_name())
        self._auth_query = query

        def answered(state: Any) -> None:
            self._auth_query = None
            if self._closed:
                return
            if auth_opaque is None:
                self.auth_state = state
            elif not state.authorizations:
                self._write(encode_result(FORBIDDEN, "AUTH no authorizations found", auth_opaque))
            else:
                self.auth_state = state
                self._secret = secret
                self._write(encode_result(200, auth_response_body(state), auth_opaque))
            self._resume()

        def failed(failure: Failure) -> None:
            self._auth_query = None
            if self._closed:
                return
            self._log.warn(
                "MetaQ: [{peer}] AUTH failed {error}", peer=host, error=failure.getErrorMessage()
            )
            if auth_opaque is None:
                # The refresh failed: the held request is refused, and the
                # client must authenticate again.
                self.auth_state = None
                waiting = self._held or []
                if waiting:
                    first = waiting[0]
                    self._write(encode_result(FORBIDDEN, "AUTH failed", getattr(first, "opaque", DEFAULT_OPAQUE)))
                    del waiting[0]
            else:
                self._write(encode_result(FORBIDDEN, "AUTH failed", auth_opaque))
            self._resume()

        query.addCallbacks(answered, failed)
        query.addErrback(lambda failure: self._log.failure("MetaQ AUTH", failure))

    def _resume(self) -> None:
        held, self._held = self._held or [], None
        if not self._paused_by_consumer:
            self.transport.resumeProducing()  # type: ignore[union-attr]
        self._run(held)

    def _common_name(self) -> str:
        """The subject common name of the client's TLS certificate, if any."""
        get_certificate = getattr(self.transport, "getPeerCertificate", None)
        if get_certificate is None:
            return ""
        try:
            certificate = get_certificate()
        except Exception:
            return ""
        if certificate is None:
            return ""
        subject = getattr(certificate, "get_subject", None)
        if subject is not None:
            return str(subject().commonName or "")
        return ""


class _MirroredPut:
    """
    A ``put``'s reply waiting at the mirror gate: written once the
    standbys have the message, or replaced by ``result 503`` when too few
    are left live (the message is stored here: outcome unknown).
    """

    __slots__ = ("_deliver", "_reply", "_opaque", "answered", "parked")

    def __init__(self, deliver: Callable[[bytes, bool], None], reply: bytes, opaque: int) -> None:
        # The connection's: deliver(answer, parked) writes the answer, and
        # runs the requests held behind a parked one.
        self._deliver = deliver
        self._reply = reply
        self._opaque = opaque
        self.answered = False
        #: The connection's later requests wait for this one.
        self.parked = False

    def mirror_release(self) -> None:
        """The standbys have the message: the put's result."""
        self._answer(self._reply)

    def mirror_fail(self, reason: str) -> None:
        """Too few standbys are left to confirm it: ``result 503 put: <reason>``."""
        self._answer(encode_result(SERVICE_UNAVAILABLE, "put: %s" % (reason,), self._opaque))

    def _answer(self, data: bytes) -> None:
        if self.answered:
            return
        self.answered = True
        self._deliver(data, self.parked)


#: What :meth:`MetaqServerProtocol._authorize` decides.
_GO = "go"
_DONE = "done"
_WAIT = "wait"
