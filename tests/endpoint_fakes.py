"""
A server endpoint for tests of the services' embedding API: it listens
nowhere, records the factories it is asked to serve and answers with a
port on a made-up address.
"""

from __future__ import annotations

from typing import Any, List

from twisted.internet.address import IPv4Address
from twisted.internet.defer import Deferred, succeed
from twisted.internet.interfaces import IListeningPort, IStreamServerEndpoint
from zope.interface import implementer


@implementer(IListeningPort)
class FakePort:
    """A listening port on 127.0.0.1:``port`` that stops at once."""

    def __init__(self, port: int) -> None:
        self.address = IPv4Address("TCP", "127.0.0.1", port)
        self.listening = True

    def startListening(self) -> None:
        self.listening = True

    def stopListening(self) -> "Deferred[None]":
        self.listening = False
        return succeed(None)

    def getHost(self) -> IPv4Address:
        return self.address


@implementer(IStreamServerEndpoint)
class RecordingEndpoint:
    """
    An ``IStreamServerEndpoint`` that records what it serves.

    :ivar factories: the factories :meth:`listen` was called with.
    :ivar ports: the ports it answered with.
    """

    def __init__(self, port: int) -> None:
        self.port = port
        self.factories: List[Any] = []
        self.ports: List[FakePort] = []

    def listen(self, protocolFactory: Any) -> "Deferred[FakePort]":
        self.factories.append(protocolFactory)
        port = FakePort(self.port)
        self.ports.append(port)
        return succeed(port)
