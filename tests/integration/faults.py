# -*- test-case-name: tests.integration.test_faults -*-
"""
The fault suite's machinery, shared by its CI-scale tests
(``tests/integration/test_faults.py``) and the full-scale soak
(``bench/system/soak.py``).

- :class:`NSQDRunner` runs nsqd on one data directory and two fixed ports,
  so that it can be signalled and started again where the clients expect it.
- :class:`Publisher` publishes numbered messages at a target rate with up to
  32 ``PUB``\\s in flight on one connection, reconnecting whenever the
  connection drops, and records which numbers were answered ``OK``.
- :class:`Consumer` subscribes with ``RDY 100``, ``FIN``\\s every message as
  it arrives, reconnects whenever the connection drops, and records every
  delivery.
- :func:`run_restart_loop` runs both against an nsqd that is stopped with a
  signal and started again ``cycles`` times, drains, and does the exact
  accounting of :class:`LoadReport`: *lost* are numbers answered ``OK`` and
  never delivered, *duplicates* are deliveries of a number beyond its first.
- :func:`connection_storm` opens N connections one after another (blocking
  sockets, so that the time is the listener's and not a client framework's)
  and checks that nsqd serves every one of them.
- :func:`run_fuzz` sends generated batches of V2 commands, valid and
  malformed (:mod:`tests.integration.v2_strategies`), on fresh connections,
  with a control client's ``PUB`` → delivery → ``FIN`` round trip after every
  batch, and follows nsqd's resident memory.

Everything but the storm's sockets runs on the reactor; nothing sleeps.
"""

from __future__ import annotations

import os
import socket
import struct
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Any, Callable, Deque, Dict, Generator, List, Optional, Sequence, Tuple

from twisted.internet import task, threads
from twisted.internet.defer import Deferred, DeferredList, inlineCallbacks
from twisted.internet.endpoints import TCP4ClientEndpoint
from twisted.internet.protocol import Factory, Protocol
from twisted.python.failure import Failure

from bench.common.process import process_rss_bytes, raise_open_files_limit
from tests.integration.nsq_client import NSQClient, connect
from tests.integration.nsqd_process import ExitStatus, NSQDProcess, free_port
from txnsq.protocol.frames import (
    FRAME_TYPE_ERROR,
    FRAME_TYPE_MESSAGE,
    FRAME_TYPE_RESPONSE,
    FrameParser,
)
from txnsq.protocol.message import decode_message

__all__ = [
    "CLEAN_EXIT",
    "Consumer",
    "DeferredReport",
    "FuzzReport",
    "LoadReport",
    "NSQDRunner",
    "Publisher",
    "StormReport",
    "connection_storm",
    "durable_flags",
    "process_rss_bytes",
    "raise_open_files_limit",
    "run_deferred_kill",
    "run_fuzz",
    "run_restart_loop",
]

CLEAN_EXIT = ExitStatus(0, None)

#: Most ``PUB``\\s the publisher has in flight at once.
PIPELINE = 32

#: The consumer's ``RDY`` count.
CONSUMER_RDY = 100

#: Seconds between attempts to connect again while nsqd is down.
RECONNECT_DELAY = 0.05

#: Seconds between two rounds of the publisher's schedule.
TICK = 0.01

#: How long a drain may go on without a new delivery before giving up.
DRAIN_STALL = 10.0

#: After the drain, how long nothing more must arrive (late duplicates).
DRAIN_QUIET = 1.0

#: Generous bound on anything that should happen "at once".
WAIT = 30.0

_MAGIC = b"  V2"
_HEARTBEAT = b"_heartbeat_"
_SIZE = struct.Struct(">I")
_BODY_PREFIX = b"fault "
_NUMBER_WIDTH = 12


def durable_flags() -> List[str]:
    """The flags under which every acknowledged PUB must survive SIGKILL."""
    return ["--mem-queue-size=0", "--sync-every=1"]


# -- nsqd on fixed ports -----------------------------------------------------


