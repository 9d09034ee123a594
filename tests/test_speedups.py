"""Tests for txnsq.speedups: loading the compiled modules and saying which path runs."""

from __future__ import annotations

import os
import platform
import struct
import sys
from contextlib import contextmanager
from typing import Any, Callable, Dict, Iterator, List, Optional, Tuple

from hypothesis import given, settings
from hypothesis import strategies as st
from zope.interface import Interface
from twisted.internet.address import IPv4Address
from twisted.internet.task import Clock
from twisted.internet.testing import StringTransport
from twisted.trial.unittest import SynchronousTestCase

from txnsq import speedups
from txnsq.nsqd import channel, commands, tcp, topic
from txnsq.nsqd.broker import Broker
from txnsq.nsqd.options import NSQDOptions
from txnsq.nsqd.tcp import NSQDFactory
from txnsq.protocol import message, v2
from txnsq.protocol.frames import FrameParser
from txnsq.storage import disk, diskqueue_format
from txnsq.storage.disk import DiskStorage
from txnsq.storage.memory import MemoryStorage

_ON_CPYTHON = platform.python_implementation() == "CPython"


@contextmanager
def _replaced(replacements: List[Tuple[Any, str, Any]]) -> Iterator[None]:
    """Each ``(module, name, value)`` set until the block ends, then put back."""
    saved = [(module, name, getattr(module, name)) for module, name, _ in replacements]
    for module, name, value in replacements:
        setattr(module, name, value)
    try:
        yield
    finally:
        for module, name, value in saved:
            setattr(module, name, value)


class _Environment:
    """Sets or clears TXNSQ_NO_EXTENSIONS for one test."""

    def __init__(self, case: SynchronousTestCase, value: Optional[str]) -> None:
        saved = os.environ.get(speedups.ENVIRONMENT_VARIABLE)
        if value is None:
            os.environ.pop(speedups.ENVIRONMENT_VARIABLE, None)
        else:
            os.environ[speedups.ENVIRONMENT_VARIABLE] = value

        def restore() -> None:
            if saved is None:
                os.environ.pop(speedups.ENVIRONMENT_VARIABLE, None)
            else:
                os.environ[speedups.ENVIRONMENT_VARIABLE] = saved

        case.addCleanup(restore)


class LoadTests(SynchronousTestCase):
    """load() imports a compiled module, or gives None."""

    def test_missing(self) -> None:
        """A module that is not built is None, not an error."""
        self.assertIsNone(speedups.load("txnsq.protocol._no_such_module"))

    def test_disabled(self) -> None:
        """TXNSQ_NO_EXTENSIONS=1 gives None even for a module that imports."""
        _Environment(self, "1")
        self.assertIsNone(speedups.load("txnsq.storage.log_format"))
        self.assertTrue(speedups.disabled())

    def test_empty_is_not_set(self) -> None:
        """An empty TXNSQ_NO_EXTENSIONS does not disable anything."""
        _Environment(self, "")
        self.assertFalse(speedups.disabled())
        self.assertIsNotNone(speedups.load("txnsq.storage.log_format"))


class HotPathTests(SynchronousTestCase):
    """hot_path() and hot_path_token() say which path runs."""

    def test_disabled(self) -> None:
        """With TXNSQ_NO_EXTENSIONS set, the pure Python runs and the line says why."""
        _Environment(self, "1")
        self.assertEqual(speedups.hot_path_token(), "pure")
        if _ON_CPYTHON:
            self.assertEqual(speedups.hot_path(), "pure Python (TXNSQ_NO_EXTENSIONS is set)")

    def test_current(self) -> None:
        """On CPython with the modules built, every compiled module is named; elsewhere pure Python."""
        _Environment(self, None)
        if not _ON_CPYTHON:
            self.assertEqual(speedups.hot_path_token(), "pure")
            self.assertTrue(speedups.hot_path().startswith("pure Python (PyPy"))
            return
        built: Dict[str, bool] = {name: speedups.load(name) is not None for name in speedups.COMPILED_MODULES.values()}
        if all(built.values()):
            self.assertEqual(speedups.hot_path_token(), "compiled")
            self.assertEqual(
                speedups.hot_path(), "compiled (%s)" % (", ".join(speedups.COMPILED_MODULES.values()),)
            )
        else:
            self.assertIn(speedups.hot_path_token(), ("pure", "partly-compiled"))

    def test_none_built(self) -> None:
        """When no compiled module imports, the line says they are not built."""
        if not _ON_CPYTHON:
            self.skipTest("PyPy never builds them")
        _Environment(self, None)
        saved = dict(speedups._loaded)
        self.addCleanup(speedups._loaded.update, saved)
        for name in speedups.COMPILED_MODULES.values():
            speedups._loaded[name] = None
        self.assertEqual(speedups.hot_path(), "pure Python (the compiled modules are not built)")
        self.assertEqual(speedups.hot_path_token(), "pure")

    def test_modules_exist(self) -> None:
        """Each pure module named in COMPILED_MODULES imports and has its compiled flag."""
        for pure in speedups.COMPILED_MODULES:
            __import__(pure)
            self.assertTrue(hasattr(sys.modules[pure], "compiled"), pure)


