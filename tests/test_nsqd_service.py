"""
Tests for txnsq.nsqd.service: NSQDService embedded in a Twisted application,
listening on 127.0.0.1 port 0.
"""

from __future__ import annotations

import os
import socket
from typing import Any, List

from twisted.application.service import MultiService
from twisted.internet import reactor
from twisted.internet.defer import Deferred, inlineCallbacks
from twisted.internet.task import Clock
from twisted.internet.endpoints import TCP4ClientEndpoint, connectProtocol
from twisted.internet.protocol import Protocol
from twisted.trial.unittest import SynchronousTestCase, TestCase

from txnsq.nsqd.flags import parse_nsqd_args
from txnsq.nsqd.service import NSQDService
from txnsq.protocol.frames import FrameParser
from txnsq.protocol.message import decode_message


class FrameCollector(Protocol):
    """A raw V2 client that collects frames and reports when it closes."""

    def __init__(self) -> None:
        self.parser = FrameParser()
        self.frames: List[Any] = []
        self.closed: Deferred[None] = Deferred()
        self._waiting: List[Any] = []

    def dataReceived(self, data: bytes) -> None:
        self.frames.extend(self.parser.feed(data))
        waiting, self._waiting = self._waiting, []
        for count, waiter in waiting:
            self.wait_for(count).chainDeferred(waiter)

    def wait_for(self, count: int) -> "Deferred[List[Any]]":
        """Fires once ``count`` frames have arrived."""
        waiter: Deferred[List[Any]] = Deferred()
        if len(self.frames) >= count:
            waiter.callback(self.frames[:count])
        else:
            self._waiting.append((count, waiter))
        return waiter

    def connectionLost(self, reason: Any = None) -> None:
        self.closed.callback(None)


class EmbeddedServiceTests(TestCase):
    """NSQDService as one child of an application's service tree."""

    def make_service(self, *args: str) -> NSQDService:
        options = parse_nsqd_args(
            ["--tcp-address=127.0.0.1:0", "--http-address=127.0.0.1:0"] + list(args)
        )
        return NSQDService(options, reactor)

    @inlineCallbacks
    def test_in_process_publish_reaches_tcp_consumer(self) -> Any:
        """A message published through service.broker reaches a TCP subscriber."""
        application = MultiService()
        nsqd = self.make_service()
        nsqd.setServiceParent(application)
        application.startService()
        self.addCleanup(application.stopService)
        yield nsqd.whenListening()
        port = nsqd.bound_ports()["TCP"]
        self.assertNotEqual(port, 0)

        client = FrameCollector()
        yield connectProtocol(TCP4ClientEndpoint(reactor, "127.0.0.1", port), client)
        client.transport.write(b"  V2SUB ticks archive\nRDY 1\n")
        [(frame_type, data)] = yield client.wait_for(1)
        self.assertEqual((frame_type, data), (0, b"OK"))

        nsqd.broker.get_topic("ticks").publish(b"tick")
        frames = yield client.wait_for(2)
        frame_type, payload = frames[1]
        self.assertEqual(frame_type, 2)
        self.assertEqual(decode_message(payload)[3], b"tick")

        yield application.stopService()
        yield client.closed

    @inlineCallbacks
    def test_stop_takes_fins_on_their_way(self) -> Any:
        """stopService delivers nothing more, waits for the FIN of the message in flight, then closes the broker."""
        nsqd = self.make_service("--storage=memory")
        nsqd.startService()
        self.addCleanup(nsqd.stopService)
        yield nsqd.whenListening()
        client = FrameCollector()
        yield connectProtocol(TCP4ClientEndpoint(reactor, "127.0.0.1", nsqd.bound_ports()["TCP"]), client)
        client.transport.write(b"  V2SUB t c\nRDY 1\n")
        yield client.wait_for(1)
        topic = nsqd.broker.get_topic("t")
        topic.publish(b"first")
        topic.publish(b"second")
        frames = yield client.wait_for(2)
        msg_id = decode_message(frames[1][1])[2]
        channel = topic.get_channel("c")
        at_close: List[Any] = []
        close = nsqd.broker.close

        def recording_close() -> None:
            at_close.append((channel.in_flight_count, channel.depth(), channel.requeue_count))
            close()

        nsqd.broker.close = recording_close  # type: ignore[method-assign]
        stopped = nsqd.stopService()
        self.assertFalse(stopped.called)
        client.transport.write(b"FIN %s\n" % (msg_id,))
        yield stopped
        yield client.closed
        self.assertEqual(at_close, [(0, 1, 0)])
        self.assertEqual(len(client.frames), 2)

    @inlineCallbacks
    def test_start_logs_hot_path(self) -> Any:
        """At start nsqd logs one line saying which hot path (compiled or pure Python) is in use."""
        from twisted.logger import formatEvent, globalLogPublisher

        from txnsq.speedups import hot_path

        lines: List[str] = []

        def observe(event: Any) -> None:
            lines.append(formatEvent(event))

        globalLogPublisher.addObserver(observe)
        self.addCleanup(globalLogPublisher.removeObserver, observe)
        nsqd = self.make_service("--storage=memory")
        nsqd.startService()
        self.addCleanup(nsqd.stopService)
        yield nsqd.whenListening()
        self.assertEqual([line for line in lines if line.startswith("hot path: ")], ["hot path: " + hot_path()])

    @inlineCallbacks
    def test_port_in_use_fails(self) -> Any:
        """whenListening fails when the TCP address is taken."""
        taken = socket.socket()
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        self.addCleanup(taken.close)
        nsqd = self.make_service("--tcp-address=127.0.0.1:%d" % (taken.getsockname()[1],))
        nsqd.startService()
        self.addCleanup(nsqd.stopService)
        with self.assertRaises(Exception):
            yield nsqd.whenListening()