class NSQDRunner:
    """
    nsqd on one ``--data-path`` and fixed TCP and HTTP ports on 127.0.0.1,
    started again and again as the same daemon would be by a supervisor.

    :ivar processes: every process started, in order (their output is kept
        for failure messages).
    :ivar restarts: seconds from each spawn to both listening lines.
    """

    def __init__(self, reactor: Any, data_path: str, flags: Sequence[str] = ()) -> None:
        self.reactor = reactor
        self.data_path = data_path
        self.flags = list(flags)
        self.tcp_port = free_port()
        self.http_port = free_port()
        self.processes: List[NSQDProcess] = []
        self.restarts: List[float] = []

    @property
    def current(self) -> NSQDProcess:
        """The process started last."""
        return self.processes[-1]

    @property
    def pid(self) -> int:
        """The process ID of the running nsqd."""
        return int(self.current.transport.pid)

    def args(self) -> List[str]:
        """nsqd's flags: the fixed addresses, the data path, then :attr:`flags`."""
        return [
            "--tcp-address=127.0.0.1:%d" % (self.tcp_port,),
            "--http-address=127.0.0.1:%d" % (self.http_port,),
            "--data-path=%s" % (self.data_path,),
        ] + self.flags

    @inlineCallbacks
    def start(self) -> Generator[Any, Any, NSQDProcess]:
        """Spawn nsqd; fires once it listens (fails with its output if it does not)."""
        process = NSQDProcess(self.args(), self.reactor, cwd=os.path.dirname(self.data_path))
        self.processes.append(process)
        began = time.monotonic()
        yield process.start()
        self.restarts.append(time.monotonic() - began)
        return process

    @inlineCallbacks
    def stop(self, sig: str = "TERM") -> Generator[Any, Any, ExitStatus]:
        """Signal the running nsqd and wait for it to exit; fires with its status."""
        status = yield self.current.stop(sig)
        return status  # type: ignore[no-any-return]

    @inlineCallbacks
    def reap(self) -> Generator[Any, Any, None]:
        """Kill whatever still runs (for test cleanup)."""
        for process in self.processes:
            process.kill()
            yield process.ended

    def output(self, last: int = 2) -> str:
        """The output of the last ``last`` processes, for failure messages."""
        return "\n".join(
            "-- nsqd #%d --\n%s" % (index, process.output())
            for index, process in list(enumerate(self.processes))[-last:]
        )


# -- clients that outlive restarts ------------------------------------------


class _Reconnecting:
    """Keeps one connection of ``factory``'s protocol to a port, reconnecting."""

    def __init__(self, reactor: Any, port: int) -> None:
        self.reactor = reactor
        self.port = port
        self.running = False
        self.connections = 0
        self._pending: Optional[Any] = None
        self._retry: Optional[Any] = None

    def protocol(self) -> Protocol:
        raise NotImplementedError

    def start(self) -> None:
        self.running = True
        self._connect()

    def stop_reconnecting(self) -> None:
        self.running = False
        if self._retry is not None and self._retry.active():
            self._retry.cancel()
        if self._pending is not None:
            self._pending.cancel()

    def _connect(self) -> None:
        self._retry = None
        if not self.running:
            return
        endpoint = TCP4ClientEndpoint(self.reactor, "127.0.0.1", self.port, timeout=5)
        attempt = endpoint.connect(Factory.forProtocol(self.protocol))
        self._pending = attempt

        def connected(protocol: Protocol) -> None:
            self._pending = None
            self.connections += 1

        def failed(reason: Failure) -> None:
            self._pending = None
            self._schedule()

        attempt.addCallbacks(connected, failed)

    def _schedule(self) -> None:
        if self.running and self._retry is None:
            self._retry = self.reactor.callLater(RECONNECT_DELAY, self._connect)

    def lost(self) -> None:
        """The connection ended: connect again (if still running)."""
        self._schedule()


def message_body(number: int, size: int) -> bytes:
    """The body of message ``number``: its number, padded to ``size`` bytes."""
    return (_BODY_PREFIX + b"%0*d " % (_NUMBER_WIDTH, number)).ljust(size, b".")


def message_number(body: bytes) -> Optional[int]:
    """The number in a body made by :func:`message_body`, or None."""
    if not body.startswith(_BODY_PREFIX):
        return None
    digits = body[len(_BODY_PREFIX) : len(_BODY_PREFIX) + _NUMBER_WIDTH]
    if len(digits) != _NUMBER_WIDTH or not digits.isdigit():
        return None
    return int(digits)


class _PublisherConnection(Protocol):
    def __init__(self, owner: "Publisher") -> None:
        self.owner = owner
        self.parser = FrameParser()
        self.in_flight: Deque[int] = deque()

    def connectionMade(self) -> None:
        self.transport.write(_MAGIC)  # type: ignore[union-attr]
        self.owner._connected(self)

    def dataReceived(self, data: bytes) -> None:
        owner = self.owner
        for frame_type, payload in self.parser.feed(data):
            if frame_type == FRAME_TYPE_RESPONSE and payload == _HEARTBEAT:
                self.transport.write(b"NOP\n")  # type: ignore[union-attr]
            elif not self.in_flight:
                owner.unexpected.append(payload)
            elif frame_type == FRAME_TYPE_RESPONSE and payload == b"OK":
                owner.acknowledged.add(self.in_flight.popleft())
            else:
                owner.refused[self.in_flight.popleft()] = payload
        owner._send()

    def connectionLost(self, reason: Failure = None) -> None:  # type: ignore[assignment]
        self.owner._disconnected(self)


