# -*- test-case-name: tests.integration.test_spark_consumer -*-
"""
Consuming for Spark, over :mod:`txnsq.spark.blocking` connections.

- :class:`StreamConsumer` lives in the driver's long-lived Python process
  of a streaming query: a reader thread per nsqd answers heartbeats and
  queues messages, :meth:`take <StreamConsumer.take>` cuts a micro-batch,
  :meth:`hold <StreamConsumer.hold>` keeps its messages in flight, a toucher
  thread TOUCHes every message not yet finished so that nsqd does not time
  it out while Spark works, and :meth:`commit <StreamConsumer.commit>` FINs the
  batches Spark has made durable.
- :func:`drain` is the batch read of one executor task: up to a number of
  messages, or until the channel stays empty for a while.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from typing import Callable, Deque, Dict, Generator, Iterator, List, Optional, Tuple

from txnsq.protocol.frames import FRAME_TYPE_ERROR, FRAME_TYPE_MESSAGE
from txnsq.protocol.message import decode_message
from txnsq.protocol.v2_client import NSQError, parse_error
from txnsq.spark.blocking import BlockingConnection, ClientSettings, NSQConnectionFailed, lookup_nsqd_addresses
from txnsq.spark.options import SourceOptions
from txnsq.spark.records import NSQMessage

__all__ = ["StreamConsumer", "drain", "drain_chunks", "nsqd_addresses"]

_log = logging.getLogger("txnsq.spark")

#: nsqd's default ``--max-rdy-count``, used when IDENTIFY does not say.
DEFAULT_MAX_RDY = 2500
#: How long a reader thread blocks in one read (bounds how late it sees stop()).
_READ_SLICE = 0.2

Connect = Callable[[str, ClientSettings], BlockingConnection]


def _connect(address: str, settings: ClientSettings) -> BlockingConnection:
    return BlockingConnection(address, settings)


def nsqd_addresses(options: SourceOptions) -> List[str]:
    """
    The nsqds to consume from: the configured ones, or those the lookupds
    list for the topic.

    :raises NSQConnectionFailed: no lookupd answered.
    """
    if options.nsqd_tcp_addresses:
        return list(options.nsqd_tcp_addresses)
    return lookup_nsqd_addresses(options.lookupd_http_addresses, options.topic, options.settings.connect_timeout)


def _max_rdy(conn: BlockingConnection) -> int:
    value = conn.identify_response.get("max_rdy_count")
    return value if isinstance(value, int) and value > 0 else DEFAULT_MAX_RDY


class _Link:
    """One subscribed connection of a :class:`StreamConsumer`, and its reader thread."""

    def __init__(self, conn: BlockingConnection) -> None:
        self.conn = conn
        self.address = conn.address
        self.alive = True
        #: Messages received on this connection and not yet finished.
        self.in_flight = 0
        self.rdy = 0
        self.max_rdy = _max_rdy(conn)
        self.thread: Optional[threading.Thread] = None


class StreamConsumer:
    """
    The long-lived consumer of a streaming query's source (driver side).

    Messages are finished only by :meth:`commit`; until then they are
    TOUCHed every half ``msg_timeout``.  A connection that breaks loses its
    unfinished messages to nsqd, which delivers them again (at least once).
    """

    def __init__(self, options: SourceOptions, connect: Connect = _connect) -> None:
        self.options = options
        self._connect = connect
        self._links: Dict[str, _Link] = {}
        self._cond = threading.Condition()
        self._queue: Deque[Tuple[_Link, NSQMessage]] = deque()
        self._held: Dict[int, List[Tuple[_Link, NSQMessage]]] = {}
        #: The last take, not yet held.
        self._taken: List[Tuple[_Link, NSQMessage]] = []
        self._stopping = threading.Event()
        self._toucher: Optional[threading.Thread] = None
        self._last_lookup = float("-inf")
        #: How many TOUCH rounds the toucher has made.
        self.touch_rounds = 0

    # -- connections -------------------------------------------------------

    def start(self) -> None:
        """
        Connect and subscribe to every nsqd, start the toucher.

        :raises NSQConnectionFailed: not one nsqd could be subscribed to.
        """
        self._refresh(initial=True)
        self._toucher = threading.Thread(target=self._touch_loop, name="nsq-toucher", daemon=True)
        self._toucher.start()

    def _refresh(self, initial: bool = False) -> None:
        """(Re)connect to the nsqds not connected; look them up again when due."""
        now = time.monotonic()
        lookup = bool(self.options.lookupd_http_addresses)
        if not lookup or initial or now - self._last_lookup >= self.options.lookupd_poll_interval:
            try:
                addresses = nsqd_addresses(self.options)
            except NSQConnectionFailed:
                if initial:
                    raise
                _log.warning("lookup of topic %s failed", self.options.topic, exc_info=True)
                addresses = list(self._links)
            self._last_lookup = now
        else:
            addresses = list(self._links)
        errors = []
        for address in addresses:
            link = self._links.get(address)
            if link is not None and link.alive:
                continue
            try:
                self._subscribe(address)
            except (NSQConnectionFailed, NSQError, OSError) as error:
                errors.append("%s: %s" % (address, error))
        if initial and errors and not any(link.alive for link in self._links.values()):
            raise NSQConnectionFailed(
                "nsq source: no nsqd could be subscribed to for topic %s channel %s (%s)"
                % (self.options.topic, self.options.channel, "; ".join(errors))
            )
        if errors:
            _log.warning("nsq source: %s", "; ".join(errors))

    def _subscribe(self, address: str) -> None:
        conn = self._connect(address, self.options.settings)
        try:
            conn.subscribe(self.options.topic, self.options.channel)
        except BaseException:
            conn.close()
            raise
        link = _Link(conn)
        link.thread = threading.Thread(target=self._read_loop, args=(link,), name="nsq-reader-" + address, daemon=True)
        with self._cond:
            self._links[address] = link
        link.thread.start()

    def _read_loop(self, link: _Link) -> None:
        conn = link.conn
        address = link.address
        try:
            while not self._stopping.is_set():
                frames = conn.read_frames(_READ_SLICE)
                if not frames:
                    continue
                got = []
                for frame_type, data in frames:
                    if frame_type == FRAME_TYPE_MESSAGE:
                        timestamp, attempts, msg_id, body = decode_message(data)
                        got.append((link, NSQMessage(msg_id, timestamp, attempts, body, address)))
                    elif frame_type == FRAME_TYPE_ERROR:
                        error = parse_error(data)
                        if error.fatal:
                            raise error
                        # E_FIN_FAILED / E_TOUCH_FAILED: the message had
                        # already timed out; nsqd delivers it again.
                        _log.warning("nsq source: nsqd %s: %s", address, error)
                if got:
                    with self._cond:
                        link.in_flight += len(got)
                        self._queue.extend(got)
                        self._cond.notify_all()
        except (NSQConnectionFailed, NSQError, ValueError) as error:
            if not self._stopping.is_set():
                _log.warning("nsq source: connection to %s lost: %s", address, error)
        finally:
            with self._cond:
                link.alive = False
                # What it delivered and we did not finish, nsqd delivers again.
                self._queue = deque(item for item in self._queue if item[0] is not link)
                self._cond.notify_all()
            conn.close()

    # -- batches -----------------------------------------------------------

    def _set_rdy(self, share: int) -> None:
        """Let each live connection deliver ``share`` messages beyond those it has in flight."""
        for link in list(self._links.values()):
            if not link.alive:
                continue
            count = min(link.in_flight + share, link.max_rdy)
            if count != link.rdy:
                try:
                    link.conn.ready(count)
                    link.rdy = count
                except NSQConnectionFailed:
                    pass

    def take(self, max_count: int, timeout: float) -> List[NSQMessage]:
        """
        Up to ``max_count`` messages, waiting at most ``timeout`` seconds for
        them; they stay in flight (TOUCHed) until :meth:`hold` and
        :meth:`commit`, or are taken by the next call if not held.

        A batch has at most each connection's ``max_rdy_count`` (2500 with
        nsqd's default) per live connection, less what the connection has
        in flight: the caller commits the previous batch before it takes
        the next.
        """
        if self._stopping.is_set():
            raise NSQConnectionFailed("nsq source is stopped")
        self._refresh()
        with self._cond:
            live = [link for link in self._links.values() if link.alive]
            share = max(1, -(-max_count // (len(live) or 1)))
            if live:
                share = max(1, min(share, min(link.max_rdy for link in live)))
                max_count = min(max_count, share * len(live))
            self._set_rdy(share)
            deadline = time.monotonic() + timeout
            while len(self._queue) < max_count:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    break
                self._cond.wait(remaining)
            taken = [self._queue.popleft() for _ in range(min(max_count, len(self._queue)))]
            self._taken = taken
        return [message for _, message in taken]

    def hold(self, batch: int) -> None:
        """Keep the messages of the last :meth:`take` as batch ``batch`` until committed."""
        with self._cond:
            self._held.setdefault(batch, []).extend(self._taken)
            self._taken = []

    def held(self) -> int:
        """How many messages are held in uncommitted batches."""
        with self._cond:
            return sum(len(items) for items in self._held.values())

    def commit(self, batch: int) -> int:
        """
        FIN the messages of every held batch numbered ``batch`` or less;
        how many FINs were sent (messages of a lost connection cannot be).
        """
        with self._cond:
            done = [number for number in self._held if number <= batch]
            items = [item for number in done for item in self._held.pop(number)]
            by_link: Dict[_Link, List[bytes]] = {}
            for link, message in items:
                if link.alive:
                    by_link.setdefault(link, []).append(message.id)
            sent = 0
            for link, ids in by_link.items():
                try:
                    link.conn.finish(ids)
                except NSQConnectionFailed:
                    continue
                link.in_flight -= len(ids)
                sent += len(ids)
        return sent

    # -- keeping messages alive ----------------------------------------------

    def touch_interval(self) -> float:
        """Seconds between TOUCH rounds: half the shortest msg_timeout granted."""
        timeouts = [link.conn.msg_timeout for link in list(self._links.values())]
        return max(0.05, min(timeouts or [60.0]) / 2.0)

    def touch_all(self) -> int:
        """TOUCH every message received and not finished; how many."""
        with self._cond:
            items = list(self._queue) + self._taken
            for held in self._held.values():
                items.extend(held)
        by_link: Dict[_Link, List[bytes]] = {}
        for link, message in items:
            if link.alive:
                by_link.setdefault(link, []).append(message.id)
        count = 0
        for link, ids in by_link.items():
            try:
                link.conn.touch(ids)
                count += len(ids)
            except NSQConnectionFailed:
                pass
        return count

    def _touch_loop(self) -> None:
        while not self._stopping.wait(self.touch_interval()):
            try:
                self.touch_all()
                self.touch_rounds += 1
            except Exception:
                _log.exception("nsq source: TOUCH round failed")

    def stop(self) -> None:
        """Close every connection (nsqd requeues what was not finished)."""
        self._stopping.set()
        with self._cond:
            links = list(self._links.values())
            self._cond.notify_all()
        for link in links:
            link.conn.close()
        for link in links:
            if link.thread is not None and link.thread is not threading.current_thread():
                link.thread.join(5.0)
        if self._toucher is not None:
            self._toucher.join(5.0)


def drain(
    address: str,
    options: SourceOptions,
    max_count: int,
    connect: Connect = _connect,
) -> Iterator[NSQMessage]:
    """
    Read up to ``max_count`` messages from the nsqd at ``address``, until
    none has come for ``options.drain_timeout`` seconds, and yield them;
    FIN them all once the caller has consumed every one (closing the
    generator early leaves them to nsqd, which delivers them again).

    :raises NSQConnectionFailed: the nsqd cannot be reached or breaks.
    :raises NSQError: nsqd refused SUB.
    """
    chunks = drain_chunks(address, options, max_count, max(1, max_count), connect)
    try:
        for chunk in chunks:
            for message in chunk:
                yield message
    finally:
        # Closed early: close the inner generator now, so that its
        # connection closes and nsqd requeues at once (without reference
        # counting, as on PyPy, it would wait for the garbage collector).
        chunks.close()


def drain_chunks(
    address: str,
    options: SourceOptions,
    max_count: int,
    chunk_size: int,
    connect: Connect = _connect,
) -> Generator[List[NSQMessage], None, None]:
    """
    :func:`drain` in lists of up to ``chunk_size`` messages.

    The FINs are sent when the caller asks for the list after the last,
    that is once it has taken every message: a caller that stops early
    (an exception, a closed generator, a killed process) sends none, the
    connection closes, and nsqd requeues the messages at once.  While the
    caller works through the lists the messages are TOUCHed every half
    ``msg_timeout``, so a slow caller does not see them time out.

    :raises NSQConnectionFailed: the nsqd cannot be reached or breaks.
    :raises NSQError: nsqd refused SUB.
    """
    conn = connect(address, options.settings)
    try:
        conn.subscribe(options.topic, options.channel)
        # Every message stays in flight until the end: RDY must cover them.
        max_count = min(max_count, _max_rdy(conn))
        messages: List[NSQMessage] = []
        conn.ready(max_count)
        idle_deadline = time.monotonic() + options.drain_timeout
        while len(messages) < max_count:
            remaining = idle_deadline - time.monotonic()
            if remaining <= 0:
                break
            frames = conn.read_frames(remaining)
            for frame_type, data in frames:
                if frame_type == FRAME_TYPE_MESSAGE:
                    timestamp, attempts, msg_id, body = decode_message(data)
                    messages.append(NSQMessage(msg_id, timestamp, attempts, body, address))
                    idle_deadline = time.monotonic() + options.drain_timeout
                elif frame_type == FRAME_TYPE_ERROR:
                    error = parse_error(data)
                    if error.fatal:
                        raise error
        conn.ready(0)
        if not messages:
            return
        ids = [message.id for message in messages]
        interval = conn.msg_timeout / 2.0
        touched = time.monotonic()
        step = max(1, chunk_size)
        for start in range(0, len(messages), step):
            if time.monotonic() - touched >= interval:
                conn.touch(ids)
                touched = time.monotonic()
            yield messages[start : start + step]
        conn.finish(ids)
        # CLS is answered after the FINs before it were handled.
        conn.close_wait()
    finally:
        conn.close()