# ---------------------------------------------------------------------------
# Whole sessions through nsqd's adapter and core, on both paths

_TOPICS = [b"t", b"t", b"t", b"t", b"u", b"u", b"bad topic"]


@st.composite
def _session(draw: Callable[..., Any]) -> List[Tuple[Any, ...]]:
    """What a publisher and a consumer do, one step at a time."""
    steps: List[Tuple[Any, ...]] = []
    for _ in range(draw(st.integers(1, 30))):
        kind = draw(st.sampled_from(["pub", "pub", "mpub", "mpub", "rdy", "fin", "fin", "fin", "req", "touch", "advance", "advance", "junk"]))
        cut = draw(st.integers(0, 400))
        if kind in ("pub", "mpub"):
            bodies = draw(st.lists(st.binary(min_size=0, max_size=60), min_size=1, max_size=6 if kind == "mpub" else 1))
            steps.append((kind, draw(st.sampled_from(_TOPICS)), bodies, cut))
        elif kind == "rdy":
            steps.append((kind, draw(st.integers(0, 8)), cut))
        elif kind in ("fin", "touch"):
            steps.append((kind, draw(st.lists(st.integers(0, 40), min_size=1, max_size=5)), cut))
        elif kind == "req":
            steps.append((kind, draw(st.integers(0, 40)), draw(st.integers(0, 3000)), cut))
        elif kind == "advance":
            steps.append((kind, draw(st.sampled_from([0.0, 0.5, 30.0, 61.0]))))
        else:
            steps.append((kind, draw(st.binary(max_size=12)), cut))
    return steps


def _frame_ids(data: bytes) -> List[bytes]:
    """The message ids of the message frames in ``data``."""
    ids = []
    for frame_type, payload in FrameParser().feed(data):
        if frame_type == 2:
            ids.append(payload[10:26])
    return ids


class _InlineDiskStorage(DiskStorage):
    """The disk backend with every sync on the reactor thread (no sync thread in a test)."""

    def sync_worker(self) -> Any:
        return None


def _play(steps: List[Tuple[Any, ...]], data_path: Optional[str] = None) -> List[Any]:
    """
    Run a session against a fresh broker; everything written, step by
    step, and the end state.  With ``data_path``, the broker's storage is
    the disk backend there, with two messages a queue in memory.
    """
    clock = Clock()
    clock.advance(1700000000)
    options = NSQDOptions()
    options.node_id = 7
    if data_path is None:
        broker = Broker(options, clock, MemoryStorage())
    else:
        os.makedirs(data_path)
        options.data_path = data_path
        options.mem_queue_size = 2
        broker = Broker(options, clock, _InlineDiskStorage())
    factory = NSQDFactory(broker, clock)
    connections = []
    for port in (40001, 40002):
        transport = StringTransport(peerAddress=IPv4Address("TCP", "127.0.0.1", port))
        protocol = factory.buildProtocol(transport.getPeer())
        protocol.makeConnection(transport)
        protocol.dataReceived(b"  V2")
        connections.append((protocol, transport))
    (publisher, pub_out), (consumer, sub_out) = connections
    consumer.dataReceived(b"SUB t c\n")
    received: List[bytes] = []
    record: List[Any] = []

    def send(protocol: Any, data: bytes, cut: int) -> None:
        point = cut % (len(data) + 1)
        protocol.dataReceived(data[:point])
        protocol.dataReceived(data[point:])

    def message_id(index: int) -> bytes:
        return received[index % len(received)] if received else b"0123456789abcdef"

    for step in steps:
        kind = step[0]
        if kind == "pub":
            _, topic, bodies, cut = step
            send(publisher, b"PUB " + topic + b"\n" + struct.pack(">i", len(bodies[0])) + bodies[0], cut)
        elif kind == "mpub":
            _, topic, bodies, cut = step
            payload = struct.pack(">i", len(bodies)) + b"".join(struct.pack(">i", len(body)) + body for body in bodies)
            send(publisher, b"MPUB " + topic + b"\n" + struct.pack(">i", len(payload)) + payload, cut)
        elif kind == "rdy":
            send(consumer, b"RDY %d\n" % (step[1],), step[2])
        elif kind in ("fin", "touch"):
            verb = b"FIN " if kind == "fin" else b"TOUCH "
            send(consumer, b"".join(verb + message_id(index) + b"\n" for index in step[1]), step[2])
        elif kind == "req":
            send(consumer, b"REQ " + message_id(step[1]) + b" %d\n" % (step[2],), step[3])
        elif kind == "advance":
            clock.advance(step[1])
        else:
            send(consumer, step[1] + b"\n", step[2])
        clock.advance(0)
        written = (pub_out.value(), sub_out.value())
        pub_out.clear()
        sub_out.clear()
        received.extend(_frame_ids(written[1]))
        record.append((step, written, bool(pub_out.disconnecting), bool(sub_out.disconnecting)))
    channel = broker.get_topic("t").get_channel("c")
    record.append((channel.depth(), channel.in_flight_count, channel.requeue_count, channel.message_count))
    if data_path is not None:
        broker.close()
        record.append(sorted(os.listdir(data_path)))
    return record