class StatsdWiringTests(TestCase):
    """--statsd-address makes nsqd push its stats over UDP."""

    timeout = 30

    @inlineCallbacks
    def test_pushes_with_http_port_prefix(self) -> Any:
        """nsqd pushes Go-named metrics, prefixed with its broadcast address and HTTP port."""
        from twisted.internet.protocol import DatagramProtocol

        from txnsq.testing import start_nsqd

        received: Deferred[bytes] = Deferred()

        class Listener(DatagramProtocol):
            def datagramReceived(self, data: bytes, addr: Any) -> None:
                if b"topic.events.message_count" in data and not received.called:
                    received.callback(data)

        port = reactor.listenUDP(0, Listener(), interface="127.0.0.1")  # type: ignore[attr-defined]
        self.addCleanup(port.stopListening)
        nsqd = yield start_nsqd(
            args=[
                "--statsd-address=127.0.0.1:%d" % (port.getHost().port,),
                "--statsd-interval=200ms",
                "--broadcast-address=nsqd.test",
            ]
        )
        self.addCleanup(nsqd.stop)
        nsqd.broker.get_topic("events").publish(b"hello")
        data = yield received
        prefix = b"nsq.nsqd_test_%d." % (nsqd.http_port,)
        self.assertIn(prefix + b"topic.events.message_count:1|c", data.split(b"\n"))


class LogLevelTests(SynchronousTestCase):
    """PUT /config/log_level changes the console log level at run time."""

    def test_set_log_level(self) -> None:
        """set_log_level changes the level of the console logging predicate."""
        from twisted.logger import LogLevel, LogLevelFilterPredicate

        from txnsq import logging as txnsq_logging

        predicate = LogLevelFilterPredicate(defaultLogLevel=LogLevel.info)
        self.patch(txnsq_logging, "_console_predicate", predicate)
        txnsq_logging.set_log_level("error")
        self.assertEqual(predicate.logLevelForNamespace("txnsq.nsqd"), LogLevel.error)
        self.assertRaises(ValueError, txnsq_logging.set_log_level, "loud")


class MetaqCollector(Protocol):
    """A raw MetaQ client that collects replies and reports when it closes."""

    def __init__(self) -> None:
        from txnsq.protocol.metaq_parser import MetaqResponseParser

        self.parser = MetaqResponseParser()
        self.replies: List[Any] = []
        self.closed: Deferred[None] = Deferred()
        self._waiter: Any = None

    def dataReceived(self, data: bytes) -> None:
        self.replies.extend(self.parser.feed(data))
        waiter, self._waiter = self._waiter, None
        if waiter is not None and self.replies:
            waiter.callback(self.replies.pop(0))
        elif waiter is not None:
            self._waiter = waiter

    def ask(self, line: bytes) -> "Deferred[Any]":
        """Send ``line``; fires with the next reply."""
        waiter: Deferred[Any] = Deferred()
        self._waiter = waiter
        self.transport.write(line)  # type: ignore[union-attr]
        return waiter

    def connectionLost(self, reason: Any = None) -> None:
        self.closed.callback(None)