class Publisher(_Reconnecting):
    """
    Publishes ``message_body(n)`` for n = 0, 1, 2 ... on ``topic`` at
    ``rate`` messages a second, with at most :data:`PIPELINE` unanswered
    ``PUB``\\s; a message whose connection drops before its answer is not
    sent again (its fate is unknown, so it is neither acknowledged nor
    expected).

    :ivar sent: how many numbers were sent.
    :ivar acknowledged: the numbers nsqd answered ``OK``.
    :ivar refused: numbers answered with an error frame, and the frame.
    :ivar unanswered: numbers whose connection dropped before an answer.
    :ivar unexpected: answers with no ``PUB`` waiting for them.
    """

    def __init__(self, reactor: Any, port: int, topic: str, rate: float, size: int = 64) -> None:
        _Reconnecting.__init__(self, reactor, port)
        self.topic = topic.encode("ascii")
        self.rate = rate
        self.size = size
        self.sent = 0
        self.acknowledged: set = set()
        self.refused: Dict[int, bytes] = {}
        self.unanswered: List[int] = []
        self.unexpected: List[bytes] = []
        self._connection: Optional[_PublisherConnection] = None
        self._loop: Optional[task.LoopingCall] = None
        self._began = 0.0
        self._publishing = False
        self._idle: List["Deferred[None]"] = []

    def protocol(self) -> Protocol:
        return _PublisherConnection(self)

    def start(self) -> None:
        """Start publishing (and connecting)."""
        self._publishing = True
        self._began = self.reactor.seconds()
        _Reconnecting.start(self)
        self._loop = task.LoopingCall(self._send)
        self._loop.clock = self.reactor
        self._loop.start(TICK, now=False)

    def stop(self, timeout: float = WAIT) -> "Deferred[None]":
        """
        Stop publishing; fires once every ``PUB`` sent was answered or its
        connection dropped (or ``timeout`` passed), and the connection is
        closed.
        """
        self._publishing = False
        if self._loop is not None and self._loop.running:
            self._loop.stop()
        done: "Deferred[None]" = Deferred()
        self._idle.append(done)
        self._check_idle()
        done.addTimeout(timeout, self.reactor)

        def close(result: Any) -> Any:
            self.stop_reconnecting()
            if self._connection is not None:
                self._connection.transport.loseConnection()  # type: ignore[union-attr]
            return result

        return done.addBoth(close)

    def _connected(self, connection: _PublisherConnection) -> None:
        self._connection = connection
        # The schedule resumes from here: no burst to make up for the time
        # nsqd was down.
        self._began = self.reactor.seconds() - self.sent / self.rate
        self._send()

    def _disconnected(self, connection: _PublisherConnection) -> None:
        self.unanswered.extend(connection.in_flight)
        connection.in_flight.clear()
        if self._connection is connection:
            self._connection = None
        self._check_idle()
        self.lost()

    def _check_idle(self) -> None:
        connection = self._connection
        if not self._publishing and (connection is None or not connection.in_flight):
            idle, self._idle = self._idle, []
            for waiting in idle:
                if not waiting.called:
                    waiting.callback(None)

    def _send(self) -> None:
        connection = self._connection
        if not self._publishing or connection is None:
            self._check_idle()
            return
        due = int((self.reactor.seconds() - self._began) * self.rate) - self.sent
        room = PIPELINE - len(connection.in_flight)
        count = min(due, room)
        if count <= 0:
            return
        header = b"PUB " + self.topic + b"\n" + _SIZE.pack(self.size)
        chunks = []
        for number in range(self.sent, self.sent + count):
            chunks.append(header)
            chunks.append(message_body(number, self.size))
            connection.in_flight.append(number)
        self.sent += count
        connection.transport.writeSequence(chunks)  # type: ignore[union-attr]


class _ConsumerConnection(Protocol):
    def __init__(self, owner: "Consumer") -> None:
        self.owner = owner
        self.parser = FrameParser()
        self.subscribed = False

    def connectionMade(self) -> None:
        owner = self.owner
        self.transport.write(  # type: ignore[union-attr]
            _MAGIC + b"SUB %s %s\n" % (owner.topic, owner.channel)
        )

    def dataReceived(self, data: bytes) -> None:
        owner = self.owner
        fins = []
        for frame_type, payload in self.parser.feed(data):
            if frame_type == FRAME_TYPE_MESSAGE:
                _, attempts, msg_id, body = decode_message(payload)
                fins.append(b"FIN %s\n" % (msg_id,))
                owner._delivered(body, attempts)
            elif frame_type == FRAME_TYPE_RESPONSE and payload == _HEARTBEAT:
                fins.append(b"NOP\n")
            elif frame_type == FRAME_TYPE_RESPONSE and payload == b"OK" and not self.subscribed:
                self.subscribed = True
                fins.append(b"RDY %d\n" % (owner.rdy,))
            elif frame_type == FRAME_TYPE_ERROR:
                owner.errors.append(payload)
            else:
                owner.responses.append(payload)
        if fins:
            self.transport.writeSequence(fins)  # type: ignore[union-attr]
        owner._changed()

    def connectionLost(self, reason: Failure = None) -> None:  # type: ignore[assignment]
        self.owner._disconnected(self)


