"""
A fake MetaQ broker built from the codec (:mod:`txnsq.protocol.metaq`), for
the MetaQ client's tests and for the listener's: an in-memory record store
(:class:`FakeMetaqStore`), a Twisted protocol serving it
(:class:`FakeMetaqServer`, :class:`FakeMetaqFactory`), and a byte pump
joining a client protocol and a server protocol over two StringTransports
(:class:`Pump`).

The store answers as docs/metaq.md says a broker does: ``get`` below the
first offset kept, past the end or inside a record is moved (301) to the
nearest record start; at the end it is 404 "Could not find message at
position"; an unknown topic or partition is 404 "is not exists".
txnsq's ``offset ... @unixMs`` answers the start of the first record
stored (by :meth:`FakeMetaqStore.add`) with a time at or after it.
"""

from __future__ import annotations

import bisect
from typing import Any, Dict, List, Optional, Tuple

from twisted.internet.protocol import Factory, Protocol
from twisted.internet.testing import StringTransport

from txnsq.protocol.metaq import (
    FORBIDDEN,
    SUCCESS,
    UNAUTHORIZED,
    AuthRequest,
    GetRequest,
    MetaqError,
    OffsetRequest,
    PutRequest,
    QuitRequest,
    StatsRequest,
    VersionRequest,
    encode_bad_max_size,
    encode_moved,
    encode_offset_result,
    encode_position_not_found,
    encode_put_result,
    encode_result,
    encode_topic_not_found,
    encode_value_header,
    encode_version_result,
)
from txnsq.protocol.metaq_parser import MetaqRequestParser
from txnsq.protocol.metaq_record import encode_record, split_whole_records


class FakePartition:
    """
    One partition's log: records from ``first_offset`` on.

    :ivar first_offset: the offset of the first record kept (raise it with
        :meth:`drop_before` to model retention).
    """

    def __init__(self, first_offset: int = 0) -> None:
        self.first_offset = first_offset
        self.log = bytearray()
        self.starts: List[int] = []  # offsets of the records
        self.times: List[int] = []  # publish times of the records (unix ms)

    @property
    def end(self) -> int:
        """The offset the next record gets."""
        return self.first_offset + len(self.log)

    def append(self, msg_id: int, flag: int, data: bytes, time_ms: int = 0) -> int:
        """Store a record published at ``time_ms``; its offset."""
        offset = self.end
        self.starts.append(offset)
        self.times.append(time_ms)
        self.log += encode_record(msg_id, flag, data)
        return offset

    def drop_before(self, offset: int) -> None:
        """Forget the records before the record start ``offset``."""
        cut = offset - self.first_offset
        del self.log[:cut]
        self.first_offset = offset
        kept = [index for index, start in enumerate(self.starts) if start >= offset]
        self.starts = [self.starts[index] for index in kept]
        self.times = [self.times[index] for index in kept]

    def nearest(self, offset: int) -> int:
        """The record start nearest ``offset`` (the end when past it)."""
        if offset <= self.first_offset:
            return self.first_offset
        if offset >= self.end:
            return self.end
        index = bisect.bisect_right(self.starts, offset) - 1
        return self.starts[index]

    def at_time(self, time_ms: int) -> int:
        """The start of the first record published at or after ``time_ms`` (the end when none is)."""
        for start, when in zip(self.starts, self.times):
            if when >= time_ms:
                return start
        return self.end