class MetaqListenerTests(TestCase):
    """--metaq-address: the MetaQ listener beside TCP and HTTP, on 127.0.0.1 port 0."""

    def start(self, *args: str) -> "Deferred[None]":
        options = parse_nsqd_args(
            ["--tcp-address=127.0.0.1:0", "--http-address=127.0.0.1:0", "--https-address=", "--storage=memory"]
            + list(args)
        )
        options.validate()
        self.nsqd = NSQDService.fromOptions(options, reactor)
        self.nsqd.startService()
        self.addCleanup(self.nsqd.stopService)
        return self.nsqd.whenListening()

    def test_off_by_default(self) -> None:
        """Without --metaq-address there is no MetaQ listener."""
        nsqd = NSQDService(parse_nsqd_args(["--storage=memory"]), reactor)
        self.assertIsNone(nsqd.metaq_listener)
        self.assertEqual([listener.label for listener in nsqd.listeners()], ["TCP", "HTTP"])

    @inlineCallbacks
    def test_listens_and_answers(self) -> Any:
        """The listener logs where it listens and answers version."""
        from twisted.logger import globalLogPublisher

        lines: List[str] = []

        def observe(event: Any) -> None:
            from twisted.logger import formatEvent

            lines.append(formatEvent(event))

        globalLogPublisher.addObserver(observe)
        self.addCleanup(globalLogPublisher.removeObserver, observe)
        yield self.start("--metaq-address=127.0.0.1:0")
        port = self.nsqd.bound_ports()["MetaQ"]
        self.assertNotEqual(port, 0)
        self.assertIn("MetaQ: listening on 127.0.0.1:%d" % (port,), lines)
        client = MetaqCollector()
        yield connectProtocol(TCP4ClientEndpoint(reactor, "127.0.0.1", port), client)
        reply = yield client.ask(b"version 1\r\n")
        self.assertEqual((reply.code, reply.opaque), (200, 1))
        self.assertTrue(reply.body.startswith(b"txnsq-"))
        client.transport.write(b"quit\r\n")
        yield client.closed

    @inlineCallbacks
    def test_tls_required(self) -> Any:
        """With --tls-required MetaQ is TLS from the first byte; a plaintext client gets no reply."""
        from twisted.internet.endpoints import wrapClientTLS

        from tests.integration.tls_certs import client_tls_options, write_server_files

        files = write_server_files(self.mktemp())
        yield self.start("--metaq-address=127.0.0.1:0", "--tls-required=true", *files.args())
        port = self.nsqd.bound_ports()["MetaQ"]
        endpoint = TCP4ClientEndpoint(reactor, "127.0.0.1", port)
        client = MetaqCollector()
        yield connectProtocol(wrapClientTLS(client_tls_options(), endpoint), client)
        reply = yield client.ask(b"version 1\r\n")
        self.assertEqual((reply.code, reply.opaque), (200, 1))
        client.transport.loseConnection()
        yield client.closed

        plain = MetaqCollector()
        yield connectProtocol(endpoint, plain)
        plain.transport.write(b"version 1\r\n" * 100)
        yield plain.closed
        self.assertEqual(plain.replies, [])

    @inlineCallbacks
    def test_auth_required(self) -> Any:
        """With --auth-http-address requests before auth are refused with 401."""
        yield self.start("--metaq-address=127.0.0.1:0", "--auth-http-address=127.0.0.1:1")
        client = MetaqCollector()
        yield connectProtocol(TCP4ClientEndpoint(reactor, "127.0.0.1", self.nsqd.bound_ports()["MetaQ"]), client)
        reply = yield client.ask(b"version 1\r\n")
        self.assertEqual((reply.code, reply.opaque), (401, 1))
        reply = yield client.ask(b"get t g 0 0 100 2\r\n")
        self.assertEqual((reply.code, reply.opaque), (401, 2))
        client.transport.loseConnection()
        yield client.closed