class Consumer(_Reconnecting):
    """
    Subscribed to ``topic``/``channel`` with ``RDY rdy``; sends ``FIN`` for
    every message in the same write that answers the read it came in.

    :ivar deliveries: how often each number was delivered.
    :ivar redelivered: deliveries with ``attempts`` above 1.
    :ivar foreign: bodies that are not the publisher's.
    :ivar errors: error frames received (a refused ``FIN`` means a
        delivery nsqd will make again).
    :ivar responses: other response frames than the ``SUB``'s ``OK`` and
        heartbeats.
    :ivar total: deliveries in all.
    """

    def __init__(
        self, reactor: Any, port: int, topic: str, channel: str, rdy: int = CONSUMER_RDY
    ) -> None:
        _Reconnecting.__init__(self, reactor, port)
        self.topic = topic.encode("ascii")
        self.channel = channel.encode("ascii")
        self.rdy = rdy
        self.deliveries: Dict[int, int] = {}
        self.redelivered = 0
        self.foreign: List[bytes] = []
        self.errors: List[bytes] = []
        self.responses: List[bytes] = []
        self.total = 0
        self._connection: Optional[_ConsumerConnection] = None
        self._waiters: List[Tuple[Callable[[], bool], "Deferred[bool]"]] = []

    def protocol(self) -> Protocol:
        connection = _ConsumerConnection(self)
        self._connection = connection
        return connection

    def stop(self) -> None:
        """Stop reconnecting and close the connection."""
        self.stop_reconnecting()
        if self._connection is not None and self._connection.transport is not None:
            self._connection.transport.loseConnection()

    def _delivered(self, body: bytes, attempts: int) -> None:
        number = message_number(body)
        if number is None:
            self.foreign.append(body)
            return
        self.deliveries[number] = self.deliveries.get(number, 0) + 1
        self.total += 1
        if attempts > 1:
            self.redelivered += 1

    def _disconnected(self, connection: _ConsumerConnection) -> None:
        if self._connection is connection:
            self._connection = None
        self.lost()

    def _changed(self) -> None:
        still = []
        for predicate, waiting in self._waiters:
            if waiting.called:
                continue
            if predicate():
                waiting.callback(True)
            else:
                still.append((predicate, waiting))
        self._waiters = still

    def wait_for(self, predicate: Callable[[], bool], timeout: float) -> "Deferred[bool]":
        """Fires True once ``predicate()`` holds after a read, False after ``timeout`` s."""
        waiting: "Deferred[bool]" = Deferred()
        if predicate():
            waiting.callback(True)
            return waiting
        self._waiters.append((predicate, waiting))

        def expire() -> None:
            if not waiting.called:
                waiting.callback(False)

        timer = self.reactor.callLater(timeout, expire)

        def cancel(result: bool) -> bool:
            if timer.active():
                timer.cancel()
            return result

        return waiting.addCallback(cancel)

    @inlineCallbacks
    def drain(self, expected: "set", stall: float = DRAIN_STALL, quiet: float = DRAIN_QUIET) -> Generator[Any, Any, None]:
        """
        Wait until every number in ``expected`` was delivered, or until no
        delivery came for ``stall`` seconds; then for ``quiet`` seconds more
        (so that late extra deliveries are counted).
        """
        missing = set(expected).difference(self.deliveries.keys())
        while missing:
            before = self.total
            progressed = yield self.wait_for(lambda: self.total != before, stall)
            if not progressed:
                break
            missing.difference_update(self.deliveries.keys())
        yield self.wait_for(lambda: False, quiet)


# -- restart loops -----------------------------------------------------------