class FakeMetaqStore:
    """
    Topics of partitions, shared by every connection of a factory.

    :ivar partitions: ``{(topic, partition): FakePartition}``; a put makes
        partitions of topics listed in ``topics`` on demand.
    :ivar secret: when set, requests before a good ``auth`` get 401.
    :ivar silent: when True, requests are read and never answered (for
        timeouts).
    """

    def __init__(
        self,
        topics: Tuple[str, ...] = (),
        partitions_per_topic: int = 1,
        secret: Optional[bytes] = None,
        version: str = "txnsq-fake",
    ) -> None:
        self.partitions: Dict[Tuple[str, int], FakePartition] = {}
        for topic in topics:
            for number in range(partitions_per_topic):
                self.partitions[(topic, number)] = FakePartition()
        self.secret = secret
        self.version = version
        self.silent = False
        self.next_id = 1
        self.requests: List[Any] = []

    def partition(self, topic: str, number: int) -> Optional[FakePartition]:
        """The partition, or None."""
        return self.partitions.get((topic, number))

    def add(
        self,
        topic: str,
        number: int,
        payload: bytes,
        attribute: Optional[bytes] = None,
        msg_id: Optional[int] = None,
        time_ms: int = 0,
    ) -> int:
        """
        Store a message directly (no connection), with the next id or
        ``msg_id``, published at ``time_ms`` (for ``offset`` by time); its
        offset.
        """
        from txnsq.protocol.metaq_record import join_attribute

        part = self.partitions.setdefault((topic, number), FakePartition())
        if msg_id is None:
            msg_id = self.next_id
            self.next_id += 1
        return part.append(msg_id, 0 if attribute is None else 1, join_attribute(attribute, payload), time_ms)


class FakeMetaqServer(Protocol):
    """Serves a :class:`FakeMetaqStore` through :class:`MetaqRequestParser`."""

    def __init__(self, store: FakeMetaqStore) -> None:
        self.store = store
        self.parser = MetaqRequestParser()
        self.authenticated = store.secret is None

    def dataReceived(self, data: bytes) -> None:
        for item in self.parser.feed(data):
            self.store.requests.append(item)
            if self.store.silent:
                continue
            assert self.transport is not None
            if isinstance(item, QuitRequest):
                self.transport.loseConnection()
                return
            if isinstance(item, MetaqError):
                self.transport.write(item.encode())
                if item.fatal:
                    self.transport.loseConnection()
                    return
                continue
            self.answer(item)

    def answer(self, item: Any) -> None:
        write = self.transport.write  # type: ignore[union-attr]
        store = self.store
        if isinstance(item, AuthRequest):
            if store.secret is not None and item.secret != store.secret:
                write(encode_result(FORBIDDEN, "auth refused", item.opaque))
            else:
                self.authenticated = True
                write(encode_result(SUCCESS, "", item.opaque))
            return
        if not self.authenticated:
            write(encode_result(UNAUTHORIZED, "auth required", item.opaque))
            return
        if isinstance(item, VersionRequest):
            write(encode_version_result(store.version, item.opaque))
        elif isinstance(item, StatsRequest):
            text = "item %s" % (item.item,) if item.item else "pid 1\r\nuptime 0"
            write(encode_result(SUCCESS, text, item.opaque))
        elif isinstance(item, PutRequest):
            number = 0 if item.partition == -1 else item.partition
            part = store.partition(item.topic, number)
            if part is None:
                write(encode_topic_not_found(item.topic, number, item.opaque))
                return
            msg_id = store.next_id
            store.next_id += 1
            offset = part.append(msg_id, item.flag, item.data)
            write(encode_put_result(msg_id, number, offset, item.opaque))
        elif isinstance(item, GetRequest):
            part = store.partition(item.topic, item.partition)
            if part is None:
                write(encode_topic_not_found(item.topic, item.partition, item.opaque))
                return
            if item.max_size <= 0:
                write(encode_bad_max_size(item.max_size, item.opaque))
                return
            if item.offset == part.end:
                write(encode_position_not_found(item.offset, item.opaque))
                return
            nearest = part.nearest(item.offset)
            if nearest != item.offset:
                write(encode_moved(nearest, item.opaque))
                return
            start = item.offset - part.first_offset
            size = split_whole_records(part.log, item.max_size, start)
            write(encode_value_header(size, item.opaque) + bytes(part.log[start:start + size]))
        elif isinstance(item, OffsetRequest):
            part = store.partition(item.topic, item.partition)
            if part is None:
                write(encode_topic_not_found(item.topic, item.partition, item.opaque))
                return
            if item.timestamp_ms is not None:
                write(encode_offset_result(part.at_time(item.timestamp_ms), item.opaque))
                return
            write(encode_offset_result(part.nearest(item.offset), item.opaque))