class SessionTests(SynchronousTestCase):
    """The same sessions through nsqd's V2 adapter on the compiled and the pure path."""

    def setUp(self) -> None:
        if v2.compiled is None or message.compiled is None:
            self.skipTest("the compiled modules are not built here")

    @contextmanager
    def pure(self) -> Iterator[None]:
        """The pure Python in every place nsqd took a compiled function from, until the block ends."""
        replacements = [
            (commands, "V2CommandParser", v2.PureV2CommandParser),
            (topic, "encode_message", message.pure_encode_message),
            (channel, "with_attempts", message.pure_with_attempts),
            (channel, "_COMPILED_WITH_ATTEMPTS", None),
            (tcp, "_compiled_message_frame", None),
        ]
        with _replaced(replacements):
            yield

    @settings(max_examples=150, deadline=None)
    @given(_session())
    def test_same_bytes(self, steps: List[Tuple[Any, ...]]) -> None:
        """Any session writes the same bytes to both clients, step by step, and leaves the same channel."""
        self.assertIsNot(commands.V2CommandParser, v2.PureV2CommandParser)
        compiled = _play(steps)
        with self.pure():
            pure = _play(steps)
        self.assertEqual(compiled, pure)

    def test_patch_reaches_the_adapter(self) -> None:
        """The pure run does use the pure parser, and the compiled one is back after it."""
        clock = Clock()
        factory = NSQDFactory(Broker(NSQDOptions(), clock, MemoryStorage()), clock)
        for expected in (v2.PureV2CommandParser, v2.CompiledV2CommandParser):
            if expected is v2.PureV2CommandParser:
                with self.pure():
                    protocol = factory.buildProtocol(IPv4Address("TCP", "127.0.0.1", 1))
            else:
                protocol = factory.buildProtocol(IPv4Address("TCP", "127.0.0.1", 1))
            protocol.makeConnection(StringTransport())
            self.assertIs(type(protocol._commands.parser), expected)


class _NoQueueTakesRuns(Interface):
    """Provided by nothing: with it in place of ``IBatchQueue`` every message is put alone."""


class DiskSessionTests(SynchronousTestCase):
    """
    The same sessions with the disk backend spilling (two messages a queue
    in memory): the compiled record framing with MPUBs put into the queues
    as runs (``put_many``), and the pure framing with every message put
    alone, as before runs existed.
    """

    def setUp(self) -> None:
        if diskqueue_format.compiled is None:
            self.skipTest("the compiled record framing is not built here")

    @contextmanager
    def one_by_one(self) -> Iterator[None]:
        """Pure framing, and no queue taking runs, until the block ends."""
        replacements = [
            (disk, "append_record", diskqueue_format.pure_append_record),
            (disk, "append_records", diskqueue_format.pure_append_records),
            (disk, "split_records", diskqueue_format.pure_split_records),
            (channel, "IBatchQueue", _NoQueueTakesRuns),
            (topic, "IBatchQueue", _NoQueueTakesRuns),
        ]
        with _replaced(replacements):
            yield

    @settings(max_examples=100, deadline=None)
    @given(_session())
    def test_same_bytes(self, steps: List[Tuple[Any, ...]]) -> None:
        """
        Any session writes the same bytes to both clients, step by step,
        and leaves the same channel and the same files.
        """
        runs = _play(steps, self.mktemp())
        with self.one_by_one():
            one_by_one = _play(steps, self.mktemp())
        self.assertEqual(runs, one_by_one)

    def test_runs_are_taken(self) -> None:
        """With the disk backend a channel and a topic put an MPUB's messages as one run."""
        clock = Clock()
        options = NSQDOptions()
        options.data_path = self.mktemp()
        os.makedirs(options.data_path)
        options.mem_queue_size = 0
        broker = Broker(options, clock, _InlineDiskStorage())
        self.addCleanup(broker.close)
        lone = broker.get_topic("lone")
        self.assertEqual(lone._put_many, lone._queue.put_many)
        with_channel = broker.get_topic("t")
        self.assertEqual(with_channel.get_channel("c")._put_many, with_channel.get_channel("c")._queue.put_many)
        with self.one_by_one():
            self.assertIsNone(broker.get_topic("other").get_channel("c")._put_many)