@dataclass
class LoadReport:
    """
    What a run under load with restarts came to.

    ``lost`` and ``duplicated`` are exact: ``lost`` lists the numbers
    answered ``OK`` and never delivered after the final drain,
    ``duplicated`` maps each number delivered more than once to its number
    of extra deliveries.
    """

    signal: str
    cycles: int
    seconds: float
    sent: int
    acknowledged: int
    refused: int
    unanswered: int
    delivered: int
    deliveries: int
    redelivered: int
    lost: List[int]
    duplicated: Dict[int, int]
    foreign: int
    errors: List[bytes]
    exits: List[ExitStatus]
    restart_seconds: List[float]

    @property
    def duplicates(self) -> int:
        """Deliveries beyond the first of any number."""
        return sum(self.duplicated.values())

    def summary(self) -> str:
        """One line of the figures, for failure messages and logs."""
        return (
            "SIG%s x%d in %.1f s: sent %d, OK %d, refused %d, unanswered %d; "
            "delivered %d (%d deliveries, %d redelivered); lost %d %s; "
            "duplicates %d %s; foreign %d; errors %r"
            % (
                self.signal, self.cycles, self.seconds, self.sent, self.acknowledged,
                self.refused, self.unanswered, self.delivered, self.deliveries,
                self.redelivered, len(self.lost), self.lost[:10], self.duplicates,
                sorted(self.duplicated.items())[:10], self.foreign, self.errors[:5],
            )
        )


def account(
    signal: str,
    cycles: int,
    seconds: float,
    publisher: Publisher,
    consumer: Consumer,
    exits: Sequence[ExitStatus] = (),
    restart_seconds: Sequence[float] = (),
) -> LoadReport:
    """The exact accounting of a run: what was acknowledged against what arrived."""
    deliveries = consumer.deliveries
    return LoadReport(
        signal=signal,
        cycles=cycles,
        seconds=seconds,
        sent=publisher.sent,
        acknowledged=len(publisher.acknowledged),
        refused=len(publisher.refused),
        unanswered=len(publisher.unanswered),
        delivered=len(deliveries),
        deliveries=sum(deliveries.values()),
        redelivered=consumer.redelivered,
        lost=sorted(publisher.acknowledged.difference(deliveries.keys())),
        duplicated={number: count - 1 for number, count in deliveries.items() if count > 1},
        foreign=len(consumer.foreign) + sum(1 for n in deliveries if n >= publisher.sent),
        errors=list(consumer.errors) + list(publisher.unexpected),
        exits=list(exits),
        restart_seconds=list(restart_seconds),
    )


@inlineCallbacks
def run_restart_loop(
    reactor: Any,
    runner: NSQDRunner,
    signal: str,
    cycles: int,
    rate: float,
    cycle_seconds: float,
    topic: str = "faults",
    channel: str = "loop",
    progress: Optional[Callable[[str], None]] = None,
) -> Generator[Any, Any, LoadReport]:
    """
    Start nsqd, a consumer and a publisher at ``rate``; ``cycles`` times,
    let them run ``cycle_seconds``, signal nsqd (``TERM`` or ``KILL``),
    wait for its exit and start it again on the same ports and data; then
    stop publishing, drain, and account.

    The consumer subscribes before the first message is published, so
    that every message goes to its channel.
    """
    began = time.monotonic()
    yield runner.start()
    consumer = Consumer(reactor, runner.tcp_port, topic, channel)
    publisher = Publisher(reactor, runner.tcp_port, topic, rate)
    exits: List[ExitStatus] = []
    try:
        subscribed = yield _subscribe_first(reactor, runner.tcp_port, topic, channel)
        if not subscribed:
            raise AssertionError("could not create %s/%s\n%s" % (topic, channel, runner.output()))
        consumer.start()
        publisher.start()
        for cycle in range(cycles):
            yield task.deferLater(reactor, cycle_seconds, lambda: None)
            status = yield runner.stop(signal)
            exits.append(status)
            yield runner.start()
            if progress is not None:
                progress(
                    "SIG%s %d/%d: exit %s, sent %d, OK %d, delivered %d"
                    % (signal, cycle + 1, cycles, status, publisher.sent,
                       len(publisher.acknowledged), len(consumer.deliveries))
                )
        yield task.deferLater(reactor, cycle_seconds, lambda: None)
        yield publisher.stop()
        yield consumer.drain(set(publisher.acknowledged))
    finally:
        publisher.stop_reconnecting()
        consumer.stop()
    report = account(
        signal, cycles, time.monotonic() - began, publisher, consumer, exits, runner.restarts
    )
    return report


@inlineCallbacks
def _subscribe_first(reactor: Any, port: int, topic: str, channel: str) -> Generator[Any, Any, bool]:
    """Create the channel (SUB, then disconnect) so no message misses it."""
    client = yield connect(reactor, port)
    try:
        response = yield client.sub(topic, channel)
    finally:
        yield client.close()
    return response == b"OK"


# -- deferred messages and SIGKILL -----------------------------------------


@dataclass
class DeferredReport:
    """``published`` deferred messages; ``kept`` of them were still held after SIGKILL and a restart."""

    published: int
    kept: int
    kill_after: float


