"""
A :class:`~txnsq.cluster.node.RouteNode` on a Clock whose dials are held
until the test completes them over a StringTransport, and a fake peer
server speaking the route protocol through it.
"""

from __future__ import annotations

from typing import Any, Dict, List, Optional, Tuple

from twisted.internet.defer import Deferred
from twisted.internet.error import ConnectionRefusedError
from twisted.internet.task import Clock
from twisted.internet.testing import StringTransport
from twisted.python.failure import Failure

from txnsq.cluster.node import RouteNode
from txnsq.cluster.route import RouteProtocol
from txnsq.protocol.nats_route import RouteOp, RouteParser, encode_info


class FakeDials:
    """The node's ``connect``: each dial waits in :attr:`pending`."""

    def __init__(self) -> None:
        self.pending: List[Tuple[str, int, Any, Deferred[Any]]] = []

    def __call__(self, host: str, port: int, dialer: Any) -> "Deferred[Any]":
        waiting: Deferred[Any] = Deferred()
        self.pending.append((host, port, dialer, waiting))
        return waiting

    def refuse(self) -> None:
        """Fail the oldest dial."""
        _, _, _, waiting = self.pending.pop(0)
        waiting.errback(Failure(ConnectionRefusedError()))

    def accept(self, node: RouteNode) -> Tuple[RouteProtocol, StringTransport]:
        """Complete the oldest dial: a connected protocol and its transport."""
        _, _, dialer, waiting = self.pending.pop(0)
        protocol = node.build_protocol(dialer)
        transport = StringTransport()
        protocol.makeConnection(transport)
        waiting.callback(protocol)
        return protocol, transport


def make_node(cluster: str = "c1", **kwargs: Any) -> Tuple[RouteNode, Clock, FakeDials]:
    """A node advertising 127.0.0.1:7000, on a Clock, with held dials."""
    clock = Clock()
    dials = FakeDials()
    node = RouteNode(clock, cluster, dials, advertise=("127.0.0.1", 7000), **kwargs)
    return node, clock, dials


def server_info(server_id: str, port: int = 6222, **extra: Any) -> bytes:
    """An INFO as a nats-server sends it."""
    fields: Dict[str, Any] = {
        "server_id": server_id,
        "server_name": server_id,
        "version": "2.10.26",
        "host": "127.0.0.1",
        "port": port,
        "headers": True,
        "cluster": "c1",
    }
    fields.update(extra)
    return encode_info(fields)


def written(transport: StringTransport, parser: Optional[RouteParser] = None) -> List[RouteOp]:
    """What the node wrote so far (and clear it), parsed."""
    data = transport.value()
    transport.clear()
    return (parser or RouteParser(0)).feed(data)


def dialed_route(node: RouteNode, dials: FakeDials, server_id: str, port: int = 6222) -> Tuple[RouteProtocol, StringTransport]:
    """Complete the oldest dial as a server ``server_id``; the route is up."""
    protocol, transport = dials.accept(node)
    protocol.dataReceived(server_info(server_id, port))
    return protocol, transport