class ConstructionTests(SynchronousTestCase):
    """NSQDService's constructor takes objects and does no I/O."""

    def options(self, *args: str) -> Any:
        return parse_nsqd_args(["--tcp-address=127.0.0.1:0", "--http-address=127.0.0.1:0"] + list(args))

    def test_no_io_until_started(self) -> None:
        """
        A data path that does not exist fails nothing at construction; the
        lock and nsqd.dat are taken at privilegedStartService.
        """
        from txnsq.nsqd.data_path_lock import DataPathError

        missing = os.path.abspath(self.mktemp())
        service = NSQDService(self.options("--data-path=" + missing), Clock())
        self.assertFalse(os.path.exists(missing))
        self.assertIsNone(service.metadata)
        self.assertRaises(DataPathError, service.privilegedStartService)

    def test_privileged_start_opens_data(self) -> None:
        """privilegedStartService locks the data path and writes nsqd.dat, before listening."""
        path = os.path.abspath(self.mktemp())
        os.makedirs(path)
        service = NSQDService(self.options("--data-path=" + path), Clock())
        service.privilegedStartService()
        self.addCleanup(service.stopService)
        self.assertIsNotNone(service.metadata)
        self.assertTrue(os.path.exists(os.path.join(path, "nsqd.dat")))
        self.assertFalse(service.running)

    def test_storage_object_or_name(self) -> None:
        """The storage backend may be given as an object or a name, overriding --storage."""
        from txnsq.storage.memory import MemoryStorage

        backend = MemoryStorage()
        by_object = NSQDService(self.options("--storage=disk"), Clock(), storage=backend)
        self.assertIs(by_object.storage, backend)
        by_name = NSQDService(self.options(), Clock(), storage="ephemeral")
        self.assertEqual(by_name.storage.name, "ephemeral")
        self.assertRaises(ValueError, NSQDService, self.options(), Clock(), storage="nosuch")

    def test_tls_files_need_from_options(self) -> None:
        """Options naming TLS files without a tls object point to fromOptions; it reads them."""
        from tests.integration.tls_certs import write_server_files

        directory = self.mktemp()
        os.makedirs(directory)
        options = self.options(*write_server_files(directory).args())
        error = self.assertRaises(ValueError, NSQDService, options, Clock())
        self.assertIn("fromOptions", str(error))
        service = NSQDService.fromOptions(options, Clock())
        self.assertIsNotNone(service.https_listener)

    def test_endpoint_objects(self) -> None:
        """Listeners may be given as IStreamServerEndpoints; they listen only once the service starts."""
        from twisted.internet.testing import MemoryReactorClock

        from tests.endpoint_fakes import RecordingEndpoint

        tcp, http = RecordingEndpoint(4150), RecordingEndpoint(4151)
        reactor = MemoryReactorClock()
        service = NSQDService(
            self.options(), reactor, storage="memory", tcp_endpoint=tcp, http_endpoint=http
        )
        self.assertEqual((tcp.factories, http.factories, reactor.tcpServers), ([], [], []))
        service.startService()
        self.addCleanup(service.stopService)
        self.assertEqual(tcp.factories, [service.tcp_factory])
        self.assertEqual(len(http.factories), 1)
        self.assertEqual(service.bound_ports(), {"TCP": 4150, "HTTP": 4151})
        self.assertEqual(reactor.tcpServers, [])

    def test_endpoint_strings(self) -> None:
        """A listen address string given to the constructor overrides the option's."""
        service = NSQDService(
            self.options(),
            Clock(),
            storage="memory",
            tcp_endpoint="127.0.0.1:4999",
            http_endpoint="unix:/tmp/nsqd-http.sock",
        )
        self.assertEqual(service.tcp_listener.description, "tcp:4999:interface=127.0.0.1")
        self.assertEqual(service.http_listener.description, "unix:/tmp/nsqd-http.sock")
        self.assertRaises(
            ValueError, NSQDService, self.options(), Clock(), storage="memory", tcp_endpoint="nonsense"
        )

    def test_https_endpoint_with_tls(self) -> None:
        """An https_endpoint is served with the tls object, and fromOptions passes endpoints on."""
        from tests.endpoint_fakes import RecordingEndpoint
        from tests.integration.tls_certs import write_server_files

        directory = self.mktemp()
        os.makedirs(directory)
        options = self.options(*write_server_files(directory).args())
        https = RecordingEndpoint(4152)
        service = NSQDService.fromOptions(options, Clock(), storage="memory", https_endpoint=https)
        assert service.https_listener is not None
        self.assertIs(service.https_listener.endpoint, https)
        self.assertIsNone(NSQDService(self.options("--https-address="), Clock(), storage="memory").https_listener)

    def test_metaq_endpoint(self) -> None:
        """A metaq_endpoint serves MetaQ there without --metaq-address; none is served without either."""
        from twisted.internet.testing import MemoryReactorClock

        from tests.endpoint_fakes import RecordingEndpoint
        from txnsq.metaq.server import MetaqFactory

        metaq = RecordingEndpoint(4153)
        service = NSQDService(self.options(), MemoryReactorClock(), storage="memory", metaq_endpoint=metaq)
        assert service.metaq_listener is not None
        self.assertIs(service.metaq_listener.endpoint, metaq)
        service.startService()
        self.addCleanup(service.stopService)
        self.assertEqual(metaq.factories, [service.metaq_factory])
        self.assertIsInstance(service.metaq_factory, MetaqFactory)
        self.assertIsNone(NSQDService(self.options(), Clock(), storage="memory").metaq_listener)

    def test_metaq_mirror_gate(self) -> None:
        """The MetaQ listener's puts wait for the mirror only with --mirror-min-standbys."""
        from tests.endpoint_fakes import RecordingEndpoint

        service = NSQDService(self.options(), Clock(), storage="memory", metaq_endpoint=RecordingEndpoint(4153))
        assert service.metaq_factory is not None
        self.assertIsNone(service.metaq_factory.mirror_gate)
        options = self.options(
            "--cluster-name=c1", "--routes=nats-route://127.0.0.1:1", "--mirror-min-standbys=1"
        )
        options.validate()
        service = NSQDService(options, Clock(), storage="memory", metaq_endpoint=RecordingEndpoint(4153))
        assert service.metaq_factory is not None and service.cluster is not None
        self.assertIsNotNone(service.metaq_factory.mirror_gate)
        self.assertEqual(service.cluster.mirror.min_standbys, 1)

    def test_open_data_early(self) -> None:
        """open_data takes the lock and nsqd.dat before starting, once; a second nsqd on the path is refused."""
        from txnsq.nsqd.data_path_lock import DataPathError

        path = os.path.abspath(self.mktemp())
        os.makedirs(path)
        first = NSQDService(self.options("--data-path=" + path), Clock())
        first.open_data()
        first.open_data()
        self.assertTrue(os.path.exists(os.path.join(path, "nsqd.dat")))
        second = NSQDService(self.options("--data-path=" + path), Clock())
        self.assertRaises(DataPathError, second.open_data)
        self.successResultOf(first.stopService())