def _http(method: str, port: int, path: str, body: bytes = b"") -> bytes:
    """A blocking HTTP request to nsqd (run in a thread)."""
    import urllib.request

    request = urllib.request.Request(
        "http://127.0.0.1:%d%s" % (port, path), data=body if method == "POST" else None, method=method
    )
    with urllib.request.urlopen(request, timeout=WAIT) as response:
        data: bytes = response.read()
        return data


def _held(port: int, topic: str) -> int:
    """Messages a topic's channels hold: queued, in flight and deferred (from /stats)."""
    import json

    stats = json.loads(_http("GET", port, "/stats?format=json&topic=%s" % (topic,)))
    held = 0
    for found in stats.get("topics") or []:
        if found.get("topic_name") != topic:
            continue
        for channel in found.get("channels") or []:
            held += channel["depth"] + channel["in_flight_count"] + channel["deferred_count"]
    return held


@inlineCallbacks
def run_deferred_kill(
    reactor: Any, runner: NSQDRunner, count: int = 20, delay_ms: int = 60000, kill_after: float = 0.5,
    topic: str = "df",
) -> Generator[Any, Any, DeferredReport]:
    """
    Create ``topic``/``c``, ``POST /pub?topic=...&defer=delay_ms`` ``count``
    times, SIGKILL nsqd ``kill_after`` seconds later, start it again and
    count the messages the channel still holds.
    """
    yield runner.start()
    subscribed = yield _subscribe_first(reactor, runner.tcp_port, topic, "c")
    if not subscribed:
        raise AssertionError("could not create %s/c\n%s" % (topic, runner.output()))
    for number in range(count):
        response = yield threads.deferToThread(
            _http, "POST", runner.http_port, "/pub?topic=%s&defer=%d" % (topic, delay_ms),
            b"deferred %d" % (number,),
        )
        if response != b"OK":
            raise AssertionError("POST /pub answered %r" % (response,))
    yield task.deferLater(reactor, kill_after, lambda: None)
    yield runner.stop("KILL")
    yield runner.start()
    kept = yield threads.deferToThread(_held, runner.http_port, topic)
    return DeferredReport(count, kept, kill_after)


# -- connection storm --------------------------------------------------------


@dataclass
class StormReport:
    """
    What a connection storm came to: ``connected`` of ``count`` connections
    opened (the magic sent on each) in ``connect_seconds``; ``answered`` of
    them then answered an ``IDENTIFY`` (in ``answer_seconds`` more).
    """

    count: int
    connected: int
    connect_seconds: float
    answered: int
    answer_seconds: float
    failures: List[str] = field(default_factory=list)


_IDENTIFY = b"IDENTIFY\n" + _SIZE.pack(2) + b"{}"
_OK_FRAME = _SIZE.pack(6) + struct.pack(">i", FRAME_TYPE_RESPONSE) + b"OK"


def _storm(host: str, port: int, count: int, timeout: float) -> StormReport:
    """The blocking storm, run in a thread by :func:`connection_storm`."""
    sockets: List[socket.socket] = []
    failures: List[str] = []
    try:
        began = time.monotonic()
        address = (host, port)
        for _ in range(count):
            # A plain blocking connect (no name lookup, no timeout, which
            # would make every connect a non-blocking one and a poll): the
            # client's cost stays far below nsqd's.
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            try:
                sock.connect(address)
                sock.sendall(_MAGIC)
            except OSError as error:
                sock.close()
                failures.append("connect %d: %s" % (len(sockets), error))
                break
            sockets.append(sock)
        connect_seconds = time.monotonic() - began
        for sock in sockets:
            sock.settimeout(timeout)

        began = time.monotonic()
        answered = 0
        for index, sock in enumerate(sockets):
            try:
                sock.sendall(_IDENTIFY)
            except OSError as error:
                failures.append("IDENTIFY %d: %s" % (index, error))
        for index, sock in enumerate(sockets):
            try:
                data = b""
                while len(data) < len(_OK_FRAME):
                    more = sock.recv(len(_OK_FRAME) - len(data))
                    if not more:
                        break
                    data += more
            except OSError as error:
                failures.append("answer %d: %s" % (index, error))
                continue
            if data == _OK_FRAME:
                answered += 1
            elif len(failures) < 20:
                failures.append("answer %d: %r" % (index, data))
        answer_seconds = time.monotonic() - began
    finally:
        for sock in sockets:
            sock.close()
    return StormReport(count, len(sockets), connect_seconds, answered, answer_seconds, failures)


