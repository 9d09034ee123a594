# -*- test-case-name: tests.test_testing -*-
"""
Helpers for testing code that uses NSQ, under trial, with no separate process.

Start a real nsqd inside the test's reactor, on ``127.0.0.1`` with
kernel-chosen ports and memory storage::

    from txnsq.testing import start_nsqd

    class MyTests(TestCase):
        @inlineCallbacks
        def setUp(self):
            self.nsqd = yield start_nsqd()
            self.addCleanup(self.nsqd.stop)

        @inlineCallbacks
        def test_handler(self):
            ...connect to ("127.0.0.1", self.nsqd.tcp_port)...
            topic = self.nsqd.broker.find_topic("events")
            self.assertEqual(topic.depth(), 0)
"""

from __future__ import annotations

import shutil
import tempfile
from typing import Any, Optional, Sequence

from twisted.internet.defer import Deferred, inlineCallbacks

from txnsq.nsqd.broker import Broker
from txnsq.nsqd.options import NSQDOptions, parse_nsqd_args
from txnsq.nsqd.service import NSQDService

__all__ = ["RunningNSQD", "start_nsqd"]


class RunningNSQD:
    """
    An nsqd running in this process.

    :ivar host: the address it listens on (``127.0.0.1``).
    :ivar tcp_port: the bound port of the V2 TCP protocol.
    :ivar http_port: the bound port of the HTTP API.
    :ivar broker: the broker core, to inspect topics and channels.
    :ivar options: the options it runs with.
    """

    def __init__(self, service: NSQDService, data_path: Optional[str]) -> None:
        self.service = service
        self.host = "127.0.0.1"
        ports = service.bound_ports()
        self.tcp_port = ports["TCP"]
        self.http_port = ports["HTTP"]
        self.broker: Broker = service.broker
        self.options: NSQDOptions = service.options
        self._data_path = data_path
        self._stopped: Optional[Deferred[None]] = None

    @property
    def tcp_address(self) -> str:
        """``host:port`` of the TCP listener, as clients are configured."""
        return "%s:%d" % (self.host, self.tcp_port)

    @property
    def http_address(self) -> str:
        """``host:port`` of the HTTP listener."""
        return "%s:%d" % (self.host, self.http_port)

    def stop(self) -> "Deferred[None]":
        """Stop listening, disconnect clients, close the broker; idempotent."""
        if self._stopped is None:
            self._stopped = self.service.stopService()

            def cleanup(result: object) -> object:
                if self._data_path is not None:
                    shutil.rmtree(self._data_path, ignore_errors=True)
                return result

            self._stopped.addBoth(cleanup)
        stopped: Deferred[None] = Deferred()

        def chain(result: object) -> object:
            stopped.callback(None)
            return result

        self._stopped.addBoth(chain)
        return stopped


@inlineCallbacks
def start_nsqd(
    args: Sequence[str] = (), reactor: Optional[Any] = None, **overrides: Any
) -> Any:
    """
    Start an nsqd in this process; a Deferred firing with :class:`RunningNSQD`.

    :param args: Go-style nsqd flags (``["--max-msg-size=100"]``).
    :param reactor: the reactor to run in; the global one when omitted.
    :param overrides: ``NSQDOptions`` attributes set after the flags.

    Unless given, it listens on ``127.0.0.1:0`` for TCP and HTTP, stores
    messages in memory (``--storage=disk`` for nsqd's default) and uses a
    fresh temporary data path that is removed when it stops.
    """
    # The last occurrence of a flag wins, so ``args`` can override these.
    options = parse_nsqd_args(
        ["--tcp-address=127.0.0.1:0", "--http-address=127.0.0.1:0", "--storage=memory"]
        + list(args)
    )
    data_path: Optional[str] = None
    if not options.data_path and "data_path" not in overrides:
        data_path = tempfile.mkdtemp(prefix="txnsq-nsqd-")
        options.data_path = data_path
    for name, value in overrides.items():
        if not hasattr(options, name):
            raise TypeError("NSQDOptions has no option %r" % (name,))
        setattr(options, name, value)
    options.validate()
    service = NSQDService(options, reactor)
    service.startService()
    try:
        yield service.whenListening()
    except BaseException:
        yield service.stopService()
        raise
    return RunningNSQD(service, data_path)