class FakeMetaqFactory(Factory):
    """Builds :class:`FakeMetaqServer` protocols over one store."""

    noisy = False

    def __init__(self, store: FakeMetaqStore) -> None:
        self.store = store
        self.servers: List[FakeMetaqServer] = []

    def buildProtocol(self, addr: Any) -> FakeMetaqServer:
        server = FakeMetaqServer(self.store)
        server.factory = self
        self.servers.append(server)
        return server


class Pump:
    """
    A client protocol and a server protocol joined by two StringTransports:
    :meth:`flush` moves the bytes each side wrote to the other until both
    are quiet, and carries a close from either side to both.
    """

    def __init__(self, client: Protocol, server: Protocol) -> None:
        self.client = client
        self.server = server
        self.client_transport = StringTransport()
        self.server_transport = StringTransport()
        self._lost = False
        client.makeConnection(self.client_transport)
        server.makeConnection(self.server_transport)
        self.client_transport.abortConnection = self.client_transport.loseConnection  # type: ignore[method-assign]

    def flush(self) -> None:
        """Deliver everything written, both ways, until nothing moves."""
        while True:
            to_server = self.client_transport.value()
            self.client_transport.clear()
            to_client = self.server_transport.value()
            self.server_transport.clear()
            if to_server:
                self.server.dataReceived(to_server)
            if to_client:
                self.client.dataReceived(to_client)
            if not to_server and not to_client:
                break
        if not self._lost and (self.client_transport.disconnecting or self.server_transport.disconnecting):
            self.lose()

    def lose(self) -> None:
        """Both sides see the connection end."""
        from twisted.internet.error import ConnectionDone
        from twisted.python.failure import Failure

        if self._lost:
            return
        self._lost = True
        self.client.connectionLost(Failure(ConnectionDone()))
        self.server.connectionLost(Failure(ConnectionDone()))


class ThreadedFakeBroker:
    """
    A :class:`FakeMetaqServer` on a real socket on 127.0.0.1 (port 0),
    served by threads without a reactor (one per connection), for
    blocking clients and spawned tools.  Optional TLS
    (``ssl_context``, a server :class:`ssl.SSLContext`).

    :ivar port: the port it listens on.
    """

    def __init__(self, store: FakeMetaqStore, ssl_context: Any = None) -> None:
        import socket
        import threading

        self.store = store
        self.ssl_context = ssl_context
        self._listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._listener.bind(("127.0.0.1", 0))
        self._listener.listen(8)
        self.port: int = self._listener.getsockname()[1]
        self._stopping = False
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    @property
    def address(self) -> str:
        """``127.0.0.1:port``."""
        return "127.0.0.1:%d" % (self.port,)

    def _serve(self) -> None:
        while not self._stopping:
            try:
                conn, _ = self._listener.accept()
            except OSError:
                return
            import threading

            threading.Thread(target=self._serve_closing, args=(conn,), daemon=True).start()

    def _serve_closing(self, conn: Any) -> None:
        try:
            self._serve_one(conn)
        except OSError:
            pass
        finally:
            conn.close()

    def _serve_one(self, conn: Any) -> None:
        if self.ssl_context is not None:
            conn = self.ssl_context.wrap_socket(conn, server_side=True)
        server = FakeMetaqServer(self.store)
        transport = StringTransport()
        server.makeConnection(transport)
        while True:
            data = conn.recv(65536)
            if not data:
                return
            server.dataReceived(data)
            out = transport.value()
            transport.clear()
            if out:
                conn.sendall(out)
            if transport.disconnecting:
                return

    def stop(self) -> None:
        """Stop listening and wait for the thread."""
        import socket

        self._stopping = True
        try:
            # Wake accept() up.
            socket.create_connection(("127.0.0.1", self.port), timeout=1).close()
        except OSError:
            pass
        self._listener.close()
        self._thread.join(5)