def connection_storm(host: str, port: int, count: int, timeout: float = WAIT) -> "Deferred[StormReport]":
    """
    Open ``count`` connections to nsqd one after another, each with the V2
    magic, and time it; then send ``IDENTIFY`` on every one and read each
    ``OK``; then close them all.  Blocking sockets in a thread: the time
    measured is nsqd's accepting, not a client framework's.
    """
    return threads.deferToThread(_storm, host, port, count, timeout)


# -- fuzzing -----------------------------------------------------------------


@dataclass
class FuzzReport:
    """
    What a fuzz run came to.

    ``hung`` counts fuzz connections nsqd did not close within the bound
    after the client's half-close; ``round_trip_failures`` the control round
    trips (PUB → delivery → FIN) that failed or timed out; ``crashed``
    whether nsqd exited.
    """

    frames: int
    batches: int
    connections: int
    hung: int
    round_trips: int
    round_trip_failures: List[str]
    crashed: bool
    rss_start: int
    rss_peak: int
    rss_end: int
    seconds: float
    answers: Dict[str, int] = field(default_factory=dict)

    @property
    def rss_growth(self) -> float:
        """End RSS over start RSS, minus one."""
        return self.rss_end / float(self.rss_start) - 1.0


class _FuzzConnection(Protocol):
    """
    Writes its bytes, half-closes, and waits for nsqd to close; counts
    nsqd's answers in ``answers`` by kind (``OK``, ``E_INVALID``,
    ``message``, ``JSON``, ...) as long as they parse as frames (after a
    negotiated compression they do not).
    """

    def __init__(self, data: bytes, answers: Dict[str, int]) -> None:
        self.data = data
        self.answers = answers
        self.parser: Optional[FrameParser] = FrameParser()
        self.closed: "Deferred[None]" = Deferred()

    def connectionMade(self) -> None:
        transport: Any = self.transport
        transport.write(self.data)
        transport.loseWriteConnection()

    def dataReceived(self, data: bytes) -> None:
        if self.parser is None:
            return
        try:
            frames = self.parser.feed(data)
        except ValueError:
            self.parser = None
            return
        answers = self.answers
        for frame_type, payload in frames:
            if frame_type == FRAME_TYPE_MESSAGE:
                kind = "message"
            elif payload.startswith(b"{"):
                kind = "JSON"
            else:
                kind = payload.split(b" ", 1)[0][:40].decode("latin-1")
            answers[kind] = answers.get(kind, 0) + 1

    def connectionLost(self, reason: Failure = None) -> None:  # type: ignore[assignment]
        if not self.closed.called:
            self.closed.callback(None)


class ControlClient:
    """
    The fuzz run's control: a producer and a consumer (``RDY 1``) on a
    topic no fuzz frame names.  :meth:`round_trip` publishes one message,
    waits for its delivery, ``FIN``\\s it and waits for nsqd to have handled
    the ``FIN``.
    """

    def __init__(self, reactor: Any, port: int, topic: str = "fuzz_control") -> None:
        self.reactor = reactor
        self.port = port
        self.topic = topic
        self.producer: Optional[NSQClient] = None
        self.consumer: Optional[NSQClient] = None
        self.count = 0

    @inlineCallbacks
    def open(self) -> Generator[Any, Any, None]:
        """Connect and subscribe."""
        self.consumer = yield connect(self.reactor, self.port)
        yield self.consumer.sub(self.topic, "control")
        self.consumer.rdy(1)
        self.producer = yield connect(self.reactor, self.port)

    @inlineCallbacks
    def close(self) -> Generator[Any, Any, None]:
        """Disconnect both."""
        for client in (self.producer, self.consumer):
            if client is not None:
                yield client.close()

    @inlineCallbacks
    def round_trip(self, timeout: float = WAIT) -> Generator[Any, Any, None]:
        """
        One PUB → delivery → FIN; raises if any step fails or times out.

        The delivery may reach the consumer before the ``OK`` reaches the
        producer (nsqd writes both in one turn, consumer first), so the
        messages already there are counted before the ``PUB`` is sent.
        A control message of an earlier, failed round trip (requeued when
        its consumer was replaced, see :func:`_reopen`, and delivered on
        its ``RDY``) may come before or after the ``PUB``: it is finished
        and passed over; any other message is an error.
        """
        producer, consumer = self.producer, self.consumer
        assert producer is not None and consumer is not None
        if producer.lost is not None or consumer.lost is not None:
            raise AssertionError("a control connection was closed")
        self.count += 1
        body = b"control %d" % (self.count,)
        # What came before the PUB: earlier control messages only.
        seen = 0
        for message in consumer.messages:
            if not self._earlier(message.body):
                raise AssertionError("control got %r before PUB %r" % (message.body, body))
            consumer.fin(message.id)
            seen += 1
        response = yield producer.pub(self.topic, body)
        if response != b"OK":
            raise AssertionError("PUB answered %r" % (response,))
        while True:
            arrived = yield consumer.wait_messages(seen + 1, timeout)
            if not arrived:
                raise AssertionError("control message %d never arrived" % (self.count,))
            message = consumer.messages[seen]
            seen += 1
            if message.body == body:
                break
            if not self._earlier(message.body):
                raise AssertionError("control got %r, expected %r" % (message.body, body))
            consumer.fin(message.id)
        consumer.fin(message.id)
        yield consumer.round_trip(timeout)
        consumer.messages[:] = []

    def _earlier(self, body: bytes) -> bool:
        """Whether ``body`` is the control message of an earlier round trip."""
        prefix = b"control "
        number = body[len(prefix) :]
        return body.startswith(prefix) and number.isdigit() and int(number) < self.count