class SteadyClockTests(SynchronousTestCase):
    """An embedded NSQDService takes the reactor's clock as it is given."""

    def options(self) -> Any:
        return parse_nsqd_args(["--tcp-address=127.0.0.1:0", "--http-address=127.0.0.1:0"])

    def test_reactor_left_as_is(self) -> None:
        """Embedding a service does not change the application's reactor's clock."""
        from twisted.internet.testing import MemoryReactorClock

        reactor = MemoryReactorClock()
        seconds = reactor.seconds
        NSQDService(self.options(), reactor, storage="memory")
        self.assertEqual(reactor.seconds, seconds)

    def test_timestamps_on_steady_clock(self) -> None:
        """
        On a reactor given a steady clock, a message's timestamp is the wall
        time at the clock's start plus the time elapsed, whatever steps the
        wall clock took.
        """
        from twisted.internet.base import ReactorBase

        from tests.test_reactors import BareReactor, FakeClocks
        from txnsq.protocol.message import message_timestamp
        from txnsq.reactors import install_steady_clock

        clocks = FakeClocks(wall=1700000000.0)
        self.patch(ReactorBase, "seconds", staticmethod(clocks.wall))
        reactor = BareReactor()
        install_steady_clock(reactor, clocks.wall, clocks.monotonic)
        service = NSQDService(self.options(), reactor, storage="memory")  # type: ignore[arg-type]
        topic = service.broker.get_topic("t")
        clocks.step(-600.0)
        clocks.elapse(2.0)
        topic.publish(b"x")
        data = topic._queue.read()
        self.assertEqual(message_timestamp(data), 1700000002 * 10**9)
