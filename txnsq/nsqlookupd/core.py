# -*- test-case-name: tests.test_nsqlookupd_core -*-
"""
One nsqlookupd's shared state: its settings, its registration database, its
clock and the ports it is bound to.  The TCP and HTTP adapters both work on
an :class:`NSQLookupd`; it does no I/O.
"""

from __future__ import annotations

import socket
from typing import Any, List

from txnsq.version import NSQ_VERSION
from txnsq.nsqlookupd.options import NSQLookupdOptions
from txnsq.nsqlookupd.registration_db import Producer, RegistrationDB, active

__all__ = ["NSQLookupd"]


class NSQLookupd:
    """
    :ivar options: the daemon's settings.
    :ivar clock: where time comes from (``IReactorTime``: the reactor, or a
        ``task.Clock`` in tests); registration times are its ``seconds()``.
    :ivar db: the registrations.
    :ivar tcp_port: the bound TCP port (0 until listening).
    :ivar http_port: the bound HTTP port (0 until listening).
    :ivar hostname: the OS host name, reported in IDENTIFY replies.
    :ivar version: the version reported in IDENTIFY replies and ``/info``.
    """

    def __init__(self, options: NSQLookupdOptions, clock: Any) -> None:
        self.options = options
        self.clock = clock
        self.db = RegistrationDB()
        self.tcp_port = 0
        self.http_port = 0
        self.hostname = socket.gethostname()
        self.version = NSQ_VERSION

    def now(self) -> float:
        """The current time in seconds."""
        return float(self.clock.seconds())

    def active(self, producers: List[Producer]) -> List[Producer]:
        """
        The producers heard from within ``--inactive-producer-timeout`` and
        not tombstoned within ``--tombstone-lifetime``.
        """
        return active(
            producers,
            self.options.inactive_producer_timeout,
            self.options.tombstone_lifetime,
            self.now(),
        )