@inlineCallbacks
def run_fuzz(
    reactor: Any,
    runner: NSQDRunner,
    batches: Callable[[], Any],
    frames_wanted: int,
    close_timeout: float = 10.0,
    progress: Optional[Callable[[str], None]] = None,
    warmup_frames: int = 0,
) -> Generator[Any, Any, FuzzReport]:
    """
    Send fuzz batches to the running nsqd until ``frames_wanted`` frames
    have gone out, with a control round trip after every batch.

    ``batches()`` is called for more whenever the batches run out and
    returns a list of batches; a batch is a list of sessions, a session a
    ``(bytes, frame_count)`` pair sent on a fresh connection, which is then
    half-closed.  nsqd's RSS is read before, after every batch and at the end.

    ``warmup_frames``: the starting RSS is read once that many frames have
    gone out (0: before the first), so that memory a runtime takes once
    while it warms up (PyPy's JIT compiling nsqd's paths, its GC sizing its
    heap) is not counted as growth.
    """
    began = time.monotonic()
    pid = runner.pid
    control = ControlClient(reactor, runner.tcp_port)
    yield control.open()
    failures: List[str] = []
    try:
        yield control.round_trip()
    except Exception as error:
        failures.append("first: %s" % (error,))
    rss_start = 0
    if warmup_frames <= 0:
        rss_start = process_rss_bytes(pid) or 0
    rss_peak = rss_start
    frames = sent_batches = connections = hung = 0
    endpoint = TCP4ClientEndpoint(reactor, "127.0.0.1", runner.tcp_port, timeout=close_timeout)
    queue: Deque[Any] = deque()
    answers: Dict[str, int] = {}
    reported = 0
    while frames < frames_wanted and runner.current.collector.status is None:
        if not queue:
            queue.extend(batches())
            if not queue:
                break
        batch = queue.popleft()
        sessions = []
        for data, count in batch:
            frames += count
            connection = _FuzzConnection(data, answers)
            sessions.append(endpoint.connect(Factory.forProtocol(lambda c=connection: c)))
            sessions[-1].addCallback(lambda _, c=connection: c.closed.addTimeout(close_timeout, reactor))
        connections += len(sessions)
        results = yield DeferredList(sessions, consumeErrors=True)
        hung += sum(1 for ok, _ in results if not ok)
        sent_batches += 1
        try:
            yield control.round_trip()
        except Exception as error:
            failures.append("after batch %d: %s" % (sent_batches, error))
            if len(failures) > 10 or runner.current.collector.status is not None:
                break
            control = yield _reopen(control, reactor, runner.tcp_port)
        rss = process_rss_bytes(pid) or 0
        if not rss_start and frames >= warmup_frames:
            rss_start = rss
        rss_peak = max(rss_peak, rss)
        if progress is not None and (frames - reported >= 50000 or failures):
            reported = frames
            progress("fuzz: %d frames, %d batches, RSS %.1f MB" % (frames, sent_batches, rss / 1e6))
    crashed = runner.current.collector.status is not None
    rss_end = process_rss_bytes(pid) or 0
    yield control.close()
    return FuzzReport(
        frames=frames,
        batches=sent_batches,
        connections=connections,
        hung=hung,
        round_trips=control.count,
        round_trip_failures=failures,
        crashed=crashed,
        rss_start=rss_start,
        rss_peak=max(rss_peak, rss_end),
        rss_end=rss_end,
        seconds=time.monotonic() - began,
        answers=answers,
    )


@inlineCallbacks
def _reopen(control: ControlClient, reactor: Any, port: int) -> Generator[Any, Any, ControlClient]:
    """A fresh control client after a failed round trip (the failure is counted)."""
    try:
        yield control.close()
    except Exception:
        pass
    fresh = ControlClient(reactor, port)
    fresh.count = control.count
    yield fresh.open()
    return fresh
