# -*- test-case-name: tests.test_testing -*-
"""
Real daemons for tests, inside the test's reactor, with no separate process.

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

An nsqlookupd starts the same way; point an nsqd (or the code under test)
at it::

    lookupd = yield start_nsqlookupd()
    self.addCleanup(lookupd.stop)
    nsqd = yield start_nsqd(["--lookupd-tcp-address=" + lookupd.tcp_address])
"""

from __future__ import annotations

import shutil
import tempfile
from typing import Any, Dict, List, Optional, Sequence

from twisted.internet.defer import Deferred, inlineCallbacks, maybeDeferred
from twisted.python.failure import Failure

from txnsq.nsqd.broker import Broker
from txnsq.nsqd.flags import parse_nsqd_args
from txnsq.nsqd.options import NSQDOptions
from txnsq.nsqd.service import NSQDService
from txnsq.nsqlookupd.core import NSQLookupd
from txnsq.nsqlookupd.options import NSQLookupdOptions, parse_nsqlookupd_args
from txnsq.nsqlookupd.service import NSQLookupdService
from txnsq.testing.memory import apply_overrides

__all__ = ["RunningNSQD", "RunningNSQLookupd", "start_nsqd", "start_nsqlookupd"]


class _RunningDaemon:
    """
    A daemon service running in this process, on ``127.0.0.1``.

    :ivar host: the address it listens on (``127.0.0.1``).
    :ivar tcp_port: the bound port of its TCP protocol.
    :ivar http_port: the bound port of its HTTP API.
    """

    def __init__(self, service: Any, data_path: Optional[str] = None) -> None:
        self.service = service
        self.host = "127.0.0.1"
        ports = service.bound_ports()
        self.tcp_port: int = ports["TCP"]
        self.http_port: int = ports["HTTP"]
        self._data_path = data_path
        self._stopped: Optional[_Outcome] = None

    @property
    def tcp_address(self) -> str:
        """``host:port`` of the TCP listener (clients, nsqd's ``--lookupd-tcp-address``)."""
        return "%s:%d" % (self.host, self.tcp_port)

    @property
    def http_address(self) -> str:
        """``host:port`` of the HTTP listener (a consumer's lookupd address)."""
        return "%s:%d" % (self.host, self.http_port)

    def stop(self) -> "Deferred[None]":
        """
        Stop the service (listeners, clients, state); idempotent.  The
        Deferred fails when the shutdown failed (each call's does).
        """
        if self._stopped is None:
            self._stopped = _Outcome(self.service.stopService())
            if self._data_path is not None:
                path = self._data_path
                self._stopped.wait().addBoth(lambda _: shutil.rmtree(path, ignore_errors=True))
        return self._stopped.wait()


class RunningNSQD(_RunningDaemon):
    """
    An nsqd running in this process: ``host``, ``tcp_port``, ``http_port``,
    ``tcp_address``, ``http_address`` and ``stop()`` (which also removes
    the temporary data path it was given), and:

    :ivar broker: the broker core, to inspect topics and channels.
    :ivar options: the options it runs with.
    """

    def __init__(self, service: NSQDService, data_path: Optional[str]) -> None:
        super().__init__(service, data_path)
        self.broker: Broker = service.broker
        self.options: NSQDOptions = service.options


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
    apply_overrides(options, overrides)
    service = yield _listening(NSQDService.fromOptions(options, reactor))
    return RunningNSQD(service, data_path)


class RunningNSQLookupd(_RunningDaemon):
    """
    An nsqlookupd running in this process: ``host``, ``tcp_port`` (for
    nsqd's ``--lookupd-tcp-address``), ``http_port`` (for consumers),
    ``tcp_address``, ``http_address`` and ``stop()``, and:

    :ivar lookupd: its state (``NSQLookupd``), to inspect registrations
        (``lookupd.db``).
    :ivar options: the options it runs with.
    """

    def __init__(self, service: NSQLookupdService) -> None:
        super().__init__(service)
        self.lookupd: NSQLookupd = service.lookupd
        self.options: NSQLookupdOptions = service.options


@inlineCallbacks
def _listening(service: Any) -> Any:
    """Start ``service``; fires with it once it listens (stopped again if it cannot)."""
    service.startService()
    try:
        yield service.whenListening()
    except BaseException:
        yield service.stopService()
        raise
    return service


class _Outcome:
    """
    The outcome of one shutdown, handed to every caller of ``stop()``: a
    new Deferred each, firing ``None`` or failing with the shutdown's
    failure.  The outcome itself is kept, not left in a Deferred, so a
    failure is reported to the callers and never again as unhandled.
    """

    def __init__(self, stopping: Any) -> None:
        self._done = False
        self._failure: Optional[Failure] = None
        self._waiting: List["Deferred[None]"] = []
        maybeDeferred(lambda: stopping).addBoth(self._finished)

    def _finished(self, result: Any) -> None:
        self._done = True
        self._failure = result if isinstance(result, Failure) else None
        waiting, self._waiting = self._waiting, []
        for waiter in waiting:
            self._fire(waiter)

    def _fire(self, waiter: "Deferred[None]") -> None:
        if self._failure is None:
            waiter.callback(None)
        else:
            waiter.errback(self._failure)

    def wait(self) -> "Deferred[None]":
        """A Deferred of the outcome."""
        waiter: "Deferred[None]" = Deferred()
        if self._done:
            self._fire(waiter)
        else:
            self._waiting.append(waiter)
        return waiter


@inlineCallbacks
def start_nsqlookupd(
    args: Sequence[str] = (), reactor: Optional[Any] = None, **overrides: Any
) -> Any:
    """
    Start an nsqlookupd in this process; a Deferred firing with
    :class:`RunningNSQLookupd`.

    :param args: Go-style nsqlookupd flags (``["--tombstone-lifetime=1s"]``).
    :param reactor: the reactor to run in; the global one when omitted.
    :param overrides: ``NSQLookupdOptions`` attributes set after the flags.

    Unless given, it listens on ``127.0.0.1:0`` for TCP and HTTP.
    """
    # The last occurrence of a flag wins, so ``args`` can override these.
    options = parse_nsqlookupd_args(
        ["--tcp-address=127.0.0.1:0", "--http-address=127.0.0.1:0"] + list(args)
    )
    apply_overrides(options, overrides)
    service = yield _listening(NSQLookupdService(options, reactor))
    return RunningNSQLookupd(service)
